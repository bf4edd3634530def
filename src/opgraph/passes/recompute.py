"""Recomputation for fusion: a cheap producer read by several fusable ops is copied into each reader.

Region formation (``passes.fuse``) puts each op in one region, so a value read by two regions is written to
memory by one and read back by both. Where recomputing is cheaper than that round trip, this pass gives every
reader its own copy of the producer, which then fuses into the reader's region: batch-norm's gradient reads
``x - mean`` in its weight-gradient reduction and in its input gradient; a standalone subtract writes it and
both read it back (four passes over a full tensor), the copies read ``x`` twice (two passes).

Counted in passes over the producer's element count: materialised, the producer reads its ``F`` inputs of its
own size (smaller ones broadcast and are cheap), writes once, and its ``k`` readers read it: ``F + 1 + k``;
recomputed, each of ``k`` copies reads the ``F`` inputs: ``F * k``. A producer is copied when that is fewer
(``F <= 1`` always; two full-size inputs for two readers), its readers all fuse, its value is not an output of
the program (that write stays anyway), and its readers cannot share one region: one reads what another
computes past a reduction over other axes than the innermost (a row reduction and its use share a region,
the normalisation pattern, so copying there would only split it). Readers are visited before producers, so a
chain of cheap producers (``expand_dims`` of a mean, then the subtract) is copied link by link; the copies in
all stay within about the program's size. A producer whose value an exact comparison reads (a min or max gradient's
``equal``) is not copied: a kernel's copy may differ in its last bit from the value the extremum was taken on.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.shape import numel
from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.opdef import FusionKind
from ..ops import elementwise as ew
from ..ops import shape
from .builder import fresh_name
from .dce import dead_code_elimination
from .program import Program, copy_op, rewrite

CHEAP = (FusionKind.ELEMENTWISE, FusionKind.INJECTIVE)
FUSABLE = (FusionKind.ELEMENTWISE, FusionKind.INJECTIVE, FusionKind.REDUCTION)
_VIEWS = frozenset({shape.TRANSPOSE, shape.RESHAPE, shape.EXPAND_DIMS, shape.SQUEEZE})  # outputs read through
_EXACT = frozenset({ew.EQUAL, ew.NOT_EQUAL})  # comparisons whose operands must be bit for bit what was stored
_MAX_PAIRS_READERS = 8  # readers whose pairs are searched for a link
_LINK_DEPTH = 12  # ops followed from one reader to another (batch-norm's gradient links within about 8)


def _numel(t: Tensor) -> int | None:
    return numel(t.shape)


def _seals(op: Operation, reduced_axes: Callable[[Operation], tuple[int, ...]]) -> bool:
    """A reduction whose use cannot share its region: one over other axes than a suffix of its input's (a
    column sum, batch-norm's (N, H, W) sum); a row reduction and its use share one (the normalisation pattern)."""
    if op.op.fusion is not FusionKind.REDUCTION:
        return False
    rank = op.inputs[0].rank
    try:
        axes = sorted(a % rank for a in reduced_axes(op)) if rank else []
    except KeyError:  # a reduction the generator has no recipe for: no region shares it
        return True
    return axes != list(range(rank - len(axes), rank))


def _reaches(start: Operation, goal: Operation, readers: dict[int, list[Operation]],
             reduced_axes: Callable[[Operation], tuple[int, ...]]) -> bool:
    """``goal`` reads (transitively, through fusable ops, within a few steps) what ``start`` computes, past a
    reduction that ``_seals``."""
    frontier, seen = [(start, _seals(start, reduced_axes))], {(id(start), _seals(start, reduced_axes))}
    for _ in range(_LINK_DEPTH):
        nxt = []
        for o, sealed in frontier:
            for r in readers.get(id(o), []):
                if r is goal:
                    if sealed:
                        return True
                    continue
                state = (id(r), sealed or _seals(r, reduced_axes))
                if state not in seen and r.op.fusion in FUSABLE:
                    seen.add(state)
                    nxt.append((r, state[1]))
        frontier = nxt
    return False


def _linked(rs: list[Operation], copies: bool, original: dict[int, list[Operation]],
            reduced_axes: Callable[[Operation], tuple[int, ...]]) -> bool:
    """The readers cannot all share one region: one reads what another computes past a sealing reduction, or
    (``copies``) they include copies of one op already bound for different regions."""
    if copies:
        return True
    if len(rs) > _MAX_PAIRS_READERS:  # many independent readers: not worth the search
        return False
    return any(a is not b and _reaches(a, b, original, reduced_axes) for a in rs for b in rs)


def _outputs_through_views(program: Program) -> set[int]:
    """The program's outputs and the values they view (a channels-last graph returns NCHW transposes of its NHWC
    values): those are written anyway, so copying their producer into readers would compute them twice."""
    out: set[int] = set()
    for t in program.outputs:
        while id(t) not in out:
            out.add(id(t))
            if t.op.op not in _VIEWS or len(t.op.inputs) != 1:
                break
            t = t.op.inputs[0]
    return out


def recompute_cheap_producers(program: Program, can_fuse: Callable[[Operation], bool],
                              reduced_axes: Callable[[Operation], tuple[int, ...]]) -> Program:
    """``program`` with each cheap producer that several fusable ops read copied into every reader (see the
    module docstring); ``can_fuse(op)``: the code generator can write the op; ``reduced_axes(op)``: the input
    axes a reduction op reduces."""
    ops = program.graph.ops
    outputs = _outputs_through_views(program)
    original: dict[int, list[Operation]] = {}  # id(op) -> the distinct ops reading its output
    for op in ops:
        for producer in {id(t.op): t.op for t in op.inputs}.values():
            original.setdefault(id(producer), []).append(op)
    count = {k: len(v) for k, v in original.items()}  # readers, a copied reader counted once per copy
    has_copies: set[int] = set()  # producers read by a copied op
    copied: set[int] = set()
    budget = len(ops) + 64  # copies in all: recomputation at most about doubles the graph

    def compared_exactly(op: Operation) -> bool:
        """``op``'s value reaches, through views, an exact comparison (a min or max gradient's ``equal``): the
        copy a kernel computes may differ in the last bit from the value its extremum was taken on (0/0 where no
        element matched)."""
        stack, seen = [op], set()
        while stack:
            o = stack.pop()
            for r in original.get(id(o), []):
                if r.op in _EXACT:
                    return True
                if r.op.fusion is FusionKind.INJECTIVE and id(r) not in seen:
                    seen.add(id(r))
                    stack.append(r)
        return False

    def worth_copying(op: Operation) -> bool:
        if op.op.fusion not in CHEAP or len(op.outputs) != 1 or op.payload is not None or not can_fuse(op):
            return False
        if compared_exactly(op):
            return False
        out, rs = op.outputs[0], original.get(id(op), [])
        size, k = _numel(out), count.get(id(op), 0)
        if size is None or id(out) in outputs or k < 2 or k > budget:
            return False
        if any(r.op.fusion not in FUSABLE or len(r.outputs) != 1 or not can_fuse(r) for r in rs):
            return False
        full = len({id(t) for t in op.inputs if _numel(t) == size})
        return full * k < full + 1 + k and _linked(rs, id(op) in has_copies, original, reduced_axes)

    for op in reversed(ops):  # readers first: a copied reader makes its producers' readers the copies
        if worth_copying(op):
            copied.add(id(op))
            k = count[id(op)]
            budget -= k
            for producer in {id(t.op): t.op for t in op.inputs}.values():
                count[id(producer)] += k - 1
                has_copies.add(id(producer))
    if not copied:
        return program
    names = {o.name for o in ops}

    def copy_of(t: Tensor, local: dict[int, Tensor], g: GraphCore) -> Tensor:
        """``t`` as one reader sees it: a fresh copy of its producer (and of the copied producers under it), made
        once per reader (``local``) however many paths of the reader reach it."""
        if id(t.op) not in copied:
            return mapping[id(t)]
        if id(t) not in local:
            p = t.op
            ins = [copy_of(u, local, g) for u in p.inputs]
            name = fresh_name(f"{p.name}.r", names, g)
            local[id(t)] = g._add_op(p.op, ins, p.attrs, name, None, [p.outputs[0].type]).outputs[0]
        return local[id(t)]

    mapping: dict[int, Tensor] = {}

    def visit(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | None:
        if id(op) in copied or not any(id(t.op) in copied for t in op.inputs):
            return None  # as it was (a copied op itself: dead once its readers have their copies)
        local: dict[int, Tensor] = {}  # this reader's copies
        new_ins = [copy_of(t, local, g) if id(t.op) in copied else mapped
                   for t, mapped in zip(op.inputs, ins, strict=True)]
        return g._add_op(op.op, new_ins, op.attrs, op.name, op.payload, [t.type for t in op.outputs])

    def track(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | None:
        result = visit(op, ins, g)
        if result is None:
            result = copy_op(g, op, ins)
        for old, new in zip(op.outputs, result.outputs, strict=True):
            mapping[id(old)] = new
        return result

    return dead_code_elimination(rewrite(program, track))


__all__ = ["recompute_cheap_producers"]
