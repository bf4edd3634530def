"""Where the time of a training step through ``torch.compile(backend="opgraph")`` goes, against eager PyTorch
and Inductor: torch.profiler's CUDA kernels of three steps, grouped by name, per step (models of ``opgraph
bench``); with ``--inference``, of three inference calls under ``torch.inference_mode()`` instead.
``--aten-ops`` adds an opgraph run without CUDA graphs that names the ATen ops (with their input shapes) behind
the kernels and the graph op that called each (``profile_ops``).

    python benchmarks/profile_backend.py --models resnet50:64,bert:32 --backends eager,inductor,opgraph
    python benchmarks/profile_backend.py --inference --models vit_b_16:1,vit_b_16:8 --backends eager,inductor,opgraph
"""

from __future__ import annotations

import argparse
import collections
import heapq
import time
import warnings
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

import opgraph  # noqa: F401  (registers the backend when not installed)
from opgraph.cli._bench_models import MODELS, WithLoss, make_data
from opgraph.cli.bench import backend_option


def breakdown(title: str, step: Callable[[], None], top: int) -> None:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - start) / 3 * 1e3
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    total: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total[e.name[:90]] += e.device_time_total / 3
            count[e.name[:90]] += 1
    print(f"== {title}: {wall_ms:.2f} ms/step unprofiled, {sum(total.values()) / 1e3:.2f} ms kernel time/step, "
          f"{sum(count.values()) // 3} kernels/step")
    for name, us in total.most_common(top):
        print(f"  {us / 1e3:8.3f} ms  x{count[name] // 3:4d}  {name}")


def aten_ops(title: str, step: Callable[[], None], top: int) -> None:
    """The ATen ops launching the most device time in three steps, by input shapes (per step)."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()

    def device_us(e: object) -> float:  # the attribute's name changed across PyTorch versions
        return float(getattr(e, "self_device_time_total", 0.0) or getattr(e, "self_cuda_time_total", 0.0))

    # microseconds are floats, which Counter's stubs do not count: nlargest ranks them as most_common would
    total: collections.defaultdict[tuple[str, str, str], float] = collections.defaultdict(float)
    count: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for e in prof.events():
        if e.name.startswith("aten::") and device_us(e):
            key = (graph_op(e), e.name, str(e.input_shapes)[:60])
            total[key] += device_us(e) / 3
            count[key] += 1
    print(f"== {title}: ATen ops by device time/step, with the graph op that called them (CUDA graphs off)")
    for key, us in heapq.nlargest(top, total.items(), key=lambda item: item[1]):
        print(f"  {us / 1e3:8.3f} ms  x{count[key] // 3:4d}  {key[0]:24s} {key[1]:28s} {key[2]}")


def graph_op(event: object) -> str:
    """The kind of the opgraph op whose profiler range (``CompilationDescriptor(profile_ops=True)``) holds an ATen
    event, or "-" outside any (PyTorch's own calls around the executables)."""
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        name = str(getattr(parent, "name", ""))
        if " %" in name and not name.startswith("aten::"):
            return name.split(" %", 1)[0]
        parent = getattr(parent, "cpu_parent", None)
    return "-"


def training_step(run: Callable[..., torch.Tensor], model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                  dtype: str) -> Callable[[], None]:
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", torch.bfloat16, enabled=dtype == "bfloat16"):
            loss = run(x, y)
        loss.backward()
        opt.step()
    return step


def inference_call(run: Callable[..., object], x: torch.Tensor, dtype: str) -> Callable[[], None]:
    def call() -> None:
        with torch.inference_mode(), torch.autocast("cuda", torch.bfloat16, enabled=dtype == "bfloat16"):
            run(x)
    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50:64,bert:32", help="name:batch pairs (opgraph bench's models)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="bfloat16: autocast")
    ap.add_argument("--top", type=int, default=18, help="kernels listed per run")
    ap.add_argument("--backends", default="eager,opgraph", help="eager, inductor, opgraph (comma-separated)")
    ap.add_argument("--inference", action="store_true",
                    help="profile an inference call (the model alone, eval mode, inference_mode) instead of a "
                         "training step")
    ap.add_argument("--aten-ops", action="store_true", help="also list opgraph's ATen ops by device time")
    ap.add_argument("--channels-last", action="store_true",
                    help="model and images in channels-last memory format for every backend")
    ap.add_argument("--option", type=backend_option, action="append", default=[], metavar="KEY=VALUE",
                    help="an opgraph backend option, as opgraph bench takes it (e.g. channels_last=false, "
                         "batch_norm_regions=true); repeatable")
    args = ap.parse_args()
    unknown = set(args.backends.split(",")) - {"eager", "inductor", "opgraph"}
    if unknown:
        ap.error(f"unknown backends {sorted(unknown)}: choose from eager, inductor, opgraph")
    warnings.simplefilter("ignore")
    for item in args.models.split(","):
        name, batch = item.split(":")
        m = MODELS[name]
        runs = args.backends.split(",") + (["opgraph-ops"] if args.aten_ops else [])
        for backend in runs:
            torch.manual_seed(0)
            torch._dynamo.reset()
            net = m.build(False).cuda()
            model = net.eval() if args.inference else WithLoss(net).train()
            x, y = (t.cuda() for t in make_data(m, int(batch), m.size, torch.device("cuda")))
            if args.channels_last and x.dim() == 4:
                # torch's stubs give Module.to no memory_format overload, which it takes at runtime
                model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
                x = x.contiguous(memory_format=torch.channels_last)
            run = model if backend == "eager" else torch.compile(model) if backend == "inductor" else \
                torch.compile(model, backend="opgraph", options={"cuda_graphs": backend == "opgraph",
                                                                 "profile_ops": backend == "opgraph-ops",
                                                                 **dict(args.option)})
            step = inference_call(run, x, args.dtype) if args.inference else training_step(run, model, x, y, args.dtype)
            title = f"{name} batch {batch} {args.dtype} {'inference ' if args.inference else ''}{backend}"
            (aten_ops if backend == "opgraph-ops" else breakdown)(title, step, args.top)


if __name__ == "__main__":
    main()
