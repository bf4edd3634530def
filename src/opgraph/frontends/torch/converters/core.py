"""Converters every graph needs: arithmetic with ``alpha``, views, matmuls and the identity-like ops."""

from __future__ import annotations

from typing import Any

import torch

from ....ir.graph import Tensor
from ..registry import ConvertContext, converts

aten = torch.ops.aten


def scaled(ctx: ConvertContext, y: Any, alpha: Any) -> Any:
    """``alpha * y`` (ATen's add/sub ``alpha``), leaving ``y`` alone for the default 1."""
    if alpha is None or (not isinstance(alpha, bool) and alpha == 1):
        return y
    return ctx.g.multiply(y, alpha)


@converts(aten.add.Tensor, aten.add.Scalar)
def _add(ctx: ConvertContext, x: Any, y: Any, alpha: Any = 1) -> Tensor:
    return ctx.g.add(x, scaled(ctx, y, alpha))


@converts(aten.sub.Tensor, aten.sub.Scalar)
def _sub(ctx: ConvertContext, x: Any, y: Any, alpha: Any = 1) -> Tensor:
    return ctx.g.subtract(x, scaled(ctx, y, alpha))


@converts(aten.mul.Tensor, aten.mul.Scalar)
def _mul(ctx: ConvertContext, x: Any, y: Any) -> Tensor:
    if ctx.out_type.dtype.name == "bool":  # ATen multiplies bools as a logical and
        return ctx.g.logical_and(x, y)
    return ctx.g.multiply(x, y)


@converts(aten.relu.default)
def _relu(ctx: ConvertContext, x: Tensor) -> Tensor:
    return ctx.g.relu(x)


@converts(aten.permute.default)
def _permute(ctx: ConvertContext, x: Tensor, dims: list[int]) -> Tensor:
    return ctx.g.transpose(x, [d % max(x.rank, 1) for d in dims])


@converts(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(ctx: ConvertContext, x: Tensor, shape: list[Any]) -> Tensor:
    return ctx.reshape(x, shape)


@converts(aten.mm.default, aten.bmm.default)
def _mm(ctx: ConvertContext, a: Tensor, b: Tensor) -> Tensor:
    return ctx.g.matmul(a, b)


@converts(aten.addmm.default)
def _addmm(ctx: ConvertContext, bias: Any, a: Tensor, b: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return ctx.g.add(scaled(ctx, bias, beta), scaled(ctx, ctx.g.matmul(a, b), alpha))


@converts(aten.alias.default, aten.clone.default, aten.detach.default, aten.lift_fresh_copy.default)
def _identity(ctx: ConvertContext, x: Tensor, *, memory_format: Any = None) -> Tensor:
    return x
