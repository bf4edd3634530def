"""Training steps on the CPU: eager PyTorch against ``torch.compile(backend="opgraph")`` on the models of
``opgraph bench --quick`` (``--full``: at its full sizes), each step forward, cross-entropy, backward and SGD with
momentum, interleaved so that both see the same load on a shared machine (``_timing.interleaved``: ``--repeats``
rounds of ``--iters`` steps each, the order rotating). A cell gives the median ms per step over the rounds, the
range, the ratio (``> 1``: opgraph faster), the ATen calls of one step of each (from the profiler; opgraph's run
inside its executables) and the minor page faults a step of each took in the timed rounds (memory the C allocator
gave back to the system and touched again). ``--aot-eager`` adds ``torch.compile(backend="aot_eager")`` to the
rounds: Dynamo and AOTAutograd running the ATen graphs as they are, so the part of a gap to eager that any backend
pays.

    python benchmarks/cpu_training.py
    python benchmarks/cpu_training.py --models bert --dtypes float32 --iters 10 --repeats 9
    python benchmarks/cpu_training.py --models bert --full --batch 4 --threads 2 --iters 2 --repeats 5
    python benchmarks/cpu_training.py --models tiny_vgg --dtypes float32 --aot-eager
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from opgraph.cli._bench_models import MODELS, WithLoss, make_data, without_dropout
from opgraph.cli._table import format_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import PageFaults, aten_calls, interleaved  # noqa: E402


def training_step(model: torch.nn.Module, fn: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                  bf16: bool) -> Callable[[], None]:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = fn(x, y)
        loss.backward()
        opt.step()

    return step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="tiny_cnn,bert,tiny_vgg,tiny_transformer",
                   help="comma-separated models of opgraph bench, at its --quick sizes unless --full")
    p.add_argument("--dtypes", default="float32,bfloat16", help="float32 and/or bfloat16 (autocast)")
    p.add_argument("--iters", type=int, default=10, help="steps per round")
    p.add_argument("--repeats", type=int, default=5, help="rounds (the median of these is reported)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads for PyTorch")
    p.add_argument("--full", action="store_true",
                   help="the models at opgraph bench's full sizes (BERT-base, not its small stand-in config)")
    p.add_argument("--batch", type=int, default=None, help="training batch (default: the model's, quick or full)")
    p.add_argument("--aot-eager", action="store_true",
                   help="also time torch.compile(backend=\"aot_eager\"): Dynamo and AOTAutograd running the ATen "
                        "graphs as they are, the share of the gap to eager that any backend pays")
    args = p.parse_args(argv)
    if args.batch is not None and args.batch < 1:
        p.error(f"--batch must be at least 1, got {args.batch}")
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        p.error(f"unknown models {unknown}: choose from {sorted(MODELS)}")
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.models.split(","):
        m = MODELS[name]
        size, batch = m.sizes(not args.full)
        batch = args.batch if args.batch is not None else batch
        for dtype in args.dtypes.split(","):
            torch.manual_seed(0)
            model = without_dropout(m.build(not args.full)).train()
            x, y = make_data(m, batch, size, torch.device("cpu"))
            torch._dynamo.reset()
            module = WithLoss(model)
            backends: dict[str, Callable[..., torch.Tensor]] = {"eager": module,
                        "opgraph": torch.compile(module, backend="opgraph", options={"warn_fallbacks": False})}
            if args.aot_eager:
                backends["aot_eager"] = torch.compile(module, backend="aot_eager")
            steps = {b: training_step(model, fn, x, y, dtype == "bfloat16") for b, fn in backends.items()}
            counter = PageFaults()
            times = interleaved({b: counter.wrap(b, fn) for b, fn in steps.items()}, args.iters, args.repeats,
                                lambda: None)
            calls = {b: aten_calls(steps[b]) for b in ("eager", "opgraph")}  # the columns shown
            faults = {b: counter.per_call(b) for b in ("eager", "opgraph")}
            e, o = (sorted(t * 1e3 for t in times[b]) for b in ("eager", "opgraph"))
            row = [name, dtype, str(batch), f"{statistics.median(e):.2f} ({e[0]:.2f}-{e[-1]:.2f})",
                   f"{statistics.median(o):.2f} ({o[0]:.2f}-{o[-1]:.2f})",
                   f"{statistics.median(e) / statistics.median(o):.2f}x"]
            if args.aot_eager:
                a = sorted(t * 1e3 for t in times["aot_eager"])
                row += [f"{statistics.median(a):.2f} ({a[0]:.2f}-{a[-1]:.2f}, "
                        f"{statistics.median(e) / statistics.median(a):.2f}x)"]
            shown = ("-" if faults[b] is None else f"{faults[b]:.0f}" for b in ("eager", "opgraph"))
            rows.append(row + [f"{calls['eager']} / {calls['opgraph']}", " / ".join(shown)])
            print(f"  {name} {dtype}: done", flush=True)
    print(f"median ms per step (range) over {args.repeats} interleaved rounds of {args.iters} steps, "
          f"{args.threads} thread(s)")
    print(format_table(["model", "dtype", "batch", "eager ms", "opgraph ms", "opgraph vs eager"]
                       + (["aot_eager ms (range, vs eager)"] if args.aot_eager else [])
                       + ["ATen calls eager / og", "page faults eager / og"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
