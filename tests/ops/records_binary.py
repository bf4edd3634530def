"""Records for comparisons, logic, bitwise and shift ops, select, clamp and reinterpret_cast."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import elementwise as ew

from .opinfo import ErrorCase, OpInfo, Sample, rand


def _bad_broadcast(method: str, dtype: og.DType = og.float32) -> ErrorCase:
    return ErrorCase(lambda g: getattr(g, method)(g.placeholder((3, 4), dtype), g.placeholder((5,), dtype)),
                     og.ShapeError, "do not broadcast", "bad-broadcast")


def _wrong(method: str, dtype: og.DType) -> ErrorCase:
    return ErrorCase(lambda g: getattr(g, method)(g.placeholder((2,), dtype), g.placeholder((2,), dtype)),
                     og.DTypeError, dtype.name, f"rejects-{dtype.name}")


# ---- comparisons --------------------------------------------------------------------------------
def _compare_samples(rng: np.random.Generator) -> list[Sample]:
    f = np.array([np.nan, 1.0, 2.0, -np.inf, 0.0, np.inf], np.float32)
    out = [Sample([f, np.array([np.nan, 2.0, 2.0, -np.inf, -0.0, 1.0], np.float32)], desc="float32-special"),
           Sample([rand(rng, (3, 1), np.int32, -3, 3), rand(rng, (4,), np.int32, -3, 3)], desc="int32-bcast"),
           Sample([rand(rng, (2, 4), np.int32, -3, 3), rand(rng, (4,), np.float16, -3, 3)], desc="int32-float16"),
           Sample([rand(rng, (5,), np.uint8, 0, 200), rand(rng, (5,), np.int8, -100, 100)], desc="uint8-int8"),
           Sample([rand(rng, (6,), np.bool_), rand(rng, (6,), np.bool_)], desc="bool"),
           Sample([rand(rng, (3,), torch.bfloat16), rand(rng, (3,), torch.bfloat16)], desc="bf16"),
           Sample([np.zeros((0,), np.float64), np.ones((1,), np.float64)], desc="empty")]
    return out


def _compare_record(method: str, op: Any, oracle: Any, ordered: bool) -> OpInfo:
    errors = [_bad_broadcast(method)]
    if ordered:
        errors.append(_wrong(method, og.complex64))
    return OpInfo(method, (op,), lambda g, x, y: getattr(g, method)(x, y), _compare_samples, oracle,
                  errors=errors)


COMPARISONS = [
    _compare_record("equal", ew.EQUAL, np.equal, False),
    _compare_record("not_equal", ew.NOT_EQUAL, np.not_equal, False),
    _compare_record("less", ew.LESS, np.less, True),
    _compare_record("less_equal", ew.LESS_EQUAL, np.less_equal, True),
    _compare_record("greater", ew.GREATER, np.greater, True),
    _compare_record("greater_equal", ew.GREATER_EQUAL, np.greater_equal, True),
    OpInfo("comparison-operators", (ew.EQUAL, ew.NOT_EQUAL, ew.LESS, ew.LESS_EQUAL, ew.GREATER, ew.GREATER_EQUAL),
           lambda g, x: [x == 1, x != 1, x < 1, x <= 1, x > 1, x >= 1, 1.5 > x],  # noqa: SIM300 (reflected)
           lambda rng: [Sample([np.array([0, 1, 2], np.int8)], desc="int8"),
                        Sample([np.array([0.5, 1.0, np.nan, 2.0], np.float32)], desc="float32")],
           lambda x: [x == 1, x != 1, x < 1, x <= 1, x > 1, x >= 1, x < 1.5]),
    OpInfo("equal-complex", (ew.EQUAL, ew.NOT_EQUAL), lambda g, x, y: [g.equal(x, y), g.not_equal(x, y)],
           lambda rng: [Sample([np.array([1 + 1j, 2, 1j], np.complex64), np.array([1 + 1j, 2j, 1j], np.complex64)],
                               desc="complex64")],
           lambda x, y: [x == y, x != y]),
]


# ---- logic ----------------------------------------------------------------------------------------
def _bool_samples(rng: np.random.Generator) -> list[Sample]:
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    return [Sample([a, b], desc="truth-table"),
            Sample([rand(rng, (3, 1), np.bool_), rand(rng, (4,), np.bool_)], desc="bcast"),
            Sample([np.array(True), rand(rng, (2, 2), np.bool_)], desc="scalar")]


def _logic_record(method: str, op: Any, oracle: Any) -> OpInfo:
    return OpInfo(method, (op,), lambda g, x, y: getattr(g, method)(x, y), _bool_samples, oracle,
                  errors=[_wrong(method, og.float32), _wrong(method, og.int32), _bad_broadcast(method, og.bool_),
                          ErrorCase(lambda g: getattr(g, method)(g.placeholder((2,), og.bool_), 1), og.DTypeError,
                                    "int64", "int-scalar")])


LOGIC = [
    _logic_record("logical_and", ew.LOGICAL_AND, np.logical_and),
    _logic_record("logical_or", ew.LOGICAL_OR, np.logical_or),
    _logic_record("logical_xor", ew.LOGICAL_XOR, np.logical_xor),
    _logic_record("logical_nand", ew.LOGICAL_NAND, lambda x, y: ~np.logical_and(x, y)),
    _logic_record("logical_nor", ew.LOGICAL_NOR, lambda x, y: ~np.logical_or(x, y)),
    _logic_record("logical_xnor", ew.LOGICAL_XNOR, lambda x, y: ~np.logical_xor(x, y)),
    OpInfo("logical-operators", (ew.LOGICAL_AND, ew.LOGICAL_OR, ew.LOGICAL_XOR),
           lambda g, x, y: [x & y, x | y, x ^ y, x & True], _bool_samples,
           lambda x, y: [x & y, x | y, x ^ y, x & True]),
]


# ---- bits -----------------------------------------------------------------------------------------
INTS = (np.uint8, np.int8, np.int16, np.int32, np.int64)


def _int_pair_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for dt in INTS:
        info = np.iinfo(dt)
        out.append(Sample([rng.integers(info.min, info.max, (3, 4), endpoint=True, dtype=dt),
                           rng.integers(info.min, info.max, (4,), endpoint=True, dtype=dt)], desc=np.dtype(dt).name))
    out.append(Sample([rand(rng, (5,), np.bool_), rand(rng, (5,), np.bool_)], desc="bool"))
    return out


def _shift_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for dt in INTS:
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max, (3, 6), endpoint=True, dtype=dt)
        x[0, :2] = [info.min, info.max]
        out.append(Sample([x, rng.integers(0, info.bits, (6,), dtype=dt)], desc=np.dtype(dt).name))
    return out


def _bit_record(method: str, op: Any, oracle: Any, samples: Any, bool_ok: bool) -> OpInfo:
    errors = [_wrong(method, og.float32), _bad_broadcast(method, og.int32)]
    if not bool_ok:
        errors.append(_wrong(method, og.bool_))
    return OpInfo(method, (op,), lambda g, x, y: getattr(g, method)(x, y), samples, oracle, errors=errors)


BITS = [
    _bit_record("bitwise_and", ew.BITWISE_AND, np.bitwise_and, _int_pair_samples, True),
    _bit_record("bitwise_or", ew.BITWISE_OR, np.bitwise_or, _int_pair_samples, True),
    _bit_record("bitwise_xor", ew.BITWISE_XOR, np.bitwise_xor, _int_pair_samples, True),
    _bit_record("shift_left", ew.SHIFT_LEFT, np.left_shift, _shift_samples, False),
    _bit_record("shift_right", ew.SHIFT_RIGHT, np.right_shift, _shift_samples, False),
    OpInfo("bitwise-operators", (ew.BITWISE_AND, ew.BITWISE_OR, ew.BITWISE_XOR, ew.SHIFT_LEFT),
           lambda g, x: [x & 6, x | 6, x ^ 6, g.shift_left(x, 2)],
           lambda rng: [Sample([rand(rng, (4,), np.int16, -50, 50)], desc="int16")],
           lambda x: [x & 6, x | 6, x ^ 6, np.left_shift(x, 2)]),
]


# ---- select, clamp ------------------------------------------------------------------------------------
def _select_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, (3, 1), np.bool_), rand(rng, (4,), np.float32), rand(rng, (1, 4), np.float32)],
                   desc="float32-bcast"),
            Sample([rand(rng, (5,), np.bool_), rand(rng, (5,), np.int64, -9, 9), rand(rng, (5,), np.int64, -9, 9)],
                   desc="int64"),
            Sample([rand(rng, (2, 3), np.bool_), rand(rng, (3,), torch.bfloat16), rand(rng, (2, 1), torch.bfloat16)],
                   desc="bf16"),
            Sample([np.array([True, False]), np.array([np.nan, 1.0]), np.array([2.0, np.nan])], desc="nan"),
            Sample([np.array(True), rand(rng, (2,), np.int8, -9, 9), rand(rng, (2,), np.float16)], desc="promote")]


def _select_with_scalar(g: og.Graph, p: og.Tensor, x: og.Tensor) -> list[og.Tensor]:
    return [g.select(p, x, 0), g.select(p, 1.5, x), g.select(True, x, 0)]


def _clamp_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for dt in (np.float32, np.float64, np.float16, np.int32, np.int8):
        out.append(Sample([rand(rng, (3, 4), dt, -5, 5), rand(rng, (4,), dt, -3, 0), rand(rng, (3, 1), dt, 0, 3)],
                          desc=f"{np.dtype(dt).name}-bcast"))
    out.append(Sample([np.array([np.nan, -np.inf, np.inf, 0.5], np.float32), np.zeros(1, np.float32),
                       np.ones(1, np.float32)], desc="special"))
    out.append(Sample([np.array([-1.0, 0.5, 4.0], np.float32), np.array([2.0], np.float32),
                       np.array([1.0], np.float32)], desc="crossed-bounds"))
    out.append(Sample([rand(rng, (4,), torch.bfloat16), rand(rng, (1,), torch.bfloat16, -1, 0),
                       rand(rng, (1,), torch.bfloat16, 0, 1)], desc="bf16"))
    return out


def _clamp_grad_samples(rng: np.random.Generator) -> list[Sample]:
    # random values never tie with the bounds; with crossed bounds the result (and gradient) is max_value
    return [Sample([rand(rng, (3, 4), np.float64, -5, 5), rand(rng, (4,), np.float64, -3, 0),
                    rand(rng, (3, 1), np.float64, 0, 3)], desc="bcast"),
            Sample([np.array([-1.0, 0.5, 1.5, 4.0]), np.array([2.0]), np.array([1.0])], desc="crossed-bounds")]


def _clamp_oracle(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(x, lo), hi)


SELECT_CLAMP = [
    OpInfo("select", (ew.SELECT,), lambda g, p, x, y: g.select(p, x, y), _select_samples, np.where,
           errors=[ErrorCase(lambda g: g.select(g.placeholder((2,)), g.placeholder((2,)), g.placeholder((2,))),
                             og.DTypeError, "predicate dtype float32", "float-predicate"),
                   ErrorCase(lambda g: g.select(g.placeholder((2,), og.bool_), g.placeholder((3,)), 0.0),
                             og.ShapeError, "do not broadcast", "bad-broadcast")]),
    OpInfo("select-scalars", (ew.SELECT,), _select_with_scalar,
           lambda rng: [Sample([rand(rng, (2, 3), np.bool_), rand(rng, (3,), np.float16)], desc="float16"),
                        Sample([rand(rng, (4,), np.bool_), rand(rng, (4,), np.int32, -9, 9)], desc="int32")],
           lambda p, x: [np.where(p, x, 0), np.where(p, 1.5, x).astype(x.dtype if x.dtype.kind == "f" else np.float32),
                         np.broadcast_to(x, x.shape)]),
    OpInfo("clamp", (ew.CLAMP,), lambda g, x, lo, hi: g.clamp(x, lo, hi), _clamp_samples, _clamp_oracle,
           errors=[ErrorCase(lambda g: g.clamp(g.placeholder((3, 4)), g.placeholder((5,)), 1.0), og.ShapeError,
                             "do not broadcast", "bad-broadcast"),
                   ErrorCase(lambda g: g.clamp(g.placeholder((2,), og.bool_), False, True), og.DTypeError, "bool",
                             "bool"),
                   ErrorCase(lambda g: g.clamp(g.placeholder((2,), og.complex64), 0.0, 1.0), og.DTypeError,
                             "complex64", "complex")],
           grad_samples=_clamp_grad_samples),
    OpInfo("clamp-scalars", (ew.CLAMP,), lambda g, x: g.clamp(x, -1, 1.5),
           lambda rng: [Sample([rand(rng, (5,), np.float16, -3, 3)], desc="float16"),
                        Sample([rand(rng, (5,), np.int32, -3, 3)], desc="int32-to-float32")],
           lambda x: np.clip(x, -1, 1.5).astype(x.dtype if x.dtype.kind == "f" else np.float32)),
]


# ---- reinterpret_cast ----------------------------------------------------------------------------------
def _reinterpret_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, (2, 3), np.float32)], {"dtype": og.int32}, "float32-int32"),
            Sample([rand(rng, (2, 3), np.float32)], {"dtype": og.int16}, "float32-int16"),
            Sample([rand(rng, (3, 8), np.int8, -100, 100)], {"dtype": og.float32}, "int8-float32"),
            Sample([rand(rng, (4,), np.float64)], {"dtype": og.float32}, "float64-float32"),
            Sample([rand(rng, (2, 4), np.uint8, 0, 255)], {"dtype": og.float16}, "uint8-float16"),
            Sample([rand(rng, (3,), np.uint8, 0, 2)], {"dtype": og.bool_}, "uint8-bool"),
            Sample([np.array(-1.5, np.float32)], {"dtype": og.int32}, "scalar"),
            Sample([np.zeros((0, 2), np.int16)], {"dtype": og.int32}, "empty"),
            Sample([rand(rng, (2, 2), np.complex64)], {"dtype": og.float32}, "complex64-float32")]


def _reinterpret_oracle(x: np.ndarray, dtype: og.DType) -> np.ndarray:
    target = np.dtype(dtype.name)
    if x.ndim == 0:
        return x.reshape(1).view(target).reshape(())
    return np.ascontiguousarray(x).view(target)


REINTERPRET = [
    OpInfo("reinterpret_cast", (ew.REINTERPRET_CAST,), lambda g, x, dtype: g.reinterpret_cast(x, dtype),
           _reinterpret_samples, _reinterpret_oracle,
           errors=[ErrorCase(lambda g: g.reinterpret_cast(g.placeholder((2, 3)), og.float64), og.ShapeError,
                             "not a multiple", "indivisible"),
                   ErrorCase(lambda g: g.reinterpret_cast(g.placeholder(()), og.int16), og.ShapeError, "rank",
                             "scalar-resize"),
                   ErrorCase(lambda g: g.reinterpret_cast(g.placeholder((4,), og.uint8), og.int4), og.DTypeError,
                             "4-bit", "int4")]),
]

RECORDS = COMPARISONS + LOGIC + BITS + SELECT_CLAMP + REINTERPRET
