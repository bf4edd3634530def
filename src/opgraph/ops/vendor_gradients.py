"""Gradients as PyTorch's one call each, for where no kernels are generated (the CPU). The torch frontend makes
them when ``ConvertContext.vendor_ops`` is set. PyTorch's decompositions spell each as several elementwise ops, a
pass over memory each where nothing fuses them: over a language model's vocabulary the loss gradients alone were
``exp``, two ``mul``, ``sub``, a zero fill and a one-hot scatter over (tokens, vocabulary). With these ops, BERT's
``--quick`` training step on a 2-core CPU went from 0.76x to 0.97x eager's speed (``benchmarks/cpu_training.py``,
RESULTS.md, eleventh session).

* ``log_softmax_gradient(gy, y)``: ``gy - exp(y) * sum(gy, axis)``, the gradient of ``y = log_softmax(x, axis)``
  (PyTorch's ``_log_softmax_backward_data``).
* ``nll_loss_gradient(gy, x, target, total_weight[, weight])``: the gradient of the negative log-likelihood
  ``-w[t] x[n, t]`` with respect to ``x`` (PyTorch's ``nll_loss_backward``): ``-w[t] * gy`` at each target
  (divided by ``total_weight`` for the mean), 0 elsewhere and for ``ignore_index``.
* ``gelu_gradient(gy, x)``: ``gy * d gelu(x) / dx``, exact (erf) or tanh-approximated (PyTorch's ``gelu_backward``),
  where the erf form is spelled as eleven elementwise ops.
* ``embedding_gradient(gy, indices)``: each row of ``gy`` added into the weight row its index names, none for
  ``padding_idx``, divided by the index's count with ``scale_grad_by_freq`` (PyTorch's ``embedding_dense_backward``:
  a zero fill and an index add, where the spelling copies a broadcast zero and scatters behind ~9 index and mask ops).

>>> import opgraph as og, torch
>>> g = og.Graph()
>>> gy, y = g.placeholder((1, 2)), g.placeholder((1, 2))
>>> dx = g._apply(LOG_SOFTMAX_GRADIENT, [gy, y], LogSoftmaxGradientAttrs(axis=1))
>>> logp = torch.tensor([[0.25, 0.75]]).log()
>>> g.run({gy: [[1.0, 0.0]], y: logp}, [dx])[0].tolist()
[[0.75, -0.75]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.dtype import FLOAT_DTYPES, int32, int64
from ..core.errors import AttributeValueError, DTypeError, ShapeError
from ..core.shape import normalize_axis
from ..core.types import TensorType
from ._padding import check_same_dims
from ._rules import expect_arity, expect_dtype, same_dtype
from .activation import GeluAttrs, _gelu_rule
from .losses import LossReduction
from .registry import FusionKind, LowerContext, OpDef, attrs


# ---- log_softmax_gradient ---------------------------------------------------------------------------------------
@attrs
class LogSoftmaxGradientAttrs:
    axis: int  # normalised: non-negative (as softmax's)


def _log_softmax_rule(a: LogSoftmaxGradientAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    same_dtype(ins)
    for t in ins:
        expect_dtype(t, FLOAT_DTYPES)
    gy, y = ins
    check_same_dims(gy.shape, y.shape, "the incoming gradient (against log_softmax's result)")
    if normalize_axis(a.axis, y.rank) != a.axis:
        raise ShapeError(f"axis {a.axis} must be non-negative (the converter normalises it)")
    return y


def _log_softmax_lower(ctx: LowerContext) -> Callable[..., Any]:
    axis = ctx.attrs.axis
    return lambda gy, y: torch._log_softmax_backward_data(gy, y, axis, y.dtype)


LOG_SOFTMAX_GRADIENT = OpDef("log_softmax_gradient", infer=_log_softmax_rule, lower=_log_softmax_lower,
                             attrs=LogSoftmaxGradientAttrs, fusion=FusionKind.OPAQUE, differentiable=False,
                             doc="gy - exp(y) * sum(gy, axis): the gradient of y = log_softmax(x) in one call")


# ---- nll_loss_gradient ------------------------------------------------------------------------------------------
ATEN_REDUCTIONS = {LossReduction.NONE: 0, LossReduction.MEAN: 1, LossReduction.SUM: 2}  # ATen's enum


@attrs
class NllLossGradientAttrs:
    reduction: LossReduction = LossReduction.MEAN
    ignore_index: int = -100
    has_weight: bool = False


def _nll_rule(a: NllLossGradientAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    if not isinstance(a.reduction, LossReduction):
        raise AttributeValueError(f"reduction must be an og.LossReduction, got {a.reduction!r}")
    if isinstance(a.ignore_index, bool) or not isinstance(a.ignore_index, int) or not isinstance(a.has_weight, bool):
        raise AttributeValueError(f"ignore_index must be an int and has_weight a bool, got {a.ignore_index!r} and "
                                  f"{a.has_weight!r}")
    expect_arity(ins, 4 + a.has_weight)
    gy, x, target, total, *weight = ins
    same_dtype((gy, x, total, *weight))
    expect_dtype(x, FLOAT_DTYPES)
    if target.dtype is not int64:
        raise DTypeError(f"expects int64 targets, got {target.dtype.name}")
    if x.rank not in (1, 2) or target.rank != x.rank - 1 or (x.rank == 2 and None not in (x.shape[0], target.shape[0])
                                                             and x.shape[0] != target.shape[0]):
        raise ShapeError(f"x must be (N, C) with targets (N,) or (C,) with a scalar target, got {x} and {target}")
    per_item = a.reduction is LossReduction.NONE and x.rank == 2
    if (gy.shape != target.shape) if per_item else gy.rank != 0:
        raise ShapeError(f"the incoming gradient must be {'(N,)' if per_item else 'a scalar'} for reduction "
                         f"{a.reduction.name}, got {gy}")
    if total.rank != 0 or any(w.rank != 1 or None not in (w.shape[0], x.shape[-1]) and w.shape[0] != x.shape[-1]
                              for w in weight):
        raise ShapeError(f"total_weight must be a scalar and weight (C,), got {total} and {weight}")
    return x


def _nll_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: NllLossGradientAttrs = ctx.attrs
    reduction = ATEN_REDUCTIONS[a.reduction]

    def run(gy: torch.Tensor, x: torch.Tensor, target: torch.Tensor, total: torch.Tensor,
            *weight: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.nll_loss_backward(gy, x, target, weight[0] if weight else None, reduction,
                                                a.ignore_index, total)

    return run


NLL_LOSS_GRADIENT = OpDef("nll_loss_gradient", infer=_nll_rule, lower=_nll_lower, attrs=NllLossGradientAttrs,
                          fusion=FusionKind.OPAQUE, differentiable=False,
                          doc="the gradient of the negative log-likelihood loss with respect to the log-probabilities")


# ---- gelu_gradient ----------------------------------------------------------------------------------------------
def _gelu_gradient_rule(a: GeluAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    """gelu's rule on x (its attributes are gelu's), and the incoming gradient of x's type."""
    expect_arity(ins, 2)
    x = _gelu_rule(a, ins[1:])
    same_dtype(ins)
    check_same_dims(ins[0].shape, x.shape, "the incoming gradient (against x)")
    return x


def _gelu_lower(ctx: LowerContext) -> Callable[..., Any]:
    approximate = ctx.attrs.approximate.value
    return lambda gy, x: torch.ops.aten.gelu_backward(gy, x, approximate=approximate)


GELU_GRADIENT = OpDef("gelu_gradient", infer=_gelu_gradient_rule, lower=_gelu_lower, attrs=GeluAttrs,
                      fusion=FusionKind.OPAQUE, differentiable=False, doc="gy times GELU's derivative at x, one call")


# ---- embedding_gradient -----------------------------------------------------------------------------------------
@attrs
class EmbeddingGradientAttrs:
    num_weights: int
    padding_idx: int = -1  # none
    scale_grad_by_freq: bool = False


def _embedding_rule(a: EmbeddingGradientAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    if isinstance(a.num_weights, bool) or not isinstance(a.num_weights, int) or a.num_weights < 0 \
            or isinstance(a.padding_idx, bool) or not isinstance(a.padding_idx, int) \
            or not isinstance(a.scale_grad_by_freq, bool):
        raise AttributeValueError(f"num_weights must be an int >= 0, padding_idx an int and scale_grad_by_freq a "
                                  f"bool, got {a.num_weights!r}, {a.padding_idx!r}, {a.scale_grad_by_freq!r}")
    expect_arity(ins, 2)
    gy, indices = ins
    expect_dtype(gy, FLOAT_DTYPES)
    if indices.dtype not in (int32, int64):
        raise DTypeError(f"expects int32 or int64 indices, got {indices.dtype.name}")
    if gy.rank != indices.rank + 1:
        raise ShapeError(f"the incoming gradient must be the indices' shape plus the embedding dim, got {gy} and "
                         f"{indices}")
    check_same_dims(gy.shape[:-1], indices.shape, "the incoming gradient less its last dim (against the indices)")
    return TensorType((a.num_weights, gy.shape[-1]), gy.dtype)


def _embedding_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: EmbeddingGradientAttrs = ctx.attrs
    check = getattr(ctx.options, "check_indices", True)

    def run(gy: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        # PyTorch's CPU kernel adds rows at the indices unchecked: one that is out of range must not reach it
        bad = (indices < 0) | (indices >= a.num_weights) if check and indices.numel() else None
        if bad is not None and bool(bad.any()):
            raise IndexError(f"embedding_gradient: index {int(indices[bad][0])} is out of range for "
                             f"{a.num_weights} rows")
        return torch.ops.aten.embedding_dense_backward(gy, indices, a.num_weights, a.padding_idx,
                                                       a.scale_grad_by_freq)

    return run


EMBEDDING_GRADIENT = OpDef("embedding_gradient", infer=_embedding_rule, lower=_embedding_lower,
                           attrs=EmbeddingGradientAttrs, fusion=FusionKind.OPAQUE, differentiable=False,
                           doc="an embedding table's gradient: gy's rows added into the rows the indices name")

__all__ = ["ATEN_REDUCTIONS", "EMBEDDING_GRADIENT", "GELU_GRADIENT", "LOG_SOFTMAX_GRADIENT", "NLL_LOSS_GRADIENT",
           "EmbeddingGradientAttrs", "LogSoftmaxGradientAttrs", "NllLossGradientAttrs"]
