"""Compile time of generated reductions' tuning candidates, one by one against threads and worker processes: the
candidates of ResNet-50's batch-norm statistics and backward regions (channels-last, ``--batch``), each setting in
a fresh process with an empty Triton cache (``kernel.compile_in_threads``, ``OPGRAPH_COMPILE_THREADS``,
``OPGRAPH_COMPILE_PROCESSES``).

With a CUDA device the candidates compile as the tuner compiles them: one by one at their launches, or ahead in
threads, each thread compiling itself or (``processes``) driving a worker process (``precompile``). Without one they
compile for sm_90 (front end, MLIR passes, ptxas; nothing runs), as candidates for ``--sms`` multiprocessors (the
H200's 132 by default): through ``triton.compile`` in threads, or by each thread's worker process.

    python benchmarks/compile_threads.py --threads 1,4,16
    python benchmarks/compile_threads.py --dtypes bfloat16 --shapes 64x56 --threads 1,2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from opgraph.cli._table import format_table


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"opgraph_benchmarks_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fusion = _load("fusion")
columns = _load("column_reductions")
SHAPES = "64x56,256x56,512x28,2048x7"
TRITON_TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64",
                torch.int32: "i32", torch.int64: "i64", torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1"}


def cases(args: argparse.Namespace, device: str) -> tuple[list[tuple[list[Any], list[torch.Tensor]]], float]:
    """Per region case: its candidate kernels (the default first) and their arguments; and the seconds that
    emitting the candidates' sources took."""
    from opgraph.codegen.triton import configs
    from opgraph.codegen.triton.kernel import region_kernel

    if device == "cpu":  # the GPU's candidate set: it depends on the multiprocessor count
        configs.multiprocessors = lambda: args.sms
    out, emitting = [], 0.0
    for region in columns.REGIONS:
        for name in args.dtypes.split(","):
            for c, s in args.shapes:
                case = columns.build(region, (args.batch, s, s, c), columns.DTYPES[name], device)
                t0 = time.perf_counter()
                kernel = region_kernel(case.ops, case.inputs, case.outputs)
                others = kernel.alternatives() if kernel.alternatives is not None else []
                emitting += time.perf_counter() - t0
                out.append(([kernel, *others], case.feed))
    return out, emitting


def _compile_for_sm90(kernel: Any, feed: list[torch.Tensor]) -> None:
    """``kernel`` compiled for sm_90 from its launch's argument types (no GPU needed)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    launch = kernel._launch(tuple(tuple(x.shape) for x in feed))
    meta = torch.device("meta")
    outs = [torch.empty(shape, dtype=t.dtype.torch_dtype, device=meta)
            for shape, t in zip(launch.out_shapes, kernel.out_types, strict=True)]
    space = None
    if kernel.config.split > 1:
        sizes = kernel.workspace_sizes(launch.grid[0] // kernel.config.split)
        space = [torch.empty(n, dtype=d, device=meta) for n, d in zip(sizes, (torch.float32, torch.int32),
                                                                     strict=True)]
    # a CUDA launch's options (FMA contraction where split programs meet), on meta tensors
    args, options = kernel._arguments(launch, [x.to(meta) for x in feed], outs, torch.device("cuda"), space)
    warps = options.pop("num_warps")
    fp_fusion = options.pop("enable_fp_fusion", None)
    fn = kernel.fn
    positional = iter(args)
    signature, constants = {}, {}
    for k, name in enumerate(fn.arg_names):
        if name in options:
            signature[name], constants[(k,)] = "constexpr", options[name]
            continue
        a = next(positional)
        signature[name] = f"*{TRITON_TYPES[a.dtype]}" if isinstance(a, torch.Tensor) else (
            "i64" if abs(int(a)) >= 2**31 else "i32")
    triton.compile(ASTSource(fn, signature, constexprs=constants), target=GPUTarget("cuda", 90, 32),
                   options={"num_warps": warps, **({} if fp_fusion is None else {"enable_fp_fusion": fp_fusion})})


_WORKERS = threading.local()


def _compile_in_worker_for_sm90(kernel: Any, feed: list[torch.Tensor]) -> None:
    """``kernel`` compiled for sm_90 by this thread's compile worker process (``compile_worker``, Triton's driver
    answered without a GPU), as a compile thread on CUDA hands its jobs over."""
    from opgraph.codegen.triton import compile_worker, precompile
    from opgraph.codegen.triton.kernel import kernel_file

    cuda = torch.device("cuda")  # only for the launch options a CUDA launch passes; nothing is allocated there
    ins = [compile_worker.stand_in(tuple(x.shape), x.dtype, cuda) for x in feed]
    launch, args, options = precompile.stand_in_arguments(kernel, ins, cuda)
    path, module, function = kernel_file(kernel.source, kernel.cache_dir)
    job = compile_worker.Job(str(path), module, function, tuple(compile_worker.describe(a) for a in args),
                             launch.grid, tuple(options.items()), (9, 0), os.environ.get("TRITON_CACHE_DIR"))
    worker = getattr(_WORKERS, "process", None)
    if worker is None:
        worker = _WORKERS.process = precompile.WorkerProcess()
    ok, message, _ = worker.run(job, 600.0)
    if not ok:
        raise RuntimeError(message)


def worker(args: argparse.Namespace) -> None:
    """One thread count: emit the candidates, compile each case's in threads as the tuner does, print JSON."""
    from opgraph.codegen.triton.kernel import compile_in_threads

    device = "cuda" if torch.cuda.is_available() else "cpu"
    work, emitted = cases(args, device)
    for kernels, _ in work:
        for k in kernels:
            k.fn  # noqa: B018 - loads the module: Python's import of the source is not the compile timed here
    os.environ["OPGRAPH_COMPILE_THREADS"] = str(args.worker)
    os.environ["OPGRAPH_COMPILE_PROCESSES"] = "1" if args.processes else "0"
    pool = ThreadPoolExecutor(args.worker)
    t0 = time.perf_counter()
    for kernels, feed in work:
        if device == "cuda":
            if args.worker > 1:
                compile_in_threads(kernels, feed)
            else:  # one by one, as the tuner's launches compile them (a launch's run is microseconds)
                for k in kernels:
                    k._tuned[tuple(tuple(x.shape) for x in feed)] = k
                    k(*feed)
                torch.cuda.synchronize()
        else:  # one pool for the run, as the compile threads are: each keeps its worker process
            compile_one = _compile_in_worker_for_sm90 if args.processes else _compile_for_sm90
            list(pool.map(lambda k, feed=feed, compile_one=compile_one: compile_one(k, feed), kernels))
    seconds = time.perf_counter() - t0
    pool.shutdown()
    print(json.dumps({"threads": args.worker, "processes": bool(args.processes),
                      "kernels": sum(len(k) for k, _ in work), "emit_s": emitted,
                      "compile_s": seconds, "target": device}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=128, help="images a batch")
    p.add_argument("--shapes", type=fusion.channel_shapes, default=fusion.channel_shapes(SHAPES),
                   help=f"CxS pairs: C channels of S x S (default {SHAPES})")
    p.add_argument("--dtypes", default="bfloat16", help="float32, bfloat16 (comma-separated)")
    p.add_argument("--threads", type=fusion.positive_ints, default=(1, 4, 16), help="thread counts to compare")
    p.add_argument("--sms", type=int, default=132, help="multiprocessors the candidates are for, without a GPU")
    p.add_argument("--modes", default="threads,processes",
                   help="with more than one thread on CUDA: threads (each compiling itself), processes (each driving "
                        "a worker process), comma-separated")
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--processes", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    rows, base = [], None
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    settings = [(t, m == "processes") for t in args.threads for m in (modes if t > 1 else modes[:1])]
    for t, processes in settings:
        env = {**os.environ, "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="og-compile-")}
        env.pop("TRITON_INTERPRET", None)
        cmd = [sys.executable, __file__, "--worker", str(t), "--processes", str(int(processes)), "--batch",
               str(args.batch), "--dtypes", args.dtypes, "--shapes", ",".join(f"{c}x{s}" for c, s in args.shapes),
               "--sms", str(args.sms)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        if done.returncode or not lines:
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
        r = json.loads(lines[-1])
        base = base or r["compile_s"]
        rows.append([str(t), "processes" if r["processes"] else "threads", str(r["kernels"]), f"{r['emit_s']:.2f}",
                     f"{r['compile_s']:.2f}",
                     f"{r['kernels'] / r['compile_s']:.2f}", f"{base / r['compile_s']:.2f}", r["target"]])
        print(f"  {t} threads{' + processes' if processes else ''}: done", file=sys.stderr, flush=True)
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "sm_90 (compile only, no GPU)"
    print(f"{os.cpu_count()} CPUs; target {name}")
    print(format_table(["threads", "compiling in", "kernels", "emit s", "compile s", "kernels/s", "speed-up",
                        "target"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
