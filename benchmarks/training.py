"""Training-step time of a ResNet-18-like network: opgraph vs eager PyTorch (and torch.compile).

The network (``--width`` 64 gives ResNet-18's channel counts): a stem (3x3 conv, or for images of
112 pixels and more ResNet's 7x7/2 conv and 3x3/2 max pool), then 4 stages of 2 basic blocks
(conv-bn-relu-conv-bn plus the residual, a 1x1 conv-bn shortcut where the shape changes; stages 2-4
halve the image and double the channels), global average pooling and a linear head. It is built
twice with the same weights: with ``og.nn`` (the opgraph copy loads the PyTorch copy's
``state_dict``) and with ``torch.nn``.

One training step = forward, softmax cross entropy against the labels, backward, an SGD update
(momentum 0.9, weight decay 5e-4) and the batch-norm running statistics, on a fixed random batch:

* opgraph: one compiled executable (``g.compile(..., targets=[loss], target_ops=updates)``) per step,
* eager PyTorch: ``model(x)``, ``F.cross_entropy``, ``zero_grad``, ``backward``, ``opt.step()``,
* torch.compile: the same with ``torch.compile(model)`` (skipped, with the reason, if it fails).

Steps are interleaved (one of each in turn, the device synchronised around each) after ``--warmup``
untimed ones; the table gives the median ms/step, images/s and the speed relative to eager PyTorch
(``> 1``: faster). The devices are ``og.device()`` (CUDA when present) and the CPU.

    python benchmarks/training.py                          # batch 64, 32x32 images, width 64
    python benchmarks/training.py --quick                  # small sizes, 1 CPU thread: a CPU run takes seconds
    python benchmarks/training.py --device cpu --batch 16 --image 64 --json /tmp/training.json
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn as tnn

import opgraph as og
from opgraph import nn as onn

STAGES = 4
BLOCKS = 2
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4


# ---- the network, in og.nn and in torch.nn (the same state_dict keys) ---------------------------
class OgBlock(onn.Module):
    """A basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))."""

    def __init__(self, g: og.Graph, cin: int, cout: int, stride: int) -> None:
        super().__init__(g)
        self.conv1 = onn.Conv2d(g, cin, cout, 3, stride, 1, bias=False)
        self.bn1 = onn.BatchNorm2d(g, cout)
        self.conv2 = onn.Conv2d(g, cout, cout, 3, 1, 1, bias=False)
        self.bn2 = onn.BatchNorm2d(g, cout)
        self.downsample = (onn.Sequential(onn.Conv2d(g, cin, cout, 1, stride, bias=False), onn.BatchNorm2d(g, cout))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> og.Tensor:
        g = self._graph()
        out = g.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return g.relu(out + (self.downsample(x) if self.downsample is not None else x))


class OgResNet(onn.Module):
    def __init__(self, g: og.Graph, width: int, classes: int, imagenet_stem: bool) -> None:
        super().__init__(g)
        self.imagenet_stem = imagenet_stem
        self.conv1 = (onn.Conv2d(g, 3, width, 7, 2, 3, bias=False) if imagenet_stem
                      else onn.Conv2d(g, 3, width, 3, 1, 1, bias=False))
        self.bn1 = onn.BatchNorm2d(g, width)
        self.maxpool = onn.MaxPool2d(3, 2, 1) if imagenet_stem else None
        cin = width
        for s in range(STAGES):
            cout = width << s
            stage = onn.Sequential(*(OgBlock(g, cin if b == 0 else cout, cout, 2 if s > 0 and b == 0 else 1)
                                     for b in range(BLOCKS)))
            setattr(self, f"layer{s + 1}", stage)
            cin = cout
        self.fc = onn.Linear(g, cin, classes)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> og.Tensor:
        g = self._graph()
        x = g.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            x = self.maxpool(x)
        for s in range(STAGES):
            x = getattr(self, f"layer{s + 1}")(x)
        return self.fc(g.reduce_mean(x, axes=(2, 3)))  # global average pooling


class TorchBlock(tnn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(cout)
        self.conv2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(cout)
        self.downsample = (tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False), tnn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class TorchResNet(tnn.Module):
    def __init__(self, width: int, classes: int, imagenet_stem: bool) -> None:
        super().__init__()
        self.conv1 = (tnn.Conv2d(3, width, 7, 2, 3, bias=False) if imagenet_stem
                      else tnn.Conv2d(3, width, 3, 1, 1, bias=False))
        self.bn1 = tnn.BatchNorm2d(width)
        self.maxpool = tnn.MaxPool2d(3, 2, 1) if imagenet_stem else None
        cin = width
        for s in range(STAGES):
            cout = width << s
            setattr(self, f"layer{s + 1}", tnn.Sequential(*(
                TorchBlock(cin if b == 0 else cout, cout, 2 if s > 0 and b == 0 else 1) for b in range(BLOCKS))))
            cin = cout
        self.fc = tnn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            x = self.maxpool(x)
        for s in range(STAGES):
            x = getattr(self, f"layer{s + 1}")(x)
        return self.fc(x.mean(dim=(2, 3)))


# ---- the three training steps -------------------------------------------------------------------
@dataclass
class Config:
    batch: int
    image: int
    width: int
    classes: int
    seed: int
    fusion: bool = False  # opgraph's elementwise stitching (CompilationDescriptor.fusion)

    @property
    def imagenet_stem(self) -> bool:
        return self.image >= 112


def torch_model(cfg: Config) -> TorchResNet:
    torch.manual_seed(cfg.seed)
    return TorchResNet(cfg.width, cfg.classes, cfg.imagenet_stem)


def opgraph_step(cfg: Config, reference: TorchResNet, device: og.Device) -> tuple[Callable[..., Any], int]:
    """A function running one compiled training step on ``(x, y)``, and the executable's op count."""
    g = og.Graph()
    model = OgResNet(g, cfg.width, cfg.classes, cfg.imagenet_stem)
    model.load_state_dict(reference.state_dict())
    x = g.placeholder((cfg.batch, 3, cfg.image, cfg.image), og.float32, name="images")
    y = g.placeholder((cfg.batch,), og.int64, name="labels")
    loss = g.softmax_cross_entropy(model(x), y, name="loss")
    opt = og.optim.SGD(g, model.parameters, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    updates = opt.step(loss) + model.updates
    exe = g.compile({x: x.type, y: y.type}, [loss], updates, device=device,
                    descriptor=og.CompilationDescriptor(fusion=cfg.fusion))

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return exe.run([xb, yb])[0]

    step.executable = exe  # type: ignore[attr-defined]  # for the CUDA-graph status in the table
    return step, len(exe.program.graph.ops)


def torch_step(model: tnn.Module, compiled: bool) -> Callable[..., Any]:
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    forward = torch.compile(model) if compiled else model

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(forward(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


# ---- measuring ----------------------------------------------------------------------------------
@dataclass
class Result:
    device: str
    implementation: str
    ms_per_step: float | None  # median; None when skipped
    images_per_s: float | None
    vs_eager: float | None     # eager ms / this ms: > 1 is faster than eager PyTorch
    steps: int
    first_loss: float | None
    note: str = ""


def bench_device(cfg: Config, dev: og.Device, iters: int, warmup: int, compile_note: str,
                 log: Callable[[str], None]) -> list[Result]:
    """Results of the three implementations on ``dev``; ``compile_note`` non-empty: skip torch.compile."""
    reference = torch_model(cfg)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    xb = torch.randn(cfg.batch, 3, cfg.image, cfg.image, generator=gen).to(dev.torch)
    yb = torch.randint(0, cfg.classes, (cfg.batch,), generator=gen).to(dev.torch)
    steps: dict[str, Callable[..., Any]] = {}
    notes: dict[str, str] = {}
    first: dict[str, float] = {}

    def prepare(name: str, make: Callable[[], Callable[..., Any]]) -> None:
        t0 = time.perf_counter()
        try:
            fn = make()
            first[name] = float(fn(xb, yb))  # the first step from the shared initial weights (compiles)
            dev.synchronize()
        except Exception as e:  # noqa: BLE001 (a peer that fails to build is reported, not fatal)
            notes[name] = f"skipped: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
            log(f"  {dev} {name}: {notes[name]}")
            return
        steps[name] = fn
        log(f"  {dev} {name}: ready in {time.perf_counter() - t0:.1f} s")

    ops: list[int] = []

    def make_opgraph() -> Callable[..., Any]:
        fn, n = opgraph_step(cfg, reference, dev)
        ops.append(n)
        return fn

    prepare("opgraph", make_opgraph)
    prepare("eager PyTorch", lambda: torch_step(copy.deepcopy(reference).to(dev.torch), compiled=False))
    if not compile_note:
        prepare("torch.compile", lambda: torch_step(copy.deepcopy(reference).to(dev.torch), compiled=True))
    else:
        notes["torch.compile"] = compile_note
    if ops:
        exe = getattr(steps.get("opgraph"), "executable", None)
        graphs = f", CUDA graph {exe.cuda_graph_status}" if exe is not None and dev.is_cuda else ""
        notes["opgraph"] = f"{ops[0]} ops in one executable{graphs}"

    for _ in range(max(warmup - 1, 0)):  # the first step above was already one warm-up
        for fn in steps.values():
            fn(xb, yb)
    times: dict[str, list[float]] = {n: [] for n in steps}
    for _ in range(iters):
        for name, fn in steps.items():
            dev.synchronize()
            t0 = time.perf_counter()
            fn(xb, yb)
            dev.synchronize()
            times[name].append(time.perf_counter() - t0)
    eager = statistics.median(times["eager PyTorch"]) if times.get("eager PyTorch") else None
    names = ["opgraph", "eager PyTorch", "torch.compile"]
    results = []
    for name in names:
        if name in times and times[name]:
            med = statistics.median(times[name])
            results.append(Result(str(dev), name, med * 1e3, cfg.batch / med, eager / med if eager else None,
                                  len(times[name]), first.get(name), notes.get(name, "")))
        else:
            results.append(Result(str(dev), name, None, None, None, 0, None, notes.get(name, "skipped")))
    return results


def table(results: list[Result]) -> str:
    from opgraph.cli._table import format_table

    rows = []
    for r in results:
        if r.ms_per_step is None:
            rows.append([r.device, r.implementation, "-", "-", "-", "-", r.note])
            continue
        rows.append([r.device, r.implementation, f"{r.ms_per_step:.2f}", f"{r.images_per_s:.1f}",
                     f"{r.vs_eager:.2f}x" if r.vs_eager else "-",
                     f"{r.first_loss:.4f}" if r.first_loss is not None else "-", r.note])
    return format_table(["device", "implementation", "ms/step", "images/s", "vs eager", "first loss", "note"],
                        rows, align="<<>>>><")


def _compile_note(choice: str, quick: bool, dev: og.Device) -> str:
    """Why torch.compile is left out on ``dev`` ("" when it is measured)."""
    if choice == "no":
        return "skipped: --torch-compile no"
    if choice == "auto" and quick and dev.kind == "cpu":
        return "skipped: --quick on the CPU (compiling takes ~1 min; --torch-compile yes)"
    return ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", action="append", default=None,
                   help="device to measure (repeatable; default: og.device() and the CPU)")
    p.add_argument("--batch", type=int, default=None, help="images per step (default 64; --quick 8)")
    p.add_argument("--image", type=int, default=None, help="image height and width (default 32; --quick 16)")
    p.add_argument("--width", type=int, default=None,
                   help="channels of the first stage (default 64, ResNet-18's; --quick 8)")
    p.add_argument("--classes", type=int, default=10, help="classes of the linear head (default 10)")
    p.add_argument("--iters", type=int, default=None, help="timed steps of each (default 20; --quick 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first, the compiling one included")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for PyTorch (default: its own; --quick: 1, as its ops are too small to share)")
    p.add_argument("--torch-compile", choices=("auto", "yes", "no"), default="auto",
                   help="measure torch.compile too (auto: yes, except with --quick on the CPU, where compiling "
                        "the step takes about a minute)")
    p.add_argument("--quick", action="store_true", help="small sizes: a CPU run takes seconds")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--fusion", action="store_true", help="turn on opgraph's elementwise fusion (CUDA only)")
    args = p.parse_args(argv)
    quick = args.quick
    cfg = Config(batch=args.batch or (8 if quick else 64), image=args.image or (16 if quick else 32),
                 width=args.width or (8 if quick else 64), classes=args.classes, seed=args.seed, fusion=args.fusion)
    iters = args.iters or (10 if quick else 20)
    if min(cfg.batch, cfg.image, cfg.width, cfg.classes, iters) < 1 or args.warmup < 1:
        p.error("--batch, --image, --width, --classes, --iters and --warmup must be >= 1")
    if args.threads is not None or quick:
        torch.set_num_threads(args.threads or 1)
    specs = args.device or [str(og.device()), "cpu"]
    devices = list(dict.fromkeys(og.device(s) for s in specs))

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    threads = torch.get_num_threads()
    print(f"ResNet-18-like training step: batch {cfg.batch}, {cfg.image}x{cfg.image} images, width {cfg.width}, "
          f"{cfg.classes} classes, SGD(momentum {MOMENTUM}); median of {iters} interleaved steps after {args.warmup} "
          f"warm-up; torch {torch.__version__}, {threads} CPU thread{'s' if threads != 1 else ''}")
    results: list[Result] = []
    for dev in devices:
        log(f"{dev}: building and compiling")
        results += bench_device(cfg, dev, iters, args.warmup, _compile_note(args.torch_compile, quick, dev), log)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": asdict(cfg), "iters": iters, "warmup": args.warmup, "torch": torch.__version__,
                       "python": platform.python_version(), "results": [asdict(r) for r in results]}, f, indent=2)
    return 0 if all(r.ms_per_step is not None for r in results if r.implementation != "torch.compile") else 1


if __name__ == "__main__":
    sys.exit(main())
