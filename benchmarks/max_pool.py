"""Max pooling with indices, forward then backward, on channels-last activations of ResNet-50 (the stem's 3x3 /2
pool) and VGG16 (five 2x2 /2 pools): PyTorch's kernels (what eager and opgraph used before), ``torch.compile``
(Inductor) and ``opgraph.kernels.max_pool``, against the device copy bandwidth measured in the same run.

Times are device time with a cold L2 (``benchmarks/fusion.py``'s ``measure``, median of ``--repeats``), of the
forward and the backward of a given gradient, and of the forward alone. ``int8``: opgraph's kernels storing each
maximum's offset in its window in 8 bits (``local=True``) instead of PyTorch's int64 index, as Inductor stores its
offsets. ``of copy``: the bytes a step must move (x read, values and int64 indices written; gradient and indices
read, dx written) / time / copy bandwidth. opgraph's results are checked against PyTorch's (values, indices, dx)
before timing.

``--relu-backward`` (VGG16's tiling pools) adds a second table: the pool's gradient from int8 offsets, masked by the
ReLU before the pool and summed per channel (a convolution bias's gradient), as opgraph now computes it (one
generated kernel: ``passes.decompose`` spreads the gradient by upsampling) against the kernel before it (the pool's
backward kernel writes the gradient, a generated kernel masks and sums it). ``of copy`` there: the fused kernel's
bytes (the activation read, the gradient and offsets read, the masked gradient written) / time / copy bandwidth.
``graph`` (``--layouts``): ``nchw`` builds NCHW graphs on channels-last tensors; ``nhwc`` builds them as the layout
pass leaves a CNN's on CUDA (the incoming gradient NHWC, the pool in NCHW between transposes, the ReLU mask and the
bias sum in NHWC), where ``passes.decompose`` now writes the pool's gradient in NHWC too.

    python benchmarks/max_pool.py
    python benchmarks/max_pool.py --dtypes bfloat16 --cases resnet50
    python benchmarks/max_pool.py --cases vgg16 --relu-backward
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import opgraph as og
from opgraph.cli._table import format_table
from opgraph.core.dtype import from_torch
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


def relu_backward_steps(r: torch.Tensor, grad: torch.Tensor, k: int, device: str, interpret: bool = False,
                        layout: str = "nchw") -> dict[str, Callable[[], list[torch.Tensor]]]:
    """The ReLU-masked gradient of a tiling ``k`` x ``k`` pool of ``r`` (a ReLU's output) and its per-channel sum:
    ``fused`` (one executable: pool gradient, mask and sum in one kernel) and ``apart`` (the pool's backward
    kernel, then an executable masking and summing its result), from the same int8 window offsets.
    ``layout="nhwc"``: the graphs as the layout pass leaves a CNN's: the incoming gradient NHWC, the pool in NCHW
    between transposes, the mask and the sum in NHWC (the masked gradient comes out NHWC)."""
    window = ((k, k), (k, k), (0, 0), (1, 1))
    h, w = r.shape[2], r.shape[3]
    _, offsets = max_pool.forward(r, window, (grad.shape[2], grad.shape[3]), torch.int8, local=True)
    dtype = from_torch(r.dtype)
    d = og.Pooling2dDescriptor(k, k, k, k, return_indices_mode=og.PoolingReturnIndicesMode.LOCAL_FLATTEN_2D,
                               return_indices_data_type=og.int8)
    descriptor = og.CompilationDescriptor(triton_interpret=interpret)
    nhwc = layout == "nhwc"

    def masked(g: og.Graph, rt: og.Tensor, dx: og.Tensor) -> list[og.Tensor]:
        if nhwc:
            rt, dx = g.transpose(rt, [0, 2, 3, 1]), g.transpose(dx, [0, 2, 3, 1])
        dy = g.select(g.less_equal(rt, 0.0), 0.0, dx)
        return [dy, g.reduce_sum(g.cast(dy, og.float32), [0, 1, 2] if nhwc else [0, 2, 3])]

    g = og.Graph()
    gshape = (grad.shape[0], grad.shape[2], grad.shape[3], grad.shape[1]) if nhwc else tuple(grad.shape)
    rt, gt = g.placeholder(tuple(r.shape), dtype), g.placeholder(gshape, dtype)
    ot = g.placeholder(tuple(offsets.shape), og.int8)
    incoming = g.transpose(gt, [0, 3, 1, 2]) if nhwc else gt
    fused = g.compile({t: t.type for t in (rt, gt, ot)}, masked(g, rt, g.max_pool2d_gradient(incoming, ot, rt, d)),
                      device=device, descriptor=descriptor)
    g2 = og.Graph()
    rt2, dxt = g2.placeholder(tuple(r.shape), dtype), g2.placeholder(tuple(r.shape), dtype)
    apart = g2.compile({rt2: rt2.type, dxt: dxt.type}, masked(g2, rt2, dxt), device=device, descriptor=descriptor)
    fed = grad.permute(0, 2, 3, 1) if nhwc else grad  # channels-last memory: the NHWC view is contiguous
    return {"fused": lambda: fused.run([r, fed, offsets]),
            "apart": lambda: apart.run([r, max_pool.backward(grad, offsets, (h, w), window, local=True)])}


def _relu_backward_table(args: argparse.Namespace, dev: og.Device, copy: float) -> bool:
    rows, failed = [], False
    for shape, (k, _, _) in CASES["vgg16"]:  # stride k, no padding: windows that tile the image
        for name, layout in itertools.product(args.dtypes, args.layouts):
            r = torch.randn(shape, device="cuda").relu().to(DTYPES[name]).contiguous(memory_format=torch.channels_last)
            grad = torch.randn(shape[0], shape[1], shape[2] // k, shape[3] // k, device="cuda").to(DTYPES[name])
            grad = grad.contiguous(memory_format=torch.channels_last)
            fns = relu_backward_steps(r, grad, k, "cuda", layout=layout)
            ok = all(torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-3)
                     for a, b in zip(fns["fused"](), fns["apart"](), strict=True))
            failed = failed or not ok
            ms = {b: statistics.median(v) for b, v in fusion.measure(fns, dev, 2, args.repeats).items()}
            moved = 2 * r.numel() * r.element_size() + grad.numel() * (grad.element_size() + 1)
            rows.append([f"vgg16 {'x'.join(map(str, shape))}", name, layout, f"{ms['apart']:.3f}", f"{ms['fused']:.3f}",
                         f"{ms['apart'] / ms['fused']:.2f}", f"{moved / ms['fused'] / 1e6 / copy:.2f}",
                         "ok" if ok else "FAIL"])
            print(f"  relu backward {rows[-1][0]} {name} {layout}: done", file=sys.stderr, flush=True)
    print("\npool gradient + ReLU mask + per-channel sum, int8 offsets (ms):")
    print(format_table(["shape (NCHW)", "dtype", "graph", "kernel + region", "one region", "speed-up", "of copy",
                        "check"], rows))
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=fusion.names_of(list(CASES)), default=list(CASES),
                    help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--dtypes", type=fusion.names_of(list(DTYPES)), default=list(DTYPES),
                    help=f"comma-separated, of {', '.join(DTYPES)}")
    ap.add_argument("--repeats", type=int, default=10, help="timed steps of each backend (median)")
    ap.add_argument("--layouts", type=fusion.names_of(["nchw", "nhwc"]), default=["nchw", "nhwc"],
                    help="--relu-backward's graphs: nchw, and/or nhwc as the layout pass leaves a CNN's")
    ap.add_argument("--relu-backward", action="store_true",
                    help="also time the pool gradient fused with the ReLU mask and bias sum (VGG16's pools)")
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
    if args.relu_backward:
        failed = _relu_backward_table(args, dev, copy) or failed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
