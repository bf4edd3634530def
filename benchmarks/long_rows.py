"""Persistent split rows, an experiment for the 262k-wide softmax and norms of issue 4: hand-written Triton kernels
against opgraph's generated kernel, eager, torch.compile and the copy bandwidth, in one run.

A row of 262,144 elements is too long for one program's registers, so opgraph splits it across ``split`` programs
that hold a chunk each and meet at barriers (``codegen/triton/region.py``). Those launch one program per chunk of
every row; a chunk's program waits at its barriers with no loads in flight, and 0.51-0.71 of copy is what the
second session measured. Here the grid is only as large as the GPU holds at once (persistent): ``groups`` of
``split`` programs walk the rows. Every row meets once: softmax shares (chunk max, sum of exp about it), layer_norm
(count, mean, centred sum of squares), rms_norm the sum of squares, and each program rescales what it holds. The
``--modes``: ``plain`` (load, reduce, meet, store), ``prefetch`` (the next row's loads issued before the meeting)
and ``pipelined`` (the next row loaded, reduced and counted in before waiting for this row's meeting).
``cluster`` launches each group as a Hopper thread-block cluster whose parts meet at the cluster's hardware
barrier (partials still exchanged through L2), ``cluster-ahead`` and ``cluster-l2`` do so with the next row's
chunk loaded into registers before the meeting or brought into L2 by the copy engine, and ``cluster-rows`` launches
a cluster per row instead of walking: the fastest on the H200 (RESULTS.md, twenty-first session);
``cluster-2rows`` and ``cluster-4rows`` launch a cluster per 2 or 4 rows (parameters loaded once, one meeting);
``cluster-held`` is ``cluster`` with the parameters loaded once before the walk, and ``cluster-rows-early`` is
``cluster-rows`` with them loaded before the meeting (their L2 reads off the path after it).
``--no-barrier`` also times plain and prefetch kernels with their meetings skipped (wrong results): the twelfth
session found 0.73 of copy with the barrier and 0.85-0.87 without.
The ``rows-*`` modes are ``cluster-rows`` with one change each (``_long_rows_cluster_row``, twenty-fourth session):
``rows-cg`` loads the chunk past L1; ``rows-dsmem`` exchanges partials through the peers' shared memory instead of
L2; ``rows-packed`` holds a bfloat16 chunk as loaded through the meeting; ``rows-l1`` brings the parameters into L1
before the chunk's loads; ``rows-unmet`` skips the meeting (wrong results, timed: the design's ceiling).
``--maxnreg`` also launches them with registers capped. ``cluster-cg`` is ``cluster`` with the chunks loaded past
L1 (which keeps the parameters each program reads again for every row), ``cluster-stagger`` that with the groups
starting ``--stagger`` ns apart, so that they do not load, meet and store all at the same time.

    python benchmarks/long_rows.py
    python benchmarks/long_rows.py --ops softmax --dtypes float32 --splits 16 --warps 8
    python benchmarks/long_rows.py --ops softmax --no-barrier    # also each kernel without its barrier
    python benchmarks/long_rows.py --ops softmax --modes plain,pipelined --backoff
    python benchmarks/long_rows.py --modes plain,cluster,cluster-rows --splits 8,16 --per-sm 1,2
    python benchmarks/long_rows.py --ops softmax --dtypes bfloat16 --splits 16 --warps 4,8 --modes cluster-rows \
        --generated 16x4,16x8       # the generated kernel of the same design beside the hand-written one
    python benchmarks/long_rows.py --splits 16 --warps 8 --modes cluster-rows,rows-dsmem,rows-unmet --maxnreg 80
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any, NamedTuple

import torch

import opgraph as og
from opgraph.cli._table import format_table
from opgraph.codegen.triton.kernel import cluster_launch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fusion  # noqa: E402

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - the script needs a GPU and Triton
    triton = None

OPS = {"softmax": 0, "rms_norm": 1, "layer_norm": 2}

if triton is not None:
    from opgraph.codegen.triton.prelude import og_cluster_sync  # the generated kernels' cluster barrier

    SOFTMAX, RMS_NORM, LAYER_NORM = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
    # a barrier that waits longer than this gives up (and counts it): a wrong occupancy never hangs the GPU
    SPIN_LIMIT = tl.constexpr(1 << 20)

    @triton.jit
    def _partials(x, inside, OP: tl.constexpr):  # type: ignore[no-untyped-def]
        """A chunk's partials (a, c) and what the finish needs of it: softmax's exp about the chunk max, or x."""
        xf = x.to(tl.float32)
        if OP == SOFTMAX:
            a = tl.max(xf, 0)
            h = tl.exp(xf - a)
            c = tl.sum(h, 0)
        elif OP == RMS_NORM:
            a = tl.sum(xf * xf, 0)
            c = a
            h = xf
        else:
            a = tl.sum(xf, 0) / tl.sum(inside.to(tl.float32), 0)
            d = tl.where(inside, xf - a, 0.0)
            c = tl.sum(d * d, 0)
            h = xf
        return a, c, h

    @triton.jit
    def _chunk(N: tl.constexpr, SPLIT: tl.constexpr, CHUNK: tl.constexpr):  # type: ignore[no-untyped-def]
        """This program's part of its group, the group, the chunk's columns (also in 64 bits, for row offsets:
        rows x N may pass 2**31) and which of them are inside the row."""
        pid = tl.program_id(0)
        part = pid % SPLIT
        cols = part * CHUNK + tl.arange(0, CHUNK)
        return part, pid // SPLIT, cols, cols.to(tl.int64), cols < N

    @triton.jit
    def _publish(ws_ptr, cnt_ptr, group, part, it, a, c, SPLIT: tl.constexpr):  # type: ignore[no-untyped-def]
        """Write this chunk's partials of the group's ``it``-th row and count in. Rows take turns at 4 slots and 2
        counters: a program counts in for row i + 2 only after all did for row i (it waits for row i first), and
        writes row i + 4's slot only after all have counted in for row i + 2, which they do after reading row i's."""
        slot = ws_ptr + (group * 4 + it % 4) * 2 * SPLIT
        tl.store(slot + part, a)
        tl.store(slot + SPLIT + part, c)
        tl.debug_barrier()  # every thread's partials are written before the (releasing) arrival
        tl.atomic_add(cnt_ptr + group * 2 + it % 2, 1)

    @triton.jit
    def _wait(ws_ptr, cnt_ptr, err_ptr, group, it, SPLIT: tl.constexpr,  # type: ignore[no-untyped-def]
              BACKOFF: tl.constexpr):
        """Every chunk's partials of the group's ``it``-th row, once all have counted in. With ``BACKOFF`` each poll
        of the counter is followed by a ~32 ns ``nanosleep``: fewer reads of the one L2 line the group polls."""
        target = (it // 2 + 1) * SPLIT
        spins = 0
        while (tl.load(cnt_ptr + group * 2 + it % 2, volatile=True) < target) & (spins < SPIN_LIMIT):
            if BACKOFF:
                spins = tl.inline_asm_elementwise("nanosleep.u32 32;\n\tmov.u32 $0, $1;", "=r,r", [spins],
                                                  dtype=tl.int32, is_pure=False, pack=1)
            spins += 1
        if spins >= SPIN_LIMIT:
            tl.atomic_add(err_ptr, 1)
        slot = ws_ptr + (group * 4 + it % 4) * 2 * SPLIT
        parts = tl.arange(0, SPLIT)
        return tl.load(slot + parts, cache_modifier=".cg"), tl.load(slot + SPLIT + parts, cache_modifier=".cg")

    @triton.jit
    def _params(w_ptr, b_ptr, cols, inside, OP: tl.constexpr):  # type: ignore[no-untyped-def]
        """The chunk's gamma and beta as stored: softmax has neither, rms_norm no beta."""
        if OP == SOFTMAX:
            w, b = 0.0, 0.0
        elif OP == RMS_NORM:
            w, b = tl.load(w_ptr + cols, mask=inside, other=0.0), 0.0
        else:
            w = tl.load(w_ptr + cols, mask=inside, other=0.0)
            b = tl.load(b_ptr + cols, mask=inside, other=0.0)
        return w, b

    @triton.jit
    def _finish(h, a, every_a, every_c, w_ptr, b_ptr, cols, inside, eps, N: tl.constexpr,  # type: ignore[no-untyped-def]
                SPLIT: tl.constexpr, CHUNK: tl.constexpr, OP: tl.constexpr):
        """The chunk's outputs from the row's partials."""
        w, b = _params(w_ptr, b_ptr, cols, inside, OP)
        return _finish_with(h, a, every_a, every_c, w, b, eps, N, SPLIT, CHUNK, OP)

    @triton.jit
    def _finish_with(h, a, every_a, every_c, w, b, eps, N: tl.constexpr,  # type: ignore[no-untyped-def]
                     SPLIT: tl.constexpr, CHUNK: tl.constexpr, OP: tl.constexpr):
        """The chunk's outputs from the row's partials and the chunk's parameters (``_params``)."""
        if OP == SOFTMAX:
            m = tl.max(every_a, 0)
            y = h * (tl.exp(a - m) / tl.sum(every_c * tl.exp(every_a - m), 0))
        elif OP == RMS_NORM:
            y = h * (tl.rsqrt(tl.sum(every_a, 0) / N + eps)) * w.to(tl.float32)
        else:
            counts = tl.minimum(N - tl.arange(0, SPLIT) * CHUNK, CHUNK).to(tl.float32)
            mean = tl.sum(every_a * counts, 0) / N
            var = (tl.sum(every_c, 0) + tl.sum(counts * (every_a - mean) * (every_a - mean), 0)) / N
            y = (h - mean) * tl.rsqrt(var + eps) * w.to(tl.float32) + b.to(tl.float32)
        return y

    @triton.jit
    def _long_rows(x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr, err_ptr, rows, groups, eps,  # type: ignore[no-untyped-def]
                   N: tl.constexpr, SPLIT: tl.constexpr, CHUNK: tl.constexpr, OP: tl.constexpr,
                   PREFETCH: tl.constexpr, MEET: tl.constexpr, BACKOFF: tl.constexpr):
        """Each row: partials, meet, finish. PREFETCH issues the next row's loads before the meeting."""
        part, group, cols, wide, inside = _chunk(N, SPLIT, CHUNK)
        neutral = float("-inf") if OP == SOFTMAX else 0.0
        x = tl.load(x_ptr + (wide * 0 + group) * N + cols, mask=inside & (cols * 0 + group < rows), other=neutral)
        it = 0
        for row in range(group, rows, groups):
            nxt = row + groups
            if PREFETCH:
                x_next = tl.load(x_ptr + (wide * 0 + nxt) * N + cols, mask=inside & (cols * 0 + nxt < rows),
                                 other=neutral)
            a, c, h = _partials(x, inside, OP)
            if MEET:
                _publish(ws_ptr, cnt_ptr, group, part, it, a, c, SPLIT)
                every_a, every_c = _wait(ws_ptr, cnt_ptr, err_ptr, group, it, SPLIT, BACKOFF)
            else:  # timing only: each chunk's own partials stand for the row's (a wrong result, no waiting)
                parts = tl.arange(0, SPLIT)
                every_a = tl.where(parts == part, a, neutral)
                every_c = tl.where(parts == part, c, 0.0)
            y = _finish(h, a, every_a, every_c, w_ptr, b_ptr, cols, inside, eps, N, SPLIT, CHUNK, OP)
            tl.store(y_ptr + (wide * 0 + row) * N + cols, y.to(y_ptr.dtype.element_ty), mask=inside)
            if PREFETCH:
                x = x_next
            else:
                x = tl.load(x_ptr + (wide * 0 + nxt) * N + cols, mask=inside & (cols * 0 + nxt < rows),
                            other=neutral)
            it += 1  # noqa: SIM113 (a Triton loop-carried value)

    @triton.jit
    def _long_rows_pipelined(x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr, err_ptr, rows, groups,  # type: ignore[no-untyped-def]
                             eps, N: tl.constexpr, SPLIT: tl.constexpr, CHUNK: tl.constexpr, OP: tl.constexpr,
                             BACKOFF: tl.constexpr):
        """Software-pipelined by a row: a program loads row i + 1, reduces it and counts in with its partials
        before it waits for row i's meeting, so that meeting has had a row's work to complete in."""
        part, group, cols, wide, inside = _chunk(N, SPLIT, CHUNK)
        neutral = float("-inf") if OP == SOFTMAX else 0.0
        x = tl.load(x_ptr + (wide * 0 + group) * N + cols, mask=inside & (cols * 0 + group < rows), other=neutral)
        a, c, h = _partials(x, inside, OP)
        _publish(ws_ptr, cnt_ptr, group, part, 0, a, c, SPLIT)
        it = 0
        for row in range(group, rows, groups):
            nxt = row + groups
            x_next = tl.load(x_ptr + (wide * 0 + nxt) * N + cols, mask=inside & (cols * 0 + nxt < rows),
                             other=neutral)
            a_next, c_next, h_next = _partials(x_next, inside, OP)
            _publish(ws_ptr, cnt_ptr, group, part, it + 1, a_next, c_next, SPLIT)  # past the last row too: unread
            every_a, every_c = _wait(ws_ptr, cnt_ptr, err_ptr, group, it, SPLIT, BACKOFF)
            y = _finish(h, a, every_a, every_c, w_ptr, b_ptr, cols, inside, eps, N, SPLIT, CHUNK, OP)
            tl.store(y_ptr + (wide * 0 + row) * N + cols, y.to(y_ptr.dtype.element_ty), mask=inside)
            a, c, h = a_next, c_next, h_next
            it += 1  # noqa: SIM113 (a Triton loop-carried value)


    if os.environ.get("TRITON_INTERPRET") == "1":
        @triton.jit
        def _prefetch_l2(addr, pieces, piece):  # type: ignore[no-untyped-def]
            """The interpreter runs no PTX: a prefetch is only a hint, so none."""
            return pieces * 0
    else:
        @triton.jit
        def _prefetch_l2(addr, pieces, piece):  # type: ignore[no-untyped-def]
            """The first ``pieces`` threads each ask the copy engine to bring ``piece`` bytes from ``addr`` on into L2
            (``cp.async.bulk.prefetch.L2``, sm_90): nothing waits for it and no register holds it."""
            return tl.inline_asm_elementwise(
                "{\n\t.reg .pred p;\n\t.reg .u32 t;\n\t.reg .u64 a;\n\tmov.u32 t, %tid.x;\n\t"
                "setp.lt.u32 p, t, $2;\n\tmul.wide.u32 a, t, $3;\n\tadd.u64 a, a, $1;\n\t"
                "@p cp.async.bulk.prefetch.L2.global [a], $3;\n\tmov.u32 $0, 0;\n\t}",
                "=r,l,r,r", [addr, pieces, piece], dtype=tl.int32, is_pure=False, pack=1)

    @triton.jit
    def _long_rows_cluster(x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr, err_ptr, rows, groups,  # type: ignore[no-untyped-def]
                           eps, N: tl.constexpr, SPLIT: tl.constexpr, CHUNK: tl.constexpr, OP: tl.constexpr,
                           BACKOFF: tl.constexpr, AHEAD: tl.constexpr, HOLD: tl.constexpr,
                           STAGGER: tl.constexpr = 0, XCG: tl.constexpr = 0):
        """Launched as clusters of ``SPLIT`` programs (a group each): a row's parts meet at the cluster's hardware
        barrier instead of a counter in memory, exchanging partials through two slots in L2 (a part writes row
        i + 2's slot only after the barrier of row i + 1, which every part reaches after reading row i's).
        ``AHEAD`` 1 loads the next row's chunk into registers before the meeting; 2 has the copy engine bring it
        into L2 at the top of the row (``_prefetch_l2``). ``HOLD`` loads the chunk's parameters once, before the
        first row (every row of a group has the same columns), instead of after each meeting. ``STAGGER`` (ns): group
        g starts g / groups of that late, so that the groups' loads, meetings and stores fall at different times
        rather than all at once; ``XCG`` loads the chunks past L1, leaving it to the parameters each program reads
        again for every row."""
        part, group, cols, wide, inside = _chunk(N, SPLIT, CHUNK)
        if STAGGER:
            _sleep_ns(group * STAGGER // groups)
        if HOLD:
            w_held, b_held = _params(w_ptr, b_ptr, cols, inside, OP)
        neutral = float("-inf") if OP == SOFTMAX else 0.0
        parts = tl.arange(0, SPLIT)
        it = 0
        x_next = tl.load(x_ptr + (wide * 0 + group) * N + cols, mask=inside, other=neutral)
        for row in range(group, rows, groups):
            nxt = row + groups
            if AHEAD == 2:  # the next row's chunk on its way into L2 while this one is reduced and met
                start = x_ptr + (nxt % rows).to(tl.int64) * N + part * CHUNK
                _prefetch_l2(start.to(tl.int64), tl.full((), 8, tl.int32),
                             tl.full((), CHUNK * x_ptr.dtype.element_ty.primitive_bitwidth // 64, tl.int32))
            if AHEAD == 1:
                x = x_next
            elif XCG:
                x = tl.load(x_ptr + (wide * 0 + row) * N + cols, mask=inside, other=neutral, cache_modifier=".cg")
            else:
                x = tl.load(x_ptr + (wide * 0 + row) * N + cols, mask=inside, other=neutral)
            a, c, h = _partials(x, inside, OP)
            slot = ws_ptr + (group * 2 + it % 2) * 2 * SPLIT
            tl.store(slot + part, a)
            tl.store(slot + SPLIT + part, c)
            if AHEAD == 1:  # in flight during the meeting
                x_next = tl.load(x_ptr + (wide * 0 + nxt) * N + cols, mask=inside & (cols * 0 + nxt < rows),
                                 other=neutral)
            tl.debug_barrier()  # the partials are stored before the arrival (and the asm is not moved above it)
            tok = og_cluster_sync(it)
            seen = ws_ptr + (group * 2 + tok % 2) * 2 * SPLIT
            every_a = tl.load(seen + parts, cache_modifier=".cg")
            every_c = tl.load(seen + SPLIT + parts, cache_modifier=".cg")
            if HOLD:
                y = _finish_with(h, a, every_a, every_c, w_held, b_held, eps, N, SPLIT, CHUNK, OP)
            else:
                y = _finish(h, a, every_a, every_c, w_ptr, b_ptr, cols, inside, eps, N, SPLIT, CHUNK, OP)
            tl.store(y_ptr + (wide * 0 + row) * N + cols, y.to(y_ptr.dtype.element_ty), mask=inside)
            it += 1  # noqa: SIM113 (a Triton loop-carried value)


    @triton.jit
    def _long_rows_cluster_tile(x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, rows, eps,  # type: ignore[no-untyped-def]
                                N: tl.constexpr, SPLIT: tl.constexpr, CHUNK: tl.constexpr, OP: tl.constexpr,
                                ROWS: tl.constexpr):
        """A cluster of ``SPLIT`` programs holds ``ROWS`` rows: each program the same chunk of every one, so it loads
        its chunk of gamma and beta once for them all (a row's parameters are read from L2 once for ``ROWS`` rows),
        and the rows meet at one barrier (its wait paid once for ``ROWS`` rows)."""
        pid = tl.program_id(0)
        part, tile = pid % SPLIT, pid // SPLIT
        r = tile * ROWS + tl.arange(0, ROWS)[:, None]
        cols = part * CHUNK + tl.arange(0, CHUNK)[None, :]
        inside = (cols < N) & (r < rows)
        offsets = r.to(tl.int64) * N + cols
        x = tl.load(x_ptr + offsets, mask=inside, other=float("-inf") if OP == SOFTMAX else 0.0).to(tl.float32)
        if OP == SOFTMAX:
            a = tl.max(x, 1)[:, None]
            h = tl.exp(x - a)
            c = tl.sum(h, 1)[:, None]
        elif OP == RMS_NORM:
            a = tl.sum(x * x, 1)[:, None]
            c = a
            h = x
            w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        else:
            a = (tl.sum(x, 1) / tl.sum(inside.to(tl.float32), 1))[:, None]
            d = tl.where(inside, x - a, 0.0)
            c = tl.sum(d * d, 1)[:, None]
            h = x
            w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        slot = ws_ptr + r * 2 * SPLIT
        tl.store(slot + part, a)
        tl.store(slot + SPLIT + part, c)
        tl.debug_barrier()  # the partials are stored before the arrival
        tok = og_cluster_sync(tile * 0)
        parts = tl.arange(0, SPLIT)[None, :]
        seen = ws_ptr + (r + tok) * 2 * SPLIT
        every_a = tl.load(seen + parts, cache_modifier=".cg")
        every_c = tl.load(seen + SPLIT + parts, cache_modifier=".cg")
        if OP == SOFTMAX:
            m = tl.max(every_a, 1)[:, None]
            y = h * (tl.exp(a - m) / tl.sum(every_c * tl.exp(every_a - m), 1)[:, None])
        elif OP == RMS_NORM:
            y = h * tl.rsqrt(tl.sum(every_a, 1)[:, None] / N + eps) * w
        else:
            counts = tl.minimum(N - parts * CHUNK, CHUNK).to(tl.float32)
            mean = (tl.sum(every_a * counts, 1) / N)[:, None]
            spread = tl.sum(every_c, 1)[:, None] + tl.sum(counts * (every_a - mean) * (every_a - mean), 1)[:, None]
            y = (h - mean) * tl.rsqrt(spread / N + eps) * w + b
        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=inside)


    if os.environ.get("TRITON_INTERPRET") != "1":
        @triton.jit
        def _cluster_arrive(token):  # type: ignore[no-untyped-def]
            """Arrive at the cluster's barrier without waiting (relaxed: orders nothing)."""
            return tl.inline_asm_elementwise("barrier.cluster.arrive.relaxed.aligned;\n\tmov.u32 $0, $1;", "=r,r",
                                             [token], dtype=tl.int32, is_pure=False, pack=1)

        @triton.jit
        def _cluster_wait(token):  # type: ignore[no-untyped-def]
            """Wait for every program of the cluster to have arrived."""
            return tl.inline_asm_elementwise("barrier.cluster.wait.aligned;\n\tmov.u32 $0, $1;", "=r,r",
                                             [token], dtype=tl.int32, is_pure=False, pack=1)

        @triton.jit
        def _dsmem_put(value, peer, offset):  # type: ignore[no-untyped-def]
            """Store ``value`` at byte ``offset`` of the shared memory of the cluster's program ``peer``
            (``mapa``: this program's shared address mapped into the peer's window)."""
            return tl.inline_asm_elementwise(
                "{\n\t.reg .u32 ogl, ogr;\n\tmov.u32 ogl, global_smem;\n\tadd.u32 ogl, ogl, $3;\n\t"
                "mapa.shared::cluster.u32 ogr, ogl, $2;\n\tst.shared::cluster.f32 [ogr], $1;\n\t"
                "mov.u32 $0, 0;\n\t}", "=r,f,r,r", [value, peer, offset], dtype=tl.int32, is_pure=False, pack=1)

        @triton.jit
        def _smem_get(offset):  # type: ignore[no-untyped-def]
            """The float32 at byte ``offset`` of this program's shared memory."""
            return tl.inline_asm_elementwise(
                "{\n\t.reg .u32 ogl;\n\tmov.u32 ogl, global_smem;\n\tadd.u32 ogl, ogl, $1;\n\t"
                "ld.shared.f32 $0, [ogl];\n\t}", "=f,r", [offset], dtype=tl.float32, is_pure=False, pack=1)

        @triton.jit
        def _widen_again(x):  # type: ignore[no-untyped-def]
            """bfloat16 to float32 once more (an asm, so not merged with the first conversion before the meeting:
            the chunk stays held as 16-bit values through it)."""
            return tl.inline_asm_elementwise("cvt.f32.bf16 $0, $1;", "=f,h", [x], dtype=tl.float32,
                                             is_pure=False, pack=1)

        @triton.jit
        def _sleep_ns(ns):  # type: ignore[no-untyped-def]
            """Sleep about ``ns`` nanoseconds (at most a millisecond)."""
            return tl.inline_asm_elementwise("nanosleep.u32 $1;\n\tmov.u32 $0, $1;", "=r,r", [ns], dtype=tl.int32,
                                             is_pure=False, pack=1)

        @triton.jit
        def _prefetch_l1(ptrs):  # type: ignore[no-untyped-def]
            """Ask for the lines at ``ptrs`` in L1 (no register holds them; a later load there hits L1)."""
            return tl.inline_asm_elementwise("prefetch.global.L1 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs],
                                             dtype=tl.int32, is_pure=False, pack=1)

    else:  # the interpreter runs no PTX and one program at a time: no cluster, no shared memory of peers
        @triton.jit
        def _cluster_arrive(token):  # type: ignore[no-untyped-def]
            return token

        @triton.jit
        def _cluster_wait(token):  # type: ignore[no-untyped-def]
            return token

        @triton.jit
        def _prefetch_l1(ptrs):  # type: ignore[no-untyped-def]
            return 0

        @triton.jit
        def _sleep_ns(ns):  # type: ignore[no-untyped-def]
            return ns

        @triton.jit
        def _widen_again(x):  # type: ignore[no-untyped-def]
            return x.to(tl.float32)

    @triton.jit
    def _long_rows_cluster_row(x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, smem_at, eps,  # type: ignore[no-untyped-def]
                               N: tl.constexpr, SPLIT: tl.constexpr, CHUNK: tl.constexpr, OP: tl.constexpr,
                               DSMEM: tl.constexpr, PACKED: tl.constexpr, MEET: tl.constexpr,
                               L1: tl.constexpr):
        """A cluster a row (``cluster-rows``) with three switches. ``DSMEM``: each part writes its partials
        into every part's shared memory (at byte ``smem_at``, past Triton's own) and reads them there after the
        barrier, instead of a round trip through L2. ``PACKED`` (bfloat16): the chunk is held as loaded through
        the meeting and widened again after it (half the registers; softmax's exps computed again). Without
        ``MEET`` the parts skip the meeting (wrong results): the design's ceiling. ``L1`` 1 loads the chunk past
        L1 (``.cg``), 2 also has the chunk's parameters brought into L1 before it (``prefetch.global.L1``), so
        that their loads after the meeting hit L1 rather than wait for L2."""
        part, row, cols, wide, inside = _chunk(N, SPLIT, CHUNK)
        started = row * 0
        if DSMEM:  # a part writes a peer's shared memory only once that peer has started
            started = _cluster_arrive(started)
        neutral = float("-inf") if OP == SOFTMAX else 0.0
        if L1 == 2 and OP != SOFTMAX:  # a line a thread or so: 128 bytes apart
            LINE: tl.constexpr = 128 // (w_ptr.dtype.element_ty.primitive_bitwidth // 8)
            lines = part * CHUNK + tl.arange(0, CHUNK // LINE) * LINE
            _prefetch_l1(w_ptr + lines)
            if OP == LAYER_NORM:
                _prefetch_l1(b_ptr + lines)
        if L1:
            x = tl.load(x_ptr + (wide * 0 + row) * N + cols, mask=inside, other=neutral, cache_modifier=".cg")
        else:
            x = tl.load(x_ptr + (wide * 0 + row) * N + cols, mask=inside, other=neutral)
        a, c, h = _partials(x, inside, OP)
        parts = tl.arange(0, SPLIT)
        if MEET:
            if DSMEM:
                started = _cluster_wait(started)
                _dsmem_put(a, parts, smem_at + started + part * 4)
                _dsmem_put(c, parts, smem_at + started + (SPLIT + part) * 4)
                tok = og_cluster_sync(started)
                every_a = _smem_get(smem_at + tok + parts * 4)
                every_c = _smem_get(smem_at + tok + (SPLIT + parts) * 4)
            else:
                slot = ws_ptr + row * 2 * SPLIT
                tl.store(slot + part, a)
                tl.store(slot + SPLIT + part, c)
                tl.debug_barrier()
                tok = og_cluster_sync(started)
                every_a = tl.load(slot + tok + parts, cache_modifier=".cg")
                every_c = tl.load(slot + tok + SPLIT + parts, cache_modifier=".cg")
        else:  # timing only: each chunk's own partials stand for the row's
            every_a = tl.where(parts == part, a, neutral)
            every_c = tl.where(parts == part, c, 0.0)
        if PACKED:
            h = _widen_again(x)
            if OP == SOFTMAX:
                h = tl.exp(h - a)
        y = _finish(h, a, every_a, every_c, w_ptr, b_ptr, cols, inside, eps, N, SPLIT, CHUNK, OP)
        tl.store(y_ptr + (wide * 0 + row) * N + cols, y.to(y_ptr.dtype.element_ty), mask=inside)


# how programs walk rows (the docstrings)
MODES = ("plain", "prefetch", "pipelined", "cluster", "cluster-rows", "cluster-ahead", "cluster-l2", "cluster-2rows",
         "cluster-4rows", "cluster-held", "cluster-rows-early", "rows-dsmem", "rows-packed", "rows-dsmem-packed",
         "rows-unmet", "rows-cg", "rows-l1", "rows-unmet-l1", "rows-packed-l1", "cluster-cg", "cluster-stagger")


class RowMode(NamedTuple):
    """The switches of ``_long_rows_cluster_row`` (its constexprs of the same names)."""

    DSMEM: int = 0
    PACKED: int = 0
    MEET: int = 1
    L1: int = 0


ROW_MODES = {"rows-dsmem": RowMode(DSMEM=1), "rows-packed": RowMode(PACKED=1),
             "rows-dsmem-packed": RowMode(DSMEM=1, PACKED=1), "rows-unmet": RowMode(MEET=0),
             "rows-cg": RowMode(L1=1), "rows-l1": RowMode(L1=2), "rows-unmet-l1": RowMode(MEET=0, L1=2),
             "rows-packed-l1": RowMode(PACKED=1, L1=2)}


class LongRows:
    """One launch configuration: ``split`` programs a row, ``num_warps`` each, walking rows as ``mode`` says, as
    many groups of them as the GPU holds at once (``per_sm`` programs an SM, if the compiled kernel's registers allow
    that many). Without ``meet`` the kernel skips its meetings: wrong results, timed to show what waiting costs."""

    def __init__(self, op: str, inputs: list[torch.Tensor], split: int, num_warps: int, mode: str,
                 per_sm: int, meet: bool = True, backoff: bool = False, maxnreg: int = 0,
                 stagger: int = 10000) -> None:
        x = inputs[0]
        self.backoff = backoff
        self.maxnreg = maxnreg  # ``_long_rows_cluster_row``'s register cap (0: ptxas's choice)
        self.stagger = stagger  # cluster-stagger: ns between the first and the last group's start
        self.op, self.inputs, self.split, self.num_warps, self.mode, self.meet = OPS[op], inputs, split, num_warps, \
            mode, meet
        self.rows, self.n = x.shape
        self.chunk = triton.next_power_of_2(-(-self.n // split))
        self.err = torch.zeros(1, dtype=torch.int32, device=x.device)
        self.y = torch.empty_like(x)
        self.cluster = mode.startswith("cluster")
        self.patched: set[int] = set()  # the grids' ``groups`` whose compiled kernel launches as clusters
        self.tile_rows = {"cluster-2rows": 2, "cluster-4rows": 4}.get(mode, 1)
        if (self.cluster or mode in ROW_MODES) and split > 16:
            raise ValueError(f"a cluster holds at most 16 programs on Hopper, not {split}")
        if mode in ROW_MODES:  # compiled, never launched as plain programs (their stores would leave the cluster)
            if ROW_MODES[mode].PACKED and x.dtype != torch.bfloat16:
                raise ValueError(f"{mode} holds bfloat16 chunks, not {x.dtype}")
            self._size(self.rows)
            self.smem_at = 16
            self.resident, self.fits, self.launched = 1, True, x.is_cuda
            if not x.is_cuda:  # the interpreter: a program at a time, no clusters (nor a meeting of more than one)
                return
            compiled = self._row_kernel(warm=True)
            # past Triton's own shared memory (a multiple of 16, as the compile's argument was: one specialisation)
            self.smem_at = (int(compiled.metadata.shared) + 15) // 16 * 16 + 16
            cluster_launch(compiled, split)
            packed = list(compiled.packed_metadata)
            packed[2] = self.smem_at + 2 * split * 4
            compiled.packed_metadata = tuple(packed)
            return
        self.launched = False  # a cluster kernel launches as clusters after its first (compiling) launch
        self._size(1)  # one group is always resident: compile with it, then size the grid by the kernel's registers
        compiled = self()  # a cluster kernel's first launch is a plain one (clusters of one: wrong, but compiled)
        self.launched = self.cluster and split > 1
        regs = int(getattr(compiled, "n_regs", 0) or 0)
        by_regs = 65536 // (regs * 32 * num_warps) if regs else 1
        self.resident = max(1, min(by_regs, 64 // num_warps))
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 1
        self.fits = per_sm <= self.resident
        self._size(max(1, min(self.rows, sms * min(per_sm, self.resident) // split)))
        if mode in ("cluster-rows", "cluster-rows-early"):  # a cluster a row: the GPU schedules them
            self._size(self.rows)

    def _size(self, groups: int) -> None:
        self.groups = groups
        slots = max(groups * 8, (self.rows + self.tile_rows) * 2)  # a tile kernel's slot a row: [row, 2, split]
        self.ws = torch.empty(slots * self.split, dtype=torch.float32, device=self.y.device)
        self.cnt = torch.zeros(groups * 2, dtype=torch.int32, device=self.y.device)

    def _row_kernel(self, warm: bool = False) -> Any:
        """``_long_rows_cluster_row`` for ``self.mode``: compiled (``warm``) or launched as clusters."""
        x, *params = self.inputs
        w, b = (params + [x, x])[:2]
        args = (x, w, b, self.y, self.ws, self.smem_at, 1e-6 if self.op == OPS["rms_norm"] else 1e-5)
        sizes = {"N": self.n, "SPLIT": self.split, "CHUNK": self.chunk, "OP": self.op,
                 **ROW_MODES[self.mode]._asdict(), "num_warps": self.num_warps}
        if self.maxnreg:
            sizes["maxnreg"] = self.maxnreg
        if warm:
            return _long_rows_cluster_row.warmup(*args, grid=(self.rows * self.split,), **sizes)
        # launched as clusters, the launcher multiplies the grid by their size (``cluster_launch``)
        return _long_rows_cluster_row[(self.rows if self.launched else self.rows * self.split,)](*args, **sizes)

    def __call__(self) -> Any:
        if self.mode in ROW_MODES:
            return self._row_kernel()
        self.cnt.zero_()
        x, *params = self.inputs
        w, b = (params + [x, x])[:2]
        eps = 1e-6 if self.op == OPS["rms_norm"] else 1e-5
        args = (x, w, b, self.y, self.ws, self.cnt, self.err, self.rows, self.groups, eps)
        sizes = {"N": self.n, "SPLIT": self.split, "CHUNK": self.chunk, "OP": self.op, "BACKOFF": self.backoff,
                 "num_warps": self.num_warps}
        grid = (self.groups * self.split,)
        if self.tile_rows > 1:  # a cluster a tile of rows, however many groups walk rows in the other modes
            tiles = -(-self.rows // self.tile_rows)
            targs = (x, w, b, self.y, self.ws, self.rows, eps)
            tsizes = {"N": self.n, "SPLIT": self.split, "CHUNK": self.chunk, "OP": self.op, "ROWS": self.tile_rows,
                      "num_warps": self.num_warps}
            if not self.launched:
                return _long_rows_cluster_tile[(tiles * self.split,)](*targs, **tsizes)
            if tiles not in self.patched:
                cluster_launch(_long_rows_cluster_tile.warmup(*targs, grid=(tiles * self.split,), **tsizes),
                               self.split)
                self.patched.add(tiles)
            return _long_rows_cluster_tile[(tiles,)](*targs, **tsizes)
        if self.cluster:  # the launcher multiplies the grid by the cluster size (``cluster_launch``)
            ahead = {"cluster-ahead": 1, "cluster-l2": 2}.get(self.mode, 0)
            how = dict(AHEAD=ahead, HOLD=self.mode in ("cluster-held", "cluster-rows-early"),
                       STAGGER=self.stagger if self.mode == "cluster-stagger" else 0,
                       XCG=int(self.mode in ("cluster-cg", "cluster-stagger")))
            if not self.launched:  # the first launch compiles (clusters of one: wrong, but compiled)
                return _long_rows_cluster[grid](*args, **how, **sizes)
            if self.groups not in self.patched:  # Triton compiles again for ``groups`` 1 (an int of 1 is specialised)
                cluster_launch(_long_rows_cluster.warmup(*args, grid=grid, **how, **sizes), self.split)
                self.patched.add(self.groups)
            return _long_rows_cluster[(self.groups,)](*args, **how, **sizes)
        if self.mode == "pipelined":
            return _long_rows_pipelined[grid](*args, **sizes)
        return _long_rows[grid](*args, PREFETCH=self.mode == "prefetch", MEET=self.meet, **sizes)


def _split_warps(text: str) -> tuple[tuple[int, int], ...]:
    """``--generated``: comma-separated SPLITxWARPS pairs."""
    try:
        pairs = tuple((int(a), int(b)) for a, b in (item.split("x") for item in text.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected SPLITxWARPS pairs like 16x8, got {text!r}") from None
    if any(a < 2 or a > 16 or b not in (1, 2, 4, 8, 16, 32) for a, b in pairs):
        raise argparse.ArgumentTypeError(f"a cluster holds 2-16 programs of 1-32 warps (a power of two): {text!r}")
    return pairs


def og_function(op: str, inputs: list[torch.Tensor], dev: og.Device) -> Any:
    g = og.Graph()
    dt = fusion.DTYPES["float32" if inputs[0].dtype == torch.float32 else "bfloat16"][0]
    phs = [g.placeholder(tuple(t.shape), dt, name=f"in{i}") for i, t in enumerate(inputs)]
    out = fusion.NORMS[op][1](g, *phs)
    exe = g.compile({p: p.type for p in phs}, [out], device=dev, descriptor=fusion.descriptor(dev, cuda_graphs=False))
    return lambda: exe.run(inputs)[0]


def og_forced(op: str, inputs: list[torch.Tensor], split: int, num_warps: int) -> Any:
    """opgraph's generated kernel for ``op`` launched as clusters of ``split`` programs of ``num_warps`` (each holding
    a chunk of its row), not as the tuner would choose: the generated and hand-written kernels of one design, timed
    side by side."""
    from opgraph.codegen.triton.kernel import region_kernel, region_of
    from opgraph.codegen.triton.region import Config

    g = og.Graph()
    dt = fusion.DTYPES["float32" if inputs[0].dtype == torch.float32 else "bfloat16"][0]
    phs = [g.placeholder(tuple(t.shape), dt, name=f"in{i}") for i, t in enumerate(inputs)]
    out = fusion.NORMS[op][1](g, *phs)
    ops, ins = region_of([out])
    width = inputs[0].shape[-1]
    config = Config(reduction=True, xblock=1, rblock=triton.next_power_of_2(-(-width // split)), num_warps=num_warps,
                    split=split, cluster=True)
    kernel = region_kernel(ops, ins, [out], config=config)
    by_id = {id(p): t for p, t in zip(phs, inputs, strict=True)}
    constant = fusion._sibling("reduction_configs").constant  # a region input that is no placeholder
    feed = [by_id[id(t)] if id(t) in by_id else constant(t).to(inputs[0].device) for t in ins]
    return lambda: kernel(*feed)[0]


class Case:
    """One op and dtype at ``width``: the inputs (``mib`` MiB of x, gamma and beta), the bytes a kernel moves, the
    float64 reference and the peers every table shows (eager, torch.compile, opgraph's generated kernel)."""

    def __init__(self, op: str, dtype: str, width: int, mib: int, dev: og.Device) -> None:
        tdt = fusion.DTYPES[dtype][1]
        self.op, self.dtype = op, dtype
        self.rows = mib * 2**20 // (width * torch.empty((), dtype=tdt).element_size())
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(self.rows, width, device="cuda", generator=gen).to(tdt)
        w = (torch.rand(width, device="cuda", generator=gen) + 0.5).to(tdt)
        b = (torch.randn(width, device="cuda", generator=gen) * 0.1).to(tdt)
        self.inputs = [x, w, b][:1 + fusion.NORMS[op][0]]
        self.nbytes = sum(t.numel() * t.element_size() for t in self.inputs) + x.numel() * x.element_size()
        torch_fn = fusion.NORMS[op][2]
        self.reference = torch_fn(*(t.double() for t in self.inputs)).float()
        compiled = torch.compile(torch_fn, dynamic=False)
        self.fns: dict[str, Any] = {"eager": lambda f=torch_fn, i=self.inputs: f(*i),
                                    "torch.compile": lambda f=compiled, i=self.inputs: f(*i),
                                    "opgraph (generated)": og_function(op, self.inputs, dev)}

    def table(self, dev: og.Device, repeats: int, copy_gbps: float, timing_only: Any = lambda name: False
              ) -> list[list[str]]:
        """Every function of ``fns`` checked against the reference and timed: rows of (name, ms, share of copy,
        ratio to torch.compile, error, check), fastest first; ``timing_only(name)``: wrong by design, not checked."""
        errors = {}
        for name, fn in self.fns.items():
            got = fn().float()
            errors[name] = float((got - self.reference).abs().max() / self.reference.abs().max())
        ms = {k: statistics.median(v) for k, v in fusion.measure(self.fns, dev, 3, repeats).items()}
        tol = fusion.TOLERANCE[self.dtype]
        return [[name, f"{ms[name]:.3f}", f"{self.nbytes / ms[name] / 1e6 / copy_gbps:.2f}",
                 f"{ms['torch.compile'] / ms[name]:.2f}", f"{err:.1e}",
                 "timing only" if timing_only(name) else "ok" if err < tol else "FAIL"]
                for name, err in sorted(errors.items(), key=lambda r: ms[r[0]])]


COLUMNS = ["kernel", "ms", "of copy", "vs compile", "max rel. err", "check"]


def case_parser(doc: str) -> argparse.ArgumentParser:
    """The options of a ``Case`` (ops, dtypes, width, MiB), for this script and its siblings."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--ops", type=fusion.names_of(list(OPS)), default=list(OPS))
    p.add_argument("--dtypes", type=fusion.names_of(list(fusion.DTYPES)), default=list(fusion.DTYPES))
    p.add_argument("--width", type=int, default=262144)
    p.add_argument("--mib", type=int, default=256, help="size of the input (default 256 MiB)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = case_parser(__doc__)
    p.add_argument("--splits", type=fusion.positive_ints, default=(8, 16, 32))
    p.add_argument("--warps", type=fusion.positive_ints, default=(4, 8, 16))
    p.add_argument("--per-sm", type=fusion.positive_ints, default=(1, 2),
                   help="programs per SM to size the grid by (checked against the compiled kernel's registers)")
    p.add_argument("--modes", type=fusion.names_of(MODES), default=list(MODES),
                   help="how programs walk their rows: plain, prefetch (the next row's loads before the meeting), "
                        "pipelined (the next row reduced and counted in before waiting for this one's), cluster "
                        "(groups launched as clusters meeting at the hardware barrier), cluster-rows (a cluster a "
                        "row), cluster-ahead (clusters loading the next row before the meeting), cluster-l2 "
                        "(clusters having the next row brought into L2), cluster-2rows and cluster-4rows (a cluster "
                        "holding 2 or 4 rows, their parameters loaded once and one meeting), cluster-held (clusters "
                        "walking rows, their parameters loaded once before the first), cluster-rows-early (a cluster "
                        "a row, its parameters loaded before the row's meeting); rows-cg, rows-dsmem, rows-packed, "
                        "rows-dsmem-packed, rows-l1, rows-packed-l1, rows-unmet, rows-unmet-l1 (cluster-rows with one "
                        "change each: the module's docstring); cluster-cg (cluster with chunks loaded past L1), "
                        "cluster-stagger (that, the groups starting --stagger apart)")
    p.add_argument("--backoff", action="store_true",
                   help="also time each configuration sleeping ~32 ns between polls of its meeting's counter")
    p.add_argument("--no-barrier", action="store_true",
                   help="also time each configuration without its barrier (wrong results): what the waiting costs")
    p.add_argument("--generated", type=_split_warps, default=(),
                   help="also opgraph's generated kernel launched as clusters of SPLITxWARPS (e.g. 16x4,16x8), "
                        "not the tuner's choice: the same design as the hand-written cluster-rows mode")
    p.add_argument("--maxnreg", type=fusion.positive_ints, default=(),
                   help="rows-* modes: also each launch with registers capped at these (ptxas's .maxnreg; e.g. 80 "
                        "fits three programs of 8 warps an SM)")
    p.add_argument("--stagger", type=fusion.positive_ints, default=(10000,),
                   help="cluster-stagger: ns between the first and the last group's start (several: one launch each)")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--top", type=int, default=6)
    args = p.parse_args(argv)
    dev = fusion.cuda_device(p)
    copy_gbps = fusion.copy_roofline(dev, 10)
    for op in args.ops:
        for dtype in args.dtypes:
            case = Case(op, dtype, args.width, args.mib, dev)
            inputs, fns = case.inputs, case.fns
            for split, warps in args.generated:
                fns[f"opgraph (generated), split {split}, {warps} warps, cluster"] = og_forced(op, inputs, split, warps)
            kernels: list[LongRows] = []
            for split in args.splits:
                for warps in args.warps:
                    for mode in args.modes:
                        # rows a program holds at once
                        held = {"cluster-2rows": 2, "cluster-4rows": 4}.get(mode, 1)
                        held = 2 if mode in ("prefetch", "pipelined", "cluster-ahead") else held
                        values = args.width // split // (32 * warps) * held
                        if not 8 <= values <= 128:
                            continue
                        for per_sm in args.per_sm:
                            try:
                                k = LongRows(op, inputs, split, warps, mode, per_sm, stagger=args.stagger[0])
                            except Exception as e:  # noqa: BLE001 (a cluster too large, or a launcher unknown)
                                print(f"split {split}, {warps} warps, {mode}: {fusion._error(e)}", file=sys.stderr)
                                continue
                            if not k.fits:
                                continue
                            kernels.append(k)
                            name = f"split {split}, {warps} warps, {per_sm}/SM, {mode}"
                            name += f", {args.stagger[0]} ns" if mode == "cluster-stagger" else ""
                            fns[name] = lambda k=k: (k(), k.y)[1]
                            for cap in args.maxnreg if mode in ROW_MODES else ():
                                capped = LongRows(op, inputs, split, warps, mode, per_sm, maxnreg=cap)
                                fns[f"{name}, maxnreg {cap}"] = lambda k=capped: (k(), k.y)[1]
                            for ns in args.stagger[1:] if mode == "cluster-stagger" else ():
                                late = LongRows(op, inputs, split, warps, mode, per_sm, stagger=ns)
                                fns[f"{name.rsplit(', ', 1)[0]}, {ns} ns"] = lambda k=late: (k(), k.y)[1]
                            if args.backoff:  # the same kernel polling its counter less often
                                try:
                                    polite = LongRows(op, inputs, split, warps, mode, per_sm, backoff=True)
                                except Exception as e:  # noqa: BLE001 (inline PTX the toolchain may refuse)
                                    print(f"{name}, backoff: {fusion._error(e)}", file=sys.stderr)
                                else:
                                    kernels.append(polite)
                                    fns[name + ", backoff"] = lambda k=polite: (k(), k.y)[1]
                            # without its barrier: what the waiting costs
                            if args.no_barrier and mode in ("plain", "prefetch"):
                                nb = LongRows(op, inputs, split, warps, mode, per_sm, meet=False)
                                fns[name + ", no barrier"] = lambda k=nb: (k(), k.y)[1]
            flagged = sum(int(k.err.item()) for k in kernels)
            table = case.table(dev, args.repeats, copy_gbps,
                               lambda name: any(m in name for m in ("no barrier", "rows-unmet")))
            print(f"\n== {op} {dtype} {case.rows}x{args.width} (barrier timeouts: {flagged})")
            peers = [r for r in table[args.top:] if not r[0].startswith("split")]  # and the peers, however slow
            print(format_table(COLUMNS, table[:args.top] + peers))
            del fns, case
            fusion._free(dev)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
