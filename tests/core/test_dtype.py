from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import opgraph as og
from opgraph.core.dtype import ALL_DTYPES, as_dtype, promote_with_scalar

CONCRETE = [d for d in ALL_DTYPES if not d.packed and d is not og.complex128]


@pytest.mark.parametrize("a,b", list(itertools.product(CONCRETE, CONCRETE)))
def test_promotion_agrees_with_torch(a: og.DType, b: og.DType) -> None:
    # torch.promote_types is the independent oracle for concrete (non-weak) types
    assert og.promote_types(a, b).torch_dtype == torch.promote_types(a.torch_dtype, b.torch_dtype)


def test_promotion_is_symmetric_and_idempotent() -> None:
    for a, b in itertools.product(CONCRETE, CONCRETE):
        assert og.promote_types(a, b) is og.promote_types(b, a)
        assert og.promote_types(a, a) is a


def test_weak_scalars() -> None:
    assert promote_with_scalar(og.float16, 1.0) is og.float16
    assert promote_with_scalar(og.int8, 3) is og.int8
    assert promote_with_scalar(og.int32, 1.5) is og.float32
    assert promote_with_scalar(og.bool_, 2) is og.int64
    assert promote_with_scalar(og.float32, 1j) is og.complex64


def test_as_dtype_accepts_torch_numpy_and_names() -> None:
    assert as_dtype(torch.bfloat16) is og.bfloat16
    assert as_dtype(np.float64) is og.float64
    assert as_dtype("int4") is og.int4
    with pytest.raises(og.DTypeError, match="unknown dtype"):
        as_dtype("float8")


@pytest.mark.parametrize("signed", [True, False])
def test_pack_unpack_4bit(signed: bool) -> None:
    lo, hi = (-8, 8) if signed else (0, 16)
    v = torch.randint(lo, hi, (3, 10), dtype=torch.int8)
    packed = og.pack_4bit(v)
    assert packed.dtype == torch.uint8 and packed.shape == (3, 5)
    assert torch.equal(og.unpack_4bit(packed, signed), v)
    assert og.int4.itemsize == 0.5 and og.uint4.packed


def test_pack_4bit_odd_length() -> None:
    with pytest.raises(og.ShapeError, match="even"):
        og.pack_4bit(torch.zeros(3, dtype=torch.int8))
