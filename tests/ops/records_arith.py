"""Records for the arithmetic binary ops (add ... atan2) and cast: broadcasting, promotion, weak scalars."""

from __future__ import annotations

import numpy as np
import torch

import opgraph as og
from opgraph.ops import elementwise as ew

from .opinfo import ErrorCase, OpInfo, Sample, rand


def _binary_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for dt in (np.float32, np.float64, np.float16, np.int32, np.int64):
        out.append(Sample([rand(rng, (3, 4), dt), rand(rng, (4,), dt)], desc=f"{np.dtype(dt).name}-bcast"))
    out.append(Sample([rand(rng, (2, 1, 3), torch.bfloat16), rand(rng, (4, 1), torch.bfloat16)], desc="bf16-bcast"))
    return out


def _promotion_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, (3, 4), np.int32, -9, 9), rand(rng, (4,), np.float16)], desc="int32-float16"),
            Sample([rand(rng, (5,), np.uint8, 0, 200), rand(rng, (5,), np.int8, -100, 100)], desc="uint8-int8"),
            Sample([rand(rng, (2, 3), np.float32), rand(rng, (2, 1), np.float64)], desc="float32-float64"),
            Sample([rand(rng, (3,), np.bool_), rand(rng, (3,), np.int16, -9, 9)], desc="bool-int16"),
            Sample([rand(rng, (2,), np.complex64), rand(rng, (2,), np.float32)], desc="complex64-float32"),
            Sample([np.zeros((0, 3), np.float32), np.ones((1, 3), np.float32)], desc="empty")]


def _scalar_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, (3,), np.float16)], {"s": 3}, "float16-int-scalar"),
            Sample([rand(rng, (3,), np.int8, -9, 9)], {"s": 3}, "int8-int-scalar"),
            Sample([rand(rng, (3,), np.int8, -9, 9)], {"s": 1.5}, "int8-float-scalar"),
            Sample([rand(rng, (3,), torch.bfloat16)], {"s": -0.25}, "bf16-float-scalar")]


def _add_scalar_oracle(x: np.ndarray, s: float) -> np.ndarray:
    if x.dtype.kind in "iu" and isinstance(s, float):
        return (x.astype(np.float32) + np.float32(s), s + x.astype(np.float32))
    return (np.add(x, s), np.add(s, x))


def _bad_broadcast(op: str) -> ErrorCase:
    def build(g: og.Graph) -> None:
        getattr(g, op)(g.placeholder((3, 4)), g.placeholder((5,)))
    return ErrorCase(build, og.ShapeError, "do not broadcast", "bad-broadcast")


RECORDS = [
    OpInfo("add", (ew.ADD,), lambda g, x, y: g.add(x, y), _binary_samples, np.add,
           errors=[_bad_broadcast("add")]),
    OpInfo("add-promotion", (ew.ADD,), lambda g, x, y: x + y, _promotion_samples,
           lambda x, y: np.add(x, y)),
    OpInfo("add-weak-scalar", (ew.ADD,), lambda g, x, s: [x + s, s + x], _scalar_samples, _add_scalar_oracle),
    OpInfo("subtract", (ew.SUBTRACT,), lambda g, x, y: g.subtract(x, y), _binary_samples, np.subtract,
           errors=[_bad_broadcast("subtract")]),
    OpInfo("multiply", (ew.MULTIPLY,), lambda g, x, y: x * y, _binary_samples, np.multiply),
    OpInfo("divide", (ew.DIVIDE,), lambda g, x, y: g.divide(x, y),
           lambda rng: [Sample([rand(rng, (3, 4), np.float32), rand(rng, (4,), np.float32, 0.5, 2)], desc="f32"),
                        Sample([rand(rng, (5,), np.int32, -20, 20), rand(rng, (5,), np.int32, 1, 5)], desc="i32")],
           lambda x, y: np.trunc(x / y).astype(x.dtype) if x.dtype.kind == "i" else x / y),
    OpInfo("cast", (ew.CAST,), lambda g, x, dtype: g.cast(x, dtype),
           lambda rng: [Sample([rand(rng, (6,), np.float32, -9, 9)], {"dtype": og.int32}, "f32-i32"),
                        Sample([rand(rng, (6,), np.int64, -9, 9)], {"dtype": og.float16}, "i64-f16"),
                        Sample([rand(rng, (6,), np.float32)], {"dtype": og.bool_}, "f32-bool")],
           lambda x, dtype: x.astype({"int32": np.int32, "float16": np.float16, "bool": np.bool_}[dtype.name]),
           errors=[ErrorCase(lambda g: g.cast(g.placeholder((2,)), og.int4), og.DTypeError, "4-bit")]),
]


# ---- division variants, modulo, power --------------------------------------------------------------
def _with_zeros(v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    v = v.copy()
    v.flat[rng.choice(v.size, max(1, v.size // 3), replace=False)] = 0
    return v


def _div_no_nan_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for dt in (np.float32, np.float64, np.float16):
        out.append(Sample([rand(rng, (3, 4), dt), _with_zeros(rand(rng, (4,), dt, 0.5, 2), rng)],
                          desc=f"{np.dtype(dt).name}-zeros"))
    out.append(Sample([np.array([0.0, np.nan, np.inf, 1.0], np.float32), np.zeros(4, np.float32)], desc="nan-by-0"))
    out.append(Sample([rand(rng, (6,), np.int32, -20, 20), _with_zeros(rand(rng, (6,), np.int32, 1, 5), rng)],
                      desc="int32-zeros"))
    return out


def _div_no_nan(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    safe = np.where(y == 0, 1, y)
    q = np.trunc(x / safe).astype(x.dtype) if x.dtype.kind in "iu" else x / safe
    return np.where(y == 0, 0, q).astype(np.result_type(x, y))


def _div_no_nan_grad_samples(rng: np.random.Generator) -> list[Sample]:
    # finite differences are meaningless across y == 0: see division_no_nan-zero-divisor for the x gradient there
    signs = np.array([1, -1, 1, -1])
    return [Sample([rand(rng, (3, 4), np.float64), rand(rng, (4,), np.float64, 0.5, 2) * signs], desc="bcast"),
            Sample([rand(rng, (5,), np.float64), rand(rng, (5,), np.float64, 0.5, 2)], desc="same-shape")]


ZERO_DIVISORS = np.array([0.0, 2.0, 0.0, -0.5])


def _div_no_nan_zero_divisor_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, (3, 4), dt)], desc=np.dtype(dt).name) for dt in (np.float32, np.float64, np.float16)]


def _mod_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for dt in (np.float32, np.float64, np.float16):
        d = rand(rng, (4,), dt, 0.5, 3) * np.array([1, -1, 1, -1], dt)
        out.append(Sample([rand(rng, (3, 4), dt, -9, 9), d], desc=f"{np.dtype(dt).name}-signs"))
    for dt in (np.int8, np.int32, np.int64):
        d = rand(rng, (5,), dt, 1, 6) * np.array([1, -1, 1, -1, 1], dt)
        out.append(Sample([rand(rng, (2, 5), dt, -50, 50), d], desc=f"{np.dtype(dt).name}-signs"))
    out.append(Sample([rand(rng, (2, 3), torch.bfloat16, -9, 9), torch.tensor([2.0, -3.0, 1.5], dtype=torch.bfloat16)],
                      desc="bf16"))
    out.append(Sample([np.array([5.0, np.inf, np.nan, -0.0], np.float32),
                       np.array([np.inf, 2.0, 2.0, 3.0], np.float32)], desc="special"))
    return out


def _power_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for dt in (np.float32, np.float64, np.float16):
        out.append(Sample([rand(rng, (3, 4), dt, 0.1, 3), rand(rng, (4,), dt, -2, 2)], desc=f"{np.dtype(dt).name}"))
    out.append(Sample([rand(rng, (3,), torch.bfloat16, 0.1, 3), rand(rng, (3,), torch.bfloat16, -2, 2)], desc="bf16"))
    out.append(Sample([np.array([-2.0, -2.0, 0.0, 0.0, np.nan, 1.0], np.float32),
                       np.array([3.0, 0.5, -1.0, 0.0, 0.0, np.nan], np.float32)], desc="special"))
    for dt in (np.int8, np.int32, np.int64):
        out.append(Sample([rand(rng, (2, 4), dt, -3, 4), rand(rng, (4,), dt, 0, 4)], desc=f"{np.dtype(dt).name}"))
    out.append(Sample([rand(rng, (3,), np.complex64, -1, 1), rand(rng, (3,), np.complex64, -1, 1)], desc="complex64"))
    return out


def _power_grad_samples(rng: np.random.Generator) -> list[Sample]:
    # a positive base (the y-gradient of x ** y needs log x); exponents include 0 and integers
    y = rand(rng, (4,), np.float64, -2, 2)
    y[:2] = [0.0, 2.0]
    return [Sample([rand(rng, (3, 4), np.float64, 0.1, 3), y], desc="bcast-int-exponents"),
            Sample([rand(rng, (5,), np.float64, 0.1, 3), rand(rng, (5,), np.float64, -2, 2)], desc="same-shape")]


def _power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if x.dtype.kind == "f":
            return np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)
        return np.power(x, y)


def _fmod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.fmod(x, y)


def _floor_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.mod(x, y)


# ---- maximum / minimum, atan2 ------------------------------------------------------------------------
NANS = np.array([np.nan, 1.0, np.nan, -np.inf, 0.0, 2.0], np.float32)
NANS_Y = np.array([1.0, np.nan, np.nan, 3.0, -0.0, np.inf], np.float32)


def _minmax_samples(rng: np.random.Generator) -> list[Sample]:
    out = [Sample([NANS, NANS_Y], desc="nan"),
           Sample([NANS.astype(np.float16).reshape(2, 3), NANS_Y.astype(np.float16)[:3]], desc="float16-nan-bcast"),
           Sample([torch.from_numpy(NANS).to(torch.bfloat16), torch.from_numpy(NANS_Y).to(torch.bfloat16)],
                  desc="bf16-nan"),
           Sample([rand(rng, (3, 1), np.float64), rand(rng, (4,), np.float64)], desc="float64-bcast")]
    for dt in (np.uint8, np.int8, np.int32, np.int64):
        out.append(Sample([rand(rng, (3, 4), dt, 0, 100), rand(rng, (4,), dt, 0, 100)], desc=np.dtype(dt).name))
    return out


def _minmax_grad_samples(rng: np.random.Generator) -> list[Sample]:
    # x and y on grids offset by 0.2, so they never tie (a tie's gradient goes to x)
    def grid(shape: tuple[int, ...], offset: float) -> np.ndarray:
        return rng.integers(-6, 6, shape) * 0.5 + offset

    return [Sample([grid((3, 1), 0.1), grid((4,), 0.3)], desc="bcast"),
            Sample([grid((2, 3), 0.3), grid((2, 3), 0.1)], desc="same-shape")]


def _atan2_samples(rng: np.random.Generator) -> list[Sample]:
    out = [Sample([rand(rng, (3, 4), dt, -3, 3), rand(rng, (4,), dt, -3, 3)], desc=np.dtype(dt).name)
           for dt in (np.float32, np.float64, np.float16)]
    out.append(Sample([rand(rng, (3,), torch.bfloat16), rand(rng, (3,), torch.bfloat16)], desc="bf16"))
    out.append(Sample([np.array([0.0, -0.0, 1.0, -1.0, np.inf, np.nan, 0.0], np.float32),
                       np.array([-0.0, -1.0, 0.0, 0.0, np.inf, 1.0, 0.0], np.float32)], desc="special"))
    return out


def _wrong(method: str, dtype: og.DType) -> ErrorCase:
    return ErrorCase(lambda g: getattr(g, method)(g.placeholder((2,), dtype), g.placeholder((2,), dtype)),
                     og.DTypeError, dtype.name, f"rejects-{dtype.name}")


RECORDS += [
    OpInfo("division_no_nan", (ew.DIVISION_NO_NAN,), lambda g, x, y: g.division_no_nan(x, y), _div_no_nan_samples,
           _div_no_nan, errors=[_bad_broadcast("division_no_nan"), _wrong("division_no_nan", og.bool_)],
           grad_samples=_div_no_nan_grad_samples),
    OpInfo("division_no_nan-zero-divisor", (ew.DIVISION_NO_NAN,),
           lambda g, x: g.division_no_nan(x, g.constant(ZERO_DIVISORS, x.dtype)), _div_no_nan_zero_divisor_samples,
           lambda x: _div_no_nan(x, ZERO_DIVISORS.astype(x.dtype))),
    OpInfo("modulo", (ew.MODULO,), lambda g, x, y: g.modulo(x, y), _mod_samples, _fmod,
           errors=[_wrong("modulo", og.complex64), _wrong("modulo", og.bool_)]),
    OpInfo("floor_modulo", (ew.FLOOR_MODULO,), lambda g, x, y: x % y, _mod_samples, _floor_mod,
           errors=[_wrong("floor_modulo", og.complex64), _bad_broadcast("floor_modulo")]),
    OpInfo("power", (ew.POWER,), lambda g, x, y: x**y, _power_samples, _power,
           errors=[_wrong("power", og.bool_)], tol={torch.complex64: (1e-4, 1e-5)}, grad_samples=_power_grad_samples),
    OpInfo("power-scalar", (ew.POWER,), lambda g, x: [x**2, 2**x, g.power(x, 0.5)],
           lambda rng: [Sample([rand(rng, (4,), np.float32, 0.1, 3)], desc="float32"),
                        Sample([rand(rng, (4,), np.int32, 0, 5)], desc="int32")],
           lambda x: [x**2, 2**x, np.sqrt(x.astype(np.float32))]),
    OpInfo("maximum", (ew.MAXIMUM,), lambda g, x, y: g.maximum(x, y), _minmax_samples, np.fmax,
           errors=[_wrong("maximum", og.complex64), _wrong("maximum", og.bool_)], grad_samples=_minmax_grad_samples),
    OpInfo("minimum", (ew.MINIMUM,), lambda g, x, y: g.minimum(x, y), _minmax_samples, np.fmin,
           errors=[_wrong("minimum", og.complex64)], grad_samples=_minmax_grad_samples),
    OpInfo("maximum_with_nan_propagation", (ew.MAXIMUM_NAN,), lambda g, x, y: g.maximum_with_nan_propagation(x, y),
           _minmax_samples, np.maximum, errors=[_wrong("maximum_with_nan_propagation", og.complex64)],
           grad_samples=_minmax_grad_samples),
    OpInfo("minimum_with_nan_propagation", (ew.MINIMUM_NAN,), lambda g, x, y: g.minimum_with_nan_propagation(x, y),
           _minmax_samples, np.minimum, errors=[_bad_broadcast("minimum_with_nan_propagation")],
           grad_samples=_minmax_grad_samples),
    OpInfo("atan2", (ew.ATAN2,), lambda g, y, x: g.atan2(y, x), _atan2_samples,
           lambda y, x: np.arctan2(y.astype(np.float64), x.astype(np.float64)).astype(y.dtype),
           errors=[_wrong("atan2", og.int32), _wrong("atan2", og.complex64)]),
]
