"""Ops: gradients of average and L2-norm pooling (MPSGraph's ``avgPooling2DGradient``,
``avgPooling4DGradient``, ``L2NormPooling4DGradient``, and the 2-D L2 form).

Each takes the incoming gradient (shaped like the pooling's result) and the forward source, and gives
the gradient with respect to the source:

* avg: the gradient divided by each window's divisor, summed back over the windows (the adjoint of
  the forward; the source only gives the shape);
* L2 norm: ``x * adjoint(gradient / y)`` with ``y`` the pooling recomputed from the source; a window
  whose norm is 0 passes no gradient (the subgradient 0).

Lowered as the adjoint of the forward's window sum: one strided add per window offset into a padded
buffer, then the padding is cropped off.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from typing import Any

import torch

from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ._padding import check_same_dims, effective_kernel, output_size, real_float_dtype, resolve_pads
from ._rules import expect_arity
from .pooling import (
    AVG_POOL2D,
    AVG_POOL4D,
    Descriptor,
    Pooling2dDescriptor,
    Pooling4dDescriptor,
    _descriptor,
    _Kind,
    _plan,
    _pool2d_rule,
    _pool4d_rule,
    _pool_lower,
)
from .registry import FusionKind, LowerContext, OpDef, defvjp


# ---- type rule ---------------------------------------------------------------------------------
def _grad_rule(two_d: bool) -> Callable[[Any, tuple[TensorType, ...]], TensorType]:
    def rule(d: Descriptor, ins: tuple[TensorType, ...]) -> TensorType:
        expect_arity(ins, 2)
        grad, src = ins
        dtype = real_float_dtype(ins)
        fwd = _pool2d_rule(d, (src,)) if two_d else _pool4d_rule(d, (src,))  # type: ignore[arg-type]
        check_same_dims(grad.shape, fwd.shape, "the incoming gradient")
        return TensorType(src.shape, dtype)

    return rule


# ---- lowering ----------------------------------------------------------------------------------
def window_sum_adjoint(g: torch.Tensor, d: Descriptor, sizes: tuple[int, ...]) -> torch.Tensor:
    """The adjoint of "pad the pooled (innermost, channels-first) dims, sum each window": ``g`` has
    the pooled result's shape; the result has ``sizes`` in the pooled dims."""
    n = len(sizes)
    lead = tuple(g.shape[:-n])
    befores, spans, outs = [], [], []
    for k, size in enumerate(sizes):
        kernel, stride, dil = d.kernel_sizes[k], d.strides[k], d.dilation_rates[k]
        before, _ = resolve_pads(d.padding_style, size, kernel, stride, dil, d.padding_pairs[k])
        out = output_size(d.padding_style, size, kernel, stride, dil, d.padding_pairs[k], d.ceil_mode)
        assert out is not None
        befores.append(before)
        outs.append(out)
        spans.append(max((out - 1) * stride + effective_kernel(kernel, dil), before + size))
    buf = g.new_zeros((*lead, *spans))
    for offsets in itertools.product(*(range(k) for k in d.kernel_sizes)):
        window: tuple[Any, ...] = (Ellipsis, *(slice(j * r, j * r + (o - 1) * s + 1, s) for j, r, o, s in
                                               zip(offsets, d.dilation_rates, outs, d.strides, strict=True)))
        buf[window] += g
    crop: tuple[Any, ...] = (Ellipsis, *(slice(b, b + s) for b, s in zip(befores, sizes, strict=True)))
    return buf[crop]


def _torch_avg_padding(d: Descriptor, sizes: tuple[int, ...]) -> tuple[int, int] | None:
    """The padding for PyTorch's avg_pool2d backward when its windows are exactly ours (full windows)."""
    if not isinstance(d, Pooling2dDescriptor) or d.dilation_rates != (1, 1):
        return None
    pads = []
    for k, size in enumerate(sizes):
        kernel, stride = d.kernel_sizes[k], d.strides[k]
        before, _ = resolve_pads(d.padding_style, size, kernel, stride, 1, d.padding_pairs[k])
        out = output_size(d.padding_style, size, kernel, stride, 1, d.padding_pairs[k], d.ceil_mode)
        if before > kernel // 2 or (size + 2 * before - kernel) // stride + 1 != out:
            return None
        pads.append(before)
    return pads[0], pads[1]


def _grad_lower(kind: _Kind) -> Callable[[LowerContext], Callable[..., Any]]:
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        d: Descriptor = ctx.attrs
        n = len(d.kernel_sizes)
        cl = isinstance(d, Pooling2dDescriptor) and d.data_layout.channels_last
        dtype = ctx.in_types[0].dtype.torch_dtype
        window = math.prod(d.kernel_sizes)
        plans: dict[tuple[int, ...], tuple[torch.Tensor | None, tuple[int, int] | None]] = {}
        # L2 recomputes the forward pooling from the source
        forward = _pool_lower(kind)(LowerContext(d, ctx.in_types[1:], ctx.in_types[:1], ctx.device)) \
            if kind is _Kind.L2 else None

        def run(grad: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
            if forward is not None:
                y = forward(src)
                grad = torch.where(y > 0, grad / torch.where(y > 0, y, 1), 0)
            if cl:
                grad, src = grad.permute(0, 3, 1, 2), src.permute(0, 3, 1, 2)
            sizes = tuple(src.shape[-n:])
            if sizes not in plans:
                divisor = _plan(d, sizes, _Kind.AVG, dtype, ctx.device)[1]
                plans[sizes] = (divisor, _torch_avg_padding(d, sizes) if divisor is None else None)
            divisor, torch_padding = plans[sizes]
            if torch_padding is not None:  # PyTorch's kernel: the adjoint of the window mean
                # contiguous: the CUDA kernel gave wrong values for permuted (NHWC-viewed) float64 inputs
                dx = torch.ops.aten.avg_pool2d_backward(grad.contiguous(), src.contiguous(), d.kernel_sizes,
                                                        d.strides, torch_padding, False, True, None)
                dx = dx * window if kind is _Kind.L2 else dx
            else:
                if kind is _Kind.AVG:
                    grad = grad / divisor if divisor is not None else grad / window
                dx = window_sum_adjoint(grad, d, sizes)
            if kind is _Kind.L2:
                dx = dx * src
            return dx.permute(0, 2, 3, 1) if cl else dx

        return run

    return lower


def _grad_op(name: str, kind: _Kind, two_d: bool, doc: str) -> OpDef:
    return OpDef(name, infer=_grad_rule(two_d), lower=_grad_lower(kind),
                 attrs=Pooling2dDescriptor if two_d else Pooling4dDescriptor, fusion=FusionKind.OPAQUE, doc=doc)


AVG_POOL2D_GRADIENT = _grad_op("avg_pool2d_gradient", _Kind.AVG, True, "gradient of avg_pool2d")
AVG_POOL4D_GRADIENT = _grad_op("avg_pool4d_gradient", _Kind.AVG, False, "gradient of avg_pool4d")
L2_NORM_POOL2D_GRADIENT = _grad_op("l2_norm_pool2d_gradient", _Kind.L2, True, "gradient of l2_norm_pool2d")
L2_NORM_POOL4D_GRADIENT = _grad_op("l2_norm_pool4d_gradient", _Kind.L2, False, "gradient of l2_norm_pool4d")


@defvjp(AVG_POOL2D_GRADIENT, AVG_POOL4D_GRADIENT)
def _avg_pool_gradient_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    # linear in the gradient: its adjoint is the forward pooling; the source gives only the shape
    return g._apply(AVG_POOL2D if op.op is AVG_POOL2D_GRADIENT else AVG_POOL4D, [ct[0]], op.attrs), None

@defvjp(L2_NORM_POOL2D_GRADIENT, L2_NORM_POOL4D_GRADIENT)
def _l2_norm_pool_gradient_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    # dx = x * A(gy / y) with y = L2 pooling of x, A the adjoint of the window sum S. Then for a cotangent c:
    # d gy = S(c x) / y and d x = c A(gy / y) - x A(S(c x) gy / y^3); "/" gives 0 where y = 0.
    gy, x = op.inputs
    c = ct[0]
    two_d = op.op is L2_NORM_POOL2D_GRADIENT
    d = op.attrs
    ex = dataclasses.replace(d, include_zero_pad_to_average=False)  # avg over ex divides by the source count
    avg, avg_grad = (AVG_POOL2D, AVG_POOL2D_GRADIENT) if two_d else (AVG_POOL4D, AVG_POOL4D_GRADIENT)
    l2 = g.l2_norm_pool2d if two_d else g.l2_norm_pool4d
    y = l2(x, d)
    root = l2(g.ones_like(x), ex)
    count = g.multiply(root, root)  # source elements per window

    def window_sum(z: Tensor) -> Tensor:
        return g.multiply(g._apply(avg, [z], ex), count)

    def adjoint(z: Tensor) -> Tensor:
        return g._apply(avg_grad, [g.multiply(z, count), x], ex)

    u = g.division_no_nan(gy, y)
    d_gy = g.division_no_nan(window_sum(g.multiply(c, x)), y)
    d_x = g.subtract(g.multiply(c, adjoint(u)), g.multiply(x, adjoint(g.division_no_nan(g.multiply(d_gy, u), y))))
    return d_gy, d_x


# ---- builder methods ---------------------------------------------------------------------------
class PoolingGradientBuilders(GraphCore):
    """Graph methods for the gradients of average and L2-norm pooling."""

    def _pool_grad(self, op: OpDef, gradient: Tensor, source: Tensor, descriptor: Any, cls: type,
                   name: str | None) -> Tensor:
        return self._apply(op, [gradient, source], _descriptor(op.name, descriptor, cls), name)

    def avg_pool2d_gradient(self, gradient: Tensor, source: Tensor, descriptor: Pooling2dDescriptor, *,
                            name: str | None = None) -> Tensor:
        """Gradient of ``avg_pool2d(source, descriptor)`` given the result's gradient (MPSGraph
        ``avgPooling2DGradient``); only the source's shape is read.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((1, 1, 2, 4)); dy = g.placeholder((1, 1, 1, 2))
        >>> dx = g.avg_pool2d_gradient(dy, x, og.Pooling2dDescriptor(2, 2, 2, 2))
        >>> g.run({x: torch.zeros(1, 1, 2, 4), dy: torch.tensor([[[[4.0, 8.0]]]])}, [dx])[0].tolist()
        [[[[1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 2.0, 2.0]]]]
        """
        return self._pool_grad(AVG_POOL2D_GRADIENT, gradient, source, descriptor, Pooling2dDescriptor, name)

    def avg_pool4d_gradient(self, gradient: Tensor, source: Tensor, descriptor: Pooling4dDescriptor, *,
                            name: str | None = None) -> Tensor:
        """Gradient of ``avg_pool4d(source, descriptor)`` (MPSGraph ``avgPooling4DGradient``)."""
        return self._pool_grad(AVG_POOL4D_GRADIENT, gradient, source, descriptor, Pooling4dDescriptor, name)

    def l2_norm_pool2d_gradient(self, gradient: Tensor, source: Tensor, descriptor: Pooling2dDescriptor, *,
                                name: str | None = None) -> Tensor:
        """Gradient of ``l2_norm_pool2d(source, descriptor)``: ``x * adjoint(gradient / y)``."""
        return self._pool_grad(L2_NORM_POOL2D_GRADIENT, gradient, source, descriptor, Pooling2dDescriptor, name)

    def l2_norm_pool4d_gradient(self, gradient: Tensor, source: Tensor, descriptor: Pooling4dDescriptor, *,
                                name: str | None = None) -> Tensor:
        """Gradient of ``l2_norm_pool4d(source, descriptor)`` (MPSGraph ``L2NormPooling4DGradient``)."""
        return self._pool_grad(L2_NORM_POOL4D_GRADIENT, gradient, source, descriptor, Pooling4dDescriptor, name)


__all__ = ["AVG_POOL2D_GRADIENT", "AVG_POOL4D_GRADIENT", "L2_NORM_POOL2D_GRADIENT", "L2_NORM_POOL4D_GRADIENT",
           "PoolingGradientBuilders", "window_sum_adjoint"]
