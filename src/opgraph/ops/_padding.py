"""Shared by convolution and pooling: padding styles, layouts, window arithmetic, descriptor checks.

For one spatial dim of size ``n`` with kernel ``k``, stride ``s``, dilation ``d`` the window spans
``e = d * (k - 1) + 1`` elements. Padding styles (MPSGraph's ``MPSGraphPaddingStyle``):

* ``EXPLICIT``: the descriptor's before/after values.
* ``TF_VALID``: no padding.
* ``TF_SAME``: total padding ``max((ceil(n / s) - 1) * s + e - n, 0)`` so that the output has
  ``ceil(n / s)`` elements; ``total // 2`` before, the odd extra element after.
* ``ONNX_SAME_LOWER``: as ``TF_SAME`` with the odd extra element before.

The output size is then ``floor((n + before + after - e) / s) + 1``; pooling's ``ceil_mode`` rounds
up instead, and (as in PyTorch) drops a last window that would start in the after-padding.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from ..core.dtype import DType
from ..core.errors import AttributeValueError, DTypeError, ShapeError
from ..core.types import TensorType
from ..ir.attrs import serializable
from ._rules import expect_bool


@serializable
class PaddingStyle(enum.Enum):
    """How a convolution or pooling pads its source (MPSGraph's ``MPSGraphPaddingStyle``)."""

    EXPLICIT = "explicit"
    TF_VALID = "tf_valid"
    TF_SAME = "tf_same"
    ONNX_SAME_LOWER = "onnx_same_lower"


@serializable
class TensorLayout(enum.Enum):
    """Layout of a convolution/pooling source and result (MPSGraph's ``MPSGraphTensorNamedDataLayout``)."""

    NCHW = "NCHW"
    NHWC = "NHWC"
    NCDHW = "NCDHW"
    NDHWC = "NDHWC"

    @property
    def channels_last(self) -> bool:
        return self.value.endswith("C")

    @property
    def spatial_rank(self) -> int:
        return len(self.value) - 2


LAYOUTS_2D = (TensorLayout.NCHW, TensorLayout.NHWC)


@serializable
class WeightsLayout(enum.Enum):
    """Layout of convolution weights: ``O`` output channels, ``I`` input channels (per group)."""

    OIHW = "OIHW"
    HWIO = "HWIO"
    OIDHW = "OIDHW"
    DHWIO = "DHWIO"

    @property
    def kernel_first(self) -> bool:
        return self.value.endswith("O")

    @property
    def spatial_rank(self) -> int:
        return len(self.value) - 2


# ---- descriptor field checks (run in each descriptor's __post_init__) -------------------------
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def set_ints(desc: Any, name: str, n: int, minimum: int, scalar_ok: bool = False) -> None:
    """Normalise field ``name`` of a frozen descriptor to a tuple of ``n`` ints >= ``minimum``."""
    v = getattr(desc, name)
    if scalar_ok and _is_int(v):
        v = (v,) * n
    if isinstance(v, (list, tuple)):
        v = tuple(v)
    if not (isinstance(v, tuple) and len(v) == n and all(_is_int(x) and x >= minimum for x in v)):
        raise AttributeValueError(f"{type(desc).__name__}.{name} must be {n} ints >= {minimum}, got {v!r}")
    object.__setattr__(desc, name, v)


def check_int(desc: Any, name: str, minimum: int) -> None:
    v = getattr(desc, name)
    if not (_is_int(v) and v >= minimum):
        raise AttributeValueError(f"{type(desc).__name__}.{name} must be an int >= {minimum}, got {v!r}")


def check_bool(desc: Any, name: str) -> None:
    expect_bool(getattr(desc, name), f"{type(desc).__name__}.{name}")


def check_enum(desc: Any, name: str, allowed: Sequence[enum.Enum]) -> None:
    v = getattr(desc, name)
    if v not in allowed or not isinstance(v, type(allowed[0])):
        shown = ", ".join(f"{type(a).__name__}.{a.name}" for a in allowed)
        raise AttributeValueError(f"{type(desc).__name__}.{name} must be one of {shown}, got {v!r}")


# ---- window arithmetic ------------------------------------------------------------------------
def effective_kernel(kernel: int, dilation: int) -> int:
    return dilation * (kernel - 1) + 1


def resolve_pads(style: PaddingStyle, size: int, kernel: int, stride: int, dilation: int,
                 explicit: tuple[int, int]) -> tuple[int, int]:
    """(before, after) padding of one spatial dim of ``size`` elements."""
    if style is PaddingStyle.EXPLICIT:
        return explicit
    if style is PaddingStyle.TF_VALID:
        return (0, 0)
    out = -(-size // stride)
    total = max((out - 1) * stride + effective_kernel(kernel, dilation) - size, 0)
    small, large = total // 2, total - total // 2
    return (small, large) if style is PaddingStyle.TF_SAME else (large, small)


def output_size(style: PaddingStyle, size: int | None, kernel: int | None, stride: int, dilation: int,
                explicit: tuple[int, int], ceil_mode: bool = False) -> int | None:
    """Output elements along one spatial dim (formula in the module docstring); None when unknown.

    May be < 1: the caller reports that as a shape error.
    """
    if size is None:
        return None
    if kernel is None:  # the SAME styles do not need the kernel to size the output
        if style in (PaddingStyle.TF_SAME, PaddingStyle.ONNX_SAME_LOWER) and not ceil_mode:
            return -(-size // stride)
        return None
    before, after = resolve_pads(style, size, kernel, stride, dilation, explicit)
    span = size + before + after - effective_kernel(kernel, dilation)
    if span < 0 or not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + before:  # the last window would start in the after-padding
        out -= 1
    return out


def real_float_dtype(in_types: Sequence[TensorType]) -> DType:
    """The one dtype of ``in_types``; it must be a real floating dtype."""
    d = in_types[0].dtype
    for t in in_types[1:]:
        if t.dtype is not d:
            raise DTypeError(f"inputs must have one dtype, got {', '.join(x.dtype.name for x in in_types)}")
    if not d.is_floating or d.packed:
        raise DTypeError(f"input dtype {d.name} is not supported (expects a floating dtype)")
    return d


def check_positive_sizes(sizes: Sequence[int | None], what: str) -> None:
    if any(s is not None and s < 1 for s in sizes):
        shown = tuple("?" if s is None else s for s in sizes)
        raise ShapeError(f"{what} would have spatial size {shown}: the window is larger than the padded source")


def merge_dims(a: Sequence[int | None], b: Sequence[int | None]) -> tuple[int | None, ...]:
    """Two views of one shape: each dim from ``a`` where known, else from ``b``."""
    return tuple(x if x is not None else y for x, y in zip(a, b, strict=True))


def check_same_dims(got: Sequence[int | None], want: Sequence[int | None], what: str) -> None:
    """Dims known on both sides must agree (ranks too)."""
    differ = any(x is not None and y is not None and x != y for x, y in zip(got, want, strict=False))
    if len(got) != len(want) or differ:
        shown = lambda s: "(" + ", ".join("?" if v is None else str(v) for v in s) + ")"
        raise ShapeError(f"{what} has shape {shown(got)}, expected {shown(want)}")


def shape_or_like(t: Any) -> Any:
    """What a gradient rule passes as a gradient op's ``output_shape``: the static shape of ``t``, or
    ``t`` itself (a shape reference whose values are not read) when some dim is dynamic."""
    return tuple(t.shape) if None not in t.shape else t


def check_output_shape(value: Any, what: str) -> tuple[int, ...] | None:
    """An ``output_shape`` attribute: None or a tuple of ints >= 0."""
    if value is None:
        return None
    v = tuple(value) if isinstance(value, (list, tuple)) else value
    if not (isinstance(v, tuple) and all(_is_int(x) and x >= 0 for x in v)):
        raise AttributeValueError(f"{what} must be a sequence of ints >= 0, got {value!r}")
    return v


def concrete_shape(shape: Sequence[int | None]) -> tuple[int, ...]:
    """A shape known at run time (a lowering's), as ints."""
    return tuple(int(v) for v in shape if v is not None)
