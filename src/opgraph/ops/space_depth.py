"""Ops: space_to_depth and depth_to_space (MPSGraph's spaceToDepth2D / depthToSpace2D), rank-4 images."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.errors import AttributeValueError, ShapeError
from ..core.shape import Shape
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ._padding import LAYOUTS_2D, TensorLayout
from ._rules import expect_arity
from .registry import LowerContext, OpDef, attrs, defvjp
from .shape import INJECTIVE, Cotangents, Grads, check_ints

# ---- space_to_depth / depth_to_space ---------------------------------------------------------


@attrs
class SpaceToDepthAttrs:
    block_size: int
    data_layout: TensorLayout = TensorLayout.NCHW
    pixel_shuffle: bool = False  # depth index c*b*b + dy*b + dx (PyTorch's pixel_(un)shuffle) instead of DCR


def _s2d_rule(inverse: bool) -> Callable[[SpaceToDepthAttrs, tuple[TensorType, ...]], TensorType]:
    def rule(a: SpaceToDepthAttrs, ins: tuple[TensorType, ...]) -> TensorType:
        expect_arity(ins, 1)
        x = ins[0]
        if a.data_layout not in LAYOUTS_2D:
            raise AttributeValueError(f"data_layout must be TensorLayout.NCHW or NHWC, got {a.data_layout!r}")
        check_ints((a.block_size,), "block_size", minimum=1)
        if x.rank != 4:
            raise ShapeError(f"expects a rank-4 {a.data_layout.value} tensor, got rank {x.rank}")
        b = a.block_size
        n, c, h, w = _nchw(x.shape, a.data_layout)
        if inverse:
            if c is not None and c % (b * b):
                raise ShapeError(f"depth {c} is not divisible by block_size**2 = {b * b}")
            out = (n, None if c is None else c // (b * b), None if h is None else h * b,
                   None if w is None else w * b)
        else:
            for what, d in (("height", h), ("width", w)):
                if d is not None and d % b:
                    raise ShapeError(f"{what} {d} is not divisible by block_size {b}")
            out = (n, None if c is None else c * b * b, None if h is None else h // b,
                   None if w is None else w // b)
        return TensorType(_from_nchw(out, a.data_layout), x.dtype)

    return rule


def _nchw(shape: Shape, layout: TensorLayout) -> Shape:
    return shape if layout is TensorLayout.NCHW else (shape[0], shape[3], shape[1], shape[2])


def _from_nchw(shape: Shape, layout: TensorLayout) -> Shape:
    return shape if layout is TensorLayout.NCHW else (shape[0], shape[2], shape[3], shape[1])


def _space_to_depth_lower(ctx: LowerContext) -> Callable[..., Any]:
    b, layout, shuffle = ctx.attrs.block_size, ctx.attrs.data_layout, ctx.attrs.pixel_shuffle
    # block axes (dy, dx) land before the channel axis (DCR) or after it (pixel shuffle)
    if layout is TensorLayout.NCHW:
        perm = (0, 1, 3, 5, 2, 4) if shuffle else (0, 3, 5, 1, 2, 4)
    else:
        perm = (0, 1, 3, 5, 2, 4) if shuffle else (0, 1, 3, 2, 4, 5)

    def fn(x: torch.Tensor) -> torch.Tensor:
        if layout is TensorLayout.NCHW:
            n, c, h, w = x.shape
            y = x.reshape(n, c, h // b, b, w // b, b).permute(perm)
            return y.reshape(n, c * b * b, h // b, w // b)
        n, h, w, c = x.shape
        y = x.reshape(n, h // b, b, w // b, b, c).permute(perm)
        return y.reshape(n, h // b, w // b, c * b * b)

    return fn


def _depth_to_space_lower(ctx: LowerContext) -> Callable[..., Any]:
    b, layout, shuffle = ctx.attrs.block_size, ctx.attrs.data_layout, ctx.attrs.pixel_shuffle

    def fn(x: torch.Tensor) -> torch.Tensor:
        if layout is TensorLayout.NCHW:
            n, c, h, w = x.shape
            if shuffle:
                y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
            else:
                y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
            return y.reshape(n, c // (b * b), h * b, w * b)
        n, h, w, c = x.shape
        if shuffle:
            y = x.reshape(n, h, w, c // (b * b), b, b).permute(0, 1, 4, 2, 5, 3)
        else:
            y = x.reshape(n, h, w, b, b, c // (b * b)).permute(0, 1, 3, 2, 4, 5)
        return y.reshape(n, h * b, w * b, c // (b * b))

    return fn


SPACE_TO_DEPTH = OpDef("space_to_depth", infer=_s2d_rule(False), lower=_space_to_depth_lower,
                       attrs=SpaceToDepthAttrs, fusion=INJECTIVE,
                       doc="move block_size x block_size spatial blocks into the depth axis")
DEPTH_TO_SPACE = OpDef("depth_to_space", infer=_s2d_rule(True), lower=_depth_to_space_lower,
                       attrs=SpaceToDepthAttrs, fusion=INJECTIVE,
                       doc="inverse of space_to_depth: depth blocks back to spatial positions")


@defvjp(SPACE_TO_DEPTH, DEPTH_TO_SPACE)
def _s2d_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    inverse = DEPTH_TO_SPACE if op.op is SPACE_TO_DEPTH else SPACE_TO_DEPTH  # a permutation: adjoint = inverse
    return (g._apply(inverse, [ct[0]], op.attrs),)


def as_data_layout(value: object) -> TensorLayout:
    """``og.TensorLayout.NCHW`` or ``NHWC`` from itself or its name."""
    if isinstance(value, str) and value.upper() in TensorLayout.__members__:
        value = TensorLayout[value.upper()]
    if value in LAYOUTS_2D:
        return value
    raise AttributeValueError(f"unknown data layout {value!r} for a 2-D image; expects NCHW or NHWC")



class SpaceDepthBuilders(GraphCore):
    """Graph methods for space_to_depth and depth_to_space."""

    def space_to_depth(self, x: Tensor, block_size: int, data_layout: object = TensorLayout.NCHW, *,
                       pixel_shuffle: bool = False, name: str | None = None) -> Tensor:
        """Move ``block_size``-square spatial blocks into depth (MPSGraph's spaceToDepth2D), rank 4.

        Depth order is DCR, as TensorFlow and ONNX: output channel ``(dy * b + dx) * C + c``;
        ``pixel_shuffle=True`` gives ``c * b * b + dy * b + dx`` (PyTorch's pixel_unshuffle).

        >>> import opgraph as og
        >>> g = og.Graph(); g.space_to_depth(g.placeholder((1, 3, 4, 6)), 2).shape
        (1, 12, 2, 3)
        """
        a = SpaceToDepthAttrs(block_size, as_data_layout(data_layout), bool(pixel_shuffle))
        return self._apply(SPACE_TO_DEPTH, [self._as_tensor(x)], a, name)

    def depth_to_space(self, x: Tensor, block_size: int, data_layout: object = TensorLayout.NCHW, *,
                       pixel_shuffle: bool = False, name: str | None = None) -> Tensor:
        """Inverse of :meth:`space_to_depth` (MPSGraph's depthToSpace2D): DCR order unless
        ``pixel_shuffle=True`` (then PyTorch's pixel_shuffle).

        >>> import opgraph as og
        >>> g = og.Graph(); g.depth_to_space(g.placeholder((1, 2, 2, 12)), 2, "NHWC").shape
        (1, 4, 4, 3)
        """
        a = SpaceToDepthAttrs(block_size, as_data_layout(data_layout), bool(pixel_shuffle))
        return self._apply(DEPTH_TO_SPACE, [self._as_tensor(x)], a, name)
