"""View chains folded: a reshape of a reshape (or of a squeeze or expand_dims) reads the first one's input, a
transpose of a transpose is one transpose, and a reshape to its input's own static shape or a transpose by the
identity is its input. AOTAutograd's graphs are full of such chains (``view`` of a ``view`` back to the shape it
started from, the gradient of a permute of a permute). Each link is a PyTorch call on the CPU and outside CUDA
graphs, and a graph without them is shorter to read, print and verify.

A folded op keeps its name; the links it skipped stay while something else reads them (``dead_code_elimination``
removes the rest). An op whose result is a program output is never replaced by its input (the result would alias
it), only shortened.

>>> import opgraph as og
>>> from opgraph.passes.program import Program
>>> g = og.Graph()
>>> x = g.placeholder((2, 16, 8))
>>> y = g.exp(g.reshape(g.reshape(x, (32, 8)), (2, 16, 8)))
>>> out = fold_views(Program(g, [x], [y], []))
>>> [o.op.name for o in out.graph.ops]
['placeholder', 'exp']
"""

from __future__ import annotations

from ..ir.graph import GraphCore, Operation, Tensor
from ..ops.shape import EXPAND_DIMS, RESHAPE, SQUEEZE, TRANSPOSE, TransposeAttrs
from .dce import dead_code_elimination
from .program import Program, rewrite

_RESHAPES = (RESHAPE, SQUEEZE, EXPAND_DIMS)  # each a reshape: the same elements in row-major order


def fold_views(program: Program) -> Program:
    """``program`` with its reshape and transpose chains folded (module docstring)."""
    outputs = {id(t) for t in program.outputs}

    def fn(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | list[Tensor] | None:
        if op.op is RESHAPE:
            x = ins[0]
            while x.op.op in _RESHAPES:
                x = x.op.inputs[0]
            if x.type.is_static and x.shape == op.outputs[0].shape and id(op.outputs[0]) not in outputs:
                return [x]
            return None if x is ins[0] else g._add_op(RESHAPE, [x], op.attrs, op.name)
        if op.op is TRANSPOSE:
            x, perm = ins[0], tuple(op.attrs.perm)
            while x.op.op is TRANSPOSE:
                inner = tuple(x.op.attrs.perm)
                perm = tuple(inner[p] for p in perm)  # result axis i is the inner input's axis inner[perm[i]]
                x = x.op.inputs[0]
            if perm == tuple(range(len(perm))) and id(op.outputs[0]) not in outputs:
                return [x]
            return None if x is ins[0] else g._add_op(TRANSPOSE, [x], TransposeAttrs(perm), op.name)
        return None

    return dead_code_elimination(rewrite(program, fn))


__all__ = ["fold_views"]
