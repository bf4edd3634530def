"""Where the first training step through ``torch.compile(backend="opgraph")`` spends its time: building executables
(opgraph's passes and code generation), tuning generated kernels (emitting the candidate configurations,
compiling them in threads, timing them on the device), the launches' own compiles, and the rest (Dynamo,
AOTAutograd, the vendor calls). Wall-clock seconds of the main thread, each phase timed where it is entered (a
phase inside another is not also counted in the outer one's "own" column).

Compiles ahead of launches (a tuner's candidates, ``--precompile``'s background work) are listed apart, from
``precompile.STATS``. Triton's own phases are timed where this Triton lets them be wrapped (0 calls where not).
Tuning runs only on CUDA; on the CPU (``--device cpu``, interpreter off) the table has the compile phases alone.
``--records off`` sets ``OPGRAPH_TUNING_RECORDS=0`` (every kernel tuned again, as in a fresh cache); ``--cprofile N``
adds the N costliest functions by cumulative time (the profiler slows Python-heavy phases several times: read its
shares, not its seconds).

    python benchmarks/compile_breakdown.py --model resnet50 --batch 128
    python benchmarks/compile_breakdown.py --model bert --batch 64 --records off --cprofile 30
    python benchmarks/compile_breakdown.py --model resnet50 --records off --precompile   # against the same without
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import os
import pstats
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

PHASES = [  # (label, module path, attribute path): wrapped in this order, so outer phases come first
    ("executables built (passes, code generation)", "opgraph.runtime.executable", "Executable.__init__"),
    ("background compiles queued (--precompile)", "opgraph.codegen.triton.precompile", "precompile"),
    ("kernel tuning (all)", "opgraph.codegen.triton.kernel", "RegionKernel._tune"),
    ("  kernel variants emitted (tuning candidates, strided reads)", "opgraph.codegen.triton.kernel",
     "region_kernel"),
    ("  candidates compiled ahead (threads or processes)", "opgraph.codegen.triton.kernel", "compile_in_threads"),
    ("  candidates probed (one launch)", "opgraph.codegen.triton.kernel", "_single_launch_ms"),
    ("  candidates timed", "opgraph.codegen.triton.kernel", "_device_ms"),
    ("kernel sources loaded", "opgraph.codegen.triton.kernel", "load_kernel"),
    ("Triton compiles here (or loads from its disk cache)", "triton.compiler", "compile"),
    ("Triton kernels loaded onto the device (launcher built)", "triton.compiler.compiler",
     "CompiledKernel._init_handles"),
]


class Phases:
    """Wraps each phase's function; a call made inside another phase's call counts only in the innermost."""

    def __init__(self) -> None:
        self.total: dict[str, float] = collections.defaultdict(float)
        self.inner: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()
        self.top = 0.0  # time inside any phase entered outside all others
        self._stack: list[str] = []

    def wrap(self, label: str, module: str, path: str) -> None:
        owner: Any = sys.modules.get(module) or __import__(module, fromlist=["_"])
        *parents, name = path.split(".")
        for p in parents:
            owner = getattr(owner, p)
        real = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():
                return real(*args, **kwargs)
            if self._stack and self._stack[-1] == label:  # recursion (a candidate's own candidates): counted once
                return real(*args, **kwargs)
            self._stack.append(label)
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                spent = time.perf_counter() - t0
                self._stack.pop()
                self.total[label] += spent
                self.calls[label] += 1
                if self._stack:
                    self.inner[self._stack[-1]] += spent
                else:
                    self.top += spent

        setattr(owner, name, timed)


def _same_strides(x: torch.Tensor, strides: tuple[int, ...]) -> bool:
    """``x`` is stored with ``strides`` (dims of one element, whose stride nothing reads, aside)."""
    return all(n == 1 or st == want for n, st, want in zip(x.shape, x.stride(), strides, strict=True))


def count_launches() -> collections.Counter[str]:
    """Counts of the generated kernels' outermost launches, by whether every input is contiguous (a tuner's
    candidates, launched inside, are not counted; the compile threads launch nothing)."""
    from opgraph.codegen.triton import precompile
    from opgraph.codegen.triton.compile_worker import contiguous_strides
    from opgraph.codegen.triton.kernel import RegionKernel

    counts: collections.Counter[str] = collections.Counter()
    real = RegionKernel.__call__
    depth = threading.local()

    def call(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        outer = not getattr(depth, "n", 0)  # any thread: autograd runs a CUDA backward on one of its own
        if outer and all(x.is_contiguous() for x in inputs):
            counts["contiguous"] += 1
        elif outer:
            counts["strided"] += 1
            nhwc = precompile.nhwc_stored_inputs(self) if self.strided is not None else set()
            counts["strided, foreseen"] += bool(nhwc) and all(  # the strides precompile gives its stand-ins
                _same_strides(x, precompile.channels_last_strides(tuple(x.shape)) if i in nhwc else
                              contiguous_strides(tuple(x.shape))) for i, x in enumerate(inputs))
        depth.n = getattr(depth, "n", 0) + 1
        try:
            return real(self, *inputs, **kwargs)
        finally:
            depth.n -= 1

    RegionKernel.__call__ = call  # type: ignore[method-assign]
    return counts


@contextlib.contextmanager
def profiled(top: int) -> Iterator[None]:
    if not top:
        yield
        return
    pr = cProfile.Profile()
    pr.enable()
    try:
        yield
    finally:
        pr.disable()
        pstats.Stats(pr).sort_stats("cumtime").print_stats(top)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50", help="a model of opgraph bench (default resnet50)")
    p.add_argument("--batch", type=int, default=None, help="training batch (default: the bench's)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="bfloat16: autocast")
    p.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    p.add_argument("--records", choices=["on", "off"], default="on", help="tuning records (default on)")
    p.add_argument("--quick", action="store_true", help="the bench's small sizes")
    p.add_argument("--precompile", action="store_true",
                   help="compile each executable's kernels in the background once it is built (OPGRAPH_PRECOMPILE=1)")
    p.add_argument("--compile-processes", action="store_true",
                   help="compiles ahead of launches in worker processes (OPGRAPH_COMPILE_PROCESSES=1)")
    p.add_argument("--interpret", action="store_true",
                   help="on the CPU: generated kernels under Triton's interpreter, channels-last (for the launch "
                        "counts; the times are the interpreter's)")
    p.add_argument("--cprofile", type=int, default=0, metavar="N", help="also list the N costliest functions")
    args = p.parse_args(argv)
    if args.interpret:  # before Triton is first imported
        os.environ["TRITON_INTERPRET"] = "1"
    if args.records == "off":
        os.environ["OPGRAPH_TUNING_RECORDS"] = "0"
    if args.precompile:
        os.environ["OPGRAPH_PRECOMPILE"] = "1"
    if args.compile_processes:
        os.environ["OPGRAPH_COMPILE_PROCESSES"] = "1"
    from opgraph.cli._bench_models import MODELS, WithLoss, make_data
    from opgraph.cli._table import format_table

    if args.model not in MODELS:
        p.error(f"--model: one of {', '.join(MODELS)}")
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    m = MODELS[args.model]
    size, batch = m.sizes(args.quick)
    model = WithLoss(m.build(args.quick).to(dev).train())
    x, y = make_data(m, args.batch or batch, size, dev)
    phases = Phases()
    for label, module, path in PHASES:
        phases.wrap(label, module, path)
    launches = count_launches()
    options: dict[str, Any] = {"triton_interpret": True, "channels_last": True} if args.interpret else {}
    fn = torch.compile(model, backend="opgraph", options=options)
    sync: Callable[[], None] = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    with profiled(args.cprofile):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16"):
            loss = fn(x, y)
        loss.backward()
        sync()
    total = time.perf_counter() - t0
    rows = []
    for label, *_ in PHASES:
        spent = phases.total.get(label, 0.0)
        rows.append([label, f"{spent:.2f}", f"{spent - phases.inner.get(label, 0.0):.2f}", str(phases.calls[label])])
    rows.append(["the rest (Dynamo, AOTAutograd, launches, vendor calls)", f"{total - phases.top:.2f}", "", ""])
    rows.append(["first training step", f"{total:.2f}", "", ""])
    print(f"{m.title} batch {args.batch or batch} {args.dtype} on {dev}, tuning records {args.records}, "
          f"background compiles {'on' if args.precompile else 'off'}, worker processes "
          f"{'on' if args.compile_processes else 'off'}:")
    print(format_table(["phase", "seconds", "own", "calls"], rows))
    print(f"\ngenerated-kernel launches in the step: {launches['contiguous']} with contiguous inputs, "
          f"{launches['strided']} with strided ones (a variant of their own), {launches['strided, foreseen']} of "
          "them with the strides --precompile's stand-ins have (inputs the region transposes to NHWC, stored NHWC)")
    from opgraph.codegen.triton.precompile import STATS

    work = sorted({name.removesuffix(" s") for name in STATS})
    if work:  # off the main thread (seconds summed over threads), but for the launches' waits
        print("\ncompiles ahead of launches (precompile.STATS; seconds summed over the threads):")
        print(format_table(["work", "count", "seconds"], [[w, str(int(STATS[w])), f"{STATS[w + ' s']:.2f}"]
                                                          for w in work]))


if __name__ == "__main__":
    main()
