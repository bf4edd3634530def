"""What a norm's parameters cost a long-row kernel: rms_norm and layer_norm over ``--width``-wide rows, with and
without gamma (and beta), each under fixed launch configurations of the region's generated kernel (not the tuner's
choice), timed as ``fusion.py`` times them (device time, cold L2), against the copy bandwidth measured in the same run.

A part of a split row reads its chunk of each parameter for every row; where that costs, reading the parameters once
for several rows would pay; where it does not, it would not (RESULTS.md, twenty-fifth session). ``of copy`` counts x
read and y written only, so that the cases compare at equal work.

    python benchmarks/norm_parameters.py
    python benchmarks/norm_parameters.py --dtypes bfloat16 --configs steps2048,held80
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import opgraph as og
from opgraph.cli._table import format_table
from opgraph.codegen.triton.configs import Config

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fusion  # noqa: E402

CASES: dict[str, Callable[[og.Graph, og.Tensor, og.Tensor, og.Tensor], og.Tensor]] = {
    "rms_norm, gamma": lambda g, x, w, b: g.rms_norm(x, -1, w, 1e-6),
    "rms_norm, no gamma": lambda g, x, w, b: g.rms_norm(x, -1, None, 1e-6),
    "layer_norm, gamma and beta": lambda g, x, w, b: g.layer_norm(x, -1, w, b, 1e-5),
    "layer_norm, gamma": lambda g, x, w, b: g.layer_norm(x, -1, w, None, 1e-5),
    "layer_norm, neither": lambda g, x, w, b: g.layer_norm(x, -1, None, None, 1e-5),
}
CONFIGS = {  # a row split into 16 parts launched as a cluster: walked in steps, or held in registers
    "steps2048": Config(reduction=True, rblock=2048, looped=True, num_warps=8, split=16, cluster=True),
    "steps4096": Config(reduction=True, rblock=4096, looped=True, num_warps=8, split=16, cluster=True),
    "held": Config(reduction=True, rblock=16384, num_warps=8, split=16, cluster=True),
    "held80": Config(reduction=True, rblock=16384, num_warps=8, split=16, cluster=True, maxnreg=80),
}
UNFUSED = og.CompilationDescriptor(fusion=False, cuda_graphs=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtypes", type=fusion.names_of(["float32", "bfloat16"]), default=["bfloat16", "float32"])
    p.add_argument("--width", type=int, default=262144,
                   help="row width, at most 262144 (the held configurations' 16 parts of 16384)")
    p.add_argument("--mib", type=float, default=256, help="MiB of x")
    p.add_argument("--configs", type=fusion.names_of(list(CONFIGS)), default=list(CONFIGS),
                   help=f"of {', '.join(CONFIGS)}")
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    if not 0 < args.width <= 16 * 16384:  # a given configuration past its row is not refused: it would miss elements
        p.error(f"--width must be in 1..262144, got {args.width}")
    dev = fusion.cuda_device(p)
    copy_gbps = fusion.copy_roofline(dev, 10)
    from opgraph.codegen.triton.kernel import region_kernel

    table: list[list[Any]] = []
    for dtype in args.dtypes:
        ogt, tt = fusion.DTYPES[dtype]
        rows = max(1, int(args.mib * 2**20) // (args.width * tt.itemsize))
        xs = torch.randn(rows, args.width, device="cuda").to(tt)
        ws, bs = (torch.randn(args.width, device="cuda").to(tt) for _ in range(2))
        moved = 2 * xs.numel() * xs.element_size()
        for case, build in CASES.items():
            g = og.Graph()
            x, w, b = g.placeholder(xs.shape, ogt), g.placeholder(ws.shape, ogt), g.placeholder(bs.shape, ogt)
            y = build(g, x, w, b)
            value = {id(x): xs, id(w): ws, id(b): bs}
            region = fusion.region_case([y], value, "cuda")
            used = [t for t in (x, w, b) if any(t is i for i in region.inputs)]  # the placeholders the case reads
            want = g.compile({t: t.type for t in used}, [y], device=dev, descriptor=UNFUSED).run(
                [value[id(t)] for t in used])[0]
            for name in args.configs:
                kernel = region_kernel(region.ops, region.inputs, [y], config=CONFIGS[name])
                got = kernel(*region.feed)[0]
                err = float((got.float() - want.float()).abs().max() / want.float().abs().max())
                ms = fusion.measure({"k": functools.partial(kernel, *region.feed)}, dev, 2, args.repeats)["k"]
                t = sorted(ms)[len(ms) // 2]
                limit = 1e-3 if dtype == "float32" else 2.0 ** -7
                table.append([dtype, f"{rows}x{args.width}", case, CONFIGS[name].describe(), f"{t:.3f}",
                              f"{moved / t / 1e6 / copy_gbps:.2f}", f"{err:.1e}", "ok" if err <= limit else "FAIL"])
                print(f"  {dtype} {case}: {CONFIGS[name].describe()}", file=sys.stderr, flush=True)
    print(format_table(["dtype", "shape", "case", "configuration", "ms", "of copy", "max rel. diff", "check"], table))
    return 1 if any(row[-1] == "FAIL" for row in table) else 0


if __name__ == "__main__":
    raise SystemExit(main())
