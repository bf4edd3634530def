"""Records for the loss ops (``opgraph.ops.losses``), with NumPy float64 oracles."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import losses as L

from .opinfo import ErrorCase, OpInfo, Sample, rand

R = og.LossReduction


def _reduce(loss: np.ndarray, reduction: R) -> np.ndarray:
    if reduction is R.NONE:
        return loss
    if reduction is R.SUM:
        return np.asarray(loss.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(loss.sum() / loss.size) if loss.size else np.asarray(np.nan)


def np_log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def np_softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray, axis: int = -1, label_smoothing: float = 0.0,
                             reduction: R = R.MEAN) -> np.ndarray:
    x = logits.astype(np.float64)
    classes = x.shape[axis]
    if labels.dtype.kind in "iu":
        coords = np.arange(classes).reshape([-1 if i == axis % x.ndim else 1 for i in range(x.ndim)])
        target = (np.expand_dims(labels, axis) == coords).astype(np.float64)
    else:
        target = labels.astype(np.float64)
    target = target * (1.0 - label_smoothing) + label_smoothing / classes
    loss = -np.sum(target * np_log_softmax(x, axis), axis=axis)
    return _reduce(loss, reduction).astype(logits.dtype)


def _probabilities(rng: np.random.Generator, shape: tuple[int, ...], axis: int, dtype: Any) -> np.ndarray:
    e = np.exp(rng.uniform(-2, 2, shape))
    return (e / e.sum(axis=axis, keepdims=True)).astype(dtype)


def _labels(rng: np.random.Generator, shape: tuple[int, ...], classes: int, dtype: Any = np.int64) -> np.ndarray:
    return rng.integers(0, classes, shape).astype(dtype)


def _ce_index_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample([rand(rng, (4, 5), np.float64), _labels(rng, (4,), 5)], {"label_smoothing": 0.1}, "f64-mean-smooth"),
        Sample([rand(rng, (2, 5, 3), np.float64), _labels(rng, (2, 3), 5, np.int32)],
               {"axis": 1, "reduction": R.NONE}, "f64-axis1-none-int32"),
        Sample([rand(rng, (4, 5)), _labels(rng, (4,), 5)], {}, "f32-mean"),
        Sample([rand(rng, (3, 4), np.float64), _labels(rng, (3,), 4, np.uint8)],
               {"reduction": R.SUM, "label_smoothing": 0.3}, "f64-sum-uint8"),
        Sample([rand(rng, (4, 3), np.float64), _labels(rng, (3,), 4)], {"axis": 0, "reduction": R.NONE}, "axis0"),
        Sample([rand(rng, (6,), np.float64), np.array(2, np.int64)], {}, "unbatched"),
        Sample([rand(rng, (3, 7), np.float16, -8, 8), _labels(rng, (3,), 7)], {"label_smoothing": 0.2}, "f16"),
        Sample([rand(rng, (3, 7), torch.bfloat16, -8, 8), _labels(rng, (3,), 7)], {"reduction": R.SUM}, "bf16"),
        Sample([rand(rng, (2, 4), np.float32, -500, 500), _labels(rng, (2,), 4)], {}, "large-logits"),
        Sample([np.zeros((0, 5), np.float32), np.zeros((0,), np.int64)], {}, "empty-mean"),
        Sample([np.zeros((0, 5), np.float32), np.zeros((0,), np.int64)], {"reduction": R.SUM}, "empty-sum"),
    ]


def _ce_prob_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample([rand(rng, (4, 5), np.float64), _probabilities(rng, (4, 5), -1, np.float64)],
               {"label_smoothing": 0.1, "reduction": R.NONE}, "f64-none-smooth"),
        Sample([rand(rng, (3, 4, 2), np.float64), _probabilities(rng, (3, 4, 2), 1, np.float64)],
               {"axis": 1}, "f64-axis1-mean"),
        Sample([rand(rng, (4, 5)), _probabilities(rng, (4, 5), -1, np.float32)], {"reduction": R.SUM}, "f32-sum"),
        Sample([rand(rng, (3, 5), np.float64), rand(rng, (3, 5), np.float64, 0, 1)],
               {"label_smoothing": 0.25}, "unnormalised"),
        Sample([rand(rng, (5,), np.float64), _probabilities(rng, (5,), 0, np.float64)], {}, "unbatched"),
        Sample([rand(rng, (2, 6), np.float16), _probabilities(rng, (2, 6), -1, np.float16)], {}, "f16"),
    ]


def _ce_errors() -> list[ErrorCase]:
    def ce(shape: tuple[int, ...], labels_shape: tuple[int, ...], labels_dtype: og.DType = og.int64,
           dtype: og.DType = og.float32, **kw: Any) -> Any:
        def build(g: og.Graph) -> og.Tensor:
            return g.softmax_cross_entropy(g.placeholder(shape, dtype), g.placeholder(labels_shape, labels_dtype),
                                           **kw)
        return build

    return [
        ErrorCase(ce((2, 3), (2,), dtype=og.int32), og.DTypeError, "logits dtype int32", "int-logits"),
        ErrorCase(ce((2, 3), (2, 3), og.float64), og.DTypeError, "probability labels must have the logits' dtype",
                  "label-dtype-mismatch"),
        ErrorCase(ce((2, 3), (2,), og.bool_), og.DTypeError, "integer class indices", "bool-labels"),
        ErrorCase(ce((2, 3), (3,)), og.ShapeError, "class-index labels", "index-shape"),
        ErrorCase(ce((2, 3), (2, 3, 1)), og.ShapeError, "class-index labels", "index-rank"),
        ErrorCase(ce((2, 3), (3, 2), og.float32), og.ShapeError, "probability labels", "prob-shape"),
        ErrorCase(ce((2, 3), (2,), reduction="mean"), og.AttributeValueError, "og.LossReduction", "bad-reduction"),
        ErrorCase(ce((2, 3), (2,), label_smoothing=1.0), og.AttributeValueError, r"\[0, 1\)", "smoothing-one"),
        ErrorCase(ce((2, 3), (2,), label_smoothing=-0.1), og.AttributeValueError, r"\[0, 1\)", "smoothing-neg"),
        ErrorCase(ce((2, 3), (2,), axis=2), og.ShapeError, "out of range", "bad-axis"),
        ErrorCase(ce((), ()), og.ShapeError, "rank >= 1", "scalar-logits"),
        ErrorCase(ce((2, 0), (2,)), og.ShapeError, "class axis is empty", "no-classes"),
    ]


# ---- elementwise losses ------------------------------------------------------------------------
def _stable_bce(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))


def _pair_oracle(fn: Any) -> Any:
    def oracle(x: np.ndarray, y: np.ndarray, reduction: R = R.MEAN, **kw: Any) -> np.ndarray:
        loss = fn(x.astype(np.float64), y.astype(np.float64), **kw)
        return _reduce(loss, reduction).astype(x.dtype)

    return oracle


def _huber(d_x: np.ndarray, y: np.ndarray, delta: float = 1.0) -> np.ndarray:
    d = np.abs(d_x - y)
    return np.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))


def _pair_samples(labels01: bool = False, **extra: Any) -> Any:
    def target(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> Any:
        return rand(rng, shape, dtype, 0, 1) if labels01 else rand(rng, shape, dtype, -3, 3)

    def samples(rng: np.random.Generator) -> list[Sample]:
        return [
            Sample([rand(rng, (3, 4), np.float64, -3, 3), target(rng, (3, 4), np.float64)], dict(extra), "f64-mean"),
            Sample([rand(rng, (2, 3, 2), np.float64, -3, 3), target(rng, (2, 3, 2), np.float64)],
                   {"reduction": R.NONE, **extra}, "f64-none"),
            Sample([rand(rng, (5,), np.float32, -3, 3), target(rng, (5,), np.float32)],
                   {"reduction": R.SUM, **extra}, "f32-sum"),
            Sample([rand(rng, (4, 4), np.float16, -3, 3), target(rng, (4, 4), np.float16)], dict(extra), "f16"),
            Sample([rand(rng, (4, 4), torch.bfloat16, -3, 3), target(rng, (4, 4), torch.bfloat16)],
                   {"reduction": R.SUM, **extra}, "bf16"),
            Sample([rand(rng, (), np.float64, -3, 3), target(rng, (), np.float64)], dict(extra), "scalar"),
            Sample([np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)], dict(extra), "empty-mean"),
            Sample([np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)], {"reduction": R.SUM, **extra},
                   "empty-sum"),
        ]

    return samples


def _pair_errors(method: str, **kw: Any) -> list[ErrorCase]:
    def call(xs: tuple[int, ...], ys: tuple[int, ...], xd: og.DType = og.float32, yd: og.DType = og.float32,
             **more: Any) -> Any:
        return lambda g: getattr(g, method)(g.placeholder(xs, xd), g.placeholder(ys, yd), **kw, **more)

    return [
        ErrorCase(call((2, 3), (2, 3), og.int32, og.int32), og.DTypeError, "int32", "int-inputs"),
        ErrorCase(call((2, 3), (2, 3), og.float32, og.float64), og.DTypeError, "the prediction's dtype",
                  "dtype-mismatch"),
        ErrorCase(call((2, 3), (3, 2)), og.ShapeError, "the prediction's shape", "shape-mismatch"),
        ErrorCase(call((2, 3), (2, 1)), og.ShapeError, "the prediction's shape", "no-broadcasting"),
        ErrorCase(call((2, 3), (2, 3), reduction=None), og.AttributeValueError, "og.LossReduction", "bad-reduction"),
    ]


def _huber_errors() -> list[ErrorCase]:
    def call(delta: Any) -> Any:
        return lambda g: g.huber(g.placeholder((2,)), g.placeholder((2,)), delta=delta)

    return [*_pair_errors("huber"),
            ErrorCase(call(0.0), og.AttributeValueError, "delta must be", "zero-delta"),
            ErrorCase(call(-1.0), og.AttributeValueError, "delta must be", "negative-delta"),
            ErrorCase(call(float("inf")), og.AttributeValueError, "delta must be", "inf-delta")]


_HALF_TOL = {torch.float16: (4e-3, 4e-3), torch.bfloat16: (2e-2, 2e-2)}


RECORDS = [
    OpInfo("softmax_cross_entropy", (L.SOFTMAX_CROSS_ENTROPY,),
           lambda g, x, y, **kw: g.softmax_cross_entropy(x, y, **kw), _ce_index_samples, np_softmax_cross_entropy,
           errors=_ce_errors(), tol=_HALF_TOL),
    OpInfo("softmax_cross_entropy_probabilities", (L.SOFTMAX_CROSS_ENTROPY,),
           lambda g, x, y, **kw: g.softmax_cross_entropy(x, y, **kw), _ce_prob_samples, np_softmax_cross_entropy,
           tol=_HALF_TOL),
    OpInfo("sigmoid_cross_entropy", (L.SIGMOID_CROSS_ENTROPY,),
           lambda g, x, y, **kw: g.sigmoid_cross_entropy(x, y, **kw), _pair_samples(labels01=True),
           _pair_oracle(_stable_bce), errors=_pair_errors("sigmoid_cross_entropy"), tol=_HALF_TOL),
    OpInfo("mse", (L.MSE_LOSS,), lambda g, x, y, **kw: g.mse(x, y, **kw), _pair_samples(),
           _pair_oracle(lambda x, y: (x - y) ** 2), errors=_pair_errors("mse"), tol=_HALF_TOL),
    OpInfo("l1", (L.L1_LOSS,), lambda g, x, y, **kw: g.l1(x, y, **kw), _pair_samples(),
           _pair_oracle(lambda x, y: np.abs(x - y)), errors=_pair_errors("l1"), tol=_HALF_TOL),
    OpInfo("huber", (L.HUBER_LOSS,), lambda g, x, y, **kw: g.huber(x, y, **kw), _pair_samples(delta=1.5),
           _pair_oracle(_huber), errors=_huber_errors(), tol=_HALF_TOL),
    OpInfo("huber_default_delta", (L.HUBER_LOSS,), lambda g, x, y, **kw: g.huber(x, y, **kw), _pair_samples(),
           _pair_oracle(_huber), tol=_HALF_TOL),
]
