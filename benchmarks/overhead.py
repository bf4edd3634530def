"""Host-side cost of running an executable: a chain of tiny ops, opgraph vs the same torch calls.

A graph of ``--ops`` elementwise ops (multiply, add, negative, exp, repeating) on an 8-element
placeholder is compiled once; we then time, per call:

* direct torch: a straight-line Python function making the same torch calls on the same constants
  (bound as fast locals, like opgraph's generated function),
* opgraph ``exe.run([x])``: the compiled executable (feed checks + the generated function),
* opgraph ``g.run({x: x}, [y])``: the graph's run, with the executable cached after the first call.

The input is a placeholder, so constant folding cannot remove the work. Each time is the median
over ``--repeats`` of the mean over ``--iters`` calls (time.perf_counter, garbage collector off,
the three interleaved in each repeat, their order rotating); each ratio is the median of the
repeats' ratios. On CUDA, ``host`` times the loop and synchronises after it
(outside the timed region when the queue keeps up); ``sync`` synchronises after every call.

    python benchmarks/overhead.py                       # CPU, and CUDA when present
    python benchmarks/overhead.py --device cpu --ops 100 --iters 500 --json /tmp/overhead.json
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

import opgraph as og

TARGET_RATIO = 1.2
SIZE = 8
# (graph method, torch function, constant or None): the chain cycles through these; values stay bounded
STEPS: tuple[tuple[str, Callable[..., torch.Tensor], float | None], ...] = (
    ("multiply", torch.mul, 0.5),
    ("add", torch.add, 0.25),
    ("negative", torch.neg, None),
    ("exp", torch.exp, None),
)


def build(n_ops: int, device: og.Device) -> tuple[og.Graph, og.Tensor, og.Tensor, og.Executable,
                                                Callable[[torch.Tensor], torch.Tensor]]:
    """The graph, its placeholder and output, the executable and the direct-torch function."""
    g = og.Graph()
    x = g.placeholder((SIZE,), og.float32, name="x")
    y = x
    lines: list[str] = []
    env: dict[str, Any] = {}
    for i in range(n_ops):
        method, fn, const = STEPS[i % len(STEPS)]
        env[f"f{i}"] = fn
        if const is None:
            y = getattr(g, method)(y)
            lines.append(f"    x = f{i}(x)")
        else:
            y = getattr(g, method)(y, g.constant(const, og.float32))
            env[f"c{i}"] = torch.tensor(const, dtype=torch.float32, device=device.torch)  # as opgraph binds it
            lines.append(f"    x = f{i}(x, c{i})")
    lines.append("    return x")
    # straight-line source with the functions and constants as fast locals, as opgraph generates it,
    # so the ratio shows only what opgraph adds
    head = f"def direct(x, *, {', '.join(f'{k}={k}' for k in env)}):"
    exec(compile("\n".join([head, *lines]) + "\n", "<direct-torch>", "exec"), env)
    exe = g.compile({x: og.TensorType((SIZE,), og.float32)}, [y], device=device)
    return g, x, y, exe, env["direct"]


def compute_ops(exe: og.Executable) -> int:
    return sum(o.op.name not in ("placeholder", "constant") for o in exe.program.graph.ops)


def time_calls(fn: Callable[[], Any], iters: int, sync: Callable[[], None] | None, per_call_sync: bool) -> float:
    """Mean seconds per call over ``iters`` calls."""
    if sync is not None:
        sync()
    if per_call_sync and sync is not None:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
            sync()
        return (time.perf_counter() - t0) / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = time.perf_counter() - t0
    if sync is not None:
        sync()
    return dt / iters


def bench(device: og.Device, n_ops: int, iters: int, repeats: int, per_call_sync: bool) -> dict[str, Any]:
    g, x, y, exe, direct = build(n_ops, device)
    inp = torch.rand(SIZE, device=device.torch)
    expected = direct(inp)
    (got,) = exe.run([inp])
    (cached,) = g.run({x: inp}, [y], device=device)
    if not (torch.allclose(got, expected) and torch.allclose(cached, expected)):
        raise SystemExit(f"overhead: results differ on {device}: {got} vs {expected}")
    feeds = {x: inp}
    targets = [y]
    cases: dict[str, Callable[[], Any]] = {
        "direct": lambda: direct(inp),
        "exe_run": lambda: exe.run([inp]),
        "graph_run": lambda: g.run(feeds, targets, device=device),
    }
    if device.is_cuda:  # the same ops captured by hand in a raw CUDA graph: what replay should cost
        cases["raw_graph"] = raw_cuda_graph(direct, inp)
    sync = device.synchronize if device.kind != "cpu" else None
    for fn in cases.values():  # warm up
        time_calls(fn, max(10, iters // 10), sync, per_call_sync)
    samples: dict[str, list[float]] = {k: [] for k in cases}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        order = list(cases)
        for r in range(repeats):
            for k in order[r % len(order):] + order[:r % len(order)]:  # rotate: no case always runs first
                samples[k].append(time_calls(cases[k], iters, sync, per_call_sync))
    finally:
        if gc_was_enabled:
            gc.enable()
    us = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
    best = {k: min(v) * 1e6 for k, v in samples.items()}  # least disturbed by other load
    mode = "cpu" if device.kind == "cpu" else ("sync" if per_call_sync else "host")
    return {
        "device": str(device), "mode": mode, "ops": compute_ops(exe), "iters": iters, "repeats": repeats,
        "direct_us": us["direct"], "exe_run_us": us["exe_run"], "graph_run_us": us["graph_run"],
        # ratios: the median of each repeat's ratio, so that slow drift in machine load cancels
        "exe_run_ratio": _median_ratio(samples["exe_run"], samples["direct"]),
        "graph_run_ratio": _median_ratio(samples["graph_run"], samples["direct"]),
        "exe_run_overhead_us_per_op": (us["exe_run"] - us["direct"]) / max(n_ops, 1),
        "min_direct_us": best["direct"], "min_exe_run_us": best["exe_run"], "min_graph_run_us": best["graph_run"],
        "min_exe_run_ratio": best["exe_run"] / best["direct"],
        "raw_graph_us": us.get("raw_graph"),
        "exe_run_vs_raw_graph": _median_ratio(samples["exe_run"], samples["raw_graph"]) if "raw_graph" in us else None,
    }


def raw_cuda_graph(direct: Callable[[torch.Tensor], torch.Tensor], inp: torch.Tensor) -> Callable[[], Any]:
    """``direct`` captured in a ``torch.cuda.CUDAGraph``; a call copies the input in, replays and copies
    the result out: the same work an opgraph replay does per run."""
    static_in = inp.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        direct(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = direct(static_in)

    def call() -> torch.Tensor:
        static_in.copy_(inp, non_blocking=True)
        graph.replay()
        return static_out.clone()

    return call


def _median_ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def table(results: list[dict[str, Any]]) -> str:
    headers = ["device", "mode", "ops", "direct torch us/run", "exe.run us/run", "ratio",
               "graph.run us/run", "ratio", "raw CUDA graph us/run", "exe.run / raw"]
    rows = [[r["device"], r["mode"], str(r["ops"]), f"{r['direct_us']:.1f}", f"{r['exe_run_us']:.1f}",
             f"{r['exe_run_ratio']:.3f}", f"{r['graph_run_us']:.1f}", f"{r['graph_run_ratio']:.3f}",
             "-" if r.get("raw_graph_us") is None else f"{r['raw_graph_us']:.1f}",
             "-" if r.get("exe_run_vs_raw_graph") is None else f"{r['exe_run_vs_raw_graph']:.3f}"]
            for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
    return "\n".join([fmt(headers), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", action="append", help="cpu, cuda, cuda:N, mps; repeatable "
                   "(default: cpu, and cuda when present)")
    p.add_argument("--ops", type=int, default=100, help="ops in the chain (default 100)")
    p.add_argument("--iters", type=int, default=200, help="calls per repeat (default 200)")
    p.add_argument("--repeats", type=int, default=25, help="repeats; the median is reported (default 25)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--max-ratio", type=float, default=None,
                   help=f"exit 1 when exe.run / direct exceeds this on any row (target {TARGET_RATIO})")
    args = p.parse_args(argv)
    if args.ops < 1 or args.iters < 1 or args.repeats < 1:
        p.error("--ops, --iters and --repeats must be >= 1")
    specs = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    results = []
    for spec in specs:
        try:
            dev = og.device(spec)
        except og.DeviceError as e:
            p.error(str(e))
        modes = [False, True] if dev.kind != "cpu" else [False]
        for per_call_sync in modes:
            results.append(bench(dev, args.ops, args.iters, args.repeats, per_call_sync))
    print(f"opgraph {og.__version__}, torch {torch.__version__}, Python {platform.python_version()}, "
          f"{torch.get_num_threads()} CPU threads; {args.ops}-op chain on float32({SIZE},), "
          f"median of {args.repeats} x {args.iters} calls")
    print(table(results))
    print(f"target: exe.run / direct <= {TARGET_RATIO}")
    if args.json:
        meta = {"opgraph": og.__version__, "torch": torch.__version__, "python": platform.python_version(),
                "target_ratio": TARGET_RATIO}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)
    if args.max_ratio is not None and any(r["exe_run_ratio"] > args.max_ratio for r in results):
        print(f"exe.run ratio above {args.max_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
