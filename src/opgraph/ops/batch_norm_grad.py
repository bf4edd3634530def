"""Op: ``batch_norm_training_gradient``, the gradient of ``batch_norm_training`` (ops/batch_norm.py).

Inputs ``(gradient, x, mean, variance, [gamma])``: the incoming gradient of ``y`` (shaped like ``x``),
the forward input and the batch statistics the forward returned (biased variance). Outputs
``(dx, dgamma, dbeta)``, with ``r = rsqrt(variance + epsilon)``, ``xhat = (x - mean) * r`` and sums and
means over every dim but ``axis``, per channel::

    dbeta = sum(gradient)        dgamma = sum(gradient * xhat)
    dx = gamma * r * (gradient - mean(gradient) - xhat * mean(gradient * xhat))

(``gamma`` 1 when absent). This is the explicit function of its five inputs that PyTorch's
``native_batch_norm_backward`` computes; it equals the gradient of the batch norm only when ``mean``
and ``variance`` are ``x``'s batch statistics, which is how the forward's rule uses it. 16-bit inputs
compute in float32: ``dx`` has ``x``'s dtype, ``dgamma``/``dbeta`` the compute dtype (float32 for
16-bit ``x``, else ``x``'s). Its own VJP (second order) is written out below with graph ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ..core.dtype import DType, float32
from ..core.errors import AttributeValueError, DTypeError, ShapeError
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ._padding import check_same_dims, merge_dims
from ._rules import expect_arity
from .gradient_support import FILL_LIKE
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp


# ---- helpers shared with ops/batch_norm.py -------------------------------------------------------
def stat_dtype(dt: DType) -> DType:
    """The dtype batch norm computes in and returns its statistics in: float32 for 16-bit inputs."""
    return float32 if dt.bits < 32 else dt


def check_flags(**flags: object) -> None:
    for k, v in flags.items():
        if not isinstance(v, bool):
            raise AttributeValueError(f"{k} must be a bool, got {v!r}")


def check_bn_attrs(axis: object, epsilon: object, x: TensorType) -> None:
    """Attributes and the input of the batch-norm ops (a loaded graph may hold anything)."""
    if (isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon)
            or epsilon < 0):
        raise AttributeValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    if not (x.dtype.is_floating and not x.dtype.is_complex):
        raise DTypeError(f"expects a real floating input, got {x.dtype.name}")
    if x.rank < 2:
        raise ShapeError(f"expects an input of rank >= 2 (N, C, ...), got rank {x.rank}")
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < x.rank:
        raise ShapeError(f"axis must be an int in [0, {x.rank}) (the builder normalises it), got {axis!r}")


def channel_dim(x: TensorType, axis: int, per_channel: tuple[TensorType, ...], names: tuple[str, ...]) -> int | None:
    """Check the (C,) inputs against ``x``'s channel dim; the channel count (None if dynamic everywhere)."""
    c = x.shape[axis]
    for t, what in zip(per_channel, names, strict=True):
        if not t.dtype.is_floating or t.dtype.is_complex:
            raise DTypeError(f"{what} must be real floating, got {t.dtype.name}")
        if t.rank != 1 or (t.shape[0] is not None and c is not None and t.shape[0] != c):
            raise ShapeError(f"{what} must have shape ({'?' if c is None else c},) (the size of axis {axis}), "
                             f"got rank {t.rank} shape {t.shape}")
        c = c if c is not None else t.shape[0]
    return c


class Ones:
    """``ones(C)`` in float32/the compute dtype for a fused kernel called without ``gamma`` (cached per C)."""

    def __init__(self, dtype: torch.dtype, device: torch.device) -> None:
        self.dtype, self.device = dtype, device
        self.cache: dict[int, torch.Tensor] = {}

    def __call__(self, c: int) -> torch.Tensor:
        if c not in self.cache:
            self.cache[c] = torch.ones(c, dtype=self.dtype, device=self.device)
        return self.cache[c]


def as_epsilon(value: Any) -> Any:
    """Numbers become floats for the attributes; anything else is left for the type rule to reject."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def is_zero(t: Tensor) -> bool:
    """A cotangent the engine made for an unused output (``zeros_like``): no contribution to build.
    jvp's zero stand-ins look the same, so only the statistics outputs skip on this (see ops/batch_norm.py)."""
    return t.op.op is FILL_LIKE and t.op.attrs.value == 0


def up(g: Any, t: Tensor, dtype: DType) -> Tensor:
    return t if t.dtype is dtype else g.cast(t, dtype)


class ChannelOps:
    """Graph helpers for gradient rules: per-channel (C,) tensors against an input ``x`` with channels
    at ``axis``, in the compute dtype."""

    def __init__(self, g: Any, x: Tensor, axis: int) -> None:
        self.g, self.x, self.axis = g, x, axis
        self.dtype = stat_dtype(x.dtype)
        self.axes = [a for a in range(x.rank) if a != axis]
        self.trailing = x.rank - 1 - axis
        dims = [x.shape[a] for a in self.axes]
        # the element count per channel: a number when static, else read from the shape at run time
        self.n: Any = float(math.prod(d for d in dims if d is not None)) if None not in dims else g.cast(
            g.reduce_prod(g.gather(g.shape_of(x), g.constant(self.axes))), self.dtype)

    def up(self, t: Tensor) -> Tensor:
        return up(self.g, t, self.dtype)

    def place(self, t: Tensor) -> Tensor:
        """A (C,) tensor shaped to broadcast against ``x`` along ``axis``."""
        t = self.up(t)
        return self.g.expand_dims(t, list(range(1, 1 + self.trailing))) if self.trailing else t

    def sum(self, t: Tensor) -> Tensor:
        """Per-channel sum of a tensor shaped like ``x``: (C,)."""
        total: Tensor = self.g.reduce_sum(t, self.axes)
        return total


def add_terms(g: Any, *terms: Tensor | None) -> Tensor | None:
    total: Tensor | None = None
    for t in terms:
        if t is not None:
            total = t if total is None else g.add(total, t)
    return total


# ---- batch_norm_training_gradient ----------------------------------------------------------------
@attrs
class BatchNormGradientAttrs:
    axis: int = 1
    epsilon: float = 1e-5
    has_gamma: bool = False


def _gradient_rule(a: BatchNormGradientAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    check_flags(has_gamma=a.has_gamma)
    expect_arity(ins, 4 + a.has_gamma)
    gy, x = ins[:2]
    check_bn_attrs(a.axis, a.epsilon, x)
    if gy.dtype is not x.dtype:
        raise DTypeError(f"the incoming gradient must have the input's dtype {x.dtype.name}, got {gy.dtype.name}")
    check_same_dims(gy.shape, x.shape, "the incoming gradient")
    c = channel_dim(x, a.axis, ins[2:], ("mean", "variance", "gamma")[:len(ins) - 2])
    st = stat_dtype(x.dtype)
    return TensorType(merge_dims(x.shape, gy.shape), x.dtype), TensorType((c,), st), TensorType((c,), st)


def _gradient_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: BatchNormGradientAttrs = ctx.attrs
    st, axis, eps = stat_dtype(ctx.in_types[1].dtype).torch_dtype, a.axis, a.epsilon
    ones = Ones(st, ctx.device)
    mask = [True, True, True]

    def run(gy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
            *gamma: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if axis != 1:
            gy, x = gy.movedim(axis, 1), x.movedim(axis, 1)
        w = gamma[0].to(st) if gamma else ones(x.shape[1])
        # 16-bit gy/x with float32 weight and statistics: PyTorch's mixed-dtype kernel computes in float32
        dx, dw, db = torch.ops.aten.native_batch_norm_backward(
            gy, x, w, None, None, mean.to(st), torch.rsqrt(var.to(st) + eps), True, eps, mask)
        return (dx.movedim(1, axis) if axis != 1 else dx), dw, db

    return run


BATCH_NORM_TRAINING_GRADIENT = OpDef(
    "batch_norm_training_gradient", infer=_gradient_rule, lower=_gradient_lower, attrs=BatchNormGradientAttrs,
    fusion=FusionKind.OPAQUE, doc="(dx, dgamma, dbeta) of batch_norm_training given the gradient of y")


@defvjp(BATCH_NORM_TRAINING_GRADIENT)
def _gradient_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    # L = <u, dx> + <p, dgamma> + <q, dbeta>. With A = sum(c), B = sum(c xhat), U1 = sum(u), U2 = sum(u xhat):
    #   dx = gamma r (c - A/N - xhat B/N), which is self-adjoint in c, so d c = the op applied to u, + p xhat + q;
    #   d xhat = G = -gamma r / N (c U2 + B u) + p c, giving d x = G r and d mean = -r sum(G);
    #   S = sum(u c) - A U1/N - B U2/N: d gamma = r S, d r = gamma S + sum(G xhat) / r, d var = -r^3/2 d r.
    # Every term is built even where a cotangent is zero: jvp transposes this rule with zero stand-ins.
    a: BatchNormGradientAttrs = op.attrs
    gy, x, mean, var, *rest = op.inputs
    gamma = rest[0] if a.has_gamma else None
    _, dgamma, dbeta = op.outputs  # B and A
    u, p, q = ct
    ch = ChannelOps(g, x, a.axis)
    r = g.rsqrt(g.add(ch.up(var), a.epsilon))
    xhat = g.multiply(g.subtract(ch.up(x), ch.place(mean)), ch.place(r))
    c, uc = ch.up(gy), ch.up(u)
    gr = r if gamma is None else g.multiply(ch.up(gamma), r)  # gamma r, per channel
    bn_u, u2, u1 = g.batch_norm_training_gradient(u, x, mean, var, gamma, axis=a.axis, epsilon=a.epsilon)
    d_c = add_terms(g, ch.up(bn_u), g.multiply(xhat, ch.place(p)), ch.place(q))
    k = g.divide(g.negative(gr), ch.n)  # -gamma r / N
    big_g = g.add(g.multiply(c, ch.place(g.add(g.multiply(k, u2), ch.up(p)))),
                  g.multiply(uc, ch.place(g.multiply(k, dgamma))))
    s = g.subtract(ch.sum(g.multiply(uc, c)), g.divide(g.add(g.multiply(dbeta, u1), g.multiply(dgamma, u2)), ch.n))
    d_x = g.multiply(big_g, ch.place(r))
    d_mean = g.negative(g.multiply(r, ch.sum(big_g)))
    # r * d r = gamma r S + sum(G xhat); d var = -r^2/2 times that
    d_var = g.multiply(g.add(g.multiply(s, gr), ch.sum(g.multiply(big_g, xhat))), g.multiply(g.multiply(r, r), -0.5))
    return (d_c, d_x, d_mean, d_var, *((g.multiply(r, s),) if gamma is not None else ()))


# ---- builder methods -----------------------------------------------------------------------------
class BatchNormGradientBuilders(GraphCore):
    """Graph method for the gradient of training-mode batch normalisation."""

    def batch_norm_training_gradient(self, gradient: Tensor, x: Tensor, mean: Tensor, variance: Tensor,
                                     gamma: Tensor | None = None, *, axis: int = 1, epsilon: float = 1e-5,
                                     name: str | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``(dx, dgamma, dbeta)`` of ``batch_norm_training(x, gamma, ...)`` given the gradient of its
        result and the batch ``mean``/(biased) ``variance`` it returned.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((2, 1)); dy = g.placeholder((2, 1))
        >>> dx, dgamma, dbeta = g.batch_norm_training_gradient(dy, x, g.constant([3.0]), g.constant([4.0]),
        ...                                                    epsilon=0.0)
        >>> [t.tolist() for t in g.run({x: [[1.0], [5.0]], dy: [[1.0], [3.0]]}, [dx, dgamma, dbeta])]
        [[[0.0], [0.0]], [2.0], [4.0]]
        """
        from ..core.shape import normalize_axis

        x = self._as_tensor(x)
        ins = [self._as_tensor(gradient), x, self._as_tensor(mean), self._as_tensor(variance)]
        if gamma is not None:
            ins.append(self._as_tensor(gamma, like=x.dtype))
        rank = max(x.rank, 2)  # a lower rank is the type rule's to reject
        attrs_ = BatchNormGradientAttrs(normalize_axis(axis, rank, "batch_norm_training_gradient: axis"),
                                        as_epsilon(epsilon), gamma is not None)
        dx, dgamma, dbeta = self._apply_multi(BATCH_NORM_TRAINING_GRADIENT, ins, attrs_, name)
        return dx, dgamma, dbeta


__all__ = ["BATCH_NORM_TRAINING_GRADIENT", "BatchNormGradientAttrs", "BatchNormGradientBuilders", "ChannelOps",
           "Ones", "add_terms", "as_epsilon", "channel_dim", "check_bn_attrs", "check_flags", "is_zero", "stat_dtype"]
