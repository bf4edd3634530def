"""Records for the unary elementwise ops: math functions, rounding, predicates, bit ops."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import numpy as np
import scipy.special
import torch

import opgraph as og
from opgraph.ir.opdef import OpDef
from opgraph.ops import unary as u

from .opinfo import ErrorCase, OpInfo, Sample, rand

FLOATS = (np.float32, np.float64, np.float16, torch.bfloat16)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5], np.float32)


def _wide(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The oracle in float64 (complex128), cast back to the input's dtype: only the output is rounded."""

    def oracle(x: np.ndarray) -> np.ndarray:
        wide = np.complex128 if x.dtype.kind == "c" else np.float64
        with np.errstate(all="ignore"):
            return np.asarray(fn(x.astype(wide))).astype(x.dtype)

    return oracle


def _float_samples(low: float, high: float, complex_: bool = True, special: bool = True,
                   signed_away: bool = False) -> Callable[[np.random.Generator], list[Sample]]:
    """Samples in [low, high) for each float dtype; ``signed_away`` also mirrors them to negative values."""

    def samples(rng: np.random.Generator) -> list[Sample]:
        out = []
        for dt, shape in zip(FLOATS, [(3, 4), (5,), (2, 3), (4,)], strict=True):
            v = rand(rng, shape, dt, low, high)
            if signed_away:
                signs = np.where(rng.random(shape) < 0.5, -1, 1)
                v = v * (torch.from_numpy(signs).to(v.dtype) if isinstance(v, torch.Tensor) else signs.astype(v.dtype))
            name = "bfloat16" if dt is torch.bfloat16 else np.dtype(dt).name
            out.append(Sample([v], desc=name))
        out.append(Sample([rand(rng, (), np.float32, low, high)], desc="scalar"))
        out.append(Sample([np.zeros((0, 3), np.float32)], desc="empty"))
        if special:
            out.append(Sample([SPECIAL], desc="nan-inf"))
        if complex_:
            c = rand(rng, (6,), np.complex64, -1.5, 1.5)
            out.append(Sample([c], desc="complex64"))
        return out

    return samples


def _wrong_dtype(method: str, dtype: og.DType) -> ErrorCase:
    return ErrorCase(lambda g: getattr(g, method)(g.placeholder((2,), dtype)), og.DTypeError, dtype.name,
                     f"rejects-{dtype.name}")


def _float_record(method: str, op: OpDef, oracle: Callable[..., Any], low: float, high: float, *,
                  complex_: bool = True, special: bool = True, signed_away: bool = False,
                  tol: dict[Any, tuple[float, float]] | None = None) -> OpInfo:
    errors = [_wrong_dtype(method, og.int32), _wrong_dtype(method, og.bool_)]
    if not complex_:
        errors.append(_wrong_dtype(method, og.complex64))
    return OpInfo(method, (op,), lambda g, x: getattr(g, method)(x),
                  _float_samples(low, high, complex_, special, signed_away), _wide(oracle), errors=errors,
                  tol=tol or {})


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


MATH = [
    _float_record("exp", u.EXP, np.exp, -3, 3),
    _float_record("exp2", u.EXP2, np.exp2, -3, 3),
    _float_record("log", u.LOG, np.log, 0.1, 5),
    _float_record("log2", u.LOG2, np.log2, 0.1, 5),
    _float_record("log10", u.LOG10, np.log10, 0.1, 5),
    _float_record("sqrt", u.SQRT, np.sqrt, 0, 5),
    _float_record("rsqrt", u.RSQRT, _rsqrt, 0.1, 5),
    _float_record("reciprocal", u.RECIPROCAL, np.reciprocal, 0.2, 3, signed_away=True),
    _float_record("sin", u.SIN, np.sin, -4, 4),
    _float_record("cos", u.COS, np.cos, -4, 4),
    _float_record("tan", u.TAN, np.tan, -1.3, 1.3),
    _float_record("asin", u.ASIN, np.arcsin, -0.95, 0.95),
    _float_record("acos", u.ACOS, np.arccos, -0.95, 0.95),
    _float_record("atan", u.ATAN, np.arctan, -4, 4),
    _float_record("sinh", u.SINH, np.sinh, -3, 3),
    _float_record("cosh", u.COSH, np.cosh, -3, 3),
    _float_record("tanh", u.TANH, np.tanh, -3, 3),
    _float_record("asinh", u.ASINH, np.arcsinh, -4, 4),
    _float_record("acosh", u.ACOSH, np.arccosh, 1.05, 5),
    _float_record("atanh", u.ATANH, np.arctanh, -0.9, 0.9),
    _float_record("erf", u.ERF, scipy.special.erf, -3, 3, complex_=False),
]


# ---- rounding ------------------------------------------------------------------------------------
HALVES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, -0.49999997, 3.7, -3.7, 0.0, -0.0, 1e9 + 0.5,
                   np.inf, -np.inf, np.nan], np.float32)


def _rounding_samples(rng: np.random.Generator) -> list[Sample]:
    out = [Sample([HALVES], desc="float32-ties"),
           Sample([np.array([0.49999999999999994, -0.49999999999999994, 2.5, -3.5, 4503599627370495.5])],
                  desc="float64-ties"),
           Sample([(np.arange(-8, 8) / 2).astype(np.float16)], desc="float16-halves"),
           Sample([torch.arange(-8, 8, dtype=torch.bfloat16) / 2], desc="bfloat16-halves"),
           Sample([np.zeros((0, 2), np.float32)], desc="empty")]
    for dt in (np.float32, np.float64):
        out.append(Sample([rand(rng, (3, 5), dt, -20, 20)], desc=f"{np.dtype(dt).name}-random"))
    return out


def _rounding_grad_samples(rng: np.random.Generator) -> list[Sample]:
    # fractions kept away from 0 and 0.5, where the roundings jump
    def values(shape: tuple[int, ...]) -> np.ndarray:
        frac = rng.choice([0.15, 0.35, 0.65, 0.85], shape) + rng.uniform(-0.05, 0.05, shape)
        return rng.integers(-5, 5, shape) + frac

    return [Sample([values((3, 5))], desc="float64"), Sample([values((4,))], desc="float64-vector")]


def _round_half_away(x: np.ndarray) -> np.ndarray:
    def one(v: float) -> float:
        return float(Decimal(v).quantize(Decimal(1), ROUND_HALF_UP)) if math.isfinite(v) else v

    return np.vectorize(one, otypes=[np.float64])(x.astype(np.float64)).reshape(x.shape).astype(x.dtype)


def _rounding_record(method: str, op: OpDef, oracle: Callable[..., Any]) -> OpInfo:
    return OpInfo(method, (op,), lambda g, x: getattr(g, method)(x), _rounding_samples, oracle,
                  errors=[_wrong_dtype(method, og.int32), _wrong_dtype(method, og.complex64)],
                  grad_samples=_rounding_grad_samples)


ROUNDING = [
    _rounding_record("floor", u.FLOOR, np.floor),
    _rounding_record("ceil", u.CEIL, np.ceil),
    _rounding_record("round", u.ROUND, _round_half_away),
    _rounding_record("rint", u.RINT, np.rint),
    _rounding_record("truncate", u.TRUNCATE, np.trunc),
]


# ---- arithmetic on any numeric dtype ------------------------------------------------------------------
def _numeric_samples(ints: tuple[Any, ...], complex_: bool) -> Callable[[np.random.Generator], list[Sample]]:
    def samples(rng: np.random.Generator) -> list[Sample]:
        out = [Sample([SPECIAL], desc="float32-special"),
               Sample([rand(rng, (3, 4), np.float64, -5, 5)], desc="float64"),
               Sample([rand(rng, (2, 3), np.float16, -5, 5)], desc="float16"),
               Sample([rand(rng, (4,), torch.bfloat16, -5, 5)], desc="bfloat16")]
        for dt in ints:
            info = np.iinfo(dt)
            v = rng.integers(max(info.min, -100), min(info.max, 100), (5,), endpoint=True).astype(dt)
            v[0] = info.min
            out.append(Sample([v], desc=np.dtype(dt).name))
        if complex_:
            out.append(Sample([rand(rng, (4,), np.complex64, -3, 3)], desc="complex64"))
        return out

    return samples


def _sign(x: np.ndarray) -> np.ndarray:
    return np.sign(x)


ARITH = [
    OpInfo("abs", (u.ABS,), lambda g, x: abs(x), _numeric_samples((np.int8, np.int32, np.int64), True), np.abs,
           errors=[_wrong_dtype("abs", og.bool_)]),
    OpInfo("negative", (u.NEGATIVE,), lambda g, x: -x, _numeric_samples((np.int8, np.uint8, np.int64), True),
           np.negative, errors=[_wrong_dtype("negative", og.bool_)]),
    OpInfo("sign", (u.SIGN,), lambda g, x: g.sign(x), _numeric_samples((np.int8, np.uint8, np.int32), False),
           _sign, errors=[_wrong_dtype("sign", og.bool_), _wrong_dtype("sign", og.complex64)]),
    OpInfo("square", (u.SQUARE,), lambda g, x: g.square(x), _numeric_samples((np.int16, np.int64), True),
           np.square, errors=[_wrong_dtype("square", og.bool_)]),
]


# ---- predicates ----------------------------------------------------------------------------------------
def _predicate_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([SPECIAL], desc="float32-special"),
            Sample([np.array([np.nan, np.inf, -np.inf, 1.0, 65504.0], np.float16)], desc="float16"),
            Sample([torch.tensor([float("nan"), float("inf"), 2.0], dtype=torch.bfloat16)], desc="bfloat16"),
            Sample([np.array([[1e308, -np.inf], [np.nan, 0.0]])], desc="float64"),
            Sample([rand(rng, (4,), np.int32, -9, 9)], desc="int32")]


PREDICATES = [
    OpInfo(method, (op,), lambda g, x, m=method: getattr(g, m)(x), _predicate_samples, oracle,
           errors=[_wrong_dtype(method, og.bool_)])
    for method, op, oracle in (("isnan", u.ISNAN, np.isnan), ("isinf", u.ISINF, np.isinf),
                               ("isfinite", u.ISFINITE, np.isfinite))
]


# ---- logic and bits ------------------------------------------------------------------------------------
INT_DTYPES = (np.uint8, np.int8, np.int16, np.int32, np.int64)


def _int_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for dt in INT_DTYPES:
        info = np.iinfo(dt)
        v = rng.integers(info.min, info.max, (3, 4), endpoint=True, dtype=dt)
        v.flat[:3] = [info.min, info.max, 0]
        out.append(Sample([v], desc=np.dtype(dt).name))
    out.append(Sample([np.zeros((0,), np.int32)], desc="empty"))
    out.append(Sample([np.array(-1, np.int16)], desc="scalar"))
    return out


def _popcount(x: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(x).reshape(-1)
    bits = np.unpackbits(flat.view(np.uint8)).reshape(flat.size, x.dtype.itemsize * 8)
    return bits.sum(axis=1).reshape(x.shape).astype(x.dtype)


BITS = [
    OpInfo("logical_not", (u.LOGICAL_NOT,), lambda g, x: ~x,
           lambda rng: [Sample([rand(rng, (3, 4), np.bool_)], desc="bool"),
                        Sample([np.array(True)], desc="scalar")], np.logical_not,
           errors=[_wrong_dtype("logical_not", og.float32), _wrong_dtype("logical_not", og.int8)]),
    OpInfo("bitwise_not", (u.BITWISE_NOT,), lambda g, x: ~x, _int_samples, np.invert,
           errors=[_wrong_dtype("bitwise_not", og.float32), _wrong_dtype("bitwise_not", og.bool_)]),
    OpInfo("popcount", (u.POPCOUNT,), lambda g, x: g.popcount(x), _int_samples, _popcount,
           errors=[_wrong_dtype("popcount", og.float32), _wrong_dtype("popcount", og.bool_)]),
]

RECORDS = MATH + ROUNDING + ARITH + PREDICATES + BITS
