"""Elementwise ops with one input: math functions, rounding, predicates, bit ops.

Float math (``exp``, ``sin``, ``erf`` ...) accepts floating dtypes only and raises ``DTypeError`` on
integers instead of casting them silently; cast first (``g.cast(x, og.float32)``) when that is meant.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..core.dtype import FLOAT_DTYPES, INT_DTYPES, DType, bool_, float32, float64
from ..core.errors import GraphError
from ..core.types import TensorType
from ..ir.graph import GraphCore, Tensor
from ._rules import expect_arity, expect_dtype
from .registry import FusionKind, LowerContext, OpDef, defvjp, direct

REAL = INT_DTYPES + FLOAT_DTYPES  # numeric without complex
# gradient rules return ct * f'(x) built from graph ops that have rules themselves (so second order works)
Grads = tuple[Tensor | None, ...]


def unary_rule(*, result: DType | None = None, floating: bool = False, integer: bool = False,
               boolean: bool = False, numeric: bool = False,
               allowed: Sequence[DType] | None = None) -> Callable[[Any, tuple[TensorType, ...]], TensorType]:
    """One input in the named categories (or ``allowed``); ``result`` fixes the output dtype."""

    def rule(a: Any, ins: tuple[TensorType, ...]) -> TensorType:
        expect_arity(ins, 1)
        expect_dtype(ins[0], allowed, floating=floating, integer=integer, boolean=boolean, numeric=numeric)
        return TensorType(ins[0].shape, result or ins[0].dtype)

    return rule


def unary(name: str, fn: Callable[..., Any] | None = None, doc: str = "", *,
          lower: Callable[[LowerContext], Callable[..., Any]] | None = None, **kinds: Any) -> OpDef:
    """An attribute-free elementwise op; integer- and bool-valued ops are not differentiable."""
    differentiable = kinds.get("result") is None and not kinds.get("integer") and not kinds.get("boolean")
    return OpDef(name, infer=unary_rule(**kinds), lower=lower if fn is None else direct(fn),
                 fusion=FusionKind.ELEMENTWISE, doc=doc, differentiable=differentiable)


FLOAT: dict[str, Any] = dict(floating=True)  # real and complex floating types
REAL_FLOAT: dict[str, Any] = dict(allowed=FLOAT_DTYPES)  # functions torch (and MPSGraph) define on real numbers only


# ---- arithmetic ------------------------------------------------------------------------------
def _abs_rule(a: None, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    expect_dtype(ins[0], numeric=True)
    d = ins[0].dtype
    if d.is_complex:  # |z| is real
        d = float64 if d.bits == 128 else float32
    return TensorType(ins[0].shape, d)


def _sign(x: torch.Tensor) -> torch.Tensor:
    s = torch.sign(x)
    return torch.where(torch.isnan(x), x, s) if x.is_floating_point() else s  # NaN stays NaN, as NumPy


ABS = OpDef("abs", infer=_abs_rule, lower=direct(torch.abs), fusion=FusionKind.ELEMENTWISE,
            doc="|x| (real result for complex input)")
NEGATIVE = unary("negative", torch.neg, "-x", numeric=True)
SIGN = unary("sign", _sign, "-1, 0 or 1 by the sign of x (NaN for NaN)", allowed=REAL)
SQUARE = unary("square", torch.square, "x * x", numeric=True)
RECIPROCAL = unary("reciprocal", torch.reciprocal, "1 / x", **FLOAT)


@defvjp(ABS)
def _abs_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x = op.inputs[0]
    if x.dtype.is_complex:
        raise GraphError("gradients: abs of a complex tensor has no gradient rule yet")
    return (g.multiply(ct[0], g.sign(x)),)  # the subgradient 0 at x == 0


@defvjp(NEGATIVE)
def _negative_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.negative(ct[0]),)


@defvjp(SIGN)
def _sign_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (None,)  # piecewise constant: zero gradient


@defvjp(SQUARE)
def _square_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.multiply(ct[0], g.multiply(op.inputs[0], 2.0)),)


@defvjp(RECIPROCAL)
def _reciprocal_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.negative(g.multiply(ct[0], g.square(op.outputs[0]))),)


# ---- exponentials, logarithms, powers ------------------------------------------------------
EXP = unary("exp", torch.exp, "e ** x", **FLOAT)
EXP2 = unary("exp2", torch.exp2, "2 ** x", **FLOAT)
LOG = unary("log", torch.log, "natural logarithm", **FLOAT)
LOG2 = unary("log2", torch.log2, "base-2 logarithm", **FLOAT)
LOG10 = unary("log10", torch.log10, "base-10 logarithm", **FLOAT)
SQRT = unary("sqrt", torch.sqrt, "square root", **FLOAT)
RSQRT = unary("rsqrt", torch.rsqrt, "1 / sqrt(x)", **FLOAT)


@defvjp(EXP)
def _exp_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.multiply(ct[0], op.outputs[0]),)


@defvjp(EXP2)
def _exp2_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.multiply(ct[0], g.multiply(op.outputs[0], math.log(2.0))),)


@defvjp(LOG)
def _log_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.divide(ct[0], op.inputs[0]),)


@defvjp(LOG2)
def _log2_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.divide(ct[0], g.multiply(op.inputs[0], math.log(2.0))),)


@defvjp(LOG10)
def _log10_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.divide(ct[0], g.multiply(op.inputs[0], math.log(10.0))),)


@defvjp(SQRT)
def _sqrt_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.divide(ct[0], g.multiply(op.outputs[0], 2.0)),)


@defvjp(RSQRT)
def _rsqrt_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    r = op.outputs[0]  # d/dx x^(-1/2) = -r^3 / 2
    return (g.multiply(ct[0], g.multiply(g.multiply(g.square(r), r), -0.5)),)

# ---- trigonometric and hyperbolic ----------------------------------------------------------
SIN = unary("sin", torch.sin, "sine", **FLOAT)
COS = unary("cos", torch.cos, "cosine", **FLOAT)
TAN = unary("tan", torch.tan, "tangent", **FLOAT)
ASIN = unary("asin", torch.asin, "arcsine", **FLOAT)
ACOS = unary("acos", torch.acos, "arccosine", **FLOAT)
ATAN = unary("atan", torch.atan, "arctangent", **FLOAT)
SINH = unary("sinh", torch.sinh, "hyperbolic sine", **FLOAT)
COSH = unary("cosh", torch.cosh, "hyperbolic cosine", **FLOAT)
TANH = unary("tanh", torch.tanh, "hyperbolic tangent", **FLOAT)
ASINH = unary("asinh", torch.asinh, "inverse hyperbolic sine", **FLOAT)
ACOSH = unary("acosh", torch.acosh, "inverse hyperbolic cosine", **FLOAT)
ATANH = unary("atanh", torch.atanh, "inverse hyperbolic tangent", **FLOAT)
ERF = unary("erf", torch.erf, "Gauss error function", **REAL_FLOAT)


def _one_minus_square(g: Any, x: Tensor) -> Tensor:
    return g.subtract(1.0, g.square(x))


@defvjp(SIN)
def _sin_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.multiply(ct[0], g.cos(op.inputs[0])),)


@defvjp(COS)
def _cos_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.negative(g.multiply(ct[0], g.sin(op.inputs[0]))),)


@defvjp(TAN)
def _tan_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.multiply(ct[0], g.add(g.square(op.outputs[0]), 1.0)),)


@defvjp(ASIN)
def _asin_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.multiply(ct[0], g.rsqrt(_one_minus_square(g, op.inputs[0]))),)


@defvjp(ACOS)
def _acos_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.negative(g.multiply(ct[0], g.rsqrt(_one_minus_square(g, op.inputs[0])))),)


@defvjp(ATAN)
def _atan_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.divide(ct[0], g.add(g.square(op.inputs[0]), 1.0)),)


@defvjp(SINH)
def _sinh_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.multiply(ct[0], g.cosh(op.inputs[0])),)


@defvjp(COSH)
def _cosh_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.multiply(ct[0], g.sinh(op.inputs[0])),)


@defvjp(TANH)
def _tanh_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.multiply(ct[0], _one_minus_square(g, op.outputs[0])),)


@defvjp(ASINH)
def _asinh_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.multiply(ct[0], g.rsqrt(g.add(g.square(op.inputs[0]), 1.0))),)


@defvjp(ACOSH)
def _acosh_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x = op.inputs[0]  # 1 / (sqrt(x - 1) sqrt(x + 1)): also the principal branch for complex x
    return (g.multiply(ct[0], g.multiply(g.rsqrt(g.subtract(x, 1.0)), g.rsqrt(g.add(x, 1.0)))),)


@defvjp(ATANH)
def _atanh_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (g.divide(ct[0], _one_minus_square(g, op.inputs[0])),)


@defvjp(ERF)
def _erf_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x = op.inputs[0]
    return (g.multiply(ct[0], g.multiply(g.exp(g.negative(g.square(x))), 2.0 / math.sqrt(math.pi))),)


# ---- rounding --------------------------------------------------------------------------------
def _round_half_away(x: torch.Tensor) -> torch.Tensor:
    t = torch.trunc(x)  # x - trunc(x) is exact, so ties are detected exactly
    return torch.where(torch.abs(x - t) >= 0.5, t + torch.sign(x), t)


FLOOR = unary("floor", torch.floor, "round toward -inf", **REAL_FLOAT)
CEIL = unary("ceil", torch.ceil, "round toward +inf", **REAL_FLOAT)
ROUND = unary("round", _round_half_away, "round to nearest, ties away from zero (MPSGraph round)", **REAL_FLOAT)
RINT = unary("rint", torch.round, "round to nearest, ties to even", **REAL_FLOAT)
TRUNCATE = unary("truncate", torch.trunc, "round toward zero", **REAL_FLOAT)


@defvjp(FLOOR, CEIL, ROUND, RINT, TRUNCATE)
def _rounding_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    return (None,)  # piecewise constant: zero gradient (undefined at the jumps)

# ---- predicates --------------------------------------------------------------------------------
ISNAN = unary("isnan", torch.isnan, "x is NaN", result=bool_, numeric=True)
ISINF = unary("isinf", torch.isinf, "x is +inf or -inf", result=bool_, numeric=True)
ISFINITE = unary("isfinite", torch.isfinite, "x is neither inf nor NaN", result=bool_, numeric=True)
LOGICAL_NOT = unary("logical_not", torch.logical_not, "not x (bool)", boolean=True)


# ---- bits --------------------------------------------------------------------------------------
def _popcount_lower(ctx: LowerContext) -> Callable[..., Any]:
    dt = ctx.in_types[0].dtype
    bits, target = dt.bits, dt.torch_dtype
    m1, m2, m4 = 0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F
    low_bits = (1 << bits) - 1

    def popcount(x: torch.Tensor) -> torch.Tensor:
        # SWAR count in int64; masking first drops sign extension, and every mask keeps bit 63 clear so
        # arithmetic shifts of negative int64 words never leak set bits into the counts
        v = x.to(torch.int64)
        if bits < 64:
            v = v & low_bits
        v = v - ((v >> 1) & m1)
        v = (v & m2) + ((v >> 2) & m2)
        v = (v + (v >> 4)) & m4
        v = ((v * 0x0101010101010101) >> 56) & 0xFF  # sum of the bytes, wrapping multiply is fine
        return v.to(target)

    return popcount


BITWISE_NOT = unary("bitwise_not", torch.bitwise_not, "~x (integers)", integer=True)
POPCOUNT = unary("popcount", lower=_popcount_lower, doc="number of set bits of each element (integers)",
                 integer=True)


class UnaryBuilders(GraphCore):
    """Graph methods for elementwise ops with one input."""

    def _unary(self, op: OpDef, x: Any, name: str | None) -> Tensor:
        return self._apply(op, [self._as_tensor(x)], None, name)

    # arithmetic
    def abs(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``|x|``; complex input gives the real modulus."""
        return self._unary(ABS, x, name)

    def negative(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``-x``."""
        return self._unary(NEGATIVE, x, name)

    def sign(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """-1, 0 or 1 by the sign of ``x``; NaN stays NaN (real dtypes)."""
        return self._unary(SIGN, x, name)

    def square(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``x * x``."""
        return self._unary(SQUARE, x, name)

    def reciprocal(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``1 / x`` (floating dtypes)."""
        return self._unary(RECIPROCAL, x, name)

    # exponentials and logarithms
    def exp(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``e ** x`` (floating dtypes)."""
        return self._unary(EXP, x, name)

    def exp2(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``2 ** x`` (floating dtypes)."""
        return self._unary(EXP2, x, name)

    def log(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Natural logarithm (floating dtypes)."""
        return self._unary(LOG, x, name)

    def log2(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Base-2 logarithm (floating dtypes)."""
        return self._unary(LOG2, x, name)

    def log10(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Base-10 logarithm (floating dtypes)."""
        return self._unary(LOG10, x, name)

    def sqrt(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Square root (floating dtypes).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,))
        >>> g.run({x: [4.0, 9.0]}, [g.sqrt(x)])[0].tolist()
        [2.0, 3.0]
        """
        return self._unary(SQRT, x, name)

    def rsqrt(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``1 / sqrt(x)`` (floating dtypes)."""
        return self._unary(RSQRT, x, name)

    # trigonometric and hyperbolic
    def sin(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Sine (floating dtypes)."""
        return self._unary(SIN, x, name)

    def cos(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Cosine (floating dtypes)."""
        return self._unary(COS, x, name)

    def tan(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Tangent (floating dtypes)."""
        return self._unary(TAN, x, name)

    def asin(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Arcsine (floating dtypes; NaN outside [-1, 1])."""
        return self._unary(ASIN, x, name)

    def acos(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Arccosine (floating dtypes; NaN outside [-1, 1])."""
        return self._unary(ACOS, x, name)

    def atan(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Arctangent (floating dtypes)."""
        return self._unary(ATAN, x, name)

    def sinh(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Hyperbolic sine (floating dtypes)."""
        return self._unary(SINH, x, name)

    def cosh(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Hyperbolic cosine (floating dtypes)."""
        return self._unary(COSH, x, name)

    def tanh(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Hyperbolic tangent (floating dtypes)."""
        return self._unary(TANH, x, name)

    def asinh(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Inverse hyperbolic sine (floating dtypes)."""
        return self._unary(ASINH, x, name)

    def acosh(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Inverse hyperbolic cosine (floating dtypes; NaN below 1)."""
        return self._unary(ACOSH, x, name)

    def atanh(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Inverse hyperbolic tangent (floating dtypes; NaN outside [-1, 1])."""
        return self._unary(ATANH, x, name)

    def erf(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Gauss error function (real floating dtypes)."""
        return self._unary(ERF, x, name)

    # rounding
    def floor(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Round toward -inf (real floating dtypes)."""
        return self._unary(FLOOR, x, name)

    def ceil(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Round toward +inf (real floating dtypes)."""
        return self._unary(CEIL, x, name)

    def round(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Round to nearest with ties away from zero, as MPSGraph's ``round`` (``rint`` rounds ties to even).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((4,))
        >>> g.run({x: [0.5, 1.5, 2.5, -2.5]}, [g.round(x), g.rint(x)])[0].tolist()
        [1.0, 2.0, 3.0, -3.0]
        """
        return self._unary(ROUND, x, name)

    def rint(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Round to nearest with ties to even (real floating dtypes)."""
        return self._unary(RINT, x, name)

    def truncate(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Round toward zero (real floating dtypes)."""
        return self._unary(TRUNCATE, x, name)

    # predicates and bits
    def isnan(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``x`` is NaN (bool result)."""
        return self._unary(ISNAN, x, name)

    def isinf(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``x`` is +inf or -inf (bool result)."""
        return self._unary(ISINF, x, name)

    def isfinite(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``x`` is neither inf nor NaN (bool result)."""
        return self._unary(ISFINITE, x, name)

    def logical_not(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``not x`` for bool tensors (``~x`` on a bool Tensor)."""
        return self._unary(LOGICAL_NOT, x, name)

    def bitwise_not(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``~x`` for integer tensors."""
        return self._unary(BITWISE_NOT, x, name)

    def popcount(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Number of set bits of each element, in ``x``'s integer dtype (two's complement for negatives).

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((3,), og.int8)
        >>> g.run({x: torch.tensor([7, -1, 0], dtype=torch.int8)}, [g.popcount(x)])[0].tolist()
        [3, 8, 0]
        """
        return self._unary(POPCOUNT, x, name)


__all__ = [
    "ABS", "ACOS", "ACOSH", "ASIN", "ASINH", "ATAN", "ATANH", "BITWISE_NOT", "CEIL", "COS", "COSH", "ERF", "EXP",
    "EXP2", "FLOOR", "ISFINITE", "ISINF", "ISNAN", "LOG", "LOG2", "LOG10", "LOGICAL_NOT", "NEGATIVE", "POPCOUNT",
    "RECIPROCAL", "REAL", "RINT", "ROUND", "RSQRT", "SIGN", "SIN", "SINH", "SQRT", "SQUARE", "TAN", "TANH",
    "TRUNCATE", "UnaryBuilders", "unary", "unary_rule",
]
