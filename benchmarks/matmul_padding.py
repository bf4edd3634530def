"""Misaligned GEMMs padded or not: a language model's output layer (BERT's 30522-word and GPT-2's 50257-word
vocabularies) in the three layouts of its training step, against Inductor (which pads them, ``pad_mm``) and the
bf16/f32 matmul roofline measured in the same run (the same product on pre-padded, aligned operands, no copies).

Per case (``M x K -> N``, the layout as ``passes.pad_matmul`` reads it):
* ``as is``: opgraph with ``pad_matmuls=False``: cuBLAS on the misaligned operands;
* ``padded``: opgraph with ``pad_matmuls=True``: zero pads of the operands that need them, the GEMM, a slice (view);
* ``default``: opgraph as compiled by default (the probe decides; the column says which it chose);
* ``inductor``: ``torch.compile`` of the same product;
* ``aligned``: ``torch.mm`` on operands already padded (the roofline of padding: the GEMM alone).
A second table times the gradient's pad alone: opgraph's pad op (its kernel, ``kernels/pad.py``, and the fallback
lowering), ``F.pad``, ``torch.cat`` with a zero block and Inductor, against a device copy of the padded bytes.
opgraph runs with ``cuda_graphs=False``, so every column pays the same launches. Times are medians over
``--repeats`` of the mean over ``--iters`` calls, columns interleaved; every column is checked against ``as is``.

    python benchmarks/matmul_padding.py                          # BERT and GPT-2, bfloat16 and float32
    python benchmarks/matmul_padding.py --models bert --dtypes bfloat16 --batch-tokens 4096
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import opgraph as og
from opgraph.cli._table import format_table
from opgraph.kernels import pad as pad_kernel
from opgraph.passes.pad_matmul import ALIGN_BYTES, padding_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import interleaved  # noqa: E402

VOCABULARY = {"bert": 30522, "gpt2": 50257}
LAYOUTS = ("logits h @ w.T", "input grad g @ w", "weight grad g.T @ h")


def _graph(layout: str, t: int, k: int, v: int, dtype: og.DType) -> tuple[og.Graph, list[og.Tensor], og.Tensor]:
    g = og.Graph()
    if layout == LAYOUTS[0]:
        h, w = g.placeholder((t, k), dtype), g.placeholder((v, k), dtype)
        return g, [h, w], g.matmul(h, g.transpose(w, [1, 0]))
    if layout == LAYOUTS[1]:
        grad, w = g.placeholder((t, v), dtype), g.placeholder((v, k), dtype)
        return g, [grad, w], g.matmul(grad, w)
    grad, h = g.placeholder((t, v), dtype), g.placeholder((t, k), dtype)
    return g, [grad, h], g.matmul(g.transpose(grad, [1, 0]), h)


def _eager(layout: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if layout == LAYOUTS[0]:
        return lambda h, w: h @ w.t()
    if layout == LAYOUTS[1]:
        return lambda grad, w: grad @ w
    return lambda grad, h: grad.t() @ h


def _aligned(layout: str, feeds: list[torch.Tensor], pad: int) -> Callable[[], torch.Tensor]:
    """The product on operands whose vocabulary axis was padded beforehand (by ``pad``): the GEMM alone."""
    F = torch.nn.functional
    if layout == LAYOUTS[0]:
        h, w = feeds[0], F.pad(feeds[1], (0, 0, 0, pad))
        return lambda: h @ w.t()
    grad = F.pad(feeds[0], (0, pad))
    if layout == LAYOUTS[1]:
        w = F.pad(feeds[1], (0, 0, 0, pad))
        return lambda: grad @ w
    h = feeds[1]
    return lambda: grad.t() @ h


def bench(model: str, layout: str, dtype: og.DType, t: int, k: int, iters: int, repeats: int) -> dict[str, Any]:
    v = VOCABULARY[model]
    g, xs, y = _graph(layout, t, k, v, dtype)
    types = {x: x.type for x in xs}
    gen = torch.Generator(device="cuda").manual_seed(0)
    feeds = [torch.randn([int(d or 0) for d in x.shape], generator=gen, device="cuda").to(dtype.torch_dtype)
             for x in xs]
    exes = {name: g.compile(types, [y], device="cuda",
                            descriptor=og.CompilationDescriptor(pad_matmuls=pad, cuda_graphs=False))
            for name, pad in (("as is", False), ("padded", True), ("default", None))}
    chose = any(o.op.name == "pad" for o in exes["default"].program.graph.ops)
    eager = _eager(layout)
    compiled = torch.compile(eager, dynamic=False)
    pad = -v % (ALIGN_BYTES // dtype.torch_dtype.itemsize)  # as the pass pads

    def run(e: og.Executable) -> Callable[[], Any]:
        return lambda: e.run(feeds)

    cases: dict[str, Callable[[], Any]] = {name: run(e) for name, e in exes.items()}
    cases["inductor"] = lambda: compiled(*feeds)
    cases["aligned"] = _aligned(layout, feeds, pad)
    want = exes["as is"].run(feeds)[0].float()
    scale = want.abs().max().item()
    for name in ("padded", "default", "inductor"):
        out = cases[name]()
        got = (out[0] if isinstance(out, list) else out).float()
        err = (got - want).abs().max().item() / scale
        if got.shape != want.shape or err > 2e-2:
            raise SystemExit(f"{model} {layout} {dtype.name} {name}: differs from 'as is' by {err:.3g}")
    samples = interleaved(cases, iters, repeats, torch.cuda.synchronize)
    ms = {name: 1e3 * statistics.median(s) for name, s in samples.items()}
    found = padding_for(y.op)
    return {"model": model, "layout": layout, "dtype": dtype.name, "shape": f"{t}x{k}->{v}",
            "padding": found[3] if found else None, "default_pads": chose, "ms": ms,
            "tflops": {name: 2 * t * k * v / (x * 1e-3) / 1e12 for name, x in ms.items()}}


def pad_alone(model: str, dtype: og.DType, t: int, iters: int, repeats: int) -> list[str]:
    """The gradient's pad alone (t x vocabulary, right-padded to a multiple of 16 bytes, as the pass pads) four
    ways, against a device copy of the padded bytes: opgraph's pad op, ``F.pad``, ``torch.cat`` with a zero block,
    and Inductor."""
    v = VOCABULARY[model]
    pad = -v % (ALIGN_BYTES // dtype.torch_dtype.itemsize)
    g = og.Graph()
    x = g.placeholder((t, v), dtype)
    exe = g.compile({x: x.type}, [g.pad(x, og.PaddingMode.ZERO, [0, 0], [0, pad])], device="cuda",
                    descriptor=og.CompilationDescriptor(cuda_graphs=False))
    grad = torch.randn(t, v, device="cuda").to(dtype.torch_dtype)
    zeros = torch.zeros(t, pad, device="cuda", dtype=grad.dtype)
    padded = torch.empty(t, v + pad, device="cuda", dtype=grad.dtype)
    compiled = torch.compile(lambda a: torch.nn.functional.pad(a, (0, pad)), dynamic=False)
    def without_kernel() -> Any:  # the pad op's fallback lowering: empty, strided copy, border fill
        pad_kernel.ENABLED = False
        try:
            return exe.run([grad])
        finally:
            pad_kernel.ENABLED = True

    cases: dict[str, Callable[[], Any]] = {
        "opgraph": lambda: exe.run([grad]), "fallback": without_kernel,
        "F.pad": lambda: torch.nn.functional.pad(grad, (0, pad)),
        "cat": lambda: torch.cat([grad, zeros], dim=1), "inductor": lambda: compiled(grad)}
    source = torch.empty_like(padded)
    cases["copy"] = lambda: padded.copy_(source)  # the roofline: read and write the padded bytes once
    want = torch.nn.functional.pad(grad, (0, pad))
    for name in ("opgraph", "fallback", "cat", "inductor"):
        out = cases[name]()
        if not torch.equal(out[0] if isinstance(out, list) else out, want):
            raise SystemExit(f"pad {model} {dtype.name} {name}: differs from F.pad")
    samples = interleaved(cases, iters, repeats, torch.cuda.synchronize)
    ms = {name: 1e3 * statistics.median(s) for name, s in samples.items()}
    return [model, dtype.name, f"{t}x{v}->{v + pad}", *(f"{ms[c]:.3f}" for c in cases),
            f"{ms['copy'] / ms['opgraph']:.2f}"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="bert,gpt2", help="comma-separated: bert, gpt2")
    p.add_argument("--dtypes", default="bfloat16,float32", help="comma-separated: bfloat16, float16, float32")
    p.add_argument("--batch-tokens", type=int, default=8192, help="rows of the layer's input (batch x tokens)")
    p.add_argument("--hidden", type=int, default=768, help="the model's width")
    p.add_argument("--iters", type=int, default=20, help="calls timed together, each repeat")
    p.add_argument("--repeats", type=int, default=5, help="repeats per column, interleaved (the median is shown)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA device: padding is decided for cuBLAS")
    models = args.models.split(",")
    if any(m not in VOCABULARY for m in models):
        p.error(f"--models: choose from {sorted(VOCABULARY)}")
    known = {"bfloat16": og.bfloat16, "float16": og.float16, "float32": og.float32}
    if any(d not in known for d in args.dtypes.split(",")):
        p.error(f"--dtypes: choose from {sorted(known)}")
    torch.backends.cuda.matmul.allow_tf32 = True  # float32 products as the training bench runs them
    rows, pads = [], []
    for model in models:
        for dtype in (known[d] for d in args.dtypes.split(",")):
            for layout in LAYOUTS:
                r = bench(model, layout, dtype, args.batch_tokens, args.hidden, args.iters, args.repeats)
                ms = r["ms"]
                rows.append([r["model"], r["dtype"], r["shape"], layout,
                             *(f"{ms[c]:.3f}" for c in ("as is", "padded", "default", "inductor", "aligned")),
                             "pads" if r["default_pads"] else "as is", f"{ms['as is'] / ms['default']:.2f}",
                             f"{ms['inductor'] / ms['default']:.2f}", f"{ms['aligned'] / ms['default']:.2f}"])
                print(f"  {model} {dtype.name} {layout}: done", file=sys.stderr, flush=True)
            pads.append(pad_alone(model, dtype, args.batch_tokens, args.iters, args.repeats))
    print(f"GPU: {torch.cuda.get_device_name()}; times in ms (TF32 on for float32)")
    print(format_table(["model", "dtype", "M x K -> N", "product", "as is", "padded", "default", "inductor",
                        "aligned", "default chose", "vs as is", "vs inductor", "of aligned"], rows))
    print("\nthe gradient's pad alone (ms; 'of copy': a device copy of the padded bytes against opgraph's pad):")
    print(format_table(["model", "dtype", "pad", "opgraph", "fallback", "F.pad", "cat", "inductor", "copy", "of copy"],
                       pads))


if __name__ == "__main__":
    main()
