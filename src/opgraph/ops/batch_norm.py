"""Batch normalisation: the fused op ``batch_norm_training`` and the ``batch_norm`` builder.

``batch_norm_training(x, [gamma], [beta])`` normalises with the batch statistics (every dim but
``axis``) and returns ``(y, mean, variance)``: the batch mean and the *biased* batch variance, per
channel, in the compute dtype (float32 for 16-bit inputs, which are computed in float32 and rounded
once; else ``x``'s dtype). It lowers to PyTorch's fused ``native_batch_norm`` kernel (the variance is
recovered from the kernel's ``1 / sqrt(variance + epsilon)``), and its gradient is one op,
``batch_norm_training_gradient`` (ops/batch_norm_grad.py, ``native_batch_norm_backward``); nonzero
cotangents on the statistics (the running-statistics updates read them) add their terms with graph ops;
zero ones (the engine's ``zeros_like`` for unused outputs) add nothing. jvp's zero stand-ins look the
same, so ``g.jvp`` with the statistics themselves among its outputs gives zeros for them (not for ``y``).

``batch_norm`` builds on it: in training mode two ``assign`` ops update the running statistics in
place with PyTorch's rule (``new = (1 - momentum) * old + momentum * stat``, the unbiased variance for
the running variance); the builder returns those ``Operation``s, to be run through ``target_ops``. In
inference mode the running statistics normalise the input (a ``normalize`` op).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from ..core.dtype import float32
from ..core.errors import AttributeValueError, DTypeError, ShapeError
from ..core.shape import normalize_axis
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ._rules import expect_arity
from .batch_norm_grad import (
    ChannelOps,
    Ones,
    add_terms,
    as_epsilon,
    channel_dim,
    check_bn_attrs,
    check_flags,
    is_zero,
    stat_dtype,
)
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp
from .state import VARIABLE, expect_variable


# ---- batch_norm_training -------------------------------------------------------------------------
@attrs
class BatchNormTrainingAttrs:
    axis: int = 1
    epsilon: float = 1e-5
    has_gamma: bool = False
    has_beta: bool = False


def _training_rule(a: BatchNormTrainingAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    check_flags(has_gamma=a.has_gamma, has_beta=a.has_beta)
    expect_arity(ins, 1 + a.has_gamma + a.has_beta)
    x = ins[0]
    check_bn_attrs(a.axis, a.epsilon, x)
    names = tuple(w for w, f in (("gamma", a.has_gamma), ("beta", a.has_beta)) if f)
    c = channel_dim(x, a.axis, ins[1:], names)
    st = stat_dtype(x.dtype)
    return x, TensorType((c,), st), TensorType((c,), st)


def _training_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: BatchNormTrainingAttrs = ctx.attrs
    st, axis, eps = stat_dtype(ctx.in_types[0].dtype).torch_dtype, a.axis, a.epsilon
    mixed = ctx.in_types[0].dtype.bits < 32
    ones = Ones(st, ctx.device)

    def run(x: torch.Tensor, *affine: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        xm = x.movedim(axis, 1) if axis != 1 else x
        rest = [p.to(st) for p in affine]
        w = rest.pop(0) if a.has_gamma else None
        b = rest.pop(0) if a.has_beta else None
        if w is None and mixed:
            w = ones(xm.shape[1])  # a float32 weight selects the float32-computing kernel for 16-bit x
        # the dispatcher PyTorch's own batch_norm uses: cuDNN's one-kernel statistics on CUDA where it applies
        if xm.numel() == 0:  # the dispatcher returns uninitialised statistics here; this raises
            y, mean, rstd = torch.native_batch_norm(xm, w, b, None, None, True, 0.0, eps)
        else:
            y, mean, rstd = torch._batch_norm_impl_index(xm, w, b, None, None, True, 0.0, eps,
                                                         torch.backends.cudnn.enabled)[:3]
        # rstd = 1 / sqrt(var + eps): exact to a few ulps of var + eps; clamped where var ~ 0 rounds below
        var = torch.clamp_min_(rstd.pow(-2) - eps, 0.0) if eps else rstd.pow(-2)
        return (y.movedim(1, axis) if axis != 1 else y), mean, var

    return run


BATCH_NORM_TRAINING = OpDef(
    "batch_norm_training", infer=_training_rule, lower=_training_lower, attrs=BatchNormTrainingAttrs,
    fusion=FusionKind.OPAQUE,
    doc="(y, batch mean, biased batch variance): normalise with the batch statistics over every dim but axis")


@defvjp(BATCH_NORM_TRAINING)
def _training_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    a: BatchNormTrainingAttrs = op.attrs
    x, *params = op.inputs
    gamma = params[0] if a.has_gamma else None
    _, mean, var = op.outputs
    c_y, c_mean, c_var = ct
    # built even for a zero c_y: jvp transposes this rule with zero stand-ins for the cotangents
    dx, dgamma, dbeta = g.batch_norm_training_gradient(c_y, x, mean, var, gamma, axis=a.axis, epsilon=a.epsilon)
    # the statistics' own cotangents, zero (the engine's zeros_like) unless something differentiable reads
    # them, e.g. the running-statistics updates: d mean / dx = 1/N, d var / dx = 2 (x - mean) / N per channel
    terms: list[Tensor] = []
    if not (is_zero(c_mean) and is_zero(c_var)):
        ch = ChannelOps(g, x, a.axis)
        if not is_zero(c_var):
            centred = g.subtract(ch.up(x), ch.place(mean))
            terms.append(g.multiply(centred, ch.place(g.divide(g.multiply(c_var, 2.0), ch.n))))
        if not is_zero(c_mean):
            terms.append(ch.place(g.divide(c_mean, ch.n)))  # broadcast against dx by the addition
    grads: list[Tensor | None] = [add_terms(g, ch.up(dx), *terms) if terms else dx]
    if a.has_gamma:
        grads.append(dgamma)
    if a.has_beta:
        grads.append(dbeta)
    return tuple(grads)


class BatchNormResult(NamedTuple):
    """``batch_norm``'s result: the normalised tensor and the running-statistics updates (empty in
    inference mode), to be run through ``target_ops``."""

    output: Tensor
    updates: tuple[Operation, ...]


def _check_momentum(momentum: object) -> float:
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0.0 <= momentum <= 1.0:
        raise AttributeValueError(f"batch_norm: momentum must be a number in [0, 1], got {momentum!r}")
    return float(momentum)


def _check_epsilon(epsilon: object) -> float:
    if (isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon)
            or epsilon < 0):
        raise AttributeValueError(f"batch_norm: epsilon must be a finite number >= 0, got {epsilon!r}")
    return float(epsilon)


class BatchNormBuilders(GraphCore):
    """Graph methods for batch normalisation."""

    def batch_norm(self, x: Tensor, running_mean: Tensor, running_var: Tensor, gamma: Any = None,
                   beta: Any = None, *, training: bool, momentum: float = 0.1, epsilon: float = 1e-5,
                   axis: int = 1, name: str | None = None) -> BatchNormResult:
        """Batch normalisation over every dim but ``axis`` (the channels), as ``torch.nn.functional.batch_norm``.

        ``running_mean``/``running_var`` (shape ``(C,)``) are variables in training mode; ``gamma``/``beta``
        have shape ``(C,)``. Returns ``(output, updates)``: run ``updates`` through ``target_ops`` to write
        the new running statistics.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((2, 1), og.float32)
        >>> rm, rv = g.variable(torch.zeros(1)), g.variable(torch.ones(1))
        >>> y, updates = g.batch_norm(x, rm, rv, training=True, momentum=0.5, epsilon=0.0)
        >>> g.run({x: [[1.0], [5.0]]}, [y], target_ops=updates)[0].tolist()
        [[-1.0], [1.0]]
        >>> g.variable_value(rm).tolist(), g.variable_value(rv).tolist()
        ([1.5], [4.5])
        """
        g: Any = self
        x = self._as_tensor(x)
        if not isinstance(training, bool):
            raise AttributeValueError(f"batch_norm: training must be a bool, got {training!r}")
        m, eps = _check_momentum(momentum), _check_epsilon(epsilon)
        if not x.dtype.is_floating:
            raise DTypeError(f"batch_norm: expects a floating input, got {x.dtype.name}")
        if x.rank < 2:
            raise ShapeError(f"batch_norm: expects an input of rank >= 2 (N, C, ...), got {x.type}")
        ax = normalize_axis(axis, x.rank, "batch_norm: axis")
        channels = x.shape[ax]
        stats = [self._as_tensor(t) for t in (running_mean, running_var)]
        affine = [None if p is None else self._as_tensor(p, like=x.dtype) for p in (gamma, beta)]
        for what, t in zip(("running_mean", "running_var", "gamma", "beta"), (*stats, *affine), strict=True):
            if t is None:
                continue
            if t.rank != 1 or (t.shape[0] is not None and channels is not None and t.shape[0] != channels):
                raise ShapeError(f"batch_norm: {what} must have shape ({channels},) (the size of axis {ax} "
                                 f"of {x.type}), got {t.type}")
            if not t.dtype.is_floating:
                raise DTypeError(f"batch_norm: {what} must be floating, got {t.dtype.name}")
        if training:
            for what, t in zip(("running_mean", "running_var"), stats, strict=True):
                expect_variable(t, f"batch_norm: {what} in training mode")
        # the current value of a variable (after earlier assigns in the run), any other tensor as is
        current = [g.read(t) if t.op.op is VARIABLE else t for t in stats]
        if training:
            y, mean, var = self.batch_norm_training(x, affine[0], affine[1], axis=ax, epsilon=eps)
            axes = tuple(a for a in range(x.rank) if a != ax)
            bessel = self._bessel(x, axes, var.dtype)
            # a static n / (n - 1) folds into the momentum factor: one multiply fewer per layer
            unbiased = (var, m * bessel) if isinstance(bessel, float) else (g.multiply(var, bessel), m)
            updates = (self._running_update(stats[0], current[0], mean, m),
                       self._running_update(stats[1], current[1], unbiased[0], m, unbiased[1]))
            return BatchNormResult(y if name is None else g.cast(y, y.dtype, name=name), updates)
        # 16-bit inputs compute in float32 and round once, as normalize does
        ct = float32 if x.dtype.bits < 32 else x.dtype
        xc = x if ct is x.dtype else g.cast(x, ct)
        trailing = x.rank - 1 - ax
        size = channels if channels is not None else -1

        def per_channel(t: Tensor) -> Tensor:
            """A (C,) tensor in the compute dtype, shaped to broadcast along ``axis``."""
            t = t if t.dtype is ct else g.cast(t, ct)
            return g.reshape(t, (size,) + (1,) * trailing) if trailing else t

        mean, var = current
        params = [None if p is None else per_channel(p) for p in affine]
        y = g.normalize(xc, per_channel(mean), per_channel(var), params[0], params[1], eps,
                        name=name if ct is x.dtype else None)
        if ct is not x.dtype:
            y = g.cast(y, x.dtype, name=name)
        return BatchNormResult(y, ())

    def batch_norm_training(self, x: Tensor, gamma: Any = None, beta: Any = None, *, axis: int = 1,
                            epsilon: float = 1e-5, name: str | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Batch normalisation with the batch statistics, as one fused op: ``(y, mean, variance)``, the
        statistics (per channel, over every dim but ``axis``; the variance biased) in float32 for 16-bit
        ``x``, else in ``x``'s dtype. ``gamma``/``beta`` have shape ``(C,)``. ``batch_norm`` builds on it.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2, 1), og.float32)
        >>> y, mean, var = g.batch_norm_training(x, epsilon=0.0)
        >>> [t.tolist() for t in g.run({x: [[1.0], [5.0]]}, [y, mean, var])]
        [[[-1.0], [1.0]], [3.0], [4.0]]
        """
        x = self._as_tensor(x)
        ins = [x, *(self._as_tensor(p, like=x.dtype) for p in (gamma, beta) if p is not None)]
        rank = max(x.rank, 2)  # a lower rank is the type rule's to reject
        a = BatchNormTrainingAttrs(normalize_axis(axis, rank, "batch_norm_training: axis"), as_epsilon(epsilon),
                                   gamma is not None, beta is not None)
        y, mean, var = self._apply_multi(BATCH_NORM_TRAINING, ins, a, name)
        return y, mean, var

    def _bessel(self, x: Tensor, axes: tuple[int, ...], dtype: Any) -> float | Tensor:
        """``n / (n - 1)`` for the ``n`` elements each channel's statistics reduce: a number when static,
        else a tensor read at run time."""
        g: Any = self
        dims = [x.shape[a] for a in axes]
        if all(d is not None for d in dims):
            n = math.prod(d for d in dims if d is not None)
            if n <= 1:
                raise ShapeError(f"batch_norm: training needs more than one value per channel, {x.type} has {n}")
            return n / (n - 1)
        n = g.cast(g.reduce_prod(g.gather(g.shape_of(x), g.constant(list(axes)))), dtype)
        return g.divide(n, g.subtract(n, 1.0))

    def _running_update(self, variable: Tensor, current: Tensor, stat: Tensor, momentum: float,
                        factor: float | None = None) -> Operation:
        """``variable = (1 - momentum) * current + factor * stat`` (``factor`` defaults to ``momentum``)."""
        g: Any = self
        if stat.dtype is not variable.dtype:
            stat = g.cast(stat, variable.dtype)
        if stat.shape != variable.shape:
            stat = g.reshape(stat, variable.shape)  # a dynamic channel count: the variable's is static
        new = g.add(g.multiply(current, 1.0 - momentum), g.multiply(stat, momentum if factor is None else factor))
        op: Operation = g.assign(variable, new)
        return op


__all__ = ["BATCH_NORM_TRAINING", "BatchNormBuilders", "BatchNormResult", "BatchNormTrainingAttrs"]
