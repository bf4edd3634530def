"""Image resize: resize_nearest and resize_bilinear (MPSGraph ``resize``, ``resizeNearest``, ``resizeBilinear``).

The source coordinate of output pixel ``d`` along a spatial axis (input size ``n``, output ``m``) is,
as in TensorFlow 2's resize:

* ``align_corners``:   ``d * (n - 1) / (m - 1)`` (0 when ``m == 1``); it takes precedence over
  ``center_result``, as in MPSGraph (PyTorch's MPS backend passes both for ``align_corners=True``);
* ``center_result``:   ``(d + 0.5) * n / m - 0.5`` (half-pixel centers);
* neither:             ``d * n / m`` (asymmetric).

The gradient ops (MPSGraph ``resizeNearest/resizeBilinear(withGradient:input:...)``) take the result's
gradient and the input (only its shape is read) and sum the gradient back onto the source pixels
each output pixel read (bilinear: weighted by its two interpolation weights per axis).

Nearest rounds that coordinate with ``nearest_rounding_mode`` (computed exactly in integers, so
ties are ties) and clamps it into ``[0, n - 1]``; bilinear interpolates between the two neighbours
after clamping the coordinate at 0, TensorFlow's rule. Nearest is pure data movement (any dtype);
bilinear takes floating dtypes and computes float16/bfloat16 in float32.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..core.dtype import FLOAT_DTYPES
from ..core.errors import AttributeValueError, ShapeError
from ..core.types import TensorType
from ..ir.attrs import serializable
from ..ir.graph import GraphCore, Operation, Tensor
from ._padding import TensorLayout, check_enum
from ._rules import expect_arity, expect_dtype
from .norm import compute_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp


@serializable
class ResizeMode(enum.Enum):
    """MPSGraph ``MPSGraphResizeMode``: which resize op ``Graph.resize`` builds."""

    NEAREST = 0
    BILINEAR = 1


@serializable
class ResizeNearestRoundingMode(enum.Enum):
    """MPSGraph ``MPSGraphResizeNearestRoundingMode``: how nearest resize rounds source coordinates."""

    ROUND_PREFER_CEIL = 0  # round half up (TF2's nearest with half-pixel centers; PyTorch "nearest-exact")
    ROUND_PREFER_FLOOR = 1  # round half down
    CEIL = 2
    FLOOR = 3  # PyTorch "nearest" (with center_result=False)
    ROUND_TO_EVEN = 4
    ROUND_TO_ODD = 5


# the image layouts resize accepts (MPSGraph also lists CHW and HWC; TensorLayout has no rank-3 members)
LAYOUTS = (TensorLayout.NCHW, TensorLayout.NHWC)


def spatial_axes(layout: TensorLayout) -> tuple[int, int]:
    """The (H, W) axes of ``layout``."""
    return layout.name.index("H"), layout.name.index("W")


# ---- type rule -------------------------------------------------------------------------------
def _check_common(a: Any, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    x = ins[0]
    check_enum(a, "data_layout", LAYOUTS)
    for k in ("center_result", "align_corners"):
        if not isinstance(getattr(a, k), bool):
            raise AttributeValueError(f"{k} must be a bool, got {getattr(a, k)!r}")
    size = a.size
    if not (isinstance(size, tuple) and len(size) == 2
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in size)):
        raise AttributeValueError(f"size must be two ints >= 1 (height, width), got {size!r}")
    layout = a.data_layout.name
    if x.rank != len(layout):
        raise ShapeError(f"a {layout} image must have rank {len(layout)}, got rank {x.rank}")
    shape = list(x.shape)
    for ax, s in zip(spatial_axes(a.data_layout), size, strict=True):
        if shape[ax] == 0:
            raise ShapeError(f"cannot resize an image with an empty {layout[ax]} dimension")
        shape[ax] = s
    return TensorType(tuple(shape), x.dtype)


# ---- resize_nearest --------------------------------------------------------------------------
@attrs
class ResizeNearestAttrs:
    size: tuple[int, int]
    center_result: bool = True
    align_corners: bool = False
    data_layout: TensorLayout = TensorLayout.NCHW
    nearest_rounding_mode: ResizeNearestRoundingMode = ResizeNearestRoundingMode.ROUND_PREFER_CEIL


def _resize_nearest_rule(a: ResizeNearestAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    check_enum(a, "nearest_rounding_mode", tuple(ResizeNearestRoundingMode))
    out = _check_common(a, ins)
    expect_dtype(ins[0], floating=True, integer=True, boolean=True)
    return out


def _round_ratio(p: torch.Tensor, q: int, mode: ResizeNearestRoundingMode) -> torch.Tensor:
    """``p / q`` (``q > 0``) rounded by ``mode``, exactly, in int64."""
    R = ResizeNearestRoundingMode
    if mode is R.FLOOR:
        return torch.div(p, q, rounding_mode="floor")
    if mode is R.CEIL:
        return -torch.div(-p, q, rounding_mode="floor")
    if mode is R.ROUND_PREFER_CEIL:
        return torch.div(2 * p + q, 2 * q, rounding_mode="floor")
    if mode is R.ROUND_PREFER_FLOOR:
        return -torch.div(q - 2 * p, 2 * q, rounding_mode="floor")
    low = torch.div(p, q, rounding_mode="floor")
    tie = 2 * (p - low * q) == q
    even_low = low % 2 == 0
    pick_low = even_low if mode is R.ROUND_TO_EVEN else ~even_low
    return torch.where(tie, torch.where(pick_low, low, low + 1), torch.div(2 * p + q, 2 * q, rounding_mode="floor"))


def nearest_indices(n_in: int, n_out: int, center_result: bool, align_corners: bool,
                    mode: ResizeNearestRoundingMode) -> torch.Tensor:
    """int64 source index of each of ``n_out`` output pixels along one axis of size ``n_in``."""
    d = torch.arange(n_out, dtype=torch.int64)
    if align_corners:
        p, q = d * (n_in - 1), max(n_out - 1, 1)
    elif center_result:
        p, q = (2 * d + 1) * n_in - n_out, 2 * n_out
    else:
        p, q = d * n_in, n_out
    return _round_ratio(p, q, mode).clamp(0, max(n_in - 1, 0))


def _resize_nearest_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: ResizeNearestAttrs = ctx.attrs
    axes = spatial_axes(a.data_layout)
    cache: dict[tuple[int, int], torch.Tensor] = {}  # (axis, input size) -> indices; sizes may be dynamic

    def index(ax: int, n_in: int, n_out: int) -> torch.Tensor:
        key = (ax, n_in)
        if key not in cache:
            cache[key] = nearest_indices(n_in, n_out, a.center_result, a.align_corners,
                                         a.nearest_rounding_mode).to(ctx.device)
        return cache[key]

    def run(x: torch.Tensor) -> torch.Tensor:
        for ax, n_out in zip(axes, a.size, strict=True):
            x = x.index_select(ax, index(ax, x.shape[ax], n_out))
        return x

    return run


RESIZE_NEAREST = OpDef("resize_nearest", infer=_resize_nearest_rule, lower=_resize_nearest_lower,
                       attrs=ResizeNearestAttrs, fusion=FusionKind.INJECTIVE,
                       doc="nearest-neighbour resize of the H and W dims")


# ---- resize_bilinear -------------------------------------------------------------------------
@attrs
class ResizeBilinearAttrs:
    size: tuple[int, int]
    center_result: bool = True
    align_corners: bool = False
    data_layout: TensorLayout = TensorLayout.NCHW


def _resize_bilinear_rule(a: ResizeBilinearAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    out = _check_common(a, ins)
    expect_dtype(ins[0], FLOAT_DTYPES)
    return out


def linear_taps(n_in: int, n_out: int, center_result: bool,
                align_corners: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lower and upper source indices (int64) and the float64 weight of the upper one, per output pixel."""
    d = torch.arange(n_out, dtype=torch.float64)
    if align_corners:
        src = d * ((n_in - 1) / (n_out - 1)) if n_out > 1 else torch.zeros_like(d)
    elif center_result:
        src = (d + 0.5) * n_in / n_out - 0.5
    else:
        src = d * n_in / n_out
    src = src.clamp(min=0.0)
    lo = src.floor().to(torch.int64).clamp(max=n_in - 1)
    return lo, (lo + 1).clamp(max=n_in - 1), src - lo


def _resize_bilinear_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: ResizeBilinearAttrs = ctx.attrs
    dt = ctx.in_types[0].dtype
    out, ct = dt.torch_dtype, compute_dtype(dt)
    h, w = spatial_axes(a.data_layout)
    rank = ctx.in_types[0].rank

    if a.align_corners or a.center_result:  # PyTorch's bilinear modes: one vendor kernel
        def interpolate(x: torch.Tensor) -> torch.Tensor:  # NHWC goes through a channels-last view
            y = F.interpolate(x.to(ct).movedim((h, w), (2, 3)), size=a.size, mode="bilinear",
                              align_corners=a.align_corners)
            return y.movedim((2, 3), (h, w)).to(out)

        return interpolate

    cache: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def taps(ax: int, n_in: int, n_out: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if (ax, n_in) not in cache:
            lo, hi, wt = linear_taps(n_in, n_out, a.center_result, a.align_corners)
            view = [1] * rank
            view[ax] = n_out
            cache[(ax, n_in)] = (lo.to(ctx.device), hi.to(ctx.device), wt.to(ct).reshape(view).to(ctx.device))
        return cache[(ax, n_in)]

    def explicit(x: torch.Tensor) -> torch.Tensor:  # asymmetric coordinates: no PyTorch mode has them
        y = x.to(ct)
        for ax, n_out in ((h, a.size[0]), (w, a.size[1])):
            lo, hi, wt = taps(ax, y.shape[ax], n_out)
            low = y.index_select(ax, lo)
            y = low + (y.index_select(ax, hi) - low) * wt
        return y.to(out)

    return explicit


RESIZE_BILINEAR = OpDef("resize_bilinear", infer=_resize_bilinear_rule, lower=_resize_bilinear_lower,
                        attrs=ResizeBilinearAttrs, fusion=FusionKind.OPAQUE,
                        doc="bilinear resize of the H and W dims")


# ---- gradients -------------------------------------------------------------------------------
def _gradient_rule(forward: Callable[[Any, tuple[TensorType, ...]], TensorType]) -> Any:
    def rule(a: Any, ins: tuple[TensorType, ...]) -> TensorType:
        expect_arity(ins, 2)
        grad, x = ins
        expect_dtype(grad, FLOAT_DTYPES)
        fwd = forward(a, (x,))
        if grad.rank != fwd.rank or any(g is not None and f is not None and g != f
                                        for g, f in zip(grad.shape, fwd.shape, strict=True)):
            raise ShapeError(f"the incoming gradient has shape {grad.shape}, the resize result has {fwd.shape}")
        return TensorType(tuple(s if s is not None else g for s, g in zip(x.shape, grad.shape, strict=True)),
                          grad.dtype)

    return rule


def _gradient_lower(bilinear: bool) -> Callable[[LowerContext], Callable[..., Any]]:
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        a = ctx.attrs
        dt = ctx.in_types[0].dtype
        out, ct = dt.torch_dtype, compute_dtype(dt)
        h, w = spatial_axes(a.data_layout)
        rank = ctx.in_types[0].rank
        cache: dict[tuple[int, int], tuple[torch.Tensor, ...]] = {}

        def taps(ax: int, n_in: int, n_out: int) -> tuple[torch.Tensor, ...]:
            if (ax, n_in) not in cache:
                view = [1] * rank
                view[ax] = n_out
                if bilinear:
                    lo, hi, wt = linear_taps(n_in, n_out, a.center_result, a.align_corners)
                    cache[(ax, n_in)] = (lo.to(ctx.device), hi.to(ctx.device), wt.to(ct).reshape(view).to(ctx.device))
                else:
                    cache[(ax, n_in)] = (nearest_indices(n_in, n_out, a.center_result, a.align_corners,
                                                         a.nearest_rounding_mode).to(ctx.device),)
            return cache[(ax, n_in)]

        def run(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            g = grad.to(ct)
            if bilinear and (a.align_corners or a.center_result):  # PyTorch's bilinear modes: its backward
                cf = g.movedim((h, w), (2, 3))
                size = (cf.shape[0], cf.shape[1], x.shape[h], x.shape[w])
                dx = torch.ops.aten.upsample_bilinear2d_backward(cf, a.size, size, a.align_corners)
                return dx.movedim((2, 3), (h, w)).to(out)
            for ax, n_out in ((w, a.size[1]), (h, a.size[0])):  # the forward's axes in reverse
                shape = list(g.shape)
                shape[ax] = x.shape[ax]
                t = taps(ax, x.shape[ax], n_out)
                acc = g.new_zeros(shape).index_add_(ax, t[0], g * (1 - t[2]) if bilinear else g)
                g = acc.index_add_(ax, t[1], g * t[2]) if bilinear else acc
            return g.to(out)

        return run

    return lower


RESIZE_NEAREST_GRADIENT = OpDef("resize_nearest_gradient", infer=_gradient_rule(_resize_nearest_rule),
                                lower=_gradient_lower(False), attrs=ResizeNearestAttrs, fusion=FusionKind.OPAQUE,
                                doc="gradient of resize_nearest: the result's gradient summed onto the source pixels")
RESIZE_BILINEAR_GRADIENT = OpDef("resize_bilinear_gradient", infer=_gradient_rule(_resize_bilinear_rule),
                                 lower=_gradient_lower(True), attrs=ResizeBilinearAttrs, fusion=FusionKind.OPAQUE,
                                 doc="gradient of resize_bilinear: the result's gradient spread back by the weights")


@defvjp(RESIZE_NEAREST, RESIZE_BILINEAR)
def _resize_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    grad_op = RESIZE_NEAREST_GRADIENT if op.op is RESIZE_NEAREST else RESIZE_BILINEAR_GRADIENT
    return (g._apply(grad_op, [ct[0], op.inputs[0]], op.attrs),)


@defvjp(RESIZE_NEAREST_GRADIENT, RESIZE_BILINEAR_GRADIENT)
def _resize_gradient_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    # linear in the gradient, whose adjoint is the forward resize; the input gives only the shape
    forward = RESIZE_NEAREST if op.op is RESIZE_NEAREST_GRADIENT else RESIZE_BILINEAR
    return g._apply(forward, [ct[0]], op.attrs), None


# ---- builder methods -------------------------------------------------------------------------
def _size(size: Any) -> Any:
    """A list or tuple (or torch.Size) of sizes as a tuple; anything else is left for the type rule."""
    return tuple(size) if isinstance(size, (list, tuple)) else size


def _gradient_size(gradient: Any, layout: Any, size: Any) -> Any:
    """The resize's (height, width): ``size`` when given, else the incoming gradient's (static) H and W."""
    if size is not None:
        return _size(size)
    if not isinstance(gradient, Tensor) or not isinstance(layout, TensorLayout) or layout not in LAYOUTS:
        return None  # the type rule reports it
    if gradient.rank != 4:
        raise ShapeError(f"resize gradient: the incoming gradient must have rank 4, got {gradient.type}")
    size = tuple(gradient.shape[ax] for ax in spatial_axes(layout))
    if None in size:
        raise ShapeError(f"resize gradient: the incoming gradient {gradient.type} has dynamic H or W: "
                         "pass size=(height, width)")
    return size


class ResizeBuilders(GraphCore):
    """Graph methods for resize, resize_nearest, resize_bilinear."""

    def resize(self, x: Tensor, size: Sequence[int], mode: ResizeMode, *, center_result: bool = True,
               align_corners: bool = False, data_layout: TensorLayout = TensorLayout.NCHW,
               nearest_rounding_mode: ResizeNearestRoundingMode = ResizeNearestRoundingMode.ROUND_PREFER_CEIL,
               name: str | None = None) -> Tensor:
        """Resize the H and W dims of an image to ``size`` = (height, width) (MPSGraph ``resize``).

        ``nearest_rounding_mode`` applies to ``ResizeMode.NEAREST`` only.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((1, 1, 1, 2), og.float32)
        >>> g.run({x: [[[[1.0, 3.0]]]]}, [g.resize(x, (1, 4), og.ResizeMode.BILINEAR)])[0].tolist()
        [[[[1.0, 1.5, 2.5, 3.0]]]]
        """
        if mode is ResizeMode.NEAREST:
            return self.resize_nearest(x, size, nearest_rounding_mode=nearest_rounding_mode,
                                       center_result=center_result, align_corners=align_corners,
                                       data_layout=data_layout, name=name)
        if mode is ResizeMode.BILINEAR:
            return self.resize_bilinear(x, size, center_result=center_result, align_corners=align_corners,
                                        data_layout=data_layout, name=name)
        raise AttributeValueError(f"resize: mode must be an og.ResizeMode, got {mode!r}")

    def resize_nearest(self, x: Tensor, size: Sequence[int], *,
                       nearest_rounding_mode: ResizeNearestRoundingMode = ResizeNearestRoundingMode.ROUND_PREFER_CEIL,
                       center_result: bool = True, align_corners: bool = False,
                       data_layout: TensorLayout = TensorLayout.NCHW, name: str | None = None) -> Tensor:
        """Nearest-neighbour resize to ``size`` = (height, width) (MPSGraph ``resizeNearest``); any dtype."""
        a = ResizeNearestAttrs(_size(size), center_result, align_corners, data_layout, nearest_rounding_mode)
        return self._apply(RESIZE_NEAREST, [self._as_tensor(x)], a, name)

    def resize_bilinear(self, x: Tensor, size: Sequence[int], *, center_result: bool = True,
                        align_corners: bool = False, data_layout: TensorLayout = TensorLayout.NCHW,
                        name: str | None = None) -> Tensor:
        """Bilinear resize to ``size`` = (height, width) (MPSGraph ``resizeBilinear``); floating dtypes."""
        a = ResizeBilinearAttrs(_size(size), center_result, align_corners, data_layout)
        return self._apply(RESIZE_BILINEAR, [self._as_tensor(x)], a, name)

    def resize_nearest_gradient(self, gradient: Tensor, input: Tensor, *,
                                nearest_rounding_mode: ResizeNearestRoundingMode =
                                ResizeNearestRoundingMode.ROUND_PREFER_CEIL,
                                center_result: bool = True, align_corners: bool = False,
                                data_layout: TensorLayout = TensorLayout.NCHW, size: Sequence[int] | None = None,
                                name: str | None = None) -> Tensor:
        """Gradient of ``resize_nearest(input, ...)`` given the result's gradient (MPSGraph
        ``resizeNearest(withGradient:input:...)``); only the input's shape is read. ``size``, the
        resize's (height, width), defaults to the gradient's (static) H and W.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); dy = g.placeholder((1, 1, 1, 4)); x = g.placeholder((1, 1, 1, 2))
        >>> dx = g.resize_nearest_gradient(dy, x)
        >>> g.run({dy: torch.tensor([[[[1.0, 2.0, 3.0, 4.0]]]]), x: torch.zeros(1, 1, 1, 2)}, [dx])[0].tolist()
        [[[[3.0, 7.0]]]]
        """
        a = ResizeNearestAttrs(_gradient_size(gradient, data_layout, size), center_result, align_corners,
                               data_layout, nearest_rounding_mode)
        return self._apply(RESIZE_NEAREST_GRADIENT, [gradient, input], a, name)

    def resize_bilinear_gradient(self, gradient: Tensor, input: Tensor, *, center_result: bool = True,
                                 align_corners: bool = False, data_layout: TensorLayout = TensorLayout.NCHW,
                                 size: Sequence[int] | None = None, name: str | None = None) -> Tensor:
        """Gradient of ``resize_bilinear(input, ...)`` given the result's gradient (MPSGraph
        ``resizeBilinear(withGradient:input:...)``); only the input's shape is read. ``size`` as in
        ``resize_nearest_gradient``."""
        a = ResizeBilinearAttrs(_gradient_size(gradient, data_layout, size), center_result, align_corners,
                                data_layout)
        return self._apply(RESIZE_BILINEAR_GRADIENT, [gradient, input], a, name)


__all__ = ["RESIZE_BILINEAR", "RESIZE_BILINEAR_GRADIENT", "RESIZE_NEAREST", "RESIZE_NEAREST_GRADIENT",
           "ResizeBilinearAttrs", "ResizeBuilders", "ResizeMode",
           "ResizeNearestAttrs", "ResizeNearestRoundingMode", "linear_taps", "nearest_indices", "spatial_axes"]
