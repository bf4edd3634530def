"""Converters of the pointwise ATen ops: unary math, arithmetic, comparisons and logic, activations and their
gradients, casts and the creation ops (``full``, ``arange``, the ``*_like`` family).

PyTorch's dtype rules come from the traced types: operands are cast to the dtype PyTorch computes in (the node's
result dtype, or ``torch.result_type`` for comparisons) before the opgraph op, so opgraph's own promotion (which
treats 0-d tensors as ordinary tensors) never decides. Python scalars stay weak opgraph scalars. Where an opgraph op
differs from the ATen op in a corner case, the converter builds the ATen semantics from several ops (``sign`` of
NaN is 0, ``div(rounding_mode="floor")`` is ``c10::div_floor_floating``, ``pow(x, 0.5)`` is ``sqrt``, ...), and
where ATen computes float16/bfloat16 in float32 (a division by a scalar, the composites) so does the converter.
A dtype opgraph has no op for makes the converter raise ``Unsupported`` (the node falls back).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ....core.dtype import DType, bfloat16, bool_, float16, float32, float64, from_torch, int16, int32, int64
from ....ir.graph import Tensor
from ....ops.activation import GeluApproximation, GeluAttrs
from ....ops.vendor_gradients import GELU_GRADIENT
from ..registry import ConvertContext, Unsupported, converts

aten = torch.ops.aten
prims = torch.ops.prims

HALF = (float16, bfloat16)
_STRIDED = (None, torch.strided)
_SAME_FORMAT = (None, torch.preserve_format, torch.contiguous_format)


# ---- operands ----------------------------------------------------------------------------------------
def _number(value: Any, what: str = "scalar") -> bool | int | float:
    """A Python bool, int or float (symbolic and complex scalars are refused)."""
    if isinstance(value, (bool, int, float)):
        return value
    raise Unsupported(f"{what} {value!r} is not a Python bool, int or float")


def _as(ctx: ConvertContext, value: Any, dt: DType) -> Any:
    """``value`` as an operand computed in ``dt``: a tensor cast to it, a Python scalar checked (it stays weak)."""
    if isinstance(value, Tensor):
        return value if value.dtype is dt else ctx.g.cast(value, dt)
    v = _number(value)
    if isinstance(v, float) and not (dt.is_floating or dt.is_complex):
        raise Unsupported(f"the float scalar {v} in a {dt.name} op")
    if dt.is_integer and not isinstance(v, bool):
        info = torch.iinfo(dt.torch_dtype)
        if not info.min <= v <= info.max:
            raise Unsupported(f"the scalar {v} does not fit {dt.name}")
    if dt.is_bool and not isinstance(v, bool):
        raise Unsupported(f"the scalar {v} in a bool op")
    return v


def _tensor(ctx: ConvertContext, value: Any, dt: DType) -> Tensor:
    """``value`` as a tensor of ``dt`` (a Python scalar becomes a 0-d constant)."""
    v = _as(ctx, value, dt)
    # a torch tensor, not the Python float: g.constant(0.1, float64) would round 0.1 through float32
    return v if isinstance(v, Tensor) else ctx.g.constant(torch.scalar_tensor(v, dtype=dt.torch_dtype))


def _result_dtype(x: Any, y: Any) -> DType:
    """PyTorch's ``result_type`` of two operands (0-d tensors and Python scalars are weak there)."""

    def meta(v: Any) -> Any:
        if isinstance(v, Tensor):
            return torch.empty((1,) if v.rank else (), dtype=v.dtype.torch_dtype, device="meta")
        return _number(v)

    return from_torch(torch.result_type(meta(x), meta(y)))


def _out(ctx: ConvertContext) -> DType:
    return ctx.out_type.dtype


def _opmath(dt: DType) -> DType:
    """The dtype ATen computes a ``dt`` composite in (float32 for float16 and bfloat16)."""
    return float32 if dt in HALF else dt


def _floating(ctx: ConvertContext, what: str) -> DType:
    dt = _out(ctx)
    if not dt.is_floating:
        raise Unsupported(f"{what} with a {dt.name} result")
    return dt


# ---- unary math ----------------------------------------------------------------------------------------
_FLOAT_MATH = {
    aten.exp.default: "exp", aten.exp2.default: "exp2", aten.log.default: "log", aten.log2.default: "log2",
    aten.log10.default: "log10", aten.sqrt.default: "sqrt", aten.rsqrt.default: "rsqrt",
    aten.reciprocal.default: "reciprocal", aten.sin.default: "sin", aten.cos.default: "cos", aten.tan.default: "tan",
    aten.asin.default: "asin", aten.acos.default: "acos", aten.atan.default: "atan", aten.sinh.default: "sinh",
    aten.cosh.default: "cosh", aten.tanh.default: "tanh", aten.asinh.default: "asinh", aten.acosh.default: "acosh",
    aten.atanh.default: "atanh", aten.erf.default: "erf", aten.sigmoid.default: "sigmoid",
}
_ROUNDING = {aten.floor.default: "floor", aten.ceil.default: "ceil", aten.trunc.default: "truncate",
             aten.round.default: "rint"}  # ATen's round is half-to-even: opgraph's rint


def _float_math(method: str) -> Callable[..., Tensor]:
    def convert(ctx: ConvertContext, x: Tensor) -> Tensor:
        dt = _out(ctx)  # integer and bool inputs compute in the default float dtype, as ATen
        return getattr(ctx.g, method)(_as(ctx, x, dt))

    return convert


def _rounding(method: str) -> Callable[..., Tensor]:
    def convert(ctx: ConvertContext, x: Tensor) -> Tensor:
        if not x.dtype.is_floating:
            return x  # ATen rounds integers to themselves
        return getattr(ctx.g, method)(x)

    return convert


for _target, _method in _FLOAT_MATH.items():
    converts(_target)(_float_math(_method))
for _target, _method in _ROUNDING.items():
    converts(_target)(_rounding(_method))


@converts(aten.square.default)
def _square(ctx: ConvertContext, x: Tensor) -> Tensor:
    return ctx.g.square(_as(ctx, x, _out(ctx)))


@converts(aten.round.decimals)
def _round_decimals(ctx: ConvertContext, x: Tensor, *, decimals: int = 0) -> Tensor:
    if not x.dtype.is_floating:
        return x
    if decimals == 0:
        return ctx.g.rint(x)
    g, dt = ctx.g, _opmath(x.dtype)  # ATen: nearbyint(x * 10^d) / 10^d in opmath (x / 10^-d and back if d < 0)
    scale = float(10 ** abs(int(decimals)))
    y = _as(ctx, x, dt)
    r = g.divide(g.rint(g.multiply(y, scale)), scale) if decimals > 0 else g.multiply(g.rint(g.divide(y, scale)), scale)
    return _as(ctx, r, x.dtype)


@converts(aten.abs.default)
def _abs(ctx: ConvertContext, x: Tensor) -> Tensor:
    return ctx.g.abs(x)


@converts(aten.neg.default)
def _neg(ctx: ConvertContext, x: Tensor) -> Tensor:
    return ctx.g.negative(x)


@converts(aten.sign.default, aten.sgn.default)
def _sign(ctx: ConvertContext, x: Tensor) -> Tensor:
    g, dt = ctx.g, x.dtype
    if dt.is_bool:
        return x
    if dt.is_integer:
        return g.sign(x)
    if not dt.is_floating:
        raise Unsupported(f"sign of a {dt.name} tensor")
    # ATen's sign is (x > 0) - (x < 0): 0 for NaN (opgraph's sign keeps NaN) and +0 for -0
    return g.subtract(g.cast(g.greater(x, 0), dt), g.cast(g.less(x, 0), dt))


def _signbit(ctx: ConvertContext, x: Tensor) -> Tensor:
    g, dt = ctx.g, x.dtype
    if dt.is_bool:
        return g.fill_like(x, False, bool_)
    if dt.is_integer:
        return g.less(x, 0)
    bits = {float16: int16, bfloat16: int16, float32: int32, float64: int64}.get(dt)
    if bits is None:
        raise Unsupported(f"signbit of a {dt.name} tensor")
    return g.less(g.reinterpret_cast(x, bits), 0)  # the sign bit itself: set for -0.0 and negative NaNs


@converts(aten.signbit.default)
def _signbit_op(ctx: ConvertContext, x: Tensor) -> Tensor:
    return _signbit(ctx, x)


@converts(aten.isnan.default)
def _isnan(ctx: ConvertContext, x: Tensor) -> Tensor:
    return ctx.g.fill_like(x, False, bool_) if x.dtype.is_bool else ctx.g.isnan(x)


@converts(aten.isinf.default)
def _isinf(ctx: ConvertContext, x: Tensor) -> Tensor:
    return ctx.g.fill_like(x, False, bool_) if x.dtype.is_bool else ctx.g.isinf(x)


@converts(aten.isfinite.default)
def _isfinite(ctx: ConvertContext, x: Tensor) -> Tensor:
    return ctx.g.fill_like(x, True, bool_) if x.dtype.is_bool else ctx.g.isfinite(x)


@converts(aten.logical_not.default)
def _logical_not(ctx: ConvertContext, x: Tensor) -> Tensor:
    return ctx.g.logical_not(_as(ctx, x, bool_))


@converts(aten.bitwise_not.default)
def _bitwise_not(ctx: ConvertContext, x: Tensor) -> Tensor:
    return ctx.g.logical_not(x) if x.dtype.is_bool else ctx.g.bitwise_not(x)


@converts(aten.log1p.default)
def _log1p(ctx: ConvertContext, x: Tensor) -> Tensor:
    """log(1 + x) accurate near 0 (Goldberg): log(u) * x / (u - 1) with u = 1 + x, x itself where u == 1."""
    g, out = ctx.g, _floating(ctx, "log1p")
    a = _as(ctx, x, _opmath(out))
    u = g.add(a, 1.0)
    r = g.multiply(g.log(u), g.divide(a, g.subtract(u, 1.0)))
    r = g.select(g.equal(u, math.inf), u, r)  # log1p(inf) = inf (the ratio is inf / inf there)
    return _as(ctx, g.select(g.equal(u, 1.0), a, r), out)


@converts(aten.expm1.default)
def _expm1(ctx: ConvertContext, x: Tensor) -> Tensor:
    """exp(x) - 1 accurate near 0 (Kahan): (u - 1) * (x / log(u)) with u = exp(x), x itself where u == 1."""
    g, out = ctx.g, _floating(ctx, "expm1")
    a = _as(ctx, x, _opmath(out))
    u = g.exp(a)
    um1 = g.subtract(u, 1.0)
    r = g.multiply(um1, g.divide(a, g.log(u)))
    r = g.select(g.equal(u, math.inf), u, r)  # overflow and +inf: inf
    r = g.select(g.equal(um1, -1.0), um1, r)  # underflow and -inf: -1
    return _as(ctx, g.select(g.equal(u, 1.0), a, r), out)


# ---- binary arithmetic ------------------------------------------------------------------------------------
def _binary(method: str) -> Callable[..., Tensor]:
    """An op whose result dtype is the dtype it computes in (the node's traced dtype)."""

    def convert(ctx: ConvertContext, x: Any, y: Any) -> Tensor:
        dt = _out(ctx)
        return getattr(ctx.g, method)(_as(ctx, x, dt), _as(ctx, y, dt))

    return convert


_BINARY = {
    (aten.fmod.Tensor, aten.fmod.Scalar): "modulo",  # C fmod: the sign of x
    (aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor): "floor_modulo",  # Python %
    (aten.atan2.default,): "atan2",
    (aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.bitwise_and.Scalar_Tensor): "bitwise_and",
    (aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, aten.bitwise_or.Scalar_Tensor): "bitwise_or",
    (aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar, aten.bitwise_xor.Scalar_Tensor): "bitwise_xor",
    (aten.__lshift__.Tensor, aten.__lshift__.Scalar, aten.bitwise_left_shift.Tensor,
     aten.bitwise_left_shift.Tensor_Scalar, aten.bitwise_left_shift.Scalar_Tensor): "shift_left",
    (aten.__rshift__.Tensor, aten.__rshift__.Scalar, aten.bitwise_right_shift.Tensor,
     aten.bitwise_right_shift.Tensor_Scalar, aten.bitwise_right_shift.Scalar_Tensor): "shift_right",
}
for _targets, _method in _BINARY.items():
    converts(*_targets)(_binary(_method))


def _extremum(nan_method: str, bool_method: str) -> Callable[..., Tensor]:
    def convert(ctx: ConvertContext, x: Any, y: Any) -> Tensor:
        dt = _out(ctx)
        method = bool_method if dt.is_bool else nan_method
        return getattr(ctx.g, method)(_as(ctx, x, dt), _as(ctx, y, dt))

    return convert


# ATen's maximum/minimum propagate NaN (opgraph's *_with_nan_propagation); fmax/fmin ignore it (opgraph's maximum)
converts(aten.maximum.default)(_extremum("maximum_with_nan_propagation", "logical_or"))
converts(aten.minimum.default)(_extremum("minimum_with_nan_propagation", "logical_and"))
converts(aten.fmax.default)(_extremum("maximum", "logical_or"))
converts(aten.fmin.default)(_extremum("minimum", "logical_and"))


def _divide(ctx: ConvertContext, x: Any, y: Any, mode: str | None) -> Tensor:
    g, out = ctx.g, _out(ctx)
    if out.is_bool or (out.is_complex and mode is not None):
        raise Unsupported(f"division with rounding mode {mode} and a {out.name} result")
    if out.is_integer and mode is None:
        raise Unsupported("true division with an integer result")
    # ATen divides float16/bfloat16 by a scalar (or a 0-d tensor) in float32, with the scalar unrounded
    dt = float32 if out in HALF and not (isinstance(y, Tensor) and y.rank > 0) else out
    a, b = _as(ctx, x, dt), _as(ctx, y, dt)
    if mode is None or (mode == "trunc" and dt.is_integer):
        r = g.divide(a, b)
    elif mode == "trunc":
        if dt in HALF:  # ATen rounds the quotient to float16/bfloat16 before truncating (a fused kernel would not)
            r = g.truncate(g.cast(g.divide(g.cast(a, float32), g.cast(b, float32)), dt))
        else:
            r = g.truncate(g.divide(a, b))
    elif mode == "floor":
        r = _floor_divide_int(ctx, a, b) if dt.is_integer else _floor_divide_float(ctx, a, _tensor(ctx, b, dt))
    else:
        raise Unsupported(f"rounding mode {mode!r}")
    return _as(ctx, r, out)


def _floor_divide_int(ctx: ConvertContext, a: Any, b: Any) -> Tensor:
    g = ctx.g  # truncated quotient, one less where the remainder is nonzero and the signs differ
    q = g.divide(a, b)
    fix = g.logical_and(g.not_equal(g.modulo(a, b), 0), g.not_equal(g.less(a, 0), g.less(b, 0)))
    return g.select(fix, g.subtract(q, 1), q)


def _floor_divide_float(ctx: ConvertContext, a: Any, b: Tensor) -> Tensor:
    """c10::div_floor_floating: (a - fmod(a, b)) / b, moved down a step when the remainder's sign differs from
    b's, floored and rounded up past .5; a signed zero where that is 0, and the IEEE a / b for b == 0."""
    g = ctx.g
    q = g.divide(a, b)
    mod = g.modulo(a, b)
    div = g.divide(g.subtract(a, mod), b)
    fix = g.logical_and(g.not_equal(mod, 0), g.not_equal(g.less(b, 0), g.less(mod, 0)))
    div = g.select(fix, g.subtract(div, 1.0), div)
    fl = g.floor(div)
    fl = g.select(g.greater(g.subtract(div, fl), 0.5), g.add(fl, 1.0), fl)
    fl = g.select(g.equal(div, 0), g.multiply(q, 0.0), fl)  # copysign(0, a / b): a / b is finite there
    return g.select(g.equal(b, 0), q, fl)


@converts(aten.div.Tensor, aten.div.Scalar)
def _div(ctx: ConvertContext, x: Any, y: Any) -> Tensor:
    return _divide(ctx, x, y, None)


@converts(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(ctx: ConvertContext, x: Any, y: Any, *, rounding_mode: str | None = None) -> Tensor:
    return _divide(ctx, x, y, rounding_mode)


@converts(aten.floor_divide.default, aten.floor_divide.Scalar)
def _floor_divide(ctx: ConvertContext, x: Any, y: Any) -> Tensor:
    return _divide(ctx, x, y, "floor")


@converts(aten.pow.Tensor_Scalar)
def _pow_tensor_scalar(ctx: ConvertContext, x: Tensor, exponent: Any) -> Tensor:
    g, out = ctx.g, _out(ctx)
    e = _number(exponent, "exponent")
    a = _as(ctx, x, out)
    if e == 0:
        return g.fill_like(a, 1)  # ATen fills ones (also for NaN bases)
    if e == 1:
        return a
    # the specialisations of ATen's pow kernel (float16 goes through std::pow, as opgraph's power)
    if out in (float32, float64, bfloat16):
        if e == 0.5:
            return g.sqrt(a)
        if e == -0.5:
            return g.rsqrt(a)
        if e == -1:
            return g.reciprocal(a)
        if e == 2:
            return g.square(a)
        if e in (3, -2):  # ATen rounds x * x to the dtype first (an explicit cast, so fused kernels do too)
            sq = g.square(a) if out is not bfloat16 else g.cast(g.square(g.cast(a, float32)), out)
            return g.multiply(sq, a) if e == 3 else g.reciprocal(sq)
    return g.power(a, _as(ctx, e, out))


@converts(aten.pow.Tensor_Tensor)
def _pow_tensor_tensor(ctx: ConvertContext, x: Tensor, y: Tensor) -> Tensor:
    dt = _out(ctx)
    return ctx.g.power(_as(ctx, x, dt), _as(ctx, y, dt))


@converts(aten.pow.Scalar)
def _pow_scalar(ctx: ConvertContext, base: Any, y: Tensor) -> Tensor:
    dt = _out(ctx)
    b = _as(ctx, base, dt)
    if b == 1:
        return ctx.g.fill_like(_as(ctx, y, dt), 1)  # ATen: ones, also for NaN exponents
    return ctx.g.power(b, _as(ctx, y, dt))


@converts(aten.copysign.Tensor, aten.copysign.Scalar)
def _copysign(ctx: ConvertContext, x: Any, y: Any) -> Tensor:
    g, dt = ctx.g, _floating(ctx, "copysign")
    a = g.abs(_as(ctx, x, dt))
    if isinstance(y, Tensor):
        return g.select(_signbit(ctx, y), g.negative(a), a)
    return g.negative(a) if math.copysign(1.0, float(_number(y))) < 0 else a


@converts(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(ctx: ConvertContext, start: Tensor, end: Tensor, weight: Any) -> Tensor:
    """ATen: start + w (end - start) where |w| < 0.5, else end - (end - start)(1 - w); float16 in float32."""
    g, out = ctx.g, _floating(ctx, "lerp")
    dt = _opmath(out)
    s, e = _as(ctx, start, dt), _as(ctx, end, dt)
    w = _as(ctx, weight, dt)
    diff = g.subtract(e, s)

    def low() -> Tensor:
        return g.add(s, g.multiply(w, diff))

    def high() -> Tensor:
        return g.subtract(e, g.multiply(diff, g.subtract(1.0, w)))

    if isinstance(w, Tensor):
        return _as(ctx, g.select(g.less(g.abs(w), 0.5), low(), high()), out)
    return _as(ctx, low() if abs(w) < 0.5 else high(), out)


# ---- comparisons, logic, select, clamp ------------------------------------------------------------------------
def _compare(method: str) -> Callable[..., Tensor]:
    def convert(ctx: ConvertContext, x: Any, y: Any) -> Tensor:
        dt = _result_dtype(x, y)  # compared in PyTorch's common dtype
        return getattr(ctx.g, method)(_as(ctx, x, dt), _as(ctx, y, dt))

    return convert


for _name, _method in (("eq", "equal"), ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"),
                       ("gt", "greater"), ("ge", "greater_equal")):
    _packet = getattr(aten, _name)
    converts(_packet.Tensor, _packet.Scalar)(_compare(_method))


def _logical(method: str) -> Callable[..., Tensor]:
    def convert(ctx: ConvertContext, x: Tensor, y: Tensor) -> Tensor:
        return getattr(ctx.g, method)(_as(ctx, x, bool_), _as(ctx, y, bool_))

    return convert


converts(aten.logical_and.default)(_logical("logical_and"))
converts(aten.logical_or.default)(_logical("logical_or"))
converts(aten.logical_xor.default)(_logical("logical_xor"))


@converts(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(ctx: ConvertContext, condition: Tensor, x: Any, y: Any) -> Tensor:
    dt = _out(ctx)
    a = _as(ctx, x, dt)
    if not isinstance(a, Tensor) and not isinstance(y, Tensor):
        a = _tensor(ctx, a, dt)
    return ctx.g.select(_as(ctx, condition, bool_), a, _as(ctx, y, dt))


def _clamp_to(ctx: ConvertContext, x: Any, low: Any, high: Any) -> Tensor:
    g, dt = ctx.g, _out(ctx)
    if dt.is_bool or dt.is_complex:
        raise Unsupported(f"clamp of a {dt.name} tensor")
    a = _as(ctx, x, dt)
    if low is None and high is None:
        raise Unsupported("clamp without bounds")
    # NaN in x or in a bound propagates (ATen), also with one bound
    if high is None:
        return g.maximum_with_nan_propagation(a, _as(ctx, low, dt))
    if low is None:
        return g.minimum_with_nan_propagation(a, _as(ctx, high, dt))
    return g.clamp(a, _as(ctx, low, dt), _as(ctx, high, dt))


@converts(aten.clamp.default, aten.clamp.Tensor)
def _clamp(ctx: ConvertContext, x: Tensor, min: Any = None, max: Any = None) -> Tensor:
    return _clamp_to(ctx, x, min, max)


@converts(aten.clamp_min.default, aten.clamp_min.Tensor)
def _clamp_min(ctx: ConvertContext, x: Tensor, min: Any) -> Tensor:
    return _clamp_to(ctx, x, min, None)


@converts(aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp_max(ctx: ConvertContext, x: Tensor, max: Any) -> Tensor:
    return _clamp_to(ctx, x, None, max)


@converts(aten.hardtanh.default)
def _hardtanh(ctx: ConvertContext, x: Tensor, min_val: Any = -1.0, max_val: Any = 1.0) -> Tensor:
    return _clamp_to(ctx, x, min_val, max_val)


# ---- activations ----------------------------------------------------------------------------------------------
def _approximation(approximate: str) -> GeluApproximation:
    if approximate not in ("none", "tanh"):
        raise Unsupported(f"gelu approximate={approximate!r}")
    return GeluApproximation.TANH if approximate == "tanh" else GeluApproximation.NONE


@converts(aten.gelu.default)
def _gelu(ctx: ConvertContext, x: Tensor, *, approximate: str = "none") -> Tensor:
    return ctx.g.gelu(x, _approximation(approximate))


@converts(aten.silu.default)
def _silu(ctx: ConvertContext, x: Tensor) -> Tensor:
    return ctx.g.silu(x)


@converts(aten.mish.default)
def _mish(ctx: ConvertContext, x: Tensor) -> Tensor:
    return ctx.g.mish(x)


@converts(aten.softplus.default)
def _softplus(ctx: ConvertContext, x: Tensor, beta: Any = 1.0, threshold: Any = 20.0) -> Tensor:
    return ctx.g.softplus(x, _number(beta), _number(threshold))


@converts(aten.leaky_relu.default)
def _leaky_relu(ctx: ConvertContext, x: Tensor, negative_slope: Any = 0.01) -> Tensor:
    return ctx.g.leaky_relu(x, _number(negative_slope))


@converts(aten.elu.default)
def _elu(ctx: ConvertContext, x: Tensor, alpha: Any = 1.0, scale: Any = 1.0, input_scale: Any = 1.0) -> Tensor:
    """ATen: x * scale where x > 0, else expm1(x * input_scale) * (alpha * scale) (selu and celu come here)."""
    g = ctx.g
    alpha, scale, input_scale = (float(_number(v)) for v in (alpha, scale, input_scale))
    if scale == 1.0 and input_scale == 1.0:
        return g.elu(x, alpha)
    negative = g.elu(x if input_scale == 1.0 else g.multiply(x, input_scale), alpha * scale)
    return g.select(g.greater(x, 0), g.multiply(x, scale), negative)


@converts(aten.threshold.default)
def _threshold(ctx: ConvertContext, x: Tensor, threshold: Any, value: Any) -> Tensor:
    dt = _out(ctx)
    return ctx.g.select(ctx.g.less_equal(x, _as(ctx, threshold, dt)), _tensor(ctx, value, dt), x)


def _hard_sigmoid_of(ctx: ConvertContext, a: Tensor) -> Tensor:
    g = ctx.g  # ATen: min(max(x + 3, 0), 6) / 6
    return g.divide(g.clamp(g.add(a, 3.0), 0.0, 6.0), 6.0)


@converts(aten.hardsigmoid.default)
def _hardsigmoid(ctx: ConvertContext, x: Tensor) -> Tensor:
    out = _floating(ctx, "hardsigmoid")
    return _as(ctx, _hard_sigmoid_of(ctx, _as(ctx, x, _opmath(out))), out)


@converts(aten.hardswish.default)
def _hardswish(ctx: ConvertContext, x: Tensor) -> Tensor:
    g, out = ctx.g, _floating(ctx, "hardswish")
    a = _as(ctx, x, _opmath(out))  # ATen: x * min(max(x + 3, 0), 6) / 6
    r = g.divide(g.multiply(a, g.clamp(g.add(a, 3.0), 0.0, 6.0)), 6.0)
    return _as(ctx, r, out)


# ---- gradients of activations (graphs without core-ATen decompositions have them) --------------------------
@converts(aten.threshold_backward.default)
def _threshold_backward(ctx: ConvertContext, grad: Tensor, x: Tensor, threshold: Any) -> Tensor:
    g = ctx.g  # 0 where x <= threshold (NaN x passes the gradient)
    return g.select(g.less_equal(x, _as(ctx, threshold, x.dtype)), g.zeros_like(grad), grad)


@converts(aten.sigmoid_backward.default)
def _sigmoid_backward(ctx: ConvertContext, grad: Tensor, y: Tensor) -> Tensor:
    g, out = ctx.g, _floating(ctx, "sigmoid_backward")
    dt = _opmath(out)
    gr, s = _as(ctx, grad, dt), _as(ctx, y, dt)  # grad * (1 - y) * y
    return _as(ctx, g.multiply(g.multiply(gr, g.subtract(1.0, s)), s), out)


@converts(aten.tanh_backward.default)
def _tanh_backward(ctx: ConvertContext, grad: Tensor, y: Tensor) -> Tensor:
    g, out = ctx.g, _floating(ctx, "tanh_backward")
    dt = _opmath(out)
    gr, t = _as(ctx, grad, dt), _as(ctx, y, dt)  # grad * (1 - y * y)
    return _as(ctx, g.multiply(gr, g.subtract(1.0, g.multiply(t, t))), out)


@converts(aten.silu_backward.default)
def _silu_backward(ctx: ConvertContext, grad: Tensor, x: Tensor) -> Tensor:
    g, out = ctx.g, _floating(ctx, "silu_backward")
    dt = _opmath(out)
    gr, a = _as(ctx, grad, dt), _as(ctx, x, dt)  # grad * s * (1 + x (1 - s)), s = sigmoid(x)
    s = g.sigmoid(a)
    r = g.multiply(g.multiply(gr, s), g.add(g.multiply(a, g.subtract(1.0, s)), 1.0))
    return _as(ctx, r, out)


@converts(aten.gelu_backward.default)
def _gelu_backward(ctx: ConvertContext, grad: Tensor, x: Tensor, *, approximate: str = "none") -> Tensor:
    g, out = ctx.g, _floating(ctx, "gelu_backward")
    if ctx.vendor_ops and grad.type == x.type and x.dtype is out:  # PyTorch's one call
        return g._apply(GELU_GRADIENT, [grad, x], GeluAttrs(_approximation(approximate)))
    dt = _opmath(out)
    gr, a = _as(ctx, grad, dt), _as(ctx, x, dt)
    if _approximation(approximate) is GeluApproximation.TANH:
        beta, kappa = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5, 0.044715
        x2 = g.multiply(a, a)
        t = g.tanh(g.multiply(g.add(a, g.multiply(g.multiply(x2, a), kappa)), beta))
        left_derivative = g.multiply(g.add(t, 1.0), 0.5)
        right_derivative = g.multiply(g.multiply(g.multiply(a, 0.5), g.subtract(1.0, g.multiply(t, t))),
                                      g.multiply(g.add(g.multiply(x2, 3.0 * kappa), 1.0), beta))
        d = g.add(left_derivative, right_derivative)
    else:  # cdf + x pdf
        cdf = g.multiply(g.add(g.erf(g.multiply(a, math.sqrt(0.5))), 1.0), 0.5)
        pdf = g.multiply(g.exp(g.multiply(g.multiply(a, a), -0.5)), (2.0 / math.sqrt(math.pi)) * math.sqrt(0.5) * 0.5)
        d = g.add(cdf, g.multiply(a, pdf))
    return _as(ctx, g.multiply(gr, d), out)


# ---- casts ---------------------------------------------------------------------------------------------------
@converts(aten._to_copy.default)
def _to_copy(ctx: ConvertContext, x: Tensor, *, dtype: Any = None, layout: Any = None, device: Any = None,
             pin_memory: Any = None, non_blocking: bool = False, memory_format: Any = None) -> Tensor:
    # ``device`` is not checked: an executable runs on one device, and a converter cannot see the source's
    # device (backward graphs pass the device of every cast); a real move would fail as a fallback too
    if layout not in _STRIDED:
        raise Unsupported(f"a copy to layout {layout}")
    if pin_memory:
        raise Unsupported("a copy to pinned memory")
    if memory_format not in _SAME_FORMAT:
        raise Unsupported(f"a copy to {memory_format}")
    return _as(ctx, x, _out(ctx))


@converts(prims.convert_element_type.default)
def _convert_element_type(ctx: ConvertContext, x: Tensor, dtype: Any) -> Tensor:
    return _as(ctx, x, _out(ctx))


# ---- creation ------------------------------------------------------------------------------------------------
def _value(value: Any, dt: DType) -> torch.Tensor:
    """A fill value converted to ``dt`` as PyTorch converts it (a 0-d tensor)."""
    return torch.scalar_tensor(_number(value, "fill value"), dtype=dt.torch_dtype)


def _static(size: Sequence[Any]) -> list[int]:
    if any(not isinstance(d, int) for d in size):
        raise Unsupported("symbolic sizes")
    return [int(d) for d in size]


def _check_factory(layout: Any = None, pin_memory: Any = None, **ignored: Any) -> None:
    """Creation-op keywords: the device is the graph's and the memory format does not change values."""
    if layout not in _STRIDED:
        raise Unsupported(f"layout {layout}")
    if pin_memory:
        raise Unsupported("pinned memory")


def _filled(ctx: ConvertContext, size: Sequence[Any], value: Any) -> Tensor:
    dt = _out(ctx)
    shape = _static(size)
    c = ctx.g.constant(_value(value, dt))
    return ctx.g.broadcast_to(c, shape) if shape else c


@converts(aten.scalar_tensor.default)
def _scalar_tensor(ctx: ConvertContext, value: Any, **kwargs: Any) -> Tensor:
    _check_factory(**kwargs)
    return ctx.g.constant(_value(value, _out(ctx)))


@converts(aten.full.default)
def _full(ctx: ConvertContext, size: Sequence[Any], fill_value: Any, **kwargs: Any) -> Tensor:
    _check_factory(**kwargs)
    return _filled(ctx, size, fill_value)


@converts(aten.empty.memory_format)
def _empty(ctx: ConvertContext, size: Sequence[Any], **kwargs: Any) -> Tensor:
    _check_factory(**kwargs)
    return _filled(ctx, size, 0)  # the values are unspecified: zeros


@converts(aten.empty_permuted.default, aten.empty_strided.default)
def _empty_permuted(ctx: ConvertContext, size: Sequence[Any], layout_or_stride: Any, **kwargs: Any) -> Tensor:
    _check_factory(**kwargs)
    return _filled(ctx, size, 0)


def _fill_like(ctx: ConvertContext, x: Tensor, value: Any, kwargs: dict[str, Any]) -> Tensor:
    _check_factory(**kwargs)
    dt = _out(ctx)
    return ctx.g.fill_like(x, _value(value, dt).item(), dt)


@converts(aten.full_like.default)
def _full_like(ctx: ConvertContext, x: Tensor, fill_value: Any, **kwargs: Any) -> Tensor:
    return _fill_like(ctx, x, fill_value, kwargs)


@converts(aten.zeros_like.default, aten.empty_like.default)
def _zeros_like(ctx: ConvertContext, x: Tensor, **kwargs: Any) -> Tensor:
    return _fill_like(ctx, x, 0, kwargs)


@converts(aten.ones_like.default)
def _ones_like(ctx: ConvertContext, x: Tensor, **kwargs: Any) -> Tensor:
    return _fill_like(ctx, x, 1, kwargs)


@converts(aten.fill.Scalar)
def _fill_scalar(ctx: ConvertContext, x: Tensor, value: Any) -> Tensor:
    return ctx.g.fill_like(x, _value(value, x.dtype).item(), x.dtype)


@converts(aten.fill.Tensor)
def _fill_tensor(ctx: ConvertContext, x: Tensor, value: Tensor) -> Tensor:
    return ctx.g.broadcast_like(_as(ctx, value, x.dtype), x)


def _arange(ctx: ConvertContext, start: Any, step: Any, kwargs: dict[str, Any]) -> Tensor:
    """start + i * step, computed as ATen on the CPU does: in int64 for integer results, float64 for floats."""
    _check_factory(**kwargs)
    g, out = ctx.g, ctx.out_type
    (n,) = out.shape
    if n is None:
        raise Unsupported("a symbolic length")
    start, step = _number(start, "start"), _number(step, "step")
    dt = out.dtype
    if dt.is_integer:
        if isinstance(start, float) or isinstance(step, float):
            raise Unsupported("an integer arange with float bounds")
        r = g.add(g.multiply(g.coordinate_along_axis(0, (n,), int64), _as(ctx, step, int64)), _as(ctx, start, int64))
    elif dt.is_floating:
        r = g.add(g.multiply(g.coordinate_along_axis(0, (n,), float64), float(step)), float(start))
    else:
        raise Unsupported(f"arange of {dt.name}")
    return _as(ctx, r, dt)


@converts(aten.arange.default)
def _arange_end(ctx: ConvertContext, end: Any, **kwargs: Any) -> Tensor:
    return _arange(ctx, 0, 1, kwargs)


@converts(aten.arange.start)
def _arange_start(ctx: ConvertContext, start: Any, end: Any, **kwargs: Any) -> Tensor:
    return _arange(ctx, start, 1, kwargs)


@converts(aten.arange.start_step)
def _arange_start_step(ctx: ConvertContext, start: Any, end: Any, step: Any = 1, **kwargs: Any) -> Tensor:
    return _arange(ctx, start, step, kwargs)
