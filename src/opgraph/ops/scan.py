"""Ops: cumulative sum/product/maximum/minimum along one axis (MPSGraph's ``cumulative*``).

``exclusive=True`` shifts the result by one along the axis, starting with the identity (0, 1,
the smallest value for maximum, the largest for minimum); ``reverse=True`` accumulates from the
end. Results keep the input dtype (integer sums wrap, as MPSGraph; PyTorch would widen to int64).
``cumulative_maximum``/``cumulative_minimum`` ignore NaN like ``reduce_max``/``reduce_min``
(``np.fmax.accumulate``): an element is NaN only while every element so far is NaN.

Gradients: ``cumulative_product``'s is exact at zeros (no 0/0), though its own derivative (second
order) there is not. ``cumulative_maximum``/``minimum`` send each output's cotangent to the element
that set its running value: on ties the latest equal one in scan order; nowhere while the value is
NaN or the exclusive identity.

FusionKind is OPAQUE: a scan keeps every element and carries a dependence along the axis, which
the stitcher's reduction template (one value per reduced row) does not express.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.dtype import DType, int32
from ..core.errors import ShapeError
from ..core.shape import normalize_axis
from ..core.types import TensorType
from ..ir.graph import GraphCore, Tensor
from ._rules import expect_arity, expect_dtype
from .reduce import check_axis, check_flag, expect_real, identity_value
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp


@attrs
class CumulativeAttrs:
    axis: int  # normalised (non-negative)
    exclusive: bool = False
    reverse: bool = False


def _scan_rule(*, ordered: bool) -> Callable[[CumulativeAttrs, tuple[TensorType, ...]], TensorType]:
    """Sum/product take numeric dtypes; maximum/minimum (``ordered``) also bool, but not complex."""

    def rule(a: CumulativeAttrs, ins: tuple[TensorType, ...]) -> TensorType:
        expect_arity(ins, 1)
        (t,) = ins
        expect_dtype(t, numeric=True, boolean=ordered)
        if ordered:
            expect_real(t)
        check_axis(a.axis, t.rank)
        check_flag(a.exclusive, "exclusive")
        check_flag(a.reverse, "reverse")
        return t

    return rule


Scan = Callable[[torch.Tensor, int], torch.Tensor]


def _nan_skipping(scan: Scan, ident: float | int | bool) -> Scan:
    """``scan`` over floats with NaN replaced by the identity, NaN again while no number was seen."""

    def fn(x: torch.Tensor, axis: int) -> torch.Tensor:
        nan = torch.isnan(x)
        seen = torch.cummax((~nan).to(torch.uint8), dim=axis).values.bool()
        return torch.where(seen, scan(torch.where(nan, ident, x), axis), float("nan"))

    return fn


def _scan_lower(make: Callable[[DType], tuple[Scan, float | int | bool]]) -> Callable[[LowerContext], Any]:
    """Wrap an inclusive forward scan ``make(dtype) -> (scan, identity)`` with reverse/exclusive."""

    def lower(ctx: LowerContext) -> Callable[..., Any]:
        axis, exclusive, reverse = ctx.attrs.axis, ctx.attrs.exclusive, ctx.attrs.reverse
        scan, ident = make(ctx.in_types[0].dtype)

        def fn(x: torch.Tensor) -> torch.Tensor:
            if reverse:
                x = x.flip(axis)
            y = scan(x, axis)
            n = x.shape[axis]
            if exclusive and n:
                first = torch.full_like(y.narrow(axis, 0, 1), ident)
                y = torch.cat([first, y.narrow(axis, 0, n - 1)], dim=axis)
            return y.flip(axis) if reverse else y

        return fn

    return lower


def _sum(dt: DType) -> tuple[Scan, float | int | bool]:
    return (lambda x, axis: torch.cumsum(x, dim=axis, dtype=dt.torch_dtype)), 0


def _prod(dt: DType) -> tuple[Scan, float | int | bool]:
    return (lambda x, axis: torch.cumprod(x, dim=axis, dtype=dt.torch_dtype)), 1


def _extremum(largest: bool) -> Callable[[DType], tuple[Scan, float | int | bool]]:
    def make(dt: DType) -> tuple[Scan, float | int | bool]:
        ident = identity_value(dt, not largest)
        cum = torch.cummax if largest else torch.cummin
        scan: Scan = lambda x, axis: cum(x, dim=axis).values
        return (_nan_skipping(scan, ident) if dt.is_floating else scan), ident

    return make


_OPAQUE = FusionKind.OPAQUE
CUMULATIVE_SUM = OpDef("cumulative_sum", infer=_scan_rule(ordered=False), lower=_scan_lower(_sum),
                       attrs=CumulativeAttrs, fusion=_OPAQUE, doc="running sum along an axis")
CUMULATIVE_PRODUCT = OpDef("cumulative_product", infer=_scan_rule(ordered=False), lower=_scan_lower(_prod),
                           attrs=CumulativeAttrs, fusion=_OPAQUE, doc="running product along an axis")
CUMULATIVE_MAXIMUM = OpDef("cumulative_maximum", infer=_scan_rule(ordered=True),
                           lower=_scan_lower(_extremum(True)), attrs=CumulativeAttrs, fusion=_OPAQUE,
                           doc="running maximum along an axis (ignores NaN)")
CUMULATIVE_MINIMUM = OpDef("cumulative_minimum", infer=_scan_rule(ordered=True),
                           lower=_scan_lower(_extremum(False)), attrs=CumulativeAttrs, fusion=_OPAQUE,
                           doc="running minimum along an axis (ignores NaN)")



# ---- gradients -------------------------------------------------------------------------------------
@defvjp(CUMULATIVE_SUM)
def _cumulative_sum_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    a: CumulativeAttrs = op.attrs  # each input feeds the outputs after it: sum the cotangent from the other end
    return (g.cumulative_sum(ct[0], a.axis, exclusive=a.exclusive, reverse=not a.reverse),)


@defvjp(CUMULATIVE_PRODUCT)
def _cumulative_product_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    """d y_i / d x_j is y_i / x_j while no zero came before x_j (in scan order); at the first zero it is
    the running product with that zero taken as 1; after it, 0. Exact at zeros, with no 0/0."""
    a: CumulativeAttrs = op.attrs
    x, y, c = op.inputs[0], op.outputs[0], ct[0]

    def scan(fn: Any, t: Tensor, exclusive: bool, reverse: bool) -> Tensor:
        return fn(t, a.axis, exclusive=exclusive, reverse=reverse)

    def back(t: Tensor) -> Tensor:  # sum over the outputs each input feeds: from the other end
        return scan(g.cumulative_sum, g.multiply(c, t), a.exclusive, not a.reverse)

    zero = g.equal(x, 0)
    before = g.logical_not(scan(g.cumulative_maximum, zero, False, a.reverse))  # no zero up to here
    first = g.logical_and(zero, g.logical_not(scan(g.cumulative_maximum, zero, True, a.reverse)))
    no_first = scan(g.cumulative_product, g.select(first, 1, x), a.exclusive, a.reverse)
    at_first = g.select(first, back(no_first), 0)
    return (g.select(before, g.divide(back(y), g.select(before, x, 1)), at_first),)


@defvjp(CUMULATIVE_MAXIMUM, CUMULATIVE_MINIMUM)
def _cumulative_extremum_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    """Each output's cotangent goes to the element that set its running value: the latest one, in
    scan order, equal to the running value (so on ties the later element); none while it is NaN."""
    a: CumulativeAttrs = op.attrs
    x = op.inputs[0]
    same = g.cumulative_maximum if op.op is CUMULATIVE_MAXIMUM else g.cumulative_minimum
    running = same(x, a.axis, reverse=a.reverse) if a.exclusive else op.outputs[0]  # inclusive values
    setter = g.equal(x, running)
    coord = g.cumulative_sum(g.fill_like(x, 1, int32), a.axis, exclusive=True)  # shape-generic arange
    # the latest setter so far, in scan order; the index scan's identity marks "none yet"
    none = torch.iinfo(torch.int32).max if a.reverse else torch.iinfo(torch.int32).min
    latest = g.cumulative_minimum if a.reverse else g.cumulative_maximum
    idx = latest(g.select(setter, coord, none), a.axis, exclusive=a.exclusive, reverse=a.reverse)
    found = g.not_equal(idx, none)
    upd = g.multiply(ct[0], g.cast(found, ct[0].dtype))
    return (g.scatter_along_axis(g.zeros_like(x), upd, g.select(found, idx, 0), a.axis),)


class ScanBuilders(GraphCore):
    """Graph methods for cumulative sum/prod/max/min."""

    def _scan(self, op: OpDef, x: Any, axis: int, exclusive: bool, reverse: bool, name: str | None) -> Tensor:
        t = self._as_tensor(x)
        if t.rank == 0:
            raise ShapeError(f"{op.name}: needs an input of rank >= 1, got a scalar {t.type}")
        a = CumulativeAttrs(normalize_axis(axis, t.rank, f"{op.name}: axis"), bool(exclusive), bool(reverse))
        return self._apply(op, [t], a, name)

    def cumulative_sum(self, x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False, *,
                       name: str | None = None) -> Tensor:
        """Running sum along ``axis``; ``exclusive`` starts at 0, ``reverse`` sums from the end.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((4,), og.int32)
        >>> g.run({x: [1, 2, 3, 4]}, [g.cumulative_sum(x, 0), g.cumulative_sum(x, 0, exclusive=True)])
        [tensor([ 1,  3,  6, 10], dtype=torch.int32), tensor([0, 1, 3, 6], dtype=torch.int32)]
        """
        return self._scan(CUMULATIVE_SUM, x, axis, exclusive, reverse, name)

    def cumulative_product(self, x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False, *,
                           name: str | None = None) -> Tensor:
        """Running product along ``axis``; ``exclusive`` starts at 1, ``reverse`` multiplies from the end."""
        return self._scan(CUMULATIVE_PRODUCT, x, axis, exclusive, reverse, name)

    def cumulative_maximum(self, x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False, *,
                           name: str | None = None) -> Tensor:
        """Running maximum along ``axis`` ignoring NaN; ``exclusive`` starts at the dtype's lowest value.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((4,), og.float32)
        >>> g.run({x: [1.0, 3.0, 2.0, 5.0]}, [g.cumulative_maximum(x, 0, reverse=True)])[0].tolist()
        [5.0, 5.0, 5.0, 5.0]
        """
        return self._scan(CUMULATIVE_MAXIMUM, x, axis, exclusive, reverse, name)

    def cumulative_minimum(self, x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False, *,
                           name: str | None = None) -> Tensor:
        """Running minimum along ``axis`` ignoring NaN; ``exclusive`` starts at the dtype's highest value."""
        return self._scan(CUMULATIVE_MINIMUM, x, axis, exclusive, reverse, name)


__all__ = ["CUMULATIVE_MAXIMUM", "CUMULATIVE_MINIMUM", "CUMULATIVE_PRODUCT", "CUMULATIVE_SUM",
           "CumulativeAttrs", "ScanBuilders"]
