"""Batch norm + ReLU in training, on channels-last activations of ResNet-50's shapes: one step (forward, then
backward of a given gradient) through eager PyTorch (cuDNN's batch norm), torch.compile (Inductor), opgraph
(cuDNN's batch-norm kernel, the rest fused) and opgraph with ``batch_norm_regions=True`` (statistics and
normalisation as generated kernels), against the device copy bandwidth measured in the same run.

Times are device time with a cold L2 (``benchmarks/fusion.py``'s ``measure``). ``of copy``: six passes over the
activation (forward: x read, y written; backward: the gradient, x and the ReLU's output read, dx written) per
step time, over the copy bandwidth; a step cannot do with fewer. ``vs X``: X's time / the best opgraph time.
With ``--conv`` the times include a 1x1 convolution (cuDNN's, in every backend; bf16 under autocast), so ``of
copy`` only bounds the batch norm's share from below.

    python benchmarks/batch_norm.py --batch 128 --dtypes float32,bfloat16
    python benchmarks/batch_norm.py --batch 128 --conv     # a 1x1 convolution first, as inside a network
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

import opgraph as og
from opgraph.cli._table import format_table

_spec = importlib.util.spec_from_file_location("opgraph_benchmarks_fusion", Path(__file__).with_name("fusion.py"))
assert _spec is not None and _spec.loader is not None
fusion = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fusion
_spec.loader.exec_module(fusion)

SHAPES = ((64, 56), (256, 56), (128, 28), (512, 28), (256, 14), (1024, 14), (2048, 7))  # (channels, H = W)
BACKENDS = ("eager", "inductor", "opgraph", "opgraph+bn")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _step(backend: str, channels: int, x: torch.Tensor, grad: torch.Tensor, conv: bool) -> Callable[[], None]:
    layers = [torch.nn.BatchNorm2d(channels), torch.nn.ReLU()]
    if conv:  # as inside a network: opgraph's layout pass then makes the batch norm NHWC
        layers.insert(0, torch.nn.Conv2d(channels, channels, 1, bias=False))
    module = torch.nn.Sequential(*layers).cuda()  # float32, as autocast
    module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # (the stubs lack it)
    run: Callable[[torch.Tensor], torch.Tensor] = module
    if backend == "inductor":
        run = torch.compile(module)
    elif backend.startswith("opgraph"):
        run = torch.compile(module, backend="opgraph",
                            options={"warn_fallbacks": False, "batch_norm_regions": backend == "opgraph+bn"})

    autocast = conv and x.dtype == torch.bfloat16  # a float32 convolution weight meets bf16 images as in training

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            y = run(x)
        y.backward(grad.to(y.dtype))

    return step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=128, help="images a batch")
    p.add_argument("--dtypes", default="float32,bfloat16", help=f"of {', '.join(DTYPES)} (the activations' dtype)")
    p.add_argument("--shapes", type=fusion.channel_shapes, default=list(SHAPES),
                   help="CxS pairs: C channels of S x S (comma-separated)")
    p.add_argument("--backends", default=",".join(BACKENDS), help=f"of {', '.join(BACKENDS)}")
    p.add_argument("--repeats", type=int, default=15, help="timed steps of each backend")
    p.add_argument("--conv", action="store_true",
                   help="a 1x1 convolution first (every backend): the batch norm as inside a network (alone, "
                        "opgraph reads its channels-last inputs through NHWC views)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA device (cuDNN's batch norm is the reference)")
    backends = args.backends.split(",")
    dtypes = args.dtypes.split(",")
    if set(backends) - set(BACKENDS) or set(dtypes) - set(DTYPES):
        p.error(f"backends from {', '.join(BACKENDS)}, dtypes from {', '.join(DTYPES)}")
    shapes = args.shapes
    warnings.simplefilter("ignore")
    dev = og.device("cuda")
    copy = fusion.copy_roofline(dev, args.repeats, f", batch {args.batch}")
    rows: list[list[str]] = []
    for dtype in dtypes:
        for c, s in shapes:
            gen = torch.Generator(device="cuda").manual_seed(c * s)
            x = torch.randn(args.batch, c, s, s, device="cuda", generator=gen).to(DTYPES[dtype])
            x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
            grad = torch.randn(x.shape, device="cuda", generator=gen).to(x.dtype)
            grad = grad.contiguous(memory_format=torch.channels_last)
            steps: dict[str, Callable[[], None]] = {}
            for backend in backends:
                torch._dynamo.reset()
                try:
                    steps[backend] = _step(backend, c, x, grad, args.conv)
                    steps[backend]()  # compile outside the timing
                except Exception as e:  # a backend failing is a row entry, not the end of the run
                    print(f"{backend} {dtype} {c}x{s}: {fusion._error(e)}")
                    steps.pop(backend, None)
            ms = {k: min(v) for k, v in fusion.measure(steps, dev, 2, args.repeats).items()}
            best = min((ms[k] for k in ms if k.startswith("opgraph")), default=None)
            nbytes = 6 * x.numel() * x.element_size()
            row = [f"{args.batch}x{c}x{s}x{s}", dtype, *(f"{ms[k]:.3f}" if k in ms else "-" for k in backends)]
            row += [f"{nbytes / best / 1e6 / copy:.2f}" if best else "-"]
            row += [f"{ms[k] / best:.2f}" if best and k in ms else "-" for k in ("eager", "inductor")]
            rows.append(row)
            print(format_table(["shape (NCHW)", "dtype", *(f"{b} ms" for b in backends), "of copy", "vs eager",
                                "vs inductor"], rows[-1:]), flush=True)
    print()
    print(format_table(["shape (NCHW)", "dtype", *(f"{b} ms" for b in backends), "of copy", "vs eager",
                        "vs inductor"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
