"""Neural-network ops: softmax, log_softmax (MPSGraph ``softMax``). float16/bfloat16 compute in float32."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.dtype import FLOAT_DTYPES
from ..core.errors import ShapeError
from ..core.shape import normalize_axis
from ..core.types import TensorType
from ..ir.graph import GraphCore, Tensor
from ._rules import expect_arity, expect_dtype
from .norm import compute_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp


@attrs
class SoftmaxAttrs:
    axis: int


def _softmax_rule(a: SoftmaxAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    expect_dtype(ins[0], FLOAT_DTYPES)
    if normalize_axis(a.axis, ins[0].rank) != a.axis:
        raise ShapeError(f"axis {a.axis} must be non-negative (the builder normalises it)")
    return ins[0]


def _softmax_lowering(fn: Callable[..., torch.Tensor]) -> Callable[[LowerContext], Callable[..., Any]]:
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        axis, dt = ctx.attrs.axis, ctx.in_types[0].dtype
        out, ct = dt.torch_dtype, compute_dtype(dt)
        if ct == out:
            return lambda x: fn(x, axis)
        return lambda x: fn(x, axis, dtype=ct).to(out)

    return lower


SOFTMAX = OpDef("softmax", infer=_softmax_rule, lower=_softmax_lowering(torch.softmax), attrs=SoftmaxAttrs,
                fusion=FusionKind.REDUCTION, doc="exp(x) / sum(exp(x)) along axis")
LOG_SOFTMAX = OpDef("log_softmax", infer=_softmax_rule, lower=_softmax_lowering(torch.log_softmax),
                    attrs=SoftmaxAttrs, fusion=FusionKind.REDUCTION, doc="x - log(sum(exp(x))) along axis")



@defvjp(SOFTMAX)
def _softmax_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    y = op.outputs[0]  # y * (ct - sum(ct * y))
    return (g.multiply(y, g.subtract(ct[0], g.reduce_sum(g.multiply(ct[0], y), op.attrs.axis, keepdims=True))),)


@defvjp(LOG_SOFTMAX)
def _log_softmax_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    y = op.outputs[0]  # ct - softmax(x) * sum(ct)
    return (g.subtract(ct[0], g.multiply(g.exp(y), g.reduce_sum(ct[0], op.attrs.axis, keepdims=True))),)

class NNBuilders(GraphCore):
    """Graph methods for softmax, log_softmax."""

    def _softmax(self, op: OpDef, x: Tensor, axis: int, name: str | None) -> Tensor:
        x = self._as_tensor(x)
        return self._apply(op, [x], SoftmaxAttrs(normalize_axis(axis, x.rank)), name)

    def softmax(self, x: Tensor, axis: int = -1, *, name: str | None = None) -> Tensor:
        """``exp(x) / sum(exp(x))`` along ``axis`` (floating dtypes).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,), og.float32)
        >>> g.run({x: [0.0, 0.0]}, [g.softmax(x)])[0].tolist()
        [0.5, 0.5]
        """
        return self._softmax(SOFTMAX, x, axis, name)

    def log_softmax(self, x: Tensor, axis: int = -1, *, name: str | None = None) -> Tensor:
        """``x - log(sum(exp(x)))`` along ``axis`` (floating dtypes), computed stably."""
        return self._softmax(LOG_SOFTMAX, x, axis, name)


__all__ = ["LOG_SOFTMAX", "SOFTMAX", "NNBuilders", "SoftmaxAttrs"]
