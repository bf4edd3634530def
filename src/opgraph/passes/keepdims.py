"""Row-reduction epilogues in keep-dims form, so that they fuse with their reduction.

A reduction without ``keepdims`` (NumPy's default) drops its reduced axes: ``reduce_sum(x, axes=(1,))`` of a
(64, 4096) ``x`` is (64,), and an elementwise op on it, (64,), does not broadcast into the reduction's domain
(64, 4096) by the right-aligned rule, so region formation (``passes.fuse``) cannot put it in the reduction's
kernel: a second kernel reads the row values back. Here such a reduction keeps its axes as size 1 (MPSGraph's own
convention) and the elementwise ops reading it work on that shape, their other operands given the same size-1
axes (``expand_dims``, a view); a ``squeeze`` (a view) hands the old shape to every reader that is not rewritten.
The squeezes sink through chains of epilogue ops, link by link, and end outside the region, where they cost
nothing; an ``expand_dims`` that undoes one reads the keep-dims value instead (softmax written by hand). A chain is
left as it is where another fusable op reads one of its values as squeezed (a second reduction, a broadcast): the
squeeze would stand between them, or where the chain goes on from a result of the program (its squeeze would seal
the region halfway). So is a column reduction, whose result already broadcasts into its domain.

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

Form = tuple[tuple[int, ...], int]  # (the reduced axes, now of size 1; the rank)


@dataclasses.dataclass(frozen=True)
class _Kept:
    """A value of the new graph in keep-dims form: rank ``rank``, size 1 along ``axes``."""

    value: Tensor
    axes: tuple[int, ...]
    rank: int


def _kept_shape(t: Tensor, form: Form) -> tuple[object, ...]:
    """``t``'s shape (a squeezed one) with the reduced axes put back as size 1."""
    axes, rank = form
    dims = iter(t.shape)
    return tuple(1 if k in axes else next(dims) for k in range(rank))


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


class _Plan:
    """Which ops of the old graph take keep-dims form: reductions and the elementwise chains after them, grouped
    into chains (one per reduction, joined where an op reads two); a chain one of whose values a fusable op would
    read squeezed is dropped whole."""

    def __init__(self, program: Program, can_fuse: Callable[[Operation], bool],
                 reduced_axes: Callable[[Operation], tuple[int, ...]]) -> None:
        self.by_reader = readers(program)
        self.outputs = {id(t) for t in program.outputs}
        self.can_fuse = can_fuse
        self.form: dict[int, Form] = {}  # id(old tensor) -> its form, for values that take one
        self._chain: dict[int, int] = {}  # id(old op) -> a member of its chain (union-find)
        members: list[Operation] = []
        for op in program.graph.ops:
            form = self._reduction_form(op, reduced_axes) if op.op.fusion is FusionKind.REDUCTION else \
                self._epilogue_form(op)
            if form is not None:
                self.form[id(op.outputs[0])] = form
                members.append(op)
        dropped = {self._root(op) for op in members if self._read_squeezed(op.outputs[0])}
        self.ops = {id(op) for op in members if self._root(op) not in dropped}

    def elementwise(self, op: Operation) -> bool:
        return op.op.fusion is FusionKind.ELEMENTWISE and len(op.outputs) == 1 and self.can_fuse(op)

    def _reduction_form(self, op: Operation, reduced_axes: Callable[[Operation], tuple[int, ...]]) -> Form | None:
        if getattr(op.attrs, "keepdims", None) is not False or len(op.outputs) != 1 or not self.can_fuse(op):
            return None
        x, y = op.inputs[0], op.outputs[0]
        axes = tuple(sorted(a % x.rank for a in reduced_axes(op))) if x.rank else ()
        if axes == tuple(range(len(axes))):  # none, or leading axes: y broadcasts into the domain as it is
            return None
        if not any(self.elementwise(r) and r.outputs[0].shape == y.shape for r in self.by_reader.get(id(y), [])):
            return None
        self._chain[id(op)] = id(op)
        return axes, x.rank

    def _epilogue_form(self, op: Operation) -> Form | None:
        if not self.elementwise(op):
            return None
        kept = [t for t in op.inputs if id(t) in self.form]
        forms = {self.form[id(t)] for t in kept}
        if len(forms) != 1:
            return None
        form = next(iter(forms))
        y = op.outputs[0]
        if any(t.rank > form[1] - len(form[0]) for t in op.inputs) or kept[0].shape != y.shape:
            return None
        self._chain[id(op)] = id(op)
        for t in kept:  # one chain with those it reads
            self._chain[self._root(t.op)] = self._root(op)
        return form

    def _root(self, op: Operation) -> int:
        k = id(op)
        while self._chain[k] != k:
            k = self._chain[k]
        return k

    def _read_squeezed(self, t: Tensor) -> bool:
        """A fusable op reads ``t`` and would take it squeezed: neither an epilogue on its keep-dims form nor an
        ``expand_dims`` that undoes the squeeze. Or ``t`` is a result of the program that the chain goes on from:
        its squeeze would read the region halfway, which then takes no more ops (region formation seals it)."""
        if id(t) in self.outputs and any(id(r.outputs[0]) in self.form for r in self.by_reader.get(id(t), [])):
            return True
        for r in self.by_reader.get(id(t), []):
            if id(r.outputs[0]) in self.form or not self.can_fuse(r):
                continue
            if r.op is shape.EXPAND_DIMS and r.outputs[0].shape == _kept_shape(t, self.form[id(t)]):
                continue
            return True
        return False


def keep_reduced_dims(program: Program, can_fuse: Callable[[Operation], bool],
                      reduced_axes: Callable[[Operation], tuple[int, ...]]) -> Program:
    """``program`` with each fusable reduction whose result does not broadcast into its domain, and which an
    elementwise op of the same shape reads, in keep-dims form, with its elementwise readers (and theirs, in turn) on
    that form (module docstring). ``can_fuse(op)``: the code generator can write the op; ``reduced_axes(op)``: the
    input axes a reduction op reduces."""
    plan = _Plan(program, can_fuse, reduced_axes)
    if not plan.ops:
        return program
    names = {o.name for o in program.graph.ops}
    kept: dict[int, _Kept] = {}  # id(new squeeze output) -> the keep-dims value it squeezes

    def squeezed(op: Operation, form: _Kept, g: GraphCore) -> list[Tensor]:
        out = g._add_op(shape.SQUEEZE, [form.value], shape.AxesAttrs(form.axes),
                        fresh_name(f"{op.name}.squeeze", names, g)).outputs[0]
        kept[id(out)] = form
        return [out]

    def visit(op: Operation, ins: list[Tensor], g: GraphCore) -> list[Tensor] | None:
        if op.op is shape.EXPAND_DIMS and id(ins[0]) in kept and \
                op.outputs[0].shape == kept[id(ins[0])].value.shape:
            return [kept[id(ins[0])].value]  # the squeeze undone: the keep-dims value itself
        if id(op) not in plan.ops:
            return None
        axes, rank = plan.form[id(op.outputs[0])]
        if op.op.fusion is FusionKind.REDUCTION:
            value = g._add_op(op.op, ins, dataclasses.replace(op.attrs, keepdims=True), op.name, op.payload)
            return squeezed(op, _Kept(value.outputs[0], axes, rank), g)
        form = next(kept[id(t)] for t in ins if id(t) in kept)
        new_ins = [kept[id(t)].value if id(t) in kept else
                   _aligned(t, form, g, fresh_name(f"{op.name}.expand_dims", names, g)) for t in ins]
        value = g._add_op(op.op, new_ins, op.attrs, op.name, op.payload)
        return squeezed(op, _Kept(value.outputs[0], axes, rank), g)

    return dead_code_elimination(rewrite(program, visit))  # the squeezes no reader kept


__all__ = ["keep_reduced_dims"]
