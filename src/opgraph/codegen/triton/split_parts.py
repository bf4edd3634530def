"""The code of a reduction whose rows are shared by several programs (``Config.split``), for ``RegionEmitter``.

A long row split into parts: each program holds or walks its chunk, and the parts exchange their partial statistics
in a workspace, meeting at a barrier (a counter in L2, or the hardware barrier of a thread-block cluster). A column
reduction's rows split into parts: each part sums its rows and the last to finish combines the others' partials
(an atomic count per column tile, no waiting).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...ir.graph import Tensor
from . import configs
from ._text import MAX_BARRIERS, NEUTRAL, PARTS_AT_ONCE, PARTS_REDUCE, TILE_REDUCE, WS_PARTS, combine
from .configs import float32_statistics
from .expr import NotExpressible

if TYPE_CHECKING:
    from .region import RegionEmitter


def open_split_row(em: RegionEmitter, pid: str) -> None:
    """The program's row and part of it (``row``, ``part``, ``xi``; ``chunk`` where parts walk their chunk); refuses
    splits whose parts could not all meet."""
    cfg = em.config
    if cfg.xblock != 1:
        raise NotExpressible("a split row is one row a program (XBLOCK 1)")
    sms = configs.multiprocessors()
    if cfg.cluster and cfg.split > configs.MAX_CLUSTER:
        raise NotExpressible(f"a cluster of {cfg.split} programs: at most {configs.MAX_CLUSTER}")
    if sms and cfg.split > sms and not cfg.cluster:  # the parts wait for each other: all resident
        raise NotExpressible(f"a row split into {cfg.split} parts: more than the {sms} multiprocessors "
                             f"sure to hold them all at once")
    if not float32_statistics(em.reductions):  # the parts meet in a float32 workspace
        raise NotExpressible("a split row of integers or float64")
    em.emit(f"row = {pid} // {cfg.split}")
    em.emit(f"part = {pid} % {cfg.split}")
    em.emit("xi = row + tl.arange(0, XBLOCK)[:, None]")
    if cfg.looped:  # each part walks its chunk of the row (re-read from L2 in the final pass)
        emit_chunk(em)


def open_column_split(em: RegionEmitter, pid: str) -> None:
    """The program's tile of columns and its part of the rows (``tile``, ``part``, ``xi``, ``chunk``)."""
    cfg = em.config
    if not cfg.looped:
        raise NotExpressible("a split column reduction walks its part's rows")
    if not float32_statistics(em.reductions):
        raise NotExpressible("a split column reduction of integers or float64")
    em.partials = []
    em.emit(f"tile = {pid} // {cfg.split}")
    em.emit(f"part = {pid} % {cfg.split}")
    em.emit("xi = tile * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
    emit_chunk(em)


def emit_chunk(em: RegionEmitter) -> None:
    """``chunk``: the reduced elements each of the ``split`` parts walks, in whole ``RBLOCK`` steps."""
    split = em.config.split
    em.emit(f"chunk = (({em.reduced_count()} + {split - 1}) // {split} + RBLOCK - 1) // RBLOCK * RBLOCK")


def exchange(em: RegionEmitter, partials: list[str]) -> list[str]:
    """Each program's row partials ([XBLOCK, 1], XBLOCK 1) as [split] vectors of every program of the row (reduced by
    ``reduce_parts``; a [1, split] tile took the chunk's layout in Triton 3.6, 8 values a thread: 128 registers
    against 80 for bfloat16 softmax at 8 warps, RESULTS.md twenty-third session): each writes
    its partials to the workspace, counts itself in at the row's barrier and waits for the others. They are
    resident: a row's programs are consecutive, the grid is dispatched in order (observed, not promised by CUDA)
    and there are at most as many as multiprocessors, each of which holds one (a row split into more is refused:
    VGG16's 512 parts hung). A kernel running beside it on another stream could still take those multiprocessors;
    opgraph launches on one stream. Launched as clusters (``Config.cluster``), the parts meet at the cluster's
    barrier instead, which the hardware schedules whole: no counter, no bound."""
    split = em.config.split
    group = em.barriers
    em.barriers += 1
    if len(partials) > WS_PARTS or em.barriers > MAX_BARRIERS:
        raise NotExpressible("too many statistics for a split reduction")
    base = f"ws + (row * {MAX_BARRIERS} + {group}) * {WS_PARTS * split}"
    slot = em.fresh("ws")
    em.emit(f"{slot} = {base} + part")
    for k, p in enumerate(partials):
        em.emit(f"tl.store({slot} + {k * split} + tl.zeros([XBLOCK, 1], tl.int32), {p}.to(tl.float32))")
    em.emit("tl.debug_barrier()")  # every thread's partial is written before the (releasing) arrival
    if em.config.cluster:  # the cluster's hardware barrier; the loads below are addressed after it
        token = em.fresh("tok")
        em.emit(f"{token} = og_cluster_sync((row * 0 + {group}).to(tl.int32))")
        base = f"ws + (row * {MAX_BARRIERS} + {token}) * {WS_PARTS * split}"
    else:
        counter = f"cnt + row * {MAX_BARRIERS + 1} + {group}"
        em.emit(f"tl.atomic_add({counter}, 1)")
        em.emit(f"while tl.load({counter}, volatile=True) < {split}:")  # plain L2 reads: no atomic traffic
        em.emit("    pass")
    out = []
    for k in range(len(partials)):
        every = em.fresh("all")
        em.emit(f"{every} = tl.load({base} + {k * split} + tl.arange(0, {split}), cache_modifier=\".cg\")")
        out.append(every)
    return out


def reduce_parts(em: RegionEmitter, kind: str, parts: str, ct: str) -> str:
    """The row's statistic of ``kind`` from an expression over its parts' partials (``exchange``'s vectors): a
    scalar, which the row's elements and the next statistic over the partials take as it is (``em.as_row`` gives
    it the row's [XBLOCK, 1] shape)."""
    name = em.fresh("s")
    em.emit(f"{name} = {PARTS_REDUCE[kind].format(parts)}.to({ct})")
    return name


def as_row(em: RegionEmitter, scalar: str, ct: str) -> str:
    """A split row's statistic (a scalar, ``reduce_parts``) as a [XBLOCK, 1] tile, the shape of any other row's."""
    name = em.fresh("s")
    em.emit(f"{name} = tl.zeros([XBLOCK, 1], {ct}) + {scalar}")
    return name


def reset_row_counters(em: RegionEmitter) -> None:
    """The last program of a row to finish resets its barrier counters for the next launch."""
    split = em.config.split
    done = f"cnt + row * {MAX_BARRIERS + 1} + {MAX_BARRIERS}"
    em.emit(f"if tl.atomic_add({done}, 1) == {split - 1}:")
    for g in range(em.barriers):
        em.emit(f"    tl.atomic_xchg(cnt + row * {MAX_BARRIERS + 1} + {g}, 0)")
    em.emit(f"    tl.atomic_xchg({done}, 0)")


def finish_in_last_part(em: RegionEmitter, rows: list[tuple[int, Tensor]]) -> None:
    """Each part of a split column reduction writes its partials; the last to count itself in combines every
    part's, in the same order at every launch (the same sums), and stores the row-level outputs ``rows``."""
    split = em.config.split
    if len(em.partials) > WS_PARTS:
        raise NotExpressible("too many statistics for a split column reduction")
    em.finishing = True
    cols = "tl.arange(0, XBLOCK)[:, None]"
    for k, (name, _, _) in enumerate(em.partials):
        em.emit(f"tl.store(ws + ((tile * {split} + part) * {WS_PARTS} + {k}) * XBLOCK + {cols}, "
                f"{name}.to(tl.float32))")
    em.emit("tl.debug_barrier()")  # every thread's partials are written before the (releasing) count
    counter = f"cnt + tile * {MAX_BARRIERS + 1}"
    em.emit(f"if tl.atomic_add({counter}, 1) == {split - 1}:")
    em.open_branch()
    # the parts' partials, PARTS_AT_ONCE at a time (a [XBLOCK, split] tile of 1024 parts is 512 values a thread of
    # 4 warps)
    step = min(split, PARTS_AT_ONCE)
    accs = [em.fresh("acc") for _ in em.partials]
    for acc, (_, kind, _) in zip(accs, em.partials, strict=True):
        em.emit(f"{acc} = tl.full([XBLOCK, {step}], {NEUTRAL[kind]}, tl.float32)")
    first = em.fresh("p")
    em.emit(f"for {first} in range(0, {split}, {step}):")
    parts = f"(tile * {split} + {first} + tl.arange(0, {step})[None, :]) * {WS_PARTS}"
    for k, (acc, (_, kind, _)) in enumerate(zip(accs, em.partials, strict=True)):
        every = em.fresh("all")
        em.emit(f"    {every} = tl.load(ws + ({parts} + {k}) * XBLOCK + {cols}, cache_modifier=\".cg\")")
        em.emit(f"    {acc} = {combine(kind, acc, every)}")
    for acc, (name, kind, ct) in zip(accs, em.partials, strict=True):
        em.emit(f"{name} = {TILE_REDUCE[kind].format(acc)}[:, None].to({ct})")
    for j, t in rows:
        em.emit(em.store_line(j, t))
    em.emit(f"tl.atomic_xchg({counter}, 0)")  # ready for the next launch
    em.close_scope()
    em.finishing = False


__all__ = ["as_row", "emit_chunk", "exchange", "finish_in_last_part", "open_column_split", "open_split_row",
           "reduce_parts", "reset_row_counters"]
