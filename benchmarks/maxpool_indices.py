"""Max pooling forward + backward: saved indices vs recomputing the argmax, opgraph vs PyTorch.

For each ResNet-like shape and dtype we time one forward and one backward pass (the result and the
source's gradient for a given incoming gradient ``dy``):

* ``torch``: ``F.max_pool2d`` under autograd (it saves int64 indices) and ``torch.autograd.grad``;
* ``og idx32`` / ``og idx64``: an opgraph executable with ``max_pool2d_return_indices`` (int32 / int64
  ``GLOBAL_FLATTEN_2D`` indices) and its gradient rule, ``max_pool2d_gradient`` from those indices;
* ``og recompute``: ``max_pool2d`` and its gradient rule, which recomputes the argmax
  (``max_pool2d_return_indices`` again) before ``max_pool2d_gradient``;
* ``torch recompute``: ``F.max_pool2d`` without autograd, then ``max_pool2d_with_indices`` again and
  its backward: the same recomputation in plain PyTorch.

The opgraph gradients come from ``opgraph.autodiff.vjp`` with ``dy`` as the cotangent, so no extra
ops are timed. Each time is the median over ``--repeats`` of the mean over ``--iters`` calls (CUDA
synchronised before and after each repeat), the variants interleaved with a rotating order; ratios
are the medians of the per-repeat ratios. Results are checked against ``torch`` before timing.

    python benchmarks/maxpool_indices.py                    # CUDA when present, else CPU
    python benchmarks/maxpool_indices.py --device cpu --quick --threads 1 --json /tmp/maxpool.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import opgraph as og

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import common_arguments, interleaved  # noqa: E402

from opgraph.autodiff.vjp import vjp

# (name, NCHW shape, kernel, stride, padding)
SHAPES: list[tuple[str, tuple[int, int, int, int], int, int, int]] = [
    ("resnet-stem", (64, 64, 112, 112), 3, 2, 1),
    ("2x2-s2", (128, 256, 56, 56), 2, 2, 0),
    ("3x3-s1", (32, 128, 56, 56), 3, 1, 1),
]
QUICK_SHAPES: list[tuple[str, tuple[int, int, int, int], int, int, int]] = [
    ("resnet-stem", (4, 8, 32, 32), 3, 2, 1),
    ("2x2-s2", (4, 16, 16, 16), 2, 2, 0),
]
DTYPES = {"float32": (torch.float32, og.float32), "bfloat16": (torch.bfloat16, og.bfloat16)}
VARIANTS = ("torch", "og idx32", "og idx64", "og recompute", "torch recompute")


def _descriptor(k: int, s: int, p: int, index_dtype: og.DType | None) -> og.Pooling2dDescriptor:
    mode = og.PoolingReturnIndicesMode.GLOBAL_FLATTEN_2D if index_dtype is not None else \
        og.PoolingReturnIndicesMode.NONE
    return og.Pooling2dDescriptor(k, k, s, s, padding_left=p, padding_right=p, padding_top=p, padding_bottom=p,
                                  return_indices_mode=mode, return_indices_data_type=index_dtype or og.int32)


def _opgraph(shape: tuple[int, ...], out_shape: tuple[int, ...], dtype: og.DType, k: int, s: int, p: int,
             index_dtype: og.DType | None, dev: og.Device) -> og.Executable:
    """(x, dy) -> (y, dx): with index_dtype, through max_pool2d_return_indices; else plain max_pool2d."""
    g = og.Graph()
    x = g.placeholder(shape, dtype, name="x")
    dy = g.placeholder(out_shape, dtype, name="dy")
    d = _descriptor(k, s, p, index_dtype)
    y = g.max_pool2d_return_indices(x, d)[0] if index_dtype is not None else g.max_pool2d(x, d)
    (dx,) = vjp(g, [y], [dy], [x])
    return g.compile({x: og.TensorType(shape, dtype), dy: og.TensorType(out_shape, dtype)}, [y, dx], device=dev)


def _torch_saved(x: torch.Tensor, dy: torch.Tensor, k: int, s: int, p: int) -> tuple[torch.Tensor, torch.Tensor]:
    xr = x.detach().requires_grad_()
    y = F.max_pool2d(xr, k, s, p)
    (dx,) = torch.autograd.grad(y, xr, dy)
    return y.detach(), dx


def _torch_recompute(x: torch.Tensor, dy: torch.Tensor, k: int, s: int, p: int) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        y = F.max_pool2d(x, k, s, p)
        _, idx = torch.ops.aten.max_pool2d_with_indices(x, [k, k], [s, s], [p, p])
        dx = torch.ops.aten.max_pool2d_with_indices_backward(dy, x, [k, k], [s, s], [p, p], [1, 1], False, idx)
    return y, dx


def bench(dev: og.Device, name: str, shape: tuple[int, int, int, int], k: int, s: int, p: int, dtype_name: str,
          iters: int, repeats: int) -> dict[str, Any]:
    tdt, odt = DTYPES[dtype_name]
    gen = torch.Generator(device=dev.torch).manual_seed(0)
    x = torch.randn(shape, generator=gen, device=dev.torch).to(tdt)
    out_shape = (shape[0], shape[1], *F.max_pool2d(x[:1, :1].float(), k, s, p).shape[2:])
    dy = torch.randn(out_shape, generator=gen, device=dev.torch).to(tdt)
    exes = {"og idx32": _opgraph(shape, out_shape, odt, k, s, p, og.int32, dev),
            "og idx64": _opgraph(shape, out_shape, odt, k, s, p, og.int64, dev),
            "og recompute": _opgraph(shape, out_shape, odt, k, s, p, None, dev)}

    def run(e: og.Executable) -> Callable[[], Any]:  # a closure, not ``lambda e=e``: mypy cannot type those
        return lambda: e.run([x, dy])

    cases: dict[str, Callable[[], Any]] = {
        "torch": lambda: _torch_saved(x, dy, k, s, p),
        **{v: run(e) for v, e in exes.items()},
        "torch recompute": lambda: _torch_recompute(x, dy, k, s, p),
    }
    y_ref, dx_ref = cases["torch"]()
    for v, fn in cases.items():  # every variant must agree with PyTorch's autograd
        y, dx = fn()
        if not (torch.equal(y, y_ref) and torch.allclose(dx.float(), dx_ref.float(), rtol=1e-2, atol=1e-2)):
            raise SystemExit(f"maxpool_indices: {v} disagrees with torch on {name} {dtype_name} ({dev})")
    samples = interleaved(cases, iters, repeats, dev.synchronize)
    ms = {v: statistics.median(t) * 1e3 for v, t in samples.items()}
    ratio = lambda a, b: statistics.median(x / y for x, y in zip(samples[a], samples[b], strict=True))
    return {"device": str(dev), "shape": name, "input": list(shape), "kernel": k, "stride": s, "padding": p,
            "dtype": dtype_name, "iters": iters, "repeats": repeats,
            **{f"{v.replace(' ', '_')}_ms": t for v, t in ms.items()},
            "idx32_vs_torch": ratio("og idx32", "torch"), "idx64_vs_torch": ratio("og idx64", "torch"),
            "recompute_vs_idx32": ratio("og recompute", "og idx32"),
            "torch_recompute_vs_torch": ratio("torch recompute", "torch")}


def table(results: list[dict[str, Any]]) -> str:
    headers = ["device", "shape", "dtype", *(f"{v} ms" for v in VARIANTS), "idx32/torch", "idx64/torch",
               "og recompute/idx32", "torch recompute/torch"]
    rows = [[r["device"], f"{r['shape']} {'x'.join(map(str, r['input']))} {r['kernel']}x{r['kernel']}/{r['stride']}",
             r["dtype"], *(f"{r[v.replace(' ', '_') + '_ms']:.3f}" for v in VARIANTS),
             f"{r['idx32_vs_torch']:.3f}", f"{r['idx64_vs_torch']:.3f}", f"{r['recompute_vs_idx32']:.3f}",
             f"{r['torch_recompute_vs_torch']:.3f}"] for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
    return "\n".join([fmt(headers), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", help="cpu, cuda, cuda:N (default: cuda when present, else cpu)")
    p.add_argument("--quick", action="store_true", help="small shapes and few iterations (a smoke run)")
    p.add_argument("--dtype", action="append", choices=sorted(DTYPES), help="repeatable (default: all)")
    p.add_argument("--iters", type=int, default=None, help="calls per repeat (default 20; 3 with --quick)")
    p.add_argument("--repeats", type=int, default=None, help="repeats; the median is reported (default 11; 3 quick)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = p.parse_args(argv)
    iters, repeats, dev = common_arguments(p, args, (3, 20), (3, 11))
    results = [bench(dev, name, shape, k, s, pad, dt, iters, repeats)
               for name, shape, k, s, pad in (QUICK_SHAPES if args.quick else SHAPES)
               for dt in (args.dtype or list(DTYPES))]
    print(f"opgraph {og.__version__}, torch {torch.__version__}, Python {platform.python_version()}, "
          f"{torch.get_num_threads()} CPU threads; forward + backward, median of {repeats} x {iters} calls")
    print(table(results))
    print("ratios > 1: the first is slower; og recompute/idx32 is what saving indices gains")
    if args.json:
        meta = {"opgraph": og.__version__, "torch": torch.__version__, "python": platform.python_version(),
                "quick": args.quick}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
