"""Converters of the reductions and scans left after core-ATen decomposition.

ATen's result dtype is the traced one (``ctx.out_type``): integer and bool sums, products and running sums widen
to int64 unless a ``dtype`` is given, and the input is cast to the result dtype *before* reducing, as ATen does
(so integer overflow wraps where ATen's does). Differences from opgraph's conventions handled here:

* an empty ``dim`` list reduces every axis (opgraph's empty ``axes`` reduce none), except for ``any``/``all``;
* ``amax``/``max`` propagate NaN (opgraph's ``reduce_max`` ignores it: the ``_with_nan_propagation`` forms);
* ``argmax``/``max.dim`` indices are int64 (opgraph's are int32: cast);
* ``var``/``std`` with a correction: opgraph's variance divides by N, scaled by N / max(0, N - correction)
  (static sizes only; a non-positive denominator gives inf, or NaN for a zero variance, as ATen).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ....core.dtype import int64
from ....ir.graph import Tensor
from ..registry import ConvertContext, Unsupported, converts
from .shape import cast_to, ints, norm_dim

aten = torch.ops.aten

Axes = tuple[int, ...] | None


def axes_of(dim: Any, rank: int) -> Axes:
    """Normalised axes, or None for every axis (no ``dim``, an empty list, or a scalar's only axis)."""
    if dim is None:
        return None
    dims = ints(dim, "reduction dims")
    axes = tuple(sorted({norm_dim(d, rank) for d in dims}))
    if len(axes) != len(dims):
        raise Unsupported(f"reduction dims {dims} repeat an axis")
    return axes if axes and rank else None


def _input(ctx: ConvertContext, x: Tensor, *, floating: bool = False) -> Tensor:
    """``x`` in the traced result dtype (ATen casts before reducing)."""
    out = ctx.out_type.dtype
    if floating and not out.is_floating:
        raise Unsupported(f"{out.name} result (opgraph's op takes real floating dtypes)")
    return cast_to(ctx, x, out)


def _count(x: Tensor, axes: Axes) -> int:
    dims = [x.shape[a] for a in (range(x.rank) if axes is None else axes)]
    if None in dims:
        raise Unsupported("a correction needs the static size of the reduced axes")
    return math.prod(d for d in dims if d is not None)


# ---- sum / mean / prod ---------------------------------------------------------------------------------
@converts(aten.sum.default, aten.sum.dim_IntList)
def _sum(ctx: ConvertContext, x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    if ctx.out_type.dtype.is_bool:
        raise Unsupported("a bool sum")
    return ctx.g.reduce_sum(_input(ctx, x), axes_of(dim, x.rank), bool(keepdim))


@converts(aten.mean.default, aten.mean.dim)
def _mean(ctx: ConvertContext, x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return ctx.g.reduce_mean(_input(ctx, x, floating=True), axes_of(dim, x.rank), bool(keepdim))


@converts(aten.prod.default, aten.prod.dim_int)
def _prod(ctx: ConvertContext, x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    if ctx.out_type.dtype.is_bool:
        raise Unsupported("a bool product")
    return ctx.g.reduce_prod(_input(ctx, x), axes_of(dim, x.rank), bool(keepdim))


# ---- max / min -----------------------------------------------------------------------------------------
def _ordered(x: Tensor) -> None:
    if x.dtype.is_complex:
        raise Unsupported("complex values have no order")


@converts(aten.amax.default)
def _amax(ctx: ConvertContext, x: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    _ordered(x)
    return ctx.g.reduce_max_with_nan_propagation(x, axes_of(dim, x.rank), bool(keepdim))


@converts(aten.amin.default)
def _amin(ctx: ConvertContext, x: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    _ordered(x)
    return ctx.g.reduce_min_with_nan_propagation(x, axes_of(dim, x.rank), bool(keepdim))


@converts(aten.max.default)
def _max_all(ctx: ConvertContext, x: Tensor) -> Tensor:
    return _amax(ctx, x)


@converts(aten.min.default)
def _min_all(ctx: ConvertContext, x: Tensor) -> Tensor:
    return _amin(ctx, x)


def _arg(ctx: ConvertContext, x: Tensor, axis: int, keepdim: bool, largest: bool) -> Tensor:
    if x.rank == 0:
        return ctx.g.fill_like(x, 0, int64)
    fn = ctx.g.argmax if largest else ctx.g.argmin  # the first index on ties, the first NaN's if any (as ATen)
    return ctx.g.cast(fn(x, axis, bool(keepdim)), int64)


def _with_indices(ctx: ConvertContext, x: Tensor, dim: int, keepdim: bool, largest: bool) -> tuple[Tensor, Tensor]:
    _ordered(x)
    axis = norm_dim(dim, x.rank)
    if x.rank and x.shape[axis] == 0:
        raise Unsupported("max/min over an empty dimension")
    values = _amax(ctx, x, [axis], keepdim) if largest else _amin(ctx, x, [axis], keepdim)
    return values, _arg(ctx, x, axis, keepdim, largest)


@converts(aten.max.dim)
def _max_dim(ctx: ConvertContext, x: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    return _with_indices(ctx, x, dim, keepdim, True)


@converts(aten.min.dim)
def _min_dim(ctx: ConvertContext, x: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    return _with_indices(ctx, x, dim, keepdim, False)


def _argext(ctx: ConvertContext, x: Tensor, dim: Any, keepdim: bool, largest: bool) -> Tensor:
    _ordered(x)
    if dim is not None or x.rank == 0:
        return _arg(ctx, x, norm_dim(dim or 0, x.rank), keepdim, largest)
    flat = _arg(ctx, ctx.g.reshape(x, [-1]), 0, False, largest)  # the index into the flattened tensor
    return ctx.g.reshape(flat, [1] * x.rank) if keepdim else flat


@converts(aten.argmax.default)
def _argmax(ctx: ConvertContext, x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return _argext(ctx, x, dim, keepdim, True)


@converts(aten.argmin.default)
def _argmin(ctx: ConvertContext, x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return _argext(ctx, x, dim, keepdim, False)


# ---- any / all -----------------------------------------------------------------------------------------
def _logical(ctx: ConvertContext, x: Tensor, dim: Any, keepdim: bool, every: bool) -> Tensor:
    if x.dtype.is_complex:
        raise Unsupported("any/all of complex values")
    fn = ctx.g.reduce_and if every else ctx.g.reduce_or
    # unlike sum's, any/all.dims' empty list reduces nothing (opgraph's empty axes: the same)
    axes: Axes | tuple[()] = () if dim is not None and not ints(dim, "dims") else axes_of(dim, x.rank)
    return cast_to(ctx, fn(x, axes, bool(keepdim)), ctx.out_type.dtype)  # uint8 stays uint8


@converts(aten.any.default, aten.any.dim, aten.any.dims)
def _any(ctx: ConvertContext, x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return _logical(ctx, x, dim, keepdim, False)


@converts(aten.all.default, aten.all.dim, aten.all.dims)
def _all(ctx: ConvertContext, x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return _logical(ctx, x, dim, keepdim, True)


# ---- variance ------------------------------------------------------------------------------------------
def _var(ctx: ConvertContext, x: Tensor, dim: Any, correction: Any, keepdim: bool) -> Tensor:
    if not x.dtype.is_floating:
        raise Unsupported(f"variance of {x.dtype.name}")
    c = 1 if correction is None else correction
    if isinstance(c, bool) or not isinstance(c, (int, float)):
        raise Unsupported(f"correction {c!r}")
    axes = axes_of(dim, x.rank)
    v = ctx.g.variance(x, axes, bool(keepdim))
    if c == 0:
        return v
    n = _count(x, axes)
    denom = max(0.0, n - c)
    return ctx.g.multiply(v, n / denom if denom else math.inf)


@converts(aten.var.correction)
def _var_correction(ctx: ConvertContext, x: Tensor, dim: Any = None, *, correction: Any = None,
                    keepdim: bool = False) -> Tensor:
    return _var(ctx, x, dim, correction, keepdim)


@converts(aten.std.correction)
def _std_correction(ctx: ConvertContext, x: Tensor, dim: Any = None, *, correction: Any = None,
                    keepdim: bool = False) -> Tensor:
    return ctx.g.sqrt(_var(ctx, x, dim, correction, keepdim))


@converts(aten.var_mean.correction)
def _var_mean(ctx: ConvertContext, x: Tensor, dim: Any = None, *, correction: Any = None,
              keepdim: bool = False) -> tuple[Tensor, Tensor]:
    v = _var(ctx, x, dim, correction, keepdim)
    return v, ctx.g.reduce_mean(x, axes_of(dim, x.rank), bool(keepdim))


@converts(aten.std_mean.correction)
def _std_mean(ctx: ConvertContext, x: Tensor, dim: Any = None, *, correction: Any = None,
              keepdim: bool = False) -> tuple[Tensor, Tensor]:
    v, m = _var_mean(ctx, x, dim, correction=correction, keepdim=keepdim)
    return ctx.g.sqrt(v), m


# ---- scans ---------------------------------------------------------------------------------------------
def _scan(ctx: ConvertContext, x: Tensor, dim: int, product: bool) -> Tensor:
    if ctx.out_type.dtype.is_bool:
        raise Unsupported("a bool running sum or product")
    axis = norm_dim(dim, x.rank)
    x = _input(ctx, x)
    if x.rank == 0:
        return x
    return (ctx.g.cumulative_product if product else ctx.g.cumulative_sum)(x, axis)


@converts(aten.cumsum.default)
def _cumsum(ctx: ConvertContext, x: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    return _scan(ctx, x, dim, False)


@converts(aten.cumprod.default)
def _cumprod(ctx: ConvertContext, x: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    return _scan(ctx, x, dim, True)


# ---- logsumexp and norms -------------------------------------------------------------------------------
@converts(aten.logsumexp.default)
def _logsumexp(ctx: ConvertContext, x: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    """ATen's own formulation: the maximum (0 where it is infinite) taken out before exp."""
    g = ctx.g
    x = _input(ctx, x, floating=True)
    axes = axes_of(dim, x.rank)
    m = g.reduce_max_with_nan_propagation(x, axes, True)
    m = g.select(g.isinf(m), g.zeros_like(m), m)
    s = g.log(g.reduce_sum(g.exp(g.subtract(x, m)), axes, bool(keepdim)))
    if not keepdim and x.rank:
        m = g.squeeze(m, axes=list(range(x.rank)) if axes is None else list(axes))
    return g.add(s, m)


@converts(aten.linalg_vector_norm.default)
def _vector_norm(ctx: ConvertContext, x: Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,
                 dtype: Any = None) -> Tensor:
    g = ctx.g
    if x.dtype.is_complex:
        raise Unsupported("norm of complex values")
    x = _input(ctx, x, floating=True)
    axes, keep = axes_of(dim, x.rank), bool(keepdim)
    if isinstance(ord, bool) or not isinstance(ord, (int, float)) or math.isnan(ord):
        raise Unsupported(f"norm order {ord!r}")
    if ord == 2:
        return g.sqrt(g.reduce_sum(g.multiply(x, x), axes, keep))
    if ord == 0:
        return g.reduce_sum(g.cast(g.not_equal(x, 0), x.dtype), axes, keep)
    a = g.abs(x)
    if ord == 1:
        return g.reduce_sum(a, axes, keep)
    if ord == math.inf:
        return g.reduce_max_with_nan_propagation(a, axes, keep)
    if ord == -math.inf:
        return g.reduce_min_with_nan_propagation(a, axes, keep)
    return g.power(g.reduce_sum(g.power(a, float(ord)), axes, keep), 1.0 / ord)


__all__ = ["axes_of"]


@converts(aten.var.dim)
def _var_dim(ctx: ConvertContext, x: Tensor, dim: Any = None, unbiased: bool = True, keepdim: bool = False) -> Tensor:
    return _var(ctx, x, dim, 1 if unbiased else 0, keepdim)


# ---- sorting ---------------------------------------------------------------------------------------------
@converts(aten.sort.default)
def _sort(ctx: ConvertContext, x: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """Values and int64 indices. opgraph's sort is stable, which is one of the orders ATen's may give (ties
    aside, the same); NaN sorts above +inf in both."""
    axis = norm_dim(dim, x.rank)
    if x.dtype.is_complex:
        raise Unsupported("sorting complex values")
    return ctx.g.sort(x, axis, bool(descending)), cast_to(ctx, ctx.g.argsort(x, axis, bool(descending)), int64)


@converts(aten.topk.default)
def _topk(ctx: ConvertContext, x: Tensor, k: int, dim: int = -1, largest: bool = True,
          sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002  (ATen's argument name)
    axis = norm_dim(dim, x.rank)
    if isinstance(k, bool) or not isinstance(k, int) or x.dtype.is_complex:
        raise Unsupported(f"topk with k={k!r} of {x.dtype.name}")
    values, indices = (ctx.g.top_k if largest else ctx.g.bottom_k)(x, k, axis)
    return values, cast_to(ctx, indices, int64)
