"""Max-pooling indices kept to 8 bits where nothing outside the program sees them.

``max_pool2d_return_indices`` with PyTorch's indices (``GLOBAL_FLATTEN_2D``, int64: ``h * W + w``) stores eight
bytes per output where the maximum's offset in its window (``LOCAL_FLATTEN_2D``: ``i * kW + j``) fits one. Where
the indices are not a result of the program and are read only by ``max_pool2d_gradient`` ops of the same
descriptor (or by nothing: inference), both are rewritten to window offsets in int8; the values and the gradient
stay the same. On an H200 the max-pool kernels then take 1.4-2.2x less time forward and backward
(``benchmarks/max_pool.py``, RESULTS.md fourteenth session).

>>> import opgraph as og
>>> from opgraph.passes.program import Program
>>> g = og.Graph()
>>> x = g.placeholder((1, 1, 4, 4))
>>> d = og.Pooling2dDescriptor(2, 2, 2, 2, return_indices_mode=og.PoolingReturnIndicesMode.GLOBAL_FLATTEN_2D)
>>> y, i = g.max_pool2d_return_indices(x, d)
>>> out = compact_pool_indices(Program(g, [x], [y], []))
>>> [(t.dtype.name, o.attrs.return_indices_mode.name) for o in out.graph.ops if o.op.name.startswith("max")
...  for t in o.outputs[1:]]
[('int8', 'LOCAL_FLATTEN_2D')]
"""

from __future__ import annotations

import dataclasses

from ..ir.graph import GraphCore, Operation, Tensor
from ..ops.pooling import Pooling2dDescriptor, PoolingReturnIndicesMode, with_window_offsets
from ..ops.pooling_indices import MAX_POOL2D_GRADIENT, MAX_POOL2D_RETURN_INDICES
from .program import Program, readers, rewrite


def _compact(d: Pooling2dDescriptor) -> Pooling2dDescriptor | None:
    """``d`` with window offsets in the smallest integer type that holds them, or None where ``d`` keeps its mode."""
    if d.return_indices_mode is not PoolingReturnIndicesMode.GLOBAL_FLATTEN_2D or d.data_layout.channels_last:
        return None  # (a channels-last 2-D window spans H, W and C's one element: its 2-D offset would not locate)
    return with_window_offsets(d)


def compact_pool_indices(program: Program) -> Program:
    """Every 2-D max pooling whose indices only its gradients read, with 8-bit window offsets instead."""
    read_by, results = readers(program), {id(t) for t in program.outputs}
    chosen: dict[int, Pooling2dDescriptor] = {}  # id(op) -> its new descriptor (pools and their gradients)
    for op in program.graph.ops:
        if op.op is not MAX_POOL2D_RETURN_INDICES or (new := _compact(op.attrs)) is None:
            continue
        idx = op.outputs[1]
        users = read_by.get(id(idx), [])
        if id(idx) in results or not all(u.op is MAX_POOL2D_GRADIENT and u.attrs.descriptor == op.attrs
                                         and u.inputs[1] is idx and all(t is not idx for t in u.inputs[2:])
                                         for u in users):
            continue
        chosen[id(op)] = new
        chosen.update({id(u): new for u in users})
    if not chosen:
        return program

    def replace(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | None:
        new = chosen.get(id(op))
        if new is None:
            return None
        attrs = new if op.op is MAX_POOL2D_RETURN_INDICES else dataclasses.replace(op.attrs, descriptor=new)
        return g._add_op(op.op, ins, attrs, op.name)

    return rewrite(program, replace)


__all__ = ["compact_pool_indices"]
