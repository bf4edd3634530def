"""Records for reductions, argmax/argmin and variance (``opgraph.ops.reduce``), with NumPy oracles."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import reduce as r

from .opinfo import ErrorCase, OpInfo, Sample, rand

NAN = np.nan

# (shape, axes, keepdims, label): None/int/negative/tuple/unsorted-negative/empty-set/keepdims variants
AXES_CASES: list[tuple[tuple[int, ...], Any, bool, str]] = [
    ((3, 4, 5), None, False, "all"),
    ((3, 4, 5), 1, False, "axis1"),
    ((3, 4, 5), -1, True, "neg-keep"),
    ((3, 4, 5), (0, 2), False, "tuple"),
    ((3, 4, 5), (-1, 0), True, "unsorted-neg-keep"),
    ((3, 4, 5), None, True, "all-keep"),
    ((3, 4), (), False, "no-axes"),
    ((), None, False, "scalar"),
]


def _samples(rng: np.random.Generator, dtypes: Sequence[Any], low: float = -2.0, high: float = 2.0,
             empty: bool = True) -> list[Sample]:
    out = [Sample([rand(rng, shape, np.float32, low, high)], {"axes": axes, "keepdims": keep}, f"f32-{label}")
           for shape, axes, keep, label in AXES_CASES]
    for dt in dtypes:
        nm = "bf16" if dt is torch.bfloat16 else np.dtype(dt).name
        out.append(Sample([rand(rng, (4, 6), dt, low, high)], {"axes": 1, "keepdims": False}, f"{nm}-axis1"))
        out.append(Sample([rand(rng, (2, 3, 4), dt, low, high)], {"axes": (0, 2), "keepdims": True},
                          f"{nm}-tuple-keep"))
    if empty:  # a reduced axis of size 0, and an empty kept axis
        out.append(Sample([np.zeros((0, 3), np.float32)], {"axes": 0, "keepdims": False}, "empty-reduced"))
        out.append(Sample([np.zeros((0, 3), np.float32)], {"axes": 1, "keepdims": True}, "empty-kept"))
    return out


def _np_axes(axes: Any) -> Any:
    return tuple(axes) if isinstance(axes, list) else axes


def _float_oracle(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Compute in float64 (complex128) and round to the input dtype; integers keep their dtype."""

    def oracle(x: np.ndarray, axes: Any, keepdims: bool) -> np.ndarray:
        if x.dtype.kind in "iub":
            return np.asarray(fn(x, axis=_np_axes(axes), keepdims=keepdims, dtype=x.dtype))
        wide = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
        return np.asarray(fn(wide, axis=_np_axes(axes), keepdims=keepdims)).astype(x.dtype)

    return oracle


def _identity(dt: np.dtype, largest: bool) -> Any:
    if dt.kind == "b":
        return largest
    if dt.kind == "f":
        return np.inf if largest else -np.inf
    info = np.iinfo(dt)
    return info.max if largest else info.min


def _extremum_oracle(ufunc: np.ufunc, largest: bool) -> Callable[..., Any]:
    """``ufunc.reduce`` (fmax ignores NaN, maximum propagates it); the identity over empty slices."""

    def oracle(x: np.ndarray, axes: Any, keepdims: bool) -> np.ndarray:
        if x.size == 0:
            shape = np.sum(x, axis=_np_axes(axes), keepdims=keepdims).shape
            return np.full(shape, _identity(x.dtype, not largest), x.dtype)
        return np.asarray(ufunc.reduce(x, axis=_np_axes(axes), keepdims=keepdims))

    return oracle


def _nan_samples(rng: np.random.Generator) -> list[Sample]:
    x = np.array([[1.0, NAN, 3.0, -2.0], [NAN, NAN, NAN, NAN], [NAN, -np.inf, 5.0, NAN],
                  [np.inf, 0.0, NAN, 7.0]], np.float32)
    return [Sample([x], {"axes": 1, "keepdims": False}, "nan-rows"),
            Sample([x], {"axes": 0, "keepdims": True}, "nan-cols"),
            Sample([x], {"axes": None, "keepdims": False}, "nan-all"),
            Sample([x.astype(np.float16)], {"axes": -1, "keepdims": False}, "nan-f16"),
            Sample([torch.from_numpy(x).to(torch.bfloat16)], {"axes": 1, "keepdims": False}, "nan-bf16")]


def _wrap_sample() -> Sample:
    return Sample([np.array([[100, 100, 10], [-100, -100, 1]], np.int8)], {"axes": 1, "keepdims": False},
                  "int8-wraps")


def _ph(shape: tuple[int | None, ...] = (2, 3), dtype: og.DType = og.float32) -> Callable[[og.Graph], og.Tensor]:
    return lambda g: g.placeholder(shape, dtype)


def _axis_errors(method: str) -> list[ErrorCase]:
    x = _ph()
    return [
        ErrorCase(lambda g: getattr(g, method)(x(g), 2), og.ShapeError, "out of range", "axis-too-big"),
        ErrorCase(lambda g: getattr(g, method)(x(g), -3), og.ShapeError, "out of range", "axis-too-negative"),
        ErrorCase(lambda g: getattr(g, method)(x(g), (0, -2)), og.ShapeError, "repeat", "repeated-axis"),
        ErrorCase(lambda g: getattr(g, method)(x(g), "0"), og.ShapeError, "axes must be", "axes-str"),
    ]


def _dtype_error(method: str, dtype: og.DType, match: str) -> ErrorCase:
    return ErrorCase(lambda g: getattr(g, method)(g.placeholder((2, 3), dtype), 0), og.DTypeError, match,
                     f"{dtype.name}-rejected")


def _reduce_record(method: str, op: Any, oracle: Callable[..., Any], dtypes: Sequence[Any],
                   errors: Sequence[ErrorCase] = (), extra: Callable[[np.random.Generator], list[Sample]] | None = None,
                   low: float = -2.0, high: float = 2.0, empty: bool = True,
                   tol: dict[Any, tuple[float, float]] | None = None,
                   grad_samples: Callable[[np.random.Generator], list[Sample]] | None = None) -> OpInfo:
    def samples(rng: np.random.Generator) -> list[Sample]:
        return _samples(rng, dtypes, low, high, empty) + (extra(rng) if extra else [])

    return OpInfo(method, (op,), lambda g, x, axes, keepdims: getattr(g, method)(x, axes, keepdims), samples,
                  oracle, errors=[*_axis_errors(method), *errors], tol=tol or {}, grad_samples=grad_samples)


def _grad_samples(rng: np.random.Generator, low: float = -2.0, high: float = 2.0) -> list[Sample]:
    """Two axes with keepdims, and one negative axis; continuous random values, so no ties."""
    return [Sample([rand(rng, (3, 4, 5), np.float64, low, high)], {"axes": (0, 2), "keepdims": True}, "f64-tuple-keep"),
            Sample([rand(rng, (4, 6), np.float64, low, high)], {"axes": -1, "keepdims": False}, "f64-neg")]


def _prod_grad_samples(rng: np.random.Generator) -> list[Sample]:
    """Zeros: the product is multilinear, so finite differences are exact there too (one zero in a
    slice: the others' product; two: zero)."""
    x = rand(rng, (3, 4, 5), np.float64, 0.5, 1.6)
    x[0, 1, 2] = 0.0  # one zero in the slice x[:, 1, :] (axes 0 and 2)
    x[1, 2, 0] = x[2, 2, 3] = 0.0  # two zeros in x[:, 2, :]
    y = rand(rng, (4, 6), np.float64, 0.5, 1.6)
    y[0, 3] = y[1, 0] = y[1, 5] = 0.0
    return [Sample([x], {"axes": (0, 2), "keepdims": False}, "f64-tuple-zeros"),
            Sample([y], {"axes": 1, "keepdims": True}, "f64-zeros-keep")]


FLOATS = (np.float16, torch.bfloat16, np.float64)
INTS = (np.int32, np.int64, np.uint8)


def _variance(x: np.ndarray, axes: Any, keepdims: bool) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # inf - inf in the no-axes sample
        return np.asarray(np.var(x.astype(np.float64), axis=_np_axes(axes), keepdims=keepdims)).astype(x.dtype)


def _logical_nan_sample() -> Sample:  # NaN is nonzero, so it counts as true
    x = np.array([[0.0, NAN, 1.0], [2.0, -1.0, NAN], [0.0, 0.0, 0.0]], np.float32)
    return Sample([x], {"axes": 1, "keepdims": False}, "nan-is-true")


def _arg_samples(rng: np.random.Generator) -> list[Sample]:
    ties = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [0, -1, 5, 5]], np.int32)
    nan = np.array([[1.0, NAN, 3.0, NAN], [NAN, 0.0, -1.0, 2.0], [4.0, 4.0, -4.0, -4.0]], np.float32)
    out = [Sample([rand(rng, (3, 4, 5), np.float32)], {"axis": 1, "keepdims": False}, "f32-axis1"),
           Sample([rand(rng, (3, 4, 5), np.float32)], {"axis": -1, "keepdims": True}, "f32-neg-keep"),
           Sample([rand(rng, (3, 4, 5), np.float32)], {"axis": 0, "keepdims": False}, "f32-axis0"),
           Sample([rand(rng, (7,), np.float64)], {"axis": 0, "keepdims": False}, "f64-1d"),
           Sample([rand(rng, (4, 6), np.float16)], {"axis": 1, "keepdims": False}, "f16"),
           Sample([rand(rng, (4, 6), torch.bfloat16)], {"axis": 0, "keepdims": True}, "bf16"),
           Sample([ties], {"axis": 1, "keepdims": False}, "int32-ties-first"),
           Sample([ties.astype(np.int8)], {"axis": 0, "keepdims": False}, "int8-ties-axis0"),
           Sample([np.array([[False, True, True], [False, False, False]])], {"axis": 1, "keepdims": False}, "bool"),
           Sample([nan], {"axis": 1, "keepdims": False}, "nan-first"),
           Sample([np.zeros((0, 3), np.float32)], {"axis": 1, "keepdims": False}, "empty-batch")]
    return out


def _arg_oracle(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda x, axis, keepdims: np.asarray(fn(x, axis=axis, keepdims=keepdims)).astype(np.int32)


def _arg_errors(method: str) -> list[ErrorCase]:
    return [
        ErrorCase(lambda g: getattr(g, method)(g.placeholder((2, 3)), 2), og.ShapeError, "out of range", "bad-axis"),
        ErrorCase(lambda g: getattr(g, method)(g.placeholder(())), og.ShapeError, "rank >= 1", "scalar"),
        ErrorCase(lambda g: getattr(g, method)(g.placeholder((2, 0)), 1), og.ShapeError, "size 0", "empty-axis"),
        ErrorCase(lambda g: getattr(g, method)(g.placeholder((2,), og.complex64)), og.DTypeError, "complex",
                  "complex"),
    ]


RECORDS = [
    _reduce_record("reduce_sum", r.REDUCE_SUM, _float_oracle(np.sum), (*FLOATS, *INTS, np.complex64),
                   [_dtype_error("reduce_sum", og.bool_, "bool")], lambda rng: [_wrap_sample()]),
    _reduce_record("reduce_prod", r.REDUCE_PROD, _float_oracle(np.prod), (*FLOATS, *INTS, np.complex64),
                   [_dtype_error("reduce_prod", og.bool_, "bool")], lambda rng: [_wrap_sample()],
                   low=0.5, high=1.6, grad_samples=_prod_grad_samples),  # keep products of 60 factors in range
    _reduce_record("reduce_mean", r.REDUCE_MEAN, _float_oracle(np.mean), (*FLOATS, np.complex64),
                   [_dtype_error("reduce_mean", og.int32, "int32"), _dtype_error("reduce_mean", og.bool_, "bool")],
                   empty=False, grad_samples=_grad_samples),
    _reduce_record("variance", r.VARIANCE, _variance, FLOATS,
                   [_dtype_error("variance", og.int32, "int32"), _dtype_error("variance", og.complex64, "complex")],
                   lambda rng: [Sample([np.array([1.0, NAN, np.inf], np.float32)], {"axes": (), "keepdims": False},
                                       "no-axes-nan-inf")], empty=False, grad_samples=_grad_samples),
    _reduce_record("reduce_max", r.REDUCE_MAX, _extremum_oracle(np.fmax, True), (*FLOATS, *INTS, np.bool_),
                   [_dtype_error("reduce_max", og.complex64, "complex")], _nan_samples,
                   grad_samples=_grad_samples),
    _reduce_record("reduce_min", r.REDUCE_MIN, _extremum_oracle(np.fmin, False), (*FLOATS, *INTS, np.bool_),
                   [_dtype_error("reduce_min", og.complex64, "complex")], _nan_samples,
                   grad_samples=_grad_samples),
    _reduce_record("reduce_max_with_nan_propagation", r.REDUCE_MAX_NAN, _extremum_oracle(np.maximum, True),
                   (*FLOATS, np.int32, np.bool_), [], _nan_samples, grad_samples=_grad_samples),
    _reduce_record("reduce_min_with_nan_propagation", r.REDUCE_MIN_NAN, _extremum_oracle(np.minimum, False),
                   (*FLOATS, np.int32, np.bool_), [], _nan_samples, grad_samples=_grad_samples),
    _reduce_record("reduce_and", r.REDUCE_AND, lambda x, axes, keepdims: np.all(x, _np_axes(axes), keepdims=keepdims),
                   (np.bool_, np.int32, np.float16), [], lambda rng: [_logical_nan_sample()], low=-1, high=2),
    _reduce_record("reduce_or", r.REDUCE_OR, lambda x, axes, keepdims: np.any(x, _np_axes(axes), keepdims=keepdims),
                   (np.bool_, np.int32, np.float16), [], lambda rng: [_logical_nan_sample(),
                   Sample([np.zeros((3, 4), np.float32)], {"axes": 1, "keepdims": False}, "all-zero")],
                   low=-1, high=2),
    OpInfo("argmax", (r.ARGMAX,), lambda g, x, axis, keepdims: g.argmax(x, axis, keepdims), _arg_samples,
           _arg_oracle(np.argmax), errors=_arg_errors("argmax")),
    OpInfo("argmin", (r.ARGMIN,), lambda g, x, axis, keepdims: g.argmin(x, axis, keepdims), _arg_samples,
           _arg_oracle(np.argmin), errors=_arg_errors("argmin")),
]
