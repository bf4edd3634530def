"""Records for matmul, hamming_distance and inverse."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import linalg

from .opinfo import ErrorCase, OpInfo, Sample, rand


def _matmul_samples(rng: np.random.Generator) -> list[Sample]:
    def s(a: tuple[int, ...], b: tuple[int, ...], dt: Any, desc: str, lo: float = -2, hi: float = 2) -> Sample:
        return Sample([rand(rng, a, dt, lo, hi), rand(rng, b, dt, lo, hi)], desc=desc)

    return [
        s((3, 4), (4, 5), np.float32, "f32-2d"),
        s((2, 1, 3, 4), (5, 4, 2), np.float32, "f32-batch-broadcast"),
        s((4,), (2, 4, 3), np.float64, "f64-vector-left"),
        s((2, 3, 4), (4,), np.float64, "f64-vector-right"),
        s((6,), (6,), np.float32, "f32-dot"),
        s((3, 4), (4, 2), np.int32, "i32", -9, 9),
        s((2, 3, 4), (4, 2), np.int64, "i64-batched", -9, 9),
        s((3, 4), (4, 2), np.int8, "i8", -3, 3),
        s((3, 4), (4, 5), np.float16, "f16"),
        s((3, 4), (4, 5), np.complex64, "c64"),
        Sample([rand(rng, (3, 4), torch.bfloat16), rand(rng, (4, 2), torch.bfloat16)], desc="bf16"),
        Sample([rand(rng, (3, 4), np.float32), rand(rng, (4, 2), np.float64)], desc="f32-f64-promote"),
        s((0, 4), (4, 3), np.float32, "empty-rows"),
        s((2, 0), (0, 3), np.float32, "empty-inner"),
    ]


def _matmul(g: og.Graph, *xs: og.Tensor) -> Any:
    """``a @ b``; gradient samples give several pairs (one output each)."""
    out = [a @ b for a, b in zip(xs[::2], xs[1::2], strict=True)]
    return out[0] if len(out) == 1 else out


def _matmul_grad_samples(rng: np.random.Generator) -> list[Sample]:
    def f(*shapes: tuple[int, ...]) -> list[Any]:
        return [rand(rng, s, np.float64) for s in shapes]

    return [Sample(f((4,), (2, 4, 3), (2, 3, 4), (4,)), desc="vector-left-and-right"),
            Sample(f((2, 1, 3, 4), (5, 4, 2), (6,), (6,)), desc="batch-broadcast-and-dot")]


def _bits(x: np.ndarray) -> np.ndarray:
    """Per-element popcount, by unpacking the bytes of each value."""
    x = np.ascontiguousarray(x)
    b = np.unpackbits(x.view(np.uint8).reshape(x.shape + (x.dtype.itemsize,)), axis=-1)
    return b.sum(axis=(-2, -1))


def np_hamming(p: np.ndarray, s: np.ndarray, result_dtype: og.DType = og.int32) -> np.ndarray:
    diff = np.bitwise_xor(p[..., :, None, :], s[..., None, :, :])
    out = _bits(diff)
    return out.astype(torch.empty(0, dtype=result_dtype.torch_dtype).numpy().dtype)


def _hamming_samples(rng: np.random.Generator) -> list[Sample]:
    def ints(shape: tuple[int, ...], dt: Any) -> np.ndarray:
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)

    return [
        Sample([ints((3, 4), np.int32), ints((5, 4), np.int32)], desc="i32"),
        Sample([ints((2, 1, 3, 2), np.int64), ints((4, 5, 2), np.int64)], {"result_dtype": og.int64},
               "i64-batch-broadcast"),
        Sample([ints((4, 6), np.uint8), ints((2, 6), np.uint8)], {"result_dtype": og.int16}, "u8"),
        Sample([ints((2, 3, 3), np.int8), ints((2, 2, 3), np.int8)], desc="i8-batched"),
        Sample([ints((3, 1), np.int16), ints((3, 1), np.int16)], desc="i16"),
    ]


def _inverse_samples(rng: np.random.Generator) -> list[Sample]:
    def well(shape: tuple[int, ...], dt: Any) -> Any:
        n = shape[-1]
        x = rng.uniform(-1, 1, shape) + n * np.eye(n)  # diagonally dominant: well conditioned
        if np.dtype(dt).kind == "c":
            x = x + 1j * rng.uniform(-1, 1, shape)
        return x.astype(dt)

    return [
        Sample([well((4, 4), np.float32)], desc="f32"),
        Sample([well((2, 3, 3, 3), np.float64)], desc="f64-batched"),
        Sample([well((3, 3), np.complex64)], desc="c64"),
        Sample([well((3, 3), np.float16)], desc="f16"),
        Sample([torch.from_numpy(well((2, 2, 2), np.float32)).to(torch.bfloat16)], desc="bf16"),
        Sample([well((1, 1), np.float32)], desc="1x1"),
    ]


def np_inverse(x: np.ndarray) -> np.ndarray:
    return np.linalg.inv(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64))


def _ph(g: og.Graph, shape: tuple[int | None, ...], dtype: Any = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


MATMUL_ERRORS = [
    ErrorCase(lambda g: g.matmul(_ph(g, (3, 4)), _ph(g, (5, 2))), og.ShapeError, "inner dimensions 4 and 5",
              "inner-mismatch"),
    ErrorCase(lambda g: g.matmul(_ph(g, (4,)), _ph(g, (3,))), og.ShapeError, "inner dimensions", "dot-mismatch"),
    ErrorCase(lambda g: g.matmul(_ph(g, ()), _ph(g, (3,))), og.ShapeError, "rank >= 1", "scalar"),
    ErrorCase(lambda g: g.matmul(_ph(g, (2, 3, 4)), _ph(g, (3, 4, 2))), og.ShapeError, "broadcast",
              "batch-mismatch"),
    ErrorCase(lambda g: g.matmul(_ph(g, (2, 2), og.bool_), _ph(g, (2, 2), og.bool_)), og.DTypeError, "bool",
              "bool"),
]
HAMMING_ERRORS = [
    ErrorCase(lambda g: g.hamming_distance(_ph(g, (2, 3)), _ph(g, (2, 3))), og.DTypeError, "float32", "float"),
    ErrorCase(lambda g: g.hamming_distance(_ph(g, (3,), og.int32), _ph(g, (2, 3), og.int32)), og.ShapeError,
              "rank >= 2", "rank1"),
    ErrorCase(lambda g: g.hamming_distance(_ph(g, (2, 3), og.int32), _ph(g, (2, 4), og.int32)), og.ShapeError,
              "inner dimensions", "k-mismatch"),
    ErrorCase(lambda g: g.hamming_distance(_ph(g, (2, 3), og.int32), _ph(g, (2, 3), og.int64)), og.DTypeError,
              "one dtype", "dtype-mismatch"),
    ErrorCase(lambda g: g.hamming_distance(_ph(g, (2, 3), og.int32), _ph(g, (2, 3), og.int32), og.float32),
              og.DTypeError, "result_dtype", "float-result"),
]
INVERSE_ERRORS = [
    ErrorCase(lambda g: g.inverse(_ph(g, (3, 4))), og.ShapeError, "square", "non-square"),
    ErrorCase(lambda g: g.inverse(_ph(g, (3,))), og.ShapeError, "rank >= 2", "rank1"),
    ErrorCase(lambda g: g.inverse(_ph(g, (3, 3), og.int32)), og.DTypeError, "int32", "integer"),
]

RECORDS = [
    OpInfo("matmul", (linalg.MATMUL,), _matmul, _matmul_samples, np.matmul, errors=MATMUL_ERRORS,
           tol={torch.float16: (1e-2, 1e-2), torch.float32: (1e-5, 1e-5)}, grad_samples=_matmul_grad_samples),
    OpInfo("hamming_distance", (linalg.HAMMING_DISTANCE,), lambda g, p, s, **kw: g.hamming_distance(p, s, **kw),
           _hamming_samples, np_hamming, errors=HAMMING_ERRORS),
    OpInfo("inverse", (linalg.INVERSE,), lambda g, x: g.inverse(x), _inverse_samples, np_inverse,
           errors=INVERSE_ERRORS, tol={torch.float32: (1e-5, 1e-5), torch.complex64: (1e-5, 1e-5),
                                       torch.float16: (2e-3, 2e-3)}),
]
