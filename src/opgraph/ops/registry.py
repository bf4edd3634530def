"""What an op declaration is made of: ``OpDef``, ``FusionKind``, attribute classes, lowering helpers.

A declaration reads, in one block::

    EXP = OpDef("exp", infer=float_unary_rule, lower=direct(torch.exp), fusion=FusionKind.ELEMENTWISE)

and the family's builder mixin adds the graph method that applies it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from typing_extensions import dataclass_transform

from ..ir.attrs import serializable
from ..ir.opdef import FusionKind, LowerContext, OpDef, all_ops, op_by_name

__all__ = ["FusionKind", "LowerContext", "OpDef", "all_ops", "attrs", "defvjp", "direct", "op_by_name"]

T = TypeVar("T", bound=type)


@dataclass_transform(frozen_default=True)
def attrs(cls: T) -> T:
    """Declare an attributes class: a frozen, serialisable dataclass."""
    return serializable(dataclasses.dataclass(frozen=True)(cls))  # type: ignore[return-value]


def direct(fn: Callable[..., Any]) -> Callable[[LowerContext], Callable[..., Any]]:
    """A lowering that is one torch function called on the inputs, with no attributes."""
    return lambda ctx: fn


VjpRule = Callable[..., Any]


def defvjp(*ops: OpDef) -> Callable[[VjpRule], VjpRule]:
    """Attach a gradient rule to ops, next to their declaration.

    A rule is ``rule(g, op, cotangents) -> per-input gradients`` (``None`` where an input gets none):
    ``g`` is the graph to build into, ``op`` the forward ``Operation``, ``cotangents`` one tensor per
    output. Rules build ordinary graph ops, so gradients of gradients work when those ops have rules.
    """

    def register(rule: VjpRule) -> VjpRule:
        for op in ops:
            op.vjp = rule
        return rule

    return register
