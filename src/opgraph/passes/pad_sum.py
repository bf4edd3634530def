"""Sums of zero pads that tile an axis, as one concat: ``pad(a, left 2) + pad(b, left 1, right 1) + pad(c, right 2)``
along axis 0 is ``concat([c, b, a], 0)``. Autograd writes the gradient of a split (a packed q/k/v projection
split in three, a chunk) this way: each part's gradient padded back to the whole, then summed. The sum reads and
writes the whole tensor once per part, and each pad first fills a whole tensor with zeros; the concat writes it once.

A tree of adds qualifies when every add but the root has no other reader, its leaves are zero pads (``CONSTANT``
with value 0 or ``ZERO``) of one dtype and shape, each read only by the tree, each padding one static axis (the
same for all) and nothing else, and their ranges tile that axis without gaps or overlaps. Values are the same, but
for the sign of zero: ``-0.0 + 0.0`` is ``+0.0``, which the concat keeps as ``-0.0``.

>>> import opgraph as og
>>> from opgraph.passes.program import Program
>>> g = og.Graph()
>>> a, b = g.placeholder((1, 4)), g.placeholder((2, 4))
>>> y = g.pad(a, og.PaddingMode.CONSTANT, [2, 0], [0, 0]) + g.pad(b, og.PaddingMode.CONSTANT, [0, 0], [1, 0])
>>> out = pads_to_concat(Program(g, [a, b], [y], []))
>>> [(o.op.name, o.attrs) for o in out.graph.ops if o.op.name != "placeholder"]
[('concat', AxisAttrs(axis=0))]
"""

from __future__ import annotations

from ..ir.graph import GraphCore, Operation, Tensor
from ..ops.elementwise import ADD
from ..ops.shape import CONCAT, AxisAttrs
from ..ops.slicing import PAD, PaddingMode
from .dce import dead_code_elimination
from .program import Program, readers, rewrite


def _padded_range(op: Operation) -> tuple[int, int, int] | None:
    """(axis, start, stop) of a zero pad that pads one static axis and nothing else; None for any other op."""
    if op.op is not PAD:
        return None
    a = op.attrs
    if not (a.mode is PaddingMode.ZERO or (a.mode is PaddingMode.CONSTANT and a.constant_value == 0)):
        return None
    axes = [k for k, (lo, hi) in enumerate(zip(a.left, a.right, strict=True)) if lo or hi]
    if len(axes) != 1 or op.outputs[0].shape[axes[0]] is None or op.inputs[0].shape[axes[0]] is None:
        return None
    k = axes[0]
    return k, a.left[k], a.left[k] + int(op.inputs[0].shape[k])  # type: ignore[arg-type]


def pads_to_concat(program: Program) -> Program:
    """Every sum of ``program`` that the module docstring's rule lets be a concat, as that concat."""
    read_by, outputs = readers(program), {id(t) for t in program.outputs}

    def private(t: Tensor) -> bool:  # read once, by the tree, and not a result
        return len(read_by.get(id(t), ())) == 1 and id(t) not in outputs

    def leaves(op: Operation) -> list[Operation]:
        out = []
        for t in op.inputs:
            inner = t.op
            out += leaves(inner) if inner.op is ADD and private(t) else [inner]
        return out

    chosen: dict[int, tuple[int, list[Operation]]] = {}  # root add -> (axis, pads in axis order)
    inside: set[int] = set()  # adds already part of a chosen tree
    for op in reversed(program.graph.ops):  # roots before the adds below them
        if op.op is not ADD or id(op) in inside:
            continue
        parts = leaves(op)
        found = [_padded_range(p) for p in parts]
        ranges = [r for r in found if r is not None]
        whole = op.outputs[0].type
        if len(parts) < 2 or len(ranges) < len(parts) or any(
                p.outputs[0].type != whole or not private(p.outputs[0]) for p in parts):
            continue
        axis = ranges[0][0]
        spans = sorted(zip(ranges, parts, strict=True), key=lambda rp: rp[0][1])
        ends = [r[2] for r, _ in spans]
        if any(r[0] != axis for r in ranges) or spans[0][0][1] != 0 or ends[-1] != whole.shape[axis] \
                or any(r[1] != end for (r, _), end in zip(spans[1:], ends[:-1], strict=True)):
            continue
        chosen[id(op)] = (axis, [p for _, p in spans])
        stack = [t.op for t in op.inputs]
        while stack:
            inner = stack.pop()
            if inner.op is ADD:
                inside.add(id(inner))
                stack += [t.op for t in inner.inputs]
    if not chosen:
        return program
    old_of_new: dict[int, Tensor] = {}  # the pads' inputs, as the rewrite maps them

    def replace(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | None:
        if op.op is PAD:
            old_of_new[id(op.inputs[0])] = ins[0]
        if id(op) not in chosen:
            return None
        axis, pads = chosen[id(op)]
        return g._add_op(CONCAT, [old_of_new[id(p.inputs[0])] for p in pads], AxisAttrs(axis), op.name)

    return dead_code_elimination(rewrite(program, replace))


__all__ = ["pads_to_concat"]
