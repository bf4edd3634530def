"""Long rows through shared memory, an experiment for the 262k-wide softmax and norms of issue 4: a hand-written
Gluon kernel (Triton's lower-level dialect) against opgraph's generated kernel, torch.compile and the copy bandwidth.

The twenty-fourth session measured what the generated kernels' design costs (``long_rows.py``'s ``rows-*`` modes,
RESULTS.md): a cluster of 16 programs a row, each holding its chunk in registers, meeting once. Without the meeting
it would reach 0.87-0.94 of copy (0.71-0.81 for bfloat16 layer_norm and rms_norm, whose every program reads its
chunk of the parameters from L2 for every row); the meeting costs 10-20%. What that design cannot do, this kernel
does: clusters of ``SPLIT`` programs walk the rows (persistent), each program holding the same chunk of every row,
so it loads its chunk of gamma and beta into shared memory once (TMA) and reads them there for every row; and the
next row's chunk comes into a second shared-memory buffer by TMA while this row's parts meet, reduce and store, so
the loads stay in flight through the meeting without a register of their own. The chunk is read from shared memory
twice (for the partials, then for the outputs) and never held in registers across the meeting.

    python benchmarks/long_rows_tma.py
    python benchmarks/long_rows_tma.py --ops softmax --dtypes bfloat16 --warps 4,8 --buffers 1,2
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path
from typing import Any

import torch

from opgraph.cli._table import format_table
from opgraph.codegen.triton.kernel import cluster_launch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fusion  # noqa: E402

OPS = {"softmax": 0, "rms_norm": 1, "layer_norm": 2}
BOX = 256  # a TMA box's longest side: a chunk is a [CHUNK // BOX, BOX] tile of the row seen as [N // BOX, BOX]

try:
    if os.environ.get("TRITON_INTERPRET") == "1":  # Gluon compiles for a GPU only
        raise ImportError("the interpreter runs no Gluon")
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # pragma: no cover - the script needs a Hopper GPU and Triton with Gluon
    gluon = None

if gluon is not None:
    SOFTMAX, RMS_NORM, LAYER_NORM = gl.constexpr(0), gl.constexpr(1), gl.constexpr(2)
    # a TMA load into shared memory: ``async_copy_global_to_shared`` in Triton 3.6 (the GPU machine's), renamed
    # ``async_load`` since
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    _tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global  # likewise
    _store_wait = tma.store_wait
    _thread_barrier = getattr(gl, "thread_barrier", None) or gl.barrier  # the CTA's barrier (renamed since 3.6)

    @gluon.jit
    def _cluster_sync(token):  # type: ignore[no-untyped-def]
        # the cluster's barrier (releasing this program's writes, acquiring the others'); ``token`` comes back
        # through the asm, so loads addressed with it stay after it
        return gl.inline_asm_elementwise("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;\n\t"
                                         "mov.u32 $0, $1;", "=r,r", [token], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _refill(desc, coord, bar, dest):  # type: ignore[no-untyped-def]
        """``_fetch`` into a buffer this program's threads have read: once all of them have, and their reads are
        ordered before the copy engine's write (a fence between the generic and the async proxy)."""
        _thread_barrier()
        fence_async_shared()
        _fetch(desc, coord, bar, dest)

    @gluon.jit
    def _fetch(desc, coord, bar, dest):  # type: ignore[no-untyped-def]
        """Bring the box at ``coord`` into ``dest`` by TMA, ``bar`` counting its bytes in."""
        mbarrier.expect(bar, desc.block_type.nbytes)
        _tma_load(desc, coord, bar, dest)

    @gluon.jit
    def _tile(buf, i: gl.constexpr, SUB: gl.constexpr, layout: gl.constexpr):  # type: ignore[no-untyped-def]
        return buf.slice(i * SUB, SUB).load(layout).to(gl.float32)

    @gluon.jit
    def _total(acc):  # type: ignore[no-untyped-def]
        return gl.sum(gl.sum(acc, axis=1), axis=0)

    @gluon.jit
    def _chunk_partials(buf, OP: gl.constexpr, CR: gl.constexpr, SUB: gl.constexpr,  # type: ignore[no-untyped-def]
                        layout: gl.constexpr, EXP_ONCE: gl.constexpr):
        """A chunk's partials read from shared memory a [SUB, BOX] tile at a time (so that no thread holds the
        chunk), each thread accumulating its elements of the tiles and the program reducing once a pass (a
        reduction across warps costs a barrier): softmax's max and its sum of exponentials, rms_norm's sum of
        squares (twice), layer_norm's mean and sum of squared deviations (two passes, as exact as they come).
        ``EXP_ONCE``: softmax's exponentials written over the chunk, for the outputs to scale (one exponential an
        element rather than two; in bfloat16, rounded twice)."""
        t = _tile(buf, 0, SUB, layout)
        if OP == SOFTMAX:
            acc = t
            for i in gl.static_range(1, CR // SUB):
                acc = gl.maximum(acc, _tile(buf, i, SUB, layout))
            a = gl.max(gl.max(acc, axis=1), axis=0)
            _thread_barrier()  # so that the compiler reads the tiles again rather than holding the first pass's
            acc = gl.zeros([SUB, 256], gl.float32, layout)
            for i in gl.static_range(CR // SUB):
                e = gl.exp(_tile(buf, i, SUB, layout) - a)
                acc += e
                if EXP_ONCE:  # over the elements this thread read
                    buf.slice(i * SUB, SUB).store(e.to(buf.dtype))
            cc = _total(acc)
        elif OP == RMS_NORM:
            acc = t * t
            for i in gl.static_range(1, CR // SUB):
                u = _tile(buf, i, SUB, layout)
                acc += u * u
            a = _total(acc)
            cc = a
        else:
            acc = t
            for i in gl.static_range(1, CR // SUB):
                acc += _tile(buf, i, SUB, layout)
            a = _total(acc) / (CR * 256)
            _thread_barrier()  # as above
            acc = (_tile(buf, 0, SUB, layout) - a) * (_tile(buf, 0, SUB, layout) - a)
            for i in gl.static_range(1, CR // SUB):
                d = _tile(buf, i, SUB, layout) - a
                acc += d * d
            cc = _total(acc)
        return a, cc

    @gluon.jit
    def _param_tile(ptr, shared, offs, i: gl.constexpr, SHARED: gl.constexpr,  # type: ignore[no-untyped-def]
                    SUB: gl.constexpr, layout: gl.constexpr):
        """Tile ``i`` of the chunk's gamma or beta: from shared memory where the walk holds them, else from global
        memory (L2, mostly) at ``offs``."""
        if SHARED:
            return shared.slice(i * SUB, SUB).load(layout).to(gl.float32)
        return gl.load(ptr + offs).to(gl.float32)

    @gluon.jit
    def _rows_tma(x_desc, w_desc, b_desc, y_desc, w_ptr, b_ptr, y_ptr, ws_ptr,  # type: ignore[no-untyped-def]
                  rows, groups, eps, N: gl.constexpr, SPLIT: gl.constexpr, CR: gl.constexpr, OP: gl.constexpr,
                  NBUF: gl.constexpr, VEC: gl.constexpr, SUB: gl.constexpr, PARAMS_SHARED: gl.constexpr,
                  STORE_TMA: gl.constexpr, EXP_ONCE: gl.constexpr, num_warps: gl.constexpr):
        """Clusters of ``SPLIT`` programs; each holds chunk ``part`` ([CR, BOX] of the row seen as [N // BOX, BOX])
        of every row of its group (``groups == rows``: one row, a cluster a row) in one of ``NBUF`` shared-memory
        buffers, the next row's on its way while this one meets; gamma and beta's chunk in shared memory, loaded
        once, if ``PARAMS_SHARED``; outputs written back through the chunk's buffer by TMA if ``STORE_TMA``."""
        BC: gl.constexpr = 256  # == BOX
        CHUNK: gl.constexpr = CR * BC
        pid = gl.program_id(0)
        part = pid % SPLIT
        group = pid // SPLIT
        layout: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [num_warps, 1], [1, 0])
        parts_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        xs = gl.allocate_shared_memory(x_desc.dtype, [NBUF, CR, BC], x_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NBUF):
            mbarrier.init(bars.index(i), count=1)
        w_s = xs  # stand-ins where the parameters stay in global memory
        b_s = xs
        if PARAMS_SHARED and OP != SOFTMAX:  # the chunk's parameters: once, for every row of the walk
            pbar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
            mbarrier.init(pbar, count=1)
            w_s = gl.allocate_shared_memory(w_desc.dtype, [CR, BC], w_desc.layout)
            if OP == LAYER_NORM:
                b_s = gl.allocate_shared_memory(b_desc.dtype, [CR, BC], b_desc.layout)
                mbarrier.expect(pbar, w_desc.block_type.nbytes + b_desc.block_type.nbytes)
                _tma_load(w_desc, [part * CR, 0], pbar, w_s)
                _tma_load(b_desc, [part * CR, 0], pbar, b_s)
            else:
                _fetch(w_desc, [part * CR, 0], pbar, w_s)
        _fetch(x_desc, [group * (N // BC) + part * CR, 0], bars.index(0), xs.index(0))
        if PARAMS_SHARED and OP != SOFTMAX:
            mbarrier.wait(pbar, 0)
        r = gl.arange(0, SUB, layout=gl.SliceLayout(1, layout))
        c = gl.arange(0, BC, layout=gl.SliceLayout(0, layout))
        tile = gl.expand_dims(r, 1) * BC + gl.expand_dims(c, 0)
        parts = gl.arange(0, SPLIT, layout=parts_layout)
        it = 0
        for row in range(group, rows, groups):
            nxt = row + groups
            if NBUF > 1:  # noqa: SIM102 (a constexpr test, then a run-time one)
                if nxt < rows:  # into the buffer the last row read (and, by TMA, stored)
                    if STORE_TMA:
                        _store_wait(0)
                    _refill(x_desc, [nxt * (N // BC) + part * CR, 0], bars.index((it + 1) % NBUF),
                            xs.index((it + 1) % NBUF))
            buf = xs.index(it % NBUF)
            mbarrier.wait(bars.index(it % NBUF), (it // NBUF) & 1)
            a, cc = _chunk_partials(buf, OP, CR, SUB, layout, EXP_ONCE)
            slot = ws_ptr + (group * 2 + it % 2) * 2 * SPLIT
            gl.store(slot + part, a)
            gl.store(slot + SPLIT + part, cc)
            _thread_barrier()  # every thread's partials are stored before the arrival
            tok = _cluster_sync(it)
            seen = ws_ptr + (group * 2 + tok % 2) * 2 * SPLIT
            every_a = gl.load(seen + parts, cache_modifier=".cg")
            every_c = gl.load(seen + SPLIT + parts, cache_modifier=".cg")
            if OP == SOFTMAX:
                shift = gl.max(every_a, axis=0)
                scale = 1.0 / gl.sum(every_c * gl.exp(every_a - shift), axis=0)
                if EXP_ONCE:  # the chunk holds exp(x - a): scaled to exp(x - shift) / sum
                    scale = scale * gl.exp(a - shift)
            elif OP == RMS_NORM:
                shift = 0.0
                scale = gl.rsqrt(gl.sum(every_a, axis=0) / N + eps)
            else:
                shift = gl.sum(every_a, axis=0) / SPLIT
                spread = gl.sum(every_c, axis=0) + CHUNK * gl.sum((every_a - shift) * (every_a - shift), axis=0)
                scale = gl.rsqrt(spread / N + eps)
            for i in gl.static_range(CR // SUB):  # the chunk again, from shared memory
                x = _tile(buf, i, SUB, layout)
                offs = part * CHUNK + i * SUB * BC + tile
                if OP == SOFTMAX and EXP_ONCE:
                    y = x * scale
                elif OP == SOFTMAX:
                    y = gl.exp(x - shift) * scale
                elif OP == RMS_NORM:
                    y = x * scale * _param_tile(w_ptr, w_s, offs, i, PARAMS_SHARED, SUB, layout)
                else:
                    y = (x - shift) * scale * _param_tile(w_ptr, w_s, offs, i, PARAMS_SHARED, SUB, layout) \
                        + _param_tile(b_ptr, b_s, offs, i, PARAMS_SHARED, SUB, layout)
                if STORE_TMA:  # over the tile just read, by the threads that read it
                    buf.slice(i * SUB, SUB).store(y.to(x_desc.dtype))
                else:
                    gl.store(y_ptr + row.to(gl.int64) * N + offs, y.to(y_ptr.dtype.element_ty))  # type: ignore[attr-defined]
            if STORE_TMA:
                fence_async_shared()
                _thread_barrier()
                _tma_store(y_desc, [row * (N // BC) + part * CR, 0], buf)
            if NBUF == 1:  # noqa: SIM102 (a constexpr test, then a run-time one)
                if nxt < rows:  # one buffer: the next row's loads only once this one is read
                    if STORE_TMA:
                        _store_wait(0)
                    _refill(x_desc, [nxt * (N // BC) + part * CR, 0], bars.index(0), xs.index(0))
            it += 1  # noqa: SIM113 (a loop-carried value of the kernel)
        if STORE_TMA:
            _store_wait(0)
        for i in gl.static_range(NBUF):
            mbarrier.invalidate(bars.index(i))


class RowsTMA:
    """One launch of ``_rows_tma``: ``split`` programs a row of ``num_warps`` each, ``buffers`` chunks of x in
    shared memory, as many clusters as make ``per_sm`` programs a multiprocessor (the hardware schedules each
    cluster whole: more than fit at once only queue); ``per_sm`` 0: a cluster a row, not walking (the generated
    kernels' design, its chunk in shared memory rather than registers, so that as many programs share a
    multiprocessor as its shared memory holds, its parameters read from global memory as the generated kernels
    read them). ``sub``: rows of a [sub, 256] tile read from shared memory at a time; ``store_tma``: outputs
    written over the chunk's buffer and stored by TMA, not by the threads. ``variant``: ``base`` or ``exp-once``
    (softmax: the exponentials kept in shared memory for the outputs)."""

    def __init__(self, op: str, inputs: list[torch.Tensor], split: int, num_warps: int, buffers: int,
                 per_sm: int = 1, sub: int = 8, store_tma: bool = False, variant: str = "base") -> None:
        x = inputs[0]
        self.rows, self.n = x.shape
        if self.n % (split * BOX) or split > 16:
            raise ValueError(f"rows of {self.n} do not split into {split} chunks of whole {BOX}-wide boxes")
        self.op, self.split, self.num_warps, self.buffers = OPS[op], split, num_warps, buffers
        self.cr = self.n // split // BOX
        gdt = {torch.float32: gl.float32, torch.bfloat16: gl.bfloat16}[x.dtype]
        layout = gl.NVMMASharedLayout.get_default_for([self.cr, BOX], gdt)
        if self.cr % sub:
            raise ValueError(f"a chunk of {self.cr} boxes does not split into tiles of {sub}")
        self.params = (inputs[1:] + [x[0], x[0]])[:2]
        self.y = torch.empty_like(x)
        self.descs = [TensorDescriptor(t.view(-1, BOX), [t.numel() // BOX, BOX], [BOX, 1], [self.cr, BOX], layout)
                      for t in (x, *self.params, self.y)]
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        self.groups = self.rows if per_sm == 0 else max(1, min(self.rows, sms * per_sm // split))
        self.ws = torch.empty(self.groups * 4 * split, dtype=torch.float32, device=x.device)
        self.eps = 1e-6 if op == "rms_norm" else 1e-5
        vec = 16 // x.element_size()
        self.sizes = dict(N=self.n, SPLIT=split, CR=self.cr, OP=self.op, NBUF=buffers, VEC=vec, SUB=sub,
                          PARAMS_SHARED=per_sm != 0, STORE_TMA=store_tma,
                          EXP_ONCE=variant == "exp-once", num_warps=num_warps)
        compiled = _rows_tma.warmup(*self._args(), grid=(self.groups * split,), **self.sizes)
        self.shared = int(compiled.metadata.shared)
        # a program's shared memory at most (opted in; Hopper's 227 KiB where PyTorch does not say)
        limit = int(getattr(torch.cuda.get_device_properties(x.device), "shared_memory_per_block_optin", 232448))
        if self.shared > limit:  # refused at the first launch otherwise, past the constructor's caller
            raise ValueError(f"{self.shared} bytes of shared memory a program, more than the {limit} a GPU's has")
        cluster_launch(compiled, split)

    def _args(self) -> tuple[Any, ...]:
        return (*self.descs, *self.params, self.y, self.ws, self.rows, self.groups, self.eps)

    def __call__(self) -> torch.Tensor:
        _rows_tma[(self.groups,)](*self._args(), **self.sizes)  # the launcher multiplies by the cluster size
        return self.y


def _counts(text: str) -> tuple[int, ...]:
    """Comma-separated integers of 0 and more, for an argparse type."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected integers of 0 and more, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    long_rows = fusion._sibling("long_rows")
    p = long_rows.case_parser(__doc__)
    p.add_argument("--splits", type=fusion.positive_ints, default=(16, 8), help="programs a row (a cluster)")
    p.add_argument("--warps", type=fusion.positive_ints, default=(4, 8))
    p.add_argument("--buffers", type=fusion.positive_ints, default=(2, 1),
                   help="chunks of x a program keeps in shared memory (2: the next row's loads in flight)")
    p.add_argument("--per-sm", type=_counts, default=(1, 2),
                   help="programs a multiprocessor (0: a cluster a row, as many at once as fit)")
    p.add_argument("--stores", type=lambda t: tuple(t.split(",")), default=("thread",),
                   help="how outputs are written: thread (by the threads), tma (over the buffer, then by TMA)")
    p.add_argument("--variants", type=lambda t: tuple(t.split(",")), default=("base",),
                   help="of base, exp-once (softmax); see RowsTMA")
    p.add_argument("--sub", type=int, default=8, help="rows of 256 a thread block reads from shared memory at once")
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    if gluon is None:
        p.error("needs Triton with Gluon and a Hopper GPU (not the interpreter)")
    dev = fusion.cuda_device(p)
    copy_gbps = fusion.copy_roofline(dev, 10)
    for op in args.ops:
        for dtype in args.dtypes:
            case = long_rows.Case(op, dtype, args.width, args.mib, dev)
            inputs, fns = case.inputs, case.fns
            for split in args.splits:
                for warps in args.warps:
                    for buffers in args.buffers:
                        for per_sm, store, variant in itertools.product(args.per_sm, args.stores, args.variants):
                            if per_sm == 0 and buffers > 1:
                                continue  # nothing to walk to: no next row to bring in
                            if variant == "exp-once" and op != "softmax":
                                continue  # a softmax's variant
                            walk = f"{per_sm}/SM" if per_sm else "a cluster a row"
                            name = (f"tma, split {split}, {warps} warps, {buffers} buffer{'s' * (buffers > 1)}, "
                                    f"{walk}, {store} stores{', ' + variant if variant != 'base' else ''}")
                            try:
                                k = RowsTMA(op, inputs, split, warps, buffers, per_sm, args.sub, store == "tma",
                                            variant)
                            except Exception as e:  # noqa: BLE001 (shared memory too small, a compile error)
                                print(f"{name}: {fusion._error(e)}", file=sys.stderr)
                                continue
                            fns[f"{name} ({k.shared // 1024} KiB)"] = k
            print(f"\n== {op} {dtype} {case.rows}x{args.width}")
            print(format_table(long_rows.COLUMNS, case.table(dev, args.repeats, copy_gbps)))
            del fns, case
            fusion._free(dev)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
