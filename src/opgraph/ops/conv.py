"""Ops: convolutions (MPSGraph's convolution2D/3D, convolutionTranspose2D, depthwiseConvolution2D).

Descriptors are frozen dataclasses with MPSGraph's fields in snake_case. Spatial tuples
(``strides``, ``dilation_rates``) follow the order of the spatial dims: (y, x) = (height, width) in
2-D, (z, y, x) = (depth, height, width) in 3-D; ``stride_in_x`` etc. read them in MPSGraph's spelling.
Padding styles and the output-size formula are in ``opgraph.ops._padding``:
``out = floor((in + pad_before + pad_after - (dilation * (kernel - 1) + 1)) / stride) + 1``, and
``ceil(in / stride)`` for the SAME styles.

Weights: ``OIHW`` is (output channels, input channels per group, kH, kW); ``HWIO`` is (kH, kW, I, O);
``OIDHW`` / ``DHWIO`` likewise in 3-D. Lowered to ``torch.nn.functional`` (cuDNN / oneDNN kernels);
asymmetric padding is applied with ``F.pad``, channels-last layouts through ``permute``.
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
    LAYOUTS_2D,
    PaddingStyle,
    TensorLayout,
    WeightsLayout,
    check_enum,
    check_int,
    check_positive_sizes,
    effective_kernel,
    output_size,
    real_float_dtype,
    resolve_pads,
    set_ints,
    shape_or_like,
)
from ._rules import expect_arity
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp

Dim = int | None
Pairs = tuple[tuple[int, int], ...]
_LAYOUTS_3D = (TensorLayout.NCDHW, TensorLayout.NDHWC)
_WEIGHTS_2D = (WeightsLayout.OIHW, WeightsLayout.HWIO)
_WEIGHTS_3D = (WeightsLayout.OIDHW, WeightsLayout.DHWIO)


# ---- descriptors -------------------------------------------------------------------------------
class _AxisSpellings:
    """MPSGraph's per-axis spellings of the (y, x) tuples."""

    strides: tuple[int, ...]
    dilation_rates: tuple[int, ...]

    @property
    def stride_in_x(self) -> int:
        return self.strides[-1]

    @property
    def stride_in_y(self) -> int:
        return self.strides[-2]

    @property
    def dilation_rate_in_x(self) -> int:
        return self.dilation_rates[-1]

    @property
    def dilation_rate_in_y(self) -> int:
        return self.dilation_rates[-2]


def _check_conv_fields(d: Any, n: int, layouts: Sequence[TensorLayout], weights: Sequence[WeightsLayout],
                       paddings: Sequence[str]) -> None:
    set_ints(d, "strides", n, 1, scalar_ok=True)
    set_ints(d, "dilation_rates", n, 1, scalar_ok=True)
    for p in paddings:
        check_int(d, p, 0)
    check_enum(d, "padding_style", list(PaddingStyle))
    check_enum(d, "data_layout", layouts)
    check_enum(d, "weights_layout", weights)


@attrs
class Conv2dDescriptor(_AxisSpellings):
    """MPSGraph's ``MPSGraphConvolution2DOpDescriptor``; ``strides``/``dilation_rates`` are (y, x).

    >>> import opgraph as og
    >>> og.Conv2dDescriptor(strides=(2, 1)).stride_in_y
    2
    """

    strides: tuple[int, int] = (1, 1)
    dilation_rates: tuple[int, int] = (1, 1)
    padding_left: int = 0
    padding_right: int = 0
    padding_top: int = 0
    padding_bottom: int = 0
    padding_style: PaddingStyle = PaddingStyle.EXPLICIT
    data_layout: TensorLayout = TensorLayout.NCHW
    weights_layout: WeightsLayout = WeightsLayout.OIHW
    groups: int = 1

    def __post_init__(self) -> None:
        _check_conv_fields(self, 2, LAYOUTS_2D, _WEIGHTS_2D,
                           ("padding_left", "padding_right", "padding_top", "padding_bottom"))
        check_int(self, "groups", 1)

    @property
    def padding_pairs(self) -> Pairs:
        """Explicit (before, after) padding per spatial dim: ((top, bottom), (left, right))."""
        return ((self.padding_top, self.padding_bottom), (self.padding_left, self.padding_right))


@attrs
class Conv3dDescriptor(_AxisSpellings):
    """MPSGraph's ``MPSGraphConvolution3DOpDescriptor``; ``strides``/``dilation_rates`` are (z, y, x)."""

    strides: tuple[int, int, int] = (1, 1, 1)
    dilation_rates: tuple[int, int, int] = (1, 1, 1)
    padding_left: int = 0
    padding_right: int = 0
    padding_top: int = 0
    padding_bottom: int = 0
    padding_front: int = 0
    padding_back: int = 0
    padding_style: PaddingStyle = PaddingStyle.EXPLICIT
    data_layout: TensorLayout = TensorLayout.NCDHW
    weights_layout: WeightsLayout = WeightsLayout.OIDHW
    groups: int = 1

    def __post_init__(self) -> None:
        _check_conv_fields(self, 3, _LAYOUTS_3D, _WEIGHTS_3D,
                           ("padding_left", "padding_right", "padding_top", "padding_bottom",
                            "padding_front", "padding_back"))
        check_int(self, "groups", 1)

    @property
    def stride_in_z(self) -> int:
        return self.strides[0]

    @property
    def dilation_rate_in_z(self) -> int:
        return self.dilation_rates[0]

    @property
    def padding_pairs(self) -> Pairs:
        """Explicit (before, after) padding: ((front, back), (top, bottom), (left, right))."""
        return ((self.padding_front, self.padding_back), (self.padding_top, self.padding_bottom),
                (self.padding_left, self.padding_right))


@attrs
class DepthwiseConv2dDescriptor(_AxisSpellings):
    """MPSGraph's ``MPSGraphDepthwiseConvolution2DOpDescriptor``: as ``Conv2dDescriptor`` without groups.

    Weights ``OIHW`` are (channel multiplier M, source channels C, kH, kW), ``HWIO`` (kH, kW, C, M).
    """

    strides: tuple[int, int] = (1, 1)
    dilation_rates: tuple[int, int] = (1, 1)
    padding_left: int = 0
    padding_right: int = 0
    padding_top: int = 0
    padding_bottom: int = 0
    padding_style: PaddingStyle = PaddingStyle.EXPLICIT
    data_layout: TensorLayout = TensorLayout.NCHW
    weights_layout: WeightsLayout = WeightsLayout.OIHW

    def __post_init__(self) -> None:
        _check_conv_fields(self, 2, LAYOUTS_2D, _WEIGHTS_2D,
                           ("padding_left", "padding_right", "padding_top", "padding_bottom"))

    @property
    def padding_pairs(self) -> Pairs:
        return ((self.padding_top, self.padding_bottom), (self.padding_left, self.padding_right))


@attrs
class ConvTranspose2dAttrs:
    """``output_shape``: the full result shape in ``descriptor.data_layout`` (None: inferred)."""

    descriptor: Conv2dDescriptor
    output_shape: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.descriptor, Conv2dDescriptor):
            raise AttributeValueError(f"conv_transpose2d needs a Conv2dDescriptor, got {self.descriptor!r}")
        v = self.output_shape
        if v is not None:
            v = tuple(v) if isinstance(v, (list, tuple)) else v
            if not (isinstance(v, tuple) and len(v) == 4
                    and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v)):
                raise AttributeValueError(f"conv_transpose2d output_shape must be 4 ints >= 1, got {v!r}")
            object.__setattr__(self, "output_shape", v)


# ---- layouts -----------------------------------------------------------------------------------
def _split(shape: Sequence[Dim], channels_last: bool) -> tuple[Dim, Dim, tuple[Dim, ...]]:
    """(N, C, spatial) of a source or result shape."""
    if channels_last:
        return shape[0], shape[-1], tuple(shape[1:-1])
    return shape[0], shape[1], tuple(shape[2:])


def _join(n: Dim, c: Dim, spatial: Sequence[Dim], channels_last: bool) -> tuple[Dim, ...]:
    return (n, *spatial, c) if channels_last else (n, c, *spatial)


def _split_weights(shape: Sequence[Dim], kernel_first: bool) -> tuple[Dim, Dim, tuple[Dim, ...]]:
    """(O, I, kernel) of a weights shape."""
    if kernel_first:
        return shape[-1], shape[-2], tuple(shape[:-2])
    return shape[0], shape[1], tuple(shape[2:])


def _channels_first(x: torch.Tensor) -> torch.Tensor:
    n = x.dim() - 2
    return x.permute(0, n + 1, *range(1, n + 1))


def channels_last_stored(x: torch.Tensor) -> torch.Tensor:
    """An NCHW view of NHWC data, stored channels-last (a copy only where it is not): given one, cuDNN runs its
    NHWC kernels and returns NHWC-stored results.

    PyTorch picks the layout from strides, and a tensor with size-1 dims (1x1 weights) counts as channels-last
    contiguous whatever their strides while its strides still say NCHW: a 1x1 data gradient then ran in NCHW,
    copying its gradient in and its result out. Such a tensor gets the canonical strides (a view: the strides
    of size-1 dims address nothing)."""
    if x.dim() != 4:
        return x
    if not x.is_contiguous(memory_format=torch.channels_last):
        return x.contiguous(memory_format=torch.channels_last)
    _, c, h, w = x.shape
    strides = (h * w * c, 1, w * c, c)
    return x if x.stride() == strides else x.as_strided(x.shape, strides)


def _channels_last(y: torch.Tensor) -> torch.Tensor:
    n = y.dim() - 2
    return y.permute(0, *range(2, n + 2), 1)


def _weights_oi(w: torch.Tensor) -> torch.Tensor:
    """Kernel-first (HWIO/DHWIO) weights as OIHW/OIDHW."""
    n = w.dim() - 2
    return w.permute(n + 1, n, *range(n))


def _expect_rank(t: TensorType, rank: int, what: str, layout: Any) -> None:
    if t.rank != rank:
        raise ShapeError(f"{what} must have rank {rank} ({layout.value}), got rank {t.rank}")


def _pads(d: Any, sizes: Sequence[int], kernel: Sequence[int]) -> Pairs:
    return tuple(resolve_pads(d.padding_style, sizes[i], kernel[i], d.strides[i], d.dilation_rates[i],
                              d.padding_pairs[i]) for i in range(len(sizes)))


def _pad_for_torch(x: torch.Tensor, pads: Pairs) -> tuple[torch.Tensor, tuple[int, ...]]:
    """Symmetric padding goes to the torch kernel; asymmetric padding is applied here with zeros."""
    if all(b == a for b, a in pads):
        return x, tuple(b for b, _ in pads)
    flat = [p for pair in reversed(pads) for p in pair]  # F.pad lists the last dim first
    return F.pad(x, flat), (0,) * len(pads)


def _memo(plan: Callable[..., Any]) -> Callable[..., Any]:
    """Cache a lowering's per-shape plan: static shapes resolve once, dynamic ones once per shape."""
    cache: dict[Any, Any] = {}

    def get(*key: Any) -> Any:
        if key not in cache:
            cache[key] = plan(*key)
        return cache[key]

    return get


# ---- conv2d / conv3d / depthwise_conv2d --------------------------------------------------------
def _conv_rule(d: Any, ins: tuple[TensorType, ...], depthwise: bool = False) -> TensorType:
    expect_arity(ins, 2)
    dtype = real_float_dtype(ins)
    n = d.data_layout.spatial_rank
    src, w = ins
    _expect_rank(src, n + 2, "source", d.data_layout)
    _expect_rank(w, n + 2, "weights", d.weights_layout)
    cl = d.data_layout.channels_last
    batch, c, spatial = _split(src.shape, cl)
    o, i, kernel = _split_weights(w.shape, d.weights_layout.kernel_first)
    if depthwise:  # weights (M, C, k...): O is the channel multiplier, I the source channels
        if c is not None and i is not None and c != i:
            raise ShapeError(f"depthwise weights are for {i} source channels, the source has {c} channels")
        ch = c if c is not None else i
        c_out = None if ch is None or o is None else ch * o
    else:
        g = d.groups
        if c is not None and c % g:
            raise ShapeError(f"source channels {c} are not divisible by groups={g}")
        if o is not None and o % g:
            raise ShapeError(f"weights output channels {o} are not divisible by groups={g}")
        if c is not None and i is not None and i * g != c:
            raise ShapeError(f"weights take {i} input channels per group ({i * g} for groups={g}), "
                             f"the source has {c} channels")
        c_out = o
    out = tuple(output_size(d.padding_style, spatial[k], kernel[k], d.strides[k], d.dilation_rates[k],
                            d.padding_pairs[k]) for k in range(n))
    check_positive_sizes(out, "the result")
    return TensorType(_join(batch, c_out, out, cl), dtype)


def _conv_lower(fn: Callable[..., torch.Tensor], depthwise: bool = False) -> Callable[[LowerContext], Any]:
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        d = ctx.attrs
        cl, kf = d.data_layout.channels_last, d.weights_layout.kernel_first
        stride, dilation = d.strides, d.dilation_rates
        plan = _memo(lambda sizes, kernel: _pads(d, sizes, kernel))
        x_t, w_t = ctx.in_types
        if not (cl or kf or depthwise) and x_t.is_static and w_t.is_static:
            pads = _pads(d, x_t.shape[2:], w_t.shape[2:])  # type: ignore[arg-type]
            if all(b == a for b, a in pads):  # everything resolved now: one vendor call per run
                padding = tuple(b for b, _ in pads)
                return lambda x, w: fn(x, w, None, stride, padding, dilation, d.groups)

        def run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            if cl:
                x = channels_last_stored(_channels_first(x))
            if kf:
                w = _weights_oi(w)
            groups = 1 if depthwise else d.groups
            if depthwise:  # (M, C, k...) -> (C * M, 1, k...): output channel c * M + m, as MPSGraph/TF
                m, c = w.shape[0], w.shape[1]
                w = w.transpose(0, 1).reshape(c * m, 1, *w.shape[2:])
                groups = c
            x, padding = _pad_for_torch(x, plan(tuple(x.shape[2:]), tuple(w.shape[2:])))
            y = fn(x, w, None, stride, padding, dilation, groups)
            return _channels_last(y) if cl else y

        return run

    return lower


CONV2D = OpDef("conv2d", infer=_conv_rule, lower=_conv_lower(F.conv2d), attrs=Conv2dDescriptor,
               fusion=FusionKind.OPAQUE, doc="2-D convolution (cross-correlation) with groups and dilation")
CONV3D = OpDef("conv3d", infer=_conv_rule, lower=_conv_lower(F.conv3d), attrs=Conv3dDescriptor,
               fusion=FusionKind.OPAQUE, doc="3-D convolution (cross-correlation) with groups and dilation")
DEPTHWISE_CONV2D = OpDef("depthwise_conv2d", infer=lambda d, ins: _conv_rule(d, ins, depthwise=True),
                         lower=_conv_lower(F.conv2d, depthwise=True), attrs=DepthwiseConv2dDescriptor,
                         fusion=FusionKind.OPAQUE,
                         doc="2-D depthwise convolution: each channel with M filters (channel multiplier)")


@defvjp(CONV2D, CONV3D, DEPTHWISE_CONV2D)
def _conv_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    # the gradient ops of opgraph.ops.conv_grad: <op name>_data_gradient, <op name>_weights_gradient
    x, w = op.inputs
    data, weights = getattr(g, f"{op.op.name}_data_gradient"), getattr(g, f"{op.op.name}_weights_gradient")
    return data(ct[0], w, shape_or_like(x), op.attrs), weights(ct[0], x, shape_or_like(w), op.attrs)


# ---- conv_transpose2d --------------------------------------------------------------------------
def _transposed_size(d: Conv2dDescriptor, k: int, size: Dim, kernel: Dim) -> Dim:
    """Inferred result size along spatial dim ``k``: the forward convolution's input size."""
    if size is None:
        return None
    s = d.strides[k]
    if d.padding_style in (PaddingStyle.TF_SAME, PaddingStyle.ONNX_SAME_LOWER):
        return size * s
    if kernel is None:
        return None
    full = (size - 1) * s + effective_kernel(kernel, d.dilation_rates[k])
    return full if d.padding_style is PaddingStyle.TF_VALID else full - sum(d.padding_pairs[k])


def _conv_transpose2d_rule(a: ConvTranspose2dAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    dtype = real_float_dtype(ins)
    d = a.descriptor
    src, w = ins
    _expect_rank(src, 4, "source", d.data_layout)
    _expect_rank(w, 4, "weights", d.weights_layout)
    cl = d.data_layout.channels_last
    batch, c, spatial = _split(src.shape, cl)
    o, i, kernel = _split_weights(w.shape, d.weights_layout.kernel_first)
    g = d.groups
    if c is not None and o is not None and c != o:
        raise ShapeError(f"weights O={o} must equal the source channels {c} (O is the forward convolution's "
                         "output, i.e. this op's source)")
    ch = c if c is not None else o
    if ch is not None and ch % g:
        raise ShapeError(f"source channels {ch} are not divisible by groups={g}")
    c_out = None if i is None else i * g
    if a.output_shape is None:
        out = tuple(_transposed_size(d, k, spatial[k], kernel[k]) for k in range(2))
        check_positive_sizes(out, "the result")
        return TensorType(_join(batch, c_out, out, cl), dtype)
    n2, c2, out = _split(a.output_shape, cl)
    if batch is not None and n2 != batch:
        raise ShapeError(f"output_shape {a.output_shape} has batch {n2}, the source has {batch}")
    if c_out is not None and c2 != c_out:
        raise ShapeError(f"output_shape {a.output_shape} has {c2} channels, the weights give {c_out} "
                         f"(I={i} x groups={g})")
    for k in range(2):
        fwd = output_size(d.padding_style, out[k], kernel[k], d.strides[k], d.dilation_rates[k],
                          d.padding_pairs[k])
        if fwd is not None and spatial[k] is not None and fwd != spatial[k]:
            raise ShapeError(f"output_shape {a.output_shape} does not fit: a convolution of it with this "
                             f"descriptor gives spatial size {fwd} along dim {k}, the source has {spatial[k]}")
    return TensorType(a.output_shape, dtype)


def _conv_transpose2d_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: ConvTranspose2dAttrs = ctx.attrs
    d = a.descriptor
    cl, kf = d.data_layout.channels_last, d.weights_layout.kernel_first
    stride, dilation = d.strides, d.dilation_rates
    given = None if a.output_shape is None else _split(a.output_shape, cl)[2]

    def make_plan(sizes: tuple[int, ...], kernel: tuple[int, ...]) -> tuple[Any, ...]:
        dims = given or tuple(_transposed_size(d, k, sizes[k], kernel[k]) for k in range(2))
        out = tuple(int(v) for v in dims if v is not None)  # all known: sizes and kernel are concrete
        pads = _pads(d, out, kernel)  # the forward convolution's padding of the result
        full = [(sizes[k] - 1) * stride[k] + effective_kernel(kernel[k], dilation[k]) for k in range(2)]
        extra = tuple(out[k] - full[k] + 2 * pads[k][0] for k in range(2))
        if all(0 <= extra[k] < max(stride[k], dilation[k]) for k in range(2)):  # torch's own cropping fits
            return (tuple(p[0] for p in pads), extra, None)
        crop = [v for k in (1, 0) for v in (-pads[k][0], out[k] + pads[k][0] - full[k])]
        return ((0, 0), (0, 0), crop)

    plan = _memo(make_plan)

    def run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if cl:
            x = _channels_first(x)
        if kf:
            w = _weights_oi(w)
        padding, extra, crop = plan(tuple(x.shape[2:]), tuple(w.shape[2:]))
        y = F.conv_transpose2d(x, w, None, stride, padding, extra, d.groups, dilation)
        if crop is not None:
            y = F.pad(y, crop)  # negative amounts crop the forward padding; positive ones add zeros
        return _channels_last(y) if cl else y

    return run


CONV_TRANSPOSE2D = OpDef("conv_transpose2d", infer=_conv_transpose2d_rule, lower=_conv_transpose2d_lower,
                         attrs=ConvTranspose2dAttrs, fusion=FusionKind.OPAQUE,
                         doc="2-D transposed convolution: the data gradient of conv2d with the same descriptor")


@defvjp(CONV_TRANSPOSE2D)
def _conv_transpose2d_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    # y = D(x, w), the data gradient of r -> conv2d(r, w): <c, y> = <x, conv2d(c, w)>
    x, w = op.inputs
    d = op.attrs.descriptor
    return g.conv2d(ct[0], w, d), g.conv2d_weights_gradient(x, ct[0], shape_or_like(w), d)


# ---- builder methods ---------------------------------------------------------------------------
def _descriptor(op: str, value: Any, cls: type) -> Any:
    if value is None:
        return cls()
    if not isinstance(value, cls):
        raise AttributeValueError(f"{op}: descriptor must be an og.{cls.__name__}, got {type(value).__name__}")
    return value


class ConvBuilders(GraphCore):
    """Graph methods for convolutions."""

    def conv2d(self, source: Tensor, weights: Tensor, descriptor: Conv2dDescriptor | None = None, *,
               name: str | None = None) -> Tensor:
        """2-D convolution (MPSGraph ``convolution2D``); weights in ``descriptor.weights_layout``.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((1, 1, 3, 3)); w = g.placeholder((1, 1, 2, 2))
        >>> y = g.conv2d(x, w, og.Conv2dDescriptor(padding_style=og.PaddingStyle.TF_SAME))
        >>> g.run({x: torch.ones(1, 1, 3, 3), w: torch.ones(1, 1, 2, 2)}, [y])[0][0, 0].tolist()
        [[4.0, 4.0, 2.0], [4.0, 4.0, 2.0], [2.0, 2.0, 1.0]]
        """
        d = _descriptor("conv2d", descriptor, Conv2dDescriptor)
        return self._apply(CONV2D, [source, weights], d, name)

    def conv3d(self, source: Tensor, weights: Tensor, descriptor: Conv3dDescriptor | None = None, *,
               name: str | None = None) -> Tensor:
        """3-D convolution (MPSGraph ``convolution3D``): NCDHW/NDHWC source, OIDHW/DHWIO weights."""
        d = _descriptor("conv3d", descriptor, Conv3dDescriptor)
        return self._apply(CONV3D, [source, weights], d, name)

    def depthwise_conv2d(self, source: Tensor, weights: Tensor,
                         descriptor: DepthwiseConv2dDescriptor | None = None, *,
                         name: str | None = None) -> Tensor:
        """Depthwise 2-D convolution (MPSGraph ``depthwiseConvolution2D``): weights (M, C, kH, kW) in
        OIHW, (kH, kW, C, M) in HWIO; result channel ``c * M + m`` is channel ``c`` with filter ``m``."""
        d = _descriptor("depthwise_conv2d", descriptor, DepthwiseConv2dDescriptor)
        return self._apply(DEPTHWISE_CONV2D, [source, weights], d, name)

    def conv_transpose2d(self, source: Tensor, weights: Tensor, output_shape: Sequence[int] | None = None,
                         descriptor: Conv2dDescriptor | None = None, *, name: str | None = None) -> Tensor:
        """Transposed 2-D convolution (MPSGraph ``convolutionTranspose2D``): the data gradient of
        ``conv2d(result, weights, descriptor)``.

        ``descriptor`` describes that forward convolution, so in OIHW weights O is *this* op's source
        channels and I its result channels per group (PyTorch's ``conv_transpose2d`` weight order).
        ``output_shape`` is the full result shape (it picks one of the sizes that stride > 1 allows);
        without it the result has ``(in - 1) * stride + dilation * (k - 1) + 1 - pad_before - pad_after``
        (EXPLICIT; no padding for TF_VALID) or ``in * stride`` (SAME styles) elements per spatial dim.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((1, 1, 2, 2)); w = g.placeholder((1, 1, 2, 2))
        >>> g.conv_transpose2d(x, w).shape
        (1, 1, 3, 3)
        """
        d = _descriptor("conv_transpose2d", descriptor, Conv2dDescriptor)
        shape = None if output_shape is None else tuple(output_shape)
        return self._apply(CONV_TRANSPOSE2D, [source, weights], ConvTranspose2dAttrs(d, shape), name)


__all__ = ["CONV2D", "CONV3D", "CONV_TRANSPOSE2D", "DEPTHWISE_CONV2D", "Conv2dDescriptor", "Conv3dDescriptor",
           "ConvBuilders", "ConvTranspose2dAttrs", "DepthwiseConv2dDescriptor", "PaddingStyle", "TensorLayout",
           "WeightsLayout"]
