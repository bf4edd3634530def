"""Records for slice, slice_update, reverse, pad and x[...] indexing; oracles are NumPy indexing and np.pad."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import shape as sh
from opgraph.ops import slicing as sl

from .opinfo import ErrorCase, OpInfo, Sample, rand

DTYPES: tuple[Any, ...] = (np.float32, np.int32, np.bool_, torch.bfloat16, np.int64, np.float16)


def _name(dt: Any) -> str:
    return getattr(dt, "__name__", str(dt))


def _ph(g: og.Graph, shape: tuple[int | None, ...], dtype: Any = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


def _np_key(starts: Any, ends: Any, strides: Any = None, start_mask: int = 0, end_mask: int = 0,
            squeeze_mask: int = 0) -> tuple[Any, ...]:
    """The NumPy basic-indexing key with the same meaning (Python slices clamp as strided slice does)."""
    strides = strides or (1,) * len(starts)
    key: list[Any] = []
    for i, (s, e, st) in enumerate(zip(starts, ends, strides, strict=True)):
        if squeeze_mask >> i & 1:
            key.append(0 if start_mask >> i & 1 else s)
        else:
            key.append(slice(None if start_mask >> i & 1 else s, None if end_mask >> i & 1 else e, st))
    return tuple(key)


def _slice_oracle(x: np.ndarray, **kw: Any) -> np.ndarray:
    return x[_np_key(**kw)]


def _slice_update_oracle(data: np.ndarray, update: np.ndarray, **kw: Any) -> np.ndarray:
    out = data.copy()
    out[_np_key(**kw)] = update
    return out


SLICE_CASES: list[tuple[tuple[int, ...], dict[str, Any], str]] = [
    ((5, 6, 7), {"starts": (1, 0, 2), "ends": (4, 6, 7), "strides": (1, 2, 3)}, "strided"),
    ((5, 6, 7), {"starts": (-1, -2, 6), "ends": (0, -7, 0), "strides": (-1, -2, -3)}, "negative-strides"),
    ((5, 6, 7), {"starts": (-100, 2, 0), "ends": (100, -100, 7), "strides": (2, 1, 1)}, "clamped"),
    ((5, 6, 7), {"starts": (4, -100, 100), "ends": (1, 100, -100), "strides": (1, -1, -2)}, "empty-and-clamped"),
    ((5, 6, 7), {"starts": (3, 9, 9), "ends": (9, 2, 9), "strides": (-1, 2, 1), "start_mask": 0b110,
                 "end_mask": 0b101}, "masks"),
    ((5, 6, 7), {"starts": (2, -1, 0), "ends": (0, 0, 7), "strides": (1, 1, -1), "squeeze_mask": 0b011,
                 "end_mask": 0b100}, "squeeze"),
    ((5, 6), {"starts": (0, 0), "ends": (0, 0), "strides": (1, -1), "start_mask": 0b11, "end_mask": 0b11},
     "all-masked"),
    ((4,), {"starts": (3,), "ends": (0,), "strides": (1,), "squeeze_mask": 1, "start_mask": 1}, "squeeze-masked"),
    ((0, 3), {"starts": (0, 1), "ends": (5, 3), "strides": (1, 1)}, "empty-input"),
]


def _slice_samples(rng: np.random.Generator) -> list[Sample]:
    out = [Sample([rand(rng, s, np.float32)], kw, desc) for s, kw, desc in SLICE_CASES]
    out += [Sample([rand(rng, (5, 6, 7), dt)], SLICE_CASES[1][1], f"{_name(dt)}") for dt in DTYPES]
    return out


def _update_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for s, kw, desc in SLICE_CASES:
        region = _slice_oracle(np.zeros(s), **kw).shape
        out.append(Sample([rand(rng, s, np.float32), rand(rng, region, np.float32)], kw, desc))
    for dt in DTYPES:
        kw = SLICE_CASES[1][1]
        region = _slice_oracle(np.zeros((5, 6, 7)), **kw).shape
        out.append(Sample([rand(rng, (5, 6, 7), dt), rand(rng, region, dt)], kw, f"{_name(dt)}"))
    kw = SLICE_CASES[0][1]
    out.append(Sample([rand(rng, (5, 6, 7), np.float32), rand(rng, (3, 1, 2), np.float32)], kw, "broadcast"))
    out.append(Sample([rand(rng, (5, 6, 7), np.int32), rand(rng, (), np.int32)], kw, "scalar-update"))
    kw = SLICE_CASES[1][1]  # region (4, 3, 2) read backwards on every axis
    out.append(Sample([rand(rng, (5, 6, 7), np.float32), rand(rng, (3, 2), np.float32)], kw, "lower-rank-reversed"))
    out.append(Sample([rand(rng, (5, 6, 7), np.float32), rand(rng, (4, 1, 2), np.float32)], kw, "broadcast-reversed"))
    return out


SLICE_KW = {"starts": (0, 0), "ends": (2, 2), "strides": (1, 1)}
SLICE_ERRORS = [
    ErrorCase(lambda g: g.slice(_ph(g, (4, 4)), (0, 0), (2, 2), (1, 0)), og.AttributeValueError, "contain 0",
              "zero-stride"),
    ErrorCase(lambda g: g.slice(_ph(g, (4, 4)), (0,), (2,), (1,)), og.ShapeError, "1 entries", "short"),
    ErrorCase(lambda g: g.slice(_ph(g, (4, 4)), (0, 4), (2, 5), squeeze_mask=0b10), og.ShapeError,
              "out of range", "squeeze-range"),
    ErrorCase(lambda g: g.slice(_ph(g, (4, 4)), (0, -5), (2, 5), squeeze_mask=[False, True]), og.ShapeError,
              "out of range", "squeeze-negative"),
    ErrorCase(lambda g: g.slice(_ph(g, (4, 4)), (0, 0), (2, 2), start_mask=0b100), og.AttributeValueError,
              "beyond", "mask-bits"),
    ErrorCase(lambda g: g.slice(_ph(g, (4, 4)), (0, 0.5), (2, 2)), og.AttributeValueError, "ints", "float"),
]
UPDATE_ERRORS = [
    ErrorCase(lambda g: g.slice_update(_ph(g, (4, 4)), _ph(g, (2, 2), og.float16), **SLICE_KW), og.DTypeError,
              "differs", "dtype"),
    ErrorCase(lambda g: g.slice_update(_ph(g, (4, 4)), _ph(g, (2, 3)), **SLICE_KW), og.ShapeError,
              "does not broadcast", "shape"),
    ErrorCase(lambda g: g.slice_update(_ph(g, (4, 4)), _ph(g, (1, 2, 2)), **SLICE_KW), og.ShapeError,
              "does not broadcast", "rank"),
    ErrorCase(lambda g: g.slice_update(_ph(g, (4, 4)), _ph(g, (2, 2)), (0, 0), (2, 2), (0, 1)),
              og.AttributeValueError, "contain 0", "zero-stride"),
]


# ---- reverse ---------------------------------------------------------------------------------
def _reverse_samples(rng: np.random.Generator) -> list[Sample]:
    out = [Sample([rand(rng, (3, 4, 5), dt)], {"axes": (0, 2)}, _name(dt)) for dt in DTYPES]
    out += [Sample([rand(rng, (3, 4), np.float32)], {"axes": None}, "all"),
            Sample([rand(rng, (3, 4), np.float32)], {"axes": -1}, "negative"),
            Sample([rand(rng, (3, 4), np.float32)], {"axes": ()}, "none"),
            Sample([rand(rng, (0, 4), np.float32)], {"axes": 0}, "empty")]
    return out


def _reverse_oracle(x: np.ndarray, axes: Any) -> np.ndarray:
    return np.flip(x, axes) if axes != () else x


# ---- pad -------------------------------------------------------------------------------------
NP_MODES = {"constant": "constant", "zero": "constant", "reflect": "reflect", "symmetric": "symmetric",
            "clamp_to_edge": "edge", "periodic": "wrap"}


def _pad_oracle(x: np.ndarray, padding_mode: str, left_padding: Any, right_padding: Any,
                constant_value: float = 0.0) -> np.ndarray:
    if x.ndim == 0:
        return x
    widths = list(zip(left_padding, right_padding, strict=True))
    mode = NP_MODES[padding_mode]
    if mode != "constant":
        return np.pad(x, widths, mode=mode)
    value = 0.0 if padding_mode == "zero" else constant_value
    return np.pad(x, widths, mode="constant", constant_values=np.array(value).astype(x.dtype))


def _pad_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for mode in NP_MODES:
        for shape, left, right in (((5,), (2,), (3,)), ((3, 4), (1, 2), (2, 0)), ((2, 3, 4), (0, 2, 1), (1, 1, 3)),
                                   ((2, 2, 3, 3), (1, 0, 2, 1), (0, 1, 1, 2)),
                                   ((2, 1, 2, 3, 3), (1, 0, 1, 2, 0), (0, 1, 0, 1, 2))):
            out.append(Sample([rand(rng, shape, np.float32)],
                              {"padding_mode": mode, "left_padding": left, "right_padding": right,
                               "constant_value": 1.5}, f"{mode}-rank{len(shape)}"))
        for dt in DTYPES[1:]:
            out.append(Sample([rand(rng, (3, 4), dt, -5, 5)], {"padding_mode": mode, "left_padding": (2, 1),
                                                              "right_padding": (1, 3), "constant_value": 1.0},
                              f"{mode}-{_name(dt)}"))
        if mode not in ("constant", "zero"):
            out.append(Sample([rand(rng, (3, 2), np.int32, -9, 9)],
                              {"padding_mode": mode, "left_padding": (7, 5), "right_padding": (8, 4)},
                              f"{mode}-wider-than-input"))
            out.append(Sample([rand(rng, (1, 3), np.float32)],
                              {"padding_mode": mode, "left_padding": (2, 0), "right_padding": (1, 0)},
                              f"{mode}-size1"))
    out.append(Sample([rand(rng, (0, 3), np.float32)], {"padding_mode": "constant", "left_padding": (1, 1),
                                                        "right_padding": (1, 0), "constant_value": -2.0},
                      "constant-empty"))
    out.append(Sample([rand(rng, (), np.float32)], {"padding_mode": "reflect", "left_padding": (),
                                                    "right_padding": ()}, "scalar"))
    return out


def _pad(g: og.Graph, x: og.Tensor, **kw: Any) -> Any:
    mode = kw.pop("padding_mode")
    if isinstance(mode, tuple):  # gradient samples: one output per mode
        return [g.pad(x, m, **kw) for m in mode]
    return g.pad(x, mode, **kw)


def _pad_grad_samples(rng: np.random.Generator) -> list[Sample]:
    gathers = ("reflect", "symmetric", "clamp_to_edge", "periodic")
    return [Sample([rand(rng, (3, 4), np.float64)], {"padding_mode": tuple(NP_MODES), "left_padding": (2, 1),
                                                     "right_padding": (1, 3), "constant_value": 1.5}, "all-modes"),
            Sample([rand(rng, (3, 1, 2), np.float64)], {"padding_mode": gathers, "left_padding": (7, 2, 5),
                                                        "right_padding": (8, 1, 4)}, "wider-than-input")]


# ---- pad_gradient: the adjoint of pad ------------------------------------------------------------
def _pad_gradient_oracle(t: np.ndarray, padding_mode: str, left_padding: Any, right_padding: Any) -> np.ndarray:
    """Per axis: the source index of every padded position (np.pad of an arange), then add the values there."""
    for i, (lo, hi) in enumerate(zip(left_padding, right_padding, strict=True)):
        d = t.shape[i] - lo - hi
        if NP_MODES[padding_mode] == "constant":
            t = np.take(t, np.arange(lo, lo + d), axis=i)
            continue
        src = np.pad(np.arange(d), (lo, hi), mode=NP_MODES[padding_mode])
        out = np.zeros(t.shape[:i] + (d,) + t.shape[i + 1:], t.dtype)
        for j, k in enumerate(src):
            idx_out: list[Any] = [slice(None)] * t.ndim
            idx_in: list[Any] = [slice(None)] * t.ndim
            idx_out[i], idx_in[i] = k, j
            out[tuple(idx_out)] += t[tuple(idx_in)]
        t = out
    return t


def _pad_gradient_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for mode in NP_MODES:
        for shape, left, right in (((8,), (2,), (3,)), ((6, 6), (1, 2), (2, 0)), ((3, 6, 8), (0, 2, 1), (1, 1, 3))):
            out.append(Sample([rand(rng, shape, np.float32)], {"padding_mode": mode, "left_padding": left,
                                                               "right_padding": right}, f"{mode}-rank{len(shape)}"))
        out.append(Sample([rand(rng, (6, 8), np.int32, -9, 9)], {"padding_mode": mode, "left_padding": (2, 1),
                                                                "right_padding": (1, 3)}, f"{mode}-int32"))
        if mode not in ("constant", "zero"):
            out.append(Sample([rand(rng, (18, 11), np.float64)], {"padding_mode": mode, "left_padding": (7, 5),
                                                                  "right_padding": (8, 4)}, f"{mode}-wider-than-input"))
    out.append(Sample([rand(rng, (), np.float32)], {"padding_mode": "reflect", "left_padding": (),
                                                    "right_padding": ()}, "scalar"))
    return out


PAD_GRADIENT_ERRORS = [
    ErrorCase(lambda g: g.pad_gradient(_ph(g, (3,)), "reflect", (2,), (1,)), og.ShapeError, "too small",
              "nothing-left"),
    ErrorCase(lambda g: g.pad_gradient(_ph(g, (3,)), "constant", (2,), (2,)), og.ShapeError, "too small",
              "negative"),
    ErrorCase(lambda g: g.pad_gradient(_ph(g, (3,)), "mirror", (1,), (1,)), og.AttributeValueError,
              "unknown padding mode", "bad-mode"),
    ErrorCase(lambda g: g.pad_gradient(_ph(g, (3, 3)), "reflect", (1,), (1,)), og.ShapeError, "1 entries",
              "length"),
    ErrorCase(lambda g: g.pad_gradient(_ph(g, (5,), og.bool_), "reflect", (1,), (1,)), og.DTypeError, "bool",
              "bool"),
]


PAD_ERRORS = [
    ErrorCase(lambda g: g.pad(_ph(g, (3,)), "mirror", (1,), (1,)), og.AttributeValueError, "unknown padding mode",
              "bad-mode"),
    ErrorCase(lambda g: g.pad(_ph(g, (3,)), 99, (1,), (1,)), og.AttributeValueError, "unknown padding mode",
              "bad-mode-value"),
    ErrorCase(lambda g: g.pad(_ph(g, (3,)), "reflect", (-1,), (1,)), og.AttributeValueError, ">= 0", "negative"),
    ErrorCase(lambda g: g.pad(_ph(g, (3, 3)), "constant", (1,), (1,)), og.ShapeError, "1 entries", "length"),
    ErrorCase(lambda g: g.pad(_ph(g, (0, 3)), "symmetric", (1, 0), (0, 0)), og.ShapeError, "empty axis",
              "empty-axis"),
    ErrorCase(lambda g: g.pad(_ph(g, (3,)), "constant", (1,), (1,), "x"), og.AttributeValueError,
              "constant_value", "bad-value"),
    ErrorCase(lambda g: g.pad(_ph(g, (3,), og.int32), "constant", (1,), (1,), float("nan")),
              og.AttributeValueError, "does not fit", "nan-for-int"),
]


# ---- x[...] ----------------------------------------------------------------------------------
GETITEM_KEYS: list[tuple[Any, str]] = [
    ((slice(1, 3), slice(None, None, 2)), "slices"),
    ((Ellipsis, -1), "ellipsis-int"),
    ((None, 0), "newaxis-int"),
    ((slice(None, None, -1), slice(-2, None, -2)), "negative-steps"),
    ((1, None, Ellipsis, None, slice(5, 0, -3)), "mixed"),
    (2, "int"),
    ((), "empty-key"),
]


def _getitem_samples(rng: np.random.Generator) -> list[Sample]:
    out = [Sample([rand(rng, (4, 5, 6), np.float32)], {"key": k}, d) for k, d in GETITEM_KEYS]
    out += [Sample([rand(rng, (4, 5, 6), dt)], {"key": GETITEM_KEYS[4][0]}, _name(dt)) for dt in DTYPES]
    return out


def _getitem_error(key: Any, error: type[og.OpgraphError], match: str, desc: str) -> ErrorCase:
    return ErrorCase(lambda g: _ph(g, (3, 4))[key], error, match, desc)


GETITEM_ERRORS = [
    _getitem_error((0, 0, 0), og.ShapeError, "too many indices", "too-many"),
    _getitem_error((Ellipsis, 0, Ellipsis), og.ShapeError, "single ellipsis", "two-ellipses"),
    _getitem_error((slice(None, None, 0),), og.AttributeValueError, "step cannot be zero", "zero-step"),
    _getitem_error(([0, 1],), og.GraphError, "use gather", "list"),
    _getitem_error((True,), og.GraphError, "not supported", "bool"),
    _getitem_error((1.5,), og.GraphError, "not supported", "float"),
    _getitem_error((slice(0.5, 2),), og.GraphError, "ints or None", "float-bound"),
    _getitem_error(5, og.ShapeError, "out of range", "int-out-of-range"),
    ErrorCase(lambda g: _ph(g, (3, 4))[g.placeholder((2,), og.int32)], og.GraphError, "use gather", "tensor"),
]


RECORDS = [
    OpInfo("slice", (sl.SLICE,), lambda g, x, **kw: g.slice(x, **kw), _slice_samples, _slice_oracle,
           errors=SLICE_ERRORS, grad_samples=lambda rng: [_slice_samples(rng)[i] for i in (4, 5)]),  # masks, squeeze
    OpInfo("slice_update", (sl.SLICE_UPDATE,), lambda g, d, u, **kw: g.slice_update(d, u, **kw), _update_samples,
           _slice_update_oracle, errors=UPDATE_ERRORS,
           grad_samples=lambda rng: [_update_samples(rng)[i] for i in (5, -1)]),  # squeeze, broadcast-reversed
    OpInfo("reverse", (sl.REVERSE,), lambda g, x, axes: g.reverse(x, axes), _reverse_samples, _reverse_oracle,
           errors=[ErrorCase(lambda g: g.reverse(_ph(g, (2, 3)), 2), og.ShapeError, "out of range", "bad-axis"),
                   ErrorCase(lambda g: g.reverse(_ph(g, (2, 3)), (1, -1)), og.ShapeError, "repeat", "repeat")]),
    OpInfo("pad", (sl.PAD,), _pad, _pad_samples, _pad_oracle, errors=PAD_ERRORS, grad_samples=_pad_grad_samples),
    OpInfo("pad_gradient", (sl.PAD_GRADIENT,), lambda g, t, padding_mode, **kw: g.pad_gradient(t, padding_mode, **kw),
           _pad_gradient_samples, _pad_gradient_oracle, errors=PAD_GRADIENT_ERRORS,
           grad_samples=lambda rng: [s for s in _pad_gradient_samples(rng)
                                     if s.desc in ("reflect-rank3", "symmetric-wider-than-input")]),
    OpInfo("getitem", (sl.SLICE, sh.EXPAND_DIMS), lambda g, x, key: x[key], _getitem_samples,
           lambda x, key: x[key], errors=GETITEM_ERRORS),
]
