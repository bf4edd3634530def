"""Loss ops: softmax_cross_entropy (MPSGraph ``softMaxCrossEntropy``), sigmoid_cross_entropy, mse, l1, huber.

Each loss is one op with a fused PyTorch lowering (``torch.nn.functional``'s loss, whose semantics
these follow) and a VJP built from graph ops. ``reduction`` (``og.LossReduction``) is ``MEAN`` (over
every loss term; for softmax cross entropy, over every position but the class axis), ``SUM`` or
``NONE`` (the per-position losses). 16-bit inputs compute in float32 and round once.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..core.dtype import FLOAT_DTYPES, INT_DTYPES
from ..core.errors import AttributeValueError, DTypeError, ShapeError
from ..core.shape import format_shape, normalize_axis
from ..core.types import TensorType
from ..ir.attrs import serializable
from ..ir.graph import GraphCore, Operation, Tensor
from ._rules import expect_arity, expect_dtype
from .norm import compute_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp


@serializable
class LossReduction(enum.Enum):
    """How a loss combines its terms (MPSGraph's ``MPSGraphLossReductionType``)."""

    NONE = "none"  # one loss per position
    SUM = "sum"
    MEAN = "mean"


@attrs
class SoftmaxCrossEntropyAttrs:
    axis: int
    label_smoothing: float = 0.0
    reduction: LossReduction = LossReduction.MEAN


@attrs
class LossAttrs:
    reduction: LossReduction = LossReduction.MEAN


@attrs
class HuberAttrs:
    delta: float = 1.0
    reduction: LossReduction = LossReduction.MEAN


# ---- type rules ---------------------------------------------------------------------------------
def _check_reduction(r: object) -> LossReduction:
    if not isinstance(r, LossReduction):
        raise AttributeValueError(f"reduction must be an og.LossReduction (NONE, SUM or MEAN), got {r!r}")
    return r


def _merge_shapes(a: tuple[int | None, ...], b: tuple[int | None, ...], what: str) -> tuple[int | None, ...]:
    """The common shape of two tensors that must agree (dynamic dims match anything)."""
    if len(a) != len(b) or any(x is not None and y is not None and x != y for x, y in zip(a, b, strict=True)):
        raise ShapeError(f"{what}: shapes {format_shape(a)} and {format_shape(b)} differ")
    return tuple(x if x is not None else y for x, y in zip(a, b, strict=True))


def _reduced(shape: tuple[int | None, ...], r: LossReduction) -> tuple[int | None, ...]:
    return shape if r is LossReduction.NONE else ()


def _softmax_ce_rule(a: SoftmaxCrossEntropyAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    logits, labels = ins
    expect_dtype(logits, FLOAT_DTYPES, what="logits")
    _check_reduction(a.reduction)
    ls = a.label_smoothing
    if isinstance(ls, bool) or not isinstance(ls, (int, float)) or not 0.0 <= ls < 1.0:
        raise AttributeValueError(f"label_smoothing must be a number in [0, 1), got {ls!r}")
    if logits.rank == 0:
        raise ShapeError("logits must have rank >= 1 (a class axis)")
    if normalize_axis(a.axis, logits.rank) != a.axis:
        raise ShapeError(f"axis {a.axis} must be non-negative (the builder normalises it)")
    if logits.shape[a.axis] == 0:
        raise ShapeError("the class axis is empty")
    positions = logits.shape[:a.axis] + logits.shape[a.axis + 1:]
    if labels.dtype.is_floating:
        if labels.dtype is not logits.dtype:
            raise DTypeError(f"probability labels must have the logits' dtype {logits.dtype.name}, "
                             f"got {labels.dtype.name}")
        full = _merge_shapes(logits.shape, labels.shape, "probability labels must have the logits' shape")
        positions = full[:a.axis] + full[a.axis + 1:]
    elif labels.dtype in INT_DTYPES:
        positions = _merge_shapes(positions, labels.shape,
                                  f"class-index labels must have the logits' shape without axis {a.axis}")
    else:
        raise DTypeError(f"labels must be integer class indices or {logits.dtype.name} probabilities, "
                         f"got {labels.dtype.name}")
    return TensorType(_reduced(positions, a.reduction), logits.dtype)


def _pair_rule(a: Any, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    x, y = ins
    expect_dtype(x, FLOAT_DTYPES, what="prediction")
    if y.dtype is not x.dtype:
        raise DTypeError(f"the target must have the prediction's dtype {x.dtype.name}, got {y.dtype.name}")
    _check_reduction(a.reduction)
    if isinstance(a, HuberAttrs) and (isinstance(a.delta, bool) or not isinstance(a.delta, (int, float))
                                      or not (math.isfinite(a.delta) and a.delta > 0)):
        raise AttributeValueError(f"delta must be a finite number > 0, got {a.delta!r}")
    return TensorType(_reduced(_merge_shapes(x.shape, y.shape, "the target must have the prediction's shape"),
                               a.reduction), x.dtype)


# ---- lowerings ----------------------------------------------------------------------------------
def _softmax_ce_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: SoftmaxCrossEntropyAttrs = ctx.attrs
    out, ct = ctx.out_types[0].dtype.torch_dtype, compute_dtype(ctx.in_types[0].dtype)
    soft = ctx.in_types[1].dtype.is_floating
    axis, rank, ls, red = a.axis, ctx.in_types[0].rank, float(a.label_smoothing), a.reduction.value
    move = rank >= 2 and axis != 1  # torch wants the classes on dim 1 (or dim 0 when unbatched)

    def run(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x = x.to(ct)
        t = t.to(ct) if soft else t.long()
        if move:
            x = x.movedim(axis, 1)
            t = t.movedim(axis, 1) if soft else t
        # no ignored class (F.cross_entropy's default ignores -100): labels must lie in [0, classes), as the
        # gradient and the fused decomposition assume; on the CPU PyTorch checks that
        return F.cross_entropy(x, t, reduction=red, label_smoothing=ls, ignore_index=_NO_IGNORED_CLASS).to(out)

    return run


_NO_IGNORED_CLASS = -(2**63)


def _pair_lowering(fn: Callable[..., torch.Tensor]) -> Callable[[LowerContext], Callable[..., Any]]:
    def lower(ctx: LowerContext) -> Callable[..., Any]:
        out, ct = ctx.out_types[0].dtype.torch_dtype, compute_dtype(ctx.in_types[0].dtype)
        kw: dict[str, Any] = {"reduction": ctx.attrs.reduction.value}
        if isinstance(ctx.attrs, HuberAttrs):
            kw["delta"] = float(ctx.attrs.delta)
        return lambda x, y: fn(x.to(ct), y.to(ct), **kw).to(out)

    return lower


SOFTMAX_CROSS_ENTROPY = OpDef(
    "softmax_cross_entropy", infer=_softmax_ce_rule, lower=_softmax_ce_lower, attrs=SoftmaxCrossEntropyAttrs,
    fusion=FusionKind.REDUCTION,
    doc="-sum(labels * log_softmax(logits)) along axis; integer labels are class indices")
SIGMOID_CROSS_ENTROPY = OpDef(
    "sigmoid_cross_entropy", infer=_pair_rule, lower=_pair_lowering(F.binary_cross_entropy_with_logits),
    attrs=LossAttrs, fusion=FusionKind.REDUCTION,
    doc="max(x, 0) - x * z + log(1 + exp(-|x|)): binary cross entropy of sigmoid(x), computed stably")
MSE_LOSS = OpDef("mse_loss", infer=_pair_rule, lower=_pair_lowering(F.mse_loss), attrs=LossAttrs,
                 fusion=FusionKind.REDUCTION, doc="(prediction - target) ** 2")
L1_LOSS = OpDef("l1_loss", infer=_pair_rule, lower=_pair_lowering(F.l1_loss), attrs=LossAttrs,
                fusion=FusionKind.REDUCTION, doc="|prediction - target|")
HUBER_LOSS = OpDef("huber_loss", infer=_pair_rule, lower=_pair_lowering(F.huber_loss), attrs=HuberAttrs,
                   fusion=FusionKind.REDUCTION,
                   doc="0.5 d ** 2 where |d| < delta, else delta (|d| - 0.5 delta), with d = prediction - target")


# ---- gradients ----------------------------------------------------------------------------------
def _count(g: Any, ref: Tensor, dtype: Any) -> Any:
    """The number of elements of ``ref``: a Python int when static, else a ``dtype`` scalar read at run time."""
    if None not in ref.shape:
        return math.prod(d for d in ref.shape if d is not None)
    return g.reduce_sum(g.fill_like(ref, 1, dtype))


def _spread(g: Any, ct: Tensor, reduction: LossReduction, positions: Tensor) -> Tensor:
    """The loss cotangent per position (``positions`` has the per-position loss shape)."""
    if reduction is LossReduction.MEAN:
        return g.divide(ct, _count(g, positions, ct.dtype))
    return ct


@defvjp(SOFTMAX_CROSS_ENTROPY)
def _softmax_ce_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    logits, labels = op.inputs
    a: SoftmaxCrossEntropyAttrs = op.attrs
    ax, ls = a.axis, float(a.label_smoothing)
    classes = logits.shape[ax]
    c = ct[0]
    if a.reduction is LossReduction.NONE:
        c = g.expand_dims(c, ax)
    elif a.reduction is LossReduction.MEAN:
        positions = logits.shape[:ax] + logits.shape[ax + 1:]
        if None not in positions:
            c = g.divide(c, math.prod(d for d in positions if d is not None))
        else:
            ref = labels if not labels.dtype.is_floating else g.reduce_sum(logits, ax)
            c = g.divide(c, _count(g, ref, c.dtype))
    # the number of classes, static or read at run time (as a broadcastable tensor)
    n_cls: Any = classes if classes is not None else g.reduce_sum(g.ones_like(logits), ax, keepdims=True)
    p = g.softmax(logits, ax)
    if not labels.dtype.is_floating:  # (softmax - smoothed one-hot) per position
        if classes is not None:
            target = g.one_hot(labels, classes, ax, on_value=1.0 - ls + ls / classes, off_value=ls / classes,
                               dtype=logits.dtype)
        else:  # a dynamic class count: compare each position's coordinate along the axis with its label
            coord = g.subtract(g.cumulative_sum(g.ones_like(logits), ax), 1.0)
            hit = g.equal(coord, g.cast(g.expand_dims(labels, ax), logits.dtype))
            off = g.divide(ls, n_cls)
            target = g.select(hit, g.add(off, 1.0 - ls), off)
        return g.multiply(g.subtract(p, target), c), None
    off = ls / classes if classes is not None else g.divide(ls, n_cls)
    target = labels if ls == 0.0 else g.add(g.multiply(labels, 1.0 - ls), off)
    total = g.reduce_sum(target, ax, keepdims=True)  # 1 for probabilities; the general rule otherwise
    d_logits = g.multiply(g.subtract(g.multiply(p, total), target), c)
    d_labels = g.multiply(g.multiply(g.log_softmax(logits, ax), -(1.0 - ls)), c)
    return d_logits, d_labels


def _pair_vjp(local: Callable[[Any, Tensor, Tensor, Any], Tensor]) -> Callable[..., tuple[Tensor | None, ...]]:
    """A rule for ``loss(x, y)``: ``local(g, x, y, attrs)`` is d loss_i / d x_i (d / d y is its negative,
    except for sigmoid_cross_entropy, which gives its own)."""

    def rule(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
        x, y = op.inputs
        c = _spread(g, ct[0], op.attrs.reduction, x)
        gx = g.multiply(local(g, x, y, op.attrs), c)
        if op.op is SIGMOID_CROSS_ENTROPY:
            return gx, g.multiply(g.negative(x), c)
        return gx, g.negative(gx)

    return rule


defvjp(SIGMOID_CROSS_ENTROPY)(_pair_vjp(lambda g, x, y, a: g.subtract(g.sigmoid(x), y)))
defvjp(MSE_LOSS)(_pair_vjp(lambda g, x, y, a: g.multiply(g.subtract(x, y), 2.0)))
defvjp(L1_LOSS)(_pair_vjp(lambda g, x, y, a: g.sign(g.subtract(x, y))))
defvjp(HUBER_LOSS)(_pair_vjp(lambda g, x, y, a: g.clamp(g.subtract(x, y), -float(a.delta), float(a.delta))))


# ---- builder methods ------------------------------------------------------------------------------
def _num(value: Any) -> Any:
    """Numbers stored as floats (exact JSON round trips); anything else is left for the type rule to reject."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


class LossBuilders(GraphCore):
    """Graph methods for losses."""

    def _pair_loss(self, op: OpDef, x: Any, y: Any, a: Any, name: str | None) -> Tensor:
        xt = self._as_tensor(x)
        return self._apply(op, [xt, self._as_tensor(y, like=xt.dtype)], a, name)

    def softmax_cross_entropy(self, logits: Tensor, labels: Any, axis: int = -1, label_smoothing: float = 0.0,
                              reduction: LossReduction = LossReduction.MEAN, *, name: str | None = None) -> Tensor:
        """Cross entropy of ``softmax(logits)`` along ``axis`` against ``labels``: integer class indices
        (the logits' shape without ``axis``) or probabilities (the logits' shape and dtype), with
        PyTorch's ``label_smoothing`` (``F.cross_entropy``; class indices must lie in ``[0, classes)``).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2, 2), og.float32); y = g.placeholder((2,), og.int64)
        >>> loss = g.softmax_cross_entropy(x, y, reduction=og.LossReduction.NONE)
        >>> [round(v, 4) for v in g.run({x: [[0.0, 0.0], [9.0, 0.0]], y: [1, 0]}, [loss])[0].tolist()]
        [0.6931, 0.0001]
        """
        x = self._as_tensor(logits)
        if x.rank == 0:
            raise ShapeError(f"softmax_cross_entropy: logits must have rank >= 1, got {x.type}")
        a = SoftmaxCrossEntropyAttrs(normalize_axis(axis, x.rank, "softmax_cross_entropy: axis"),
                                     _num(label_smoothing), reduction)
        return self._apply(SOFTMAX_CROSS_ENTROPY, [x, self._as_tensor(labels)], a, name)

    def sigmoid_cross_entropy(self, logits: Tensor, labels: Any, reduction: LossReduction = LossReduction.MEAN, *,
                              name: str | None = None) -> Tensor:
        """Binary cross entropy of ``sigmoid(logits)`` against ``labels`` in [0, 1] (same shape and dtype),
        computed stably as ``max(x, 0) - x * z + log(1 + exp(-|x|))`` (``F.binary_cross_entropy_with_logits``)."""
        return self._pair_loss(SIGMOID_CROSS_ENTROPY, logits, labels, LossAttrs(reduction), name)

    def mse(self, prediction: Tensor, target: Any, reduction: LossReduction = LossReduction.MEAN, *,
            name: str | None = None) -> Tensor:
        """Squared error ``(prediction - target) ** 2`` (same shape and dtype), reduced.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,), og.float32)
        >>> g.run({x: [1.0, 3.0]}, [g.mse(x, g.constant([0.0, 0.0]))])[0].item()
        5.0
        """
        return self._pair_loss(MSE_LOSS, prediction, target, LossAttrs(reduction), name)

    def l1(self, prediction: Tensor, target: Any, reduction: LossReduction = LossReduction.MEAN, *,
           name: str | None = None) -> Tensor:
        """Absolute error ``|prediction - target|`` (same shape and dtype), reduced."""
        return self._pair_loss(L1_LOSS, prediction, target, LossAttrs(reduction), name)

    def huber(self, prediction: Tensor, target: Any, delta: float = 1.0,
              reduction: LossReduction = LossReduction.MEAN, *, name: str | None = None) -> Tensor:
        """Huber loss: ``0.5 d ** 2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 delta)``, with
        ``d = prediction - target`` (``F.huber_loss``)."""
        return self._pair_loss(HUBER_LOSS, prediction, target, HuberAttrs(_num(delta), reduction), name)


__all__ = [
    "HUBER_LOSS", "L1_LOSS", "MSE_LOSS", "SIGMOID_CROSS_ENTROPY", "SOFTMAX_CROSS_ENTROPY", "HuberAttrs",
    "LossAttrs", "LossBuilders", "LossReduction", "SoftmaxCrossEntropyAttrs",
]
