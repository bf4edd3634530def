"""Kernel fusion ("stitching"): opgraph's generated Triton kernels against eager PyTorch, torch.compile and
the copy bandwidth, all measured in the same run. Sections (``--only``, comma-separated; default all):

* copy: the roofline, ``dst.copy_(src)`` on ``--copy-mib``, best of the repeats, GB/s of bytes read + written
  (measured whenever chains or norms run);
* chains: elementwise chains of 3..8 ops (chain-n: the first n of x*0.5, +y, tanh, *1.5, exp, maximum(., y),
  sigmoid, +0.25; y a second input) on float32 and bfloat16 vectors of ``--mib`` MiB;
* norms: softmax, log_softmax, layer_norm (gamma, beta), rms_norm (gamma) over the last axis of
  (``--mib`` MiB / width, width) matrices for each of ``--widths``;
* tiny: benchmarks/overhead.py's chain of ``--tiny-ops`` tiny ops: opgraph's CUDA-graph replay, unfused and
  fused, against the same torch calls captured by hand in a ``torch.cuda.CUDAGraph`` (overhead.py's code);
* resnet: benchmarks/training.py's ResNet-18-like training step, fused against unfused and eager.

``og ms``: ``exe.run`` of ``CompilationDescriptor(fusion=True, cuda_graphs=False)`` (kernels launched
directly); ``og+graph ms``: the same replayed from a CUDA graph (the default), whose static buffers cost a
copy in and a copy out per run. ``kernels (generated)``: kernels a run launches. GB/s counts the inputs read
once and the output written once; ``of copy`` divides it by the copy bandwidth; ``vs X`` is X ms / opgraph
ms (> 1: opgraph faster). Times: medians of ``--repeats`` interleaved calls after ``--warmup`` ones; on a
GPU, device time with a cold L2 (each call queued behind an L2-evicting memset and a spinning kernel, so
host launch work overlaps; the ``tiny`` section measures the host side); torch.compile's compiling is left
out (its seconds are in the log and the JSON). Each opgraph result is checked once against PyTorch in
float32: a failing row says FAIL and the exit status is 1.
On the CPU fused kernels run in Triton's interpreter, far too slow for real sizes: the CPU takes --quick only.

    python benchmarks/fusion.py                                   # CUDA, 256 MiB tensors, all sections
    python benchmarks/fusion.py --only chains,norms --json /tmp/fusion.json
    python benchmarks/fusion.py --quick --device cpu --only chains,tiny         # a smoke run: seconds
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import gc
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

import opgraph as og
from opgraph.cli._table import format_table

SECTIONS = ("copy", "chains", "norms", "tiny", "resnet")
TARGET_OF_COPY = 0.85     # chains and norms: of the copy bandwidth
TARGET_VS_COMPILE = 1.0   # ... and torch.compile ms / opgraph ms
TARGET_TINY_VS_RAW = 1.1  # tiny: opgraph replay / raw CUDA graph
DTYPES = {"float32": (og.float32, torch.float32), "bfloat16": (og.bfloat16, torch.bfloat16)}
QUIET = ("placeholder", "constant", "variable", "read", "assign")  # ops that launch nothing
TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2}  # rtol; atol is this times max |reference|

# chain steps, one lambda for both sides: ``m`` is the og.Graph or the torch module (same method names)
STEPS: tuple[tuple[str, Callable[[Any, Any, Any], Any]], ...] = (
    ("x*0.5", lambda m, v, y: v * 0.5), ("+y", lambda m, v, y: v + y), ("tanh", lambda m, v, y: m.tanh(v)),
    ("*1.5", lambda m, v, y: v * 1.5), ("exp", lambda m, v, y: m.exp(v)),
    ("maximum(., y)", lambda m, v, y: m.maximum(v, y)), ("sigmoid", lambda m, v, y: m.sigmoid(v)),
    ("+0.25", lambda m, v, y: v + 0.25),
)


def _chain(m: Any, x: Any, y: Any, n: int) -> Any:
    for _, step in STEPS[:n]:
        x = step(m, x, y)
    return x


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, x.shape[-1:], w, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


# name: (parameters of the width, opgraph builder, torch function)
NORMS: dict[str, tuple[int, Callable[..., Any], Callable[..., Any]]] = {
    "softmax": (0, lambda g, x: g.softmax(x, -1), lambda x: torch.softmax(x, -1)),
    "log_softmax": (0, lambda g, x: g.log_softmax(x, -1), lambda x: torch.log_softmax(x, -1)),
    "layer_norm": (2, lambda g, x, w, b: g.layer_norm(x, -1, w, b, 1e-5),
                   lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5)),
    "rms_norm": (1, lambda g, x, w: g.rms_norm(x, -1, w, 1e-6), lambda x, w: _rms_norm(x, w, 1e-6)),
}


@dataclass
class Ctx:
    dev: og.Device
    quick: bool
    nbytes: int  # chains and norms: bytes of the main input
    copy_bytes: int
    widths: tuple[int, ...]
    warmup: int
    repeats: int
    tiny_ops: int
    tiny_iters: int
    compile_note: str  # non-empty: torch.compile is skipped, and why
    copy_gbps: float | None = None  # set by copy_bandwidth
    dtypes: tuple[str, ...] = tuple(DTYPES)  # chains and norms
    norm_ops: tuple[str, ...] = tuple(NORMS)

    def log(self, msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)


def _sibling(name: str) -> ModuleType:
    """benchmarks/<name>.py, imported once (benchmarks/ is not a package)."""
    key = f"opgraph_benchmarks_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).resolve().parent / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # before running it: dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[key]


def descriptor(dev: og.Device, cuda_graphs: bool = True) -> og.CompilationDescriptor:
    return og.CompilationDescriptor(fusion=True, triton_interpret=dev.kind == "cpu", cuda_graphs=cuda_graphs)


_FLUSH: dict[str, torch.Tensor] = {}
SLEEP_CYCLES = 1_000_000  # ~0.5 ms of a spinning kernel: longer than a kernel launch's host-side work
CYCLES_PER_MS = 2_000_000  # an H200's SMs run at up to 1.98 GHz: a spin of this many cycles lasts >= ~1 ms
MAX_SLEEP_CYCLES = 100_000_000  # ~50 ms: a warm-up call that stalled (a recompile, a GC pause) must not set it


def int_pairs(text: str, what: str) -> list[tuple[int, int]]:
    """Comma-separated AxB pairs of positive integers, for an argparse type; ``what`` names them in the error."""
    try:
        pairs = [tuple(int(v) for v in s.lower().split("x")) for s in text.split(",")]
    except ValueError:
        pairs = []
    if not pairs or any(len(p) != 2 or min(p) <= 0 for p in pairs):
        raise argparse.ArgumentTypeError(f"takes {what}, got {text!r}")
    return [(a, b) for a, b in pairs]


@dataclass
class RegionCase:
    """One generated kernel's region and its arguments: what the configuration sweeps time."""

    ops: list[og.Operation]
    inputs: list[og.Tensor]
    outputs: list[og.Tensor]
    feed: list[torch.Tensor]  # the kernel's arguments, in the order of ``inputs``
    nbytes: int  # bytes a kernel must move


def region_case(outputs: list[og.Tensor], values: dict[int, torch.Tensor], device: str,
                nbytes: int | None = None) -> RegionCase:
    """The region computing ``outputs`` (``region_of``), fed from ``values`` (by ``id`` of each placeholder) and the
    constants it reads. ``nbytes`` defaults to the bytes of the inputs and the outputs."""
    from opgraph.codegen.triton.kernel import region_of

    ops, inputs = region_of(outputs)
    feed: list[torch.Tensor] = []
    for t in inputs:  # placeholders, and the constants the region reads
        v = values.get(id(t), t.op.payload)
        assert v is not None, f"input {t} is neither a placeholder nor a constant"
        feed.append(v.to(device))
    if nbytes is None:  # DType.itemsize is a float (sub-byte dtypes): a float sum, rounded down once
        moved: float = sum(v.numel() * v.element_size() for v in feed)
        moved += sum(math.prod(int(d or 0) for d in o.shape) * o.dtype.itemsize for o in outputs)
        nbytes = int(moved)
    return RegionCase(ops, inputs, outputs, feed, int(nbytes))


def copy_roofline(dev: og.Device, repeats: int, note: str = "") -> float:
    """The device copy bandwidth in GB/s (1 GiB copied, best of ``repeats``), printed with the GPU's name."""
    gbps = float(copy_bandwidth(Ctx(dev, False, 0, 2**30, (), 2, repeats, 0, 0, ""))["best_gbps"])
    print(f"copy bandwidth (roofline): {gbps:.0f} GB/s, {torch.cuda.get_device_name()}{note}", flush=True)
    return gbps


def cuda_device(parser: argparse.ArgumentParser) -> og.Device:
    """The CUDA device of a script that times kernels (a parser error without one); warnings silenced."""
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device: the kernels' times are the point")
    warnings.simplefilter("ignore")
    return og.device("cuda")


def positive_ints(text: str) -> tuple[int, ...]:
    """Comma-separated positive integers, for an argparse type."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def names_of(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated names, each one of ``choices``."""
    def parse(text: str) -> list[str]:
        names = text.split(",")
        unknown = [n for n in names if n not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}: choose from {', '.join(choices)}")
        return names
    return parse


def channel_shapes(text: str) -> list[tuple[int, int]]:
    """``--shapes`` of the batch-norm benchmarks: comma-separated CxS pairs (C channels of S x S), an argparse type."""
    return int_pairs(text, "CxS pairs such as 64x56,512x28")


def measure(fns: dict[str, Callable[[], Any]], dev: og.Device, warmup: int, repeats: int) -> dict[str, list[float]]:
    """Milliseconds of each call: ``warmup`` untimed rounds, then ``repeats`` rounds, the order rotating so
    that no function always runs first. On a GPU this is device time with a cold L2, as ``triton.testing``
    measures it: each call is queued behind a 256 MiB memset (which evicts the L2) and a spinning kernel
    (so the host's launch work happens while the GPU is busy), between CUDA events. The spin lasts at least
    twice the slowest call's host time in the last warm-up round (0.5 ms without warm-up; at most ~50 ms): a
    compiled training step can take a millisecond of Python, which would otherwise be timed as device time.
    Calls whose host work still outlasted the spin are counted and reported on stderr. Host-side cost is what
    the ``tiny`` section measures."""
    host_ms = 0.0
    for _ in range(warmup):
        dev.synchronize()
        host_ms = 0.0
        for fn in fns.values():
            t0 = time.perf_counter()
            fn()
            host_ms = max(host_ms, (time.perf_counter() - t0) * 1e3)
    dev.synchronize()
    sleep_cycles = min(MAX_SLEEP_CYCLES, max(SLEEP_CYCLES, int(host_ms * 2 * CYCLES_PER_MS)))
    late = 0
    flush = None
    if dev.is_cuda:
        flush = _FLUSH.setdefault(str(dev.torch), torch.empty(64 * 2**20, dtype=torch.float32, device=dev.torch))
    start, end = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if dev.is_cuda \
        else (None, None)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    for r in range(repeats if fns else 0):
        for k in order[r % len(order):] + order[:r % len(order)]:
            t0 = time.perf_counter()
            if start is not None and end is not None and flush is not None:
                flush.zero_()
                torch.cuda._sleep(sleep_cycles)
                start.record()
                fns[k]()
                end.record()
                late += (time.perf_counter() - t0) * 1e3 > sleep_cycles / CYCLES_PER_MS
                end.synchronize()
                samples[k].append(start.elapsed_time(end))
            else:
                fns[k]()
                samples[k].append((time.perf_counter() - t0) * 1e3)
    if late:
        print(f"measure: in {late} of {repeats * len(fns)} timed calls the host outlasted the spin ahead of them; "
              "those times include host time", file=sys.stderr)
    return samples


def _error(e: BaseException) -> str:
    first = str(e).splitlines()[0][:100] if str(e) else ""
    return f"{type(e).__name__}: {first}"


def _check(got: torch.Tensor, reference: torch.Tensor, dtype: str) -> tuple[bool, float]:
    if got.shape != reference.shape:
        return False, float("inf")
    tol, got = TOLERANCE[dtype], got.float()
    return (torch.allclose(got, reference, rtol=tol, atol=tol * float(reference.abs().max())),
            float((got - reference).abs().max()))


def _kernels(exe: og.Executable) -> tuple[int, int]:
    """Kernels a run launches, and how many of them are generated."""
    try:
        ks = exe.kernels()
        return len(ks), sum(k.source is not None for k in ks)
    except TypeError:  # exe.kernels() trips over ops with an int ``steps`` attribute (multi-tensor SGD)
        names = [o.op.name for o in exe.program.graph.ops if o.op.name not in QUIET]
        return len(names), sum(n.startswith("fused_") for n in names)


def _tuned(exe: og.Executable) -> list[str]:
    """The launch configurations the tuner chose for the executable's generated kernels (CUDA only)."""
    try:
        return [str(choice) for k in exe.kernels() for choice in k.tuned]
    except TypeError:  # as in ``_kernels``
        return []


def _free(dev: og.Device) -> None:  # a finished case's executables and CUDA-graph pools, before the next
    gc.collect()
    if dev.is_cuda:
        torch.cuda.empty_cache()


# ---- sections -------------------------------------------------------------------------------------------
def copy_bandwidth(ctx: Ctx) -> dict[str, Any]:
    src = torch.ones(ctx.copy_bytes, dtype=torch.uint8, device=ctx.dev.torch)
    dst = torch.empty_like(src)
    ctx.log(f"copy: {ctx.copy_bytes / 2**20:.0f} MiB")
    ms = measure({"copy": lambda: dst.copy_(src)}, ctx.dev, ctx.warmup, max(ctx.repeats, 5))["copy"]
    best, med = min(ms), statistics.median(ms)
    ctx.copy_gbps = 2 * ctx.copy_bytes / best / 1e6
    return {"bytes": ctx.copy_bytes, "best_ms": best, "median_ms": med, "best_gbps": ctx.copy_gbps,
            "median_gbps": 2 * ctx.copy_bytes / med / 1e6}


def run_case(ctx: Ctx, section: str, case: str, dtype: str, og_fn: Callable[..., Any],
             torch_fn: Callable[..., Any], inputs: list[torch.Tensor]) -> dict[str, Any]:
    """One row: opgraph (direct launch and CUDA-graph replay), eager and torch.compile on ``inputs``."""
    dev = ctx.dev
    out_bytes = inputs[0].numel() * inputs[0].element_size()
    nbytes = sum(t.numel() * t.element_size() for t in inputs) + out_bytes
    row: dict[str, Any] = {"section": section, "case": case, "dtype": dtype, "shape": list(inputs[0].shape),
                           "bytes": nbytes, "check": "ok"}
    ctx.log(f"{section}: {case} {dtype} {tuple(inputs[0].shape)}")
    reference = torch_fn(*(t.float() for t in inputs))
    fns: dict[str, Callable[[], Any]] = {}
    try:
        g = og.Graph()
        phs = [g.placeholder(tuple(t.shape), DTYPES[dtype][0], name=f"in{i}") for i, t in enumerate(inputs)]
        out = og_fn(g, *phs)
        feeds = {p: p.type for p in phs}
        variants = {"og": descriptor(dev, cuda_graphs=False)}
        if dev.is_cuda:
            variants["og_graph"] = descriptor(dev)
        for key, desc in variants.items():
            t0 = time.perf_counter()
            exe = g.compile(feeds, [out], device=dev, descriptor=desc)
            (got,) = exe.run(inputs)  # loads (and on a GPU compiles) the kernels; captures the CUDA graph
            dev.synchronize()
            row[f"{key}_compile_s"] = time.perf_counter() - t0
            ok, err = _check(got, reference, dtype)
            row["max_abs_err"] = max(err, row.get("max_abs_err", 0.0))
            if not ok:
                row["check"] = "FAIL"
            fns[key] = functools.partial(exe.run, inputs)
            row["kernels"], row["generated_kernels"] = _kernels(exe)
            if key == "og":  # what the tuner chose on that first run
                row["tuned"] = _tuned(exe)
                for choice in row["tuned"]:
                    ctx.log(f"  tuned: {choice}")
    except Exception as e:  # noqa: BLE001 (a failing case is reported in its row; variants that ran are timed)
        row["check"] = f"ERROR: {_error(e)}"
    if row["check"] == "FAIL":
        row["check"] = f"FAIL (max abs err {row['max_abs_err']:.2g})"
    del reference
    fns["eager"] = lambda: torch_fn(*inputs)
    if ctx.compile_note:
        row["compile_note"] = ctx.compile_note
    else:
        try:
            import torch._dynamo

            torch._dynamo.reset()  # a fresh compile per case: no recompile limit, no automatic dynamic shapes
            compiled = torch.compile(torch_fn, dynamic=False)
            t0 = time.perf_counter()
            compiled(*inputs)
            dev.synchronize()
            row["torch_compile_s"] = time.perf_counter() - t0
            ctx.log(f"  torch.compile: {row['torch_compile_s']:.1f} s")
            fns["compile"] = lambda: compiled(*inputs)
        except Exception as e:  # noqa: BLE001
            row["compile_note"] = f"skipped: {_error(e)}"
            ctx.log(f"  torch.compile {row['compile_note']}")
    ms = {k: statistics.median(v) for k, v in measure(fns, dev, ctx.warmup, ctx.repeats).items()}
    og_ms = ms.get("og")
    row.update(og_ms=og_ms, og_graph_ms=ms.get("og_graph"), eager_ms=ms["eager"], compile_ms=ms.get("compile"))
    row["og_gbps"] = nbytes / og_ms / 1e6 if og_ms else None
    row["of_copy"] = row["og_gbps"] / ctx.copy_gbps if row["og_gbps"] and ctx.copy_gbps else None
    row["vs_eager"] = ms["eager"] / og_ms if og_ms else None
    row["vs_compile"] = ms["compile"] / og_ms if og_ms and "compile" in ms else None
    # each miss with its margin: a tie at the roofline (0.998x) reads differently from a loss (0.9x)
    misses = [m for m, bad in ((f"bandwidth ({row['of_copy'] or 0:.3f} of copy)",
                                row["of_copy"] is not None and row["of_copy"] < TARGET_OF_COPY),
                               (f"slower than compile ({row['vs_compile'] or 0:.3f}x)",
                                row["vs_compile"] is not None and row["vs_compile"] < TARGET_VS_COMPILE)) if bad]
    row["target"] = "-" if og_ms is None or not dev.is_cuda else ("met" if not misses else "miss: " + ", ".join(misses))
    return row


def chains(ctx: Ctx) -> list[dict[str, Any]]:
    rows = []
    for dtype in ctx.dtypes:
        tdt = DTYPES[dtype][1]
        numel = ctx.nbytes // torch.empty((), dtype=tdt).element_size()
        x = torch.randn(numel, dtype=tdt, device=ctx.dev.torch)
        y = torch.randn(numel, dtype=tdt, device=ctx.dev.torch)
        for n in range(3, len(STEPS) + 1):
            rows.append(run_case(ctx, "chains", f"chain-{n}", dtype, lambda g, a, b, n=n: _chain(g, a, b, n),
                                 lambda a, b, n=n: _chain(torch, a, b, n), [x, y]))
            _free(ctx.dev)
    return rows


def norms(ctx: Ctx) -> list[dict[str, Any]]:
    rows = []
    for dtype in ctx.dtypes:
        tdt = DTYPES[dtype][1]
        numel = ctx.nbytes // torch.empty((), dtype=tdt).element_size()
        for width in ctx.widths:
            x = torch.randn(max(1, numel // width), width, dtype=tdt, device=ctx.dev.torch)
            w = (torch.rand(width, device=ctx.dev.torch) + 0.5).to(tdt)
            b = (torch.randn(width, device=ctx.dev.torch) * 0.1).to(tdt)
            for name in ctx.norm_ops:
                params, og_fn, torch_fn = NORMS[name]
                rows.append(run_case(ctx, "norms", name, dtype, og_fn, torch_fn, [x, w, b][:1 + params]))
                _free(ctx.dev)
    return rows


def tiny(ctx: Ctx) -> list[dict[str, Any]]:
    """overhead.py's graph and hand-captured CUDA graph; opgraph unfused (overhead.build's) and fused."""
    ov = _sibling("overhead")
    dev = ctx.dev
    ctx.log(f"tiny: {ctx.tiny_ops} ops")
    g, x, y, plain, direct = ov.build(ctx.tiny_ops, dev)
    fused = g.compile({x: x.type}, [y], device=dev, descriptor=descriptor(dev))
    inp = torch.rand(ov.SIZE, device=dev.torch)
    expected = direct(inp)
    check = "ok" if all(torch.allclose(e.run([inp])[0], expected, rtol=1e-4, atol=1e-6) for e in (plain, fused)) \
        else "FAIL"
    cases: dict[str, Callable[[], Any]] = {"direct": lambda: direct(inp), "og": lambda: plain.run([inp]),
                                           "og_fused": lambda: fused.run([inp])}
    if dev.is_cuda:
        cases["raw_graph"] = ov.raw_cuda_graph(direct, inp)
    sync = dev.synchronize if dev.kind != "cpu" else None
    rows = []
    for per_call_sync in ([False, True] if dev.is_cuda else [False]):
        for fn in cases.values():  # warm up (captures the CUDA graphs)
            ov.time_calls(fn, max(2, ctx.tiny_iters // 10), sync, per_call_sync)
        samples: dict[str, list[float]] = {k: [] for k in cases}
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            order = list(cases)
            for r in range(ctx.repeats):
                for k in order[r % len(order):] + order[:r % len(order)]:
                    samples[k].append(ov.time_calls(cases[k], ctx.tiny_iters, sync, per_call_sync))
        finally:
            if gc_was_enabled:
                gc.enable()
        us = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
        raw = "raw_graph" in samples
        rows.append({
            "device": str(dev), "mode": "cpu" if sync is None else ("sync" if per_call_sync else "host"),
            "ops": ov.compute_ops(plain), "og_kernels": _kernels(plain)[0], "fused_kernels": _kernels(fused)[0],
            "iters": ctx.tiny_iters, "direct_us": us["direct"], "raw_graph_us": us.get("raw_graph"),
            "og_us": us["og"], "og_fused_us": us["og_fused"],
            "og_vs_raw": ov._median_ratio(samples["og"], samples["raw_graph"]) if raw else None,
            "fused_vs_raw": ov._median_ratio(samples["og_fused"], samples["raw_graph"]) if raw else None,
            "cuda_graph": plain.cuda_graph_status, "fused_cuda_graph": fused.cuda_graph_status, "check": check})
    return rows


def resnet(ctx: Ctx) -> list[dict[str, Any]]:
    """training.py's network and steps: opgraph unfused and fused, and eager PyTorch, interleaved."""
    tr = _sibling("training")
    dev = ctx.dev
    size = {"batch": 8, "image": 16, "width": 8} if ctx.quick else {"batch": 64, "image": 32, "width": 64}
    cfg = tr.Config(**size, classes=10, seed=0)
    ctx.log(f"resnet: batch {cfg.batch}, {cfg.image}x{cfg.image} images, width {cfg.width}")
    reference = tr.torch_model(cfg)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    xb = torch.randn(cfg.batch, 3, cfg.image, cfg.image, generator=gen).to(dev.torch)
    yb = torch.randint(0, cfg.classes, (cfg.batch,), generator=gen).to(dev.torch)
    steps: dict[str, Callable[[], Any]] = {}
    rows: dict[str, dict[str, Any]] = {}
    og_step = lambda fusion: tr.opgraph_step(tr.Config(**size, classes=10, seed=0, fusion=fusion), reference, dev)[0]
    makers: dict[str, Callable[[], Any]] = {
        "opgraph": lambda: og_step(False), "opgraph fused": lambda: og_step(True),
        "eager PyTorch": lambda: tr.torch_step(copy.deepcopy(reference).to(dev.torch), compiled=False)}
    for name, make in makers.items():
        row: dict[str, Any] = {"device": str(dev), "implementation": name, **size, "check": "ok"}
        rows[name] = row
        t0 = time.perf_counter()
        try:
            fn = make()
            row["first_loss"] = float(fn(xb, yb))  # from the shared initial weights (compiles)
            dev.synchronize()
        except Exception as e:  # noqa: BLE001
            row["check"] = f"ERROR: {_error(e)}"
            continue
        ctx.log(f"  {name}: ready in {time.perf_counter() - t0:.1f} s")
        exe = getattr(fn, "executable", None)
        if exe is not None:
            row["kernels"], row["generated_kernels"] = _kernels(exe)
            row.update(ops=len(exe.program.graph.ops), cuda_graph=exe.cuda_graph_status)
        steps[name] = functools.partial(fn, xb, yb)
    ms = {k: statistics.median(v) for k, v in measure(steps, dev, ctx.warmup, max(ctx.repeats, 3)).items()}
    eager_loss = rows["eager PyTorch"].get("first_loss")
    for name, row in rows.items():
        row["ms_per_step"] = ms.get(name)
        row["images_per_s"] = cfg.batch / ms[name] * 1e3 if name in ms else None
        row["vs_unfused"] = ms["opgraph"] / ms[name] if name in ms and "opgraph" in ms else None
        row["vs_eager"] = ms["eager PyTorch"] / ms[name] if name in ms and "eager PyTorch" in ms else None
        loss = row.get("first_loss")
        if loss is not None and eager_loss is not None and abs(loss - eager_loss) > 1e-3 * max(1.0, abs(eager_loss)):
            row["check"] = "FAIL (first loss differs from eager)"
    if not dev.is_cuda:
        rows["opgraph fused"]["note"] = "fusion needs CUDA: no generated kernels on the CPU"
    return list(rows.values())


# ---- output ---------------------------------------------------------------------------------------------
def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def case_table(rows: Sequence[dict[str, Any]]) -> str:
    headers = ["case", "dtype", "shape", "kernels (generated)", "og ms", "og+graph ms", "eager ms", "compile ms",
               "og GB/s", "of copy", "vs eager", "vs compile", "check", "target"]
    cells = [[r["case"], r["dtype"], "x".join(map(str, r["shape"])),
              f"{r['kernels']} ({r['generated_kernels']})" if "kernels" in r else "-",
              _f(r["og_ms"], ".3f"), _f(r["og_graph_ms"], ".3f"), _f(r["eager_ms"], ".3f"), _f(r["compile_ms"], ".3f"),
              _f(r["og_gbps"], ".0f"), _f(r["of_copy"], ".2f"), _f(r["vs_eager"], ".2f"), _f(r["vs_compile"], ".2f"),
              r["check"], r["target"]] for r in rows]
    return format_table(headers, cells, align="<<<>>>>>>>>><<")


def tiny_table(rows: Sequence[dict[str, Any]]) -> str:
    headers = ["mode", "ops", "direct torch us", "raw CUDA graph us", "og us", "og kernels", "og / raw",
               "og fused us", "fused kernels", "fused / raw", "check"]
    cells = [[r["mode"], r["ops"], _f(r["direct_us"], ".1f"), _f(r["raw_graph_us"], ".1f"), _f(r["og_us"], ".1f"),
              r["og_kernels"], _f(r["og_vs_raw"], ".3f"), _f(r["og_fused_us"], ".1f"), r["fused_kernels"],
              _f(r["fused_vs_raw"], ".3f"), r["check"]] for r in rows]
    return format_table(headers, cells, align="<>>>>>>>>><")


def resnet_table(rows: Sequence[dict[str, Any]]) -> str:
    headers = ["implementation", "ops", "kernels (generated)", "ms/step", "images/s", "vs unfused", "vs eager",
               "first loss", "check", "note"]
    cells = [[r["implementation"], r.get("ops", "-"),
              f"{r['kernels']} ({r['generated_kernels']})" if "kernels" in r else "-",
              _f(r.get("ms_per_step"), ".2f"), _f(r.get("images_per_s"), ".0f"), _f(r.get("vs_unfused"), ".2f"),
              _f(r.get("vs_eager"), ".2f"), _f(r.get("first_loss"), ".4f"), r["check"], r.get("note", "")]
             for r in rows]
    return format_table(headers, cells, align="<>>>>>>><<")


def _device_name(dev: og.Device) -> str:
    if dev.is_cuda:
        return f"{torch.cuda.get_device_name(dev.torch)} ({dev})"
    return f"CPU {platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


def _triton_version() -> str:
    try:
        import triton

        return str(triton.__version__)
    except ImportError:
        return "not installed"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="cuda (default when present), cuda:N, or cpu (needs --quick)")
    p.add_argument("--only", default=",".join(SECTIONS), metavar="SECTIONS",
                   help=f"comma-separated sections to run, of: {', '.join(SECTIONS)} (default: all)")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few repeats: a smoke run")
    p.add_argument("--mib", type=float, default=None,
                   help="chains and norms: MiB of the main input (default 256; --quick: 4, 1/64 on the CPU)")
    p.add_argument("--copy-mib", type=float, default=None, help="copy buffer MiB (default 1024; --quick: 16)")
    p.add_argument("--widths", default=None,
                   help="norms: row widths (default 4096,32768,262144; --quick: 1024,4096, 256,1024 on the CPU)")
    p.add_argument("--norms", default=",".join(NORMS), help="norms: comma-separated, of " + ", ".join(NORMS))
    p.add_argument("--dtypes", default=",".join(DTYPES), help="chains and norms: comma-separated, of "
                   + ", ".join(DTYPES))
    p.add_argument("--repeats", type=int, default=None, help="timed calls of each (default 20; --quick 3)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls of each first (default 3; --quick 1)")
    p.add_argument("--tiny-ops", type=int, default=None, help="tiny: ops in the chain (default 100; --quick 20)")
    p.add_argument("--tiny-iters", type=int, default=None, help="tiny: calls per repeat (default 200; --quick 5)")
    p.add_argument("--torch-compile", choices=("auto", "yes", "no"), default="auto",
                   help="measure torch.compile (auto: yes, except on the CPU)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for PyTorch (--quick on the CPU: 1)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    if not sections or any(s not in SECTIONS for s in sections):
        p.error(f"--only takes a comma-separated list of {', '.join(SECTIONS)}; got {args.only!r}")
    try:
        dev = og.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except og.DeviceError as e:
        p.error(str(e))
    if dev.kind not in ("cuda", "cpu"):
        p.error(f"--device: cuda or cpu, got {dev}")
    cpu = dev.kind == "cpu"
    if cpu and not args.quick:
        p.error("on the CPU the fused kernels run in Triton's interpreter: use --quick (tiny sizes)")
    if cpu:  # before anything imports triton, which reads it then (and when it decorates the helpers)
        os.environ["TRITON_INTERPRET"] = "1"
    quick = args.quick
    mib = args.mib or (1 / 64 if cpu else 4 if quick else 256)
    widths = tuple(int(w) for w in args.widths.split(",")) if args.widths else (
        (256, 1024) if cpu else (1024, 4096) if quick else (4096, 32768, 262144))
    note = ("skipped: --torch-compile no" if args.torch_compile == "no" else
            "skipped on the CPU (--torch-compile yes)" if args.torch_compile == "auto" and cpu else "")
    ctx = Ctx(dev, quick, int(mib * 2**20), int((args.copy_mib or (16 if quick else 1024)) * 2**20), widths,
              args.warmup or (1 if quick else 3), args.repeats or (3 if quick else 20),
              args.tiny_ops or (20 if quick else 100), args.tiny_iters or (5 if quick else 200), note)
    for flag, given, known in (("--norms", args.norms, NORMS), ("--dtypes", args.dtypes, DTYPES)):
        names = tuple(n.strip() for n in given.split(",") if n.strip())
        if not names or any(n not in known for n in names):
            p.error(f"{flag} takes a comma-separated list of {', '.join(known)}; got {given!r}")
        if flag == "--norms":
            ctx.norm_ops = names
        else:
            ctx.dtypes = names
    if min(ctx.nbytes, ctx.copy_bytes, *widths, ctx.warmup, ctx.repeats, ctx.tiny_ops, ctx.tiny_iters) < 1:
        p.error("sizes, --widths, --repeats, --warmup, --tiny-ops and --tiny-iters must be positive")
    if cpu:  # the interpreter's masked lanes divide by zero harmlessly
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton")
    if args.threads or cpu:  # tiny ops are too small to share between threads
        torch.set_num_threads(args.threads or 1)
    torch.manual_seed(0)

    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "device": _device_name(dev),
            "opgraph": og.__version__, "torch": torch.__version__, "triton": _triton_version(),
            "python": platform.python_version(), "sections": sections, "quick": quick, "mib": mib,
            "copy_mib": ctx.copy_bytes / 2**20, "widths": list(widths), "warmup": ctx.warmup, "repeats": ctx.repeats,
            "targets": {"of_copy": TARGET_OF_COPY, "vs_compile": TARGET_VS_COMPILE, "tiny_vs_raw": TARGET_TINY_VS_RAW}}
    print(f"opgraph fusion benchmark, {meta['date']}: {meta['device']}; opgraph {og.__version__}, torch "
          f"{torch.__version__}, triton {meta['triton']}, Python {meta['python']}\nmedian of {ctx.repeats} "
          f"interleaved calls after {ctx.warmup} warm-up; vs X = X ms / opgraph ms (> 1: opgraph faster)")
    out: dict[str, Any] = {"meta": meta}
    if any(s in sections for s in ("copy", "chains", "norms")):  # the roofline of the chains and norms
        out["copy"] = copy_bandwidth(ctx)
        c = out["copy"]
        print(f"\n== copy bandwidth (roofline): {c['bytes'] / 2**20:.0f} MiB dst.copy_(src), read + write: "
              f"best {c['best_gbps']:.0f} GB/s ({c['best_ms']:.3f} ms), median {c['median_gbps']:.0f} GB/s")
    case_note = (f"og: fusion=True, cuda_graphs=False; og+graph: CUDA-graph replay (copies inputs in, outputs out); "
                 f"compile: torch.compile{' ' + note if note else ''}\ntarget: og GB/s >= {TARGET_OF_COPY} of copy, "
                 f"vs compile >= {TARGET_VS_COMPILE:g}" + ("" if dev.is_cuda else " (CUDA only)"))
    runners = {  # name: (run, table, title, note)
        "chains": (chains, case_table, f"elementwise chains, {mib:g} MiB inputs: chain-n = the first n of "
                   f"{', '.join(s for s, _ in STEPS)}", case_note),
        "norms": (norms, case_table, f"softmax and norms over the last axis, {mib:g} MiB inputs, widths "
                  f"{', '.join(map(str, widths))}", case_note),
        "tiny": (tiny, tiny_table, f"{ctx.tiny_ops} tiny ops (overhead.py's chain), us per call, median of "
                 f"{ctx.repeats} x {ctx.tiny_iters} calls", f"target: og / raw CUDA graph <= {TARGET_TINY_VS_RAW}"
                 + ("" if dev.is_cuda else " (CUDA only; fused kernels run in the interpreter here)")),
        "resnet": (resnet, resnet_table, "ResNet-18-like training step (training.py); vs unfused = unfused ms / "
                   "this ms", ""),
    }
    errors: dict[str, str] = {}
    for name, (run, table, title, footer) in runners.items():
        if name not in sections:
            continue
        try:
            out[name] = run(ctx)
        except Exception as e:  # noqa: BLE001 (one broken section does not hide the others)
            errors[name] = _error(e)
            print(f"\n== {name}: ERROR {errors[name]}")
            continue
        print(f"\n== {title}\n{table(out[name])}" + (f"\n{footer}" if footer else ""))
    out["errors"] = errors
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)
    failed = [r for s in ("chains", "norms", "tiny", "resnet") for r in out.get(s, []) if r["check"] != "ok"]
    if failed or errors:
        print(f"\n{len(failed)} row(s) failed their check, {len(errors)} section(s) failed", file=sys.stderr)
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
