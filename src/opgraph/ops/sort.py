"""Ops: sort, argsort, top_k, bottom_k along one axis (MPSGraph's sort, argSort, topK, bottomK).

Inputs are bool, integer or real floating tensors. Indices are int32 (MPSGraph's index type).
Every op is stable: equal values keep their input order, so ties resolve to the lower index first
(also for ``descending`` and for ``top_k``, as TensorFlow's ``top_k``). NaN orders above ``+inf``
(last when ascending, first when descending or in ``top_k``), as NumPy and PyTorch sort.
FusionKind is OPAQUE: sorting is a library kernel, never part of a stitched region.
Gradients: ``sort`` and the values of ``top_k``/``bottom_k`` scatter the cotangent back through the
stable permutation (at ties, one valid choice of derivative); indices take none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.dtype import int32
from ..core.errors import AttributeValueError, ShapeError
from ..core.shape import normalize_axis
from ..core.types import TensorType
from ..ir.graph import GraphCore, Tensor
from ._rules import expect_arity, expect_dtype
from .reduce import check_axis, check_flag, expect_real
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp


def _sortable(ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    (t,) = ins
    expect_dtype(t, numeric=True, boolean=True)
    expect_real(t)
    return t


# ---- sort / argsort --------------------------------------------------------------------------------
@attrs
class SortAttrs:
    axis: int  # normalised (non-negative)
    descending: bool = False


def _sort_rule(a: SortAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    t = _sortable(ins)
    check_axis(a.axis, t.rank)
    check_flag(a.descending, "descending")
    return t


def _argsort_rule(a: SortAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    return TensorType(_sort_rule(a, ins).shape, int32)


def _sort_lower(ctx: LowerContext) -> Callable[..., Any]:
    axis, desc = ctx.attrs.axis, ctx.attrs.descending
    return lambda x: torch.sort(x, dim=axis, descending=desc, stable=True).values


def _argsort_lower(ctx: LowerContext) -> Callable[..., Any]:
    axis, desc = ctx.attrs.axis, ctx.attrs.descending
    return lambda x: torch.argsort(x, dim=axis, descending=desc, stable=True).to(torch.int32)


SORT = OpDef("sort", infer=_sort_rule, lower=_sort_lower, attrs=SortAttrs, fusion=FusionKind.OPAQUE,
             doc="values sorted along an axis (stable)")
ARGSORT = OpDef("argsort", infer=_argsort_rule, lower=_argsort_lower, attrs=SortAttrs,
                fusion=FusionKind.OPAQUE, differentiable=False,
                doc="int32 indices that sort along an axis (stable)")


@defvjp(SORT)
def _sort_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    # sort is a gather through the (stable) sorting permutation; its adjoint scatters back through it
    a: SortAttrs = op.attrs
    x = op.inputs[0]
    perm = g.argsort(x, a.axis, a.descending)
    return (g.scatter_along_axis(g.zeros_like(x), ct[0], perm, a.axis),)


# ---- top_k / bottom_k ------------------------------------------------------------------------------
@attrs
class TopKAttrs:
    k: int
    axis: int  # normalised (non-negative)


def _top_k_rule(a: TopKAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, TensorType]:
    t = _sortable(ins)
    axis = check_axis(a.axis, t.rank)
    if isinstance(a.k, bool) or not isinstance(a.k, int) or a.k < 0:
        raise AttributeValueError(f"k must be an int >= 0, got {a.k!r}")
    n = t.shape[axis]
    if n is not None and a.k > n:
        raise ShapeError(f"k={a.k} is larger than dimension {axis} of size {n}")
    shape = t.shape[:axis] + (a.k,) + t.shape[axis + 1:]
    return TensorType(shape, t.dtype), TensorType(shape, int32)


def _select_lower(largest: bool) -> Callable[[LowerContext], Callable[..., Any]]:
    # A stable full sort rather than torch.topk: topk leaves the order of equal values unspecified.
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        k, axis = ctx.attrs.k, ctx.attrs.axis
        check_k = ctx.in_types[0].shape[axis] is None  # the type rule could not check a dynamic dim

        def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            if check_k and k > x.shape[axis]:
                raise ShapeError(f"{'top_k' if largest else 'bottom_k'}: k={k} is larger than dimension "
                                 f"{axis} of size {x.shape[axis]}")
            v, i = torch.sort(x, dim=axis, descending=largest, stable=True)
            return v.narrow(axis, 0, k), i.narrow(axis, 0, k).to(torch.int32)

        return fn

    return lower


TOP_K = OpDef("top_k", infer=_top_k_rule, lower=_select_lower(True), attrs=TopKAttrs,
              fusion=FusionKind.OPAQUE,
              doc="the k largest values along an axis, largest first, and their int32 indices")
BOTTOM_K = OpDef("bottom_k", infer=_top_k_rule, lower=_select_lower(False), attrs=TopKAttrs,
                 fusion=FusionKind.OPAQUE,
                 doc="the k smallest values along an axis, smallest first, and their int32 indices")


@defvjp(TOP_K, BOTTOM_K)
def _select_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    x = op.inputs[0]  # the values' cotangent goes back to where they came from; the indices take none
    return (g.scatter_along_axis(g.zeros_like(x), ct[0], op.outputs[1], op.attrs.axis),)


# ---- builder methods -------------------------------------------------------------------------------
class SortBuilders(GraphCore):
    """Graph methods for sort, argsort, top_k, bottom_k."""

    def _axis_of(self, op: OpDef, t: Tensor, axis: int) -> int:
        if t.rank == 0:
            raise ShapeError(f"{op.name}: needs an input of rank >= 1, got a scalar {t.type}")
        return normalize_axis(axis, t.rank, f"{op.name}: axis")

    def sort(self, x: Tensor, axis: int = -1, descending: bool = False, *, name: str | None = None) -> Tensor:
        """``x`` sorted along ``axis`` (stable; NaN last when ascending).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((4,), og.float32)
        >>> g.run({x: [3.0, 1.0, 4.0, 1.5]}, [g.sort(x, descending=True)])[0].tolist()
        [4.0, 3.0, 1.5, 1.0]
        """
        t = self._as_tensor(x)
        return self._apply(SORT, [t], SortAttrs(self._axis_of(SORT, t, axis), bool(descending)), name)

    def argsort(self, x: Tensor, axis: int = -1, descending: bool = False, *, name: str | None = None) -> Tensor:
        """int32 indices that sort ``x`` along ``axis``; equal values keep their order.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((4,), og.int32)
        >>> g.run({x: [2, 1, 2, 1]}, [g.argsort(x)])[0].tolist()
        [1, 3, 0, 2]
        """
        t = self._as_tensor(x)
        return self._apply(ARGSORT, [t], SortAttrs(self._axis_of(ARGSORT, t, axis), bool(descending)), name)

    def _select(self, op: OpDef, x: Any, k: int, axis: int, name: str | None) -> tuple[Tensor, Tensor]:
        t = self._as_tensor(x)
        if isinstance(k, bool) or not isinstance(k, int):
            raise AttributeValueError(f"{op.name}: k must be an int, got {k!r}")
        values, indices = self._apply_multi(op, [t], TopKAttrs(k, self._axis_of(op, t, axis)), name)
        return values, indices

    def top_k(self, x: Tensor, k: int, axis: int = -1, *, name: str | None = None) -> tuple[Tensor, Tensor]:
        """The ``k`` largest values along ``axis``, largest first, and their int32 indices.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((5,), og.float32)
        >>> v, i = g.top_k(x, 2)
        >>> [t.tolist() for t in g.run({x: [1.0, 5.0, 2.0, 5.0, 3.0]}, [v, i])]
        [[5.0, 5.0], [1, 3]]
        """
        return self._select(TOP_K, x, k, axis, name)

    def bottom_k(self, x: Tensor, k: int, axis: int = -1, *, name: str | None = None) -> tuple[Tensor, Tensor]:
        """The ``k`` smallest values along ``axis``, smallest first, and their int32 indices."""
        return self._select(BOTTOM_K, x, k, axis, name)


__all__ = ["ARGSORT", "BOTTOM_K", "SORT", "TOP_K", "SortAttrs", "SortBuilders", "TopKAttrs"]
