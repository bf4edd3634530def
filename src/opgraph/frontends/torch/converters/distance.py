"""Converters of the p-norm distance ops ``_cdist_forward`` / ``_pdist_forward`` and their backward (core ATen
keeps the forward ops, and no default decomposition removes the backward ones AOTAutograd emits).

They follow ATen's CPU kernels: per coordinate ``|a - b|`` mapped (p = 0: ``min(ceil(.), 1)``, p = 1, 2, inf, or
``pow``), summed (inf: maximum, NaN ignored by cdist, propagated by pdist) and finished (sqrt, ``pow(., 1/p)``).
For p = 2 ``cdist`` switches to the matmul formula ``sqrt(clamp_min(|a|^2 - 2 a.b + |b|^2, 0))`` when
``compute_mode`` asks for it or, by default, when either side has more than 25 rows, as ATen does: its rounding
differs a lot from the direct one for near-equal rows, so it is reproduced rather than approximated (with a
dynamic row count both are computed and the run-time sizes pick one). Inputs are real floating; 16-bit ones compute
in float32. ``pdist`` needs a static row count (its pairs are constant indices).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ....core.dtype import DType, int32
from ....ir.graph import Tensor
from ....ops.linalg import swap_last
from ..registry import ConvertContext, Unsupported, converts
from .nn import _cast, _compute, _floating, _static

aten = torch.ops.aten


# ---- helpers -------------------------------------------------------------------------------------------------
def _order(p: Any) -> float:
    """The norm order as a float: ATen accepts p >= 0 (inf included)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or math.isnan(p) or p < 0:
        raise Unsupported(f"norm order {p!r} (ATen takes p >= 0)")
    return float(p)


def _compute_dtype(*ts: Tensor) -> DType:
    """The dtype to compute in: the inputs' one real floating dtype, float32 for 16-bit ones."""
    _floating(*ts)
    if len({t.dtype for t in ts}) > 1:
        raise Unsupported(f"inputs of dtypes {sorted(t.dtype.name for t in ts)}")
    return _compute(ts[0].dtype)


def _empty_result(ctx: ConvertContext, *sizes: int | None) -> Tensor | None:
    """Zeros of the traced result type when a row, column or batch count is statically 0 (ATen gives an empty
    result or, for 0 columns, zeros; opgraph needs no empty reductions then)."""
    if 0 not in sizes:
        return None
    t = ctx.out_type
    return ctx.g.constant(torch.zeros(_static(t.shape, "an empty distance result"), dtype=t.dtype.torch_dtype))


def _pairs(ctx: ConvertContext, x1: Tensor, x2: Tensor) -> Tensor:
    """``x1[..., i, :] - x2[..., j, :]`` as (..., P, R, M), batch dims broadcast."""
    g = ctx.g
    return g.subtract(g.expand_dims(x1, -2), g.expand_dims(x2, -3))


def _norm(ctx: ConvertContext, diff: Tensor, p: float, nan_max: bool) -> Tensor:
    """The p-norm of ``diff`` over its last axis, as ATen's kernels map, reduce and finish it."""
    g = ctx.g
    a = g.abs(diff)
    if p == 0:  # min(ceil(|d|), 1): 1 for any nonzero difference, NaN stays NaN
        return g.reduce_sum(g.minimum_with_nan_propagation(g.ceil(a), 1.0), [-1])
    if p == 1:
        return g.reduce_sum(a, [-1])
    if p == 2:
        return g.sqrt(g.reduce_sum(g.multiply(diff, diff), [-1]))
    if math.isinf(p):
        return (g.reduce_max_with_nan_propagation if nan_max else g.reduce_max)(a, [-1])
    return g.power(g.reduce_sum(g.power(a, p), [-1]), 1.0 / p)


def _euclidean(ctx: ConvertContext, x1: Tensor, x2: Tensor) -> Tensor:
    """ATen's ``_euclidean_dist``: [-2 a, |a|^2, 1] @ [b, 1, |b|^2]^T, clamped at 0 (NaN kept), square-rooted."""
    g = ctx.g
    n1 = g.reduce_sum(g.multiply(x1, x1), [-1], True)
    n2 = g.reduce_sum(g.multiply(x2, x2), [-1], True)
    a = g.concat([g.multiply(x1, -2.0), n1, g.ones_like(n1)], -1)
    b = g.concat([x2, g.ones_like(n2), n2], -1)
    return g.sqrt(g.maximum_with_nan_propagation(g.matmul(a, swap_last(g, b)), 0.0))


def _uses_mm(p: float, mode: Any, r1: int | None, r2: int | None) -> bool | None:
    """ATen's ``p == 2 && (mode == 1 || (mode == 0 && (r1 > 25 || r2 > 25)))``; None when only the run-time
    row counts decide."""
    mode = 0 if mode is None else mode
    if isinstance(mode, bool) or mode not in (0, 1, 2):
        raise Unsupported(f"cdist compute_mode {mode!r}")
    if p != 2 or mode == 2:
        return False
    if mode == 1 or any(r is not None and r > 25 for r in (r1, r2)):
        return True
    return None if r1 is None or r2 is None else False


def _many_rows(ctx: ConvertContext, x1: Tensor, x2: Tensor) -> Tensor:
    """Whether either input has more than 25 rows (axis -2), read at run time: a bool scalar."""
    g = ctx.g
    over = [g.greater(g.gather(g.shape_of(t), g.constant(t.rank - 2, int32)), 25) for t in (x1, x2)]
    return g.logical_or(over[0], over[1])


def _grad_terms(ctx: ConvertContext, diff: Tensor, grad: Tensor, dist: Tensor, p: float) -> Tensor:
    """ATen's per-coordinate gradient of ``dist = |diff|_p`` times ``grad`` (grad and dist broadcast over the
    last axis of ``diff``); 0 where the distance is 0 (and where a coordinate is 0, for p < 1)."""
    g = ctx.g
    gr, d = g.expand_dims(grad, -1), g.expand_dims(dist, -1)
    a, s = g.abs(diff), g.sign(diff)
    if p == 1:
        return g.multiply(gr, s)
    if math.isinf(p):  # every coordinate at the maximum gets the whole gradient
        return g.multiply(g.multiply(gr, s), g.cast(g.equal(a, d), diff.dtype))
    zero = g.equal(d, 0.0)
    if p < 2:
        t = g.divide(g.multiply(g.multiply(s, g.power(a, p - 1)), gr), g.power(d, p - 1))
        if p < 1:
            zero = g.logical_or(zero, g.equal(diff, 0.0))
    elif p == 2:
        t = g.divide(g.multiply(gr, diff), d)
    else:
        t = g.divide(g.multiply(g.multiply(diff, g.power(a, p - 2)), gr), g.power(d, p - 1))
    return g.select(zero, 0.0, t)


def _cdist_grad(ctx: ConvertContext, grad: Tensor, x1: Tensor, x2: Tensor, p: float, dist: Tensor) -> Tensor:
    """The gradient to ``x1`` summed over ``x2``'s rows, (batch, P, M) with the broadcast batch dims."""
    diff = _pairs(ctx, x1, x2)
    if p == 0:
        return ctx.g.zeros_like(ctx.g.reduce_sum(diff, [-2]))
    return ctx.g.reduce_sum(_grad_terms(ctx, diff, grad, dist, p), [-2])


def _condensed_pairs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows (i, j) of pdist's pairs i < j in row-major order."""
    i, j = torch.triu_indices(n, n, offset=1, dtype=torch.int32)
    return i, j


def _rows(x: Tensor) -> int:
    if x.rank != 2:
        raise Unsupported(f"pdist of a rank-{x.rank} input")
    return _static(x.shape[:1], "pdist's row count (its pairs are constant indices)")[0]


# ---- converters ----------------------------------------------------------------------------------------------
@converts(aten._cdist_forward.default)
def _cdist_forward(ctx: ConvertContext, x1: Tensor, x2: Tensor, p: float, compute_mode: Any = None) -> Tensor:
    pv = _order(p)
    if x1.rank < 2 or x2.rank < 2:
        raise Unsupported(f"cdist of ranks {x1.rank} and {x2.rank}")
    dt = _compute_dtype(x1, x2)
    mm = _uses_mm(pv, compute_mode, x1.shape[-2], x2.shape[-2])
    empty = _empty_result(ctx, x1.shape[-2], x2.shape[-2], x1.shape[-1], *x1.shape[:-2], *x2.shape[:-2])
    if empty is not None:
        return empty
    a, b = _cast(ctx, x1, dt), _cast(ctx, x2, dt)
    if mm is None:  # dynamic row counts: both formulas, picked at run time (the matmul one is the cheap one)
        y = ctx.g.select(_many_rows(ctx, x1, x2), _euclidean(ctx, a, b), _norm(ctx, _pairs(ctx, a, b), 2.0, False))
    else:
        y = _euclidean(ctx, a, b) if mm else _norm(ctx, _pairs(ctx, a, b), pv, nan_max=False)
    return _cast(ctx, y, x1.dtype)


@converts(aten._cdist_backward.default)
def _cdist_backward(ctx: ConvertContext, grad: Tensor, x1: Tensor, x2: Tensor, p: float, dist: Tensor) -> Tensor:
    pv = _order(p)
    dt = _compute_dtype(grad, x1, x2, dist)
    empty = _empty_result(ctx, x1.shape[-2], x2.shape[-2], x1.shape[-1], *x1.shape[:-2], *x2.shape[:-2])
    if empty is not None:  # ATen: zeros like x1 (batch not broadcast)
        return empty
    grad, x1, x2, dist = (_cast(ctx, t, dt) for t in (grad, x1, x2, dist))
    return _cast(ctx, _cdist_grad(ctx, grad, x1, x2, pv, dist), ctx.out_type.dtype)


@converts(aten._pdist_forward.default)
def _pdist_forward(ctx: ConvertContext, x: Tensor, p: float = 2.0) -> Tensor:
    pv = _order(p)
    dt = _compute_dtype(x)
    n = _rows(x)
    empty = _empty_result(ctx, n * (n - 1) // 2, x.shape[1])
    if empty is not None:
        return empty
    g = ctx.g
    i, j = _condensed_pairs(n)
    xc = _cast(ctx, x, dt)
    diff = g.subtract(g.gather(xc, g.constant(i), axis=0), g.gather(xc, g.constant(j), axis=0))  # (K, M)
    return _cast(ctx, _norm(ctx, diff, pv, nan_max=True), x.dtype)


@converts(aten._pdist_backward.default)
def _pdist_backward(ctx: ConvertContext, grad: Tensor, x: Tensor, p: float, dist: Tensor) -> Tensor:
    """cdist's backward of x against itself, with grad and dist spread to symmetric (N, N) matrices with a
    zero diagonal: row i then sums +c_k for its pairs (i, j) and -c_k for (j, i), as ATen's scatter does."""
    pv = _order(p)
    dt = _compute_dtype(grad, x, dist)
    n = _rows(x)
    empty = _empty_result(ctx, n * (n - 1) // 2, x.shape[1])
    if empty is not None or pv == 0:
        return empty if empty is not None else ctx.g.zeros_like(x)
    g = ctx.g
    i, j = _condensed_pairs(n)
    index = torch.zeros(n, n, dtype=torch.int32)
    index[i.long(), j.long()] = index[j.long(), i.long()] = torch.arange(len(i), dtype=torch.int32)
    diagonal = g.constant(torch.eye(n, dtype=torch.bool))

    def square(t: Tensor) -> Tensor:
        return g.select(diagonal, 0.0, g.gather(_cast(ctx, t, dt), g.constant(index), axis=0))

    xc = _cast(ctx, x, dt)
    return _cast(ctx, _cdist_grad(ctx, square(grad), xc, xc, pv, square(dist)), x.dtype)


__all__: list[str] = []
