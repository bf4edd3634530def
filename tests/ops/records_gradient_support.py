"""Records for fill_like, broadcast_like and sum_to (the ops gradient rules build)."""

from __future__ import annotations

import numpy as np

import opgraph as og
from opgraph.ops import gradient_support as gs

from .opinfo import ErrorCase, OpInfo, Sample, rand


def _sum_to_oracle(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    lead = x.ndim - ref.ndim
    out = x.sum(axis=tuple(range(lead))) if lead else x
    axes = tuple(i for i, (a, b) in enumerate(zip(out.shape, ref.shape, strict=True)) if b == 1 and a != 1)
    return out.sum(axis=axes, keepdims=True) if axes else out


RECORDS = [
    OpInfo("fill_like", (gs.FILL_LIKE,), lambda g, x, value, dtype: g.fill_like(x, value, dtype),
           lambda rng: [Sample([rand(rng, (2, 3), np.float32)], {"value": 1.5, "dtype": None}, "f32"),
                        Sample([rand(rng, (4,), np.int32, 0, 5)], {"value": 0, "dtype": og.float64}, "i32-to-f64")],
           lambda x, value, dtype: np.full(x.shape, value, dtype=x.dtype if dtype is None else np.float64)),
    OpInfo("broadcast_like", (gs.BROADCAST_LIKE,), lambda g, x, ref: g.broadcast_like(x, ref),
           lambda rng: [Sample([rand(rng, (3, 1), np.float32), rand(rng, (2, 3, 4), np.float32)], desc="f32"),
                        Sample([rand(rng, (4,), np.float64), rand(rng, (3, 4), np.float64)], desc="f64")],
           lambda x, ref: np.broadcast_to(x, np.broadcast_shapes(x.shape, ref.shape)),
           errors=[ErrorCase(lambda g: g.broadcast_like(g.placeholder((2, 3)), g.placeholder((3,))),
                             og.ShapeError, "rank"),
                   ErrorCase(lambda g: g.broadcast_like(g.placeholder((4, 3)), g.placeholder((1, 3))),
                             og.ShapeError, "cannot broadcast")]),
    OpInfo("sum_to", (gs.SUM_TO,), lambda g, x, ref: g.sum_to(x, ref),
           lambda rng: [Sample([rand(rng, (2, 3, 4), np.float32), rand(rng, (3, 1), np.float32)], desc="f32"),
                        Sample([rand(rng, (3, 4), np.float64), rand(rng, (4,), np.float64)], desc="f64"),
                        Sample([rand(rng, (5, 2), np.int32, -5, 5), rand(rng, (1, 2), np.int32)], desc="i32")],
           _sum_to_oracle,
           errors=[ErrorCase(lambda g: g.sum_to(g.placeholder((2, 3)), g.placeholder((4,))),
                             og.ShapeError, "broadcast")]),
]
