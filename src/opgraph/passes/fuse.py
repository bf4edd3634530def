"""Stitching: connected elementwise, injective and reduction ops become one ``fused_region`` op.

The fused op is an ordinary op of the IR: its attributes list the steps (op name, attributes, where each
input comes from), its type rule re-runs the steps' rules, so it prints, verifies and serialises like any
other. Its lowering is a codegen facet (``codegen/triton`` sets ``FUSED_REGION.lower``), so this pass
knows nothing about Triton. Autodiff runs before fusion: the fused op has no gradient rule.

Region formation walks the ops in order (rules from each op's ``FusionKind``). A fusable op joins the
region of one of its producers when (1) the code generator accepts it, (2) no value of that region was
already read by an op outside it (the fused op stands where the region's last op stood, so earlier
outside readers would wait for it; a small value read, such as a batch norm's per-channel mean read by the
running-mean update, is let wait, in programs without assigns), (3) none of its other inputs depends on
that region (a cycle), and (4) it fits the region's domain: all reductions of a region reduce the same input
shape over the same axes, and every other value broadcasts into that shape (prologues and epilogues); a
full-size value computed from a long column reduction's statistics starts a region of its own (``_column``).
Each op is in one region; work is duplicated only where ``passes.recompute`` copied a cheap producer into its
readers first (recomputing it costs less than writing it and reading it back), and where a few arithmetic ops on
a smaller value (a per-channel product) merge into a larger region and compute per element there. Views at a region's
end are left to PyTorch (free there), and a region needs two computing ops, a normalisation (softmax, norms), or a
long column reduction (a bias gradient) to be worth a kernel.

Before regions are formed, ops the generator refuses but ``passes.decompose`` writes with ops it accepts
(group_norm, softmax_cross_entropy, and batch_norm_training as ``CompilationDescriptor.batch_norm_regions``
chooses: by default those of 16- and 32-bit inputs on CUDA) are rewritten, so they fuse too (only here: with fusion on).
Reductions that drop axes other than leading ones, and their elementwise epilogues, then take keep-dims form
(``passes.keepdims``), so that the epilogues broadcast into the reduction's domain and join its region.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..core.shape import numel
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor, infer_types
from ..ir.opdef import FusionKind, OpDef, op_by_name
from ..ir.sources import ASSIGN
from ..ops import elementwise as ew
from ..ops import unary as un
from ..ops.registry import attrs
from .cse import common_subexpression_elimination
from .decompose import BatchNormChoice, decompose_for_fusion
from .keepdims import keep_reduced_dims
from .program import Program
from .recompute import CHEAP, FUSABLE, recompute_cheap_producers

MAX_REGION_OPS = 32  # keeps generated kernels within register budgets
LONE_COLUMN_MIN = 1 << 20  # a column reduction of this many input elements is worth a kernel alone (see below)
SHORT_COLUMN = 64  # a column reduction this short keeps its columns in registers (triton/configs.py reads it)
SMALL_READ_RATIO = 16  # a value read outside a region this many times smaller than its largest seals nothing
MAX_RECOMPUTED_SMALL_OPS = 4  # ops on a smaller value merged into a region compute once per element there
# ... and only these, a few instructions each (no transcendental functions)
_ARITHMETIC: frozenset[OpDef] = frozenset({
    ew.ADD, ew.SUBTRACT, ew.MULTIPLY, ew.DIVIDE, ew.MAXIMUM, ew.MINIMUM, ew.SELECT, ew.CAST,
    un.NEGATIVE, un.ABS, un.SQUARE, un.RECIPROCAL, un.RSQRT, un.SQRT})


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


FUSED_REGION = OpDef("fused_region", infer=_fused_rule, lower=None, attrs=FusedAttrs, fusion=FusionKind.OPAQUE,
                     differentiable=False,
                     doc="a region of elementwise, injective and reduction ops computed by one generated kernel")


def region_graph(a: FusedAttrs, in_types: tuple[TensorType, ...], g: GraphCore | None = None, *,
                 named: bool = False, sources: Sequence[Tensor | None] = ()) -> tuple[list[Operation], list[Tensor],
                                                                                      list[Tensor]]:
    """The region rebuilt as a small graph (in ``g``, else a new one): (ops in order, its inputs, output tensors).
    Its inputs are placeholders, or the tensors of ``g`` given in ``sources`` (one per input, None: a placeholder).
    ``named``: the ops take the names of the graph ops they came from (where still free), for the kernels and errors
    of a graph compiled from them."""
    from ..ir.sources import PLACEHOLDER, PlaceholderAttrs

    g = GraphCore() if g is None else g
    given = list(sources) or [None] * len(in_types)
    inputs = [s if s is not None else g._add_op(PLACEHOLDER, [], PlaceholderAttrs(t.shape, t.dtype)).outputs[0]
              for s, t in zip(given, in_types, strict=True)]
    values: list[Tensor] = []
    ops: list[Operation] = []
    for step in a.steps:
        args = [inputs[-1 - k] if k < 0 else values[k] for k in step.inputs]
        name = step.name if named and step.name and step.name not in g._names else None
        op = g._add_op(op_by_name(step.op), args, step.attrs, name=name)
        ops.append(op)
        values.append(op.outputs[0])
    return ops, inputs, [values[k] for k in a.outputs]


class _Region:
    def __init__(self) -> None:
        self.ops: list[Operation] = []
        self.domain: tuple[Any, tuple[int, ...]] | None = None  # (shape, reduced axes) once a reduction joins
        self.sealed = False
        self.read_outside = False  # an op outside read one of its values (a small one leaves it unsealed)
        self.derived: set[int] = set()  # its reductions' results and the values computed from them


def _fits(shape: tuple[Any, ...], domain: tuple[Any, ...]) -> bool:
    """``shape`` broadcasts into ``domain`` (a region with a reduction computes every value inside its domain)."""
    if len(shape) > len(domain):
        return False
    lead = len(domain) - len(shape)
    return all(s == 1 or s == d for s, d in zip(shape, domain[lead:], strict=True))


def _joinable(region: _Region, op: Operation, reduction: Callable[[Operation], tuple[int, ...]] | None) -> bool:
    if region.sealed or len(region.ops) >= MAX_REGION_OPS:
        return False
    if op.op.fusion is FusionKind.REDUCTION:
        assert reduction is not None
        sig = (op.inputs[0].shape, reduction(op))
        if region.domain is not None:
            return region.domain == sig
        size = math.prod(int(d or 0) for d in sig[0])
        return all(_fits(o.outputs[0].shape, sig[0]) or _small_value(o, size) for o in region.ops)
    if region.domain is None:
        return True
    shape, axes = region.domain
    return _fits(op.outputs[0].shape, shape) and not (_column(shape, axes) and _full(op, shape)
                                                      and any(id(t) in region.derived for t in op.inputs))


def _column(shape: tuple[Any, ...], axes: tuple[int, ...]) -> bool:
    """A long column reduction (reduced axes not a suffix, more than ``SHORT_COLUMN`` elements: batch norm's
    (N, H, W) of NHWC): its statistics are fastest split across programs, which then cannot go on to the values
    computed from them (a barrier would be needed), so those start a region of their own; kept in one region
    they would run in one program per column tile, walking every row twice. The traffic is the same either way."""
    if sorted(axes) == list(range(len(shape) - len(axes), len(shape))):
        return False
    n = numel(tuple(shape[a] for a in axes))
    return n is None or n > SHORT_COLUMN


def _full(op: Operation, shape: tuple[Any, ...]) -> bool:
    """``op``'s result has the domain's size: one value per element, not per kept index."""
    n, domain = _numel(op.outputs[0]), numel(shape)
    return n is not None and n == domain


def _numel(t: Tensor) -> int | None:
    return numel(t.shape)


def _mergeable(into: _Region, other: _Region, op: Operation) -> bool:
    """``other`` (the region of another input of ``op``, which joins ``into``) can be merged into ``into``: no
    op outside it read its values yet (so no path leads back from it through outside ops, and ``depends`` needs
    no update), it has no reduction, and its values broadcast into ``op``'s static shape (one common domain: a
    value of that shape is computed once per element; up to ``MAX_RECOMPUTED_SMALL_OPS`` arithmetic ops on a
    smaller one, such as a per-channel product expanded for broadcasting, are recomputed where it is read, which
    costs less than a kernel of their own; views of smaller values on the way there are index rules)."""
    if other.sealed or other.read_outside or not other.ops or other.domain is not None or \
            len(into.ops) + len(other.ops) >= MAX_REGION_OPS:
        return False
    size = _numel(op.outputs[0])
    if size is None:
        return False
    recomputed = [o for o in other.ops if _small_value(o, size) and o.op.fusion is FusionKind.ELEMENTWISE]
    if len(recomputed) > MAX_RECOMPUTED_SMALL_OPS or any(o.op not in _ARITHMETIC for o in recomputed):
        return False
    for o in other.ops:
        t = o.outputs[0]
        if _small_value(o, size):
            continue
        if not _fits(t.shape, op.outputs[0].shape) or (into.domain is not None and not _fits(t.shape, into.domain[0])):
            return False
    return True


def _small_value(o: Operation, size: int) -> bool:
    """An elementwise op or a view on values smaller than the region's (a per-channel product, ``(C,)`` ->
    ``(1, C, 1, 1)``): the generator reaches it through the index rules from its reader and computes it there,
    so it need not fit the region's domain itself."""
    n = _numel(o.outputs[0])
    return o.op.fusion in CHEAP and n is not None and n < size


def _without_reduction(regions: list[_Region], r: int | None) -> bool:
    return r is None or regions[r].domain is None


def _small_read(region: _Region, t: Tensor) -> bool:
    """``t`` is much smaller than the region's values (a batch norm's per-channel mean, read by the running-mean
    update): reading it outside does not seal the region, so the ops after it (the ReLU) still join. Ops that
    read such a reader's results cannot join (``depends``), and the reader waits for the region's fused op."""
    n = _numel(t)
    largest = max((_numel(o.outputs[0]) or 0 for o in region.ops), default=0)
    return n is not None and n * SMALL_READ_RATIO <= largest


class _RegionOrder:
    """Which regions read from which, kept up to date as regions grow. ``depends`` of a value is recorded when its op
    is placed (transitively, as the regions were then); a region that later takes in an op reading another region
    comes to depend on that one as a whole (its fused op runs at once), and so do its earlier values and their
    readers. A join is checked against the regions reading the joined one, not only ``depends`` (a layer norm's
    gradient over non-trailing axes once made two regions each wait for the other)."""

    def __init__(self) -> None:
        self._reads: dict[int, set[int]] = {}  # a region -> every region its ops read from (through ``depends``)
        self._readers: dict[int, set[int]] = {}  # the other way round
        self._merged_into: dict[int, int] = {}
        self._names: dict[int, set[int]] = {}  # a region -> its number and those of the regions merged into it

    def _canon(self, r: int) -> int:
        while r in self._merged_into:
            r = self._merged_into[r]
        return r

    def reads_from(self, region: int, deps: frozenset[int] | set[int]) -> None:
        region = self._canon(region)
        reads = self._reads.setdefault(region, set())
        if deps <= reads:  # the usual case, checked at C speed
            return
        for q in deps - reads:
            reads.add(q)
            self._readers.setdefault(self._canon(q), set()).add(region)

    def merge(self, into: int, other: int) -> None:
        """``other`` (read by no op outside it) joins ``into``, whose earlier values now depend on what it reads."""
        self._merged_into[other] = into
        self._names.setdefault(into, {into}).update(self._names.pop(other, {other}))
        self._readers.setdefault(into, set()).update(self._readers.pop(other, set()))
        self.reads_from(into, self._reads.pop(other, set()))

    def reaches(self, deps: frozenset[int], region: int) -> bool:
        """A value depending on the regions ``deps`` depends, through them, on ``region``: one of them is
        ``region`` or reads from it, now."""
        start = self._canon(region)
        stack, seen = [start], {start}
        while stack:
            r = stack.pop()
            if not self._names.get(r, {r}).isdisjoint(deps):
                return True
            for p in self._readers.get(r, ()):
                p = self._canon(p)
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return False


def fuse_regions(program: Program, can_fuse: Callable[[Operation], bool],
                 reduced_axes: Callable[[Operation], tuple[int, ...]],
                 can_emit: Callable[[list[Operation], list[Tensor], list[Tensor]], bool] | None = None,
                 decompose: bool = True, recompute: bool = True, batch_norm: BatchNormChoice = False,
                 unchecked_indices: bool = False) -> Program:
    """Replace each region of connected fusable ops (two or more that compute) by one ``fused_region`` op.

    ``can_fuse(op)``: the code generator can write the op (elementwise, injective or reduction, at its dtypes);
    ``reduced_axes(op)``: the input axes a reduction op reduces; ``can_emit(ops, inputs, outputs)``: a formed
    region's kernel can be written (a region that cannot is left unfused). ``decompose``: first rewrite the ops
    the generator refuses but ``passes.decompose`` can write with ops it accepts (group_norm, cross entropy;
    ``batch_norm``: batch_norm_training too, all or those a predicate accepts; ``unchecked_indices``: one-update
    scatters too, where indices go unchecked).
    ``recompute``: first copy cheap producers read by several fusable ops into each (``passes.recompute``).
    """
    if decompose:
        program = decompose_for_fusion(program, can_fuse, batch_norm, unchecked_indices)
    program = keep_reduced_dims(program, can_fuse, reduced_axes)
    copied = False
    if recompute:
        before, program = program, recompute_cheap_producers(program, can_fuse, reduced_axes)
        copied = program is not before
    ops = program.graph.ops
    position = {id(o): k for k, o in enumerate(ops)}
    region_of: dict[int, int] = {}  # id(op) -> region number
    regions: list[_Region] = []
    depends: dict[int, frozenset[int]] = {}  # id(tensor) -> regions it (transitively) depends on
    order = _RegionOrder()  # what each region reads from, kept up to date as regions grow (``depends`` is not)
    # a reader left unsealing waits for the region's fused op, which may move it past a later op: only pure
    # fusable readers (no opaque op, whose order may matter: random numbers), and not in programs with assigns
    # (a variable's reader moved past its assign would see the new value)
    reorderable = not any(o.op is ASSIGN for o in ops)
    for op in ops:
        deps = frozenset().union(*(depends.get(id(t), frozenset()) for t in op.inputs))
        if op.op.fusion in FUSABLE and len(op.outputs) == 1 and can_fuse(op):
            joined = None
            # a region with a reduction first: the small regions of the other inputs can merge into it, not it
            # into them (a running-statistics update joins its batch norm's statistics)
            for t in sorted(op.inputs, key=lambda u: _without_reduction(regions, region_of.get(id(u.op)))):
                r = region_of.get(id(t.op))
                if r is None or not _joinable(regions[r], op, reduced_axes):
                    continue
                others = [u for u in op.inputs if region_of.get(id(u.op)) != r]
                if not any(order.reaches(depends.get(id(u), frozenset()), r) for u in others):
                    joined = r
                    break
            if joined is None:
                joined = len(regions)
                regions.append(_Region())
            elif op.op.fusion is not FusionKind.REDUCTION:  # producers' regions of its other inputs come along
                for t in op.inputs:
                    r2 = region_of.get(id(t.op))
                    if r2 is not None and r2 != joined and _mergeable(regions[joined], regions[r2], op):
                        for o in regions[r2].ops:
                            region_of[id(o)] = joined
                        merged = regions[joined].ops + regions[r2].ops
                        regions[joined].ops = sorted(merged, key=lambda o: position[id(o)])
                        regions[r2] = _Region()
                        order.merge(joined, r2)
                        regions[r2].sealed = True
            region = regions[joined]
            if op.op.fusion is FusionKind.REDUCTION and region.domain is None:
                region.domain = (op.inputs[0].shape, reduced_axes(op))
            region_of[id(op)] = joined
            region.ops.append(op)
            order.reads_from(joined, deps)
            if op.op.fusion is FusionKind.REDUCTION or any(id(t) in region.derived for t in op.inputs):
                region.derived.add(id(op.outputs[0]))
        for t in op.inputs:  # an outside reader seals the region it reads from, unless it reads a small value
            r = region_of.get(id(t.op))
            if r is not None and r != region_of.get(id(op)):
                regions[r].read_outside = True  # never merged into another region: the reader would depend on it
                regions[r].sealed |= not (reorderable and op.op.fusion in FUSABLE and _small_read(regions[r], t))
        mine = frozenset({region_of[id(op)]}) if id(op) in region_of else frozenset()
        for t in op.outputs:
            depends[id(t)] = deps | mine

    readers: dict[int, list[Operation]] = {}
    for op in ops:
        for t in op.inputs:
            readers.setdefault(id(t), []).append(op)
    outside_uses: set[int] = {id(t) for t in program.outputs}
    for op in ops:
        for t in op.inputs:
            if region_of.get(id(t.op)) != region_of.get(id(op)) or id(op) not in region_of:
                outside_uses.add(id(t))
    bodies: dict[int, tuple[list[Operation], list[Tensor], list[Tensor]]] = {}
    for region in regions:
        for part in _emittable_parts(_trim(region.ops, readers), readers, outside_uses, can_emit, reduced_axes):
            bodies[len(bodies)] = part
    in_fused = {id(o): r for r, (body, _, _) in bodies.items() for o in body}
    last = {id(body[-1]): r for r, (body, _, _) in bodies.items()}

    new = GraphCore()
    mapping: dict[int, Tensor] = {}
    op_map: dict[int, Operation] = {}

    def emit(item: Operation | int) -> None:
        if isinstance(item, int):  # a region, at its last op's place
            body, ext, outs = bodies[item]
            views = _views_of_inputs(outs, ext)
            for t in views:  # read outside as the view PyTorch makes for free, not a copy the kernel stores
                emit(t.op)
            outs = [t for t in outs if all(v is not t for v in views)]  # Tensor's == builds an op
            index = {id(o.outputs[0]): k for k, o in enumerate(body)}
            steps = [FusedStep(o.op.name, o.attrs, tuple(index[id(t)] if id(t) in index
                                                        else -1 - next(j for j, e in enumerate(ext) if e is t)
                                                        for t in o.inputs), o.name) for o in body]
            fused_op = new._add_op(FUSED_REGION, [mapping[id(t)] for t in ext],
                                   FusedAttrs(tuple(steps), tuple(index[id(t)] for t in outs)))
            for t, o in zip(fused_op.outputs, outs, strict=True):
                mapping[id(o)] = t
            return
        copied = new._add_op(item.op, [mapping[id(t)] for t in item.inputs], item.attrs, item.name, item.payload,
                             [t.type for t in item.outputs])
        op_map[id(item)] = copied
        for old, rep in zip(item.outputs, copied.outputs, strict=True):
            mapping[id(old)] = rep

    def ready(item: Operation | int) -> bool:
        reads = bodies[item][1] if isinstance(item, int) else item.inputs
        return all(id(t) in mapping for t in reads)

    # ops in order, a region at its last op; a view trimmed off a region waits for the region's fused op
    waiting: list[Operation | int] = []
    for op in ops:
        r = in_fused.get(id(op))
        item: Operation | int | None = r if (r is not None and id(op) in last) else None if r is not None else op
        if item is None:
            continue
        waiting.append(item)
        progress = True
        while progress:
            progress = False
            for k, w in enumerate(waiting):
                if ready(w):
                    emit(waiting.pop(k))
                    progress = True
                    break
    assert not waiting, "region formation left ops unplaced"
    fused = Program(new, [mapping[id(t)] for t in program.inputs], [mapping[id(t)] for t in program.outputs],
                    [op_map[id(o)] for o in program.effects])
    # copies that joined no region (or the same one) are the same op twice: one is kept
    return common_subexpression_elimination(fused) if copied else fused




Part = tuple[list[Operation], list[Tensor], list[Tensor]]  # (ops, inputs, outputs) of one fused op


def _io(body: list[Operation], readers: dict[int, list[Operation]], outside_uses: set[int]) -> Part:
    members = {id(o) for o in body}
    ext: list[Tensor] = []
    for o in body:
        for t in o.inputs:
            if id(t.op) not in members and all(e is not t for e in ext):
                ext.append(t)
    outs = [o.outputs[0] for o in body if id(o.outputs[0]) in outside_uses
            or any(id(u) not in members for u in readers.get(id(o.outputs[0]), []))]
    return body, ext, outs


def _emittable_parts(body: list[Operation], readers: dict[int, list[Operation]], outside_uses: set[int],
                     can_emit: Callable[[list[Operation], list[Tensor], list[Tensor]], bool] | None,
                     reduced_axes: Callable[[Operation], tuple[int, ...]]) -> list[Part]:
    """The region as fused ops: whole when its kernel can be written, else split into the longest prefixes
    that can (an op no prefix can start stays unfused), so one unwritable op does not unfuse its neighbours."""
    parts: list[Part] = []
    rest = body
    while rest:
        for k in range(len(rest), 0, -1):
            if not _worth_a_kernel(rest[:k], reduced_axes):
                continue
            part = _io(rest[:k], readers, outside_uses)
            if can_emit is None or can_emit(*part):
                parts.append(part)
                rest = rest[k:]
                break
        else:
            rest = rest[1:]
    return parts


def _views_of_inputs(outs: list[Tensor], ext: list[Tensor]) -> list[Tensor]:
    """The region's outputs that are a view op (reshape, transpose, ...) of one of its inputs: an outside reader
    gets the view made outside instead (layer norm's gradient region stored its incoming gradient, reshaped, for
    the bias gradient's sum). Not all of them: a kernel stores at least one output."""
    inputs = {id(t) for t in ext}
    views = [t for t in outs if t.op.op.fusion is FusionKind.INJECTIVE and len(t.op.outputs) == 1
             and all(id(u) in inputs for u in t.op.inputs)]
    return views if len(views) < len(outs) else []


def _worth_a_kernel(body: list[Operation], reduced_axes: Callable[[Operation], tuple[int, ...]]) -> bool:
    """Two or more computing ops, or one normalisation (a reduction shaped like its input: softmax, norms),
    whose generated kernel keeps the row in registers where PyTorch's makes several passes, or one long column
    reduction of at least ``LONE_COLUMN_MIN`` elements (a bias or layer-norm gradient), which the generated
    kernel, tuned, splits across more programs than PyTorch's does: 1.05-1.7x less time on an H200 (BERT's shapes,
    ``benchmarks/column_reductions.py --regions sums``, RESULTS.md fourteenth session)."""
    computing = [o for o in body if o.op.fusion is not FusionKind.INJECTIVE]
    return len(computing) >= 2 or any(o.op.fusion is FusionKind.REDUCTION and (
        o.outputs[0].type == o.inputs[0].type
        or (_column(o.inputs[0].shape, reduced_axes(o)) and (_numel(o.inputs[0]) or 0) >= LONE_COLUMN_MIN))
        for o in computing)


def _trim(body: list[Operation], readers: dict[int, list[Operation]]) -> list[Operation]:
    """The region without injective ops that nothing inside reads (views at its end cost nothing unfused)."""
    body = list(body)
    while True:
        inside = {id(o) for o in body}
        drop = [o for o in body if o.op.fusion is FusionKind.INJECTIVE
                and not any(id(u) in inside for u in readers.get(id(o.outputs[0]), []))]
        if not drop:
            return body
        gone = {id(o) for o in drop}
        body = [o for o in body if id(o) not in gone]


__all__ = ["FUSED_REGION", "FusedAttrs", "FusedStep", "fuse_regions", "region_graph"]
