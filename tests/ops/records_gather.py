"""Records for gather/scatter, one_hot, coordinate_along_axis and band_part.

The oracles are plain NumPy loops written from the TF / MPSGraph definitions (negative indices wrap).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import gather as ga
from opgraph.ops.gather import ScatterMode

from .opinfo import ErrorCase, OpInfo, Sample, rand

MODES = tuple(ScatterMode)


# ---- helpers -------------------------------------------------------------------------------------
def _idx(rng: np.random.Generator, shape: Sequence[int], dim: int, dtype: Any = np.int32) -> np.ndarray:
    """Indices in [0, dim), about a third of them written in their negative form."""
    i = rng.integers(0, dim, tuple(shape)) if dim else np.zeros(tuple(shape), np.int64)
    return np.where(rng.random(tuple(shape)) < 0.3, i - dim, i).astype(dtype)


def _wrap(i: Any, dim: int) -> int:
    i = int(i)
    assert -dim <= i < dim, "samples only hold in-range indices"
    return i + dim if i < 0 else i


def _np_dtype(dt: og.DType) -> np.dtype:
    return torch.empty(0, dtype=dt.torch_dtype).numpy().dtype


def _combine(mode: ScatterMode, old: Any, u: Any) -> Any:
    if mode is ScatterMode.SET:
        return u
    if mode is ScatterMode.ADD:
        return old + u
    if mode is ScatterMode.SUB:
        return old - u
    if mode is ScatterMode.MUL:
        return old * u
    if mode is ScatterMode.DIV:
        if np.asarray(old).dtype.kind in "iu":  # truncating integer division
            q = abs(int(old)) // abs(int(u))
            return q if (int(old) >= 0) == (int(u) > 0) else -q
        return old / u
    if mode is ScatterMode.MIN:
        return min(old, u)
    return max(old, u)


def _updates(rng: np.random.Generator, shape: Sequence[int], dtype: Any, mode: ScatterMode) -> np.ndarray:
    if dtype == np.bool_:
        return rand(rng, shape, np.bool_)  # type: ignore[return-value]
    if mode in (ScatterMode.MUL, ScatterMode.DIV):  # nonzero, modest magnitudes
        mag = rand(rng, shape, dtype, 1, 4) if np.dtype(dtype).kind in "iu" else rand(rng, shape, dtype, 0.5, 2)
        return np.where(rng.random(tuple(shape)) < 0.5, -mag, mag).astype(dtype)
    return rand(rng, shape, dtype, -9, 9)  # type: ignore[return-value]


def _distinct(rng: np.random.Generator, n: int, dim: int, dtype: Any = np.int32) -> np.ndarray:
    i = rng.permutation(dim)[:n]
    return np.where(rng.random(n) < 0.3, i - dim, i).astype(dtype)


# ---- oracles -------------------------------------------------------------------------------------
def np_gather(x: np.ndarray, idx: np.ndarray, axis: int = 0, batch_dims: int = 0) -> np.ndarray:
    b, q = batch_dims, idx.ndim - batch_dims
    out = np.empty(x.shape[:axis] + idx.shape[b:] + x.shape[axis + 1:], x.dtype)
    for pos in np.ndindex(*out.shape):
        pre, mid, post = pos[:axis], pos[axis:axis + q], pos[axis + q:]
        out[pos] = x[pre + (_wrap(idx[pre[:b] + mid], x.shape[axis]),) + post]
    return out


def np_gather_nd(x: np.ndarray, idx: np.ndarray, batch_dims: int = 0) -> np.ndarray:
    b, k = batch_dims, idx.shape[-1]
    q = idx.ndim - b - 1
    out = np.empty(x.shape[:b] + idx.shape[b:-1] + x.shape[b + k:], x.dtype)
    for pos in np.ndindex(*out.shape):
        vec = idx[pos[:b + q]]
        point = tuple(_wrap(v, x.shape[b + j]) for j, v in enumerate(vec))
        out[pos] = x[pos[:b] + point + pos[b + q:]]
    return out


def np_gather_along_axis(x: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    wrapped = np.where(idx < 0, idx + x.shape[axis], idx)
    return np.take_along_axis(x, wrapped, axis)


def np_scatter(data: np.ndarray, upd: np.ndarray, idx: np.ndarray, axis: int = 0,
               mode: ScatterMode = ScatterMode.ADD) -> np.ndarray:
    res = data.copy()
    for pos in np.ndindex(*upd.shape):
        t = pos[:axis] + (_wrap(idx[pos[axis]], data.shape[axis]),) + pos[axis + 1:]
        res[t] = _combine(mode, res[t], upd[pos])
    return res


def np_scatter_nd(data: np.ndarray, upd: np.ndarray, idx: np.ndarray, mode: ScatterMode = ScatterMode.ADD,
                  batch_dims: int = 0) -> np.ndarray:
    b, q = batch_dims, idx.ndim - batch_dims - 1
    res = data.copy()
    for pos in np.ndindex(*upd.shape):
        vec = idx[pos[:b + q]]
        t = pos[:b] + tuple(_wrap(v, data.shape[b + j]) for j, v in enumerate(vec)) + pos[b + q:]
        res[t] = _combine(mode, res[t], upd[pos])
    return res


def np_scatter_along_axis(data: np.ndarray, upd: np.ndarray, idx: np.ndarray, axis: int,
                          mode: ScatterMode = ScatterMode.ADD) -> np.ndarray:
    res = data.copy()
    for pos in np.ndindex(*upd.shape):
        t = pos[:axis] + (_wrap(idx[pos], data.shape[axis]),) + pos[axis + 1:]
        res[t] = _combine(mode, res[t], upd[pos])
    return res


def np_one_hot(idx: np.ndarray, depth: int, axis: int = -1, on_value: Any = 1, off_value: Any = 0,
               dtype: og.DType = og.float32) -> np.ndarray:
    ax = axis % (idx.ndim + 1)
    out = np.full(idx.shape[:ax] + (depth,) + idx.shape[ax:], off_value, _np_dtype(dtype))
    for pos in np.ndindex(*idx.shape):
        v = int(idx[pos])
        if 0 <= v < depth:  # out-of-range indices leave the whole fibre at off_value
            out[pos[:ax] + (v,) + pos[ax:]] = on_value
    return out


def np_coordinate(axis: int, shape: tuple[int, ...], dtype: og.DType = og.int32) -> np.ndarray:
    out = np.empty(shape, _np_dtype(dtype))
    for pos in np.ndindex(*shape):
        out[pos] = pos[axis]
    return out


def np_band_part(x: np.ndarray, num_lower: int, num_upper: int) -> np.ndarray:
    out = np.zeros_like(x)
    for pos in np.ndindex(*x.shape):
        i, j = pos[-2:]
        if (num_lower < 0 or i - j <= num_lower) and (num_upper < 0 or j - i <= num_upper):
            out[pos] = x[pos]
    return out


# ---- samples -------------------------------------------------------------------------------------
def _gather_samples(rng: np.random.Generator) -> list[Sample]:
    def s(x: Any, idx_shape: Sequence[int], axis: int, b: int, dt: Any, desc: str) -> Sample:
        return Sample([x, _idx(rng, idx_shape, x.shape[axis], dt)], {"axis": axis, "batch_dims": b}, desc)

    return [
        s(rand(rng, (5, 4)), (3,), 0, 0, np.int32, "f32-axis0"),
        s(rand(rng, (3, 4, 5), np.int64, -50, 50), (2, 2), 1, 0, np.int64, "i64-2d-indices"),
        s(rand(rng, (2, 3, 4), np.float16), (2, 5), 2, 1, np.int32, "f16-batch1"),
        s(rand(rng, (2, 3, 4, 5), np.float64), (2, 3, 6), 2, 2, np.int64, "f64-batch2"),
        s(rand(rng, (2, 3, 4), np.int32, -9, 9), (2, 2, 2), 1, 1, np.int16, "i32-batch1-axis1"),
        s(rand(rng, (4, 3), np.bool_), (), 0, 0, np.int32, "bool-scalar-index"),
        s(rand(rng, (4, 3)), (0,), 1, 0, np.int32, "empty-indices"),
    ]


def _gather_nd_samples(rng: np.random.Generator) -> list[Sample]:
    def s(x: Any, idx_shape: Sequence[int], b: int, dt: Any, desc: str) -> Sample:
        k = idx_shape[-1]
        cols = [_idx(rng, idx_shape[:-1], x.shape[b + j], dt) for j in range(k)]
        idx = np.stack(cols, -1) if k else np.zeros(tuple(idx_shape), dt)
        return Sample([x, idx], {"batch_dims": b}, desc)

    return [
        s(rand(rng, (4, 5, 6)), (3, 2), 0, np.int32, "f32-k2"),
        s(rand(rng, (4, 5), np.int64, -50, 50), (2, 3, 2), 0, np.int64, "i64-full-depth"),
        s(rand(rng, (2, 4, 5), np.float64), (2, 3, 1), 1, np.int32, "f64-batch1"),
        s(rand(rng, (2, 3, 4, 5), np.int32, -9, 9), (2, 3, 2, 1), 2, np.int64, "i32-batch2"),
        s(rand(rng, (2, 3), np.float16), (4, 0), 0, np.int32, "depth0"),
        s(rand(rng, (3,)), (1,), 0, np.int32, "scalar-result"),
    ]


def _gather_along_axis_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample([rand(rng, (3, 4)), _idx(rng, (3, 6), 4, np.int64)], {"axis": 1}, "f32-axis1"),
        Sample([rand(rng, (2, 3, 4), np.int32, -9, 9), _idx(rng, (5, 3, 4), 2)], {"axis": 0}, "i32-axis0"),
        Sample([rand(rng, (2, 3, 4), torch.bfloat16), _idx(rng, (2, 3, 2), 4)], {"axis": -1}, "bf16-neg-axis"),
    ]


def _scatter_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for mode in MODES:
        n0 = 3
        idx0 = _distinct(rng, n0, 5) if mode is ScatterMode.SET else _idx(rng, (n0,), 5)
        out.append(Sample([rand(rng, (5, 4)), _updates(rng, (n0, 4), np.float32, mode), idx0],
                          {"axis": 0, "mode": mode}, f"f32-{mode.name}"))
        n1 = 4  # duplicates likely for the combining modes
        idx1 = _distinct(rng, n1, 6, np.int64) if mode is ScatterMode.SET else _idx(rng, (n1,), 6, np.int64)
        out.append(Sample([rand(rng, (3, 6), np.int32, -40, 40), _updates(rng, (3, n1), np.int32, mode), idx1],
                          {"axis": 1, "mode": mode}, f"i32-axis1-{mode.name}"))
    out.append(Sample([rand(rng, (4, 2), np.bool_), rand(rng, (2, 2), np.bool_), _distinct(rng, 2, 4)],
                      {"axis": 0, "mode": ScatterMode.SET}, "bool-SET"))
    out.append(Sample([rand(rng, (2, 5, 3), np.float16), rand(rng, (2, 6, 3), np.float16), _idx(rng, (6,), 5)],
                      {"axis": -2, "mode": ScatterMode.ADD}, "f16-ADD-neg-axis"))
    return out


def _nd_indices(rng: np.random.Generator, batch: Sequence[int], q: Sequence[int], dims: Sequence[int],
                distinct: bool, dtype: Any = np.int32) -> np.ndarray:
    """Index vectors into ``dims`` of shape batch + q + (len(dims),); distinct within each batch if asked."""
    n, total = int(np.prod(q)), int(np.prod(dims))
    rows = []
    for _ in range(int(np.prod(batch))):
        lin = rng.permutation(total)[:n] if distinct else rng.integers(0, total, n)
        vec = np.stack(np.unravel_index(lin, tuple(dims)), -1)
        rows.append(np.where(rng.random(vec.shape) < 0.3, vec - np.asarray(dims), vec))
    return np.stack(rows).reshape(tuple(batch) + tuple(q) + (len(dims),)).astype(dtype)


def _scatter_nd_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for mode in MODES:
        d = mode is ScatterMode.SET
        out.append(Sample([rand(rng, (4, 5, 3)), _updates(rng, (6, 3), np.float32, mode),
                           _nd_indices(rng, (), (6,), (4, 5), d)], {"mode": mode, "batch_dims": 0}, f"f32-{mode.name}"))
        out.append(Sample([rand(rng, (2, 7, 5), np.int64, -40, 40), _updates(rng, (2, 3, 2, 5), np.int64, mode),
                           _nd_indices(rng, (2,), (3, 2), (7,), d, np.int64)], {"mode": mode, "batch_dims": 1},
                          f"i64-batch1-{mode.name}"))
    out.append(Sample([rand(rng, (3, 4), np.int32, -9, 9), rand(rng, (5,), np.int32, -9, 9),
                       _nd_indices(rng, (), (5,), (3, 4), False)], {"mode": ScatterMode.ADD, "batch_dims": 0},
                      "i32-full-depth"))
    out.append(Sample([rand(rng, (3, 2), np.bool_), rand(rng, (2, 2), np.bool_),
                       _nd_indices(rng, (), (2,), (3,), True)], {"mode": ScatterMode.SET, "batch_dims": 0},
                      "bool-SET"))
    return out


def _along_indices(rng: np.random.Generator, shape: Sequence[int], dim: int, axis: int, distinct: bool,
                   dtype: Any = np.int32) -> np.ndarray:
    if not distinct:
        return _idx(rng, shape, dim, dtype)
    full = list(shape)
    full[axis] = dim
    perm = np.argsort(rng.random(full), axis=axis)  # distinct along axis in every fibre
    i = np.take(perm, np.arange(shape[axis]), axis=axis)
    return np.where(rng.random(i.shape) < 0.3, i - dim, i).astype(dtype)


def _scatter_along_axis_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for mode in MODES:
        d = mode is ScatterMode.SET
        out.append(Sample([rand(rng, (4, 5)), _updates(rng, (3, 5), np.float32, mode),
                           _along_indices(rng, (3, 5), 4, 0, d)], {"axis": 0, "mode": mode}, f"f32-{mode.name}"))
        out.append(Sample([rand(rng, (2, 3, 6), np.int32, -40, 40), _updates(rng, (2, 3, 4), np.int32, mode),
                           _along_indices(rng, (2, 3, 4), 6, 2, d, np.int64)], {"axis": -1, "mode": mode},
                          f"i32-axis-1-{mode.name}"))
    return out


def _one_hot_samples(rng: np.random.Generator) -> list[Sample]:
    bad = np.array([[0, 4, -1], [5, 7, 2]], np.int32)  # -1, 5, 7 are out of range: all off_value
    return [
        Sample([rand(rng, (3, 4), np.int32, 0, 5)], {"depth": 5}, "f32-default"),
        Sample([bad], {"depth": 5, "axis": 0, "on_value": 3, "off_value": -1, "dtype": og.int32}, "i32-axis0-oob"),
        Sample([rand(rng, (4,), np.int64, 0, 3)], {"depth": 3, "axis": 1, "dtype": og.bool_}, "bool"),
        Sample([rand(rng, (2, 3), np.int32, 0, 4)], {"depth": 4, "axis": 1, "on_value": 0.5, "off_value": -0.25,
                                                     "dtype": og.float16}, "f16-middle-axis"),
        Sample([rand(rng, (3,), np.int32, 0, 2)], {"depth": 0}, "depth0"),
    ]


def _coordinate_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample([], {"axis": 1, "shape": (2, 3, 4)}, "i32-axis1"),
        Sample([], {"axis": -1, "shape": (3, 5), "dtype": og.float32}, "f32-neg-axis"),
        Sample([], {"axis": 0, "shape": (4,), "dtype": og.int64}, "i64-1d"),
        Sample([], {"axis": 0, "shape": (0, 3)}, "empty"),
    ]


def _band_part_samples(rng: np.random.Generator) -> list[Sample]:
    out = [Sample([rand(rng, (4, 5))], {"num_lower": lo, "num_upper": up}, f"f32-{lo}-{up}")
           for lo, up in ((1, 2), (-1, 0), (0, -1), (-1, -1), (2, 0), (0, 0))]
    out.append(Sample([rand(rng, (2, 3, 4, 4), np.int32, -9, 9)], {"num_lower": 1, "num_upper": 1}, "i32-batched"))
    out.append(Sample([rand(rng, (5, 3), np.bool_)], {"num_lower": 0, "num_upper": -1}, "bool-upper"))
    return out


# ---- gradient samples ----------------------------------------------------------------------------
# A tuple of modes builds one output per mode. Distinct indices for SET (its winner is unspecified); the
# duplicate-index sample has zero updates (one and two on a position, for MUL) and no ties for MIN/MAX.
SMOOTH_DUPLICATE_MODES = (ScatterMode.ADD, ScatterMode.SUB, ScatterMode.MUL, ScatterMode.MIN, ScatterMode.MAX)
DUP_COLUMNS = np.array([1, -5, 1, 4])  # three updates per row land on column 1 of 6
DUP_UPDATES = np.array([[0.0, 1.3, 0.9, -0.6], [0.0, -1.5, 0.0, 1.1], [0.8, -1.2, 1.6, 0.4]])


def _dup_data(rng: np.random.Generator) -> np.ndarray:
    data = rng.uniform(-2, 2, (3, 6))
    data[:, 1] = (-0.8, 1.7, 0.3)  # away from the updates on column 1, so MIN/MAX have no ties
    return data


def _scatter(op: Any) -> Any:
    def build(g: og.Graph, d: og.Tensor, u: og.Tensor, i: og.Tensor, mode: Any, **kw: Any) -> Any:
        return [op(g, d, u, i, mode=m, **kw) for m in mode] if isinstance(mode, tuple) else op(g, d, u, i, mode=mode,
                                                                                              **kw)
    return build


def _scatter_grad_samples(rng: np.random.Generator) -> list[Sample]:
    upd = _updates(rng, (3, 4), np.float64, ScatterMode.MUL)  # nonzero, for DIV
    return [Sample([rand(rng, (5, 4), np.float64), upd, _distinct(rng, 3, 5)], {"axis": 0, "mode": MODES},
                   "distinct-all-modes"),
            Sample([_dup_data(rng), DUP_UPDATES, DUP_COLUMNS], {"axis": 1, "mode": SMOOTH_DUPLICATE_MODES},
                   "duplicates-zero-updates")]


def _scatter_nd_grad_samples(rng: np.random.Generator) -> list[Sample]:
    rows = np.repeat(np.arange(3), 4)
    vectors = np.stack([rows, np.tile(DUP_COLUMNS, 3)], -1)
    return [Sample([rand(rng, (4, 5, 3), np.float64), _updates(rng, (6, 3), np.float64, ScatterMode.MUL),
                    _nd_indices(rng, (), (6,), (4, 5), True)], {"mode": MODES, "batch_dims": 0}, "distinct-all-modes"),
            Sample([_dup_data(rng), DUP_UPDATES.reshape(-1), vectors], {"mode": SMOOTH_DUPLICATE_MODES,
                                                                          "batch_dims": 0}, "duplicates-zero-updates")]


def _scatter_along_axis_grad_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, (4, 5), np.float64), _updates(rng, (3, 5), np.float64, ScatterMode.MUL),
                    _along_indices(rng, (3, 5), 4, 0, True)], {"axis": 0, "mode": MODES}, "distinct-all-modes"),
            Sample([_dup_data(rng), DUP_UPDATES, np.tile(DUP_COLUMNS, (3, 1))],
                   {"axis": -1, "mode": SMOOTH_DUPLICATE_MODES}, "duplicates-zero-updates")]


def _gather_grad_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, (3, 4, 5), np.float64), _idx(rng, (2, 3), 4)], {"axis": 1, "batch_dims": 0},
                   "2d-indices-axis1"),
            Sample([rand(rng, (2, 3, 4, 2), np.float64), _idx(rng, (2, 5), 4)], {"axis": 2, "batch_dims": 1},
                   "batch1-axis2")]


# ---- error cases ---------------------------------------------------------------------------------
def _ph(g: og.Graph, shape: Sequence[int], dtype: Any = og.float32) -> og.Tensor:
    return g.placeholder(tuple(shape), dtype)


GATHER_ERRORS = [
    ErrorCase(lambda g: g.gather(_ph(g, (3, 4)), _ph(g, (2,), og.float32)), og.DTypeError, "indices dtype float32",
              "float-indices"),
    ErrorCase(lambda g: g.gather(_ph(g, (3, 4)), _ph(g, (2,), og.int32), axis=2), og.ShapeError, "out of range",
              "bad-axis"),
    ErrorCase(lambda g: g.gather(_ph(g, (3, 4)), _ph(g, (3, 2), og.int32), axis=0, batch_dims=1), og.ShapeError,
              "batch_dims", "batch-dims-above-axis"),
    ErrorCase(lambda g: g.gather(_ph(g, (3, 4)), _ph(g, (2, 2), og.int32), axis=1, batch_dims=1), og.ShapeError,
              "batch dimensions", "batch-mismatch"),
    ErrorCase(lambda g: g.gather(_ph(g, ()), _ph(g, (2,), og.int32)), og.ShapeError, "out of range|scalar",
              "scalar-x"),
]
GATHER_ND_ERRORS = [
    ErrorCase(lambda g: g.gather_nd(_ph(g, (3, 4)), _ph(g, (2, 3), og.int32)), og.ShapeError, "index depth 3",
              "depth-too-large"),
    ErrorCase(lambda g: g.gather_nd(_ph(g, (3, 4)), _ph(g, (), og.int32)), og.ShapeError, "rank", "scalar-indices"),
    ErrorCase(lambda g: g.gather_nd(_ph(g, (3, 4)), _ph(g, (2, 1), og.bool_)), og.DTypeError, "indices dtype bool",
              "bool-indices"),
    ErrorCase(lambda g: g.gather_nd(_ph(g, (3, 4)), _ph(g, (2, None), og.int32)), og.ShapeError, "static",
              "dynamic-depth"),
    ErrorCase(lambda g: g.gather_nd(_ph(g, (2, 4)), _ph(g, (3, 1), og.int32), batch_dims=1), og.ShapeError,
              "batch dimensions", "batch-mismatch"),
]
GATHER_ALONG_AXIS_ERRORS = [
    ErrorCase(lambda g: g.gather_along_axis(_ph(g, (3, 4)), _ph(g, (3,), og.int32), 0), og.ShapeError, "ranks",
              "rank-mismatch"),
    ErrorCase(lambda g: g.gather_along_axis(_ph(g, (3, 4)), _ph(g, (2, 5), og.int32), 0), og.ShapeError,
              "except at axis", "shape-mismatch"),
    ErrorCase(lambda g: g.gather_along_axis(_ph(g, (3, 4)), _ph(g, (3, 4), og.float16), 1), og.DTypeError,
              "indices dtype", "float-indices"),
    ErrorCase(lambda g: g.gather_along_axis(_ph(g, (3, 4)), _ph(g, (3, 4), og.int32), -3), og.ShapeError,
              "out of range", "bad-axis"),
]
SCATTER_ERRORS = [
    ErrorCase(lambda g: g.scatter(_ph(g, (4, 3)), _ph(g, (2, 3), og.float64), _ph(g, (2,), og.int32)),
              og.DTypeError, "one dtype", "dtype-mismatch"),
    ErrorCase(lambda g: g.scatter(_ph(g, (4, 3)), _ph(g, (2, 3)), _ph(g, (2, 1), og.int32)), og.ShapeError,
              "rank 1", "indices-rank"),
    ErrorCase(lambda g: g.scatter(_ph(g, (4, 3)), _ph(g, (2, 3)), _ph(g, (3,), og.int32)), og.ShapeError,
              "number of indices", "count-mismatch"),
    ErrorCase(lambda g: g.scatter(_ph(g, (4, 3)), _ph(g, (2, 3)), _ph(g, (2,), og.float32)), og.DTypeError,
              "indices dtype", "float-indices"),
    ErrorCase(lambda g: g.scatter(_ph(g, (4,), og.bool_), _ph(g, (2,), og.bool_), _ph(g, (2,), og.int32),
                                  mode=ScatterMode.ADD), og.DTypeError, "bool", "bool-ADD"),
    ErrorCase(lambda g: g.scatter(_ph(g, (4,)), _ph(g, (2,)), _ph(g, (2,), og.int32), mode="add"),  # type: ignore[arg-type]
              og.AttributeValueError, "ScatterMode", "string-mode"),
    ErrorCase(lambda g: g.scatter(_ph(g, (4, 3)), _ph(g, (2, 3)), _ph(g, (2,), og.int32), axis=2), og.ShapeError,
              "out of range", "bad-axis"),
]
SCATTER_ND_ERRORS = [
    ErrorCase(lambda g: g.scatter_nd(_ph(g, (4, 3)), _ph(g, (2, 4)), _ph(g, (2, 1), og.int32)), og.ShapeError,
              "differ", "slice-mismatch"),
    ErrorCase(lambda g: g.scatter_nd(_ph(g, (4, 3)), _ph(g, (2, 3)), _ph(g, (2, 2), og.int32)), og.ShapeError,
              "updates must have shape", "depth-rank-mismatch"),
    ErrorCase(lambda g: g.scatter_nd(_ph(g, (4, 3)), _ph(g, (2, 3)), _ph(g, (2, 1), og.float32)), og.DTypeError,
              "indices dtype", "float-indices"),
    ErrorCase(lambda g: g.scatter_nd(_ph(g, (4, 3), og.int32), _ph(g, (2, 3)), _ph(g, (2, 1), og.int32)),
              og.DTypeError, "one dtype", "dtype-mismatch"),
]
SCATTER_ALONG_AXIS_ERRORS = [
    ErrorCase(lambda g: g.scatter_along_axis(_ph(g, (4, 3)), _ph(g, (2, 3)), _ph(g, (2, 2), og.int32), 0),
              og.ShapeError, "updates and indices", "indices-shape"),
    ErrorCase(lambda g: g.scatter_along_axis(_ph(g, (4, 3)), _ph(g, (2,)), _ph(g, (2,), og.int32), 0),
              og.ShapeError, "ranks", "rank-mismatch"),
    ErrorCase(lambda g: g.scatter_along_axis(_ph(g, (4, 3)), _ph(g, (2, 3)), _ph(g, (2, 3), og.int32), 3),
              og.ShapeError, "out of range", "bad-axis"),
]
ONE_HOT_ERRORS = [
    ErrorCase(lambda g: g.one_hot(_ph(g, (3,)), 4), og.DTypeError, "indices dtype float32", "float-indices"),
    ErrorCase(lambda g: g.one_hot(_ph(g, (3,), og.int32), -1), og.AttributeValueError, "depth", "negative-depth"),
    ErrorCase(lambda g: g.one_hot(_ph(g, (3,), og.int32), 4, axis=2), og.ShapeError, "out of range", "bad-axis"),
    ErrorCase(lambda g: g.one_hot(_ph(g, (3,), og.int32), 4, dtype=og.complex64), og.DTypeError, "complex64",
              "complex"),
]
COORDINATE_ERRORS = [
    ErrorCase(lambda g: g.coordinate_along_axis(2, (3, 4)), og.ShapeError, "out of range", "bad-axis"),
    ErrorCase(lambda g: g.coordinate_along_axis(0, (None, 4)), og.ShapeError, "static", "dynamic-shape"),
    ErrorCase(lambda g: g.coordinate_along_axis(0, (3,), og.bool_), og.DTypeError, "bool", "bool-dtype"),
]
BAND_PART_ERRORS = [
    ErrorCase(lambda g: g.band_part(_ph(g, (4,)), 1, 1), og.ShapeError, "rank >= 2", "rank1"),
    ErrorCase(lambda g: g.band_part(_ph(g, (4, 4)), 1.5, 1), og.AttributeValueError, "ints", "float-band"),  # type: ignore[arg-type]
]


RECORDS = [
    OpInfo("gather", (ga.GATHER,), lambda g, x, i, axis, batch_dims: g.gather(x, i, axis, batch_dims),
           _gather_samples, np_gather, errors=GATHER_ERRORS, grad_samples=_gather_grad_samples),
    # the index depth (last dim of indices) fixes the result's rank, so it cannot be dynamic
    OpInfo("gather_nd", (ga.GATHER_ND,), lambda g, x, i, batch_dims: g.gather_nd(x, i, batch_dims),
           _gather_nd_samples, np_gather_nd, errors=GATHER_ND_ERRORS, dynamic=False),
    OpInfo("gather_along_axis", (ga.GATHER_ALONG_AXIS,), lambda g, x, i, axis: g.gather_along_axis(x, i, axis),
           _gather_along_axis_samples, np_gather_along_axis, errors=GATHER_ALONG_AXIS_ERRORS),
    OpInfo("scatter", (ga.SCATTER,), _scatter(og.Graph.scatter),
           _scatter_samples, lambda d, u, i, axis, mode: np_scatter(d, u, i, axis % d.ndim, mode),
           errors=SCATTER_ERRORS, tol={torch.float16: (5e-3, 5e-3)}, grad_samples=_scatter_grad_samples),
    OpInfo("scatter_nd", (ga.SCATTER_ND,), _scatter(og.Graph.scatter_nd),
           _scatter_nd_samples, np_scatter_nd, errors=SCATTER_ND_ERRORS, grad_samples=_scatter_nd_grad_samples),
    OpInfo("scatter_along_axis", (ga.SCATTER_ALONG_AXIS,), _scatter(og.Graph.scatter_along_axis),
           _scatter_along_axis_samples, lambda d, u, i, axis, mode: np_scatter_along_axis(d, u, i, axis % d.ndim, mode),
           errors=SCATTER_ALONG_AXIS_ERRORS, grad_samples=_scatter_along_axis_grad_samples),
    OpInfo("one_hot", (ga.ONE_HOT,), lambda g, i, **kw: g.one_hot(i, **kw), _one_hot_samples, np_one_hot,
           errors=ONE_HOT_ERRORS),
    OpInfo("coordinate_along_axis", (ga.COORDINATE_ALONG_AXIS,), lambda g, **kw: g.coordinate_along_axis(**kw),
           _coordinate_samples, lambda **kw: np_coordinate(kw["axis"] % len(kw["shape"]), kw["shape"],
                                                           kw.get("dtype", og.int32)),
           errors=COORDINATE_ERRORS),
    OpInfo("band_part", (ga.BAND_PART,), lambda g, x, num_lower, num_upper: g.band_part(x, num_lower, num_upper),
           _band_part_samples, np_band_part, errors=BAND_PART_ERRORS),
]
