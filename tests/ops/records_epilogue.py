"""Records for matmul_epilogue (made by the compiler; built here directly from its attributes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.special
import torch

import opgraph as og
from opgraph.ops.epilogue import MATMUL_EPILOGUE, EpilogueActivation, MatmulEpilogueAttrs

from .opinfo import ErrorCase, OpInfo, Sample, rand

ACT = EpilogueActivation


def _build(g: og.Graph, *xs: og.Tensor, activation: EpilogueActivation = ACT.NONE) -> og.Tensor:
    return g._apply(MATMUL_EPILOGUE, list(xs), MatmulEpilogueAttrs(activation, len(xs) == 3))


def np_epilogue(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None,
                activation: EpilogueActivation = ACT.NONE) -> np.ndarray:
    y = x.astype(np.float64) @ w.astype(np.float64) + (0.0 if b is None else b.astype(np.float64))
    if activation is ACT.RELU:
        return np.where(y < 0, 0.0, y)  # NaN stays NaN
    if activation is ACT.GELU:
        return 0.5 * y * (1 + scipy.special.erf(y / np.sqrt(2)))
    if activation is ACT.GELU_TANH:
        return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))
    return y


def _samples(rng: np.random.Generator) -> list[Sample]:
    def s(x: tuple[int, ...], w: tuple[int, int], dt: Any, act: EpilogueActivation, desc: str,
          bias: bool = True) -> Sample:
        vals = [rand(rng, x, dt), rand(rng, w, dt)] + ([rand(rng, (w[1],), dt)] if bias else [])
        return Sample(vals, {"activation": act}, desc)

    nan_x = rand(rng, (3, 4), np.float32)
    nan_x[1, 2] = np.nan  # a NaN row must stay NaN through relu (as torch.relu)
    bf16 = torch.bfloat16
    return [
        s((3, 4), (4, 5), np.float32, ACT.NONE, "f32-bias"),
        s((3, 4), (4, 5), np.float32, ACT.RELU, "f32-relu"),
        s((3, 4), (4, 5), np.float32, ACT.GELU, "f32-gelu"),
        s((3, 4), (4, 5), np.float32, ACT.GELU_TANH, "f32-gelu-tanh"),
        s((2, 3, 4), (4, 6), np.float64, ACT.RELU, "f64-batched-relu"),
        s((2, 1, 3, 4), (4, 2), np.float64, ACT.GELU, "f64-rank4-gelu"),
        s((5, 8), (8, 3), np.float16, ACT.RELU, "f16-relu"),
        s((5, 8), (8, 3), bf16, ACT.GELU_TANH, "bf16-gelu-tanh"),
        s((3, 4), (4, 5), np.float32, ACT.RELU, "f32-no-bias-relu", bias=False),
        s((3, 4), (4, 5), np.float64, ACT.NONE, "f64-no-bias", bias=False),
        Sample([nan_x, rand(rng, (4, 5), np.float32), rand(rng, (5,), np.float32)], {"activation": ACT.RELU},
               "f32-nan-relu"),
        s((0, 4), (4, 3), np.float32, ACT.RELU, "empty-rows"),
        s((2, 3, 0), (0, 3), np.float32, ACT.GELU, "empty-inner-batched"),
    ]


def _ph(g: og.Graph, shape: tuple[int | None, ...], dtype: Any = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


def _bad(attrs: Any) -> Any:
    return lambda g: g._apply(MATMUL_EPILOGUE, [_ph(g, (2, 3)), _ph(g, (3, 4)), _ph(g, (4,))], attrs)


ERRORS = [
    ErrorCase(lambda g: _build(g, _ph(g, (2, 3)), _ph(g, (4, 5)), _ph(g, (5,))), og.ShapeError,
              "inner dimensions 3 and 4", "inner-mismatch"),
    ErrorCase(lambda g: _build(g, _ph(g, (2, 3)), _ph(g, (3, 4)), _ph(g, (5,))), og.ShapeError,
              "bias must be 1-D of length 4", "bias-length"),
    ErrorCase(lambda g: _build(g, _ph(g, (2, 3)), _ph(g, (3, 4)), _ph(g, (1, 4))), og.ShapeError,
              "bias must be 1-D", "bias-2d"),
    ErrorCase(lambda g: _build(g, _ph(g, (3,)), _ph(g, (3, 4)), _ph(g, (4,))), og.ShapeError, "rank >= 2",
              "x-rank1"),
    ErrorCase(lambda g: _build(g, _ph(g, (2, 3)), _ph(g, (2, 3, 4)), _ph(g, (4,))), og.ShapeError, "2-D w",
              "w-batched"),
    ErrorCase(lambda g: _build(g, _ph(g, (2, 3), og.int32), _ph(g, (3, 4), og.int32), _ph(g, (4,), og.int32)),
              og.DTypeError, "int32", "integer"),
    ErrorCase(lambda g: _build(g, _ph(g, (2, 3)), _ph(g, (3, 4), og.float64), _ph(g, (4,))), og.DTypeError,
              "one dtype", "mixed-dtypes"),
    ErrorCase(_bad(MatmulEpilogueAttrs("relu")), og.AttributeValueError,  # type: ignore[arg-type]
              "EpilogueActivation", "activation-string"),
    ErrorCase(_bad(MatmulEpilogueAttrs(ACT.RELU, 1)), og.AttributeValueError,  # type: ignore[arg-type]
              "has_bias must be a bool", "has-bias-int"),
    ErrorCase(_bad(MatmulEpilogueAttrs(ACT.RELU, False)), og.ShapeError, "expects 2 inputs", "arity"),
]

RECORDS = [
    OpInfo("matmul_epilogue", (MATMUL_EPILOGUE,), _build, _samples, np_epilogue, errors=ERRORS,
           tol={torch.float16: (1e-2, 1e-2), torch.bfloat16: (3e-2, 3e-2), torch.float32: (1e-5, 1e-5)},
           # cuBLASLt's gelu epilogue and TF32-free float32 GEMMs round differently from NumPy in float64
           gpu_tol={torch.float32: (1e-4, 1e-4)}),
]
