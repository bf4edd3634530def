"""Loss gradients: ``_log_softmax_backward_data`` and ``nll_loss_backward``. Where no kernels are generated
(``ConvertContext.vendor_ops``) each is one vendor op (``ops/vendor_gradients.py``), PyTorch's one call; elsewhere the
elementwise spelling, which fuses. The backend keeps both whole only where vendor ops are made. (GELU's and the
embedding's gradients, the other ops of that module, are made by their converters in elementwise.py and nn.py.)"""

from __future__ import annotations

from typing import Any

import torch

from ....core.dtype import from_torch, int64
from ....ir.graph import Tensor
from ....ops.vendor_gradients import (
    ATEN_REDUCTIONS,
    LOG_SOFTMAX_GRADIENT,
    NLL_LOSS_GRADIENT,
    LogSoftmaxGradientAttrs,
    NllLossGradientAttrs,
)
from ..registry import ConvertContext, Unsupported, converts
from .nn import _cast, _floating

aten = torch.ops.aten
_REDUCTION_OF = {v: k for k, v in ATEN_REDUCTIONS.items()}  # ATen's reduction enum -> og.LossReduction


@converts(aten._log_softmax_backward_data.default)
def _log_softmax_backward(ctx: ConvertContext, gy: Tensor, y: Tensor, dim: int, input_dtype: torch.dtype) -> Tensor:
    g = ctx.g  # dy - exp(y) * sum(dy)
    _floating(gy, y)
    if ctx.vendor_ops and gy.type == y.type:
        dx = g._apply(LOG_SOFTMAX_GRADIENT, [gy, y], LogSoftmaxGradientAttrs(dim % max(y.rank, 1)))
    else:
        dx = g.subtract(gy, g.multiply(g.exp(y), g.reduce_sum(gy, dim, keepdims=True)))
    return _cast(ctx, dx, from_torch(input_dtype))


@converts(aten.nll_loss_backward.default)
def _nll_loss_backward(ctx: ConvertContext, gy: Tensor, x: Tensor, target: Tensor, weight: Tensor | None,
                       reduction: int, ignore_index: int, total_weight: Tensor) -> Tensor:
    """``-w[t] * gy`` (over ``total_weight`` for the mean) at each target, 0 elsewhere and at ``ignore_index``."""
    g = ctx.g
    _floating(gy, x, weight)
    if reduction not in _REDUCTION_OF or x.rank not in (1, 2) or x.shape[-1] is None:
        raise Unsupported(f"nll_loss_backward of reduction {reduction!r} and input {x}")
    target = _cast(ctx, target, int64)
    if ctx.vendor_ops:
        ins = [gy, x, target, _cast(ctx, total_weight, x.dtype)]
        ins += [_cast(ctx, weight, x.dtype)] if weight is not None else []
        attrs = NllLossGradientAttrs(_REDUCTION_OF[reduction], int(ignore_index), weight is not None)
        return g._apply(NLL_LOSS_GRADIENT, ins, attrs)
    classes = int(x.shape[-1])
    picked = g.one_hot(target, classes, dtype=x.dtype)  # 0 rows for targets outside [0, C), ignore_index too
    keep = g.not_equal(target, int(ignore_index))
    scale: Any = gy if reduction != 1 else g.divide(gy, _cast(ctx, total_weight, gy.dtype))
    if weight is not None:
        scale = g.multiply(scale, g.gather(_cast(ctx, weight, x.dtype), g.select(keep, target, 0), axis=0))
    scale = g.select(keep, g.negative(scale), 0.0)
    return g.multiply(picked, g.expand_dims(scale, -1) if x.rank == 2 else scale)
