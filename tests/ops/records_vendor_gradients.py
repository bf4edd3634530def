"""Records for ops/vendor_gradients.py (made by the torch frontend; built here directly from their attributes). The
oracles are the formulas in NumPy float64: ``gy - exp(y) * sum(gy)`` for log_softmax_gradient, the negative weight
times the incoming gradient at each target (over the total weight for the mean) for nll_loss_gradient, GELU's
derivative (erf or tanh form) times gy, and a row-by-row sum for embedding_gradient."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops.activation import GeluAttrs
from opgraph.ops.vendor_gradients import (
    EMBEDDING_GRADIENT,
    GELU_GRADIENT,
    LOG_SOFTMAX_GRADIENT,
    NLL_LOSS_GRADIENT,
    EmbeddingGradientAttrs,
    LogSoftmaxGradientAttrs,
    NllLossGradientAttrs,
)

from .opinfo import ErrorCase, OpInfo, Sample, rand


def _ph(g: og.Graph, shape: tuple[int, ...], dtype: og.DType = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


# ---- log_softmax_gradient ---------------------------------------------------------------------------------------
def _ls_build(g: og.Graph, gy: og.Tensor, y: og.Tensor, **kw: Any) -> og.Tensor:
    return g._apply(LOG_SOFTMAX_GRADIENT, [gy, y], LogSoftmaxGradientAttrs(**kw))


def np_log_softmax_gradient(gy: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    gy64, y64 = gy.astype(np.float64), y.astype(np.float64)
    return gy64 - np.exp(y64) * gy64.sum(axis=axis, keepdims=True)


def _log_probs(rng: np.random.Generator, shape: tuple[int, ...], axis: int, dtype: Any = np.float32) -> Any:
    x = rng.uniform(-3.0, 3.0, shape)
    x = x - np.log(np.exp(x).sum(axis=axis, keepdims=True))  # a real log_softmax: exp sums to 1 along axis
    return x.astype(dtype) if dtype is not torch.bfloat16 else torch.from_numpy(x.astype(np.float32)).bfloat16()


def _ls_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample([rand(rng, (4, 7)), _log_probs(rng, (4, 7), 1)], {"axis": 1}, "f32-rows"),
        Sample([rand(rng, (3, 5, 2), np.float64), _log_probs(rng, (3, 5, 2), 1, np.float64)], {"axis": 1},
               "f64-middle-axis"),
        Sample([rand(rng, (2, 6), torch.bfloat16), _log_probs(rng, (2, 6), 1, torch.bfloat16)], {"axis": 1}, "bf16"),
        Sample([rand(rng, (0, 3)), rand(rng, (0, 3))], {"axis": 1}, "empty"),
    ]


LS_ERRORS = [
    ErrorCase(lambda g: _ls_build(g, _ph(g, (2, 3)), _ph(g, (3, 2)), axis=1), og.ShapeError,
              r"incoming gradient \(against log_softmax's result\) has shape \(2, 3\), expected \(3, 2\)", "shapes"),
    ErrorCase(lambda g: _ls_build(g, _ph(g, (2, 3)), _ph(g, (2, 3), og.float64), axis=1), og.DTypeError, "one dtype",
              "mixed-dtypes"),
    ErrorCase(lambda g: _ls_build(g, _ph(g, (2,), og.int32), _ph(g, (2,), og.int32), axis=0), og.DTypeError, "int32",
              "integer"),
    ErrorCase(lambda g: _ls_build(g, _ph(g, (2, 3)), _ph(g, (2, 3)), axis=2), og.ShapeError,
              "axis 2 is out of range for rank 2", "axis"),
    ErrorCase(lambda g: _ls_build(g, _ph(g, (2, 3)), _ph(g, (2, 3)), axis=-1), og.ShapeError,
              "must be non-negative", "negative-axis"),
]


# ---- nll_loss_gradient ------------------------------------------------------------------------------------------
def _nll_build(g: og.Graph, *ins: og.Tensor, **kw: Any) -> og.Tensor:
    return g._apply(NLL_LOSS_GRADIENT, list(ins), NllLossGradientAttrs(has_weight=len(ins) == 5, **kw))


def np_nll_loss_gradient(gy: np.ndarray, x: np.ndarray, target: np.ndarray, total: np.ndarray, *weight: np.ndarray,
                         reduction: og.LossReduction = og.LossReduction.MEAN, ignore_index: int = -100) -> np.ndarray:
    rows = x.reshape(-1, x.shape[-1])
    out = np.zeros(rows.shape, np.float64)
    targets = np.asarray(target).reshape(-1)
    grads = np.broadcast_to(np.asarray(gy, np.float64).reshape(-1), targets.shape)
    for n, t in enumerate(targets):
        if t == ignore_index:
            continue
        w = float(weight[0][t]) if weight else 1.0
        out[n, t] = -w * grads[n] / (float(total) if reduction is og.LossReduction.MEAN else 1.0)
    return out.reshape(x.shape)


def _nll_samples(rng: np.random.Generator) -> list[Sample]:
    def case(n: int, c: int, reduction: og.LossReduction, dtype: Any = np.float32, weighted: bool = False,
             ignore: int = -100) -> list[Any]:
        target = rng.integers(0, c, n).astype(np.int64)
        if ignore >= 0:
            target[0] = ignore
        gy = rand(rng, (n,) if reduction is og.LossReduction.NONE else (), dtype)
        ins = [gy, rand(rng, (n, c), dtype), target, np.asarray(rng.uniform(1.0, 3.0), dtype)]
        return ins + ([rng.uniform(0.5, 2.0, c).astype(dtype)] if weighted else [])

    return [
        Sample(case(5, 4, og.LossReduction.MEAN), {}, "f32-mean"),
        Sample(case(6, 3, og.LossReduction.SUM, np.float64, weighted=True), {"reduction": og.LossReduction.SUM},
               "f64-sum-weighted"),
        Sample(case(4, 5, og.LossReduction.NONE, ignore=2), {"reduction": og.LossReduction.NONE, "ignore_index": 2},
               "f32-none-ignore"),
        Sample([np.asarray(0.5, np.float32), rand(rng, (3,)), np.asarray(1, np.int64), np.asarray(1.0, np.float32)],
               {}, "f32-one-sample"),
    ]


NLL_ERRORS = [
    ErrorCase(lambda g: _nll_build(g, _ph(g, ()), _ph(g, (2, 3)), _ph(g, (2,), og.int32), _ph(g, ())),
              og.DTypeError, "int64 targets", "int32-targets"),
    ErrorCase(lambda g: _nll_build(g, _ph(g, ()), _ph(g, (2, 3)), _ph(g, (3,), og.int64), _ph(g, ())),
              og.ShapeError, "targets", "target-count"),
    ErrorCase(lambda g: _nll_build(g, _ph(g, (2,)), _ph(g, (2, 3)), _ph(g, (2,), og.int64), _ph(g, ())),
              og.ShapeError, "a scalar", "mean-of-a-vector-gradient"),
    ErrorCase(lambda g: _nll_build(g, _ph(g, ()), _ph(g, (2, 3)), _ph(g, (2,), og.int64), _ph(g, ()),
                                   reduction="mean"), og.AttributeValueError, "reduction must be an og.LossReduction",
              "reduction-as-a-string"),
    ErrorCase(lambda g: _nll_build(g, _ph(g, ()), _ph(g, (2, 3)), _ph(g, (2,), og.int64), _ph(g, ()), _ph(g, (4,))),
              og.ShapeError, "weight", "weight-size"),
]

# ---- gelu_gradient ----------------------------------------------------------------------------------------------
def _gelu_build(g: og.Graph, gy: og.Tensor, x: og.Tensor, **kw: Any) -> og.Tensor:
    return g._apply(GELU_GRADIENT, [gy, x], GeluAttrs(**kw))


def np_gelu_gradient(gy: Any, x: Any, approximate: og.GeluApproximation = og.GeluApproximation.NONE) -> np.ndarray:
    gy64, x64 = (np.asarray(v.float() if isinstance(v, torch.Tensor) else v, np.float64) for v in (gy, x))
    if approximate is og.GeluApproximation.TANH:
        k = math.sqrt(2.0 / math.pi)
        inner = k * (x64 + 0.044715 * x64 ** 3)
        t = np.tanh(inner)
        d = 0.5 * (1.0 + t) + 0.5 * x64 * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x64 ** 2)
    else:
        cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x64 / math.sqrt(2.0)))
        d = cdf + x64 * np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi)
    return gy64 * d


def _gelu_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample([rand(rng, (3, 7)), rand(rng, (3, 7), low=-4.0, high=4.0)], {}, "f32-erf"),
        Sample([rand(rng, (2, 3, 4), np.float64), rand(rng, (2, 3, 4), np.float64)],
               {"approximate": og.GeluApproximation.TANH},
               "f64-tanh"),
        Sample([rand(rng, (5,), torch.bfloat16), rand(rng, (5,), torch.bfloat16)], {}, "bf16"),
    ]


GELU_ERRORS = [
    ErrorCase(lambda g: _gelu_build(g, _ph(g, (2, 3)), _ph(g, (3, 2))), og.ShapeError,
              r"incoming gradient \(against x\) has shape \(2, 3\), expected \(3, 2\)", "shapes"),
    ErrorCase(lambda g: _gelu_build(g, _ph(g, (2,)), _ph(g, (2,)), approximate="tanh"), og.AttributeValueError,
              "approximate must be a GeluApproximation", "approximate-as-a-string"),
    ErrorCase(lambda g: _gelu_build(g, _ph(g, (2,), og.int32), _ph(g, (2,), og.int32)), og.DTypeError, "int32",
              "integer"),
]


# ---- embedding_gradient -----------------------------------------------------------------------------------------
def _embedding_build(g: og.Graph, gy: og.Tensor, indices: og.Tensor, **kw: Any) -> og.Tensor:
    return g._apply(EMBEDDING_GRADIENT, [gy, indices], EmbeddingGradientAttrs(**kw))


def np_embedding_gradient(gy: np.ndarray, indices: np.ndarray, num_weights: int, padding_idx: int = -1,
                          scale_grad_by_freq: bool = False) -> np.ndarray:
    rows, idx = np.asarray(gy, np.float64).reshape(-1, gy.shape[-1]), np.asarray(indices).reshape(-1)
    counts = np.bincount(idx, minlength=num_weights)
    out = np.zeros((num_weights, rows.shape[1]))
    for row, i in zip(rows, idx, strict=True):
        if i != padding_idx:
            out[i] += row / (counts[i] if scale_grad_by_freq else 1)
    return out


def _embedding_samples(rng: np.random.Generator) -> list[Sample]:
    def s(shape: tuple[int, ...], n: int, dt: Any, desc: str, index_dt: Any = np.int64, **kw: Any) -> Sample:
        idx = rng.integers(0, n, shape).astype(index_dt)
        return Sample([rand(rng, (*shape, 3), dt), idx], {"num_weights": n, **kw}, desc)

    return [
        s((4, 5), 6, np.float32, "f32-repeated-rows"),
        s((7,), 4, np.float64, "f64-padding-scaled", padding_idx=1, scale_grad_by_freq=True),
        s((2, 3), 5, np.float32, "int32-indices", index_dt=np.int32),
    ]


EMBEDDING_ERRORS = [
    ErrorCase(lambda g: _embedding_build(g, _ph(g, (2, 3)), _ph(g, (3,), og.int64), num_weights=4), og.ShapeError,
              r"less its last dim \(against the indices\) has shape \(2\), expected \(3\)", "rows"),
    ErrorCase(lambda g: _embedding_build(g, _ph(g, (2, 3)), _ph(g, (2,), og.float32), num_weights=4), og.DTypeError,
              "int32 or int64 indices", "float-indices"),
    ErrorCase(lambda g: _embedding_build(g, _ph(g, (2, 3)), _ph(g, (2,), og.int64), num_weights=-1),
              og.AttributeValueError, "num_weights must be", "num-weights"),
]

RECORDS = [
    OpInfo("log_softmax_gradient", (LOG_SOFTMAX_GRADIENT,), _ls_build, _ls_samples, np_log_softmax_gradient,
           errors=LS_ERRORS),
    OpInfo("nll_loss_gradient", (NLL_LOSS_GRADIENT,), _nll_build, _nll_samples, np_nll_loss_gradient,
           errors=NLL_ERRORS),
    OpInfo("gelu_gradient", (GELU_GRADIENT,), _gelu_build, _gelu_samples, np_gelu_gradient, errors=GELU_ERRORS,
           tol={torch.float32: (1e-5, 1e-6)}),
    OpInfo("embedding_gradient", (EMBEDDING_GRADIENT,), _embedding_build, _embedding_samples, np_embedding_gradient,
           errors=EMBEDDING_ERRORS),
]
