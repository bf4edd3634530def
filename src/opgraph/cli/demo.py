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
  opgraph demo --device cpu --batch 8 --iters 20"""

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
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=run)


def _positive(s: str) -> int:
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
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
    import opgraph as og

    conv_cls = getattr(og, "Conv2dDescriptor", None)
    pool_cls = getattr(og, "Pooling2dDescriptor", None)
    if conv_cls is None:
        from opgraph.ops.conv import Conv2dDescriptor as conv_cls  # type: ignore[attr-defined, no-redef]
    if pool_cls is None:
        from opgraph.ops.pooling import Pooling2dDescriptor as pool_cls  # type: ignore[attr-defined, no-redef]
    conv = conv_cls()
    pool = pool_cls(kernel_width=2, kernel_height=2, stride_in_x=2, stride_in_y=2)
    return conv, pool


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
    except (ImportError, TypeError) as e:
        missing.append(f"descriptors ({e})")
    return missing


# ---- timing ------------------------------------------------------------------------------------
@dataclass
class Timing:
    name: str
    per_run: list[float]  # seconds, one per run (CUDA: measured with events)
    wall: float           # seconds per run over the whole loop, synchronised at the end

    @property
    def median(self) -> float:
        return statistics.median(self.per_run)


def measure(name: str, fn: Callable[[], Any], iters: int, device: Any, progress: Progress) -> Timing:
    """Time ``iters`` calls of ``fn``; on CUDA each run is bracketed by events and the loop synchronised."""
    import torch

    per_run: list[float] = []
    device.synchronize()
    if device.is_cuda:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(iters)]
        t0 = time.perf_counter()
        for i, (start, end) in enumerate(events):
            start.record()
            fn()
            end.record()
            progress.update(i + 1, iters)
        torch.cuda.synchronize(device.torch)
        wall = (time.perf_counter() - t0) / iters
        per_run = [s.elapsed_time(e) / 1e3 for s, e in events]
    else:
        t0 = time.perf_counter()
        for i in range(iters):
            t = time.perf_counter()
            fn()
            per_run.append(time.perf_counter() - t)
            progress.update(i + 1, iters)
        device.synchronize()  # MPS queues work too
        wall = (time.perf_counter() - t0) / iters
    return Timing(name, per_run, wall)


# ---- the command -------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    import torch

    import opgraph as og
    from opgraph.ir.printer import format_attrs

    progress = Progress(enabled=not args.quiet)
    dev = og.device(args.device)
    missing = missing_ops()
    if missing:
        print(f"opgraph demo: this build of opgraph lacks {', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"opgraph demo: LeNet-like CNN, input float32({args.batch}, 1, {IMAGE}, {IMAGE}), device {dev}")
    weights = Weights.random(args.seed)
    image = torch.rand(args.batch, 1, IMAGE, IMAGE, generator=torch.Generator().manual_seed(args.seed + 1))
    with progress.step("building the graph"):
        g, x, y = build_graph(weights, args.batch)
    with progress.step(f"compiling for {dev}"):
        exe = g.compile({x: og.TensorType((args.batch, 1, IMAGE, IMAGE), og.float32)}, [y], device=dev)
    image = image.to(dev.torch)
    local = weights.to(dev.torch)
    reference = eager(local)
    with torch.inference_mode():
        with progress.step("first run"):
            (out,) = exe.run([image])
        expected = reference(image)
    dev.synchronize()

    print()
    print(exe.summary())
    print()
    rows = []
    for op in exe.program.graph.ops:
        outs = ", ".join(f"%{t.name}" for t in op.outputs)
        types = ", ".join(str(t.type) for t in op.outputs)
        ins = ", ".join(f"%{t.name}" for t in op.inputs)
        rows.append([outs, op.op.name, ins or "-", types, format_attrs(op.attrs).strip(" {}") or "-"])
    print(format_table(["value", "op", "inputs", "type", "attributes"], rows, align="<<<<<"))
    print()

    diff = (out.double() - expected.double()).abs().max().item() if out.numel() else 0.0
    tol = 1e-5 if dev.kind == "cpu" else 1e-3  # GPUs may use TF32 / other conv algorithms
    agree = out.shape == expected.shape and diff <= tol
    print(f"outputs {'agree' if agree else 'DIFFER'}: max abs difference vs eager PyTorch {diff:.3g} "
          f"(tolerance {tol:g}); output {tuple(out.shape)}, rows sum to 1: "
          f"{bool(torch.allclose(out.sum(-1), torch.ones((), device=out.device), atol=1e-4))}")

    timings: list[Timing] = []
    with torch.inference_mode():
        for name, fn in (("opgraph exe.run", lambda: exe.run([image])), ("eager PyTorch", lambda: reference(image))):
            for _ in range(args.warmup):
                fn()
            with progress.step(f"timing {name} ({args.iters} runs)"):
                timings.append(measure(name, fn, args.iters, dev, progress))

    base = timings[1].median
    clock = "CUDA events" if dev.is_cuda else "perf_counter"
    rows = [[t.name, f"{t.median * 1e3:.3f}", f"{min(t.per_run) * 1e3:.3f}", f"{t.wall * 1e3:.3f}",
             f"{base / t.median:.2f}x"] for t in timings]
    print()
    print(f"time per run on {dev}, batch {args.batch}, {args.iters} runs after {args.warmup} warm-up "
          f"({clock}; wall = whole loop, synchronised):")
    print(format_table(["", "median ms", "min ms", "wall ms/run", "speed vs eager"], rows, align="<>>>>"))
    return 0 if agree else 1
