"""``Program``: a graph with its roots (inputs in feed order, outputs, side-effect ops).

Every pass is a named ``Program -> Program`` built on ``rewrite``: one walk in creation order that
copies each op or replaces it, so the passes share one mechanism and each stays a few lines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..ir.graph import GraphCore, Operation, Tensor


@dataclass
class Program:
    graph: GraphCore
    inputs: list[Tensor]
    outputs: list[Tensor]
    effects: list[Operation]


class _Drop:
    """Returned by a rewrite function to leave an op out."""


DROP = _Drop()


def readers(program: Program) -> dict[int, list[Operation]]:
    """id(tensor) -> the ops that read it, in creation order (an op reading a tensor twice is listed twice)."""
    out: dict[int, list[Operation]] = {}
    for op in program.graph.ops:
        for t in op.inputs:
            out.setdefault(id(t), []).append(op)
    return out
RewriteFn = Callable[[Operation, list[Tensor], GraphCore], "Operation | Sequence[Tensor | None] | _Drop | None"]


def copy_op(g: GraphCore, op: Operation, ins: Sequence[Tensor]) -> Operation:
    """``op`` added to ``g`` on ``ins`` under its own name (its output types kept when the inputs' are)."""
    same = all(a.type == b.type for a, b in zip(ins, op.inputs, strict=True))
    return g._add_op(op.op, ins, op.attrs, op.name, op.payload, [t.type for t in op.outputs] if same else None)


def rewrite(program: Program, fn: RewriteFn) -> Program:
    """Walk ``program``'s ops in order; ``fn`` returns None to copy the op (with rewritten inputs),
    ``DROP`` to leave it out, the op that replaces it, or the tensors that replace its outputs
    (built into the new graph; None for an output that nothing reads, which must not be an output)."""
    new = GraphCore()
    mapping: dict[int, Tensor] = {}
    op_map: dict[int, Operation] = {}
    for op in program.graph.ops:
        ins = [mapping[id(t)] for t in op.inputs if id(t) in mapping]
        if len(ins) != len(op.inputs):
            continue  # an input was dropped, so this op is dead too
        result: Any = fn(op, ins, new)
        if result is DROP:
            continue
        if result is None:
            copied = copy_op(new, op, ins)
            op_map[id(op)] = copied
            result = copied.outputs
        elif isinstance(result, Operation):
            op_map[id(op)] = result
            result = result.outputs
        for old, rep in zip(op.outputs, result, strict=True):
            if rep is not None:
                mapping[id(old)] = rep
    return Program(new, [mapping[id(t)] for t in program.inputs], [mapping[id(t)] for t in program.outputs],
                   [op_map[id(o)] for o in program.effects])
