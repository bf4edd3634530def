"""Ops: reductions (sum, mean, max, min, product, and, or), argmax/argmin, variance.

MPSGraph's reductions in snake_case, with NumPy's ``keepdims`` (MPSGraph always keeps the reduced
axes as size 1; ``keepdims=True`` gives that). Conventions shared by the family:

* ``axes=None`` reduces every axis; an int or a sequence names axes (negative counts from the end);
  an empty sequence reduces nothing (the result is the input, in the op's result dtype), as NumPy.
* Results keep the input dtype (integer sums wrap on overflow, as MPSGraph; PyTorch would widen
  to int64). ``reduce_mean`` and ``variance`` take floating dtypes only.
* ``reduce_max``/``reduce_min`` ignore NaN unless a whole slice is NaN (``np.nanmax``); the
  ``_with_nan_propagation`` forms return NaN when any element is NaN (``np.max``). Over an empty
  slice they give the identity (``-inf``/``+inf``, the integer type's min/max, ``False``/``True``).
* ``argmax``/``argmin`` return int32 indices (MPSGraph's index type), the first index on ties, and
  the first NaN's index when a slice holds NaN (``np.argmax``).
* Gradients: ``reduce_prod``'s is exact where the input has zeros (the product of the other elements,
  built from exclusive running products, never a division). ``reduce_max``/``reduce_min`` and their
  NaN forms split the cotangent evenly among the elements equal to the result (ties share it; a NaN
  result goes to the slice's NaNs). ``argmax``/``argmin``/``reduce_and``/``reduce_or`` take none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..core.dtype import DType, bool_, int32
from ..core.errors import AttributeValueError, DTypeError, ShapeError
from ..core.shape import normalize_axes, normalize_axis
from ..core.types import TensorType
from ..ir.graph import GraphCore, Tensor
from ._rules import check_axis, expect_arity, expect_bool, expect_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp

REDUCTION = FusionKind.REDUCTION


# ---- shared helpers (also used by scan and sort) ---------------------------------------------------
check_flag = expect_bool  # the family's historical name, used by scan and sort


def identity_value(dtype: DType, largest: bool) -> float | int | bool:
    """The identity of max (``largest=False``: the smallest value) or of min (``largest=True``)."""
    if dtype.is_bool:
        return largest
    if dtype.is_floating:
        return float("inf") if largest else float("-inf")
    info = torch.iinfo(dtype.torch_dtype)
    return info.max if largest else info.min


def expect_real(t: TensorType) -> None:
    """Raise ``DTypeError`` for complex inputs to ops that compare values."""
    if t.dtype.is_complex:
        raise DTypeError(f"input dtype {t.dtype.name} is not supported (complex values have no order)")


def _reduced_shape(shape: Sequence[Any], axes: tuple[int, ...], keepdims: bool) -> list[Any]:
    return [1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes]


# ---- reductions over axes --------------------------------------------------------------------------
@attrs
class ReduceAttrs:
    axes: tuple[int, ...]  # normalised: non-negative, sorted, unique
    keepdims: bool = False


def _check_reduce_attrs(a: ReduceAttrs, rank: int) -> None:
    if not isinstance(a.axes, tuple) or any(isinstance(x, bool) or not isinstance(x, int) for x in a.axes):
        raise AttributeValueError(f"axes must be a tuple of ints, got {a.axes!r}")
    if any(not 0 <= x < rank for x in a.axes):
        raise ShapeError(f"axes {a.axes} are out of range for rank {rank}")
    if list(a.axes) != sorted(set(a.axes)):
        raise ShapeError(f"axes {a.axes} must be sorted and must not repeat an axis")
    check_flag(a.keepdims, "keepdims")


def reduce_rule(*, result: DType | None = None, floating: bool = False, integer: bool = False,
                boolean: bool = False, numeric: bool = False, real: bool = False,
                ) -> Callable[[ReduceAttrs, tuple[TensorType, ...]], TensorType]:
    """One input of the named dtype categories (``real`` rejects complex), reduced over ``a.axes``."""

    def rule(a: ReduceAttrs, ins: tuple[TensorType, ...]) -> TensorType:
        expect_arity(ins, 1)
        (t,) = ins
        expect_dtype(t, floating=floating, integer=integer, boolean=boolean, numeric=numeric)
        if real:
            expect_real(t)
        _check_reduce_attrs(a, t.rank)
        return TensorType(tuple(_reduced_shape(t.shape, a.axes, a.keepdims)), result or t.dtype)

    return rule


def _axes_lower(fn: Callable[[torch.Tensor, tuple[int, ...], bool, torch.dtype], torch.Tensor],
                empty: Callable[[torch.Tensor], torch.Tensor] | None = None,
                ) -> Callable[[LowerContext], Callable[..., Any]]:
    """A lowering calling ``fn(x, axes, keepdims, out_dtype)``. With no axes it computes ``empty(x)``
    (default: a copy), since PyTorch's ``dim=()`` would reduce everything."""

    def lower(ctx: LowerContext) -> Callable[..., Any]:
        axes, keep = ctx.attrs.axes, ctx.attrs.keepdims
        out = ctx.out_types[0].dtype.torch_dtype
        if not axes:
            return empty or (lambda x: x.clone())
        return lambda x: fn(x, axes, keep, out)

    return lower


def _prod(x: torch.Tensor, axes: tuple[int, ...], keep: bool, dt: torch.dtype) -> torch.Tensor:
    for ax in reversed(axes):  # torch.prod takes one dim; from the last so earlier indices stay valid
        x = torch.prod(x, dim=ax, keepdim=keep, dtype=dt)
    return x


def _extremum(largest: bool, propagate_nan: bool) -> Callable[[LowerContext], Callable[..., Any]]:
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        axes, keep = ctx.attrs.axes, ctx.attrs.keepdims
        dtype = ctx.in_types[0].dtype
        if not axes:
            return lambda x: x.clone()
        ident = identity_value(dtype, not largest)
        amax = torch.amax if largest else torch.amin
        skip_nan = dtype.is_floating and not propagate_nan

        def fn(x: torch.Tensor) -> torch.Tensor:
            if x.numel() == 0:  # torch refuses empty reductions; the identity is MPSGraph's answer
                return torch.full(_reduced_shape(x.shape, axes, keep), ident, dtype=x.dtype, device=x.device)
            if not skip_nan:
                return amax(x, dim=axes, keepdim=keep)
            nan = torch.isnan(x)
            m = amax(torch.where(nan, ident, x), dim=axes, keepdim=keep)
            return torch.where(torch.all(nan, dim=axes, keepdim=keep), float("nan"), m)

        return fn

    return lower


REDUCE_SUM = OpDef("reduce_sum", infer=reduce_rule(numeric=True), attrs=ReduceAttrs, fusion=REDUCTION,
                   lower=_axes_lower(lambda x, ax, k, dt: torch.sum(x, dim=ax, keepdim=k, dtype=dt)),
                   doc="sum over axes (keeps the input dtype)")
REDUCE_PROD = OpDef("reduce_prod", infer=reduce_rule(numeric=True), attrs=ReduceAttrs, fusion=REDUCTION,
                    lower=_axes_lower(_prod), doc="product over axes (keeps the input dtype)")
REDUCE_MEAN = OpDef("reduce_mean", infer=reduce_rule(floating=True), attrs=ReduceAttrs, fusion=REDUCTION,
                    lower=_axes_lower(lambda x, ax, k, dt: torch.mean(x, dim=ax, keepdim=k)),
                    doc="mean over axes (floating dtypes)")
VARIANCE = OpDef("variance", infer=reduce_rule(floating=True, real=True), attrs=ReduceAttrs, fusion=REDUCTION,
                 lower=_axes_lower(lambda x, ax, k, dt: torch.var(x, dim=ax, keepdim=k, correction=0),
                                   lambda x: (x - x).square()),  # 0, or NaN for NaN/inf (as NumPy)
                 doc="population variance over axes (divides by N, as MPSGraph)")
_ORDERED = reduce_rule(numeric=True, boolean=True, real=True)  # bool, integers, real floats
REDUCE_MAX = OpDef("reduce_max", infer=_ORDERED, attrs=ReduceAttrs, fusion=REDUCTION,
                   lower=_extremum(True, False), doc="maximum over axes, ignoring NaN unless all are NaN")
REDUCE_MIN = OpDef("reduce_min", infer=_ORDERED, attrs=ReduceAttrs, fusion=REDUCTION,
                   lower=_extremum(False, False), doc="minimum over axes, ignoring NaN unless all are NaN")
REDUCE_MAX_NAN = OpDef("reduce_max_with_nan_propagation", infer=_ORDERED, attrs=ReduceAttrs, fusion=REDUCTION,
                       lower=_extremum(True, True), doc="maximum over axes; NaN if any is NaN")
REDUCE_MIN_NAN = OpDef("reduce_min_with_nan_propagation", infer=_ORDERED, attrs=ReduceAttrs, fusion=REDUCTION,
                       lower=_extremum(False, True), doc="minimum over axes; NaN if any is NaN")


# ---- gradients of the reductions -------------------------------------------------------------------
def keepdims_like(g: Any, ct: Tensor, op: Any) -> Tensor:
    """A reduction's cotangent with the reduced axes put back as size 1 (ready to broadcast)."""
    a: ReduceAttrs = op.attrs
    return ct if a.keepdims or not a.axes else g.expand_dims(ct, axes=list(a.axes))


def reduced_count(g: Any, x: Tensor, axes: Sequence[int]) -> float | Tensor:
    """How many elements each slice over ``axes`` holds: a number for static dims, else a tensor
    (kept dims, ``x``'s dtype) counted at run time."""
    dims = [x.shape[a] for a in axes]
    if None not in dims:
        return float(math.prod(dims))  # type: ignore[arg-type]
    return g.reduce_sum(g.ones_like(x), list(axes), keepdims=True)


def _spread(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Tensor:
    """The cotangent of a reduction broadcast back over its input."""
    return g.broadcast_like(keepdims_like(g, ct[0], op), op.inputs[0])


@defvjp(REDUCE_SUM)
def _reduce_sum_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    return (_spread(g, op, ct),)


@defvjp(REDUCE_MEAN)
def _reduce_mean_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    return (g.divide(_spread(g, op, ct), reduced_count(g, op.inputs[0], op.attrs.axes)),)


@defvjp(REDUCE_PROD)
def _reduce_prod_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    # The product of all the other elements of the slice, exact where x has zeros (no division):
    # per axis, exclusive running products from both ends, applied to the products over earlier axes.
    others: Tensor | None = None
    t = op.inputs[0]
    for ax in op.attrs.axes:
        excl = g.multiply(g.cumulative_product(t, ax, exclusive=True),
                          g.cumulative_product(t, ax, exclusive=True, reverse=True))
        others = excl if others is None else g.multiply(others, excl)
        t = g.reduce_prod(t, ax, keepdims=True)
    spread = _spread(g, op, ct)
    return (spread if others is None else g.multiply(spread, others),)


@defvjp(VARIANCE)
def _variance_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    x, axes = op.inputs[0], list(op.attrs.axes)
    centred = g.subtract(x, g.reduce_mean(x, axes, keepdims=True))  # the mean's own term sums to zero
    return (g.multiply(_spread(g, op, ct), g.divide(g.multiply(centred, 2.0), reduced_count(g, x, axes))),)


@defvjp(REDUCE_MAX, REDUCE_MIN, REDUCE_MAX_NAN, REDUCE_MIN_NAN)
def _extremum_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    # Split evenly among the elements equal to the result (ties share it); a NaN result comes from
    # the slice's NaNs, which share it the same way.
    x, axes = op.inputs[0], list(op.attrs.axes)
    y = keepdims_like(g, op.outputs[0], op)
    hit = g.logical_or(g.equal(x, y), g.logical_and(g.isnan(x), g.isnan(y)))
    share = g.cast(hit, x.dtype)
    return (g.multiply(_spread(g, op, ct), g.divide(share, g.reduce_sum(share, axes, keepdims=True))),)


def _logical(fn: Callable[..., torch.Tensor]) -> Callable[[LowerContext], Callable[..., Any]]:
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        axes, keep = ctx.attrs.axes, ctx.attrs.keepdims
        as_bool = ctx.in_types[0].dtype.is_bool
        if not axes:
            return lambda x: x.to(torch.bool, copy=True)
        # torch.all/any keep uint8 as uint8; compare first so the result is always bool
        return lambda x: fn(x if as_bool else x != 0, dim=axes, keepdim=keep)

    return lower


_LOGICAL = reduce_rule(result=bool_, numeric=True, boolean=True)
REDUCE_AND = OpDef("reduce_and", infer=_LOGICAL, attrs=ReduceAttrs, fusion=REDUCTION,
                   lower=_logical(torch.all), differentiable=False, doc="true where every element is nonzero")
REDUCE_OR = OpDef("reduce_or", infer=_LOGICAL, attrs=ReduceAttrs, fusion=REDUCTION,
                  lower=_logical(torch.any), differentiable=False, doc="true where some element is nonzero")


# ---- argmax / argmin -------------------------------------------------------------------------------
@attrs
class ArgReduceAttrs:
    axis: int  # normalised (non-negative)
    keepdims: bool = False


def _arg_rule(a: ArgReduceAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    (t,) = ins
    expect_dtype(t, numeric=True, boolean=True)
    expect_real(t)
    axis = check_axis(a.axis, t.rank)
    check_flag(a.keepdims, "keepdims")
    if t.shape[axis] == 0:
        raise ShapeError(f"axis {axis} has size 0: an empty slice has no index to return")
    return TensorType(tuple(_reduced_shape(t.shape, (axis,), a.keepdims)), int32)


def _arg_lower(fn: Callable[..., torch.Tensor]) -> Callable[[LowerContext], Callable[..., Any]]:
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        axis, keep = ctx.attrs.axis, ctx.attrs.keepdims
        if ctx.in_types[0].dtype.is_bool:  # torch's argmax refuses bool
            return lambda x: fn(x.to(torch.uint8), dim=axis, keepdim=keep).to(torch.int32)
        return lambda x: fn(x, dim=axis, keepdim=keep).to(torch.int32)

    return lower


ARGMAX = OpDef("argmax", infer=_arg_rule, lower=_arg_lower(torch.argmax), attrs=ArgReduceAttrs,
               fusion=REDUCTION, differentiable=False, doc="int32 index of the maximum along an axis")
ARGMIN = OpDef("argmin", infer=_arg_rule, lower=_arg_lower(torch.argmin), attrs=ArgReduceAttrs,
               fusion=REDUCTION, differentiable=False, doc="int32 index of the minimum along an axis")


# ---- builder methods -------------------------------------------------------------------------------
AxesArg = int | Sequence[int] | None


class ReduceBuilders(GraphCore):
    """Graph methods for reductions, argmax/argmin, variance."""

    def _reduce(self, op: OpDef, x: Any, axes: AxesArg, keepdims: bool, name: str | None) -> Tensor:
        t = self._as_tensor(x)
        if isinstance(axes, bool) or not (axes is None or isinstance(axes, int) or (
                isinstance(axes, Sequence) and not isinstance(axes, str))):
            raise ShapeError(f"{op.name}: axes must be None, an int or a sequence of ints, got {axes!r}")
        norm = normalize_axes(axes if axes is None or isinstance(axes, int) else tuple(axes), t.rank,
                              f"{op.name}: axes")
        # normalize_axis lets axis 0 name a scalar's only "axis": reducing it leaves the scalar as is
        return self._apply(op, [t], ReduceAttrs(norm if t.rank else (), bool(keepdims)), name)

    def reduce_sum(self, x: Tensor, axes: AxesArg = None, keepdims: bool = False, *,
                   name: str | None = None) -> Tensor:
        """Sum over ``axes`` (all when None); keeps the input dtype.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2, 3), og.int32)
        >>> g.run({x: [[1, 2, 3], [4, 5, 6]]}, [g.reduce_sum(x, axes=1)])[0].tolist()
        [6, 15]
        """
        return self._reduce(REDUCE_SUM, x, axes, keepdims, name)

    def reduce_prod(self, x: Tensor, axes: AxesArg = None, keepdims: bool = False, *,
                    name: str | None = None) -> Tensor:
        """Product over ``axes`` (all when None); keeps the input dtype."""
        return self._reduce(REDUCE_PROD, x, axes, keepdims, name)

    def reduce_mean(self, x: Tensor, axes: AxesArg = None, keepdims: bool = False, *,
                    name: str | None = None) -> Tensor:
        """Mean over ``axes`` (all when None); floating dtypes only.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2, 2), og.float32)
        >>> g.run({x: [[1.0, 2.0], [3.0, 4.0]]}, [g.reduce_mean(x, axes=-1, keepdims=True)])[0].tolist()
        [[1.5], [3.5]]
        """
        return self._reduce(REDUCE_MEAN, x, axes, keepdims, name)

    def reduce_max(self, x: Tensor, axes: AxesArg = None, keepdims: bool = False, *,
                   name: str | None = None) -> Tensor:
        """Maximum over ``axes``, ignoring NaN unless a whole slice is NaN (``np.nanmax``).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((3,), og.float32)
        >>> g.run({x: [1.0, float("nan"), 3.0]}, [g.reduce_max(x)])[0].item()
        3.0
        """
        return self._reduce(REDUCE_MAX, x, axes, keepdims, name)

    def reduce_min(self, x: Tensor, axes: AxesArg = None, keepdims: bool = False, *,
                   name: str | None = None) -> Tensor:
        """Minimum over ``axes``, ignoring NaN unless a whole slice is NaN (``np.nanmin``)."""
        return self._reduce(REDUCE_MIN, x, axes, keepdims, name)

    def reduce_max_with_nan_propagation(self, x: Tensor, axes: AxesArg = None, keepdims: bool = False, *,
                                        name: str | None = None) -> Tensor:
        """Maximum over ``axes``; NaN where a slice holds a NaN (``np.max``)."""
        return self._reduce(REDUCE_MAX_NAN, x, axes, keepdims, name)

    def reduce_min_with_nan_propagation(self, x: Tensor, axes: AxesArg = None, keepdims: bool = False, *,
                                        name: str | None = None) -> Tensor:
        """Minimum over ``axes``; NaN where a slice holds a NaN (``np.min``)."""
        return self._reduce(REDUCE_MIN_NAN, x, axes, keepdims, name)

    def reduce_and(self, x: Tensor, axes: AxesArg = None, keepdims: bool = False, *,
                   name: str | None = None) -> Tensor:
        """Bool: true where every element over ``axes`` is nonzero (true over an empty slice)."""
        return self._reduce(REDUCE_AND, x, axes, keepdims, name)

    def reduce_or(self, x: Tensor, axes: AxesArg = None, keepdims: bool = False, *,
                  name: str | None = None) -> Tensor:
        """Bool: true where some element over ``axes`` is nonzero (false over an empty slice)."""
        return self._reduce(REDUCE_OR, x, axes, keepdims, name)

    def variance(self, x: Tensor, axes: AxesArg = None, keepdims: bool = False, *,
                 name: str | None = None) -> Tensor:
        """Population variance (divides by N, as MPSGraph) over ``axes``; real floating dtypes.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((4,), og.float32)
        >>> g.run({x: [1.0, 2.0, 3.0, 4.0]}, [g.variance(x)])[0].item()
        1.25
        """
        return self._reduce(VARIANCE, x, axes, keepdims, name)

    def _arg(self, op: OpDef, x: Any, axis: int, keepdims: bool, name: str | None) -> Tensor:
        t = self._as_tensor(x)
        if t.rank == 0:
            raise ShapeError(f"{op.name}: needs an input of rank >= 1, got a scalar {t.type}")
        return self._apply(op, [t], ArgReduceAttrs(normalize_axis(axis, t.rank, f"{op.name}: axis"),
                                                   bool(keepdims)), name)

    def argmax(self, x: Tensor, axis: int = -1, keepdims: bool = False, *, name: str | None = None) -> Tensor:
        """int32 index of the maximum along ``axis``: the first one on ties, the first NaN if any.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2, 3), og.float32)
        >>> g.run({x: [[1.0, 5.0, 5.0], [7.0, 0.0, 2.0]]}, [g.argmax(x, axis=1)])[0].tolist()
        [1, 0]
        """
        return self._arg(ARGMAX, x, axis, keepdims, name)

    def argmin(self, x: Tensor, axis: int = -1, keepdims: bool = False, *, name: str | None = None) -> Tensor:
        """int32 index of the minimum along ``axis``: the first one on ties, the first NaN if any."""
        return self._arg(ARGMIN, x, axis, keepdims, name)


__all__ = [
    "ARGMAX", "ARGMIN", "REDUCE_AND", "REDUCE_MAX", "REDUCE_MAX_NAN", "REDUCE_MEAN", "REDUCE_MIN",
    "REDUCE_MIN_NAN", "REDUCE_OR", "REDUCE_PROD", "REDUCE_SUM", "VARIANCE", "ArgReduceAttrs", "ReduceAttrs",
    "ReduceBuilders", "check_axis", "check_flag", "expect_real", "identity_value", "reduce_rule",
]
