"""A transposed matrix product computed transposed: ``transpose(matmul(a, b))`` swapping the last two axes becomes
``matmul(transpose(b), transpose(a))``, the same values, since (AB)^T = B^T A^T batch by batch. Consecutive
transposes are composed first (and dropped where they cancel), so a product transposed twice stays as it is.

Read in the other layout, a product is walked across its rows: on a 2-core CPU an add of two (30522, 128) float32
matrices took 32.2 ms with one operand transposed against 2.7 ms row-major (``benchmarks/cpu_calls.py``), and
autograd copies a gradient returned transposed into its parameter's layout. The operands' transposes are views that
BLAS reads as they are, so the rewritten product costs what the old one did. PyTorch's decompositions give a linear
layer's weight gradient as a product transposed twice, which composing alone settles.

Only where the product has no reader but the transpose and is not itself a program output (otherwise it would be
computed twice), the transpose is not transposed again (a kept output pair of transposes would come back to the
other layout), and both operands have rank >= 2 (a 1-D operand has no axis to swap).

>>> import opgraph as og
>>> from opgraph.passes.program import Program
>>> g = og.Graph()
>>> a, b = g.placeholder((3, 4)), g.placeholder((4, 5))
>>> y = g.transpose(g.matmul(a, b), [1, 0], name="y")
>>> out = transpose_products(Program(g, [a, b], [y], []))
>>> [(o.op.name, o.outputs[0].shape) for o in out.graph.ops if o.op.name != "placeholder"]
[('transpose', (5, 4)), ('transpose', (4, 3)), ('matmul', (5, 3))]
"""

from __future__ import annotations

from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.opdef import FusionKind
from ..ops.linalg import MATMUL
from ..ops.shape import TRANSPOSE, TransposeAttrs
from .builder import fresh_name
from .dce import dead_code_elimination
from .program import Program, readers, rewrite


def swaps_last_two(op: Operation) -> bool:
    """``op`` is a transpose of its input's last two axes (a matrix transpose, batch by batch)."""
    if op.op is not TRANSPOSE:
        return False
    rank = op.outputs[0].rank
    return rank >= 2 and op.attrs.perm == (*range(rank - 2), rank - 1, rank - 2)


def _composed(program: Program) -> Program:
    """Consecutive transposes as one (PyTorch's decompositions transpose weight gradients twice), none where they
    cancel. A program output that would cancel to a placeholder, constant, variable or another output stays a
    transpose: it would otherwise be that very tensor."""
    outputs = {id(t) for t in program.outputs}

    def compose(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | list[Tensor] | None:
        inner = ins[0].op if op.op is TRANSPOSE else None
        if inner is None or inner.op is not TRANSPOSE:
            return None
        perm = tuple(inner.attrs.perm[p] for p in op.attrs.perm)
        if perm == tuple(range(len(perm))):
            source = op.inputs[0].op.inputs[0]  # in the old graph
            aliased = id(source) in outputs or source.op.op.fusion is FusionKind.SOURCE
            return None if id(op.outputs[0]) in outputs and aliased else list(inner.inputs)
        return g._add_op(TRANSPOSE, list(inner.inputs), TransposeAttrs(perm), op.name)

    return rewrite(program, compose)


def transpose_products(program: Program) -> Program:
    """Every transposed product of ``program`` that may be (see the module docstring) computed transposed, after
    consecutive transposes are composed."""
    program = _composed(program)
    read_by = readers(program)
    outputs = {id(t) for t in program.outputs}
    chosen: set[int] = set()  # the transposes to rewrite
    for op in program.graph.ops:
        if not swaps_last_two(op):
            continue
        product = op.inputs[0]
        mm = product.op
        transposed_again = any(r.op is TRANSPOSE for r in read_by.get(id(op.outputs[0]), []))
        if mm.op is MATMUL and all(t.rank >= 2 for t in mm.inputs) and id(product) not in outputs \
                and len(read_by.get(id(product), [])) == 1 and not transposed_again:
            chosen.add(id(op))
    if not chosen:
        return dead_code_elimination(program)
    taken = {o.name for o in program.graph.ops}

    def swap(g: GraphCore, t: Tensor, base: str) -> Tensor:
        perm = (*range(t.rank - 2), t.rank - 1, t.rank - 2)
        return g._add_op(TRANSPOSE, [t], TransposeAttrs(perm), fresh_name(base, taken, g)).outputs[0]

    def replace(op: Operation, ins: list[Tensor], g: GraphCore) -> list[Tensor] | None:
        if id(op) not in chosen:
            return None
        # ins[0] is the copied product, now unread: dead-code elimination drops it
        a, b = ins[0].op.inputs
        swapped = [swap(g, b, f"{op.name}.rhs"), swap(g, a, f"{op.name}.lhs")]
        return list(g._add_op(MATMUL, swapped, None, op.name).outputs)

    return dead_code_elimination(rewrite(program, replace))


__all__ = ["swaps_last_two", "transpose_products"]
