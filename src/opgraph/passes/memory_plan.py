"""Memory planning: liveness, aliasing, in-place updates and an arena layout for one ``Program``.

``plan_memory`` is an analysis (it changes no op). For every value it computes its size (dynamic dims
count as 1), its live interval (defining op index .. last reading op index; program outputs live to
``len(ops)``) and the buffers it may share memory with:

* sources (placeholder = the caller's tensor, constant, variable, read = state) are *external*: the run
  does not own their memory, so nothing is ever written into them;
* an op known to allocate (elementwise and reduction ops except ``cast``/``sum_to``, which may return
  their input; matmul, convolutions, gathers, concat, ...; and any op the caller says writes fresh
  buffers) produces new *buffers* owned by the run;
* a view-like op (reshape, transpose, slice, split, broadcast, ...) produces a *view* of its first
  input's buffers: it costs nothing and keeps them alive while it lives;
* any other op is treated both ways: its output costs its bytes *and* may alias all its inputs.

A buffer lives until the last use of any value that may alias it. At op ``k``, output ``j`` is written
into input ``i``'s buffer when ``inplace_ok(op, i, j)`` holds, both have the same static shape and dtype,
input ``i`` is the whole of an owned buffer (not a view: a broadcast or transposed view cannot be
written elementwise), that buffer and all its aliases are dead after ``k`` (so it is no program output),
and every other input position reading the same buffer is the same value and also passes the predicate.
An input buffer takes at most one output.

Layout: owned buffers are placed in one arena by simulating an allocator over the ops in order (best
fit among freed blocks, coalescing neighbours, growing the top otherwise); a buffer is freed after the
op that ends its life. ``planned_peak_bytes`` is the arena's size: what a static plan of this program
needs, at least ``live_peak_bytes`` (the most owned bytes alive at once) and equal to it for chains.
An online allocator, unlike greedy-by-size offline packing, is linear in the ops and mirrors what the
generated function's frees let PyTorch's caching allocator do.

>>> import opgraph as og
>>> from opgraph.passes import Program, plan_memory
>>> g = og.Graph(); x = g.placeholder((256,), og.float32)
>>> y = g.exp(g.exp(g.exp(x)))
>>> plan = plan_memory(Program(g, [x], [y], []), lambda op, i, j: True)
>>> plan.inplace, plan.planned_peak_bytes, plan.unplanned_peak_bytes
({2: {0: 0}, 3: {0: 0}}, 1024, 3072)
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..ir.graph import Operation, Tensor
from ..ir.opdef import FusionKind, OpDef
from ..ir.sources import ASSIGN, CONSTANT, PLACEHOLDER, READ, VARIABLE
from ..ops.conv import CONV2D, CONV3D, CONV_TRANSPOSE2D, DEPTHWISE_CONV2D
from ..ops.elementwise import CAST, REINTERPRET_CAST
from ..ops.epilogue import MATMUL_EPILOGUE
from ..ops.gather import BAND_PART, COORDINATE_ALONG_AXIS, GATHER, GATHER_ALONG_AXIS, GATHER_ND, ONE_HOT
from ..ops.gradient_support import BROADCAST_LIKE, SUM_TO
from ..ops.linalg import MATMUL
from ..ops.shape import (
    BROADCAST_TO,
    CONCAT,
    EXPAND_DIMS,
    FLATTEN2D,
    RESHAPE,
    RESHAPE_LIKE,
    SHAPE_OF,
    SPLIT,
    SPLIT_LIKE,
    SQUEEZE,
    STACK,
    TILE,
    TRANSPOSE,
)
from ..ops.slicing import SLICE, SLICE_UPDATE
from .fuse import FUSED_REGION
from .program import Program

InplaceOk = Callable[[Operation, int, int], bool]

_SOURCES = frozenset({PLACEHOLDER, CONSTANT, VARIABLE, READ})
# torch lowerings that may return a view of (or the very) first input
VIEW_OPS: frozenset[OpDef] = frozenset({RESHAPE, RESHAPE_LIKE, TRANSPOSE, EXPAND_DIMS, SQUEEZE, FLATTEN2D,
                                        BROADCAST_TO, BROADCAST_LIKE, SLICE, SPLIT, SPLIT_LIKE, REINTERPRET_CAST})
# lowerings checked to return new tensors, beyond the elementwise and reduction kinds
ALLOCATING_OPS: frozenset[OpDef] = frozenset({FUSED_REGION, MATMUL, CONV2D, CONV3D, CONV_TRANSPOSE2D,
                                              DEPTHWISE_CONV2D, CONCAT, STACK, TILE, GATHER, GATHER_ND,
                                              GATHER_ALONG_AXIS, ONE_HOT, COORDINATE_ALONG_AXIS, BAND_PART,
                                              SLICE_UPDATE, SHAPE_OF, MATMUL_EPILOGUE})
MAY_RETURN_INPUT = frozenset({CAST, SUM_TO})  # x.to(same dtype); sum_to with nothing to sum


class Role(enum.Enum):
    """Where a value's memory comes from."""

    EXTERNAL = "external"  # placeholder, constant, variable, read: not the run's to reuse or overwrite
    BUFFER = "buffer"  # a new allocation owned by the run
    VIEW = "view"  # may share its input's memory; costs nothing
    INPLACE = "inplace"  # written into an input's buffer; costs nothing


@dataclass(frozen=True)
class ValueInfo:
    """One value of the program, for a viewer: ``start`` is its defining op's index, ``end`` its last
    reader's (``len(ops)`` for a program output); ``offset`` places a BUFFER in the arena; ``alias_of``
    names the buffers whose memory it may share (a view's base, an in-place target, an unknown op's inputs)."""

    name: str
    nbytes: int
    start: int
    end: int
    role: Role
    offset: int | None = None
    alias_of: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemoryPlan:
    """The result of ``plan_memory``. ``inplace[k][j] = i``: op ``k`` writes output ``j`` into input ``i``."""

    inplace: dict[int, dict[int, int]]
    planned_peak_bytes: int  # arena size of the plan
    live_peak_bytes: int  # most owned bytes alive at once (a lower bound for any layout)
    unplanned_peak_bytes: int  # every output of every non-source op allocated, nothing freed
    reused_buffers: int  # buffers placed (at least partly) in memory freed by an earlier buffer
    values: tuple[ValueInfo, ...]

    @property
    def inplace_updates(self) -> int:
        return sum(len(m) for m in self.inplace.values())


class _Kind(enum.Enum):
    SOURCE = 0
    ALLOCATES = 1
    VIEW = 2
    UNKNOWN = 3


def nbytes(t: Tensor) -> int:
    """Bytes of ``t``'s type; a dynamic dim counts as 1."""
    n = 1
    for d in t.shape:
        n *= 1 if d is None else d
    return int(n * t.dtype.itemsize)


def _kind(op: Operation, fresh: Callable[[Operation], bool]) -> _Kind:
    o = op.op
    if o in _SOURCES:
        return _Kind.SOURCE
    if fresh(op) or o in ALLOCATING_OPS:
        return _Kind.ALLOCATES
    if o in VIEW_OPS:
        return _Kind.VIEW
    if o.fusion in (FusionKind.ELEMENTWISE, FusionKind.REDUCTION) and o not in MAY_RETURN_INPUT:
        return _Kind.ALLOCATES
    return _Kind.UNKNOWN


def _never(op: Operation) -> bool:
    return False


def plan_memory(program: Program, inplace_ok: InplaceOk | None = None,
                fresh: Callable[[Operation], bool] = _never) -> MemoryPlan:
    """Plan ``program``'s intermediate memory (see the module docstring). ``inplace_ok(op, i, j)`` says
    whether op's kernel may write output ``j`` into input ``i``'s buffer (None: never); ``fresh(op)``
    marks ops whose outputs are new buffers besides the built-in table (kernels that take ``out=``)."""
    ops = program.graph.ops
    n_ops = len(ops)
    last: dict[int, int] = {}
    for k, op in enumerate(ops):
        for t in op.inputs:
            last[id(t)] = k
    for t in program.outputs:
        last[id(t)] = n_ops

    roots: dict[int, frozenset[int]] = {}  # id(value) -> ids of the buffers it may share memory with
    exact: dict[int, int] = {}  # id(value) -> id(buffer) when the value is that whole buffer
    buf_end: dict[int, int] = {}
    owned: dict[int, Tensor] = {}  # id(buffer) -> its defining value, for owned buffers
    named: dict[int, str] = {}  # id(value) -> name, in definition order
    inplace: dict[int, dict[int, int]] = {}
    infos: list[tuple[Tensor, int, int, Role, frozenset[int]]] = []

    for k, op in enumerate(ops):
        kind = _kind(op, fresh)
        chosen = _choose_inplace(k, op, inplace_ok, roots, exact, owned, buf_end) \
            if kind is _Kind.ALLOCATES and inplace_ok is not None else {}
        if chosen:
            inplace[k] = chosen
        first = roots.get(id(op.inputs[0]), frozenset()) if op.inputs else frozenset()
        every = frozenset().union(*(roots.get(id(t), frozenset()) for t in op.inputs))
        for j, t in enumerate(op.outputs):
            end = last.get(id(t), k)
            named[id(t)] = t.name
            if j in chosen:
                b = exact[id(op.inputs[chosen[j]])]
                r, role = frozenset({b}), Role.INPLACE
                exact[id(t)] = b
            elif kind is _Kind.VIEW:
                r, role = first, Role.VIEW
            elif kind is _Kind.UNKNOWN:  # costs its bytes, and may be (a view of) any input
                r, role = every | {id(t)}, Role.BUFFER
                owned[id(t)] = t
            else:
                r, role = frozenset({id(t)}), Role.EXTERNAL if kind is _Kind.SOURCE else Role.BUFFER
                exact[id(t)] = id(t)
                if kind is _Kind.ALLOCATES:
                    owned[id(t)] = t
            roots[id(t)] = r
            for b in r:
                buf_end[b] = max(buf_end.get(b, k), end)
            infos.append((t, k, end, role, r))

    offsets, planned, live_peak, reused = _layout(ops, owned, buf_end)
    order = {b: n for n, b in enumerate(named)}
    unplanned = sum(nbytes(t) for op in ops if op.op not in _SOURCES and op.op is not ASSIGN for t in op.outputs)
    values = tuple(ValueInfo(t.name, nbytes(t), start, end, role, offsets.get(id(t)) if role is Role.BUFFER else None,
                             tuple(named[b] for b in sorted(r, key=order.__getitem__) if b != id(t)))
                   for t, start, end, role, r in infos)
    return MemoryPlan(inplace, planned, live_peak, unplanned, reused, values)


def _choose_inplace(k: int, op: Operation, inplace_ok: InplaceOk, roots: dict[int, frozenset[int]],
                    exact: dict[int, int], owned: dict[int, Tensor], buf_end: dict[int, int]) -> dict[int, int]:
    chosen: dict[int, int] = {}
    taken: set[int] = set()
    for j, out in enumerate(op.outputs):
        if not out.type.is_static:
            continue
        for i, x in enumerate(op.inputs):
            b = exact.get(id(x))
            # buf_end already covers every alias defined so far; later ones can only read a live alias
            if b is None or b in taken or b not in owned or buf_end[b] != k or x.type != out.type:
                continue
            others = [i2 for i2, y in enumerate(op.inputs) if i2 != i and b in roots.get(id(y), ())]
            if not inplace_ok(op, i, j) or any(op.inputs[i2] is not x or not inplace_ok(op, i2, j)
                                               for i2 in others):
                continue
            chosen[j] = i
            taken.add(b)
            break
    return chosen


def _layout(ops: Sequence[Operation], owned: dict[int, Tensor], buf_end: dict[int, int]
            ) -> tuple[dict[int, int], int, int, int]:
    """Arena offsets of the owned buffers, the arena size, the live peak and the count of reused buffers."""
    frees: dict[int, list[int]] = {}
    for b in owned:
        frees.setdefault(buf_end[b], []).append(b)
    arena = _Arena()
    offsets: dict[int, int] = {}
    sizes: dict[int, int] = {}
    live = live_peak = reused = 0
    for k, op in enumerate(ops):
        for t in op.outputs:
            if id(t) in owned:
                sizes[id(t)] = size = nbytes(t)
                offsets[id(t)], from_free = arena.alloc(size)
                reused += from_free
                live += size
        live_peak = max(live_peak, live)
        for b in frees.get(k, ()):  # inputs stay alive while the op runs: free after it
            arena.free(offsets[b], sizes[b])
            live -= sizes[b]
    return offsets, arena.top, live_peak, reused


class _Arena:
    """A best-fit allocator over one growing block: free blocks sorted by offset, neighbours coalesced."""

    def __init__(self) -> None:
        self.top = 0
        self.blocks: list[tuple[int, int]] = []  # (offset, size) of free blocks, sorted by offset

    def alloc(self, size: int) -> tuple[int, bool]:
        if size == 0:
            return 0, False
        fits = [(s, n) for n, (o, s) in enumerate(self.blocks) if s >= size]
        if fits:
            s, n = min(fits)
            o = self.blocks[n][0]
            self.blocks[n:n + 1] = [(o + size, s - size)] if s > size else []
            return o, True
        if self.blocks and sum(self.blocks[-1]) == self.top:  # grow the free block at the top
            o, s = self.blocks.pop()
            self.top = o + size
            return o, True
        self.top += size
        return self.top - size, False

    def free(self, offset: int, size: int) -> None:
        if size == 0:
            return
        n = bisect.bisect(self.blocks, (offset, size))
        self.blocks.insert(n, (offset, size))
        if n + 1 < len(self.blocks) and offset + size == self.blocks[n + 1][0]:
            self.blocks[n:n + 2] = [(offset, size + self.blocks[n + 1][1])]
        if n > 0 and sum(self.blocks[n - 1]) == offset:
            self.blocks[n - 1:n + 1] = [(self.blocks[n - 1][0], self.blocks[n - 1][1] + self.blocks[n][1])]


__all__ = ["ALLOCATING_OPS", "VIEW_OPS", "MemoryPlan", "Role", "ValueInfo", "nbytes", "plan_memory"]
