"""Type-rule building blocks shared by op families."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.dtype import DType, promote_types
from ..core.errors import DTypeError, ShapeError
from ..core.shape import broadcast_shapes
from ..core.types import TensorType


def expect_arity(in_types: Sequence[TensorType], n: int) -> None:
    if len(in_types) != n:
        raise ShapeError(f"expects {n} inputs, got {len(in_types)}")


def expect_dtype(t: TensorType, allowed: Sequence[DType] | None = None, *, what: str = "input",
                 floating: bool = False, integer: bool = False, boolean: bool = False,
                 numeric: bool = False) -> None:
    """Raise ``DTypeError`` unless ``t.dtype`` is in ``allowed`` or in one of the named categories."""
    d = t.dtype
    ok = (allowed is not None and d in allowed) or (floating and (d.is_floating or d.is_complex)) or (
        integer and d.is_integer) or (boolean and d.is_bool) or (numeric and not d.is_bool)
    if d.packed:
        ok = False  # 4-bit storage types only enter through quantization ops
    if not ok:
        kinds = [k for k, f in (("floating", floating), ("integer", integer), ("bool", boolean),
                                ("numeric", numeric)) if f]
        if allowed:
            kinds += [a.name for a in allowed]
        raise DTypeError(f"{what} dtype {d.name} is not supported (expects {' or '.join(kinds)})")


def broadcast_types(in_types: Sequence[TensorType]) -> tuple[int | None, ...]:
    return broadcast_shapes(*(t.shape for t in in_types))


def promoted(in_types: Sequence[TensorType]) -> DType:
    d = in_types[0].dtype
    for t in in_types[1:]:
        d = promote_types(d, t.dtype)
    return d


def same_dtype(in_types: Sequence[TensorType], what: str = "inputs") -> DType:
    d = in_types[0].dtype
    for t in in_types[1:]:
        if t.dtype is not d:
            raise DTypeError(f"{what} must have one dtype, got {', '.join(x.dtype.name for x in in_types)}")
    return d


def expect_value_fits(value: object, dtype: DType, what: str) -> None:
    """A scalar attribute must be exactly representable in ``dtype`` (no silent wrap or truncation)."""
    from ..core.errors import AttributeValueError

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, bool):
            return
        raise AttributeValueError(f"{what} must be a number, got {value!r}")
    if dtype.is_floating or dtype.is_complex:
        return
    ok = float(value).is_integer() if isinstance(value, float) else True
    if ok and dtype.is_bool:
        ok = value in (0, 1)
    elif ok and dtype.is_integer:
        import torch

        info = torch.iinfo(dtype.torch_dtype)
        ok = info.min <= int(value) <= info.max
    if not ok:
        raise AttributeValueError(f"{what} {value!r} does not fit dtype {dtype.name}")


def expect_bool(value: object, what: str) -> bool:
    """An attribute that must be a real ``bool`` (not 0/1): raises ``AttributeValueError``."""
    from ..core.errors import AttributeValueError

    if not isinstance(value, bool):
        raise AttributeValueError(f"{what} must be a bool, got {value!r}")
    return value


def check_axis(axis: object, rank: int, what: str = "axis") -> int:
    """Validate a stored (already normalised) axis of a rank >= 1 tensor; raises ``ShapeError``."""
    if rank == 0:
        raise ShapeError("needs an input of rank >= 1, got a scalar")
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < rank:
        raise ShapeError(f"{what} {axis!r} is out of range for rank {rank}")
    return axis
