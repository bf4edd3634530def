"""Stitching, first step: connected elementwise ops become one ``fused_elementwise`` op.

The fused op is an ordinary op of the IR: its attributes list the steps (op name, attributes, where each
input comes from), its type rule re-runs the steps' rules, so it prints, verifies and serialises like any
other. Its lowering is a codegen facet (``codegen/triton`` sets ``FUSED_ELEMENTWISE.lower``), so this
pass knows nothing about Triton. Autodiff runs before fusion: the fused op has no gradient rule.

Region formation walks the ops in order. An elementwise op joins the region of one of its producers
when (1) the predicate accepts it, (2) no value of that region was already read by an op outside it
(the fused op stands where the region's last op stood, so earlier outside readers would come first),
and (3) none of its other inputs depends on that region (that would be a cycle).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor, infer_types
from ..ir.opdef import FusionKind, OpDef, op_by_name
from ..ops.registry import attrs
from .program import Program

MAX_REGION_OPS = 32  # keeps generated kernels within register budgets


@attrs
class FusedStep:
    op: str  # the op's registry name (attributes hold JSON values, not op objects)
    attrs: Any
    inputs: tuple[int, ...]  # k >= 0: the value of step k; -1 - j: the fused op's input j
    name: str = ""  # the graph op it came from (for exe.kernels() and the viewer)


@attrs
class FusedAttrs:
    steps: tuple[FusedStep, ...]
    outputs: tuple[int, ...]  # the steps whose values leave the region, in output order


def _fused_rule(a: FusedAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    values: list[TensorType] = []
    for step in a.steps:
        args = tuple(ins[-1 - k] if k < 0 else values[k] for k in step.inputs)
        values.append(infer_types(op_by_name(step.op), step.attrs, args)[0])
    return tuple(values[k] for k in a.outputs)


FUSED_ELEMENTWISE = OpDef("fused_elementwise", infer=_fused_rule, lower=None, attrs=FusedAttrs,
                          fusion=FusionKind.OPAQUE, differentiable=False,
                          doc="a region of elementwise ops computed by one generated kernel")


def region_graph(a: FusedAttrs, in_types: tuple[TensorType, ...]) -> tuple[list[Operation], list[Tensor], list[Tensor]]:
    """The region rebuilt as a small graph: (ops in order, input placeholders, output tensors)."""
    from ..ir.sources import PLACEHOLDER, PlaceholderAttrs

    g = GraphCore()
    inputs = [g._add_op(PLACEHOLDER, [], PlaceholderAttrs(t.shape, t.dtype)).outputs[0] for t in in_types]
    values: list[Tensor] = []
    ops: list[Operation] = []
    for step in a.steps:
        args = [inputs[-1 - k] if k < 0 else values[k] for k in step.inputs]
        op = g._add_op(op_by_name(step.op), args, step.attrs)
        ops.append(op)
        values.append(op.outputs[0])
    return ops, inputs, [values[k] for k in a.outputs]


def fuse_elementwise(program: Program, can_fuse: Callable[[Operation], bool]) -> Program:
    """Replace each region of two or more connected elementwise ops by one ``fused_elementwise`` op."""
    ops = program.graph.ops
    region_of: dict[int, int] = {}  # id(op) -> region number
    members: list[list[Operation]] = []
    sealed: set[int] = set()
    depends: dict[int, frozenset[int]] = {}  # id(tensor) -> regions it (transitively) depends on
    for op in ops:
        deps = frozenset().union(*(depends.get(id(t), frozenset()) for t in op.inputs))
        joined = None
        if op.op.fusion is FusionKind.ELEMENTWISE and len(op.outputs) == 1 and can_fuse(op):
            for t in op.inputs:
                r = region_of.get(id(t.op))
                if r is None or r in sealed or len(members[r]) >= MAX_REGION_OPS:
                    continue
                others = [u for u in op.inputs if region_of.get(id(u.op)) != r]
                if all(r not in depends.get(id(u), frozenset()) for u in others):
                    joined = r
                    break
            if joined is None:
                joined = len(members)
                members.append([])
            region_of[id(op)] = joined
            members[joined].append(op)
        for t in op.inputs:  # an outside reader seals the region it reads from
            r = region_of.get(id(t.op))
            if r is not None and r != region_of.get(id(op)):
                sealed.add(r)
        mine = frozenset({region_of[id(op)]}) if id(op) in region_of else frozenset()
        for t in op.outputs:
            depends[id(t)] = deps | mine

    fused = {r for r, m in enumerate(members) if len(m) >= 2}
    last = {id(members[r][-1]): r for r in fused}
    outside_uses: set[int] = {id(t) for t in program.outputs}
    for op in ops:
        for t in op.inputs:
            if region_of.get(id(t.op)) != region_of.get(id(op)) or id(op) not in region_of:
                outside_uses.add(id(t))

    new = GraphCore()
    mapping: dict[int, Tensor] = {}
    op_map: dict[int, Operation] = {}
    for op in ops:
        r = region_of.get(id(op))
        if r in fused:
            if id(op) not in last:
                continue
            body = members[r]
            index = {id(o.outputs[0]): k for k, o in enumerate(body)}
            ext: list[Tensor] = []
            steps = []
            for o in body:
                refs = []
                for t in o.inputs:
                    if id(t) in index:
                        refs.append(index[id(t)])
                    else:
                        if all(e is not t for e in ext):
                            ext.append(t)
                        refs.append(-1 - next(j for j, e in enumerate(ext) if e is t))
                steps.append(FusedStep(o.op.name, o.attrs, tuple(refs), o.name))
            outs = [k for k, o in enumerate(body) if id(o.outputs[0]) in outside_uses]
            fused_op = new._add_op(FUSED_ELEMENTWISE, [mapping[id(t)] for t in ext],
                                   FusedAttrs(tuple(steps), tuple(outs)))
            for t, k in zip(fused_op.outputs, outs, strict=True):
                mapping[id(body[k].outputs[0])] = t
            continue
        copied = new._add_op(op.op, [mapping[id(t)] for t in op.inputs], op.attrs, op.name, op.payload,
                             [t.type for t in op.outputs])
        op_map[id(op)] = copied
        for old, rep in zip(op.outputs, copied.outputs, strict=True):
            mapping[id(old)] = rep
    return Program(new, [mapping[id(t)] for t in program.inputs], [mapping[id(t)] for t in program.outputs],
                   [op_map[id(o)] for o in program.effects])


__all__ = ["FUSED_ELEMENTWISE", "FusedAttrs", "FusedStep", "fuse_elementwise", "region_graph"]
