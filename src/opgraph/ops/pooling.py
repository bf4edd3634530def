"""Ops: pooling (MPSGraph's max/avg pooling 2D and 4D, L2-norm pooling).

``Pooling2dDescriptor`` pools the H and W dims of an NCHW/NHWC tensor; ``Pooling4dDescriptor`` pools
the 4 innermost dims of a tensor of rank >= 4 (a kernel size of 1 leaves a dim alone). Padding styles
and the output size (with ``ceil_mode``) follow ``opgraph.ops._padding``.

* max: padding counts as -inf.
* avg: the sum over the window (padding as zeros) divided by the number of window elements in the
  source, or, with ``include_zero_pad_to_average``, also those in the padding (never those past it
  that only ``ceil_mode`` adds). A window with nothing to count gives NaN.
* L2 norm: ``sqrt(sum(x ** 2))`` over the window, padding as zeros.

Max pooling with indices (``return_indices_mode``) and the gradient ops live in
``opgraph.ops.pooling_indices`` and ``opgraph.ops.pooling_grad``. Gradients: avg and L2 through their
gradient ops; plain max pooling's rule *recomputes* the argmax (``max_pool*_return_indices``) and
scatters with ``max_pool*_gradient``, while ``max_pool*_return_indices``' rule reuses the forward's
indices (build with it when the backward pass matters).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..core.dtype import DType, as_dtype, int8, int16, int32, int64
from ..core.errors import AttributeValueError, OpgraphError, ShapeError
from ..core.types import TensorType
from ..ir.attrs import serializable
from ..ir.graph import GraphCore, Operation, Tensor
from ._padding import (
    PaddingStyle,
    TensorLayout,
    check_bool,
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

Pairs = tuple[tuple[int, int], ...]
INDEX_DTYPES = (int32, int64)
OFFSET_LIMITS = {int8: 128, int16: 32768}  # the window elements whose offsets (0 .. n - 1) each small type holds


def offsets_dtype(window: int) -> DType | None:
    """The smallest integer dtype that holds every offset in a window of ``window`` elements (None: none of 16
    bits): what a ``LOCAL_FLATTEN`` mode may store instead of int32 or int64."""
    return next((dt for dt, limit in OFFSET_LIMITS.items() if window <= limit), None)


@serializable
class PoolingReturnIndicesMode(enum.Enum):
    """MPSGraph's ``MPSGraphPoolingReturnIndicesMode``: what ``max_pool*_return_indices`` counts.

    ``GLOBAL_FLATTEN_ND``: the maximum's coordinates in the N innermost dims of the source as stored,
    flattened row-major (NCHW with N = 2: ``h * W + w``, PyTorch's index). ``LOCAL_FLATTEN_ND``: its
    offset within the pooling window, flattened over the window's N innermost dims. A 2-D
    descriptor's window spans (1, 1, kH, kW) of NCHW, (1, kH, kW, 1) of NHWC.
    """

    NONE = 0
    GLOBAL_FLATTEN_1D = 1
    GLOBAL_FLATTEN_2D = 2
    GLOBAL_FLATTEN_3D = 3
    GLOBAL_FLATTEN_4D = 4
    LOCAL_FLATTEN_1D = 5
    LOCAL_FLATTEN_2D = 6
    LOCAL_FLATTEN_3D = 7
    LOCAL_FLATTEN_4D = 8

    @property
    def flatten_dims(self) -> int:
        """N: how many of the innermost dims the index spans (0 for NONE)."""
        return 0 if self.value == 0 else (self.value - 1) % 4 + 1

    @property
    def is_local(self) -> bool:
        return self.value > 4


def _check_indices_fields(d: Any) -> None:
    check_enum(d, "return_indices_mode", list(PoolingReturnIndicesMode))
    try:
        dt = as_dtype(d.return_indices_data_type)
    except OpgraphError:
        dt = None
    mode = d.return_indices_mode
    small = dt in OFFSET_LIMITS and mode.is_local  # a window offset; a global index would overflow silently
    if dt not in INDEX_DTYPES and not small:
        raise AttributeValueError(f"{type(d).__name__}.return_indices_data_type must be int32 or int64 (int8 or "
                                  f"int16 for a LOCAL_FLATTEN mode), got {d.return_indices_data_type!r}")
    if small and dt is not None:
        kernel = window4(d)[0]
        offsets = math.prod(kernel[4 - mode.flatten_dims:])
        if offsets > OFFSET_LIMITS[dt]:
            raise AttributeValueError(f"{type(d).__name__}.return_indices_data_type {dt.name} cannot hold the "
                                      f"{offsets} offsets of the window")
    object.__setattr__(d, "return_indices_data_type", dt)


# ---- descriptors -------------------------------------------------------------------------------
@attrs
class Pooling2dDescriptor:
    """MPSGraph's ``MPSGraphPooling2DOpDescriptor`` (fields in snake_case, same order)."""

    kernel_width: int
    kernel_height: int
    stride_in_x: int = 1
    stride_in_y: int = 1
    dilation_rate_in_x: int = 1
    dilation_rate_in_y: int = 1
    padding_left: int = 0
    padding_right: int = 0
    padding_top: int = 0
    padding_bottom: int = 0
    padding_style: PaddingStyle = PaddingStyle.EXPLICIT
    ceil_mode: bool = False
    include_zero_pad_to_average: bool = False
    data_layout: TensorLayout = TensorLayout.NCHW
    return_indices_mode: PoolingReturnIndicesMode = PoolingReturnIndicesMode.NONE
    return_indices_data_type: DType = int32

    def __post_init__(self) -> None:
        for f in ("kernel_width", "kernel_height", "stride_in_x", "stride_in_y", "dilation_rate_in_x",
                  "dilation_rate_in_y"):
            check_int(self, f, 1)
        for f in ("padding_left", "padding_right", "padding_top", "padding_bottom"):
            check_int(self, f, 0)
        check_enum(self, "padding_style", list(PaddingStyle))
        check_bool(self, "ceil_mode")
        check_bool(self, "include_zero_pad_to_average")
        check_enum(self, "data_layout", (TensorLayout.NCHW, TensorLayout.NHWC))
        _check_indices_fields(self)

    # the pooled dims in (y, x) order, as Pooling4dDescriptor's fields
    @property
    def kernel_sizes(self) -> tuple[int, int]:
        return (self.kernel_height, self.kernel_width)

    @property
    def strides(self) -> tuple[int, int]:
        return (self.stride_in_y, self.stride_in_x)

    @property
    def dilation_rates(self) -> tuple[int, int]:
        return (self.dilation_rate_in_y, self.dilation_rate_in_x)

    @property
    def padding_pairs(self) -> Pairs:
        return ((self.padding_top, self.padding_bottom), (self.padding_left, self.padding_right))


@attrs
class Pooling4dDescriptor:
    """MPSGraph's ``MPSGraphPooling4DOpDescriptor`` over the 4 innermost dims (fastest running last).

    ``padding_values`` holds 8 ints: before and after for each of the 4 dims, slowest dim first.

    >>> import opgraph as og
    >>> og.Pooling4dDescriptor((1, 1, 2, 2), strides=(1, 1, 2, 2)).padding_pairs
    ((0, 0), (0, 0), (0, 0), (0, 0))
    """

    kernel_sizes: tuple[int, int, int, int]
    strides: tuple[int, int, int, int] = (1, 1, 1, 1)
    dilation_rates: tuple[int, int, int, int] = (1, 1, 1, 1)
    padding_values: tuple[int, ...] = (0, 0, 0, 0, 0, 0, 0, 0)
    padding_style: PaddingStyle = PaddingStyle.EXPLICIT
    ceil_mode: bool = False
    include_zero_pad_to_average: bool = False
    return_indices_mode: PoolingReturnIndicesMode = PoolingReturnIndicesMode.NONE
    return_indices_data_type: DType = int32

    def __post_init__(self) -> None:
        set_ints(self, "kernel_sizes", 4, 1)
        set_ints(self, "strides", 4, 1, scalar_ok=True)
        set_ints(self, "dilation_rates", 4, 1, scalar_ok=True)
        set_ints(self, "padding_values", 8, 0)
        check_enum(self, "padding_style", list(PaddingStyle))
        check_bool(self, "ceil_mode")
        check_bool(self, "include_zero_pad_to_average")
        _check_indices_fields(self)

    @property
    def padding_pairs(self) -> Pairs:
        v = self.padding_values
        return tuple((v[2 * i], v[2 * i + 1]) for i in range(4))


Descriptor = Pooling2dDescriptor | Pooling4dDescriptor


def with_window_offsets(d: Pooling2dDescriptor) -> Pooling2dDescriptor | None:
    """``d`` returning each maximum's offset in its 2-D window (``LOCAL_FLATTEN_2D``) in the smallest dtype that
    holds it; None for a window too large for 16 bits."""
    dtype = offsets_dtype(d.kernel_width * d.kernel_height)
    if dtype is None:
        return None
    return dataclasses.replace(d, return_indices_mode=PoolingReturnIndicesMode.LOCAL_FLATTEN_2D,
                               return_indices_data_type=dtype)


def window4(d: Descriptor) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], Pairs]:
    """(kernel, strides, dilations, explicit padding) over the 4 innermost dims of the source as
    stored: a 2-D descriptor is the window (1, 1, kH, kW) over NCHW, (1, kH, kW, 1) over NHWC."""
    if isinstance(d, Pooling4dDescriptor):
        return d.kernel_sizes, d.strides, d.dilation_rates, d.padding_pairs
    (kh, kw), (sy, sx), (dy, dx), (tb, lr) = d.kernel_sizes, d.strides, d.dilation_rates, d.padding_pairs
    if d.data_layout.channels_last:
        return (1, kh, kw, 1), (1, sy, sx, 1), (1, dy, dx, 1), ((0, 0), tb, lr, (0, 0))
    return (1, 1, kh, kw), (1, 1, sy, sx), (1, 1, dy, dx), ((0, 0), (0, 0), tb, lr)


# ---- type rules --------------------------------------------------------------------------------
def _out_sizes(d: Descriptor, sizes: Sequence[int | None]) -> tuple[int | None, ...]:
    return tuple(output_size(d.padding_style, sizes[k], d.kernel_sizes[k], d.strides[k], d.dilation_rates[k],
                             d.padding_pairs[k], d.ceil_mode) for k in range(len(sizes)))


def _pool2d_rule(d: Pooling2dDescriptor, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    dtype = real_float_dtype(ins)
    (src,) = ins
    if src.rank != 4:
        raise ShapeError(f"source must have rank 4 ({d.data_layout.value}), got rank {src.rank}")
    cl = d.data_layout.channels_last
    spatial = src.shape[1:3] if cl else src.shape[2:]
    out = _out_sizes(d, spatial)
    check_positive_sizes(out, "the result")
    shape = (src.shape[0], *out, src.shape[3]) if cl else (*src.shape[:2], *out)
    return TensorType(shape, dtype)


def _pool4d_rule(d: Pooling4dDescriptor, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    dtype = real_float_dtype(ins)
    (src,) = ins
    if src.rank < 4:
        raise ShapeError(f"source must have rank >= 4 (the 4 innermost dims are pooled), got rank {src.rank}")
    out = _out_sizes(d, src.shape[-4:])
    check_positive_sizes(out, "the result")
    return TensorType((*src.shape[:-4], *out), dtype)


# ---- lowering ----------------------------------------------------------------------------------
class _Kind(enum.Enum):
    MAX = "max"
    AVG = "avg"
    L2 = "l2"


def _plan(d: Descriptor, sizes: tuple[int, ...], kind: _Kind, dtype: torch.dtype,
          device: torch.device) -> tuple[list[int], torch.Tensor | None]:
    """F.pad amounts (last dim first) that make the source exactly span the output's windows, and the
    avg divisor (None when every window counts its full size)."""
    flat: list[int] = []
    counts: list[list[int]] = []
    for k, size in enumerate(sizes):
        kernel, stride, dil = d.kernel_sizes[k], d.strides[k], d.dilation_rates[k]
        before, after = resolve_pads(d.padding_style, size, kernel, stride, dil, d.padding_pairs[k])
        out = output_size(d.padding_style, size, kernel, stride, dil, d.padding_pairs[k], d.ceil_mode)
        assert out is not None
        span = (out - 1) * stride + effective_kernel(kernel, dil)
        # after-padding up to the last window: more for ceil_mode, negative to crop unused elements
        flat = [before, span - size - before, *flat]
        lo, hi = (0, size + before + after) if d.include_zero_pad_to_average else (before, before + size)
        counts.append([sum(lo <= o * stride + j * dil < hi for j in range(kernel)) for o in range(out)])
    divisor = None
    if kind is _Kind.AVG and any(c != d.kernel_sizes[k] for k, cs in enumerate(counts) for c in cs):
        divisor = torch.ones((), dtype=torch.float64)
        for c in counts:
            divisor = divisor[..., None] * torch.tensor(c, dtype=torch.float64)
        divisor = divisor.to(dtype=dtype, device=device)
    return flat, divisor


def _window_reduce(x: torch.Tensor, d: Descriptor, kind: _Kind) -> torch.Tensor:
    """Max or sum over windows of the (already padded) innermost dims, through strided views."""
    n = len(d.kernel_sizes)
    reduced = 0
    for k in range(n):
        kernel, stride, dil = d.kernel_sizes[k], d.strides[k], d.dilation_rates[k]
        if kernel == 1 and stride == 1:
            continue
        x = x.unfold(x.dim() - reduced - n + k, effective_kernel(kernel, dil), stride)
        if dil > 1:
            x = x[..., ::dil]
        reduced += 1
    if not reduced:
        return x
    dims = tuple(range(-reduced, 0))
    return x.amax(dim=dims) if kind is _Kind.MAX else x.sum(dim=dims)


def _pool_lower(kind: _Kind) -> Callable[[LowerContext], Callable[..., Any]]:
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        d: Descriptor = ctx.attrs
        n = len(d.kernel_sizes)
        cl = isinstance(d, Pooling2dDescriptor) and d.data_layout.channels_last
        dtype = ctx.in_types[0].dtype.torch_dtype
        cache: dict[tuple[int, ...], tuple[list[int], torch.Tensor | None]] = {}
        fill = -math.inf if kind is _Kind.MAX else 0.0
        # torch's 2-D kernels where they fit (avg_pool2d has no dilation); strided views otherwise
        pool2d = n == 2 and (kind is _Kind.MAX or d.dilation_rates == (1, 1))
        window = math.prod(d.kernel_sizes)
        # torch's 2-D kernels pad by at most half the window on each side
        limit = [effective_kernel(k, r) // 2 for k, r in zip(d.kernel_sizes, d.dilation_rates, strict=True)]

        fast = _static_pool2d(ctx, kind, pool2d, limit) if not cl else None
        if fast is not None:
            return fast

        def run(x: torch.Tensor) -> torch.Tensor:
            if cl:
                x = x.permute(0, 3, 1, 2)
            sizes = tuple(x.shape[-n:])
            if sizes not in cache:
                cache[sizes] = _plan(d, sizes, kind, dtype, ctx.device)
            flat, divisor = cache[sizes]
            padding = (0, 0)
            if any(p < 0 for p in flat[1::2]):  # unused trailing elements: crop through a view, not a copy
                for k, p in enumerate(flat[1::2]):
                    if p < 0:
                        x = x.narrow(x.dim() - 1 - k, 0, x.shape[x.dim() - 1 - k] + p)
                flat = [max(p, 0) for p in flat]
            if pool2d and flat[0] == flat[1] and flat[2] == flat[3] and flat[0] <= limit[1] and flat[2] <= limit[0]:
                padding = (flat[2], flat[0])  # symmetric padding the torch kernel does itself, without a copy
            elif any(flat):
                x = F.pad(x, flat, value=fill)
            if kind is _Kind.L2:
                x = x * x
            if pool2d and kind is _Kind.MAX:
                y = F.max_pool2d(x, d.kernel_sizes, d.strides, padding, d.dilation_rates)
            elif pool2d:
                y = F.avg_pool2d(x, d.kernel_sizes, d.strides, padding, count_include_pad=True)
                if kind is _Kind.L2:
                    y = y * window
                elif divisor is not None:
                    y = y * (window / divisor)
            else:
                y = _window_reduce(x, d, kind)
                if kind is _Kind.AVG:
                    y = y / divisor if divisor is not None else y / window
            if kind is _Kind.L2:
                y = torch.sqrt(y)
            return y.permute(0, 2, 3, 1) if cl else y

        return run

    return lower


def _static_pool2d(ctx: LowerContext, kind: _Kind, pool2d: bool, limit: list[int]) -> Callable[..., Any] | None:
    """With a static NCHW shape, resolve the plan now: when torch's own kernel covers it exactly (symmetric
    padding it can do itself, no divisor, trailing elements its floor rounding drops), call it directly."""
    d = ctx.attrs
    x_t = ctx.in_types[0]
    if not (pool2d and kind is not _Kind.L2 and x_t.is_static):
        return None
    sizes = tuple(int(n) for n in x_t.shape[-2:] if n is not None)
    flat, divisor = _plan(d, sizes, kind, x_t.dtype.torch_dtype, ctx.device)
    befores = [flat[2], flat[0]]
    if divisor is not None or befores[0] > limit[0] or befores[1] > limit[1]:
        return None
    for k in range(2):  # torch pads symmetrically and floors: its output size must equal ours
        after = max(flat[3 - 2 * k], 0)
        if after > befores[k]:
            return None
        eff = effective_kernel(d.kernel_sizes[k], d.dilation_rates[k])
        ours = (sizes[k] + befores[k] + flat[3 - 2 * k] - eff) // d.strides[k] + 1
        if (sizes[k] + 2 * befores[k] - eff) // d.strides[k] + 1 != ours:
            return None
    kernel, stride, dilation, padding = d.kernel_sizes, d.strides, d.dilation_rates, tuple(befores)
    if kind is _Kind.MAX:
        return lambda x: torch.max_pool2d(x, kernel, stride, padding, dilation)
    if dilation != (1, 1) or any(padding):
        return None
    return lambda x: F.avg_pool2d(x, kernel, stride, padding)


def _pool(name: str, kind: _Kind, two_d: bool, doc: str) -> OpDef:
    return OpDef(name, infer=_pool2d_rule if two_d else _pool4d_rule, lower=_pool_lower(kind),
                 attrs=Pooling2dDescriptor if two_d else Pooling4dDescriptor, fusion=FusionKind.OPAQUE, doc=doc)


MAX_POOL2D = _pool("max_pool2d", _Kind.MAX, True, "max over 2-D windows of H and W")
AVG_POOL2D = _pool("avg_pool2d", _Kind.AVG, True, "mean over 2-D windows of H and W")
L2_NORM_POOL2D = _pool("l2_norm_pool2d", _Kind.L2, True, "L2 norm over 2-D windows of H and W")
MAX_POOL4D = _pool("max_pool4d", _Kind.MAX, False, "max over windows of the 4 innermost dims")
AVG_POOL4D = _pool("avg_pool4d", _Kind.AVG, False, "mean over windows of the 4 innermost dims")
L2_NORM_POOL4D = _pool("l2_norm_pool4d", _Kind.L2, False, "L2 norm over windows of the 4 innermost dims")


# ---- gradients ---------------------------------------------------------------------------------
@defvjp(AVG_POOL2D, AVG_POOL4D)
def _avg_pool_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    fn = g.avg_pool2d_gradient if op.op is AVG_POOL2D else g.avg_pool4d_gradient
    return (fn(ct[0], op.inputs[0], op.attrs),)


@defvjp(L2_NORM_POOL2D, L2_NORM_POOL4D)
def _l2_norm_pool_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    fn = g.l2_norm_pool2d_gradient if op.op is L2_NORM_POOL2D else g.l2_norm_pool4d_gradient
    return (fn(ct[0], op.inputs[0], op.attrs),)


def recompute_descriptor(d: Descriptor) -> Descriptor:
    """``d`` with int64 global indices over the innermost dims the window moves in (NCHW: ``h * W + w``,
    PyTorch's index; NHWC: ``(h * W + w) * C + c``): what plain max pooling's gradient recomputes."""
    kernel = window4(d)[0]
    first = next((i for i, k in enumerate(kernel) if k > 1), 3)
    mode = PoolingReturnIndicesMode(4 - first)
    return dataclasses.replace(d, return_indices_mode=mode, return_indices_data_type=int64)


def recomputed_max_pool_gradient(g: Any, x: Tensor, d: Descriptor, ct: Tensor) -> Tensor:
    """The gradient of max pooling ``x``: its argmax recomputed (max_pool*_return_indices), then
    max_pool*_gradient. A forward built with max_pool*_return_indices saves the recomputation."""
    d = recompute_descriptor(d)
    if isinstance(d, Pooling2dDescriptor):
        idx = g.max_pool2d_return_indices(x, d)[1]
        return g.max_pool2d_gradient(ct, idx, shape_or_like(x), d)
    idx = g.max_pool4d_return_indices(x, d)[1]
    return g.max_pool4d_gradient(ct, idx, shape_or_like(x), d)


@defvjp(MAX_POOL2D, MAX_POOL4D)
def _max_pool_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    return (recomputed_max_pool_gradient(g, op.inputs[0], op.attrs, ct[0]),)



# ---- builder methods ---------------------------------------------------------------------------
def _descriptor(op: str, value: Any, cls: type) -> Any:
    if not isinstance(value, cls):
        raise AttributeValueError(f"{op}: descriptor must be an og.{cls.__name__}, got {type(value).__name__}")
    return value


class PoolingBuilders(GraphCore):
    """Graph methods for pooling."""

    def max_pool2d(self, source: Tensor, descriptor: Pooling2dDescriptor, *, name: str | None = None) -> Tensor:
        """Max pooling over H and W (MPSGraph ``maxPooling2D``).

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((1, 1, 2, 4))
        >>> y = g.max_pool2d(x, og.Pooling2dDescriptor(2, 2, stride_in_x=2, stride_in_y=2))
        >>> g.run({x: torch.arange(8.0).reshape(1, 1, 2, 4)}, [y])[0].tolist()
        [[[[5.0, 7.0]]]]
        """
        return self._apply(MAX_POOL2D, [source], _descriptor("max_pool2d", descriptor, Pooling2dDescriptor), name)

    def avg_pool2d(self, source: Tensor, descriptor: Pooling2dDescriptor, *, name: str | None = None) -> Tensor:
        """Average pooling over H and W (MPSGraph ``avgPooling2D``); see the module doc for the divisor."""
        return self._apply(AVG_POOL2D, [source], _descriptor("avg_pool2d", descriptor, Pooling2dDescriptor), name)

    def l2_norm_pool2d(self, source: Tensor, descriptor: Pooling2dDescriptor, *,
                       name: str | None = None) -> Tensor:
        """L2-norm pooling over H and W: ``sqrt(sum(x ** 2))`` per window."""
        d = _descriptor("l2_norm_pool2d", descriptor, Pooling2dDescriptor)
        return self._apply(L2_NORM_POOL2D, [source], d, name)

    def max_pool4d(self, source: Tensor, descriptor: Pooling4dDescriptor, *, name: str | None = None) -> Tensor:
        """Max pooling over the 4 innermost dims (MPSGraph ``maxPooling4D``)."""
        return self._apply(MAX_POOL4D, [source], _descriptor("max_pool4d", descriptor, Pooling4dDescriptor), name)

    def avg_pool4d(self, source: Tensor, descriptor: Pooling4dDescriptor, *, name: str | None = None) -> Tensor:
        """Average pooling over the 4 innermost dims (MPSGraph ``avgPooling4D``)."""
        return self._apply(AVG_POOL4D, [source], _descriptor("avg_pool4d", descriptor, Pooling4dDescriptor), name)

    def l2_norm_pool4d(self, source: Tensor, descriptor: Pooling4dDescriptor, *,
                       name: str | None = None) -> Tensor:
        """L2-norm pooling over the 4 innermost dims (MPSGraph ``L2NormPooling4D``)."""
        d = _descriptor("l2_norm_pool4d", descriptor, Pooling4dDescriptor)
        return self._apply(L2_NORM_POOL4D, [source], d, name)


__all__ = ["AVG_POOL2D", "AVG_POOL4D", "L2_NORM_POOL2D", "L2_NORM_POOL4D", "MAX_POOL2D", "MAX_POOL4D",
           "Pooling2dDescriptor", "Pooling4dDescriptor", "PoolingBuilders", "PoolingReturnIndicesMode", "offsets_dtype",
           "window4", "with_window_offsets"]
