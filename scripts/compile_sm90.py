"""Compile, for sm_90 and without a GPU, every launch configuration ``benchmarks/reduction_configs.py`` and the tuner
offer for issue 4's softmax and norms, with Triton's real compiler (ptxas included): run before a GPU session, so that
its minutes go to measurements rather than to compile errors. Prints a table: per case, the configurations that
compiled and those that failed, with the first error, and the slowest compile (a tuner compiles every candidate on
a region's first launch, so one that takes minutes in ptxas costs that first launch as much). With ``--registers``,
also a row per configuration with the registers and stack (spills) a thread of its cubin (spills and
layouts differ between Triton versions: install the GPU machine's with ``pip install --target DIR triton==3.6.0``
and run with ``PYTHONPATH=DIR``).

    python scripts/compile_sm90.py
    python scripts/compile_sm90.py --ops softmax --dtypes bfloat16 --widths 32768,262144 --registers
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import torch

import opgraph as og
from opgraph.cli._progress import Progress
from opgraph.cli._table import format_table
from opgraph.codegen.triton import compile_worker, configs, precompile
from opgraph.codegen.triton.configs import Config
from opgraph.codegen.triton.expr import NotExpressible
from opgraph.codegen.triton.kernel import RegionKernel, cluster_launch, region_kernel, region_of

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
ROWS = {4096: 64, 32768: 8, 262144: 2}  # rows of each case: the grid's size does not change the kernel


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"opgraph_benchmarks_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def compile_for_sm90(kernel: RegionKernel, shapes: list[tuple[int, ...]]) -> Any:
    """``kernel`` compiled for sm_90 from stand-ins of inputs of ``shapes`` (Triton's driver set to
    ``compile_worker.CompileOnlyDriver``), a cluster launch's metadata patched: the compiled kernel."""
    dev = torch.device("cuda")  # stand-ins only: nothing is allocated or launched
    ins = [compile_worker.stand_in(s, t.dtype.torch_dtype, dev) for s, t in zip(shapes, kernel.in_types, strict=True)]
    launch, args, options = precompile.stand_in_arguments(kernel, ins, dev)
    compiled = kernel.fn.warmup(*args, grid=launch.grid, **options)
    if kernel.config.cluster:
        cluster_launch(compiled, kernel.config.split)
    return compiled


def resource_usage(compiled: Any) -> tuple[int, int] | None:
    """(registers a thread, bytes of stack a thread: where ptxas puts spills) of the cubin Triton built for
    ``compiled``, from the ``cuobjdump -res-usage`` beside Triton's ptxas; ``None`` where it cannot say."""
    import triton.backends.nvidia as nvidia

    tool = os.path.join(os.path.dirname(nvidia.__file__), "bin", "cuobjdump")
    with tempfile.TemporaryDirectory() as folder:
        cubin = Path(folder) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        done = subprocess.run([tool, "-res-usage", str(cubin)], capture_output=True, text=True, check=False)
    found = re.search(r"REG:(\d+) STACK:(\d+)", done.stdout)
    return (int(found.group(1)), int(found.group(2))) if found else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="softmax,log_softmax,layer_norm,rms_norm", help="comma-separated norms")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated, of float32, bfloat16")
    p.add_argument("--widths", default="4096,32768,262144", help="comma-separated row widths (powers of two)")
    p.add_argument("--chunks", default="8192,16384,32768", help="split rows: elements a program holds")
    p.add_argument("--sms", type=int, default=132, help="multiprocessors of the target GPU (H200: 132)")
    p.add_argument("--registers", action="store_true",
                   help="also each configuration's registers and stack (spilled) bytes a thread")
    args = p.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)  # the point is the real compiler (read as kernels load)
    from triton.runtime import driver

    driver.set_active(compile_worker.CompileOnlyDriver((9, 0)))
    progress = Progress()
    rows: list[list[Any]] = []
    usage: list[list[Any]] = []  # --registers: a row per configuration
    failed_any = False
    with mock.patch.object(configs, "multiprocessors", lambda: args.sms), \
            mock.patch.object(configs, "_splittable", lambda em: True):
        sweeps = _load("reduction_configs")
        fusion = sweeps.fusion
        for op in args.ops.split(","):
            nparams, build, _ = fusion.NORMS[op]
            for dtype in args.dtypes.split(","):
                ogt, _ = fusion.DTYPES[dtype]
                for width in (int(w) for w in args.widths.split(",")):
                    g = og.Graph()
                    x = g.placeholder((ROWS.get(width, 4), width), ogt)
                    params = [g.placeholder((width,), ogt) for _ in range(nparams)]
                    y = build(g, x, *params)
                    ops, ins = region_of([y])
                    shapes = [tuple(int(d or 0) for d in t.shape) for t in ins]  # static shapes
                    base = region_kernel(ops, ins, [y])
                    offered: list[Config] = [k.config for k in
                                             [base, *(base.alternatives() if base.alternatives else [])]]
                    offered += [c for c in sweeps.configs(width, [int(c) for c in args.chunks.split(",")])
                                if c not in offered]
                    offered += [dataclasses.replace(c, cluster=True) for c in offered
                                if c.split > 1 and not c.looped and not c.cluster and c.split <= configs.MAX_CLUSTER
                                and dataclasses.replace(c, cluster=True) not in offered]
                    ok, refused, errors = 0, 0, []
                    slowest = (0.0, "")  # seconds, configuration
                    with progress.step(f"{op} {dtype} {width}"):
                        for n, c in enumerate(offered):
                            progress.update(n, len(offered))
                            try:
                                kernel = region_kernel(ops, ins, [y], config=c)
                            except NotExpressible:
                                refused += 1
                                continue
                            try:
                                start = time.perf_counter()
                                compiled = compile_for_sm90(kernel, shapes)
                                seconds = time.perf_counter() - start
                                slowest = max(slowest, (seconds, c.describe()))
                                ok += 1
                                if args.registers:  # not a compile failure where unknown: "?"
                                    used = resource_usage(compiled)
                                    usage.append([op, dtype, width, c.describe(), *(used or ("?", "?")),
                                                  f"{seconds:.1f}"])
                            except Exception as e:  # noqa: BLE001 -- reported in the table
                                errors.append(f"{c.describe()}: {type(e).__name__}: {str(e)[-200:]}")
                    failed_any = failed_any or bool(errors)
                    rows.append([op, dtype, width, ok, refused, len(errors), f"{slowest[0]:.1f}", slowest[1],
                                 errors[0] if errors else ""])
    if usage:
        print(format_table(["op", "dtype", "width", "configuration", "registers", "stack bytes", "compile s"],
                           usage))
        print()
    print(format_table(["op", "dtype", "width", "compiled", "refused", "failed", "slowest s", "slowest compile",
                        "first error"], rows))
    return 1 if failed_any else 0


if __name__ == "__main__":
    raise SystemExit(main())
