"""Row-reduction epilogues in keep-dims form, so that they fuse with their reduction.

A reduction without ``keepdims`` (NumPy's default) drops its reduced axes: ``reduce_sum(x, axes=(1,))`` of a
(64, 4096) ``x`` is (64,), and an elementwise op on it, (64,), does not broadcast into the reduction's domain
(64, 4096) by the right-aligned rule, so region formation (``passes.fuse``) cannot put it in the reduction's
kernel: a second kernel reads the row values back. Here such a reduction keeps its axes as size 1 (MPSGraph's own
convention) and the elementwise ops reading it work on that shape, their other operands given the same size-1
axes (``expand_dims``, a view); a ``squeeze`` (a view) hands the old shape to every reader that is not rewritten.
The squeezes sink through chains of epilogue ops, link by link, and end outside the region, where they cost
nothing. A column reduction, whose result already broadcasts into its domain, is left as it is.

    >>> import opgraph as og
    >>> g = og.Graph()
    >>> x = g.placeholder((64, 4096), og.float32)
    >>> y = g.minimum(g.reduce_sum(x, axes=(1,)), g.constant(1.0))
    >>> exe = g.compile({x: x.type}, [y], device="cpu", descriptor=og.CompilationDescriptor(triton_interpret=True))
    >>> [o.op.name for o in exe.program.graph.ops if o.op.name not in ("placeholder", "constant")]
    ['fused_region', 'squeeze']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.opdef import FusionKind
from ..ops import shape
from .builder import fresh_name
from .dce import dead_code_elimination
from .program import Program, readers, rewrite


@dataclasses.dataclass(frozen=True)
class _Kept:
    """A value of the new graph in keep-dims form: rank ``rank``, size 1 along ``axes``."""

    value: Tensor
    axes: tuple[int, ...]
    rank: int


def _kept_shape_of(t: Tensor, kept: _Kept) -> bool:
    """``t`` has the shape ``kept.value`` has without its size-1 axes."""
    squeezed = tuple(d for k, d in enumerate(kept.value.shape) if k not in kept.axes)
    return tuple(t.shape) == squeezed


def _aligned(t: Tensor, kept: _Kept, g: GraphCore, name: str) -> Tensor:
    """``t``, which broadcasts into the squeezed shape, with the reduced axes it spans put back as size 1, so that it
    broadcasts the same way into the keep-dims shape."""
    if t.rank == 0:
        return t
    kept_axes = [k for k in range(kept.rank) if k not in kept.axes]
    first = kept_axes[len(kept_axes) - t.rank]  # where t's first axis lands, right-aligned
    inserted = tuple(a - first for a in kept.axes if a > first)
    if not inserted:
        return t
    return g._add_op(shape.EXPAND_DIMS, [t], shape.AxesAttrs(inserted), name).outputs[0]


def keep_reduced_dims(program: Program, can_fuse: Callable[[Operation], bool],
                      reduced_axes: Callable[[Operation], tuple[int, ...]]) -> Program:
    """``program`` with each fusable reduction whose result does not broadcast into its domain, and which an
    elementwise op of the same shape reads, in keep-dims form, with its elementwise readers (and theirs, in turn) on
    that form (module docstring). ``can_fuse(op)``: the code generator can write the op; ``reduced_axes(op)``: the
    input axes a reduction op reduces."""
    by_reader = readers(program)
    names = {o.name for o in program.graph.ops}

    def elementwise(op: Operation) -> bool:
        return op.op.fusion is FusionKind.ELEMENTWISE and len(op.outputs) == 1 and can_fuse(op)

    def epilogue_reads(t: Tensor) -> bool:
        return any(elementwise(r) and r.outputs[0].shape == t.shape for r in by_reader.get(id(t), []))

    kept: dict[int, _Kept] = {}  # id(new squeeze output) -> the keep-dims value it squeezes

    def squeezed(op: Operation, form: _Kept, g: GraphCore) -> list[Tensor]:
        out = g._add_op(shape.SQUEEZE, [form.value], shape.AxesAttrs(form.axes),
                        fresh_name(f"{op.name}.squeeze", names, g)).outputs[0]
        kept[id(out)] = form
        return [out]

    def visit(op: Operation, ins: list[Tensor], g: GraphCore) -> list[Tensor] | None:
        if op.op.fusion is FusionKind.REDUCTION:
            keepdims = getattr(op.attrs, "keepdims", None)
            if keepdims is not False or len(op.outputs) != 1 or not can_fuse(op):
                return None
            x, y = op.inputs[0], op.outputs[0]
            axes = tuple(sorted(a % x.rank for a in reduced_axes(op))) if x.rank else ()
            if axes == tuple(range(len(axes))) or not epilogue_reads(y):  # leading axes: y broadcasts as it is
                return None
            attrs = dataclasses.replace(op.attrs, keepdims=True)
            value = g._add_op(op.op, ins, attrs, op.name, op.payload).outputs[0]
            return squeezed(op, _Kept(value, axes, x.rank), g)
        if not elementwise(op):
            return None
        forms = {kept[id(t)] for t in ins if id(t) in kept}
        if len({(f.axes, f.rank) for f in forms}) != 1:
            return None
        form = next(iter(forms))
        if not _kept_shape_of(op.outputs[0], form) or any(t.rank > form.rank - len(form.axes) for t in ins):
            return None
        new_ins = [kept[id(t)].value if id(t) in kept else
                   _aligned(t, form, g, fresh_name(f"{op.name}.expand_dims", names, g)) for t in ins]
        value = g._add_op(op.op, new_ins, op.attrs, op.name, op.payload).outputs[0]
        return squeezed(op, _Kept(value, form.axes, form.rank), g)

    result = rewrite(program, visit)
    return dead_code_elimination(result) if kept else program  # the squeezes no reader kept


__all__ = ["keep_reduced_dims"]
