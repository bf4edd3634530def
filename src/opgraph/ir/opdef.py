"""``OpDef``: the op object. Every fact about an op hangs off one of these, declared once.

An op's declaration (in ``opgraph.ops.<family>``) gives its attributes type, its type rule, its
PyTorch lowering and its ``FusionKind``; later facets (VJP, Triton expression) are keyed by the same
object. The registry maps names to ops only for deserialisation; code dispatches on the object.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.errors import GraphError
from ..core.types import TensorType


class FusionKind(enum.Enum):
    """How an op may take part in a fused ("stitched") region."""

    SOURCE = "source"  # placeholder, constant, variable: no kernel
    ELEMENTWISE = "elementwise"  # out[i] = f(in[i]) after broadcasting
    INJECTIVE = "injective"  # each output element reads one input element (reshape, slice, ...)
    REDUCTION = "reduction"  # reduces over axes (sum, softmax, norms)
    OPAQUE = "opaque"  # vendor or hand-written kernel; never fused


@dataclass(frozen=True)
class LowerContext:
    """What a lowering sees: the op's attributes, concrete input/output types and the device."""

    attrs: Any
    in_types: tuple[TensorType, ...]
    out_types: tuple[TensorType, ...]
    device: torch.device
    options: Any = None  # the CompilationDescriptor (run-time checks, precision), None outside compilation
    constants: tuple[torch.Tensor | None, ...] = ()  # the value of each input that is a constant, else None


TypeRule = Callable[[Any, tuple[TensorType, ...]], "TensorType | Sequence[TensorType]"]
Lowering = Callable[[LowerContext], Callable[..., Any]]

_REGISTRY: dict[str, OpDef] = {}


@dataclass(eq=False)
class OpDef:
    """An op: ``name``, ``attrs`` (a frozen dataclass type or None), ``infer`` (the type rule),
    ``lower`` (returns the callable that computes the op on torch tensors), ``fusion``.

    ``side_effects`` marks ops that must never be removed or merged (``assign``).
    ``reads_values=False`` says the result depends only on the input types (``shape_of``).
    ``vjp`` is filled by ``opgraph.autodiff`` when the op is differentiable.
    """

    name: str
    infer: TypeRule
    lower: Lowering | None
    attrs: type | None = None
    fusion: FusionKind = FusionKind.OPAQUE
    side_effects: bool = False
    differentiable: bool = True
    reads_values: bool = True  # False: the result depends on input types only (shape_of), so it folds

    doc: str = ""
    vjp: Callable[..., Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.name in _REGISTRY:
            raise GraphError(f"op {self.name!r} is declared twice")
        _REGISTRY[self.name] = self

    def __repr__(self) -> str:
        return f"<op {self.name}>"

    def __hash__(self) -> int:
        return id(self)


def op_by_name(name: str) -> OpDef:
    from ..core.errors import SerializationError

    try:
        return _REGISTRY[name]
    except KeyError:
        raise SerializationError(f"unknown op {name!r} (is the opgraph version older than the file?)") from None


def all_ops() -> tuple[OpDef, ...]:
    return tuple(_REGISTRY.values())
