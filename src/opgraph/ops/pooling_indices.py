"""Ops: max pooling with indices (MPSGraph's ``maxPooling2DReturnIndices`` / ``maxPooling4DReturnIndices``),
the gradient from those indices (``maxPooling2DGradient(withGradientTensor:indicesTensor:outputShape:...)``)
and its adjoint, ``max_pool*_gather``.

Geometry: a 2-D descriptor is a window over all 4 dims of the source as stored, (1, 1, kH, kW) over
NCHW and (1, kH, kW, 1) over NHWC; a 4-D descriptor pools the 4 innermost dims. Within a window the
maximum is the first one in window order among the source elements (padding never wins; with NaNs
the value is NaN and the index names one of them); a window with no source element has value -inf
and index -1. ``descriptor.return_indices_mode`` says what the index counts
(``og.PoolingReturnIndicesMode``):

* ``GLOBAL_FLATTEN_ND``: the maximum's coordinates in the N innermost dims, flattened row-major
  (NCHW, N = 2: ``h * W + w``, PyTorch's index; NHWC, N = 3: ``(h * W + w) * C + c``, TensorFlow's);
* ``LOCAL_FLATTEN_ND``: its offset within the window, flattened over the window's N innermost dims
  (NCHW, N = 2: ``i * kW + j``).

``max_pool*_gradient`` adds each incoming gradient element to the source element its index names
(windows may share one); indices of -1, or naming the padding, add nothing. It needs the index to
locate the element: the mode must span every dim in which the window has more than one element (a
dim outside it is read at the window's start). ``max_pool*_gather`` reads the elements the indices
name (0 where they name none): the adjoint of ``max_pool*_gradient``.

Lowered to ``opgraph.kernels.max_pool`` (PyTorch's index or the window offset of NCHW 2-D windows, channels-last
tensors on CUDA), else to PyTorch's ``max_pool2d_with_indices`` and its backward where the 2-D geometry fits them
(symmetric padding of at most half the window, floor rounding), else to strided windows with an
argmax and a ``scatter_add``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..core.errors import AttributeValueError, DTypeError
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ..kernels import max_pool
from ._padding import (
    check_output_shape,
    check_same_dims,
    concrete_shape,
    effective_kernel,
    merge_dims,
    output_size,
    real_float_dtype,
    resolve_pads,
    shape_or_like,
)
from ._rules import expect_arity
from .pooling import (
    Descriptor,
    Pooling2dDescriptor,
    Pooling4dDescriptor,
    PoolingReturnIndicesMode,
    _descriptor,
    _pool2d_rule,
    _pool4d_rule,
    recomputed_max_pool_gradient,
    window4,
)
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp

Mode = PoolingReturnIndicesMode


# ---- geometry ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Geom:
    """The window over the 4 innermost stored dims for one concrete source shape."""

    sizes: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]
    outs: tuple[int, ...]

    @property
    def spans(self) -> tuple[int, ...]:
        """Padded elements the windows cover, per dim."""
        return tuple((o - 1) * s + effective_kernel(k, r) for o, s, k, r in
                     zip(self.outs, self.strides, self.kernel, self.dilations, strict=True))


class _Plan:
    """Per source shape: the geometry and the small index tensors the lowerings use."""

    def __init__(self, d: Descriptor, sizes: tuple[int, ...], device: torch.device) -> None:
        kernel, strides, dils, explicit = window4(d)
        pads = tuple(resolve_pads(d.padding_style, sizes[k], kernel[k], strides[k], dils[k], explicit[k])
                     for k in range(4))
        outs = tuple(int(output_size(d.padding_style, sizes[k], kernel[k], strides[k], dils[k], explicit[k],
                                     d.ceil_mode) or 0) for k in range(4))
        self.geo = g = _Geom(sizes, kernel, strides, dils, pads, outs)
        # per dim: the window start of each output position, shaped to broadcast over the 4 dims
        self.base = [(torch.arange(outs[k], device=device) * strides[k] - pads[k][0]).view(
            [outs[k] if i == k else 1 for i in range(4)]) for k in range(4)]
        # windows may reach into padding: then an argmax there must fall back to the first source element
        self.padded = any(p[0] for p in pads) or any(sp > s for sp, s in zip(g.spans, sizes, strict=True))
        first = torch.zeros((), dtype=torch.int64)
        for k in range(4):
            j = torch.arange(kernel[k])
            pos = torch.arange(outs[k])[:, None] * strides[k] - pads[k][0] + j * dils[k]
            ok = (pos >= 0) & (pos < sizes[k])
            fv = torch.where(ok.any(1), ok.int().argmax(1), -1)  # first source offset per output position
            first = torch.where((first[..., None] < 0) | (fv < 0), -1, first[..., None] * kernel[k] + fv)
        self.first_valid = first.to(device)
        self.torch2d = _torch_pool2d_args(d, g) if isinstance(d, Pooling2dDescriptor) else None


def _torch_pool2d_args(d: Pooling2dDescriptor, g: _Geom) -> tuple[Any, ...] | None:
    """(kernel, stride, padding, dilation) when PyTorch's 2-D kernels compute exactly this pooling."""
    pads = []
    for k in (1, 2) if d.data_layout.channels_last else (2, 3):
        before, eff = g.pads[k][0], effective_kernel(g.kernel[k], g.dilations[k])
        # PyTorch refuses padding beyond half the kernel (not the dilated window)
        if before > g.kernel[k] // 2 or (g.sizes[k] + 2 * before - eff) // g.strides[k] + 1 != g.outs[k]:
            return None
        pads.append(before)
    return d.kernel_sizes, d.strides, tuple(pads), d.dilation_rates


def _plans(d: Descriptor, device: torch.device) -> Callable[[tuple[int, ...]], _Plan]:
    cache: dict[tuple[int, ...], _Plan] = {}

    def get(sizes: tuple[int, ...]) -> _Plan:
        if sizes not in cache:
            cache[sizes] = _Plan(d, sizes, device)
        return cache[sizes]

    return get


# ---- index arithmetic --------------------------------------------------------------------------
def _encode(mode: Mode, plan: _Plan, coords: Sequence[torch.Tensor]) -> torch.Tensor:
    """The index of the source element at ``coords`` (one tensor per dim) in the window of each output."""
    g = plan.geo
    idx: torch.Tensor | None = None
    for k in range(4 - mode.flatten_dims, 4):
        if mode.is_local:
            term, size = torch.div(coords[k] - plan.base[k], g.dilations[k], rounding_mode="floor"), g.kernel[k]
        else:
            term, size = coords[k], g.sizes[k]
        idx = term if idx is None else idx * size + term
    assert idx is not None
    return idx


def _decode(mode: Mode, plan: _Plan, idx: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Coordinates of the source element each index names, and where it names one."""
    g = plan.geo
    rem = idx.long()
    valid = rem >= 0
    coords = list(plan.base)  # dims outside the mode: the window start (their window is one element)
    for k in reversed(range(4 - mode.flatten_dims, 4)):
        size = g.kernel[k] if mode.is_local else g.sizes[k]
        part, rem = rem % size, torch.div(rem, size, rounding_mode="floor")
        coords[k] = plan.base[k] + part * g.dilations[k] if mode.is_local else part
    valid = valid & (rem == 0)
    for k in range(4):
        valid = valid & (coords[k] >= 0) & (coords[k] < g.sizes[k])
    return coords, valid


def _flat_position(plan: _Plan, coords: Sequence[torch.Tensor]) -> torch.Tensor:
    pos = coords[0]
    for k in range(1, 4):
        pos = pos * plan.geo.sizes[k] + coords[k]
    return pos


def _locates(d: Descriptor) -> bool:
    mode = d.return_indices_mode
    kernel = window4(d)[0]
    return mode is not Mode.NONE and all(k == 1 for k in kernel[:4 - mode.flatten_dims])


def _check_locates(d: Descriptor) -> None:
    mode = d.return_indices_mode
    if mode is Mode.NONE:
        raise AttributeValueError("descriptor.return_indices_mode is NONE: set the mode the indices were made with")
    if not _locates(d):
        raise AttributeValueError(f"return_indices_mode {mode.name} cannot locate the maximum: the window spans "
                                  f"more than one element outside the {mode.flatten_dims} innermost dims")


# ---- max_pool*_return_indices ------------------------------------------------------------------
def _return_indices_rule(two_d: bool) -> Callable[[Any, tuple[TensorType, ...]], tuple[TensorType, ...]]:
    def rule(d: Descriptor, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
        t = _pool2d_rule(d, ins) if two_d else _pool4d_rule(d, ins)  # type: ignore[arg-type]
        if d.return_indices_mode is Mode.NONE:
            raise AttributeValueError("descriptor.return_indices_mode is NONE: choose what the indices count "
                                      "(e.g. og.PoolingReturnIndicesMode.GLOBAL_FLATTEN_2D)")
        return t, TensorType(t.shape, d.return_indices_data_type)

    return rule


def _argmax_windows(x: torch.Tensor, plan: _Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """Max and its local (row-major over the 4-dim window) offset, through padded strided views."""
    g = plan.geo
    flat: list[int] = []
    for k in range(4):
        after = g.spans[k] - g.sizes[k] - g.pads[k][0]
        if after < 0:  # trailing elements no window reaches
            x = x.narrow(x.dim() - 4 + k, 0, g.sizes[k] + after)
        flat = [g.pads[k][0], max(after, 0), *flat]
    if any(flat):
        x = F.pad(x, flat, value=-math.inf)
    reduced = 0
    for k in range(4):
        if g.kernel[k] == 1 and g.strides[k] == 1:
            continue
        x = x.unfold(x.dim() - reduced - 4 + k, effective_kernel(g.kernel[k], g.dilations[k]), g.strides[k])
        if g.dilations[k] > 1:
            x = x[..., ::g.dilations[k]]
        reduced += 1
    if not reduced:
        return x, torch.zeros(x.shape, dtype=torch.int64, device=x.device)
    values, local = x.flatten(-reduced).max(dim=-1)
    return values, local


def _local_coords(plan: _Plan, local: torch.Tensor) -> list[torch.Tensor]:
    g = plan.geo
    coords = []
    for k in range(4):
        inner = math.prod(g.kernel[k + 1:])
        coords.append(plan.base[k] + torch.div(local, inner, rounding_mode="floor") % g.kernel[k] * g.dilations[k])
    return coords


def _kernel_modes(d: Descriptor) -> bool:
    """``opgraph.kernels.max_pool`` computes these indices (NCHW 2-D windows: PyTorch's index, or the offset in
    the window) where it takes the tensors (``use_kernels``)."""
    return isinstance(d, Pooling2dDescriptor) and not d.data_layout.channels_last and \
        d.return_indices_mode in (Mode.GLOBAL_FLATTEN_2D, Mode.LOCAL_FLATTEN_2D)


def _return_indices_lower(ctx: LowerContext) -> Callable[..., Any]:
    d: Descriptor = ctx.attrs
    mode, dtype = d.return_indices_mode, d.return_indices_data_type.torch_dtype
    plans = _plans(d, ctx.device)
    cl = isinstance(d, Pooling2dDescriptor) and d.data_layout.channels_last
    torch_native = isinstance(d, Pooling2dDescriptor) and not cl and mode is Mode.GLOBAL_FLATTEN_2D
    kernels = _kernel_modes(d)
    interpret = bool(getattr(ctx.options, "triton_interpret", False))

    def run(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        plan = plans(tuple(x.shape[-4:]))
        out_hw = (plan.geo.outs[2], plan.geo.outs[3])
        if kernels and plan.torch2d is not None and max_pool.use_kernels(
                x, plan.torch2d, x.shape[0] * x.shape[1] * out_hw[0] * out_hw[1], interpret):
            return max_pool.forward(x, plan.torch2d, out_hw, dtype, local=mode is Mode.LOCAL_FLATTEN_2D)
        if plan.torch2d is not None:  # PyTorch's kernel, index h * W + w
            v, i = torch.ops.aten.max_pool2d_with_indices(x.permute(0, 3, 1, 2) if cl else x, *plan.torch2d)
            if torch_native:
                return v, i.to(dtype)
            if cl:
                v, i = v.permute(0, 2, 3, 1), i.permute(0, 2, 3, 1)
            w = x.shape[2 if cl else 3]
            h_w = [torch.div(i, w, rounding_mode="floor"), i % w]
            coords = [plan.base[0], *h_w, plan.base[3]] if cl else [plan.base[0], plan.base[1], *h_w]
            return v, _encode(mode, plan, coords).expand(v.shape).to(dtype).contiguous()
        v, local = _argmax_windows(x, plan)
        if plan.padded:  # an argmax in the padding: the window's maxima are -inf, take its first source element
            coords = _local_coords(plan, local)
            inside = coords[0] >= 0
            for k, c in enumerate(coords):
                inside = inside & (c >= 0) & (c < plan.geo.sizes[k])
            local = torch.where(inside, local, plan.first_valid)
        idx = _encode(mode, plan, _local_coords(plan, local))
        if plan.padded:
            idx = torch.where(local < 0, -1, idx)
        return v, idx.expand(v.shape).to(dtype).contiguous()  # an index may not vary along every dim

    return run


def _ri_op(name: str, two_d: bool, doc: str) -> OpDef:
    return OpDef(name, infer=_return_indices_rule(two_d), lower=_return_indices_lower,
                 attrs=Pooling2dDescriptor if two_d else Pooling4dDescriptor, fusion=FusionKind.OPAQUE, doc=doc)


MAX_POOL2D_RETURN_INDICES = _ri_op("max_pool2d_return_indices", True,
                                   "max over 2-D windows of H and W, and where each maximum is")
MAX_POOL4D_RETURN_INDICES = _ri_op("max_pool4d_return_indices", False,
                                   "max over windows of the 4 innermost dims, and where each maximum is")


@defvjp(MAX_POOL2D_RETURN_INDICES, MAX_POOL4D_RETURN_INDICES)
def _return_indices_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    x, d = op.inputs[0], op.attrs
    if not _locates(d):  # these indices cannot place the gradient: recompute ones that can
        return (recomputed_max_pool_gradient(g, x, d, ct[0]),)
    fn = g.max_pool2d_gradient if op.op is MAX_POOL2D_RETURN_INDICES else g.max_pool4d_gradient
    return (fn(ct[0], op.outputs[1], shape_or_like(x), d),)


# ---- max_pool*_gradient ------------------------------------------------------------------------
@attrs
class MaxPoolGradientAttrs:
    """``output_shape``: the forward source's shape; None when a shape-reference input gives it."""

    descriptor: Pooling2dDescriptor | Pooling4dDescriptor
    output_shape: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.descriptor, (Pooling2dDescriptor, Pooling4dDescriptor)):
            raise AttributeValueError(f"descriptor must be a pooling descriptor, got {self.descriptor!r}")
        object.__setattr__(self, "output_shape", check_output_shape(self.output_shape, "output_shape"))


def _expect_descriptor(d: Any, two_d: bool) -> None:
    cls = Pooling2dDescriptor if two_d else Pooling4dDescriptor
    if not isinstance(d, cls):
        raise AttributeValueError(f"needs an og.{cls.__name__}, got {type(d).__name__}")


def _expect_indices(t: TensorType) -> None:
    if not t.dtype.is_integer or t.dtype.packed:
        raise DTypeError(f"indices must be an integer tensor, got {t.dtype.name}")


def _pool_rule(two_d: bool, d: Any, src: TensorType) -> TensorType:
    return _pool2d_rule(d, (src,)) if two_d else _pool4d_rule(d, (src,))


def _pooled_positions(d: Descriptor, rank: int) -> set[int]:
    if isinstance(d, Pooling2dDescriptor):
        return {1, 2} if d.data_layout.channels_last else {2, 3}
    return set(range(rank - 4, rank))


def _gradient_rule(two_d: bool) -> Callable[[Any, tuple[TensorType, ...]], TensorType]:
    def rule(a: MaxPoolGradientAttrs, ins: tuple[TensorType, ...]) -> TensorType:
        d = a.descriptor
        _expect_descriptor(d, two_d)
        expect_arity(ins, 2 if a.output_shape is not None else 3)
        grad, idx = ins[:2]
        dtype = real_float_dtype(ins[:1])
        _expect_indices(idx)
        _check_locates(d)
        shape = a.output_shape if a.output_shape is not None else ins[2].shape
        fwd = _pool_rule(two_d, d, TensorType(shape, dtype))
        check_same_dims(grad.shape, fwd.shape, "the incoming gradient")
        check_same_dims(idx.shape, fwd.shape, "the indices")
        pooled = _pooled_positions(d, len(shape))
        out = tuple(s if s is not None or i in pooled else grad.shape[i] for i, s in enumerate(shape))
        return TensorType(out, dtype)

    return rule


def _gradient_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: MaxPoolGradientAttrs = ctx.attrs
    d, out_t = a.descriptor, ctx.out_types[0]
    mode = d.return_indices_mode
    plans = _plans(d, ctx.device)
    cl = isinstance(d, Pooling2dDescriptor) and d.data_layout.channels_last
    torch_native = isinstance(d, Pooling2dDescriptor) and not cl and mode is Mode.GLOBAL_FLATTEN_2D
    kernels = _kernel_modes(d)
    cpu = ctx.device.type == "cpu"
    interpret = bool(getattr(ctx.options, "triton_interpret", False))

    def run(grad: torch.Tensor, idx: torch.Tensor, *like: torch.Tensor) -> torch.Tensor:
        shape = concrete_shape(out_t.shape if out_t.is_static else (a.output_shape or like[0].shape))
        plan = plans(shape[-4:])
        if kernels and plan.torch2d is not None and max_pool.use_kernels(
                grad, plan.torch2d, math.prod(shape), interpret):
            return max_pool.backward(grad, idx, (shape[2], shape[3]), plan.torch2d,
                                     local=mode is Mode.LOCAL_FLATTEN_2D)
        if plan.torch2d is not None:  # PyTorch's backward, from indices h * W + w
            h, w = (shape[1], shape[2]) if cl else (shape[2], shape[3])
            if torch_native:
                i = idx.long()
            else:
                coords, valid = _decode(mode, plan, idx)
                yx = (coords[1], coords[2]) if cl else (coords[2], coords[3])
                i = torch.where(valid, yx[0] * w + yx[1], -1)
            if cpu:  # the CPU kernel writes at the index unchecked (-1 is skipped): keep it in bounds
                i = i.clamp(-1, h * w - 1)
            if cl:
                grad, i = grad.permute(0, 3, 1, 2), i.permute(0, 3, 1, 2)
                like_t = grad.new_empty((shape[0], h, w, shape[3])).permute(0, 3, 1, 2)
            else:  # in the gradient's memory format: PyTorch's kernel writes dx in the format of this source
                stored_nhwc = grad.is_contiguous(memory_format=torch.channels_last) and not grad.is_contiguous()
                like_t = torch.empty(shape, dtype=grad.dtype, device=grad.device,
                                     memory_format=torch.channels_last if stored_nhwc else torch.contiguous_format)
            dx = torch.ops.aten.max_pool2d_with_indices_backward(grad, like_t, *plan.torch2d, False, i)
            return dx.permute(0, 2, 3, 1) if cl else dx
        coords, valid = _decode(mode, plan, idx)
        pos = torch.where(valid, _flat_position(plan, coords), 0)
        lead, block = grad.shape[:-4], math.prod(plan.geo.sizes)
        src = torch.where(valid, grad, 0).reshape(-1, math.prod(plan.geo.outs))
        dx = grad.new_zeros(math.prod(lead), block).scatter_add_(1, pos.reshape(src.shape), src)
        return dx.view(*lead, *plan.geo.sizes)

    return run


def _grad_op(name: str, two_d: bool, doc: str) -> OpDef:
    return OpDef(name, infer=_gradient_rule(two_d), lower=_gradient_lower, attrs=MaxPoolGradientAttrs,
                 fusion=FusionKind.OPAQUE, doc=doc)


MAX_POOL2D_GRADIENT = _grad_op("max_pool2d_gradient", True,
                               "gradient of 2-D max pooling, scattered to where its indices say")
MAX_POOL4D_GRADIENT = _grad_op("max_pool4d_gradient", False,
                               "gradient of 4-D max pooling, scattered to where its indices say")


@defvjp(MAX_POOL2D_GRADIENT, MAX_POOL4D_GRADIENT)
def _gradient_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    d = op.attrs.descriptor
    fn = g.max_pool2d_gather if op.op is MAX_POOL2D_GRADIENT else g.max_pool4d_gather
    return (fn(ct[0], op.inputs[1], d), *([None] * (len(op.inputs) - 1)))


# ---- max_pool*_gather --------------------------------------------------------------------------
def _gather_rule(two_d: bool) -> Callable[[Any, tuple[TensorType, ...]], TensorType]:
    def rule(d: Descriptor, ins: tuple[TensorType, ...]) -> TensorType:
        expect_arity(ins, 2)
        src, idx = ins
        _expect_indices(idx)
        _check_locates(d)
        fwd = _pool_rule(two_d, d, src)
        check_same_dims(idx.shape, fwd.shape, "the indices")
        return TensorType(merge_dims(fwd.shape, idx.shape), fwd.dtype)

    return rule


def _gather_lower(ctx: LowerContext) -> Callable[..., Any]:
    d: Descriptor = ctx.attrs
    plans = _plans(d, ctx.device)

    def run(src: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        plan = plans(tuple(src.shape[-4:]))
        coords, valid = _decode(d.return_indices_mode, plan, idx)
        pos = torch.where(valid, _flat_position(plan, coords), 0)
        flat = src.reshape(-1, math.prod(plan.geo.sizes))
        vals = flat.gather(1, pos.reshape(flat.shape[0], -1)).view(idx.shape)
        return torch.where(valid, vals, 0)

    return run


def _gather_op(name: str, two_d: bool, doc: str) -> OpDef:
    return OpDef(name, infer=_gather_rule(two_d), lower=_gather_lower,
                 attrs=Pooling2dDescriptor if two_d else Pooling4dDescriptor, fusion=FusionKind.OPAQUE, doc=doc)


MAX_POOL2D_GATHER = _gather_op("max_pool2d_gather", True, "the source elements 2-D max-pooling indices name")
MAX_POOL4D_GATHER = _gather_op("max_pool4d_gather", False, "the source elements 4-D max-pooling indices name")


@defvjp(MAX_POOL2D_GATHER, MAX_POOL4D_GATHER)
def _gather_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    src, idx = op.inputs
    fn = g.max_pool2d_gradient if op.op is MAX_POOL2D_GATHER else g.max_pool4d_gradient
    return fn(ct[0], idx, shape_or_like(src), op.attrs), None


# ---- builder methods ---------------------------------------------------------------------------
class PoolingIndicesBuilders(GraphCore):
    """Graph methods for max pooling with indices and its gradient."""

    def max_pool2d_return_indices(self, source: Tensor, descriptor: Pooling2dDescriptor, *,
                                  name: str | None = None) -> tuple[Tensor, Tensor]:
        """Max pooling over H and W and the index of each maximum, as ``descriptor.return_indices_mode``
        and ``return_indices_data_type`` say (MPSGraph ``maxPooling2DReturnIndices``).

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((1, 1, 2, 4))
        >>> d = og.Pooling2dDescriptor(2, 2, 2, 2, return_indices_mode=og.PoolingReturnIndicesMode.GLOBAL_FLATTEN_2D)
        >>> y, i = g.max_pool2d_return_indices(x, d)
        >>> [t.tolist() for t in g.run({x: torch.tensor([[[[1.0, 5, 2, 0], [3, 4, 7, 6]]]])}, [y, i])]
        [[[[[5.0, 7.0]]]], [[[[1, 6]]]]]
        """
        d = _descriptor("max_pool2d_return_indices", descriptor, Pooling2dDescriptor)
        values, indices = self._apply_multi(MAX_POOL2D_RETURN_INDICES, [source], d, name)
        return values, indices

    def max_pool4d_return_indices(self, source: Tensor, descriptor: Pooling4dDescriptor, *,
                                  name: str | None = None) -> tuple[Tensor, Tensor]:
        """Max pooling over the 4 innermost dims and the index of each maximum (MPSGraph
        ``maxPooling4DReturnIndices``)."""
        d = _descriptor("max_pool4d_return_indices", descriptor, Pooling4dDescriptor)
        values, indices = self._apply_multi(MAX_POOL4D_RETURN_INDICES, [source], d, name)
        return values, indices

    def _max_pool_gradient(self, op: OpDef, gradient: Tensor, indices: Tensor, output_shape: Any,
                           descriptor: Any, cls: type, name: str | None) -> Tensor:
        d = _descriptor(op.name, descriptor, cls)
        if isinstance(output_shape, Tensor):
            return self._apply(op, [gradient, indices, output_shape], MaxPoolGradientAttrs(d), name)
        return self._apply(op, [gradient, indices], MaxPoolGradientAttrs(d, output_shape), name)

    def max_pool2d_gradient(self, gradient: Tensor, indices: Tensor, output_shape: Sequence[int] | Tensor,
                            descriptor: Pooling2dDescriptor, *, name: str | None = None) -> Tensor:
        """Gradient of 2-D max pooling from the indices ``max_pool2d_return_indices`` gave with the same
        descriptor (MPSGraph ``maxPooling2DGradient(withGradientTensor:indicesTensor:outputShape:...)``).

        ``output_shape``: the source's shape, or a tensor of that shape (only its shape is read).

        >>> import opgraph as og, torch
        >>> g = og.Graph(); dy = g.placeholder((1, 1, 1, 2)); i = g.placeholder((1, 1, 1, 2), og.int32)
        >>> d = og.Pooling2dDescriptor(2, 2, 2, 2, return_indices_mode=og.PoolingReturnIndicesMode.GLOBAL_FLATTEN_2D)
        >>> dx = g.max_pool2d_gradient(dy, i, (1, 1, 2, 4), d)
        >>> g.run({dy: torch.tensor([[[[1.0, 2.0]]]]), i: torch.tensor([[[[1, 6]]]], dtype=torch.int32)},
        ...       [dx])[0].tolist()
        [[[[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0]]]]
        """
        return self._max_pool_gradient(MAX_POOL2D_GRADIENT, gradient, indices, output_shape, descriptor,
                                       Pooling2dDescriptor, name)

    def max_pool4d_gradient(self, gradient: Tensor, indices: Tensor, output_shape: Sequence[int] | Tensor,
                            descriptor: Pooling4dDescriptor, *, name: str | None = None) -> Tensor:
        """Gradient of 4-D max pooling from the indices of ``max_pool4d_return_indices`` (MPSGraph
        ``maxPooling4DGradient(withGradientTensor:indicesTensor:outputShape:...)``)."""
        return self._max_pool_gradient(MAX_POOL4D_GRADIENT, gradient, indices, output_shape, descriptor,
                                       Pooling4dDescriptor, name)

    def max_pool2d_gather(self, source: Tensor, indices: Tensor, descriptor: Pooling2dDescriptor, *,
                          name: str | None = None) -> Tensor:
        """The elements of ``source`` that 2-D max-pooling ``indices`` name (0 where none): the adjoint
        of ``max_pool2d_gradient``; ``max_pool2d_gather(x, i, d)`` repeats the values of
        ``max_pool2d_return_indices(x, d)``."""
        d = _descriptor("max_pool2d_gather", descriptor, Pooling2dDescriptor)
        return self._apply(MAX_POOL2D_GATHER, [source, indices], d, name)

    def max_pool4d_gather(self, source: Tensor, indices: Tensor, descriptor: Pooling4dDescriptor, *,
                          name: str | None = None) -> Tensor:
        """The elements of ``source`` that 4-D max-pooling ``indices`` name (0 where none)."""
        d = _descriptor("max_pool4d_gather", descriptor, Pooling4dDescriptor)
        return self._apply(MAX_POOL4D_GATHER, [source, indices], d, name)


__all__ = ["MAX_POOL2D_GATHER", "MAX_POOL2D_GRADIENT", "MAX_POOL2D_RETURN_INDICES", "MAX_POOL4D_GATHER",
           "MAX_POOL4D_GRADIENT", "MAX_POOL4D_RETURN_INDICES", "MaxPoolGradientAttrs", "PoolingIndicesBuilders"]
