"""Ops: activations (relu, gelu, silu, ...), each one elementwise op on real floating dtypes.

They are single ops with PyTorch lowerings (one fused kernel each); composites such as ``gelu`` or
``mish`` may later decompose into primitives through a named rewrite.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..core.device_timing import device_probe
from ..core.dtype import FLOAT_DTYPES
from ..core.errors import AttributeValueError
from ..core.types import TensorType
from ..ir.attrs import serializable
from ..ir.graph import GraphCore, Tensor
from ._rules import expect_arity, expect_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp, direct

# gradient rules build graph ops that have rules themselves, so second derivatives work
Grads = tuple[Tensor | None, ...]


def _float_rule(a: Any, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    expect_dtype(ins[0], FLOAT_DTYPES)
    return ins[0]


def _finite(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AttributeValueError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def _num(value: Any) -> Any:
    """Numbers stored as floats (exact JSON round trips); anything else is left for the type rule to reject."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def activation(name: str, fn: Callable[..., Any] | None = None, doc: str = "", *, attrs: type | None = None,
               rule: Callable[[Any, tuple[TensorType, ...]], TensorType] = _float_rule,
               lower: Callable[[LowerContext], Callable[..., Any]] | None = None) -> OpDef:
    return OpDef(name, infer=rule, lower=lower if fn is None else direct(fn), attrs=attrs,
                 fusion=FusionKind.ELEMENTWISE, doc=doc)


# ---- attribute-free ------------------------------------------------------------------------------
RELU = activation("relu", torch.relu, "max(x, 0)")
RELU6 = activation("relu6", F.relu6, "min(max(x, 0), 6)")
SILU = activation("silu", F.silu, "x * sigmoid(x) (swish)")
SIGMOID = activation("sigmoid", torch.sigmoid, "1 / (1 + exp(-x))")
SOFTSIGN = activation("softsign", F.softsign, "x / (1 + |x|)")
MISH = activation("mish", F.mish, "x * tanh(softplus(x))")


def _mask(g: Any, ct: Tensor, keep: Tensor) -> Tensor:
    return g.select(keep, ct, g.zeros_like(ct))


@defvjp(RELU)
def _relu_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (_mask(g, ct[0], g.greater(op.inputs[0], 0)),)  # 0 at the kink x == 0


@defvjp(RELU6)
def _relu6_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x = op.inputs[0]  # 0 at both kinks
    return (_mask(g, ct[0], g.logical_and(g.greater(x, 0), g.less(x, 6))),)


@defvjp(SIGMOID)
def _sigmoid_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    s = op.outputs[0]
    return (g.multiply(ct[0], g.multiply(s, g.subtract(1.0, s))),)


@defvjp(SILU)
def _silu_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x = op.inputs[0]  # (x s)' = s (1 + x (1 - s))
    s = g.sigmoid(x)
    return (g.multiply(ct[0], g.multiply(s, g.add(g.multiply(x, g.subtract(1.0, s)), 1.0))),)


@defvjp(SOFTSIGN)
def _softsign_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.divide(ct[0], g.square(g.add(g.abs(op.inputs[0]), 1.0))),)


@defvjp(MISH)
def _mish_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x = op.inputs[0]  # (x t)' = t + x (1 - t^2) sigmoid(x), t = tanh(softplus(x))
    t = g.tanh(g.softplus(x))
    dt = g.multiply(g.multiply(x, g.subtract(1.0, g.square(t))), g.sigmoid(x))
    return (g.multiply(ct[0], g.add(t, dt)),)


# ---- with a slope or scale ---------------------------------------------------------------------------
@attrs
class AlphaAttrs:
    alpha: float


def _alpha_rule(a: AlphaAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    _finite("alpha", a.alpha)
    return _float_rule(a, ins)


LEAKY_RELU = activation("leaky_relu", doc="x where x >= 0, else alpha * x", attrs=AlphaAttrs, rule=_alpha_rule,
                        lower=lambda ctx: lambda x: F.leaky_relu(x, ctx.attrs.alpha))
ELU = activation("elu", doc="x where x > 0, else alpha * (exp(x) - 1)", attrs=AlphaAttrs, rule=_alpha_rule,
                 lower=lambda ctx: lambda x: F.elu(x, ctx.attrs.alpha))


@defvjp(LEAKY_RELU)
def _leaky_relu_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    # slope 1 at x == 0, the branch the forward takes
    return (g.select(g.greater_equal(op.inputs[0], 0), ct[0], g.multiply(ct[0], op.attrs.alpha)),)


@defvjp(ELU)
def _elu_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    # alpha exp(x) = out + alpha for x <= 0: from the output, so no exp(x) overflows on the other branch
    x, out = op.inputs[0], op.outputs[0]
    return (g.select(g.greater(x, 0), ct[0], g.multiply(ct[0], g.add(out, op.attrs.alpha))),)


@serializable
class GeluApproximation(enum.Enum):
    """How ``gelu`` evaluates the normal CDF: exactly with ``erf``, or with PyTorch's/BERT's tanh formula."""

    NONE = "none"
    TANH = "tanh"


@attrs
class GeluAttrs:
    approximate: GeluApproximation = GeluApproximation.NONE


def _gelu_rule(a: GeluAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    if not isinstance(a.approximate, GeluApproximation):
        raise AttributeValueError(f"approximate must be a GeluApproximation, got {a.approximate!r}")
    return _float_rule(a, ins)


@device_probe
def _gelu_keeps_inf(device_type: str, dtype: torch.dtype) -> bool:
    """Whether PyTorch's erf GELU gives +inf at +inf on this kind of device (probed once per device type and
    dtype): CUDA's kernel computes ``x * 0.5 * (1 + erf(x / sqrt 2))``, which does; the CPU's vectorised erf gives
    NaN there. While a CUDA graph is being captured the answer is no: mended."""
    x = torch.full((64,), math.inf, device=device_type, dtype=dtype)  # vector width: the CPU's vectorised path
    return bool((F.gelu(x) == math.inf).all())


def _gelu_lower(ctx: LowerContext) -> Callable[..., Any]:
    if ctx.attrs.approximate is GeluApproximation.TANH:
        return lambda x: F.gelu(x, approximate="tanh")
    if ctx.device.type != "cpu":
        if _gelu_keeps_inf(ctx.device.type, ctx.out_types[0].dtype.torch_dtype):
            return F.gelu  # no mend: it cost two more passes over the tensor (BERT-base step on an H200: 1.3 ms)
        return lambda x: torch.where(x == math.inf, x, F.gelu(x))

    def on_cpu(x: torch.Tensor) -> torch.Tensor:
        # torch's CPU erf kernel gives NaN at +inf: mended only where x's maximum is +inf or NaN (a NaN hides
        # it); the maximum is one vectorised read, where isposinf(x).any() cost more than the gelu itself
        y = F.gelu(x)
        top = x.amax().item() if x.numel() else 0.0
        return torch.where(x == math.inf, x, y) if top == math.inf or top != top else y

    return on_cpu


GELU = activation("gelu", doc="x * Phi(x), Phi the standard normal CDF (erf, or the tanh approximation)",
                  attrs=GeluAttrs, rule=_gelu_rule, lower=_gelu_lower)
_GELU_C = math.sqrt(2 / math.pi)  # the tanh form: 0.5 x (1 + tanh(c (x + k x^3)))
_GELU_K = 0.044715


@defvjp(GELU)
def _gelu_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x = op.inputs[0]
    if op.attrs.approximate is GeluApproximation.TANH:
        x2 = g.square(x)
        t = g.tanh(g.multiply(g.multiply(x, g.add(g.multiply(x2, _GELU_K), 1.0)), _GELU_C))
        du = g.multiply(g.add(g.multiply(x2, 3 * _GELU_K), 1.0), _GELU_C)  # d/dx of tanh's argument
        d = g.multiply(g.add(g.add(t, 1.0), g.multiply(g.multiply(x, g.subtract(1.0, g.square(t))), du)), 0.5)
    else:  # Phi(x) + x phi(x)
        cdf = g.multiply(g.add(g.erf(g.multiply(x, 1 / math.sqrt(2))), 1.0), 0.5)
        pdf = g.multiply(g.exp(g.multiply(g.square(x), -0.5)), 1 / math.sqrt(2 * math.pi))
        d = g.add(cdf, g.multiply(x, pdf))
    return (g.multiply(ct[0], d),)


@attrs
class HardSigmoidAttrs:
    alpha: float = 0.2
    beta: float = 0.5


def _hard_sigmoid_rule(a: HardSigmoidAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    _finite("alpha", a.alpha)
    _finite("beta", a.beta)
    return _float_rule(a, ins)


def _hard_sigmoid_lower(ctx: LowerContext) -> Callable[..., Any]:
    alpha, beta = ctx.attrs.alpha, ctx.attrs.beta
    return lambda x: torch.clamp(x * alpha + beta, 0.0, 1.0)


HARD_SIGMOID = activation("hard_sigmoid", doc="max(0, min(1, alpha * x + beta))", attrs=HardSigmoidAttrs,
                          rule=_hard_sigmoid_rule, lower=_hard_sigmoid_lower)


@defvjp(HARD_SIGMOID)
def _hard_sigmoid_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    out = op.outputs[0]  # slope alpha strictly inside (0, 1); 0 on the flat parts and at the kinks
    inside = g.logical_and(g.greater(out, 0), g.less(out, 1))
    return (_mask(g, g.multiply(ct[0], op.attrs.alpha), inside),)


@attrs
class SoftplusAttrs:
    beta: float = 1.0
    threshold: float = 20.0


def _softplus_rule(a: SoftplusAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    if _finite("beta", a.beta) <= 0:
        raise AttributeValueError(f"beta must be positive, got {a.beta!r}")
    _finite("threshold", a.threshold)
    return _float_rule(a, ins)


SOFTPLUS = activation("softplus", doc="log(1 + exp(beta * x)) / beta; x itself where beta * x > threshold",
                      attrs=SoftplusAttrs, rule=_softplus_rule,
                      lower=lambda ctx: lambda x: F.softplus(x, ctx.attrs.beta, ctx.attrs.threshold))


@defvjp(SOFTPLUS)
def _softplus_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    bx = g.multiply(op.inputs[0], op.attrs.beta)  # sigmoid(beta x); 1 where the forward returns x itself
    return (g.select(g.greater(bx, op.attrs.threshold), ct[0], g.multiply(ct[0], g.sigmoid(bx))),)


class ActivationBuilders(GraphCore):
    """Graph methods for activations (relu, gelu, silu, ...); all take real floating tensors."""

    def _activation(self, op: OpDef, x: Any, a: Any, name: str | None) -> Tensor:
        return self._apply(op, [self._as_tensor(x)], a, name)

    def relu(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``max(x, 0)``.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((3,))
        >>> g.run({x: [-1.0, 0.0, 2.0]}, [g.relu(x)])[0].tolist()
        [0.0, 0.0, 2.0]
        """
        return self._activation(RELU, x, None, name)

    def leaky_relu(self, x: Tensor, alpha: float = 0.01, *, name: str | None = None) -> Tensor:
        """``x`` where ``x >= 0``, else ``alpha * x``."""
        return self._activation(LEAKY_RELU, x, AlphaAttrs(_num(alpha)), name)

    def relu6(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``min(max(x, 0), 6)``."""
        return self._activation(RELU6, x, None, name)

    def elu(self, x: Tensor, alpha: float = 1.0, *, name: str | None = None) -> Tensor:
        """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``."""
        return self._activation(ELU, x, AlphaAttrs(_num(alpha)), name)

    def gelu(self, x: Tensor, approximate: GeluApproximation | bool = GeluApproximation.NONE, *,
             name: str | None = None) -> Tensor:
        """``x * Phi(x)`` with the exact normal CDF, or its tanh approximation when ``approximate`` is
        ``GeluApproximation.TANH`` (or ``True``).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,))
        >>> [round(v, 4) for v in g.run({x: [1.0, -1.0]}, [g.gelu(x)])[0].tolist()]
        [0.8413, -0.1587]
        """
        if isinstance(approximate, bool):
            approximate = GeluApproximation.TANH if approximate else GeluApproximation.NONE
        return self._activation(GELU, x, GeluAttrs(approximate), name)

    def silu(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``x * sigmoid(x)`` (also called swish)."""
        return self._activation(SILU, x, None, name)

    def sigmoid(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``1 / (1 + exp(-x))``."""
        return self._activation(SIGMOID, x, None, name)

    def hard_sigmoid(self, x: Tensor, alpha: float = 0.2, beta: float = 0.5, *, name: str | None = None) -> Tensor:
        """``max(0, min(1, alpha * x + beta))``, with MPSGraph's and ONNX's defaults ``alpha=0.2, beta=0.5``
        (PyTorch's ``hardsigmoid`` is ``alpha=1/6``).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((3,))
        >>> g.run({x: [-5.0, 0.0, 5.0]}, [g.hard_sigmoid(x)])[0].tolist()
        [0.0, 0.5, 1.0]
        """
        return self._activation(HARD_SIGMOID, x, HardSigmoidAttrs(_num(alpha), _num(beta)), name)

    def softplus(self, x: Tensor, beta: float = 1.0, threshold: float = 20.0, *, name: str | None = None) -> Tensor:
        """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold`` (as PyTorch)."""
        return self._activation(SOFTPLUS, x, SoftplusAttrs(_num(beta), _num(threshold)), name)

    def softsign(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``x / (1 + |x|)``."""
        return self._activation(SOFTSIGN, x, None, name)

    def mish(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``x * tanh(softplus(x))``."""
        return self._activation(MISH, x, None, name)


__all__ = [
    "ELU", "GELU", "HARD_SIGMOID", "LEAKY_RELU", "MISH", "RELU", "RELU6", "SIGMOID", "SILU", "SOFTPLUS", "SOFTSIGN",
    "ActivationBuilders", "AlphaAttrs", "GeluApproximation", "GeluAttrs", "HardSigmoidAttrs", "SoftplusAttrs",
]
