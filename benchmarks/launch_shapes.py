"""Launch shapes of torch.compile's and opgraph's kernels for fusion.py's norm cases, side by side: grid, threads a
program, registers a thread, shared memory and device time of each kernel, from the PyTorch profiler's trace, and
the launch configuration opgraph's tuner chose (``KernelInfo.tuned``). A tool for finding why one is faster (the
twenty-second session found torch.compile walking 4096-wide float32 rows in steps, 16 warps at 32 registers, where
opgraph held them in registers at 4 warps and 70).

    python benchmarks/launch_shapes.py
    python benchmarks/launch_shapes.py --norms layer_norm --dtypes float32 --widths 4096,32768
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

import opgraph as og
from opgraph.cli._table import format_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fusion  # noqa: E402


def launches(fn: Callable[[], Any]) -> list[list[str]]:
    """[kernel, grid, threads, registers, shared bytes, us] of each kernel one call of ``fn`` launches (after one
    untraced call)."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    rows = []
    for e in events:
        if e.get("cat") == "kernel":
            a = e.get("args", {})
            block = a.get("block") or [0]
            rows.append([e["name"][:48], str(a.get("grid")), str(block[0]), str(a.get("registers per thread")),
                         str(a.get("shared memory")), f"{e.get('dur', 0):.1f}"])
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--norms", type=fusion.names_of(list(fusion.NORMS)), default=["layer_norm", "rms_norm"])
    p.add_argument("--dtypes", type=fusion.names_of(list(fusion.DTYPES)), default=list(fusion.DTYPES))
    p.add_argument("--widths", type=fusion.positive_ints, default=(4096, 32768))
    p.add_argument("--mib", type=int, default=256, help="MiB of each input matrix (default 256, as fusion.py)")
    args = p.parse_args(argv)
    dev = fusion.cuda_device(p)
    for dtype in args.dtypes:
        ogdt, tdt = fusion.DTYPES[dtype]
        for width in args.widths:
            rows = args.mib * 2**20 // torch.empty((), dtype=tdt).element_size() // width
            x = torch.randn(rows, width, device="cuda").to(tdt)
            w = (torch.rand(width, device="cuda") + 0.5).to(tdt)
            b = torch.randn(width, device="cuda").to(tdt)
            for name in args.norms:
                params, og_fn, torch_fn = fusion.NORMS[name]
                inputs = [x, w, b][:1 + params]
                torch._dynamo.reset()
                compiled = torch.compile(torch_fn, dynamic=False)
                g = og.Graph()
                phs = [g.placeholder(tuple(t.shape), ogdt, name=f"in{i}") for i, t in enumerate(inputs)]
                exe = g.compile({ph: ph.type for ph in phs}, [og_fn(g, *phs)], device=dev,
                                descriptor=fusion.descriptor(dev, cuda_graphs=False))
                exe.run(inputs)  # the tuner chooses on the first calls
                def by_compile(c: Any = compiled, i: list[torch.Tensor] = inputs) -> Any:
                    return c(*i)

                def by_opgraph(e: Any = exe, i: list[torch.Tensor] = inputs) -> Any:
                    return e.run(i)

                table = [["torch.compile", *r] for r in launches(by_compile)]
                table += [["opgraph", *r] for r in launches(by_opgraph)]
                print(f"\n== {name} {dtype} {rows}x{width}")
                for k in exe.kernels():
                    for tuned in k.tuned:
                        print(f"opgraph's tuner chose {tuned}")
                print(format_table(["by", "kernel", "grid", "threads", "registers", "shared B", "us"], table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
