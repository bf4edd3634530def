"""Ops that gradient rules need: fill_like, broadcast_like and sum_to (undo broadcasting).

They take a *reference* tensor for the shape, so gradients work with dynamic dims: the shape is read
at run time, and resolved at compile time when it is static.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.dtype import DType
from ..core.errors import ShapeError
from ..core.shape import broadcast_shapes
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ._rules import expect_arity
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp


@attrs
class FillAttrs:
    value: float | int | bool
    dtype: DType | None = None


def _fill_rule(a: FillAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    return TensorType(ins[0].shape, a.dtype or ins[0].dtype)


def _fill_lower(ctx: LowerContext) -> Callable[..., Any]:
    value, dtype, device = ctx.attrs.value, ctx.out_types[0].dtype.torch_dtype, ctx.device
    return lambda ref: torch.full(ref.shape, value, dtype=dtype, device=device)


FILL_LIKE = OpDef("fill_like", infer=_fill_rule, lower=_fill_lower, attrs=FillAttrs, fusion=FusionKind.ELEMENTWISE,
                  reads_values=False, doc="a tensor shaped like the input, filled with a value")


def _broadcast_like_rule(a: None, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    x, ref = ins
    if x.rank > ref.rank:
        raise ShapeError(f"cannot broadcast rank {x.rank} to rank {ref.rank}")
    out = broadcast_shapes(x.shape, ref.shape)
    if any(o is not None and r is not None and o != r for o, r in zip(out, ref.shape, strict=True)):
        raise ShapeError(f"cannot broadcast shape {x.shape} to shape {ref.shape}")
    return TensorType(ref.shape, x.dtype)


BROADCAST_LIKE = OpDef("broadcast_like", infer=_broadcast_like_rule,
                       lower=lambda ctx: lambda x, ref: x.expand(ref.shape), fusion=FusionKind.INJECTIVE,
                       doc="the first input broadcast to the second input's shape")


def _sum_to_rule(a: None, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    x, ref = ins
    broadcast_shapes(x.shape, ref.shape)  # raises if they cannot be related by broadcasting
    if ref.rank > x.rank:
        raise ShapeError(f"cannot sum rank {x.rank} down to rank {ref.rank}")
    return TensorType(ref.shape, x.dtype)


def _sum_axes(x_shape: tuple[int, ...], ref_shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    lead = x_shape[: len(x_shape) - len(ref_shape)]
    keep = tuple(i for i, (a, b) in enumerate(zip(x_shape[len(lead):], ref_shape, strict=True)) if b == 1 and a != 1)
    return tuple(range(len(lead))), keep


def _sum_to_lower(ctx: LowerContext) -> Callable[..., Any]:
    x_t, ref_t = ctx.in_types
    dtype = x_t.dtype.torch_dtype  # torch.sum would widen integers to int64

    def run(x: torch.Tensor, lead: tuple[int, ...], keep: tuple[int, ...]) -> torch.Tensor:
        if keep:
            x = x.sum(dim=[len(lead) + k for k in keep], keepdim=True, dtype=dtype)
        return x.sum(dim=lead, dtype=dtype) if lead else x

    if x_t.is_static and ref_t.is_static:
        lead, keep = _sum_axes(x_t.shape, ref_t.shape)  # type: ignore[arg-type]
        return lambda x, ref: run(x, lead, keep)
    return lambda x, ref: run(x, *_sum_axes(tuple(x.shape), tuple(ref.shape)))


SUM_TO = OpDef("sum_to", infer=_sum_to_rule, lower=_sum_to_lower, fusion=FusionKind.REDUCTION,
               doc="sum the first input down to the second input's shape (the adjoint of broadcasting)")


@defvjp(FILL_LIKE)
def _fill_like_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    return (None,)  # the values of the reference do not matter


@defvjp(BROADCAST_LIKE)
def _broadcast_like_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    return g.sum_to(ct[0], op.inputs[0]), None


@defvjp(SUM_TO)
def _sum_to_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    return g.broadcast_like(ct[0], op.inputs[0]), None


class GradientSupportBuilders(GraphCore):
    """Graph methods for shape-generic fills and (un)broadcasting."""

    def fill_like(self, like: Tensor, value: float | int | bool, dtype: object = None, *,
                  name: str | None = None) -> Tensor:
        """A tensor with ``like``'s shape (and dtype unless given) filled with ``value``."""
        from ..core.dtype import as_dtype

        return self._apply(FILL_LIKE, [like], FillAttrs(value, as_dtype(dtype) if dtype is not None else None), name)

    def zeros_like(self, like: Tensor, *, name: str | None = None) -> Tensor:
        return self.fill_like(like, 0, name=name)

    def ones_like(self, like: Tensor, *, name: str | None = None) -> Tensor:
        return self.fill_like(like, 1, name=name)

    def broadcast_like(self, x: Tensor, like: Tensor, *, name: str | None = None) -> Tensor:
        """``x`` broadcast to ``like``'s shape; a no-op when the types already agree."""
        if x.shape == like.shape and None not in x.shape:
            return x
        return self._apply(BROADCAST_LIKE, [x, like], None, name)

    def sum_to(self, x: Tensor, like: Tensor, *, name: str | None = None) -> Tensor:
        """``x`` summed over the axes that broadcasting to it added or stretched, down to ``like``'s shape."""
        if x.shape == like.shape and None not in x.shape:
            return x
        return self._apply(SUM_TO, [x, like], None, name)
