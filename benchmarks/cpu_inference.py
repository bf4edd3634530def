"""Inference latency on the CPU: eager PyTorch against ``torch.compile(backend="opgraph")``, runs interleaved (one
of each in turn, so that both see the same load on a shared machine), on the torch-only stand-ins of
``opgraph bench --quick`` (no fusion and no CUDA graphs on the CPU: opgraph's lowering of each op against eager's).

Each cell: ``--warmup`` runs of each, then ``--iters`` interleaved runs; the median and the spread between the first
and third quartile. ``ops/run``: the ATen calls one opgraph run makes (from the profiler), against eager's.
``outside ms``: what a call spends outside opgraph's executables (Dynamo's frame and guards, AOTAutograd's runtime
wrapper: the cost of any ``torch.compile`` backend), timed in a separate pass; ``executables vs eager`` compares
eager with the rest.

    python benchmarks/cpu_inference.py
    python benchmarks/cpu_inference.py --models tiny_mbconv --batches 8 --iters 400
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from opgraph.cli._bench_models import MODELS
from opgraph.cli._table import format_table
from opgraph.runtime.executable import Executable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import aten_calls  # noqa: E402

STAND_INS = ("tiny_vgg", "tiny_cnn", "tiny_vit", "tiny_mbconv", "tiny_convmixer")


def interleaved(fns: dict[str, Callable[[], Any]], iters: int) -> dict[str, list[float]]:
    """Seconds of each call, the functions called in turn ``iters`` times."""
    times: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def outside_executables(fn: Callable[[], Any], iters: int) -> float:
    """Median ms of one call of ``fn`` spent outside opgraph's executables: Dynamo's guards and frame,
    AOTAutograd's runtime wrapper and the backend's boxing, which every ``torch.compile`` backend pays."""
    inside = [0.0]
    run = Executable._run  # behind both run and run_consuming (which the backend calls)

    def timed(self: Executable, inputs: Any, consume: bool) -> list[torch.Tensor]:
        t = time.perf_counter()
        try:
            return run(self, inputs, consume)
        finally:
            inside[0] += time.perf_counter() - t

    Executable._run = timed  # type: ignore[method-assign]
    try:
        outside = []
        for _ in range(iters):
            inside[0] = 0.0
            t = time.perf_counter()
            fn()
            outside.append(time.perf_counter() - t - inside[0])
    finally:
        Executable._run = run  # type: ignore[method-assign]
    return statistics.median(outside) * 1e3


def _call(fn: Callable[[torch.Tensor], Any], x: torch.Tensor) -> Callable[[], Any]:
    return lambda: fn(x)


def quartiles(ms: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(ms, n=4)
    return q[0], statistics.median(ms), q[2]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(STAND_INS), help="comma-separated stand-ins of opgraph bench")
    p.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    p.add_argument("--iters", type=int, default=200, help="interleaved timed runs of each")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=1, help="CPU threads for PyTorch")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.models.split(","):
        m = MODELS[name]
        for batch in (int(b) for b in args.batches.split(",")):
            torch.manual_seed(0)
            model = m.build(True).eval()
            x = torch.randn(batch, 3, m.size, m.size)
            torch._dynamo.reset()
            compiled = torch.compile(model, backend="opgraph")
            with torch.inference_mode():
                fns = {"eager": _call(model, x), "opgraph": _call(compiled, x)}
                torch.testing.assert_close(fns["opgraph"](), fns["eager"](), rtol=1e-4, atol=1e-4)
                interleaved(fns, args.warmup)
                times = interleaved(fns, args.iters)
                calls = {n: aten_calls(fn) for n, fn in fns.items()}
                outside = outside_executables(fns["opgraph"], args.iters)
            (e1, e, e3), (o1, o, o3) = (quartiles([t * 1e3 for t in times[n]]) for n in ("eager", "opgraph"))
            rows.append([name, str(batch), f"{e:.3f} ({e1:.3f}-{e3:.3f})", f"{o:.3f} ({o1:.3f}-{o3:.3f})",
                         f"{e / o:.2f}x", f"{outside:.3f}", f"{e / (o - outside):.2f}x",
                         f"{calls['eager']} / {calls['opgraph']}"])
            print(f"  {name} batch {batch}: done", flush=True)
    print(f"median ms (first-third quartile), {args.iters} interleaved runs each, {args.threads} thread(s)")
    print(format_table(["model", "batch", "eager ms", "opgraph ms", "opgraph vs eager", "outside ms",
                        "executables vs eager", "ATen ops/run eager / og"], rows))
    print("outside ms: median time of a call outside opgraph's executables (Dynamo, AOTAutograd's wrapper, the "
          "backend's boxing), timed separately;\nexecutables vs eager: eager ms / (opgraph ms - outside ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
