"""Ops: convolution gradients (MPSGraph's ``convolution2DDataGradient``, ``convolution2DWeightsGradient``,
their 3-D and depthwise forms).

Each takes the forward convolution's descriptor and the incoming gradient (shaped like its result):

* ``*_data_gradient(incoming_gradient, weights, output_shape, descriptor)``: the gradient with respect
  to the source, of shape ``output_shape`` (the transposed convolution, like ``conv_transpose2d``);
* ``*_weights_gradient(incoming_gradient, source, output_shape, descriptor)``: the gradient with respect
  to the weights, of shape ``output_shape`` (in ``descriptor.weights_layout``).

``output_shape`` is a static shape or, for dynamic dims, a tensor of that shape (a shape reference:
only its shape is read). Lowered to ``aten.convolution_backward`` (cuDNN / oneDNN); asymmetric
padding is applied to the source (weights gradient) or cropped off the result (data gradient).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..core.errors import AttributeValueError, ShapeError
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ._padding import (
    check_output_shape,
    check_same_dims,
    concrete_shape,
    merge_dims,
    real_float_dtype,
    shape_or_like,
)
from ._rules import expect_arity
from .conv import (
    Conv2dDescriptor,
    Conv3dDescriptor,
    DepthwiseConv2dDescriptor,
    _channels_first,
    _channels_last,
    _conv_rule,
    _memo,
    _pads,
    _split,
    _split_weights,
    _weights_oi,
    channels_last_stored,
)
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp

ConvDescriptor = Conv2dDescriptor | Conv3dDescriptor | DepthwiseConv2dDescriptor


@attrs
class ConvGradientAttrs:
    """The forward convolution's descriptor and the result shape (None: a shape-reference input gives it)."""

    descriptor: Conv2dDescriptor | Conv3dDescriptor | DepthwiseConv2dDescriptor
    output_shape: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.descriptor, (Conv2dDescriptor, Conv3dDescriptor, DepthwiseConv2dDescriptor)):
            raise AttributeValueError(f"descriptor must be a convolution descriptor, got {self.descriptor!r}")
        object.__setattr__(self, "output_shape", check_output_shape(self.output_shape, "output_shape"))


# ---- type rules --------------------------------------------------------------------------------
def _forward_check(a: ConvGradientAttrs, cls: type, ins: tuple[TensorType, ...],
                   what: str) -> tuple[TensorType, TensorType, tuple[int | None, ...]]:
    if not isinstance(a.descriptor, cls):
        raise AttributeValueError(f"needs an og.{cls.__name__}, got {type(a.descriptor).__name__}")
    expect_arity(ins, 2 if a.output_shape is not None else 3)
    real_float_dtype(ins[:2])
    shape = a.output_shape if a.output_shape is not None else ins[2].shape
    if len(shape) != ins[0].rank:
        raise ShapeError(f"output_shape {shape} must have rank {ins[0].rank} (the {what})")
    return ins[0], ins[1], tuple(shape)


def _data_rule(cls: type, depthwise: bool) -> Callable[[Any, tuple[TensorType, ...]], TensorType]:
    def rule(a: ConvGradientAttrs, ins: tuple[TensorType, ...]) -> TensorType:
        grad, w, shape = _forward_check(a, cls, ins, "source")
        d = a.descriptor
        fwd = _conv_rule(d, (TensorType(shape, grad.dtype), w), depthwise)
        check_same_dims(grad.shape, fwd.shape, "the incoming gradient")
        cl = d.data_layout.channels_last
        _, i, _ = _split_weights(w.shape, d.weights_layout.kernel_first)
        c = i if depthwise or i is None else i * _groups(d)
        at_c = -1 if cl else 1
        known = list(shape)
        known[0] = merge_dims(shape[:1], grad.shape[:1])[0]
        known[at_c] = merge_dims((shape[at_c],), (c,))[0]
        return TensorType(tuple(known), grad.dtype)

    return rule


def _weights_rule(cls: type, depthwise: bool) -> Callable[[Any, tuple[TensorType, ...]], TensorType]:
    def rule(a: ConvGradientAttrs, ins: tuple[TensorType, ...]) -> TensorType:
        grad, src, shape = _forward_check(a, cls, ins, "weights")
        d = a.descriptor
        fwd = _conv_rule(d, (src, TensorType(shape, grad.dtype)), depthwise)
        check_same_dims(grad.shape, fwd.shape, "the incoming gradient")
        cl, kf = d.data_layout.channels_last, d.weights_layout.kernel_first
        c_out, c_in = _split(grad.shape, cl)[1], _split(src.shape, cl)[1]
        if depthwise:  # (M, C, k...): M = result channels / C
            o = None if c_out is None or c_in is None else c_out // c_in
            i = c_in
        else:
            o, i = c_out, None if c_in is None else c_in // _groups(d)
        known = list(shape)
        at_o, at_i = (-1, -2) if kf else (0, 1)
        known[at_o] = merge_dims((shape[at_o],), (o,))[0]
        known[at_i] = merge_dims((shape[at_i],), (i,))[0]
        return TensorType(tuple(known), grad.dtype)

    return rule


# ---- lowering ----------------------------------------------------------------------------------
def _groups(d: Any) -> int:
    return 1 if isinstance(d, DepthwiseConv2dDescriptor) else int(d.groups)


def _symmetric(pads: Sequence[tuple[int, int]]) -> bool:
    return all(b == a for b, a in pads)


def _data_lower(depthwise: bool) -> Callable[[LowerContext], Callable[..., Any]]:
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        a: ConvGradientAttrs = ctx.attrs
        d = a.descriptor
        cl, kf = d.data_layout.channels_last, d.weights_layout.kernel_first
        stride, dilation = d.strides, d.dilation_rates
        plan = _memo(lambda sizes, kernel: _pads(d, sizes, kernel))
        out_t = ctx.out_types[0]

        def run(grad: torch.Tensor, w: torch.Tensor, *like: torch.Tensor) -> torch.Tensor:
            shape = concrete_shape(out_t.shape if out_t.is_static else (a.output_shape or like[0].shape))
            n, c, sizes = shape[0], shape[-1 if cl else 1], shape[1:-1] if cl else shape[2:]
            w, groups = _torch_weights(w, kf, depthwise, _groups(d))
            if cl:  # the weights channels-last too: PyTorch picks the layout of dx from the source and weights
                grad, w = channels_last_stored(_channels_first(grad)), channels_last_stored(w)
            pads = plan(tuple(sizes), tuple(w.shape[2:]))
            if _symmetric(pads):
                padding, full = tuple(b for b, _ in pads), tuple(sizes)
            else:  # the gradient of the padded source, then the padding cropped off
                padding, full = (0,) * len(pads), tuple(s + b + e for s, (b, e) in zip(sizes, pads, strict=True))
            dx = _transposed_convolution(grad, w, (n, c, *full), stride, padding, dilation, groups)
            if not _symmetric(pads):
                crop: tuple[slice, ...] = (slice(None), slice(None),
                                           *(slice(b, b + s) for s, (b, _) in zip(sizes, pads, strict=True)))
                dx = dx[crop]
            return _channels_last(dx) if cl else dx

        return run

    return lower


def _transposed_convolution(grad: torch.Tensor, w: torch.Tensor, shape: Sequence[int], stride: Sequence[int],
                            padding: Sequence[int], dilation: Sequence[int], groups: int) -> torch.Tensor:
    """The data gradient as the transposed convolution, sized by its output padding. ``convolution_backward``
    would need the source: given a broadcast stand-in it materialises it, a copy the size of the source per call
    (9.0 of 33.8 ms kernel time in a ResNet-50:64 step on an H200; benchmarks/RESULTS.md, fifth session)."""
    spatial = shape[2:]
    extra = [full - ((g - 1) * s - 2 * p + d * (k - 1) + 1)
             for full, g, s, p, d, k in zip(spatial, grad.shape[2:], stride, padding, dilation, w.shape[2:],
                                            strict=True)]
    if not all(0 <= e < max(s, d) for e, s, d in zip(extra, stride, dilation, strict=True)):
        raise ShapeError(f"convolution data gradient: a source of shape {tuple(shape)} does not give the incoming "
                         f"gradient's shape {tuple(grad.shape)}")  # only dynamic dims get here unchecked
    return torch.ops.aten.convolution(grad, w, None, stride, padding, dilation, True, extra, groups)


def _torch_weights(w: torch.Tensor, kernel_first: bool, depthwise: bool, groups: int) -> tuple[torch.Tensor, int]:
    """Weights as PyTorch's (O, I / groups, k...) and the groups (depthwise: (C * M, 1, k...), C groups)."""
    if kernel_first:
        w = _weights_oi(w)
    if depthwise:
        m, c = w.shape[0], w.shape[1]
        return w.transpose(0, 1).reshape(c * m, 1, *w.shape[2:]), c
    return w, groups


def _weights_lower(depthwise: bool) -> Callable[[LowerContext], Callable[..., Any]]:
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        a: ConvGradientAttrs = ctx.attrs
        d = a.descriptor
        cl, kf = d.data_layout.channels_last, d.weights_layout.kernel_first
        stride, dilation = d.strides, d.dilation_rates
        plan = _memo(lambda sizes, kernel: _pads(d, sizes, kernel))
        out_t = ctx.out_types[0]

        def run(grad: torch.Tensor, x: torch.Tensor, *like: torch.Tensor) -> torch.Tensor:
            shape = concrete_shape(out_t.shape if out_t.is_static else (a.output_shape or like[0].shape))
            o, i, kernel = (shape[-1], shape[-2], shape[:-2]) if kf else (shape[0], shape[1], shape[2:])
            if cl:
                grad, x = channels_last_stored(_channels_first(grad)), channels_last_stored(_channels_first(x))
            groups = _groups(d)
            oi = (o, i, *kernel)
            if depthwise:  # (M, C, k...) in PyTorch's form (C * M, 1, k...) with C groups
                oi, groups = (i * o, 1, *kernel), i
            pads = plan(tuple(x.shape[2:]), tuple(kernel))
            if _symmetric(pads):
                padding = tuple(b for b, _ in pads)
            else:
                x, padding = F.pad(x, [p for pair in reversed(pads) for p in pair]), (0,) * len(pads)
            fmt = torch.channels_last if cl and len(oi) == 4 else torch.contiguous_format
            stand_in = torch.empty(oi, dtype=grad.dtype, device=grad.device, memory_format=fmt)  # only its shape
            dw = torch.ops.aten.convolution_backward(grad, x, stand_in, None, stride, padding, dilation, False,
                                                     [0] * len(pads), groups, (False, True, False))[1]
            if depthwise:
                dw = dw.reshape(i, o, *kernel).transpose(0, 1)
            if kf:
                dw = dw.permute(*range(2, dw.dim()), 1, 0)
            return dw.contiguous() if cl else dw  # cuDNN gives channels-last weights: parameters are dense

        return run

    return lower


def _op(name: str, kind: str, cls: type, depthwise: bool, doc: str) -> OpDef:
    data = kind == "data"
    rule = _data_rule(cls, depthwise) if data else _weights_rule(cls, depthwise)
    return OpDef(name, infer=rule, lower=(_data_lower if data else _weights_lower)(depthwise),
                 attrs=ConvGradientAttrs, fusion=FusionKind.OPAQUE, doc=doc)


CONV2D_DATA_GRADIENT = _op("conv2d_data_gradient", "data", Conv2dDescriptor, False,
                           "gradient of conv2d with respect to its source")
CONV2D_WEIGHTS_GRADIENT = _op("conv2d_weights_gradient", "weights", Conv2dDescriptor, False,
                              "gradient of conv2d with respect to its weights")
CONV3D_DATA_GRADIENT = _op("conv3d_data_gradient", "data", Conv3dDescriptor, False,
                           "gradient of conv3d with respect to its source")
CONV3D_WEIGHTS_GRADIENT = _op("conv3d_weights_gradient", "weights", Conv3dDescriptor, False,
                              "gradient of conv3d with respect to its weights")
DEPTHWISE_CONV2D_DATA_GRADIENT = _op("depthwise_conv2d_data_gradient", "data", DepthwiseConv2dDescriptor, True,
                                     "gradient of depthwise_conv2d with respect to its source")
DEPTHWISE_CONV2D_WEIGHTS_GRADIENT = _op("depthwise_conv2d_weights_gradient", "weights", DepthwiseConv2dDescriptor,
                                        True, "gradient of depthwise_conv2d with respect to its weights")
_DATA = (CONV2D_DATA_GRADIENT, CONV3D_DATA_GRADIENT, DEPTHWISE_CONV2D_DATA_GRADIENT)
_FAMILY = {CONV2D_DATA_GRADIENT: "conv2d", CONV2D_WEIGHTS_GRADIENT: "conv2d", CONV3D_DATA_GRADIENT: "conv3d",
           CONV3D_WEIGHTS_GRADIENT: "conv3d", DEPTHWISE_CONV2D_DATA_GRADIENT: "depthwise_conv2d",
           DEPTHWISE_CONV2D_WEIGHTS_GRADIENT: "depthwise_conv2d"}


# ---- gradients of the gradients: with conv(x, w) = y, both are bilinear in their two inputs ------
@defvjp(*_FAMILY)
def _conv_gradient_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    family, d = _FAMILY[op.op], op.attrs.descriptor
    forward, data, weights = (getattr(g, family), getattr(g, f"{family}_data_gradient"),
                              getattr(g, f"{family}_weights_gradient"))
    rest = (None,) * (len(op.inputs) - 2)
    grad, other = op.inputs[:2]
    c = ct[0]
    if op.op in _DATA:  # dx = data(dy, w): <c, dx> = <dy, conv(c, w)>
        return forward(c, other, d), weights(grad, c, shape_or_like(other), d), *rest
    # dw = weights(dy, x): <c, dw> = <dy, conv(x, c)>
    return forward(other, c, d), data(grad, c, shape_or_like(other), d), *rest


# ---- builder methods ---------------------------------------------------------------------------
class ConvGradientBuilders(GraphCore):
    """Graph methods for the convolution gradients."""

    def _conv_gradient(self, op: OpDef, gradient: Tensor, other: Tensor, output_shape: Any, descriptor: Any,
                       cls: Any, name: str | None) -> Tensor:
        d = cls() if descriptor is None else descriptor
        if not isinstance(d, cls):
            raise AttributeValueError(f"{op.name}: descriptor must be an og.{cls.__name__}, got {type(d).__name__}")
        if isinstance(output_shape, Tensor):
            return self._apply(op, [gradient, other, output_shape], ConvGradientAttrs(d), name)
        return self._apply(op, [gradient, other], ConvGradientAttrs(d, output_shape), name)

    def conv2d_data_gradient(self, incoming_gradient: Tensor, weights: Tensor, output_shape: Sequence[int] | Tensor,
                             descriptor: Conv2dDescriptor | None = None, *, name: str | None = None) -> Tensor:
        """Gradient of ``conv2d(source, weights, descriptor)`` with respect to the source (MPSGraph
        ``convolution2DDataGradient``); ``output_shape``: the source's shape, or a tensor of that shape.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); dy = g.placeholder((1, 1, 2, 2)); w = g.placeholder((1, 1, 2, 2))
        >>> dx = g.conv2d_data_gradient(dy, w, (1, 1, 3, 3))
        >>> g.run({dy: torch.ones(1, 1, 2, 2), w: torch.ones(1, 1, 2, 2)}, [dx])[0][0, 0].tolist()
        [[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]
        """
        return self._conv_gradient(CONV2D_DATA_GRADIENT, incoming_gradient, weights, output_shape, descriptor,
                                   Conv2dDescriptor, name)

    def conv2d_weights_gradient(self, incoming_gradient: Tensor, source: Tensor, output_shape: Sequence[int] | Tensor,
                                descriptor: Conv2dDescriptor | None = None, *, name: str | None = None) -> Tensor:
        """Gradient of ``conv2d(source, weights, descriptor)`` with respect to the weights (MPSGraph
        ``convolution2DWeightsGradient``); ``output_shape``: the weights' shape, or a tensor of that shape."""
        return self._conv_gradient(CONV2D_WEIGHTS_GRADIENT, incoming_gradient, source, output_shape, descriptor,
                                   Conv2dDescriptor, name)

    def conv3d_data_gradient(self, incoming_gradient: Tensor, weights: Tensor, output_shape: Sequence[int] | Tensor,
                             descriptor: Conv3dDescriptor | None = None, *, name: str | None = None) -> Tensor:
        """Gradient of ``conv3d`` with respect to the source (MPSGraph ``convolution3DDataGradient``)."""
        return self._conv_gradient(CONV3D_DATA_GRADIENT, incoming_gradient, weights, output_shape, descriptor,
                                   Conv3dDescriptor, name)

    def conv3d_weights_gradient(self, incoming_gradient: Tensor, source: Tensor, output_shape: Sequence[int] | Tensor,
                                descriptor: Conv3dDescriptor | None = None, *, name: str | None = None) -> Tensor:
        """Gradient of ``conv3d`` with respect to the weights (MPSGraph ``convolution3DWeightsGradient``)."""
        return self._conv_gradient(CONV3D_WEIGHTS_GRADIENT, incoming_gradient, source, output_shape, descriptor,
                                   Conv3dDescriptor, name)

    def depthwise_conv2d_data_gradient(self, incoming_gradient: Tensor, weights: Tensor,
                                       output_shape: Sequence[int] | Tensor,
                                       descriptor: DepthwiseConv2dDescriptor | None = None, *,
                                       name: str | None = None) -> Tensor:
        """Gradient of ``depthwise_conv2d`` with respect to the source (MPSGraph
        ``depthwiseConvolution2DDataGradient``)."""
        return self._conv_gradient(DEPTHWISE_CONV2D_DATA_GRADIENT, incoming_gradient, weights, output_shape,
                                   descriptor, DepthwiseConv2dDescriptor, name)

    def depthwise_conv2d_weights_gradient(self, incoming_gradient: Tensor, source: Tensor,
                                          output_shape: Sequence[int] | Tensor,
                                          descriptor: DepthwiseConv2dDescriptor | None = None, *,
                                          name: str | None = None) -> Tensor:
        """Gradient of ``depthwise_conv2d`` with respect to the weights (MPSGraph
        ``depthwiseConvolution2DWeightsGradient``)."""
        return self._conv_gradient(DEPTHWISE_CONV2D_WEIGHTS_GRADIENT, incoming_gradient, source, output_shape,
                                   descriptor, DepthwiseConv2dDescriptor, name)


__all__ = ["CONV2D_DATA_GRADIENT", "CONV2D_WEIGHTS_GRADIENT", "CONV3D_DATA_GRADIENT", "CONV3D_WEIGHTS_GRADIENT",
           "DEPTHWISE_CONV2D_DATA_GRADIENT", "DEPTHWISE_CONV2D_WEIGHTS_GRADIENT", "ConvGradientAttrs",
           "ConvGradientBuilders"]
