"""Records for the shape and layout ops (reshape, transpose, ..., space_to_depth); oracles in NumPy."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import shape as sh
from opgraph.ops import space_depth

from .opinfo import ErrorCase, OpInfo, Sample, rand

DTYPES: tuple[Any, ...] = (np.float32, np.int32, np.bool_, torch.bfloat16, np.float64, np.int8)


def _ph(g: og.Graph, shape: tuple[int | None, ...], dtype: Any = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


def _err(build: Any, error: type[og.OpgraphError], match: str, desc: str) -> ErrorCase:
    return ErrorCase(build, error, match, desc)


def _dtype_samples(rng: np.random.Generator, shape: tuple[int, ...], kwargs: dict[str, Any]) -> list[Sample]:
    return [Sample([rand(rng, shape, dt)], dict(kwargs), f"{getattr(dt, '__name__', str(dt))}") for dt in DTYPES]


# ---- reshape ---------------------------------------------------------------------------------
def _reshape_samples(rng: np.random.Generator) -> list[Sample]:
    return _dtype_samples(rng, (2, 3, 4), {"shape": (4, -1)}) + [
        Sample([rand(rng, (6,), np.int64)], {"shape": (2, 3)}, "to-static"),
        Sample([rand(rng, (2, 6), np.float32)], {"shape": (-1,)}, "to-1d"),
        Sample([rand(rng, (0, 3), np.float32)], {"shape": (3, 0)}, "empty"),
        Sample([rand(rng, (), np.float32)], {"shape": (1, 1)}, "scalar-to-2d"),
        Sample([rand(rng, (1, 1), np.float32)], {"shape": ()}, "to-scalar"),
    ]


RESHAPE_ERRORS = [
    _err(lambda g: g.reshape(_ph(g, (2, 3)), (4,)), og.ShapeError, "cannot reshape", "bad-size"),
    _err(lambda g: g.reshape(_ph(g, (2, 3)), (4, -1)), og.ShapeError, "cannot reshape", "bad-infer"),
    _err(lambda g: g.reshape(_ph(g, (None, 3)), (4,)), og.ShapeError, "cannot reshape", "bad-size-dynamic"),
    _err(lambda g: g.reshape(_ph(g, (2, 3)), (-1, -1)), og.AttributeValueError, "more than one -1", "two-infer"),
    _err(lambda g: g.reshape(_ph(g, (2, 3)), (-2, -3)), og.AttributeValueError, ">= -1", "negative"),
    _err(lambda g: g.reshape(_ph(g, (2, 3)), (2.0, 3)), og.AttributeValueError, "ints", "float-dim"),
]


# ---- transpose -------------------------------------------------------------------------------
def _transpose_samples(rng: np.random.Generator) -> list[Sample]:
    return _dtype_samples(rng, (2, 3, 4), {"perm": (1, 2, 0)}) + [
        Sample([rand(rng, (2, 3, 4, 5), np.float32)], {"perm": None}, "reverse-default"),
        Sample([rand(rng, (2, 3), np.float32)], {"perm": (-1, 0)}, "negative"),
        Sample([rand(rng, (0, 3), np.float32)], {"perm": (1, 0)}, "empty"),
    ]


TRANSPOSE_ERRORS = [
    _err(lambda g: g.transpose(_ph(g, (2, 3)), (0, 0)), og.ShapeError, "not a permutation", "repeat"),
    _err(lambda g: g.transpose(_ph(g, (2, 3)), (0, 1, 2)), og.ShapeError, "out of range", "too-long"),
    _err(lambda g: g.transpose(_ph(g, (2, 3, 4)), (0, 1)), og.ShapeError, "not a permutation", "too-short"),
]


# ---- expand_dims / squeeze -------------------------------------------------------------------
def _expand_samples(rng: np.random.Generator) -> list[Sample]:
    return _dtype_samples(rng, (2, 3), {"axes": (0, -1)}) + [
        Sample([rand(rng, (2, 3), np.float32)], {"axis": 1}, "axis"),
        Sample([rand(rng, (), np.float32)], {"axis": 0}, "scalar"),
        Sample([rand(rng, (2,), np.int32)], {"axes": (3, 0, 1)}, "several"),
    ]


def _expand_oracle(x: np.ndarray, axis: Any = None, axes: Any = None) -> np.ndarray:
    return np.expand_dims(x, axes if axes is not None else axis)


EXPAND_ERRORS = [
    _err(lambda g: g.expand_dims(_ph(g, (2, 3)), 3), og.ShapeError, "out of range", "bad-axis"),
    _err(lambda g: g.expand_dims(_ph(g, (2, 3)), axes=(0, 0)), og.ShapeError, "repeat", "repeat"),
    _err(lambda g: g.expand_dims(_ph(g, (2, 3))), og.AttributeValueError, "give axis", "no-axis"),
    _err(lambda g: g.expand_dims(_ph(g, (2, 3)), 0, axes=(1,)), og.AttributeValueError, "not both", "both"),
]


def _squeeze_samples(rng: np.random.Generator) -> list[Sample]:
    return _dtype_samples(rng, (1, 3, 1, 2), {"axes": (0, -2)}) + [
        Sample([rand(rng, (3, 1), np.float32)], {"axis": 1}, "axis"),
        Sample([rand(rng, (1,), np.float32)], {"axis": 0}, "to-scalar"),
        Sample([rand(rng, (2, 3), np.float32)], {"axes": ()}, "nothing"),
    ]


def _squeeze_oracle(x: np.ndarray, axis: Any = None, axes: Any = None) -> np.ndarray:
    chosen = axes if axes is not None else axis
    return np.squeeze(x, tuple(np.atleast_1d(chosen)) if chosen is not None else None)


SQUEEZE_ERRORS = [
    _err(lambda g: g.squeeze(_ph(g, (1, 3)), 1), og.ShapeError, "cannot squeeze axis 1 of size 3", "not-one"),
    _err(lambda g: g.squeeze(_ph(g, (1, 3)), 2), og.ShapeError, "out of range", "bad-axis"),
    _err(lambda g: g.squeeze(_ph(g, (1, 1)), axes=(0, -2)), og.ShapeError, "repeat", "repeat"),
]


# ---- flatten2d -------------------------------------------------------------------------------
def _flatten_samples(rng: np.random.Generator) -> list[Sample]:
    return _dtype_samples(rng, (2, 3, 4), {"axis": 1}) + [
        Sample([rand(rng, (2, 3, 4), np.float32)], {"axis": a}, f"axis{a}") for a in (0, 2, 3, -1)
    ] + [Sample([rand(rng, (2, 0, 4), np.float32)], {"axis": 2}, "empty")]


def _flatten_oracle(x: np.ndarray, axis: int = 1) -> np.ndarray:
    axis = axis % x.ndim if axis < 0 else axis
    return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))


# ---- split -----------------------------------------------------------------------------------
def _split_samples(rng: np.random.Generator) -> list[Sample]:
    return _dtype_samples(rng, (6, 4), {"num_splits": 3}) + [
        Sample([rand(rng, (4, 6), np.float32)], {"num_splits": 2, "axis": -1}, "last-axis"),
        Sample([rand(rng, (6, 4), np.float32)], {"split_sizes": (1, 0, 5)}, "sizes"),
        Sample([rand(rng, (2, 7), np.int64)], {"split_sizes": (3, 4), "axis": 1}, "sizes-axis1"),
        Sample([rand(rng, (3, 2), np.float32)], {"num_splits": 1}, "one"),
        Sample([rand(rng, (3, 2), np.float32)], {"split_sizes": (3,)}, "one-size"),
    ]


def _split_oracle(x: np.ndarray, num_splits: int | None = None, split_sizes: Any = None,
                  axis: int = 0) -> list[np.ndarray]:
    if num_splits is not None:
        return np.split(x, num_splits, axis=axis)
    return np.split(x, np.cumsum(split_sizes)[:-1], axis=axis)


SPLIT_ERRORS = [
    _err(lambda g: g.split(_ph(g, (5, 2)), 2), og.ShapeError, "equal parts", "not-divisible"),
    _err(lambda g: g.split(_ph(g, (5, 2)), split_sizes=(2, 2)), og.ShapeError, "sum to 4", "bad-sum"),
    _err(lambda g: g.split(_ph(g, (5, 2)), split_sizes=(6, -1)), og.AttributeValueError, ">= 0", "negative"),
    _err(lambda g: g.split(_ph(g, (4, 2)), 2, (2, 2)), og.AttributeValueError, "exactly one", "both"),
    _err(lambda g: g.split(_ph(g, (4, 2))), og.AttributeValueError, "exactly one", "neither"),
    _err(lambda g: g.split(_ph(g, (4, 2)), 0), og.AttributeValueError, ">= 1", "zero-splits"),
    _err(lambda g: g.split(_ph(g, (4, 2)), 2, axis=2), og.ShapeError, "out of range", "bad-axis"),
]


# ---- stack / concat --------------------------------------------------------------------------
def _join_samples(shapes: list[tuple[int, ...]], axis: int) -> Any:
    def samples(rng: np.random.Generator) -> list[Sample]:
        out = [Sample([rand(rng, s, dt) for s in shapes], {"axis": axis}, f"{getattr(dt, '__name__', str(dt))}")
               for dt in DTYPES]
        out.append(Sample([rand(rng, shapes[0], np.float32)], {"axis": axis}, "single"))
        out.append(Sample([rand(rng, shapes[0], np.float32)] * 2, {"axis": -1}, "last-axis"))
        return out

    return samples


STACK_ERRORS = [
    _err(lambda g: g.stack([_ph(g, (2, 3)), _ph(g, (2, 4))]), og.ShapeError, "differ", "shapes"),
    _err(lambda g: g.stack([_ph(g, (2, 3)), _ph(g, (2, 3), og.int32)]), og.DTypeError, "one dtype", "dtypes"),
    _err(lambda g: g.stack([_ph(g, (2, 3))], axis=3), og.ShapeError, "out of range", "bad-axis"),
    _err(lambda g: g.stack([]), og.ShapeError, "non-empty", "empty"),
]
CONCAT_ERRORS = [
    _err(lambda g: g.concat([_ph(g, (2, 3)), _ph(g, (2, 3, 1))], 0), og.ShapeError, "one rank", "ranks"),
    _err(lambda g: g.concat([_ph(g, (2, 3)), _ph(g, (2, 3), og.float16)]), og.DTypeError, "one dtype", "dtypes"),
    _err(lambda g: g.concat([_ph(g, (2, 3)), _ph(g, (3, 3))], 1), og.ShapeError, "axis 0", "other-dim"),
    _err(lambda g: g.concat([_ph(g, (2, 3))], 2), og.ShapeError, "out of range", "bad-axis"),
    _err(lambda g: g.concat([_ph(g, ())]), og.ShapeError, "rank-0", "scalars"),
]


# ---- broadcast_to / tile / shape_of ----------------------------------------------------------
def _broadcast_samples(rng: np.random.Generator) -> list[Sample]:
    return _dtype_samples(rng, (3, 1), {"shape": (2, 3, 4)}) + [
        Sample([rand(rng, (), np.float32)], {"shape": (2, 2)}, "scalar"),
        Sample([rand(rng, (1, 4), np.float32)], {"shape": (0, 4)}, "to-empty"),
        Sample([rand(rng, (2, 3), np.float32)], {"shape": (2, 3)}, "same"),
    ]


BROADCAST_ERRORS = [
    _err(lambda g: g.broadcast_to(_ph(g, (3,)), (4,)), og.ShapeError, "cannot broadcast", "bad-dim"),
    _err(lambda g: g.broadcast_to(_ph(g, (2, 3)), (3,)), og.ShapeError, "shorter", "rank"),
    _err(lambda g: g.broadcast_to(_ph(g, (3,)), (-1, 3)), og.AttributeValueError, ">= 0", "negative"),
]


def _tile_samples(rng: np.random.Generator) -> list[Sample]:
    return _dtype_samples(rng, (2, 3), {"multiples": (2, 3)}) + [
        Sample([rand(rng, (2, 3), np.float32)], {"multiples": (1, 0)}, "zero"),
        Sample([rand(rng, (), np.float32)], {"multiples": ()}, "scalar"),
    ]


TILE_ERRORS = [
    _err(lambda g: g.tile(_ph(g, (2, 3)), (2,)), og.ShapeError, "one entry per axis", "length"),
    _err(lambda g: g.tile(_ph(g, (2,)), (-1,)), og.AttributeValueError, ">= 0", "negative"),
]


def _shape_of_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, s, dt)], desc=f"{len(s)}d") for s, dt in
            (((2, 3, 4), np.float32), ((5,), np.int32), ((), np.float32), ((0, 2), np.bool_))]


# ---- reshape_like / split_like (shapes from reference tensors) ---------------------------------
def _reshape_like_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample([rand(rng, (2, 3, 4)), rand(rng, (4, 6))], desc="f32"),
        Sample([rand(rng, (2, 6), np.float64), rand(rng, (3, 2, 2), np.int32)], desc="f64-int-ref"),
        Sample([rand(rng, (6,), np.int32), rand(rng, (2, 3), np.bool_)], desc="i32"),
        Sample([rand(rng, (0, 3)), rand(rng, (3, 0))], desc="empty"),
        Sample([rand(rng, ()), rand(rng, (1, 1))], desc="scalar"),
    ]


def _split_like_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample([rand(rng, (6, 4)), rand(rng, (1, 4)), rand(rng, (0, 4)), rand(rng, (5, 4))], {"axis": 0}, "f32"),
        Sample([rand(rng, (3, 2), np.float64), rand(rng, (3, 5), np.int32)], {"axis": 0}, "f64-one"),
        Sample([rand(rng, (2, 7), np.int64), rand(rng, (2, 3), np.int64), rand(rng, (9, 4), np.float16)],
               {"axis": -1}, "i64-last-axis"),
    ]


def _split_like_oracle(x: np.ndarray, *refs: np.ndarray, axis: int) -> list[np.ndarray]:
    return np.split(x, np.cumsum([r.shape[axis] for r in refs])[:-1], axis=axis)


SPLIT_LIKE_ERRORS = [
    _err(lambda g: g.split_like(_ph(g, (5, 2)), [_ph(g, (2, 2)), _ph(g, (2, 2))]), og.ShapeError, "do not sum",
         "bad-sum"),
    _err(lambda g: g.split_like(_ph(g, (5, 2)), [_ph(g, (5,))]), og.ShapeError, "rank", "rank"),
    _err(lambda g: g.split_like(_ph(g, (5, 2)), []), og.ShapeError, "non-empty", "no-refs"),
    _err(lambda g: g.split_like(_ph(g, (5, 2)), [_ph(g, (5, 2))], axis=2), og.ShapeError, "out of range",
         "bad-axis"),
]


# ---- space_to_depth / depth_to_space ---------------------------------------------------------
def _layout_samples(shape_nchw: tuple[int, int, int, int], b: int) -> Any:
    def samples(rng: np.random.Generator) -> list[Sample]:
        n, c, h, w = shape_nchw
        out = []
        for layout in ("NCHW", "NHWC"):
            shape = shape_nchw if layout == "NCHW" else (n, h, w, c)
            for shuffle in (False, True):
                out.append(Sample([rand(rng, shape, np.float32)],
                                  {"block_size": b, "data_layout": layout, "pixel_shuffle": shuffle},
                                  f"{layout}-{'shuffle' if shuffle else 'dcr'}"))
        out.append(Sample([rand(rng, shape_nchw, np.int32)], {"block_size": b}, "i32"))
        out.append(Sample([rand(rng, shape_nchw, np.bool_)], {"block_size": 1}, "bool-b1"))
        return out

    return samples


def _depth_channel(ch: int, dy: int, dx: int, c: int, b: int, shuffle: bool) -> int:
    return ch * b * b + dy * b + dx if shuffle else (dy * b + dx) * c + ch


def _s2d_oracle(x: np.ndarray, block_size: int, data_layout: str = "NCHW", pixel_shuffle: bool = False) -> Any:
    x = x.transpose(0, 3, 1, 2) if data_layout == "NHWC" else x
    n, c, h, w = x.shape
    b = block_size
    out = np.zeros((n, c * b * b, h // b, w // b), x.dtype)
    for dy in range(b):
        for dx in range(b):
            for ch in range(c):
                out[:, _depth_channel(ch, dy, dx, c, b, pixel_shuffle)] = x[:, ch, dy::b, dx::b]
    return out.transpose(0, 2, 3, 1) if data_layout == "NHWC" else out


def _d2s_oracle(x: np.ndarray, block_size: int, data_layout: str = "NCHW", pixel_shuffle: bool = False) -> Any:
    x = x.transpose(0, 3, 1, 2) if data_layout == "NHWC" else x
    n, cb, h, w = x.shape
    b = block_size
    c = cb // (b * b)
    out = np.zeros((n, c, h * b, w * b), x.dtype)
    for dy in range(b):
        for dx in range(b):
            for ch in range(c):
                out[:, ch, dy::b, dx::b] = x[:, _depth_channel(ch, dy, dx, c, b, pixel_shuffle)]
    return out.transpose(0, 2, 3, 1) if data_layout == "NHWC" else out


S2D_ERRORS = [
    _err(lambda g: g.space_to_depth(_ph(g, (1, 3, 5, 4)), 2), og.ShapeError, "height 5", "not-divisible"),
    _err(lambda g: g.space_to_depth(_ph(g, (3, 4, 4)), 2), og.ShapeError, "rank-4", "rank"),
    _err(lambda g: g.space_to_depth(_ph(g, (1, 3, 4, 4)), 2, "HWCN"), og.AttributeValueError, "data layout",
         "bad-layout"),
    _err(lambda g: g.space_to_depth(_ph(g, (1, 3, 4, 4)), 2, "NCDHW"), og.AttributeValueError, "NCHW or NHWC",
         "3d-layout"),
    _err(lambda g: g.space_to_depth(_ph(g, (1, 3, 4, 4)), 0), og.AttributeValueError, ">= 1", "block-0"),
]
D2S_ERRORS = [
    _err(lambda g: g.depth_to_space(_ph(g, (1, 6, 2, 2)), 2), og.ShapeError, "block_size\\*\\*2", "depth"),
    _err(lambda g: g.depth_to_space(_ph(g, (1, 2, 2, 6)), 2, "NHWC"), og.ShapeError, "not divisible", "depth-nhwc"),
]


RECORDS = [
    OpInfo("reshape", (sh.RESHAPE,), lambda g, x, shape: g.reshape(x, shape), _reshape_samples,
           lambda x, shape: x.reshape(shape), errors=RESHAPE_ERRORS),
    OpInfo("transpose", (sh.TRANSPOSE,), lambda g, x, perm: g.transpose(x, perm), _transpose_samples,
           lambda x, perm: np.transpose(x, perm), errors=TRANSPOSE_ERRORS),
    OpInfo("expand_dims", (sh.EXPAND_DIMS,), lambda g, x, **kw: g.expand_dims(x, **kw), _expand_samples,
           _expand_oracle, errors=EXPAND_ERRORS),
    OpInfo("squeeze", (sh.SQUEEZE,), lambda g, x, **kw: g.squeeze(x, **kw), _squeeze_samples, _squeeze_oracle,
           errors=SQUEEZE_ERRORS),
    # squeezing every size-1 axis depends on which dims are static, so no all-dynamic rebuild here
    OpInfo("squeeze_all", (sh.SQUEEZE,), lambda g, x: g.squeeze(x),
           lambda rng: [Sample([rand(rng, (1, 3, 1, 2), dt)], desc=str(dt)) for dt in (np.float32, np.bool_)]
           + [Sample([rand(rng, (1, 1), np.float32)], desc="to-scalar")],
           np.squeeze, dynamic=False),
    OpInfo("flatten2d", (sh.FLATTEN2D,), lambda g, x, axis: g.flatten(x, axis), _flatten_samples, _flatten_oracle,
           errors=[_err(lambda g: g.flatten(_ph(g, (2, 3)), 3), og.ShapeError, "out of range", "bad-axis")]),
    OpInfo("split", (sh.SPLIT,), lambda g, x, **kw: g.split(x, **kw), _split_samples, _split_oracle,
           errors=SPLIT_ERRORS, grad_samples=lambda rng: _split_samples(rng)[-5:-3]),
    OpInfo("stack", (sh.STACK,), lambda g, *xs, axis: g.stack(list(xs), axis), _join_samples([(2, 3)] * 3, 1),
           lambda *xs, axis: np.stack(xs, axis), errors=STACK_ERRORS),
    OpInfo("concat", (sh.CONCAT,), lambda g, *xs, axis: g.concat(list(xs), axis),
           _join_samples([(2, 3), (2, 1), (2, 0), (2, 4)], 1), lambda *xs, axis: np.concatenate(xs, axis),
           errors=CONCAT_ERRORS),
    OpInfo("broadcast_to", (sh.BROADCAST_TO,), lambda g, x, shape: g.broadcast_to(x, shape), _broadcast_samples,
           lambda x, shape: np.broadcast_to(x, shape), errors=BROADCAST_ERRORS),
    OpInfo("tile", (sh.TILE,), lambda g, x, multiples: g.tile(x, multiples), _tile_samples,
           lambda x, multiples: np.tile(x, multiples), errors=TILE_ERRORS),
    OpInfo("reshape_like", (sh.RESHAPE_LIKE,), lambda g, x, ref: g.reshape_like(x, ref), _reshape_like_samples,
           lambda x, ref: x.reshape(ref.shape),
           errors=[_err(lambda g: g.reshape_like(_ph(g, (2, 3)), _ph(g, (4,))), og.ShapeError, "cannot reshape",
                        "bad-size")]),
    OpInfo("split_like", (sh.SPLIT_LIKE,), lambda g, x, *refs, axis: g.split_like(x, list(refs), axis),
           _split_like_samples, _split_like_oracle, errors=SPLIT_LIKE_ERRORS),
    OpInfo("shape_of", (sh.SHAPE_OF,), lambda g, x: g.shape_of(x), _shape_of_samples,
           lambda x: np.array(x.shape, np.int32)),
    OpInfo("space_to_depth", (space_depth.SPACE_TO_DEPTH,), lambda g, x, **kw: g.space_to_depth(x, **kw),
           _layout_samples((2, 3, 4, 6), 2), _s2d_oracle, errors=S2D_ERRORS),
    OpInfo("depth_to_space", (space_depth.DEPTH_TO_SPACE,), lambda g, x, **kw: g.depth_to_space(x, **kw),
           _layout_samples((2, 12, 2, 3), 2), _d2s_oracle, errors=D2S_ERRORS),
]
