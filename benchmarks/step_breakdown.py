"""Where a training step through ``torch.compile(backend="opgraph")`` spends its time, against eager PyTorch,
Inductor, and whether each compiled graph replays a CUDA graph: step time, forward-only time and the host time of one
step (no synchronisation inside), then per graph its kernels, ``cuda_graph_status``, inputs read in place,
outputs copied out and recaptures (models of ``opgraph bench``; CUDA only).

With ``--isolate`` each backend runs in a process of its own (one process: what ran before, Inductor's
compilation or another backend's memory, may change the next one's time); ``--repeats`` times the step that many
times (ten steps each) and prints the median and the range.

    python benchmarks/step_breakdown.py --model bert --batch 64 --dtype bfloat16
    python benchmarks/step_breakdown.py --model resnet50 --batch 128 --backends eager,inductor --channels-last
    python benchmarks/step_breakdown.py --model resnet50 --batch 128 --backends eager,inductor,opgraph --isolate
    python benchmarks/step_breakdown.py --model bert --dtype float32 --skip-pass transpose_products   # an A/B
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

import opgraph  # noqa: F401  (registers the backend when not installed)
from opgraph.cli._bench_models import MODELS, WithLoss, make_data
from opgraph.cli.bench import backend_option
from opgraph.frontends.torch import recording


def _ms(fn: Callable[[], object], runs: int = 10) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / runs * 1e3


def _isolated(argv: list[str], backends: list[str]) -> int:
    """This script once per backend, each in a fresh process (the other arguments as given)."""
    rest, skip = [], False
    for a in argv:  # drop --isolate and --backends (with its value)
        if skip:
            skip = False
        elif a == "--backends":
            skip = True
        elif a != "--isolate" and not a.startswith("--backends="):
            rest.append(a)
    code = 0
    for backend in backends:
        code |= subprocess.call([sys.executable, __file__, *rest, "--backends", backend])
    return code


def _skip_passes(names: set[str]) -> None:
    """Leave the named passes out of every compilation in this process."""
    from opgraph.runtime.compile import CompilationDescriptor

    passes = CompilationDescriptor.passes
    known = {p.name for p in passes(CompilationDescriptor())}
    if names - known:
        sys.exit(f"--skip-pass: unknown {sorted(names - known)}; the passes are {sorted(known)}")

    def kept(self: CompilationDescriptor) -> list[Any]:
        return [p for p in passes(self) if p.name not in names]

    CompilationDescriptor.passes = kept  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert", choices=sorted(MODELS), help="a model of opgraph bench")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16", help="bfloat16: autocast")
    ap.add_argument("--backends", default="eager,opgraph", help="eager, inductor, opgraph (comma-separated)")
    ap.add_argument("--channels-last", action="store_true",
                    help="model and images in channels-last memory format (4-d inputs only)")
    ap.add_argument("--option", type=backend_option, action="append", default=[], metavar="KEY=VALUE",
                    help="an opgraph backend option, as opgraph bench takes it (e.g. channels_last=false, "
                         "batch_norm_regions=true); repeatable")
    ap.add_argument("--skip-pass", action="append", default=[], metavar="NAME",
                    help="leave this pass of CompilationDescriptor.passes() out of opgraph's compilation (for an "
                         "A/B, e.g. transpose_products); repeatable")
    ap.add_argument("--isolate", action="store_true", help="each backend in a process of its own")
    ap.add_argument("--repeats", type=int, default=1, help="timings of ten steps each: median and range")
    args = ap.parse_args(argv)
    unknown = set(args.backends.split(",")) - {"eager", "inductor", "opgraph"}
    if unknown:
        ap.error(f"unknown backends {sorted(unknown)}: choose from eager, inductor, opgraph")
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if args.isolate and len(args.backends.split(",")) > 1:
        sys.exit(_isolated(argv, args.backends.split(",")))
    warnings.simplefilter("ignore")
    if args.skip_pass:
        _skip_passes(set(args.skip_pass))
    m = MODELS[args.model]
    torch.manual_seed(0)
    model = m.build(False).cuda().train()
    x, y = make_data(m, args.batch, m.size, torch.device("cuda"))
    if args.channels_last and x.dim() == 4:
        # torch's stubs give Module.to no memory_format overload, which it takes at runtime
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        x = x.contiguous(memory_format=torch.channels_last)
    for backend in args.backends.split(","):
        torch._dynamo.reset()
        module = WithLoss(model)
        fn = module if backend == "eager" else torch.compile(module) if backend == "inductor" else \
            torch.compile(module, backend="opgraph", options={"warn_fallbacks": False,
                                                              **dict(args.option)})
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

        def forward(fn: Callable[..., torch.Tensor] = fn) -> torch.Tensor:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.dtype == "bfloat16"):
                return fn(x, y)

        def step(forward: Callable[[], torch.Tensor] = forward, opt: torch.optim.Optimizer = opt) -> None:
            opt.zero_grad(set_to_none=True)
            forward().backward()
            opt.step()

        with recording() as reports:
            step()
            step()
            times = sorted(_ms(step) for _ in range(args.repeats))
            spread = f" (range {times[0]:.2f}-{times[-1]:.2f}, {len(times)} timings)" if len(times) > 1 else ""
            print(f"{backend}: step {statistics.median(times):.2f} ms{spread}, forward only "
                  f"{_ms(lambda: forward().detach()):.2f} ms")
            torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            host = time.perf_counter() - start
            torch.cuda.synchronize()
            print(f"{backend}: host time of one step (no synchronisation inside) {host * 1e3:.2f} ms")
        for r in reports:
            exe = r.executable if backend == "opgraph" else None
            if exe is not None:
                print(f"  {r.kind}: {r.aten_nodes} ATen ops, {len(exe.kernels())} kernels, CUDA graph "
                      f"{exe.cuda_graph_status}; inputs read in place {len(exe._static_inputs)} of "
                      f"{len(exe.feed_tensors)}, outputs copied out {len(exe._copied_outputs)} of "
                      f"{len(exe.output_types_)}, recaptures {exe._recaptures}")


if __name__ == "__main__":
    main()
