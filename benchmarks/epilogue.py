"""Bias + activation after a GEMM: which path is fastest (cuBLASLt epilogue, fused kernel, separate kernels)?

For each Linear shape ``x (M, K) @ weight.T (K, N) + bias (N)`` (weight stored (N, K) as in
``torch.nn.Linear``), dtype and activation (none, relu, gelu = erf form, gelu_tanh) we time:

* ``eager``: ``torch.mm``, then ``+ bias``, then the activation: three kernels;
* ``mm``: ``torch.mm`` alone, without the bias (what the GEMM costs where a following fused kernel takes the
  bias, as an elementwise op it reads anyway), checked with the bias and activation added afterwards;
* ``addmm``: ``torch.addmm(bias, x, w)`` (cuBLASLt's bias epilogue on CUDA), then the activation;
* ``addmm_act``: ``torch._addmm_activation`` (cuBLASLt's RELU_BIAS / GELU_BIAS epilogue on CUDA), only
  where it computes the same function: relu, and gelu in its tanh form on CUDA / erf form on the CPU;
* ``og fused``: opgraph with the epilogue pass off (``CompilationDescriptor(matmul_epilogues=False)``):
  matmul, then one generated Triton kernel for bias + activation (on the CPU only with ``--quick``,
  through Triton's interpreter);
* ``og epilogue``: opgraph with ``fusion=True`` and the pass on: one ``matmul_epilogue`` op;
* ``torch.compile``: ``torch.compile`` of ``eager`` (skipped with ``--quick`` on the CPU).

opgraph runs with ``cuda_graphs=False`` so that every column pays the same kernel launches. Every variant
is checked against ``eager`` first. Each time is the median over ``--repeats`` of the mean over
``--iters`` calls (synchronised before and after), variants interleaved in a rotating order; ratios
are the medians of the per-repeat ratios against ``eager`` (< 1: faster).

    python benchmarks/epilogue.py                          # CUDA when present, else CPU (120 cases)
    python benchmarks/epilogue.py --dtype bfloat16 --json bf16.json   # one dtype: fewer torch.compile builds
    python benchmarks/epilogue.py --device cpu --quick --json /tmp/epilogue.json
    python benchmarks/epilogue.py --dtype float32 --activation none --shape 1576,3072,768 --shape 8192,768,768
"""

from __future__ import annotations

import argparse
import importlib.util
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

# (name, M, K, N)
SHAPES: list[tuple[str, int, int, int]] = [
    ("8192x4096->4096", 8192, 4096, 4096),
    ("4096x1024->4096", 4096, 1024, 4096),
    ("bert-base ffn b64x128", 8192, 768, 3072),
    ("bert-base ffn-down b64x128", 8192, 3072, 768),
    ("bert-base attn-out b64x128", 8192, 768, 768),
    ("vit-b/16 ffn b8", 1576, 768, 3072),
    ("vit-b/16 ffn-down b8", 1576, 3072, 768),
    ("vit-b/16 ffn-down b1", 197, 3072, 768),
    ("resnet50 fc b64", 64, 2048, 1000),
    ("resnet50 fc b256", 256, 2048, 1000),
]
QUICK_SHAPES: list[tuple[str, int, int, int]] = [("tiny", 64, 32, 48), ("tiny fc", 8, 64, 10)]
DTYPES = {"float16": (torch.float16, og.float16), "bfloat16": (torch.bfloat16, og.bfloat16),
          "float32": (torch.float32, og.float32)}
QUICK_DTYPES = ["float32", "bfloat16"]
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh")
VARIANTS = ("eager", "mm", "addmm", "addmm_act", "og fused", "og epilogue", "torch.compile")
TORCH_ACT: dict[str, Callable[[torch.Tensor], torch.Tensor] | None] = {
    "none": None, "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda y: F.gelu(y, approximate="tanh")}
TOL = {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float32: 2e-3}


def _eager(act: str) -> Callable[..., torch.Tensor]:
    fn = TORCH_ACT[act]

    def eager(x: torch.Tensor, weight: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = torch.mm(x, weight.t()) + b
        return y if fn is None else fn(y)

    return eager


def _addmm(act: str) -> Callable[..., torch.Tensor]:
    fn = TORCH_ACT[act]
    if fn is None:
        return lambda x, weight, b: torch.addmm(b, x, weight.t())
    return lambda x, weight, b: fn(torch.addmm(b, x, weight.t()))


def _addmm_act(act: str, dev: og.Device) -> Callable[..., torch.Tensor] | None:
    """``_addmm_activation`` where it computes ``act`` exactly (its gelu is tanh on CUDA, erf on the CPU)."""
    gelu = "gelu_tanh" if dev.is_cuda else "gelu"
    if act not in ("relu", gelu) or not hasattr(torch, "_addmm_activation"):
        return None
    use_gelu = act != "relu"
    return lambda x, weight, b: torch._addmm_activation(b, x, weight.t(), use_gelu=use_gelu)


def _opgraph(m: int, k: int, n: int, dtype: og.DType, act: str, dev: og.Device, epilogue: bool,
             ) -> tuple[og.Executable, list[str]]:
    g = og.Graph()
    x = g.placeholder((m, k), dtype, name="x")
    weight = g.placeholder((n, k), dtype, name="weight")
    b = g.placeholder((n,), dtype, name="bias")
    y = g.matmul(x, g.transpose(weight, (1, 0))) + b
    if act == "relu":
        y = g.relu(y)
    elif act in ("gelu", "gelu_tanh"):
        y = g.gelu(y, approximate=act == "gelu_tanh")
    desc = og.CompilationDescriptor(fusion=True, cuda_graphs=False, triton_interpret=not dev.is_cuda,
                                    matmul_epilogues=epilogue)
    exe = g.compile({x: x.type, weight: weight.type, b: b.type}, [y], device=dev, descriptor=desc)
    ops = [o.op.name for o in exe.program.graph.ops if o.op.name not in ("placeholder", "transpose")]
    return exe, ops


def bench(dev: og.Device, shape: tuple[str, int, int, int], dtype_name: str, act: str, iters: int, repeats: int,
          compile_note: str, fused_note: str) -> dict[str, Any]:
    name, m, k, n = shape
    tdt, odt = DTYPES[dtype_name]
    gen = torch.Generator(device=dev.torch).manual_seed(0)
    x = torch.randn(m, k, generator=gen, device=dev.torch).to(tdt)
    weight = (torch.randn(n, k, generator=gen, device=dev.torch) / k ** 0.5).to(tdt)
    b = torch.randn(n, generator=gen, device=dev.torch).to(tdt)
    args = (x, weight, b)
    fns: dict[str, Callable[..., Any] | None] = {"eager": _eager(act), "mm": lambda x, w, _: torch.mm(x, w.t()),
                                                 "addmm": _addmm(act),
                                                 "addmm_act": _addmm_act(act, dev)}
    notes: dict[str, str] = {}
    if not fused_note:
        exe, ops = _opgraph(m, k, n, odt, act, dev, epilogue=False)
        fns["og fused"] = lambda *a, e=exe: e.run(list(a))[0]
        notes["og fused"] = " + ".join(ops)
    else:
        notes["og fused"] = fused_note
    exe, ops = _opgraph(m, k, n, odt, act, dev, epilogue=True)
    fns["og epilogue"] = lambda *a, e=exe: e.run(list(a))[0]
    notes["og epilogue"] = " + ".join(ops)
    if not compile_note:
        torch._dynamo.reset()  # one compiled function per case, never the recompile limit's eager fallback
        try:
            compiled = torch.compile(_eager(act))
            compiled(*args)
            fns["torch.compile"] = compiled
        except Exception as e:  # noqa: BLE001 - report the failure in the table, keep measuring the rest
            notes["torch.compile"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
    else:
        notes["torch.compile"] = compile_note

    def bound(f: Callable[..., Any]) -> Callable[[], Any]:  # a closure, not ``lambda f=f``: mypy cannot type those
        return lambda: f(*args)

    cases = {v: bound(f) for v, f in fns.items() if f is not None}
    want = cases["eager"]().float()
    act_fn = TORCH_ACT[act] or (lambda y: y)
    for v, fn in cases.items():
        got = (act_fn(fn() + b) if v == "mm" else fn()).float()
        if not torch.allclose(got, want, rtol=TOL[tdt], atol=TOL[tdt], equal_nan=True):
            err = (got - want).abs().max().item()
            raise SystemExit(f"epilogue: {v} disagrees with eager on {name} {dtype_name} {act} ({dev}): "
                             f"max abs error {err:.3g}")
    samples = interleaved(cases, iters, repeats, dev.synchronize)
    ms = {v: statistics.median(samples[v]) * 1e3 if v in samples else None for v in VARIANTS}
    ratio = {v: statistics.median(a / e for a, e in zip(samples[v], samples["eager"], strict=True))
             if v in samples else None for v in VARIANTS}
    best = min((v for v in samples if v != "mm"), key=lambda v: statistics.median(samples[v]))  # mm: no bias
    return {"device": str(dev), "shape": name, "m": m, "k": k, "n": n, "dtype": dtype_name, "activation": act,
            "iters": iters, "repeats": repeats, "best": best,
            **{f"{_key(v)}_ms": ms[v] for v in VARIANTS}, **{f"{_key(v)}_vs_eager": ratio[v] for v in VARIANTS},
            "og_epilogue_vs_og_fused": (statistics.median(a / f for a, f in zip(samples["og epilogue"],
                                                                                 samples["og fused"], strict=True))
                                        if "og fused" in samples else None),
            "notes": notes}


def _key(variant: str) -> str:
    return variant.replace(" ", "_").replace(".", "_")


def table(results: list[dict[str, Any]]) -> str:
    headers = ["device", "shape", "dtype", "act", *(f"{v} ms" for v in VARIANTS),
               *(f"{v}/eager" for v in VARIANTS[1:]), "best"]
    num = lambda v, f: "-" if v is None else format(v, f)
    rows = [[r["device"], f"{r['shape']} ({r['m']}x{r['k']}->{r['n']})", r["dtype"], r["activation"],
             *(num(r[f"{_key(v)}_ms"], ".3f") for v in VARIANTS),
             *(num(r[f"{_key(v)}_vs_eager"], ".3f") for v in VARIANTS[1:]), r["best"]] for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i < 4 or i == len(cells) - 1 else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
    return "\n".join([fmt(headers), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)])


def conclusion(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for act in ACTIVATIONS:
        rs = [r for r in results if r["activation"] == act]
        if not rs:
            continue
        wins: dict[str, int] = {}
        for r in rs:
            wins[r["best"]] = wins.get(r["best"], 0) + 1
        ratios = [r["og_epilogue_vs_og_fused"] for r in rs if r["og_epilogue_vs_og_fused"] is not None]
        vs = (f"; og epilogue / og fused: median {statistics.median(ratios):.3f} "
              f"(< 1 in {sum(x < 1 for x in ratios)} of {len(ratios)})") if ratios else ""
        lines.append(f"{act}: fastest " + ", ".join(f"{v} x{c}" for v, c in sorted(wins.items(), key=lambda i: -i[1]))
                     + vs)
    return lines


def _compile_note(choice: str, quick: bool, dev: og.Device) -> str:
    if choice == "no":
        return "skipped: --torch-compile no"
    if choice == "auto" and quick and not dev.is_cuda:
        return "skipped: --quick on the CPU (--torch-compile yes to measure)"
    return ""


def _shape(text: str) -> tuple[str, int, int, int]:
    try:
        m, k, n = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected M,K,N (three integers), got {text!r}") from None
    return (f"{m}x{k}->{n}", m, k, n)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", help="cpu, cuda, cuda:N (default: cuda when present, else cpu)")
    p.add_argument("--quick", action="store_true", help="tiny shapes and few iterations (a smoke run)")
    p.add_argument("--dtype", action="append", choices=sorted(DTYPES), help="repeatable (default: all; "
                   f"{', '.join(QUICK_DTYPES)} with --quick)")
    p.add_argument("--activation", action="append", choices=ACTIVATIONS, help="repeatable (default: all)")
    p.add_argument("--iters", type=int, default=None, help="calls per repeat (default 20; 2 with --quick)")
    p.add_argument("--repeats", type=int, default=None, help="repeats; the median is reported (default 7; 2 quick)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--torch-compile", choices=("auto", "yes", "no"), default="auto",
                   help="measure torch.compile (auto: yes, except with --quick on the CPU)")
    p.add_argument("--shape", action="append", type=_shape, metavar="M,K,N",
                   help="a Linear shape x (M, K) -> (M, N); repeatable, replaces the default shapes")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = p.parse_args(argv)
    iters, repeats, dev = common_arguments(p, args, (2, 20), (2, 7))
    compile_note = _compile_note(args.torch_compile, args.quick, dev)
    # generated kernels need CUDA; on the CPU only tiny shapes go through Triton's interpreter
    fused_note = "" if dev.is_cuda or args.quick else "skipped: Triton on the CPU only with --quick"
    if not fused_note and importlib.util.find_spec("triton") is None:
        fused_note = "skipped: Triton is not installed"
    dtypes = args.dtype or (QUICK_DTYPES if args.quick else list(DTYPES))
    results = [bench(dev, shape, dt, act, iters, repeats, compile_note, fused_note)
               for shape in (args.shape or (QUICK_SHAPES if args.quick else SHAPES)) for dt in dtypes
               for act in (args.activation or ACTIVATIONS)]
    lt_nan = None
    if dev.is_cuda:
        from opgraph.ops.epilogue import _lt_relu_keeps_nan

        lt_nan = {dt: _lt_relu_keeps_nan(dev.torch, DTYPES[dt][0]) for dt in dtypes}
    print(f"opgraph {og.__version__}, torch {torch.__version__}, Python {platform.python_version()}, "
          f"{torch.get_num_threads()} CPU threads; median of {repeats} x {iters} calls")
    print(table(results))
    print("ratios < 1: faster than eager; '-': not measured (see the JSON notes)")
    for line in conclusion(results):
        print(line)
    if lt_nan is not None:
        print("cuBLASLt relu epilogue keeps NaN (opgraph uses it only then): "
              + ", ".join(f"{dt} {'yes' if v else 'no'}" for dt, v in lt_nan.items()))
    if args.json:
        meta = {"opgraph": og.__version__, "torch": torch.__version__, "python": platform.python_version(),
                "quick": args.quick, "device": str(dev), "lt_relu_keeps_nan": lt_nan}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
