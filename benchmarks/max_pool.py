"""Max pooling with indices, forward then backward, on channels-last activations of ResNet-50 (the stem's 3x3 /2
pool) and VGG16 (five 2x2 /2 pools): PyTorch's kernels (what eager and opgraph used before), ``torch.compile``
(Inductor) and ``opgraph.kernels.max_pool``, against the device copy bandwidth measured in the same run.

Times are device time with a cold L2 (``benchmarks/fusion.py``'s ``measure``, median of ``--repeats``), of the
forward and the backward of a given gradient, and of the forward alone. ``int8``: opgraph's kernels storing each
maximum's offset in its window in 8 bits (``local=True``) instead of PyTorch's int64 index, as Inductor stores its
offsets. ``of copy``: the bytes a step must move (x read, values and int64 indices written; gradient and indices
read, dx written) / time / copy bandwidth. opgraph's results are checked against PyTorch's (values, indices, dx)
before timing.

    python benchmarks/max_pool.py
    python benchmarks/max_pool.py --dtypes bfloat16 --cases resnet50
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from opgraph.cli._table import format_table
from opgraph.kernels import max_pool

_spec = importlib.util.spec_from_file_location("opgraph_benchmarks_fusion", Path(__file__).with_name("fusion.py"))
assert _spec is not None and _spec.loader is not None
fusion = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fusion
_spec.loader.exec_module(fusion)

# name -> [(N, C, H, W), (kernel, stride, padding)]
CASES: dict[str, list[tuple[tuple[int, int, int, int], tuple[int, int, int]]]] = {
    "resnet50": [((128, 64, 112, 112), (3, 2, 1))],
    "vgg16": [((64, c, s, s), (2, 2, 0)) for c, s in ((64, 224), (128, 112), (256, 56), (512, 28), (512, 14))],
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def steps(x: torch.Tensor, grad: torch.Tensor, k: int, s: int, p: int) -> dict[str, Callable[[], object]]:
    """A forward and a backward of each backend, on the same channels-last ``x`` and ``grad``."""
    window = ((k, k), (s, s), (p, p), (1, 1))
    out_hw = (grad.shape[2], grad.shape[3])
    h, w = x.shape[2], x.shape[3]

    def eager() -> object:
        _, i = torch.ops.aten.max_pool2d_with_indices(x, [k, k], [s, s], [p, p])
        return torch.ops.aten.max_pool2d_with_indices_backward(grad, x, [k, k], [s, s], [p, p], [1, 1], False, i)

    def opgraph(local: bool) -> Callable[[], object]:
        def step() -> object:
            _, i = max_pool.forward(x, window, out_hw, torch.int8 if local else torch.int64, local)
            return max_pool.backward(grad, i, (h, w), window, local)

        return step

    leaf = x.detach().requires_grad_()
    torch._dynamo.reset()  # each case compiled for its own static shapes (no automatic dynamic shapes)
    compiled = torch.compile(lambda t: F.max_pool2d(t, k, s, p), dynamic=False)

    def inductor() -> object:
        leaf.grad = None
        compiled(leaf).backward(grad)
        return leaf.grad

    return {"eager": eager, "inductor": inductor, "opgraph": opgraph(False), "int8": opgraph(True),
            "inductor fwd": lambda: compiled(leaf),  # its forward graph alone (offsets stored for a backward)
            "opgraph fwd": lambda: max_pool.forward(x, window, out_hw),
            "int8 fwd": lambda: max_pool.forward(x, window, out_hw, torch.int8, True)}


def check(x: torch.Tensor, grad: torch.Tensor, k: int, s: int, p: int) -> bool:
    """opgraph's values, indices and dx equal PyTorch's."""
    v, i = torch.ops.aten.max_pool2d_with_indices(x, [k, k], [s, s], [p, p])
    dx = torch.ops.aten.max_pool2d_with_indices_backward(grad, x, [k, k], [s, s], [p, p], [1, 1], False, i)
    window = ((k, k), (s, s), (p, p), (1, 1))
    ov, oi = max_pool.forward(x, window, (v.shape[2], v.shape[3]))
    odx = max_pool.backward(grad, oi, (x.shape[2], x.shape[3]), window)
    lv, li = max_pool.forward(x, window, (v.shape[2], v.shape[3]), torch.int8, True)
    ldx = max_pool.backward(grad, li, (x.shape[2], x.shape[3]), window, True)
    return torch.equal(ov, v) and torch.equal(oi, i) and torch.equal(lv, v) and torch.equal(ldx, odx) and \
        torch.allclose(odx.float(), dx.float(), rtol=1e-2, atol=1e-2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=fusion.names_of(list(CASES)), default=list(CASES),
                    help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--dtypes", type=fusion.names_of(list(DTYPES)), default=list(DTYPES),
                    help=f"comma-separated, of {', '.join(DTYPES)}")
    ap.add_argument("--repeats", type=int, default=10, help="timed steps of each backend (median)")
    args = ap.parse_args(argv)
    dev = fusion.cuda_device(ap)
    copy = fusion.copy_roofline(dev, args.repeats)
    rows, failed = [], False
    for case in args.cases:
        for shape, (k, s, p) in CASES[case]:
            for name in args.dtypes:
                dtype = DTYPES[name]
                x = torch.randn(shape, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)
                oh, ow = ((shape[2] + 2 * p - k) // s + 1), ((shape[3] + 2 * p - k) // s + 1)
                grad = torch.randn(shape[0], shape[1], oh, ow, device="cuda").to(dtype)
                grad = grad.contiguous(memory_format=torch.channels_last)
                ok = check(x, grad, k, s, p)
                failed = failed or not ok
                times = fusion.measure(steps(x, grad, k, s, p), dev, 2, args.repeats)
                ms = {b: statistics.median(v) for b, v in times.items()}
                moved = 2 * x.numel() * x.element_size() + 2 * grad.numel() * (grad.element_size() + 8)
                rows.append([f"{case} {'x'.join(map(str, shape))}", name, f"{ms['eager']:.3f}",
                             f"{ms['inductor']:.3f}", f"{ms['opgraph']:.3f}", f"{ms['int8']:.3f}",
                             f"{moved / ms['opgraph'] / 1e6 / copy:.2f}", f"{ms['eager'] / ms['opgraph']:.2f}",
                             f"{ms['inductor'] / ms['opgraph']:.2f}", f"{ms['inductor'] / ms['int8']:.2f}",
                             f"{ms['inductor fwd']:.3f}", f"{ms['opgraph fwd']:.3f}", f"{ms['int8 fwd']:.3f}",
                             "ok" if ok else "FAIL"])
                print(f"  {rows[-1][0]} {name}: done", file=sys.stderr, flush=True)
    print(format_table(["shape (NCHW)", "dtype", "eager ms", "inductor ms", "opgraph ms", "int8 ms", "of copy",
                        "vs eager", "vs inductor", "int8 vs inductor", "inductor fwd", "opgraph fwd", "int8 fwd",
                        "check"], rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
