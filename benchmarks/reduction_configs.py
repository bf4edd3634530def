"""Launch configurations of one fused normalisation kernel, timed against each other and the copy bandwidth in
the same run: the tool behind the rules of thumb in ``codegen/triton/configs.py``'s ``candidate_configs``.

For each ``--ops`` x ``--dtypes`` on (``--mib`` MiB / width, width) matrices of each ``--widths``, the region
of ``benchmarks/fusion.py``'s norm case is emitted with every configuration worth trying: rows held in
registers (persistent, widths up to ``PERSISTENT_MAX``), walked in steps (looped), and split across programs
that meet at barriers (chunks of ``--chunks`` elements x 4/8/16 warps; held in registers or walked in steps;
held in registers and launched as thread-block clusters meeting at the cluster's barrier, up to 16 parts).
Times are device time with a cold L2, measured as fusion.py measures them; ``of copy`` = bytes read + written /
time / copy bandwidth. The first configuration's result is the reference: every other must agree within 1e-3
(float32) or one bfloat16 rounding step, 2^-7 (relative to the largest value).

    python benchmarks/reduction_configs.py                                 # 262144-wide rows, softmax/norms
    python benchmarks/reduction_configs.py --ops softmax --dtypes bfloat16 --widths 32768,262144
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

import opgraph as og
from opgraph.cli._table import format_table
from opgraph.codegen.triton.configs import MAX_CLUSTER, PERSISTENT_MAX, Config, multiprocessors
from opgraph.codegen.triton.expr import NotExpressible
from opgraph.codegen.triton.kernel import region_kernel, region_of

_spec = importlib.util.spec_from_file_location("opgraph_benchmarks_fusion", Path(__file__).with_name("fusion.py"))
assert _spec is not None and _spec.loader is not None
fusion = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fusion
_spec.loader.exec_module(fusion)


def configs(width: int, chunks: list[int]) -> list[Config]:
    out = [Config(reduction=True, xblock=1, rblock=4096, looped=True, num_warps=16)]
    out += [Config(reduction=True, xblock=1, rblock=step, looped=True, num_warps=w)
            for step in (1024, 2048, 4096, 8192) for w in (4, 8, 16, 32)
            if (step, w) != (4096, 16) and 2 <= step // (32 * w) <= 32]
    if width <= PERSISTENT_MAX:
        rblock = 1 << (width - 1).bit_length()
        out += [Config(reduction=True, xblock=1, rblock=rblock, num_warps=w) for w in (4, 8, 16, 32)
                if 4 <= rblock // (32 * w) <= 64]
        sms = multiprocessors()  # a grid of one or two programs a multiprocessor, loads of next rows pipelined
        out += [Config(reduction=True, xblock=1, rblock=rblock, num_warps=w, programs=per * sms, stages=stages)
                for w in (8, 16, 32) for stages in (3, 4) for per in (1, 2)
                if sms and 1 <= rblock // (32 * w) <= 64]
    for chunk in chunks:
        split = -(-width // chunk)
        if split < 2 or split & (split - 1):
            continue
        out += [Config(reduction=True, xblock=1, rblock=chunk, num_warps=w, split=split, cluster=cluster)
                for w in (4, 8, 16) for cluster in (False, True)
                if 8 <= chunk // (32 * w) <= 128 and (not cluster or split <= MAX_CLUSTER)]
        # or walked in steps by each part, twice: the second walk finds the chunk in L2 (few rows in flight)
        # (as clusters too: parts holding few registers, so that more share a multiprocessor and hide each other's
        # meetings, as the Gluon kernel of long_rows_tma.py does with its chunk in shared memory)
        out += [Config(reduction=True, xblock=1, rblock=step, looped=True, num_warps=w, split=split, cluster=cluster)
                for step in (1024, 2048, 4096, 8192) for w in (4, 8, 16) for cluster in (False, True)
                if step < chunk and 4 <= step // (32 * w) <= 16 and (not cluster or split <= MAX_CLUSTER)]
    return out


def constant(t: og.Tensor) -> torch.Tensor:
    """The value of a region input that is no placeholder: the constant it reads."""
    value = t.op.payload
    assert value is not None, f"input {t} is neither a placeholder nor a constant"
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=fusion.names_of(list(fusion.NORMS)), default=["softmax", "layer_norm", "rms_norm"],
                   help=f"comma-separated, of {', '.join(fusion.NORMS)}")
    p.add_argument("--dtypes", type=fusion.names_of(["float32", "bfloat16"]), default=["float32", "bfloat16"],
                   help="comma-separated, of float32, bfloat16")
    p.add_argument("--widths", type=fusion.positive_ints, default=(262144,), help="row widths (powers of two)")
    p.add_argument("--chunks", type=fusion.positive_ints, default=(4096, 8192, 16384, 32768),
                   help="split: elements a program holds (powers of two)")
    p.add_argument("--warps", type=fusion.positive_ints, default=(4, 8, 16, 32),
                   help="only configurations of these warps (a layer norm's 16384 at 4 warps: minutes of ptxas)")
    p.add_argument("--split-only", action="store_true", help="only rows split across programs")
    p.add_argument("--mib", type=float, default=256, help="MiB of each input matrix")
    p.add_argument("--repeats", type=int, default=15, help="timed calls of each configuration")
    p.add_argument("--top", type=int, default=6, help="rows printed per case (fastest first)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA device: split configurations wait at barriers that the interpreter cannot run")
    dev = og.device("cuda")
    copy = fusion.copy_roofline(dev, args.repeats)
    nbytes = int(args.mib * 2**20)
    chunks = list(args.chunks)
    if any(c & (c - 1) for c in chunks):
        p.error(f"--chunks must be powers of two, got {args.chunks}")
    failed = False
    for op in args.ops:
        nparams, build, _ = fusion.NORMS[op]
        for dtype in args.dtypes:
            ogt, tt = fusion.DTYPES[dtype]
            for width in args.widths:
                rows = max(1, nbytes // (width * tt.itemsize))
                g = og.Graph()
                x = g.placeholder((rows, width), ogt)
                params = [g.placeholder((width,), ogt) for _ in range(nparams)]
                y = build(g, x, *params)
                ops, ins = region_of([y])
                values: dict[int, torch.Tensor] = {id(x): torch.randn(rows, width, device="cuda").to(tt)}
                values.update({id(w): torch.randn(width, device="cuda").to(tt) for w in params})
                feed = [values[id(t)] if id(t) in values else constant(t).cuda() for t in ins]
                results: list[tuple[float, Config, float]] = []
                reference: torch.Tensor | None = None
                for c in configs(width, chunks):
                    if c.num_warps not in args.warps or (args.split_only and c.split == 1):
                        continue
                    try:
                        kernel = region_kernel(ops, ins, [y], config=c)
                    except NotExpressible as e:  # a row split into more parts than multiprocessors
                        print(f"  {op} {dtype} {width}: {c.describe()}: skipped ({e})", file=sys.stderr, flush=True)
                        continue
                    try:
                        out = kernel(*feed)[0].float()
                    except Exception as e:  # noqa: BLE001 -- Triton's OutOfResources: a pipelined grid's buffers
                        print(f"  {op} {dtype} {width}: {c.describe()}: skipped ({type(e).__name__})",
                              file=sys.stderr, flush=True)
                        continue
                    reference = out if reference is None else reference
                    err = float((out - reference).abs().max() / reference.abs().max().clamp_min(1e-30))
                    ms = fusion.measure({"k": lambda k=kernel, f=feed: k(*f)}, dev, 2, args.repeats)["k"]
                    results.append((sorted(ms)[len(ms) // 2], c, err))
                    print(f"  {op} {dtype} {width}: {c.describe()}", file=sys.stderr, flush=True)
                moved = 2 * rows * width * tt.itemsize
                results.sort(key=lambda r: r[0])
                limit = 1e-3 if dtype == "float32" else 2.0 ** -7  # bfloat16: last bits round either way
                shown = results[:args.top] + [r for r in results[args.top:] if r[2] > limit]  # and every failure
                failed = failed or any(err > limit for _, _, err in results)
                table: list[list[Any]] = [[c.describe(), f"{ms:.3f}", f"{moved / ms / 1e6 / copy:.2f}",
                                           f"{err:.1e}", "ok" if err <= limit else "FAIL"]
                                          for ms, c, err in shown]
                print(f"\n== {op} {dtype} {rows}x{width}")
                print(format_table(["configuration", "ms", "of copy", "max rel. diff", "check"], table))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
