"""The source and state ops every graph is made of: placeholder, constant, variable, read, assign.

They live in the IR itself (not in an op family) because the IR's own machinery (placeholders,
variables, the printer, codegen) dispatches on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.dtype import DType
from ..core.errors import DTypeError, GraphError, ShapeError
from ..core.types import TensorType
from .attrs import serializable
from .opdef import FusionKind, OpDef


@serializable
@dataclass(frozen=True)
class PlaceholderAttrs:
    shape: tuple[int | None, ...]
    dtype: DType


def _payload_only(a: Any, ins: tuple[TensorType, ...]) -> TensorType:
    raise GraphError("constants and variables take their type from their value")


def _read_rule(a: None, ins: tuple[TensorType, ...]) -> TensorType:
    return ins[0]


def _assign_rule(a: None, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    var, value = ins
    if value.dtype is not var.dtype:
        raise DTypeError(f"cannot assign a {value.dtype.name} value to a {var.dtype.name} variable")
    if value.rank != var.rank or any(a is not None and b is not None and a != b
                                     for a, b in zip(var.shape, value.shape, strict=True)):
        raise ShapeError(f"cannot assign a value of shape {value.shape} to a variable of shape {var.shape}")
    return ()


PLACEHOLDER = OpDef("placeholder", infer=lambda a, ins: TensorType(a.shape, a.dtype), lower=None,
                    attrs=PlaceholderAttrs, fusion=FusionKind.SOURCE, differentiable=False)
CONSTANT = OpDef("constant", infer=_payload_only, lower=None, fusion=FusionKind.SOURCE, differentiable=False)
VARIABLE = OpDef("variable", infer=_payload_only, lower=None, fusion=FusionKind.SOURCE)
READ = OpDef("read", infer=_read_rule, lower=None, fusion=FusionKind.SOURCE)
ASSIGN = OpDef("assign", infer=_assign_rule, lower=None, side_effects=True, differentiable=False)
