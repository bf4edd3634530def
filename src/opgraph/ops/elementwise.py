"""Elementwise ops with two or three inputs (arithmetic, comparison, logic, bitwise), cast and select.

Binary builders broadcast and promote: Python scalars are weak (they take the tensor's dtype), and
two tensors of different dtypes are cast to ``promote_types`` of both before the op, so each op
itself sees one dtype (this also keeps PyTorch's 0-d tensor promotion out of the picture).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..core.dtype import (
    FLOAT_DTYPES,
    DType,
    as_dtype,
    bool_,
    promote_types,
    promote_with_scalar,
    weak_scalar_dtype,
)
from ..core.errors import DTypeError, ShapeError
from ..core.types import TensorType
from ..ir.graph import GraphCore, Tensor, is_python_scalar
from ._rules import broadcast_types, expect_arity, expect_dtype, same_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp, direct
from .unary import REAL

ELEMENTWISE = FusionKind.ELEMENTWISE
Rule = Callable[[Any, tuple[TensorType, ...]], TensorType]


# ---- rule factories --------------------------------------------------------------------------
def binary_rule(*, result: DType | None = None, floating: bool = False, integer: bool = False,
                boolean: bool = False, numeric: bool = False, allowed: Sequence[DType] | None = None) -> Rule:
    """Two inputs of one dtype (in the named categories or ``allowed``), broadcast; ``result`` fixes
    the output dtype."""

    def rule(a: Any, ins: tuple[TensorType, ...]) -> TensorType:
        expect_arity(ins, 2)
        dt = same_dtype(ins)
        for t in ins:
            expect_dtype(t, allowed, floating=floating, integer=integer, boolean=boolean, numeric=numeric)
        return TensorType(broadcast_types(ins), result or dt)

    return rule


def binary(name: str, fn: Callable[..., Any] | None = None, doc: str = "", *,
           lower: Callable[[LowerContext], Callable[..., Any]] | None = None, **kinds: Any) -> OpDef:
    """An attribute-free binary op; integer- and bool-valued ops are not differentiable."""
    differentiable = kinds.get("result") is None and not kinds.get("integer") and not kinds.get("boolean")
    return OpDef(name, infer=binary_rule(**kinds), lower=lower if fn is None else direct(fn), fusion=ELEMENTWISE,
                 doc=doc, differentiable=differentiable)


def _by_kind(on_int: Callable[..., Any], on_float: Callable[..., Any]) -> Callable[[LowerContext], Any]:
    """A lowering that picks the integer or floating form at compile time."""
    return lambda ctx: on_int if ctx.in_types[0].dtype.is_integer else on_float


# ---- arithmetic --------------------------------------------------------------------------------
ARITH: dict[str, Any] = dict(numeric=True)
ADD = binary("add", torch.add, "x + y", **ARITH)
SUBTRACT = binary("subtract", torch.sub, "x - y", **ARITH)
MULTIPLY = binary("multiply", torch.mul, "x * y", **ARITH)


def _trunc_div(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # INT_MIN / -1 traps (SIGFPE) in the CPU kernel: divide by 1 there and negate (wrapping, as C)
    minus_one = y == -1
    q = torch.div(x, torch.where(minus_one, 1, y), rounding_mode="trunc")
    return torch.where(minus_one, torch.neg(q), q)


def _div_no_nan_int(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    zero = y == 0
    return torch.where(zero, 0, _trunc_div(x, torch.where(zero, 1, y)))


def _div_no_nan_float(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    zero = y == 0  # a safe divisor keeps 0/0 out of the gradient too
    return torch.where(zero, torch.zeros((), dtype=x.dtype, device=x.device), x / torch.where(zero, 1, y))


DIVIDE = binary("divide", lower=_by_kind(_trunc_div, torch.div),
                doc="x / y (true division for floats; integers truncate toward zero)", **ARITH)
DIVISION_NO_NAN = binary("division_no_nan", lower=_by_kind(_div_no_nan_int, _div_no_nan_float),
                         doc="x / y, and 0 where y == 0", **ARITH)
MODULO = binary("modulo", torch.fmod, "remainder of truncated division (C fmod: sign of x)", allowed=REAL)
FLOOR_MODULO = binary("floor_modulo", torch.remainder, "remainder of floored division (Python %: sign of y)",
                      allowed=REAL)
POWER = binary("power", torch.pow, "x ** y", **ARITH)
MAXIMUM = binary("maximum", torch.fmax, "larger of x and y; a NaN operand yields the other one", allowed=REAL)
MINIMUM = binary("minimum", torch.fmin, "smaller of x and y; a NaN operand yields the other one", allowed=REAL)
MAXIMUM_NAN = binary("maximum_with_nan_propagation", torch.maximum, "larger of x and y; NaN if either is NaN",
                     allowed=REAL)
MINIMUM_NAN = binary("minimum_with_nan_propagation", torch.minimum, "smaller of x and y; NaN if either is NaN",
                     allowed=REAL)
ATAN2 = binary("atan2", torch.atan2, "angle of the point (y=x0, x=x1): atan2(x0, x1)",
               allowed=FLOAT_DTYPES)


# ---- gradients of the arithmetic ops (each input's gradient is summed back to its shape) ---------
Grads = tuple[Tensor | None, ...]


def _unbroadcast(g: Any, ct: Tensor, x: Tensor) -> Tensor:
    return g.sum_to(ct, x)


@defvjp(ADD)
def _add_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x, y = op.inputs
    return _unbroadcast(g, ct[0], x), _unbroadcast(g, ct[0], y)


@defvjp(SUBTRACT)
def _subtract_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x, y = op.inputs
    return _unbroadcast(g, ct[0], x), _unbroadcast(g, g.negative(ct[0]), y)


@defvjp(MULTIPLY)
def _multiply_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x, y = op.inputs
    return _unbroadcast(g, g.multiply(ct[0], y), x), _unbroadcast(g, g.multiply(ct[0], x), y)


@defvjp(DIVIDE)
def _divide_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x, y = op.inputs
    gx = g.divide(ct[0], y)  # d/dy = -x / y^2 = -(ct / y) * (x / y), reusing the result
    return _unbroadcast(g, gx, x), _unbroadcast(g, g.negative(g.multiply(gx, op.outputs[0])), y)


@defvjp(DIVISION_NO_NAN)
def _division_no_nan_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x, y = op.inputs  # both gradients are 0 where y == 0, like the result
    gx = g.division_no_nan(ct[0], y)
    return _unbroadcast(g, gx, x), _unbroadcast(g, g.negative(g.multiply(gx, op.outputs[0])), y)


@defvjp(MODULO, FLOOR_MODULO)
def _modulo_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    # x - q * y with q = trunc(x / y) (modulo) or floor(x / y) (floor_modulo); q read back from the
    # result so it matches the forward exactly; it is piecewise constant (zero gradient)
    x, y = op.inputs
    q = g.rint(g.divide(g.subtract(x, op.outputs[0]), y))
    return _unbroadcast(g, ct[0], x), _unbroadcast(g, g.negative(g.multiply(ct[0], q)), y)


@defvjp(POWER)
def _power_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x, y = op.inputs
    out, zero = op.outputs[0], g.zeros_like(ct[0])
    # d/dx = y x^(y-1), taken as 0 where y == 0 (x^0 is constant, also at x == 0)
    dx = g.select(g.equal(y, 0), zero, g.multiply(y, g.power(x, g.subtract(y, 1))))
    if x.dtype.is_complex:
        dy = g.multiply(out, g.log(x))
    else:  # d/dy = x^y log(x); 0 where x <= 0 (no real derivative there), with a safe log for second order
        positive = g.greater(x, 0)
        dy = g.select(positive, g.multiply(out, g.log(g.select(positive, x, g.ones_like(x)))), zero)
    return _unbroadcast(g, g.multiply(ct[0], dx), x), _unbroadcast(g, g.multiply(ct[0], dy), y)


def _pick(g: Any, op: Any, ct: Tensor, to_x: Tensor) -> Grads:
    """The cotangent to x where ``to_x`` holds, to y elsewhere."""
    x, y = op.inputs
    zero = g.zeros_like(ct)
    return _unbroadcast(g, g.select(to_x, ct, zero), x), _unbroadcast(g, g.select(to_x, zero, ct), y)


# maximum / minimum: on a tie the whole gradient goes to the first operand x; a NaN operand that the
# result ignores (maximum, minimum) gets none, one that it propagates (the _nan variants) gets it all
@defvjp(MAXIMUM)
def _maximum_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x, y = op.inputs
    return _pick(g, op, ct[0], g.logical_or(g.greater_equal(x, y), g.isnan(y)))


@defvjp(MINIMUM)
def _minimum_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x, y = op.inputs
    return _pick(g, op, ct[0], g.logical_or(g.less_equal(x, y), g.isnan(y)))


@defvjp(MAXIMUM_NAN)
def _maximum_nan_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x, y = op.inputs
    return _pick(g, op, ct[0], g.logical_or(g.greater_equal(x, y), g.isnan(x)))


@defvjp(MINIMUM_NAN)
def _minimum_nan_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x, y = op.inputs
    return _pick(g, op, ct[0], g.logical_or(g.less_equal(x, y), g.isnan(x)))


@defvjp(ATAN2)
def _atan2_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    a, b = op.inputs  # atan2(a, b): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2)
    scaled = g.divide(ct[0], g.add(g.square(a), g.square(b)))
    return _unbroadcast(g, g.multiply(scaled, b), a), _unbroadcast(g, g.negative(g.multiply(scaled, a)), b)


# ---- comparisons (after promotion; bool result) ------------------------------------------------
_ORDERED = REAL + (bool_,)
EQUAL = binary("equal", torch.eq, "x == y", result=bool_, numeric=True, boolean=True)
NOT_EQUAL = binary("not_equal", torch.ne, "x != y", result=bool_, numeric=True, boolean=True)
LESS = binary("less", torch.lt, "x < y", result=bool_, allowed=_ORDERED)
LESS_EQUAL = binary("less_equal", torch.le, "x <= y", result=bool_, allowed=_ORDERED)
GREATER = binary("greater", torch.gt, "x > y", result=bool_, allowed=_ORDERED)
GREATER_EQUAL = binary("greater_equal", torch.ge, "x >= y", result=bool_, allowed=_ORDERED)

# ---- logic (bool inputs) -------------------------------------------------------------------------
LOGICAL_AND = binary("logical_and", torch.logical_and, "x and y", boolean=True)
LOGICAL_OR = binary("logical_or", torch.logical_or, "x or y", boolean=True)
LOGICAL_XOR = binary("logical_xor", torch.logical_xor, "x xor y", boolean=True)
LOGICAL_NAND = binary("logical_nand", lambda x, y: torch.logical_not(torch.logical_and(x, y)), "not (x and y)",
                      boolean=True)
LOGICAL_NOR = binary("logical_nor", lambda x, y: torch.logical_not(torch.logical_or(x, y)), "not (x or y)",
                     boolean=True)
LOGICAL_XNOR = binary("logical_xnor", torch.eq, "not (x xor y)", boolean=True)

# ---- bits (integers; and/or/xor also take bools) ---------------------------------------------------
BITWISE_AND = binary("bitwise_and", torch.bitwise_and, "x & y", integer=True, boolean=True)
BITWISE_OR = binary("bitwise_or", torch.bitwise_or, "x | y", integer=True, boolean=True)
BITWISE_XOR = binary("bitwise_xor", torch.bitwise_xor, "x ^ y", integer=True, boolean=True)
SHIFT_LEFT = binary("shift_left", torch.bitwise_left_shift, "x << y (integers)", integer=True)
SHIFT_RIGHT = binary("shift_right", torch.bitwise_right_shift,
                     "x >> y (integers; arithmetic shift for signed dtypes)", integer=True)


# ---- select, clamp ---------------------------------------------------------------------------------
def _select_rule(a: None, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 3)
    expect_dtype(ins[0], boolean=True, what="predicate")
    dt = same_dtype(ins[1:], "true and false values")
    return TensorType(broadcast_types(ins), dt)


def _clamp_rule(a: None, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 3)
    dt = same_dtype(ins)
    expect_dtype(ins[0], REAL)
    return TensorType(broadcast_types(ins), dt)


def _clamp(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    # torch.clamp's result takes the broadcast shape of all three operands
    return torch.clamp(x, lo, hi)


SELECT = OpDef("select", infer=_select_rule, lower=direct(torch.where), fusion=ELEMENTWISE,
               doc="true_value where predicate else false_value, broadcast")
CLAMP = OpDef("clamp", infer=_clamp_rule, lower=direct(_clamp), fusion=ELEMENTWISE,
              doc="min(max(x, min_value), max_value), broadcast")


@defvjp(SELECT)
def _select_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    p, a, b = op.inputs
    zero = g.zeros_like(ct[0])
    return None, _unbroadcast(g, g.select(p, ct[0], zero), a), _unbroadcast(g, g.select(p, zero, ct[0]), b)


@defvjp(CLAMP)
def _clamp_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    # min(max(x, lo), hi): x where lo <= x <= hi (ties go to x); lo where x < lo <= hi; hi where it binds
    # (x > hi, or crossed bounds lo > hi, where the result is hi)
    x, lo, hi = op.inputs
    zero = g.zeros_like(ct[0])
    to_x = g.logical_and(g.greater_equal(x, lo), g.less_equal(x, hi))
    to_lo = g.logical_and(g.less(x, lo), g.less_equal(lo, hi))
    to_hi = g.logical_or(g.greater(x, hi), g.greater(lo, hi))
    return tuple(_unbroadcast(g, g.select(m, ct[0], zero), t) for m, t in ((to_x, x), (to_lo, lo), (to_hi, hi)))


# ---- cast, reinterpret_cast ------------------------------------------------------------------------
@attrs
class CastAttrs:
    dtype: DType


def _cast_rule(a: CastAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    if ins[0].dtype.packed or a.dtype.packed:
        raise DTypeError(f"cast between {ins[0].dtype.name} and {a.dtype.name}: "
                         "use the quantization ops for 4-bit types")
    return TensorType(ins[0].shape, a.dtype)


def _cast_lower(ctx: LowerContext) -> Callable[..., Any]:
    target = ctx.attrs.dtype.torch_dtype
    return lambda x: x.to(target)


CAST = OpDef("cast", infer=_cast_rule, lower=_cast_lower, attrs=CastAttrs, fusion=ELEMENTWISE,
             doc="convert values to another dtype (float to int truncates toward zero)")


@defvjp(CAST)
def _cast_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> Grads:
    x = op.inputs[0]
    return (g.cast(ct[0], x.dtype) if (x.dtype.is_floating or x.dtype.is_complex) else None,)


def _reinterpret_rule(a: CastAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    src, dst, shape = ins[0].dtype, a.dtype, ins[0].shape
    if src.packed or dst.packed:
        raise DTypeError(f"between {src.name} and {dst.name}: 4-bit types are not supported")
    if src.bits == dst.bits:
        return TensorType(shape, dst)
    if not shape:
        raise ShapeError(f"from {src.name} to {dst.name} changes the element size and "
                         "needs rank >= 1 (the last dimension changes)")
    last = shape[-1]
    if last is not None:
        if (last * src.bits) % dst.bits:
            raise ShapeError(f"from {src.name} to {dst.name}: the last dimension {last} "
                             f"times {src.bits} bits is not a multiple of {dst.bits} bits")
        last = last * src.bits // dst.bits
    return TensorType(shape[:-1] + (last,), dst)


def _reinterpret_lower(ctx: LowerContext) -> Callable[..., Any]:
    target = ctx.attrs.dtype.torch_dtype
    src_bits, dst_bits = ctx.in_types[0].dtype.bits, ctx.attrs.dtype.bits

    def reinterpret(x: torch.Tensor) -> torch.Tensor:
        if x.numel() == 0 and src_bits != dst_bits:  # torch refuses to view empty tensors (stride 0)
            return x.new_empty((*x.shape[:-1], x.shape[-1] * src_bits // dst_bits), dtype=target)
        return x.contiguous().view(target)

    return reinterpret


# OPAQUE: with differing element sizes an output element reads parts of several input elements
REINTERPRET_CAST = OpDef("reinterpret_cast", infer=_reinterpret_rule, lower=_reinterpret_lower, attrs=CastAttrs,
                         fusion=FusionKind.OPAQUE, differentiable=False,
                         doc="the same bytes read as another dtype; the last dimension scales by the size ratio")


# ---- builder methods -------------------------------------------------------------------------
class ElementwiseBuilders(GraphCore):
    """Graph methods for elementwise ops with several inputs."""

    def _operands(self, values: Sequence[Any]) -> list[Tensor]:
        """Tensors of one promoted dtype from tensors and weak Python scalars."""
        values = [v if isinstance(v, Tensor) or is_python_scalar(v) else self._as_tensor(v) for v in values]
        tensors = [v for v in values if isinstance(v, Tensor)]
        if tensors:
            dt = tensors[0].dtype
            for t in tensors[1:]:
                dt = promote_types(dt, t.dtype)
            for v in values:
                if not isinstance(v, Tensor):
                    dt = promote_with_scalar(dt, v)
        else:
            dt = weak_scalar_dtype(values[0])
            for v in values[1:]:
                dt = promote_types(dt, weak_scalar_dtype(v))
        out = []
        for v in values:
            t = self._as_tensor(v, like=dt)
            out.append(t if t.dtype is dt else self.cast(t, dt))
        return out

    def _binary(self, op: OpDef, x: Any, y: Any, name: str | None) -> Tensor:
        a, b = self._operands([x, y])
        return self._apply(op, [a, b], None, name)

    # arithmetic
    def add(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x + y`` with broadcasting.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,), og.float32)
        >>> g.run({x: [1.0, 2.0]}, [g.add(x, 1)])[0].tolist()
        [2.0, 3.0]
        """
        return self._binary(ADD, x, y, name)

    def subtract(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x - y`` with broadcasting."""
        return self._binary(SUBTRACT, x, y, name)

    def multiply(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x * y`` with broadcasting."""
        return self._binary(MULTIPLY, x, y, name)

    def divide(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x / y`` with broadcasting; integer inputs divide with truncation (as MPSGraph)."""
        return self._binary(DIVIDE, x, y, name)

    def division_no_nan(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x / y``, but 0 wherever ``y == 0`` (no inf or NaN from a zero divisor)."""
        return self._binary(DIVISION_NO_NAN, x, y, name)

    def modulo(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """Remainder of truncated division, with the sign of ``x`` (C ``fmod``; ``floor_modulo`` is Python's ``%``).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,))
        >>> g.run({x: [-7.0, 7.0]}, [g.modulo(x, 3), g.floor_modulo(x, 3)])[0].tolist()
        [-1.0, 1.0]
        """
        return self._binary(MODULO, x, y, name)

    def floor_modulo(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """Remainder of floored division, with the sign of ``y`` (Python's ``%``; ``x % y`` on Tensors)."""
        return self._binary(FLOOR_MODULO, x, y, name)

    def power(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x ** y`` with broadcasting (integers stay integers)."""
        return self._binary(POWER, x, y, name)

    def maximum(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """The larger of ``x`` and ``y``; where one is NaN, the other (like ``np.fmax``).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,))
        >>> r = g.run({x: [float("nan"), 1.0]}, [g.maximum(x, 0.5), g.maximum_with_nan_propagation(x, 0.5)])
        >>> r[0].tolist(), r[1].tolist()
        ([0.5, 1.0], [nan, 1.0])
        """
        return self._binary(MAXIMUM, x, y, name)

    def minimum(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """The smaller of ``x`` and ``y``; where one is NaN, the other (like ``np.fmin``)."""
        return self._binary(MINIMUM, x, y, name)

    def maximum_with_nan_propagation(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """The larger of ``x`` and ``y``; NaN where either is NaN (like ``np.maximum``)."""
        return self._binary(MAXIMUM_NAN, x, y, name)

    def minimum_with_nan_propagation(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """The smaller of ``x`` and ``y``; NaN where either is NaN (like ``np.minimum``)."""
        return self._binary(MINIMUM_NAN, x, y, name)

    def atan2(self, y: Any, x: Any, *, name: str | None = None) -> Tensor:
        """The angle of the point ``(x, y)`` in (-pi, pi] (real floating dtypes)."""
        return self._binary(ATAN2, y, x, name)

    # comparisons
    def equal(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x == y`` (bool result, compared after promotion)."""
        return self._binary(EQUAL, x, y, name)

    def not_equal(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x != y`` (bool result)."""
        return self._binary(NOT_EQUAL, x, y, name)

    def less(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x < y`` (bool result)."""
        return self._binary(LESS, x, y, name)

    def less_equal(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x <= y`` (bool result)."""
        return self._binary(LESS_EQUAL, x, y, name)

    def greater(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x > y`` (bool result)."""
        return self._binary(GREATER, x, y, name)

    def greater_equal(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x >= y`` (bool result)."""
        return self._binary(GREATER_EQUAL, x, y, name)

    # logic
    def logical_and(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x and y`` for bool tensors."""
        return self._binary(LOGICAL_AND, x, y, name)

    def logical_or(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x or y`` for bool tensors."""
        return self._binary(LOGICAL_OR, x, y, name)

    def logical_xor(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x xor y`` for bool tensors."""
        return self._binary(LOGICAL_XOR, x, y, name)

    def logical_nand(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``not (x and y)`` for bool tensors."""
        return self._binary(LOGICAL_NAND, x, y, name)

    def logical_nor(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``not (x or y)`` for bool tensors."""
        return self._binary(LOGICAL_NOR, x, y, name)

    def logical_xnor(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x == y`` for bool tensors."""
        return self._binary(LOGICAL_XNOR, x, y, name)

    # bits
    def bitwise_and(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x & y`` for integer (or bool) tensors."""
        return self._binary(BITWISE_AND, x, y, name)

    def bitwise_or(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x | y`` for integer (or bool) tensors."""
        return self._binary(BITWISE_OR, x, y, name)

    def bitwise_xor(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x ^ y`` for integer (or bool) tensors."""
        return self._binary(BITWISE_XOR, x, y, name)

    def shift_left(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x << y`` for integer tensors (bits shifted out are lost)."""
        return self._binary(SHIFT_LEFT, x, y, name)

    def shift_right(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x >> y`` for integer tensors; signed dtypes shift arithmetically (keep the sign)."""
        return self._binary(SHIFT_RIGHT, x, y, name)

    # select, clamp, casts
    def select(self, predicate: Any, true_value: Any, false_value: Any, *, name: str | None = None) -> Tensor:
        """``true_value`` where ``predicate`` (bool) holds, else ``false_value``; all three broadcast.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((3,))
        >>> g.run({x: [-1.0, 0.0, 2.0]}, [g.select(x > 0, x, 0.0)])[0].tolist()
        [0.0, 0.0, 2.0]
        """
        pred = self._as_tensor(predicate, like=bool_)
        a, b = self._operands([true_value, false_value])
        return self._apply(SELECT, [pred, a, b], None, name)

    def clamp(self, x: Any, min_value: Any, max_value: Any, *, name: str | None = None) -> Tensor:
        """``min(max(x, min_value), max_value)`` with broadcasting (``max_value`` wins if the bounds cross).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((3,))
        >>> g.run({x: [-2.0, 0.5, 3.0]}, [g.clamp(x, 0, 1)])[0].tolist()
        [0.0, 0.5, 1.0]
        """
        a, lo, hi = self._operands([x, min_value, max_value])
        return self._apply(CLAMP, [a, lo, hi], None, name)

    def cast(self, x: Tensor, dtype: object, *, name: str | None = None) -> Tensor:
        """``x`` converted to ``dtype``."""
        return self._apply(CAST, [self._as_tensor(x)], CastAttrs(as_dtype(dtype)), name)

    def reinterpret_cast(self, x: Tensor, dtype: object, *, name: str | None = None) -> Tensor:
        """The bytes of ``x`` read as ``dtype``; when element sizes differ the last dimension scales by their
        ratio (like ``torch.Tensor.view(dtype)``).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,), og.float32)
        >>> y = g.reinterpret_cast(x, og.int16); y.type
        TensorType((4,), opgraph.int16)
        >>> g.run({x: [1.0, -2.0]}, [g.reinterpret_cast(x, og.int32)])[0].tolist()
        [1065353216, -1073741824]
        """
        return self._apply(REINTERPRET_CAST, [self._as_tensor(x)], CastAttrs(as_dtype(dtype)), name)


__all__ = [
    "ADD", "ATAN2", "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR", "CAST", "CLAMP", "DIVIDE", "DIVISION_NO_NAN",
    "EQUAL", "FLOOR_MODULO", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "LOGICAL_AND", "LOGICAL_NAND",
    "LOGICAL_NOR", "LOGICAL_OR", "LOGICAL_XNOR", "LOGICAL_XOR", "MAXIMUM", "MAXIMUM_NAN", "MINIMUM", "MINIMUM_NAN",
    "MODULO", "MULTIPLY", "NOT_EQUAL", "POWER", "REINTERPRET_CAST", "SELECT", "SHIFT_LEFT", "SHIFT_RIGHT",
    "SUBTRACT", "CastAttrs", "ElementwiseBuilders", "binary", "binary_rule", "bool_",
]
