"""The Triton scalar expression of every elementwise op, keyed by the op object.

``EXPRESSIONS[op](args, ctx)`` returns Triton source text computing the op from the source text of its
argument values. Values live in registers in their *compute type* (``compute_type``): float16 and
bfloat16 are widened to float32 at load and narrowed only at store (or by an explicit ``cast``), other
dtypes are themselves (bool is ``tl.int1``). The generated code uses ``tl`` and the helpers of
``prelude`` only (no libdevice), so it also runs under Triton's interpreter on the CPU.

Ops without an expression are listed in ``UNSUPPORTED`` with the reason; ``NotExpressible`` is raised
for dtypes an expression does not handle (complex, packed 4-bit, ...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...core.dtype import DType, bfloat16, bool_, float16, float32, float64, int32
from ...core.errors import OpgraphError
from ...core.types import TensorType
from ...ir.opdef import OpDef
from ...ops import activation as act
from ...ops import elementwise as ew
from ...ops import gradient_support as gs
from ...ops import norm
from ...ops import unary as un


class NotExpressible(OpgraphError):
    """An op (or an op at these dtypes) has no Triton expression."""


_TL_NAMES = {
    "bool": "tl.int1", "uint8": "tl.uint8", "int8": "tl.int8", "int16": "tl.int16", "int32": "tl.int32",
    "int64": "tl.int64", "float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32",
    "float64": "tl.float64",
}


def storage_type(dt: DType) -> str:
    """The Triton type a tensor of ``dt`` is stored as."""
    try:
        return _TL_NAMES[dt.name]
    except KeyError:
        raise NotExpressible(f"dtype {dt.name} has no Triton kernel support") from None


def compute_type(dt: DType) -> str:
    """The Triton type values of ``dt`` are held in between load and store."""
    return "tl.float32" if dt in (float16, bfloat16) else storage_type(dt)


def to_storage(value: str, reg: DType, dt: DType) -> str:
    """Source converting ``value`` (held in ``compute_type(reg)``) to the storage type of ``dt``."""
    if dt is bfloat16:  # through float32, rounded by og_to_bf16 (exact RTNE also under the interpreter)
        if reg is not float32 and reg not in (float16, bfloat16):
            value = f"{value}.to(tl.float32)"
        return f"og_to_bf16({value})"
    if dt is float16 and reg not in (float16, bfloat16, float32, float64):
        value = f"{value}.to(tl.float32)"  # integers and bool via float32, as PyTorch's Half conversion
    return value if compute_type(reg) == storage_type(dt) else f"{value}.to({storage_type(dt)})"


def exact_div(a: str, b: str, compute: str) -> str:
    """``a / b`` rounded as IEEE division, as PyTorch's: Triton's ``/`` on float32 is ``div.full.f32`` (up to 2
    ulp off; float64's is exact already). ``compute``: the operands' Triton type; ``b`` may be an integer count
    (``div_rn`` takes float32 only: ``* 1.0`` converts it). A literal numerator keeps ``/``: ``tl.div_rn(1.0,
    tl.sqrt_rn(v))`` as batch norm's scale gave ResNet-18 float32 gradients 400-730x eager's error on the H200
    (Triton 3.6; RESULTS.md, ninth session), not yet understood."""
    if compute == "tl.float64" or _NUMBER.fullmatch(a):
        return f"{a} / {b}"
    return f"tl.div_rn({a}, ({b}) * 1.0)"


_NUMBER = re.compile(r'-?[0-9.]+(e[-+]?[0-9]+)?|float\("-?(inf|nan)"\)')  # literal()'s spellings


@dataclass(frozen=True)
class ExprContext:
    """What an expression sees: the op's attributes and its input and output types."""

    attrs: Any
    in_types: tuple[TensorType, ...]
    out_types: tuple[TensorType, ...]
    block: str = "BLOCK"  # the kernel's block-size constexpr, for ops that make values from nothing
    approximate: bool = False  # the kernel lets the result carry a relative error under its dtype's rounding

    @property
    def dtype(self) -> DType:
        """The (first) input's dtype."""
        return self.in_types[0].dtype

    @property
    def is_float(self) -> bool:
        return self.dtype.is_floating

    @property
    def is_int(self) -> bool:
        return self.dtype.is_integer


Expr = Callable[[Sequence[str], ExprContext], str]


def literal(value: float | int | bool) -> str:
    """A Python literal Triton accepts (inf and NaN spelled as ``float(...)``)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value)
    return repr(int(value))


# ---- helpers to build the table ---------------------------------------------------------------------
def _real_float(fn: Callable[[Sequence[str], ExprContext], str], *, no_float64: bool = False) -> Expr:
    """An expression for real floating inputs only."""

    def expr(a: Sequence[str], ctx: ExprContext) -> str:
        if not ctx.is_float:
            raise NotExpressible(f"defined for real floating dtypes, got {ctx.dtype.name}")
        if no_float64 and ctx.dtype is float64:
            raise NotExpressible("its polynomial approximation has float32 accuracy; float64 is not generated")
        return fn(a, ctx)

    return expr


def _f(template: str, *, no_float64: bool = False) -> Expr:
    """A floating expression from a template over ``{0}``, ``{1}`` ..."""
    return _real_float(lambda a, ctx: template.format(*a), no_float64=no_float64)


def _numeric(on_int: str, on_float: str) -> Expr:
    """A template per kind; bool and complex inputs are refused."""

    def expr(a: Sequence[str], ctx: ExprContext) -> str:
        if ctx.is_int:
            return on_int.format(*a)
        if ctx.is_float:
            return on_float.format(*a)
        raise NotExpressible(f"not generated for {ctx.dtype.name}")

    return expr


def _kinds(*, on_bool: str | None = None, on_int: str | None = None, on_float: str | None = None) -> Expr:
    def expr(a: Sequence[str], ctx: ExprContext) -> str:
        template = on_bool if ctx.dtype is bool_ else on_int if ctx.is_int else on_float if ctx.is_float else None
        if template is None:
            raise NotExpressible(f"not generated for {ctx.dtype.name}")
        return template.format(*a)

    return expr


def _compare(symbol: str) -> Expr:
    # bool is tl.int1, where True compares as -1 when signed: widen it first
    return _kinds(on_bool=f"{{0}}.to(tl.int32) {symbol} {{1}}.to(tl.int32)", on_int=f"{{0}} {symbol} {{1}}",
                  on_float=f"{{0}} {symbol} {{1}}")


def _trunc_div(x: str, y: str, signed: bool = True) -> str:
    # INT_MIN // -1 traps on some targets: divide by 1 and negate (wrapping), as the PyTorch lowering
    if not signed:
        return f"{x} // {y}"
    return f"tl.where({y} == -1, -({x}), {x} // tl.where({y} == -1, 1, {y}))"


def _divide(a: Sequence[str], ctx: ExprContext) -> str:
    if ctx.is_int:
        return _trunc_div(a[0], a[1], ctx.dtype.signed)
    if ctx.is_float:
        return exact_div(a[0], a[1], compute_type(ctx.dtype))
    raise NotExpressible(f"not generated for {ctx.dtype.name}")


def _division_no_nan(a: Sequence[str], ctx: ExprContext) -> str:
    x, y = a
    if ctx.is_int:
        return f"tl.where({y} == 0, 0, {_trunc_div(x, f'tl.where({y} == 0, 1, {y})', ctx.dtype.signed)})"
    if ctx.is_float:
        return f"tl.where({y} == 0, 0.0, {exact_div(x, f'tl.where({y} == 0, 1.0, {y})', compute_type(ctx.dtype))})"
    raise NotExpressible(f"not generated for {ctx.dtype.name}")


def _floor_modulo(a: Sequence[str], ctx: ExprContext) -> str:
    # the truncated remainder, moved by y where its sign differs from y's (PyTorch's remainder)
    if not (ctx.is_int or ctx.is_float):
        raise NotExpressible(f"not generated for {ctx.dtype.name}")
    x, y = a
    r = f"({x} % {y})"
    return f"tl.where(({r} != 0) & (({r} < 0) != ({y} < 0)), {r} + {y}, {r})"


def _power(a: Sequence[str], ctx: ExprContext) -> str:
    if ctx.is_int:
        helper = "og_powi" if ctx.dtype.signed else "og_powu"
        return f"{helper}({a[0]}, {a[1]}, {ctx.dtype.bits})"
    if ctx.is_float:
        return f"og_powf({a[0]}, {a[1]})"
    raise NotExpressible(f"not generated for {ctx.dtype.name}")


def _minmax(pick: str, *, propagate: bool) -> Expr:
    """``pick`` is ``>`` (maximum) or ``<`` (minimum); NaN operands yield the other operand, or NaN."""

    def expr(a: Sequence[str], ctx: ExprContext) -> str:
        x, y = a
        if ctx.is_int:
            return f"tl.where({x} {pick} {y}, {x}, {y})"
        if not ctx.is_float:
            raise NotExpressible(f"not generated for {ctx.dtype.name}")
        # ties give x; a NaN x fails the comparison, so one test of the NaN that should win is enough
        nan = x if propagate else y
        return f"tl.where(({x} {pick}= {y}) | ({nan} != {nan}), {x}, {y})"

    return expr


def _clamp(a: Sequence[str], ctx: ExprContext) -> str:
    x, lo, hi = a
    if ctx.is_int:
        return f"tl.minimum(tl.maximum({x}, {lo}), {hi})"
    if not ctx.is_float:
        raise NotExpressible(f"not generated for {ctx.dtype.name}")
    # min(max(x, lo), hi) with NaN from any operand propagating, as torch.clamp with tensor bounds
    lower = f"tl.where(({x} != {x}) | ({lo} != {lo}), {x} + {lo}, tl.where({x} < {lo}, {lo}, {x}))"
    return f"tl.where({hi} != {hi}, {hi}, tl.where(({lower}) > {hi}, {hi}, {lower}))"


def _shift(left: bool) -> Expr:
    def expr(a: Sequence[str], ctx: ExprContext) -> str:
        if not ctx.is_int:
            raise NotExpressible(f"not generated for {ctx.dtype.name}")
        x, y, bits = a[0], a[1], ctx.dtype.bits
        ok = f"(({y} >= 0) & ({y} < {bits}))"
        safe = f"tl.where({ok}, {y}, 0)"
        if left:  # shifts by the width or more (or negative) give 0, as PyTorch
            return f"tl.where({ok}, {x} << {safe}, 0)"
        fill = f"{x} >> {bits - 1}" if ctx.dtype.signed else "0"  # sign fill for signed dtypes
        return f"tl.where({ok}, {x} >> {safe}, {fill})"

    return expr


def _cast(a: Sequence[str], ctx: ExprContext) -> str:
    src, dst = ctx.dtype, ctx.attrs.dtype
    x = a[0]
    storage_type(src)
    target = storage_type(dst)
    if dst is bool_:
        return f"{x} != 0"
    if src is bool_:
        x = f"tl.where({x}, 1, 0)"
        src = int32
    if dst in (float16, bfloat16):  # round to the storage precision, then hold it in float32 again
        return f"{to_storage(x, src, dst)}.to(tl.float32)"
    return f"{x}.to({target})"  # float -> int truncates toward zero (fptosi); out-of-range values are undefined


def _sign(a: Sequence[str], ctx: ExprContext) -> str:
    x = a[0]
    if ctx.is_int:
        return f"tl.where({x} > 0, 1, 0) - tl.where({x} < 0, 1, 0)" if ctx.dtype.signed else f"tl.where({x} > 0, 1, 0)"
    if ctx.is_float:
        return f"tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, {x}))"  # 0 and NaN stay themselves
    raise NotExpressible(f"not generated for {ctx.dtype.name}")


def _abs(a: Sequence[str], ctx: ExprContext) -> str:
    if ctx.is_int and not ctx.dtype.signed:
        return a[0]
    if ctx.is_int or ctx.is_float:
        return f"tl.abs({a[0]})"
    raise NotExpressible(f"not generated for {ctx.dtype.name}")


def _popcount(a: Sequence[str], ctx: ExprContext) -> str:
    if not ctx.is_int:
        raise NotExpressible(f"not generated for {ctx.dtype.name}")
    v = f"{a[0]}.to(tl.int64)"
    if ctx.dtype.bits < 64:  # drop the sign extension
        v = f"({v} & {(1 << ctx.dtype.bits) - 1})"
    return f"og_popcount({v})"


def _softplus_of(x: str, beta: float, threshold: float) -> str:
    bx = f"({x} * {literal(beta)})" if beta != 1.0 else f"({x})"
    soft = f"og_log1p(tl.exp({bx}))" + (f" / {literal(beta)}" if beta != 1.0 else "")
    return f"tl.where({bx} > {literal(threshold)}, {x}, {soft})"


def _gelu(a: Sequence[str], ctx: ExprContext) -> str:
    x = a[0]
    if ctx.attrs.approximate is act.GeluApproximation.TANH:
        c, k = math.sqrt(2 / math.pi), 0.044715
        return f"0.5 * {x} * (1.0 + og_tanh({c!r} * ({x} + {k!r} * {x} * {x} * {x})))"
    return f"tl.where({x} == float(\"inf\"), {x}, 0.5 * {x} * (1.0 + tl.erf({x} * {1 / math.sqrt(2)!r})))"


def _fill_like(a: Sequence[str], ctx: ExprContext) -> str:
    out = ctx.out_types[0].dtype
    value = ctx.attrs.value
    if out.is_floating:
        value = float(value)
    elif out.is_integer:
        value = int(value)
    else:
        value = bool(value)
    return f"tl.full([{ctx.block}], {literal(value)}, {compute_type(out)})"


def _normalize(a: Sequence[str], ctx: ExprContext) -> str:
    if not ctx.is_float:
        raise NotExpressible(f"not generated for {ctx.dtype.name}")
    x, mean, var, *rest = a
    up = "tl.float64" if ctx.dtype is float64 else "tl.float32"
    y = f"({x}.to({up}) - {mean}.to({up})) * tl.rsqrt({var}.to({up}) + {literal(float(ctx.attrs.epsilon))})"
    params = iter(rest)
    if ctx.attrs.has_gamma:
        y = f"({y}) * {next(params)}.to({up})"
    if ctx.attrs.has_beta:
        y = f"({y}) + {next(params)}.to({up})"
    return y


def _leaky_relu(a: Sequence[str], ctx: ExprContext) -> str:
    return f"tl.where({a[0]} > 0, {a[0]}, {a[0]} * {literal(float(ctx.attrs.alpha))})"


def _elu(a: Sequence[str], ctx: ExprContext) -> str:
    return f"tl.where({a[0]} > 0, {a[0]}, og_expm1({a[0]}) * {literal(float(ctx.attrs.alpha))})"


def _tanh(a: Sequence[str], ctx: ExprContext) -> str:
    # the hardware approximation's relative error (2^-11, one instruction) is under bfloat16's rounding (2^-9 to
    # 2^-8), where the kernel says the error stays relative (``approximate``: no 1 - tanh downstream, as in GELU's
    # or tanh's gradient). Not for float16: 2^-11 is its own rounding error.
    if ctx.approximate and ctx.out_types[0].dtype is bfloat16:
        return f"og_tanh_bf16({a[0]})"
    return f"og_tanh({a[0]})"


def _hard_sigmoid(a: Sequence[str], ctx: ExprContext) -> str:
    v = f"({a[0]} * {literal(float(ctx.attrs.alpha))} + {literal(float(ctx.attrs.beta))})"
    return f"tl.where({v} < 0.0, 0.0, tl.where({v} > 1.0, 1.0, {v}))"


def _softplus(a: Sequence[str], ctx: ExprContext) -> str:
    return _softplus_of(a[0], float(ctx.attrs.beta), float(ctx.attrs.threshold))


_SIGMOID = "1.0 / (1.0 + tl.exp(-{0}))"

# ---- the table ----------------------------------------------------------------------------------------
EXPRESSIONS: dict[OpDef, Expr] = {
    # arithmetic
    ew.ADD: _numeric("{0} + {1}", "{0} + {1}"),
    ew.SUBTRACT: _numeric("{0} - {1}", "{0} - {1}"),
    ew.MULTIPLY: _numeric("{0} * {1}", "{0} * {1}"),
    ew.DIVIDE: _divide,
    ew.DIVISION_NO_NAN: _division_no_nan,
    ew.MODULO: _numeric("{0} % {1}", "{0} % {1}"),  # srem / frem: the sign of x, as C fmod
    ew.FLOOR_MODULO: _floor_modulo,
    ew.POWER: _power,
    ew.MAXIMUM: _minmax(">", propagate=False),
    ew.MINIMUM: _minmax("<", propagate=False),
    ew.MAXIMUM_NAN: _minmax(">", propagate=True),
    ew.MINIMUM_NAN: _minmax("<", propagate=True),
    ew.ATAN2: _f("og_atan2({0}, {1})", no_float64=True),
    # comparisons
    ew.EQUAL: _compare("=="),
    ew.NOT_EQUAL: _compare("!="),
    ew.LESS: _compare("<"),
    ew.LESS_EQUAL: _compare("<="),
    ew.GREATER: _compare(">"),
    ew.GREATER_EQUAL: _compare(">="),
    # logic (bool is tl.int1)
    ew.LOGICAL_AND: _kinds(on_bool="{0} & {1}"),
    ew.LOGICAL_OR: _kinds(on_bool="{0} | {1}"),
    ew.LOGICAL_XOR: _kinds(on_bool="{0} ^ {1}"),
    ew.LOGICAL_NAND: _kinds(on_bool="({0} & {1}) == 0"),
    ew.LOGICAL_NOR: _kinds(on_bool="({0} | {1}) == 0"),
    ew.LOGICAL_XNOR: _kinds(on_bool="{0} == {1}"),
    # bits
    ew.BITWISE_AND: _kinds(on_bool="{0} & {1}", on_int="{0} & {1}"),
    ew.BITWISE_OR: _kinds(on_bool="{0} | {1}", on_int="{0} | {1}"),
    ew.BITWISE_XOR: _kinds(on_bool="{0} ^ {1}", on_int="{0} ^ {1}"),
    ew.SHIFT_LEFT: _shift(True),
    ew.SHIFT_RIGHT: _shift(False),
    # select, clamp, cast
    ew.SELECT: lambda a, ctx: f"tl.where({a[0]}, {a[1]}, {a[2]})",
    ew.CLAMP: _clamp,
    ew.CAST: _cast,
    # unary arithmetic
    un.ABS: _abs,
    un.NEGATIVE: _numeric("-{0}", "-{0}"),
    un.SIGN: _sign,
    un.SQUARE: _numeric("{0} * {0}", "{0} * {0}"),
    un.RECIPROCAL: _f("1.0 / {0}"),
    # exponentials, logarithms, powers
    un.EXP: _f("tl.exp({0})"),
    un.EXP2: _f("tl.exp2({0})"),
    un.LOG: _f("tl.log({0})"),
    un.LOG2: _f("tl.log2({0})"),
    un.LOG10: _f(f"tl.log2({{0}}) * {math.log10(2)!r}"),
    un.SQRT: _real_float(lambda a, ctx: f"tl.sqrt_rn({a[0]})" if ctx.dtype is not float64 else f"tl.sqrt({a[0]})"),
    un.RSQRT: _f("tl.rsqrt({0})"),
    # trigonometric and hyperbolic
    un.SIN: _f("tl.sin({0})"),
    un.COS: _f("tl.cos({0})"),
    un.TAN: _real_float(lambda a, ctx: exact_div(f"tl.sin({a[0]})", f"tl.cos({a[0]})", compute_type(ctx.dtype))),
    un.ASIN: _f("og_asin({0})", no_float64=True),
    un.ACOS: _f("og_acos({0})", no_float64=True),
    un.ATAN: _f("og_atan({0})", no_float64=True),
    un.SINH: _f("og_sinh({0})"),
    un.COSH: _f("og_cosh({0})"),
    un.TANH: _real_float(_tanh),
    un.ASINH: _f("og_asinh({0})"),
    un.ACOSH: _f("og_acosh({0})"),
    un.ATANH: _f("og_atanh({0})"),
    un.ERF: _f("tl.erf({0})"),
    # rounding
    un.FLOOR: _f("tl.floor({0})"),
    un.CEIL: _f("tl.ceil({0})"),
    un.ROUND: _f("og_round_half_away({0})"),
    un.RINT: _f("og_rint({0})"),
    un.TRUNCATE: _f("og_trunc({0})"),
    # predicates
    un.ISNAN: _kinds(on_int="{0} != {0}", on_float="{0} != {0}"),
    un.ISINF: _kinds(on_int="{0} != {0}", on_float="tl.abs({0}) == float(\"inf\")"),
    un.ISFINITE: _kinds(on_int="{0} == {0}", on_float="({0} == {0}) & (tl.abs({0}) != float(\"inf\"))"),
    un.LOGICAL_NOT: _kinds(on_bool="{0} == 0"),
    # bits
    un.BITWISE_NOT: _kinds(on_int="~{0}"),
    un.POPCOUNT: _popcount,
    # activations
    act.RELU: _f("tl.where({0} < 0.0, 0.0, {0})"),  # NaN stays NaN
    act.RELU6: _f("tl.where({0} < 0.0, 0.0, tl.where({0} > 6.0, 6.0, {0}))"),
    act.SILU: _real_float(lambda a, ctx: exact_div(a[0], f"(1.0 + tl.exp(-{a[0]}))", compute_type(ctx.dtype))),
    act.SIGMOID: _f(_SIGMOID),
    act.SOFTSIGN: _f("{0} / (1.0 + tl.abs({0}))"),
    act.MISH: _real_float(lambda a, ctx: f"{a[0]} * og_tanh({_softplus_of(a[0], 1.0, 20.0)})"),
    act.LEAKY_RELU: _real_float(_leaky_relu),
    act.ELU: _real_float(_elu),
    act.GELU: _real_float(_gelu),
    act.HARD_SIGMOID: _real_float(_hard_sigmoid),
    act.SOFTPLUS: _real_float(_softplus),
    # gradient support, norms
    gs.FILL_LIKE: _fill_like,
    norm.NORMALIZE: _normalize,
}

# elementwise ops that have no expression, with the reason
UNSUPPORTED: dict[OpDef, str] = {}


def expression(op: OpDef, args: Sequence[str], ctx: ExprContext) -> str:
    """The Triton source of ``op`` applied to ``args`` (raises ``NotExpressible``)."""
    try:
        fn = EXPRESSIONS[op]
    except KeyError:
        reason = UNSUPPORTED.get(op, "no Triton expression")
        raise NotExpressible(f"{op.name}: {reason}") from None
    for t in (*ctx.in_types, *ctx.out_types):
        if t.dtype.packed or t.dtype.is_complex:
            raise NotExpressible(f"{op.name}: dtype {t.dtype.name} is not generated")
    try:
        return fn(args, ctx)
    except NotExpressible as e:
        raise NotExpressible(f"{op.name}: {e}") from None


__all__ = ["EXPRESSIONS", "UNSUPPORTED", "ExprContext", "NotExpressible", "compute_type", "expression", "literal",
           "storage_type", "to_storage"]
