"""Records for the first elementwise ops (arithmetic, cast); the elementwise family extends them."""

from __future__ import annotations

import numpy as np
import torch

import opgraph as og
from opgraph.ops import elementwise as ew
from opgraph.ops import unary

from .opinfo import ErrorCase, OpInfo, Sample, rand


def _binary_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for dt in (np.float32, np.float64, np.float16, np.int32, np.int64):
        out.append(Sample([rand(rng, (3, 4), dt), rand(rng, (4,), dt)], desc=f"{np.dtype(dt).name}-bcast"))
    out.append(Sample([rand(rng, (2, 1, 3), torch.bfloat16), rand(rng, (4, 1), torch.bfloat16)], desc="bf16-bcast"))
    return out


def _bad_broadcast(op: str) -> ErrorCase:
    def build(g: og.Graph) -> None:
        getattr(g, op)(g.placeholder((3, 4)), g.placeholder((5,)))
    return ErrorCase(build, og.ShapeError, "do not broadcast", "bad-broadcast")


RECORDS = [
    OpInfo("add", (ew.ADD,), lambda g, x, y: g.add(x, y), _binary_samples, np.add,
           errors=[_bad_broadcast("add")]),
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
    OpInfo("negative", (unary.NEGATIVE,), lambda g, x: -x,
           lambda rng: [Sample([rand(rng, (3, 2), np.float32)], desc="f32"),
                        Sample([rand(rng, (3,), np.int8, -9, 9)], desc="i8")], np.negative,
           errors=[ErrorCase(lambda g: g.negative(g.placeholder((2,), og.bool_)), og.DTypeError, "bool")]),
    OpInfo("exp", (unary.EXP,), lambda g, x: g.exp(x),
           lambda rng: [Sample([rand(rng, (3, 2), np.float32)], desc="f32"),
                        Sample([rand(rng, (3, 2), np.float64)], desc="f64")], np.exp,
           errors=[ErrorCase(lambda g: g.exp(g.placeholder((2,), og.int32)), og.DTypeError, "int32")]),
]
