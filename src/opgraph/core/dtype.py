"""Data types and promotion rules.

Promotion (``promote_types``) follows one lattice, the same as PyTorch's for concrete types:

* categories rank ``bool < integer < floating < complex``; the higher category wins;
* inside a category the wider type wins; ``float16`` with ``bfloat16`` gives ``float32``;
* a signed and an unsigned integer give the smallest signed type holding both
  (``uint8`` with ``int8`` gives ``int16``);
* a Python scalar is *weak*: it takes the dtype of the tensor it meets when its category is
  not higher (``x_f16 + 1.0`` stays ``float16``; ``x_i32 + 1.5`` becomes ``float32``).

``int4`` and ``uint4`` are storage types for quantized weights: values are packed two per byte
(low nibble first) in a ``torch.uint8`` tensor whose last dimension is half the logical one.

Example:
    >>> import opgraph as og
    >>> og.promote_types(og.int8, og.uint8)
    opgraph.int16
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import torch


class Category(enum.IntEnum):
    BOOL = 0
    INTEGER = 1
    FLOATING = 2
    COMPLEX = 3


@dataclass(frozen=True, eq=False)
class DType:
    """An opgraph element type. Instances are singletons: compare with ``is`` or ``==``."""

    name: str
    bits: int
    category: Category
    signed: bool
    torch_dtype: torch.dtype  # storage dtype (uint8 for the packed 4-bit types)
    packed: bool = False

    def __repr__(self) -> str:
        return f"opgraph.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self) -> str:  # pickle/copy keep the singleton
        return self.name

    @property
    def is_floating(self) -> bool:
        return self.category is Category.FLOATING

    @property
    def is_complex(self) -> bool:
        return self.category is Category.COMPLEX

    @property
    def is_integer(self) -> bool:
        return self.category is Category.INTEGER

    @property
    def is_bool(self) -> bool:
        return self.category is Category.BOOL

    @property
    def itemsize(self) -> float:
        """Bytes per element (0.5 for the packed 4-bit types)."""
        return self.bits / 8


bool_ = DType("bool", 8, Category.BOOL, False, torch.bool)
uint4 = DType("uint4", 4, Category.INTEGER, False, torch.uint8, packed=True)
int4 = DType("int4", 4, Category.INTEGER, True, torch.uint8, packed=True)
uint8 = DType("uint8", 8, Category.INTEGER, False, torch.uint8)
int8 = DType("int8", 8, Category.INTEGER, True, torch.int8)
int16 = DType("int16", 16, Category.INTEGER, True, torch.int16)
int32 = DType("int32", 32, Category.INTEGER, True, torch.int32)
int64 = DType("int64", 64, Category.INTEGER, True, torch.int64)
float16 = DType("float16", 16, Category.FLOATING, True, torch.float16)
bfloat16 = DType("bfloat16", 16, Category.FLOATING, True, torch.bfloat16)
float32 = DType("float32", 32, Category.FLOATING, True, torch.float32)
float64 = DType("float64", 64, Category.FLOATING, True, torch.float64)
complex64 = DType("complex64", 64, Category.COMPLEX, True, torch.complex64)
complex128 = DType("complex128", 128, Category.COMPLEX, True, torch.complex128)

ALL_DTYPES: tuple[DType, ...] = (
    bool_, uint4, int4, uint8, int8, int16, int32, int64,
    float16, bfloat16, float32, float64, complex64, complex128,
)
FLOAT_DTYPES = (float16, bfloat16, float32, float64)
INT_DTYPES = (uint8, int8, int16, int32, int64)
_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_TORCH = {d.torch_dtype: d for d in ALL_DTYPES if not d.packed}
_SIGNED_INTS = (int8, int16, int32, int64)


def dtype_from_name(name: str) -> DType:
    from .errors import DTypeError

    try:
        return _BY_NAME[name]
    except KeyError:
        raise DTypeError(f"unknown dtype name {name!r}; known: {sorted(_BY_NAME)}") from None


def from_torch(dt: torch.dtype) -> DType:
    from .errors import DTypeError

    try:
        return _BY_TORCH[dt]
    except KeyError:
        raise DTypeError(f"torch dtype {dt} has no opgraph equivalent") from None


def from_numpy(dt: np.dtype) -> DType:
    return from_torch(torch.from_numpy(np.zeros((), dtype=dt)).dtype)


def as_dtype(value: object) -> DType:
    """Accept an ``og`` dtype, a ``torch.dtype``, a NumPy dtype or a dtype name."""
    from .errors import DTypeError

    if isinstance(value, DType):
        return value
    if value is None:
        raise DTypeError("a dtype is required, got None")
    if isinstance(value, torch.dtype):
        return from_torch(value)
    if isinstance(value, str):
        return dtype_from_name(value)
    try:
        return from_numpy(np.dtype(value))  # type: ignore[call-overload]
    except TypeError:
        raise DTypeError(f"cannot interpret {value!r} as a dtype") from None


def _smallest_signed_holding(bits: int) -> DType:
    for d in _SIGNED_INTS:
        if d.bits > bits:
            return d
    return float64  # uint64 does not exist here; nothing reaches this line today


def promote_types(a: DType, b: DType) -> DType:
    """The dtype of a binary op's result on two tensors (see the module docstring)."""
    if a is b:
        return a
    if a.category != b.category:
        hi, lo = (a, b) if a.category > b.category else (b, a)
        if hi.category is Category.COMPLEX and lo.is_floating and lo.bits > 32:
            return complex128
        return hi
    if a.is_floating:
        if {a.name, b.name} == {"float16", "bfloat16"}:
            return float32
        return a if a.bits >= b.bits else b
    if a.is_complex:
        return a if a.bits >= b.bits else b
    if a.signed == b.signed:
        return a if a.bits >= b.bits else b
    signed, unsigned = (a, b) if a.signed else (b, a)
    if signed.bits > unsigned.bits:
        return signed
    return _smallest_signed_holding(unsigned.bits)


def weak_scalar_dtype(value: bool | int | float | complex) -> DType:
    """The dtype a Python scalar has when it stands alone."""
    from .errors import DTypeError

    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int64
    if isinstance(value, float):
        return float32
    if isinstance(value, complex):
        return complex64
    raise DTypeError(f"expected a Python scalar, got {type(value).__name__}")


def promote_with_scalar(tensor_dtype: DType, value: bool | int | float | complex) -> DType:
    """A weak Python scalar adopts the tensor's dtype unless its kind is higher: then the default
    dtype of that kind (float32; complex64, or complex128 next to float64)."""
    scalar = weak_scalar_dtype(value)
    if scalar.category <= tensor_dtype.category:
        return tensor_dtype
    if scalar.is_complex:
        return complex128 if tensor_dtype is float64 else complex64
    if scalar.is_floating:
        return float32
    return scalar


def pack_4bit(values: torch.Tensor) -> torch.Tensor:
    """Pack integers in [-8, 7] or [0, 15] two per byte along the last axis (low nibble first)."""
    from .errors import ShapeError

    if values.shape[-1] % 2:
        raise ShapeError(f"pack_4bit: the last dimension must be even, got shape {tuple(values.shape)}")
    v = values.to(torch.int16) & 0xF
    return (v[..., 0::2] | (v[..., 1::2] << 4)).to(torch.uint8)


def unpack_4bit(packed: torch.Tensor, signed: bool) -> torch.Tensor:
    """Inverse of :func:`pack_4bit`; returns int8 values."""
    p = packed.to(torch.int16)
    lo, hi = p & 0xF, (p >> 4) & 0xF
    out = torch.stack([lo, hi], dim=-1).flatten(-2)
    if signed:
        out = torch.where(out >= 8, out - 16, out)
    return out.to(torch.int8)
