"""Records for sort, argsort, top_k, bottom_k (``opgraph.ops.sort``), with NumPy oracles.

The oracle orders with a stable NumPy sort: ascending ``np.argsort(kind="stable")`` (NaN last),
descending ``np.lexsort`` on (NaN first, then -value), so ties keep input order both ways.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import sort

from .opinfo import ErrorCase, OpInfo, Sample, rand

NAN = np.nan


def _order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable sorting permutation along ``axis``; NaN counts as larger than +inf."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)
    value = np.where(nan, 0, x).astype(np.float64)
    return np.lexsort((-value, ~nan), axis=axis)


def _sort_oracle(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    return np.take_along_axis(x, _order(x, axis, descending), axis=axis)


def _argsort_oracle(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    return _order(x, axis, descending).astype(np.int32)


def _select_oracle(largest: bool) -> Any:
    def oracle(x: np.ndarray, k: int, axis: int) -> list[np.ndarray]:
        idx = np.take(_order(x, axis, largest), range(k), axis=axis)
        return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int32)]

    return oracle


TIES = np.array([[2, 1, 2, 0, 1, 2, 0, 1], [5, 5, 5, 5, 5, 5, 5, 5], [3, 1, 3, 1, 3, 1, 3, 1]], np.int32)
NANS = np.array([[1.0, NAN, -np.inf, 3.0, NAN, np.inf, 0.5], [NAN, 2.0, 2.0, -1.0, NAN, 0.0, 2.0]], np.float32)


def _sort_samples(rng: np.random.Generator) -> list[Sample]:
    def s(x: Any, axis: int, descending: bool, desc: str) -> Sample:
        return Sample([x], {"axis": axis, "descending": descending}, desc)

    return [
        s(rand(rng, (3, 7), np.float32), -1, False, "f32-last"),
        s(rand(rng, (3, 7), np.float32), 0, True, "f32-axis0-desc"),
        s(rand(rng, (2, 5, 4), np.float64), 1, False, "f64-middle"),
        s(rand(rng, (4, 9), np.float16), 1, True, "f16-desc"),
        s(rand(rng, (4, 9), torch.bfloat16), -1, False, "bf16"),
        s(TIES, 1, False, "int32-ties"),
        s(TIES, 1, True, "int32-ties-desc"),
        s(TIES.T.copy().astype(np.int8), 0, True, "int8-ties-axis0-desc"),
        s(np.round(rand(rng, (3, 10), np.float32, -1, 1)) / 2, 1, True, "f32-ties-desc"),
        s(rand(rng, (3, 8), np.bool_), 1, False, "bool"),
        s(rand(rng, (3, 8), np.bool_), 1, True, "bool-desc"),
        s(rand(rng, (3, 8), np.uint8, 0, 255), 1, True, "uint8-desc"),
        s(NANS, 1, False, "nan-last"),
        s(NANS, 1, True, "nan-first-desc"),
        s(np.zeros((3, 0), np.float32), 1, False, "empty-axis"),
        s(np.zeros((0, 4), np.float32), 1, True, "empty-batch"),
    ]


def _select_samples(rng: np.random.Generator) -> list[Sample]:
    def s(x: Any, k: int, axis: int, desc: str) -> Sample:
        return Sample([x], {"k": k, "axis": axis}, desc)

    return [
        s(rand(rng, (3, 8), np.float32), 3, -1, "f32-k3"),
        s(rand(rng, (5, 4), np.float32), 2, 0, "f32-axis0"),
        s(rand(rng, (2, 6, 3), np.float64), 6, 1, "f64-k-is-n"),
        s(rand(rng, (3, 8), np.float32), 0, 1, "k0"),
        s(rand(rng, (4, 9), np.float16), 4, 1, "f16"),
        s(rand(rng, (4, 9), torch.bfloat16), 2, 1, "bf16"),
        s(TIES, 4, 1, "int32-ties-lower-index-first"),
        s(rand(rng, (3, 8), np.int64, -100, 100), 3, 1, "int64"),
        s(rand(rng, (3, 8), np.bool_), 3, 1, "bool"),
        s(NANS, 3, 1, "nan"),
    ]


def _sort_grad_samples(rng: np.random.Generator) -> list[Sample]:
    """Continuous random values: no ties, where sort has no derivative."""
    return [Sample([rand(rng, (3, 7), np.float64)], {"axis": -1, "descending": False}, "f64-last"),
            Sample([rand(rng, (2, 5, 4), np.float64)], {"axis": 1, "descending": True}, "f64-middle-desc")]


def _select_grad_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, (3, 8), np.float64)], {"k": 3, "axis": -1}, "f64-k3"),
            Sample([rand(rng, (5, 2, 4), np.float64)], {"k": 2, "axis": 0}, "f64-axis0")]


def _errors(method: str) -> list[ErrorCase]:
    return [
        ErrorCase(lambda g: getattr(g, method)(g.placeholder((2, 3)), axis=2), og.ShapeError, "out of range",
                  "bad-axis"),
        ErrorCase(lambda g: getattr(g, method)(g.placeholder(())), og.ShapeError, "rank >= 1", "scalar"),
        ErrorCase(lambda g: getattr(g, method)(g.placeholder((3,), og.complex64)), og.DTypeError, "complex",
                  "complex"),
    ]


def _k_too_large_at_run_time(method: str) -> Any:
    def build(g: og.Graph) -> None:
        x = g.placeholder((None,))
        g.run({x: np.zeros(3, np.float32)}, list(getattr(g, method)(x, 4)), device="cpu")

    return build


def _select_errors(method: str) -> list[ErrorCase]:
    def ph(g: og.Graph) -> og.Tensor:
        return g.placeholder((2, 5))

    return [
        ErrorCase(lambda g: getattr(g, method)(ph(g), 6), og.ShapeError, "larger than dimension", "k-too-large"),
        ErrorCase(lambda g: getattr(g, method)(ph(g), 3, axis=0), og.ShapeError, "larger than dimension",
                  "k-too-large-axis0"),
        ErrorCase(lambda g: getattr(g, method)(ph(g), -1), og.AttributeValueError, "k must be", "k-negative"),
        ErrorCase(lambda g: getattr(g, method)(ph(g), 2.0), og.AttributeValueError, "k must be", "k-float"),
        ErrorCase(lambda g: getattr(g, method)(ph(g), 2, axis=-3), og.ShapeError, "out of range", "bad-axis"),
        ErrorCase(lambda g: getattr(g, method)(g.placeholder(()), 1), og.ShapeError, "rank >= 1", "scalar"),
        ErrorCase(lambda g: getattr(g, method)(g.placeholder((3,), og.complex64), 1), og.DTypeError, "complex",
                  "complex"),
        ErrorCase(_k_too_large_at_run_time(method), og.ShapeError, "larger than dimension", "k-too-large-dynamic"),
    ]


RECORDS = [
    OpInfo("sort", (sort.SORT,), lambda g, x, axis, descending: g.sort(x, axis, descending), _sort_samples,
           _sort_oracle, errors=_errors("sort"), grad_samples=_sort_grad_samples),
    OpInfo("argsort", (sort.ARGSORT,), lambda g, x, axis, descending: g.argsort(x, axis, descending),
           _sort_samples, _argsort_oracle, errors=_errors("argsort")),
    OpInfo("top_k", (sort.TOP_K,), lambda g, x, k, axis: list(g.top_k(x, k, axis)), _select_samples,
           _select_oracle(True), errors=_select_errors("top_k"),
           grad_samples=_select_grad_samples),
    OpInfo("bottom_k", (sort.BOTTOM_K,), lambda g, x, k, axis: list(g.bottom_k(x, k, axis)), _select_samples,
           _select_oracle(False), errors=_select_errors("bottom_k"),
           grad_samples=_select_grad_samples),
]
