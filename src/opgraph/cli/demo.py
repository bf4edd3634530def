"""``opgraph demo``: a small CNN built, compiled and run with opgraph, timed against eager PyTorch."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._progress import Progress
from ._table import format_table

DESCRIPTION = """\
Build a LeNet-like CNN with og.Graph on random weights (variables):
  conv2d 1->8 3x3, relu, max_pool2d 2x2, conv2d 8->16 3x3, relu, max_pool2d 2x2,
  reshape, matmul, add bias, softmax
on a (batch, 1, 28, 28) input; compile it for the device, print the executable's summary and ops,
check its output against eager PyTorch (torch.nn.functional on the same weights) and print the time
per run of both. On CUDA the timings synchronise (CUDA events per run, plus a synchronised wall
clock). Exit status 1 when the outputs disagree."""

EXAMPLE = """\
example:
  opgraph demo                           # on og.device(): CUDA if present, else MPS, else the CPU
  opgraph demo --device cpu --batch 8 --iters 20
  opgraph demo train                     # train a CNN on handwritten digits (opgraph demo train --help)"""

IMAGE = 28


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="compile a small CNN, run it, compare with eager PyTorch",
                       description=DESCRIPTION, epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: og.device())")
    p.add_argument("--batch", type=_positive, default=32, help="images per run (default 32)")
    p.add_argument("--iters", type=_positive, default=50, help="timed runs of each (default 50)")
    p.add_argument("--warmup", type=_non_negative, default=3, help="untimed runs first (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and input")
    p.add_argument("--threads", type=_positive, default=None, help="CPU threads for PyTorch (default: its own)")
    p.add_argument("--max-seconds", type=_positive_float, default=10.0,
                   help="stop timing early after this long (default 10; a loaded machine is slow)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=run)
    from . import train

    demos = p.add_subparsers(title="other demos", dest="demo", metavar="DEMO")
    train.register(demos)  # ``opgraph demo train``; plain ``opgraph demo`` stays the inference demo


def _positive(s: str) -> int:
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def _positive_float(s: str) -> float:
    v = float(s)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {s}")
    return v


def _non_negative(s: str) -> int:
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


# ---- the model ---------------------------------------------------------------------------------
@dataclass
class Weights:
    conv1: Any  # (8, 1, 3, 3)   torch tensors, OIHW
    conv2: Any  # (16, 8, 3, 3)
    fc: Any     # (16 * 5 * 5, 10)
    bias: Any   # (10,)

    @staticmethod
    def random(seed: int) -> Weights:
        import torch

        gen = torch.Generator().manual_seed(seed)

        def he(*shape: int, fan_in: int) -> torch.Tensor:
            return torch.randn(*shape, generator=gen) * math.sqrt(2.0 / fan_in)

        return Weights(he(8, 1, 3, 3, fan_in=9), he(16, 8, 3, 3, fan_in=72), he(400, 10, fan_in=400),
                       torch.randn(10, generator=gen) * 0.1)

    def to(self, device: Any) -> Weights:
        return Weights(*(t.to(device) for t in (self.conv1, self.conv2, self.fc, self.bias)))


def build_graph(weights: Weights, batch: int) -> tuple[Any, Any, Any]:
    """The CNN as an og.Graph: returns ``(graph, input placeholder, output)``."""
    import opgraph as og

    conv_desc, pool_desc = _descriptors()
    g = og.Graph()
    x = g.placeholder((batch, 1, IMAGE, IMAGE), og.float32, name="image")
    w1 = g.variable(weights.conv1, name="conv1_weights")
    w2 = g.variable(weights.conv2, name="conv2_weights")
    fc = g.variable(weights.fc, name="fc_weights")
    bias = g.variable(weights.bias, name="fc_bias")
    h = g.max_pool2d(g.relu(g.conv2d(x, w1, conv_desc, name="conv1"), name="relu1"), pool_desc, name="pool1")
    h = g.max_pool2d(g.relu(g.conv2d(h, w2, conv_desc, name="conv2"), name="relu2"), pool_desc, name="pool2")
    h = g.reshape(h, (batch, 16 * 5 * 5), name="flatten")
    logits = g.add(g.matmul(h, fc, name="fc"), bias, name="logits")
    return g, x, g.softmax(logits, axis=-1, name="probabilities")


def _descriptors() -> tuple[Any, Any]:
    """NCHW/OIHW conv and 2x2/stride-2 pooling descriptors."""
    import opgraph as og

    return (og.Conv2dDescriptor(data_layout=og.TensorLayout.NCHW, weights_layout=og.WeightsLayout.OIHW),
            og.Pooling2dDescriptor(kernel_width=2, kernel_height=2, stride_in_x=2, stride_in_y=2,
                                   data_layout=og.TensorLayout.NCHW))


def eager(weights: Weights) -> Callable[[Any], Any]:
    """The same computation in eager PyTorch (``torch.nn.functional``) on the same weights."""
    import torch
    import torch.nn.functional as F

    def forward(x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(F.conv2d(x, weights.conv1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, weights.conv2)), 2)
        h = h.reshape(h.shape[0], -1)
        return torch.softmax(h @ weights.fc + weights.bias, dim=-1)

    return forward


NEEDED = ("conv2d", "relu", "max_pool2d", "reshape", "matmul", "softmax")


def missing_ops() -> list[str]:
    """The graph methods (and descriptors) the demo needs that this build of opgraph lacks."""
    import opgraph as og

    missing = [m for m in NEEDED if not hasattr(og.Graph, m)]
    try:
        _descriptors()
    except (ImportError, AttributeError, TypeError) as e:
        missing.append(f"descriptors ({e})")
    return missing


# ---- timing ------------------------------------------------------------------------------------
@dataclass
class Timing:
    name: str
    host: list[float]    # seconds per run: host clock around the call and a device synchronise
    events: list[float]  # seconds per run between CUDA events (GPU time; empty off CUDA)


def measure(fns: dict[str, Callable[[], Any]], iters: int, device: Any, progress: Progress,
            max_seconds: float = math.inf) -> list[Timing]:
    """Time ``iters`` runs of each of ``fns``, interleaved so that all see the same machine load;
    each pass stops early (after at least one run) once ``max_seconds`` have gone."""
    import torch

    deadline = time.perf_counter() + max_seconds / (2 if device.is_cuda else 1)

    names = list(fns)
    events: dict[str, list[float]] = {n: [] for n in names}
    host: dict[str, list[float]] = {n: [] for n in names}
    passes = 2 if device.is_cuda else 1
    if device.is_cuda:  # GPU time: events around each run, one synchronise at the end
        pairs = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(iters)] for n in names}
        device.synchronize()
        for i in range(iters):
            for n in names:
                start, end = pairs[n][i]
                start.record()
                fns[n]()
                end.record()
            progress.update(i + 1, passes * iters)
            if time.perf_counter() > deadline:
                pairs = {n: pairs[n][:i + 1] for n in names}
                break
        device.synchronize()
        events = {n: [s.elapsed_time(e) / 1e3 for s, e in pairs[n]] for n in names}
        deadline = time.perf_counter() + max_seconds / 2
    for i in range(iters):  # latency: host clock, the device synchronised before and after each run
        for n in names:
            device.synchronize()
            t = time.perf_counter()
            fns[n]()
            device.synchronize()
            host[n].append(time.perf_counter() - t)
        progress.update((passes - 1) * iters + i + 1, passes * iters)
        if time.perf_counter() > deadline:
            break
    return [Timing(n, host[n], events[n]) for n in names]


def timing_table(timings: list[Timing]) -> str:
    base = statistics.median(timings[-1].host)
    has_events = any(t.events for t in timings)
    headers = ["", "median ms", "min ms", "mean ms"] + (["GPU ms (events)"] if has_events else []) + ["vs eager"]
    rows = []
    for t in timings:
        med = statistics.median(t.host)
        row = [t.name, f"{med * 1e3:.3f}", f"{min(t.host) * 1e3:.3f}", f"{statistics.fmean(t.host) * 1e3:.3f}"]
        if has_events:
            row.append(f"{statistics.median(t.events) * 1e3:.3f}" if t.events else "-")
        rows.append([*row, f"{base / med:.2f}x"])
    return format_table(headers, rows, align="<" + ">" * (len(headers) - 1))


# ---- the command -------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    import torch

    import opgraph as og

    progress = Progress(enabled=not args.quiet)
    dev = og.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    missing = missing_ops()
    if missing:
        print(f"opgraph demo: this build of opgraph lacks {', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"opgraph demo: LeNet-like CNN, input float32({args.batch}, 1, {IMAGE}, {IMAGE}), device {dev}"
          + (f" ({torch.get_num_threads()} threads)" if dev.kind == "cpu" else ""))
    weights = Weights.random(args.seed)
    image = torch.rand(args.batch, 1, IMAGE, IMAGE, generator=torch.Generator().manual_seed(args.seed + 1))
    with progress.step("building the graph"):
        g, x, y = build_graph(weights, args.batch)
    with progress.step(f"compiling for {dev}"):
        exe = g.compile({x: og.TensorType((args.batch, 1, IMAGE, IMAGE), og.float32)}, [y], device=dev)
    image = image.to(dev.torch)
    reference = eager(weights.to(dev.torch))
    with torch.inference_mode():
        with progress.step("first run"):
            (out,) = exe.run([image])
            dev.synchronize()
        expected = reference(image)
    print()
    print(exe.summary())
    print()
    print(op_table(exe))
    print()
    agree = compare(out, expected, dev)

    fns = {"opgraph exe.run": lambda: exe.run([image]), "eager PyTorch": lambda: reference(image)}
    with torch.inference_mode():
        for _ in range(args.warmup):
            for fn in fns.values():
                fn()
        with progress.step(f"timing ({args.iters} runs each, interleaved)"):
            timings = measure(fns, args.iters, dev, progress, args.max_seconds)
    runs = len(timings[0].host)
    print()
    stopped = f" (stopped at the {args.max_seconds:g} s limit)" if runs < args.iters else ""
    print(f"time per run on {dev}, batch {args.batch}: {runs} runs each{stopped} after {args.warmup} warm-up, "
          f"interleaved; host clock with the device synchronised around each run"
          + ("; GPU time from CUDA events" if dev.is_cuda else "") + ":")
    print(timing_table(timings))
    return 0 if agree else 1


def op_table(exe: Any) -> str:
    """The compiled ops, one row each: value, op, inputs, type, attributes."""
    from opgraph.ir.printer import format_attrs

    rows = []
    for op in exe.program.graph.ops:
        outs = ", ".join(f"%{t.name}" for t in op.outputs)
        types = ", ".join(str(t.type) for t in op.outputs)
        ins = ", ".join(f"%{t.name}" for t in op.inputs)
        attrs = "" if op.op.name == "placeholder" else format_attrs(op.attrs).strip(" {}")  # the type says it
        rows.append([outs, op.op.name, ins or "-", types, attrs or "-"])
    return format_table(["value", "op", "inputs", "type", "attributes"], rows, align="<<<<<")


def compare(out: Any, expected: Any, dev: Any) -> bool:
    """Print how far opgraph's output is from eager PyTorch's; True when within tolerance."""
    import torch

    if out.shape != expected.shape:
        print(f"outputs DIFFER: opgraph gave shape {tuple(out.shape)}, eager PyTorch {tuple(expected.shape)}")
        return False
    diff = (out.double() - expected.double()).abs().max().item() if out.numel() else 0.0
    tol = 1e-5 if dev.kind == "cpu" else 1e-3  # GPUs may pick other conv algorithms (TF32 included)
    agree = diff <= tol
    sums = bool(torch.allclose(out.sum(-1), torch.ones((), device=out.device, dtype=out.dtype), atol=1e-4))
    print(f"outputs {'agree' if agree else 'DIFFER'}: max abs difference vs eager PyTorch {diff:.3g} "
          f"(tolerance {tol:g}); output {tuple(out.shape)}, rows sum to 1: {sums}")
    return agree
