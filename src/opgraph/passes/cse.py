"""Common-subexpression elimination: one copy of each (op, inputs, attributes) without side effects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.sources import CONSTANT, PLACEHOLDER, READ, VARIABLE
from .program import Program, rewrite

_NEVER_MERGED = (PLACEHOLDER, VARIABLE, READ)  # reads depend on where assigns stand
_SMALL_CONSTANT = 64


def _key(op: Operation, ins: list[Tensor]) -> Any:
    if op.op.side_effects or op.op in _NEVER_MERGED:
        return None
    if op.op is CONSTANT:
        p = op.payload
        if p is None or p.numel() > _SMALL_CONSTANT:
            return None
        raw = p.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
        return (CONSTANT, p.dtype, tuple(p.shape), raw)
    try:
        hash(op.attrs)
    except TypeError:
        return None
    return (op.op, tuple(id(t) for t in ins), op.attrs)


def common_subexpression_elimination(program: Program) -> Program:
    seen: dict[Any, Sequence[Tensor]] = {}

    def fn(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | Sequence[Tensor] | None:
        key = _key(op, ins)
        if key is None:
            return None
        if key in seen:
            return seen[key]
        copied = g._add_op(op.op, ins, op.attrs, op.name, op.payload, [t.type for t in op.outputs])
        seen[key] = copied.outputs
        return copied

    return rewrite(program, fn)
