"""Converters of the pointwise ATen ops (``converters/elementwise.py``) against eager PyTorch: unary math, division
and its rounding modes, pow, comparisons and logic, where/clamp, activations (inference and training), casts,
creation ops, and the non-decomposed ops and activation gradients (through ``make_fx`` graphs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from opgraph.frontends.torch import recording
from tests.frontends import torch_harness as harness
from tests.frontends.torch_harness import check_inference, check_training, compiled, fallbacks

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

aten = torch.ops.aten
NAN, INF = math.nan, math.inf
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL: dict[torch.dtype, dict[str, float]] = {
    torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-7, atol=1e-9),
    torch.float16: dict(rtol=2e-3, atol=1e-4), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-3),
}
SPECIAL = [NAN, INF, -INF, 0.0, -0.0, 1e-30, -1e-7, 1e-4, 0.1, 0.3, -0.5, 0.5, 1.5, 2.5, -2.5, 0.99, -0.99, 1.0,
           -1.0, 3.0, -7.25, 100.0, -100.0, 1e10]


def floats(dtype: torch.dtype, n: int = 40, special: list[float] = SPECIAL, scale: float = 3.0) -> torch.Tensor:
    torch.manual_seed(0)
    values = torch.cat([torch.tensor(special, dtype=torch.float64), torch.randn(n, dtype=torch.float64) * scale])
    return values.to(dtype)


def zero_signs(y: torch.Tensor) -> torch.Tensor:
    """The sign bits of the zeros of ``y`` (assert_close does not see -0.0)."""
    return torch.where(y == 0, torch.signbit(y), False)


# ---- unary math ------------------------------------------------------------------------------------------------
UNARY = [torch.abs, torch.neg, torch.exp, torch.exp2, torch.expm1, torch.log, torch.log2, torch.log10, torch.log1p,
         torch.sqrt, torch.rsqrt, torch.reciprocal, torch.sin, torch.cos, torch.tan, torch.asin, torch.acos, torch.atan,
         torch.sinh, torch.cosh, torch.tanh, torch.asinh, torch.acosh, torch.atanh, torch.erf, torch.sigmoid,
         torch.floor, torch.ceil, torch.round, torch.trunc, torch.sign, torch.sgn, torch.isnan, torch.isinf,
         torch.logical_not, torch.signbit, torch.square, lambda x: torch.round(x, decimals=0)]
SIGNED_ZEROS = [torch.neg, torch.abs, torch.expm1, torch.log1p, torch.sqrt, torch.sin, torch.tanh, torch.floor,
                torch.ceil, torch.round, torch.trunc, torch.sign, torch.asinh, torch.atanh, torch.erf]


def _unary(x: torch.Tensor) -> list[torch.Tensor]:
    return [f(x) for f in UNARY] + [zero_signs(f(x)) for f in SIGNED_ZEROS]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_unary_math_on_floats_with_special_values(dtype: torch.dtype) -> None:
    check_inference(_unary, floats(dtype), **TOL[dtype])


def test_expm1_and_log1p_are_accurate_near_zero_and_far_out() -> None:
    mags = torch.logspace(-38, 38, 400, dtype=torch.float64)
    x = torch.cat([mags, -mags, torch.linspace(-5, 5, 101, dtype=torch.float64), torch.tensor([-1.0, -1 + 1e-7])])
    for dt in (torch.float32, torch.float64):  # a few ulp of the correctly rounded result
        check_inference(lambda x: (torch.expm1(x), torch.log1p(x)), x.to(dt), rtol=4 * torch.finfo(dt).eps, atol=0)


def _int_unary(x: torch.Tensor) -> list[torch.Tensor]:
    return [torch.abs(x), torch.neg(x), torch.sign(x), torch.floor(x), torch.ceil(x), torch.round(x), torch.trunc(x),
            torch.bitwise_not(x), torch.exp(x), torch.sqrt(x), torch.sigmoid(x), torch.reciprocal(x), torch.isnan(x),
            torch.isinf(x), torch.isfinite(x), torch.logical_not(x), torch.signbit(x), torch.square(x), torch.sin(x)]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8], ids=str)
def test_unary_math_on_integers(dtype: torch.dtype) -> None:
    x = torch.arange(-6, 7).to(dtype) if dtype != torch.uint8 else torch.arange(0, 250, 7).to(dtype)
    fn = _int_unary if dtype != torch.uint8 else lambda x: [f(x) for f in (torch.abs, torch.sign, torch.bitwise_not,
                                                                          torch.exp, torch.signbit, torch.floor)]
    check_inference(fn, x)


def test_unary_math_on_bools() -> None:
    x = torch.tensor([True, False, True])
    check_inference(lambda x: [torch.bitwise_not(x), torch.logical_not(x), torch.isnan(x), torch.isinf(x),
                               torch.isfinite(x), torch.sign(x), torch.exp(x), torch.signbit(x), torch.sqrt(x)], x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
def test_round_with_decimals(dtype: torch.dtype) -> None:
    x = floats(dtype, scale=300.0)
    check_inference(lambda x: [torch.round(x, decimals=d) for d in (2, 1, -1, -2)], x, **TOL[dtype])


# ---- division, pow, remainders ------------------------------------------------------------------------------------
def _division(x: torch.Tensor, y: torch.Tensor, y0: torch.Tensor) -> list[torch.Tensor]:
    q = [x / y, torch.div(x, y, rounding_mode="trunc"), torch.div(x, y, rounding_mode="floor"), x // y,
         x / 3, x / 0.1, torch.div(x, 0.1, rounding_mode="floor"), torch.div(x, -0.3, rounding_mode="trunc"),
         torch.div(x, 0.0, rounding_mode="floor"), x / y0, torch.div(x, y0, rounding_mode="floor")]
    r = [torch.fmod(x, y), torch.remainder(x, y), torch.fmod(x, 0.7), torch.remainder(x, -0.7), x % 2.5]
    return q + r + [zero_signs(t) for t in q[:4] + r[:2]]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_division_rounding_modes_and_remainders(dtype: torch.dtype) -> None:
    v = floats(dtype, n=12, special=[NAN, INF, -INF, 0.0, -0.0, 1e-10, 0.1, 0.3, -0.5, 1.0, -1.0, 2.5, 3.0, -7.25,
                                     100.0, -6.0, 1e20])
    check_inference(_division, v[:, None], v[None, :], torch.tensor(0.1), **TOL[dtype])


def _int_division(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    return [x / y, torch.div(x, y, rounding_mode="trunc"), torch.div(x, y, rounding_mode="floor"), x // y,
            torch.fmod(x, y), torch.remainder(x, y), x / 2, torch.div(x, 3, rounding_mode="floor"),
            torch.div(x, -3, rounding_mode="trunc"), x // -4, x % 3, torch.fmod(x, -3), torch.remainder(5, y)]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_integer_division_rounding_modes_and_remainders(dtype: torch.dtype) -> None:
    x = torch.tensor([-9, -8, -7, -3, -1, 0, 1, 2, 3, 7, 8, 9, 2**30], dtype=dtype)
    y = torch.tensor([-7, -3, -2, -1, 1, 2, 3, 5], dtype=dtype)  # PyTorch raises on integer zero divisors
    check_inference(_int_division, x[:, None], y[None, :])


EXPONENTS = [0, 1, 2, 3, 0.5, -0.5, -1, -2, 2.5, -1.5, 1 / 3, 0.0, 2.0]


def _pow(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    return [x ** e for e in EXPONENTS] + [x ** y, 2.0 ** y, 1 ** y, (-2.0) ** y, torch.pow(x, y)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_pow_with_the_special_exponents_of_aten(dtype: torch.dtype) -> None:
    v = floats(dtype, n=10, special=[NAN, INF, -INF, 0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0, 7.5])
    got = [zero_signs(t) for t in _pow(v[:, None], v[None, :])[:8]]
    assert any(t.any() for t in got)  # -0.0 results exist, so the sign check below means something
    check_inference(lambda x, y: _pow(x, y) + [zero_signs(t) for t in _pow(x, y)[:8]], v[:, None], v[None, :],
                    **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_pow_and_division_round_as_aten(dtype: torch.dtype) -> None:
    # bitwise: bfloat16 x**3 rounds after each product, float16 x**3 once; a scalar divisor is not rounded first
    x = torch.linspace(-40, 40, 3001, dtype=torch.float64).to(dtype)
    y = torch.linspace(0.1, 3, 3001, dtype=torch.float64).flip(0).to(dtype)
    check_inference(lambda x, y: [x ** 3, x ** -2, x ** 2, x / 0.1, torch.div(x, 0.3, rounding_mode="floor"),
                                  torch.div(x, 0.7, rounding_mode="trunc"), torch.fmod(x, 0.3), x / y,
                                  torch.div(x, y, rounding_mode="trunc"), torch.div(x, -y, rounding_mode="floor")],
                    x, y, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_integer_pow(dtype: torch.dtype) -> None:
    x = torch.arange(-5, 6, dtype=dtype)
    y = torch.tensor([0, 1, 2, 3, 5], dtype=dtype)
    check_inference(lambda x, y: [x ** 0, x ** 1, x ** 2, x ** 3, x ** 4, x ** y, 2 ** y, x ** 0.5, x ** 2.0],
                    x[:, None], y[None, :])


# ---- extrema, comparisons, logic ------------------------------------------------------------------------------------
def _binary_float(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    return [torch.maximum(x, y), torch.minimum(x, y), torch.fmax(x, y), torch.fmin(x, y), torch.atan2(x, y),
            torch.copysign(x, y), torch.copysign(x, -1.0), torch.copysign(x, 0.0),
            x == y, x != y, x < y, x <= y, x > y, x >= y, x == 0.1, x != 1, x < 0.3, x <= -0.0, x > 2.5, x >= 1e-30,
            torch.logical_and(x, y), torch.logical_or(x, y), torch.logical_xor(x, y)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_extrema_comparisons_and_logic_on_floats(dtype: torch.dtype) -> None:
    v = floats(dtype, n=10, special=[NAN, INF, -INF, 0.0, -0.0, 0.1, 0.3, 1.0, -1.0, 2.5, 1e-30])
    check_inference(_binary_float, v[:, None], v[None, :], **TOL[dtype])


def test_comparisons_promote_like_pytorch() -> None:
    i = torch.tensor([-3, 0, 2, 3, 70000], dtype=torch.int32)
    h = torch.tensor([0.1, 2.5, -0.0, 65504.0, NAN], dtype=torch.float16)
    b = torch.tensor([True, False, True, False, True])
    z = torch.tensor(0.1)  # a 0-d float32 tensor: h is compared in float16
    check_inference(lambda i, h, b, z: [i < 2.5, i == 3.0, h == 0.1, h < z, h == z, i < h, i == h, b == 1, b < 0.5,
                                        b == b, b < i, i.to(torch.int64) > i, h > b, torch.maximum(i, h),
                                        torch.maximum(b, b), torch.minimum(b, ~b), torch.where(b, i, h),
                                        torch.where(b, h, z), torch.where(b, i, z), torch.clamp(h, z, 2.0),
                                        torch.atan2(h, z)], i, h, b, z)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool], ids=str)
def test_bitwise_logical_and_shifts(dtype: torch.dtype) -> None:
    if dtype == torch.bool:
        x = torch.tensor([True, False, True, False])
        y = torch.tensor([True, True, False, False])
        check_inference(lambda x, y: [x & y, x | y, x ^ y, ~x, x & True, x | False, torch.logical_and(x, y),
                                      torch.logical_or(x, y), torch.logical_xor(x, y), torch.maximum(x, y),
                                      torch.minimum(x, y), x == y, x < y], x, y)
        return
    x = torch.tensor([0, 1, 5, 100, 127, 37], dtype=dtype)
    if dtype != torch.uint8:
        x = torch.cat([x, -x - 1])
    y = torch.tensor([0, 1, 3, 7], dtype=dtype)
    check_inference(lambda x, y: [x & y, x | y, x ^ y, ~x, x & 6, x | 6, x ^ 5, x << y, x >> y, x << 2, x >> 1,
                                  torch.maximum(x, y), torch.minimum(x, y), torch.logical_and(x, y),
                                  torch.logical_xor(x, 1 - y), torch.clamp(x, 1, 50), torch.clamp(x, max=20)],
                    x[:, None], y[None, :])


# ---- where, clamp ---------------------------------------------------------------------------------------------------
def _where_clamp(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> list[torch.Tensor]:
    return [torch.where(x > 0, x, 0.0), torch.where(x > 0, 1.0, x), torch.where(x > 0.3, x, lo),
            torch.where(x < 0, 2, 3), torch.clamp(x, -1, 1), torch.clamp(x, min=0), torch.clamp(x, max=0.5),
            torch.clamp(x, 0.1, NAN), torch.clamp(x, lo, hi), torch.clamp(x, hi, lo), torch.clamp(x, min=lo),
            torch.clamp(x, max=hi), torch.clamp_min(x, 0.25), torch.clamp_max(x, -0.25), F.hardtanh(x),
            F.hardtanh(x, -2.0, 3.0), F.relu6(x), torch.clamp(x, 2.0, -2.0)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_where_and_clamp(dtype: torch.dtype) -> None:
    x = floats(dtype)
    lo = torch.linspace(-2, 0.5, x.numel()).to(dtype)
    lo[3] = NAN
    hi = torch.linspace(-0.5, 3, x.numel()).to(dtype)
    check_inference(_where_clamp, x, lo, hi, **TOL[dtype])


def test_integer_clamp_promotes_with_float_bounds() -> None:
    x = torch.arange(-5, 6, dtype=torch.int32)
    check_inference(lambda x: [torch.clamp(x, -2, 3), torch.clamp(x, -2.5, 3.5), torch.clamp(x, min=1),
                               torch.clamp_max(x, 2), torch.where(x > 0, x, 0.5)], x)


# ---- activations ----------------------------------------------------------------------------------------------------
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "sigmoid": torch.sigmoid,
    "tanh": torch.tanh, "relu": F.relu, "elu": F.elu, "elu_alpha": lambda x: F.elu(x, 0.5), "selu": F.selu,
    "celu": lambda x: F.celu(x, 0.7), "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "hardtanh": F.hardtanh,
    "relu6": F.relu6, "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=5.0), "mish": F.mish, "softsign": F.softsign,
    "logsigmoid": F.logsigmoid, "tanhshrink": F.tanhshrink, "hardshrink": F.hardshrink, "softshrink": F.softshrink,
    "threshold": lambda x: F.threshold(x, 0.1, 2.0),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_activations_inference(dtype: torch.dtype) -> None:
    # no infinities: eager PyTorch itself gives gelu(+inf) = NaN in its vectorised CPU loop and +inf otherwise
    x = floats(dtype, special=[NAN, 0.0, -0.0, 1e-30, -1e-7, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0, 6.0, 10.0, 25.0,
                               -25.0, 100.0, -100.0])
    check_inference(lambda x: [f(x) for f in ACTIVATIONS.values()], x, **TOL[dtype])


class Pointwise(torch.nn.Module):
    """sum_i f_i(x * w_i + b_i): each parameter's gradient comes from one function's backward graph."""

    def __init__(self, fns: list[Callable[..., torch.Tensor]], shape: tuple[int, ...]) -> None:
        super().__init__()
        self.fns = fns
        self.w = torch.nn.ParameterList([torch.nn.Parameter(torch.rand(shape) + 0.5) for _ in fns])
        self.b = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(shape) * 0.1) for _ in fns])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x * 0
        for f, w, b in zip(self.fns, self.w, self.b, strict=True):
            out = out + f(x * w + b)
        return out


MATH: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "exp": torch.exp, "expm1": torch.expm1, "log": lambda x: torch.log(x.abs() + 1),
    "log1p": lambda x: torch.log1p(x.abs()), "log2": lambda x: torch.log2(x.abs() + 0.5),
    "sqrt": lambda x: torch.sqrt(x.abs() + 0.1), "rsqrt": lambda x: torch.rsqrt(x.abs() + 1), "sin": torch.sin,
    "cos": torch.cos, "tan": lambda x: torch.tan(x * 0.3), "atan": torch.atan,
    "asin": lambda x: torch.asin(torch.tanh(x) * 0.9), "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh,
    "atanh": lambda x: torch.atanh(torch.tanh(x) * 0.9), "erf": torch.erf,
    "reciprocal": lambda x: torch.reciprocal(x.abs() + 1), "abs": torch.abs, "neg": torch.neg,
    "square": torch.square, "cube": lambda x: x ** 3, "pow": lambda x: (x.abs() + 0.1) ** 2.5,
    "pow_tt": lambda x: (x.abs() + 0.5) ** (x * 0.5), "exp_base": lambda x: 1.5 ** x,
    "div": lambda x: x / (x.abs() + 1), "div_scalar": lambda x: x / 3, "max": lambda x: torch.maximum(x, x * x - 1),
    "min": lambda x: torch.minimum(x, 1 - x), "atan2": lambda x: torch.atan2(x, x * x + 1),
    "where": lambda x: torch.where(x > 0.2, x * x, -x), "clamp": lambda x: torch.clamp(x, -0.5, 0.7),
    "clamp_t": lambda x: torch.clamp(x, min=x * 0.5 - 0.2), "fmod": lambda x: torch.fmod(x, 0.7),
    "remainder": lambda x: torch.remainder(x, 0.6), "round": torch.round, "lerp": lambda x: torch.lerp(x, x * x, 0.3),
    "lerp_t": lambda x: torch.lerp(x, torch.sin(x), torch.sigmoid(x)),
    "copysign": lambda x: torch.copysign(x, x - 0.1), "hypot_free": lambda x: torch.sqrt(x * x + 1),
    "half": lambda x: (x.half() * 2).float(), "double": lambda x: torch.exp(x.double()).float(),
}


@pytest.mark.parametrize("group", ["activations", "math"])
def test_training_through_pointwise_ops(group: str) -> None:
    torch.manual_seed(0)
    fns = list((ACTIVATIONS if group == "activations" else MATH).values())
    x = torch.randn(4, 6) * 2
    check_training(Pointwise(fns, (4, 6)), x, rtol=1e-4, atol=1e-5)


# ---- casts and creation ops ---------------------------------------------------------------------------------------
def _casts(x: torch.Tensor, i: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    fin = torch.where(x.abs() < INF, x, 0.0)
    return [fin.to(torch.int32), fin.to(torch.int64), x.to(torch.bool), x.half(), x.bfloat16(), x.double(),
            x.half().float(), i.half(), i.to(torch.bfloat16), i.float(), i.bool(), i.to(torch.uint8), b.float(),
            b.int(), (i > 0).to(torch.int8), x.half().bfloat16(), zero_signs(x.half()), zero_signs(x.to(torch.int32))]


def test_casts() -> None:
    x = floats(torch.float32, special=SPECIAL + [70000.0, 65519.0, 1e-8, -2.9, 2.9, -0.7])
    i = torch.tensor([-3, 0, 7, 2049, 2**24 + 1, -(2**31)], dtype=torch.int64)
    check_inference(_casts, x, i, torch.tensor([True, False]))


def _creation(x: torch.Tensor, i: torch.Tensor) -> list[torch.Tensor]:
    return [torch.full((2, 3), 1.5), torch.full((2,), 7), torch.full((), True), torch.full((2, 2), NAN),
            torch.full((3,), -INF, dtype=torch.float16), torch.zeros(3, dtype=torch.int32), torch.ones(2, 2),
            torch.full_like(x, 2.7, dtype=torch.int32), torch.full_like(x, -2.7, dtype=torch.int64),
            torch.full_like(x, 0.1, dtype=torch.float16), torch.zeros_like(x), torch.ones_like(x, dtype=torch.bool),
            torch.full_like(i, 3), torch.arange(5), torch.arange(1, 10, 3), torch.arange(0.0, 1.0, 0.1),
            torch.arange(5, 0, -1.5), torch.arange(-3, 3, dtype=torch.float16), torch.arange(10, dtype=torch.int32),
            torch.arange(-2, 2, 0.25, dtype=torch.float64), x + torch.arange(x.shape[-1]), torch.arange(0),
            torch.scalar_tensor(3), x.new_full((2,), -1.0), x.new_zeros(3), x.new_ones((1, 2), dtype=torch.int16),
            torch.where(x > 0, torch.tensor(2.0), x), x.clone().fill_(4.0), i.clone().fill_(-2)]


def test_creation_ops() -> None:
    check_inference(_creation, torch.randn(3, 5), torch.arange(4))


def test_empty_tensors_have_the_traced_type() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.empty(2, 3), torch.empty_like(x, dtype=torch.int64), torch.empty((4,), dtype=torch.float16)

    x = torch.randn(3, 5)
    with recording() as reports:
        got = compiled(fn)(x)
    for g, w in zip(got, fn(x), strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
    assert not fallbacks(reports), fallbacks(reports)


# ---- ATen ops that core-ATen decompositions remove (make_fx graphs keep them) --------------------------------------
def check_aten(fn: Callable[..., Any], *inputs: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-6,
               expect_fallbacks: dict[str, int] | None = None) -> None:
    """The harness's check, traced with fake tensors."""
    harness.check_aten(fn, *inputs, tracing_mode="fake", rtol=rtol, atol=atol, expect_fallbacks=expect_fallbacks)


def _non_decomposed(g: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    return [aten.threshold_backward(g, x, 0.0), aten.threshold_backward(g, x, 0.5), aten.sigmoid_backward(g, y),
            aten.tanh_backward(g, y), aten.silu_backward(g, x), aten.gelu_backward(g, x),
            aten.gelu_backward(g, x, approximate="tanh"), aten.silu(x), aten.mish(x), aten.softplus(x, 2.0, 3.0),
            aten.hardswish(x), aten.hardsigmoid(x), aten.lerp(x, y, 0.3), aten.lerp(x, y, -0.7), aten.lerp(x, y, w),
            aten.floor_divide(x, y), aten.floor_divide(x, 0.3), aten.fill(x, 2.5), aten.fill(x, w[0]),
            aten.zeros_like(x), aten.ones_like(x, dtype=torch.int32), aten.threshold(x, 0.2, -4.0), aten.square(x),
            aten.elu(x, 1.5, 1.2, 0.8), torch.ops.prims.convert_element_type(x, torch.float64),
            aten.round(x, decimals=2), aten.copysign(x, -2.0), aten.clamp(x, None, w), aten.sgn(x),
            aten.where(x > 0, 1.5, x), aten.where(x > 0, x, 2), aten.where(x > 0, 1.0, 2.0)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_ops_of_graphs_without_decompositions(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = floats(torch.float32, n=30, special=[NAN, 0.0, -0.0, 0.5, -0.5, 3.0, -3.0, 25.0, -25.0]).to(dtype)
    g, y, w = torch.randn(x.shape).to(dtype), torch.randn(x.shape).to(dtype), torch.rand(x.shape).to(dtype) * 2 - 0.5
    check_aten(_non_decomposed, g, x, y, w, **TOL[dtype])


def test_calls_opgraph_cannot_express_fall_back() -> None:
    x = torch.randn(2, 3, 4, 5)
    z = torch.randn(6, dtype=torch.complex64)
    check_aten(lambda x, z: [aten._to_copy(x, memory_format=torch.channels_last), aten._to_copy(x, device="cpu"),
                             aten.sgn(z), aten.sgn(x)], x, z,
               expect_fallbacks={"aten::_to_copy.default": 1, "aten::sgn.default": 1})
