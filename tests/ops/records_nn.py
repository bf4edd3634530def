"""Records for softmax and log_softmax (NumPy float64 oracles, max-subtracted)."""

from __future__ import annotations

import numpy as np
import torch

import opgraph as og
from opgraph.ops import nn

from .opinfo import ErrorCase, OpInfo, Sample, rand


def np_log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    xf = x.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        shifted = xf - np.max(xf, axis=axis, keepdims=True, initial=-np.inf)
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def np_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    xf = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(xf - np.max(xf, axis=axis, keepdims=True, initial=-np.inf))
        return e / np.sum(e, axis=axis, keepdims=True)


def _samples(rng: np.random.Generator) -> list[Sample]:
    big = rand(rng, (2, 4), np.float32, -1000, 1000)
    special = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [np.nan, 0.0, 1.0],
                        [np.inf, 0.0, 1.0]], np.float32)
    return [
        Sample([rand(rng, (3, 5))], {}, "f32-last"),
        Sample([rand(rng, (2, 3, 4), np.float64)], {"axis": 1}, "f64-middle"),
        Sample([rand(rng, (4, 7), np.float16, -8, 8)], {"axis": 0}, "f16-first"),
        Sample([rand(rng, (3, 6), torch.bfloat16, -8, 8)], {"axis": -1}, "bf16"),
        Sample([rand(rng, (5,), np.float64)], {"axis": 0}, "rank1"),
        Sample([big], {}, "large-values"),
        Sample([special], {}, "inf-nan"),
        Sample([rand(rng, (0, 5))], {}, "empty-batch"),
        Sample([rand(rng, (3, 0))], {"axis": 1}, "empty-axis"),
    ]


def _errors(method: str) -> list[ErrorCase]:
    def call(g: og.Graph, shape: tuple[int, ...], dtype: og.DType = og.float32, axis: int = -1) -> og.Tensor:
        return getattr(g, method)(g.placeholder(shape, dtype), axis)

    return [
        ErrorCase(lambda g: call(g, (2, 3), og.int32), og.DTypeError, "int32", "int"),
        ErrorCase(lambda g: call(g, (2, 3), og.bool_), og.DTypeError, "bool", "bool"),
        ErrorCase(lambda g: call(g, (2, 3), og.complex64), og.DTypeError, "complex64", "complex"),
        ErrorCase(lambda g: call(g, (2, 3), axis=2), og.ShapeError, "out of range", "bad-axis"),
        ErrorCase(lambda g: call(g, (2, 3), axis=-3), og.ShapeError, "out of range", "bad-negative-axis"),
    ]


RECORDS = [
    OpInfo("softmax", (nn.SOFTMAX,), lambda g, x, **kw: g.softmax(x, **kw), _samples, np_softmax,
           errors=_errors("softmax")),
    OpInfo("log_softmax", (nn.LOG_SOFTMAX,), lambda g, x, **kw: g.log_softmax(x, **kw), _samples, np_log_softmax,
           errors=_errors("log_softmax")),
]
