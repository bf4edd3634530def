"""Records for the cumulative ops (``opgraph.ops.scan``), with NumPy ``ufunc.accumulate`` oracles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import scan

from .opinfo import ErrorCase, OpInfo, Sample, rand

NAN = np.nan


def _s(x: Any, axis: int, exclusive: bool = False, reverse: bool = False, desc: str = "") -> Sample:
    return Sample([x], {"axis": axis, "exclusive": exclusive, "reverse": reverse}, desc)


def _samples(rng: np.random.Generator, ordered: bool, low: float = -2.0, high: float = 2.0) -> list[Sample]:
    out = [
        _s(rand(rng, (3, 5), np.float32, low, high), 1, desc="f32-axis1"),
        _s(rand(rng, (3, 5), np.float32, low, high), 0, True, desc="f32-axis0-exclusive"),
        _s(rand(rng, (3, 5), np.float32, low, high), -1, False, True, desc="f32-neg-reverse"),
        _s(rand(rng, (2, 3, 4), np.float64, low, high), 1, True, True, desc="f64-exclusive-reverse"),
        _s(rand(rng, (4, 6), np.float16, low, high), 1, desc="f16"),
        _s(rand(rng, (3, 5), torch.bfloat16, low, high), 1, True, desc="bf16-exclusive"),
        _s(rand(rng, (3, 6), np.int32, -4, 5), 1, desc="int32"),
        _s(rand(rng, (3, 6), np.int64, -4, 5), 0, True, True, desc="int64-exclusive-reverse"),
        _s(rand(rng, (7,), np.float32, low, high), 0, True, desc="1d-exclusive"),
        _s(np.zeros((3, 0), np.float32), 1, True, desc="empty-axis-exclusive"),
        _s(np.zeros((0, 3), np.float32), 1, False, True, desc="empty-batch-reverse"),
    ]
    if ordered:
        nan = np.array([[NAN, 1.0, NAN, 3.0, 0.0, NAN], [NAN, NAN, NAN, NAN, NAN, NAN],
                        [2.0, NAN, -np.inf, np.inf, NAN, 1.0]], np.float32)
        out += [_s(nan, 1, desc="nan"), _s(nan, 1, True, desc="nan-exclusive"),
                _s(nan, 1, False, True, desc="nan-reverse"), _s(nan.astype(np.float16), 0, desc="nan-f16-axis0"),
                _s(rand(rng, (3, 6), np.bool_), 1, desc="bool"),
                _s(rand(rng, (3, 6), np.bool_), 1, True, True, desc="bool-exclusive-reverse"),
                _s(rand(rng, (3, 6), np.uint8, 0, 255), 1, True, desc="uint8-exclusive")]
    else:
        out += [_s(np.array([[100, 100, 100], [-100, -100, -100]], np.int8), 1, desc="int8-wraps"),
                _s(rand(rng, (2, 5), np.complex64, -1, 1), 1, True, desc="complex64-exclusive")]
    return out


def _identity(dt: np.dtype, kind: str) -> Any:
    if kind in ("sum", "product"):
        return 0 if kind == "sum" else 1
    largest = kind == "minimum"  # the identity of a running minimum is the largest value
    if dt.kind == "b":
        return largest
    if dt.kind == "f":
        return np.inf if largest else -np.inf
    info = np.iinfo(dt)
    return info.max if largest else info.min


def _oracle(ufunc: np.ufunc, kind: str) -> Callable[..., np.ndarray]:
    """Inclusive ``ufunc.accumulate`` (float64 for floating sums/products), shifted for ``exclusive``."""

    def oracle(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
        axis %= x.ndim
        y = np.flip(x, axis) if reverse else x
        if kind in ("sum", "product") and y.dtype.kind in "fc":
            y = ufunc.accumulate(y.astype(np.complex128 if y.dtype.kind == "c" else np.float64), axis=axis)
            y = y.astype(x.dtype)
        else:
            y = ufunc.accumulate(y, axis=axis, dtype=x.dtype)
        if exclusive and y.shape[axis]:
            first = np.full_like(np.take(y, [0], axis=axis), _identity(x.dtype, kind))
            y = np.concatenate([first, np.take(y, range(y.shape[axis] - 1), axis=axis)], axis=axis)
        return np.flip(y, axis) if reverse else y

    return oracle


def _errors(method: str, ordered: bool) -> list[ErrorCase]:
    out = [
        ErrorCase(lambda g: getattr(g, method)(g.placeholder((2, 3)), 2), og.ShapeError, "out of range", "bad-axis"),
        ErrorCase(lambda g: getattr(g, method)(g.placeholder((2, 3)), -3), og.ShapeError, "out of range",
                  "bad-neg-axis"),
        ErrorCase(lambda g: getattr(g, method)(g.placeholder(()), 0), og.ShapeError, "rank >= 1", "scalar"),
    ]
    if ordered:
        out.append(ErrorCase(lambda g: getattr(g, method)(g.placeholder((3,), og.complex64), 0), og.DTypeError,
                             "complex", "complex"))
    else:
        out.append(ErrorCase(lambda g: getattr(g, method)(g.placeholder((3,), og.bool_), 0), og.DTypeError, "bool",
                             "bool"))
    return out


def _grad_samples(ordered: bool, low: float, high: float, zeros: bool = False) -> Any:
    """Reverse scans (the defaults start with forward ones). The exclusive forms of the running
    maximum/minimum begin with -inf/+inf, which finite differences cannot take: inclusive ones there.
    ``zeros``: a few zeros, where a running product is still multilinear (finite differences exact)."""

    def samples(rng: np.random.Generator) -> list[Sample]:
        x, y = rand(rng, (3, 6), np.float64, low, high), rand(rng, (2, 3, 4), np.float64, low, high)
        if zeros:  # two zeros in a row: the gradient differs before, at and after the first
            x[0, 2] = x[1, 1] = x[1, 4] = 0.0
            y[0, 1, 1] = y[1, 0, 2] = y[1, 2, 2] = 0.0
            return [_s(x, 1, False, True, desc="f64-reverse-zeros"),
                    _s(y, -2, True, False, desc="f64-middle-exclusive-zeros")]
        if ordered:
            return [_s(x, 1, False, True, desc="f64-reverse"), _s(y, -2, False, True, desc="f64-middle-reverse")]
        return [_s(x, 1, False, True, desc="f64-reverse"),
                _s(y, -2, True, True, desc="f64-middle-exclusive-reverse")]

    return samples


def _record(method: str, op: Any, ufunc: np.ufunc, kind: str, ordered: bool, low: float = -2.0,
            high: float = 2.0) -> OpInfo:
    return OpInfo(method, (op,),
                  lambda g, x, axis, exclusive, reverse: getattr(g, method)(x, axis, exclusive, reverse),
                  lambda rng: _samples(rng, ordered, low, high), _oracle(ufunc, kind), errors=_errors(method, ordered),
                  tol={torch.bfloat16: (2e-2, 3e-2)},  # bf16 running sums round at every step
                  grad_samples=_grad_samples(ordered, low, high, kind == "product"))


RECORDS = [
    _record("cumulative_sum", scan.CUMULATIVE_SUM, np.add, "sum", False),
    _record("cumulative_product", scan.CUMULATIVE_PRODUCT, np.multiply, "product", False, 0.5, 1.5),
    # fmax/fmin ignore NaN: NaN only while every element so far is NaN, as reduce_max/reduce_min
    _record("cumulative_maximum", scan.CUMULATIVE_MAXIMUM, np.fmax, "maximum", True),
    _record("cumulative_minimum", scan.CUMULATIVE_MINIMUM, np.fmin, "minimum", True),
]
