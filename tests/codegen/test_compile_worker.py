"""``codegen.triton.compile_worker``: the worker process that compiles kernels into Triton's disk cache for its parent.
On the CPU the job's function is a recorder (a module file whose ``warmup`` writes what it was given), run in this
process and in a real worker process; with ``-m gpu`` a generated kernel compiled by a worker is then loaded by this
process without compiling (Triton's front end made to fail here)."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton import compile_worker, precompile  # noqa: E402
from opgraph.codegen.triton.compile_worker import Job, TensorSpec  # noqa: E402

RECORDER = '''
import json
import os
import time

class Recorder:
    def warmup(self, *args, grid, **options):
        if options.get("fail"):
            raise ValueError("out of shared memory")
        if options.get("die"):
            os._exit(1)
        time.sleep(options.get("sleep", 0))
        seen = [[str(a.dtype), list(a.shape), list(a.stride()), a.data_ptr() % 16] if hasattr(a, "dtype") else a
                for a in args]
        with open(options["log"], "a") as f:
            f.write(json.dumps({"args": seen, "grid": list(grid), "num_warps": options["num_warps"]}) + "\\n")

recorder = Recorder()
'''


def _job(folder: Path, **options: object) -> Job:
    path = folder / "recorder.py"
    path.write_text(RECORDER)
    args = (TensorSpec(torch.bfloat16, (4, 6), 0, (1, 4)), TensorSpec(torch.float32, (8,), 4), 24, 0.5, None)
    return Job(str(path), "og_test_recorder", "recorder", args, (3,), tuple(options.items()), (), None)


def _logged(folder: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def test_a_job_warms_up_its_function_on_stand_ins_of_its_arguments(tmp_path: Path) -> None:
    job = _job(tmp_path, num_warps=4, log=str(tmp_path / "log.jsonl"))
    failing = _job(tmp_path, num_warps=4, log=str(tmp_path / "log.jsonl"), fail=True)
    requests, replies = io.BytesIO(), io.BytesIO()
    for j in (job, failing, job):
        pickle.dump(j, requests)
    requests.seek(0)
    compile_worker.serve(requests, replies)  # returns at the end of the requests
    replies.seek(0)
    answers = [pickle.load(replies) for _ in range(3)]
    assert [a[:2] for a in answers] == [(True, ""), (False, "ValueError: out of shared memory"), (True, "")]
    want = {"args": [["torch.bfloat16", [4, 6], [1, 4], 0], ["torch.float32", [8], [1], 4], 24, 0.5, None],
            "grid": [3], "num_warps": 4}
    assert _logged(tmp_path) == [want, want]


def test_describe_keeps_a_tensors_type_shape_and_alignment() -> None:
    x = torch.zeros(10, dtype=torch.float16)[1:]  # 2 bytes past an aligned allocation
    assert compile_worker.describe(x) == TensorSpec(torch.float16, (9,), 2, (1,))
    t = compile_worker.stand_in((2, 3), torch.int32, torch.device("cpu"), 8)
    assert compile_worker.describe(t) == TensorSpec(torch.int32, (2, 3), 8, (3, 1))
    y = torch.zeros(3, 5).t()
    assert compile_worker.describe(y) == TensorSpec(torch.float32, (5, 3), 0, (1, 5))
    assert compile_worker.describe(7) == 7 and compile_worker.describe(None) is None


def test_a_worker_process_answers_jobs_and_is_started_again_once_gone(tmp_path: Path) -> None:
    job = _job(tmp_path, num_warps=8, log=str(tmp_path / "log.jsonl"))
    worker = precompile.WorkerProcess()
    try:
        assert worker.run(job, 60)[:2] == (True, "")
        first = worker.process
        assert first is not None and first.poll() is None  # kept for the next job
        assert worker.run(job, 60)[:2] == (True, "")
        first.kill()
        first.wait(5)
        assert worker.run(job, 60)[:2] == (True, "")  # a new process
        assert worker.process is not first
        assert [entry["num_warps"] for entry in _logged(tmp_path)] == [8, 8, 8]
    finally:
        worker.close()
    assert worker.process is None


@pytest.mark.parametrize("how", ["dies", "hangs"])
def test_a_worker_that_dies_or_hangs_in_a_job_is_reported_and_gone(tmp_path: Path, how: str) -> None:
    log = str(tmp_path / "log.jsonl")
    bad = _job(tmp_path, num_warps=8, log=log, **({"die": True} if how == "dies" else {"sleep": 30}))
    worker = precompile.WorkerProcess()
    try:
        assert worker.run(_job(tmp_path, num_warps=8, log=log), 60)[0]
        process = worker.process
        assert process is not None
        with pytest.raises(precompile.WorkerDied) as died:
            worker.run(bad, 1.0)
        assert died.value.started and worker.process is None
        assert process.wait(5) is not None  # killed, not left running
        assert worker.run(_job(tmp_path, num_warps=4, log=log), 60)[0]  # the next job starts another
    finally:
        worker.close()


def test_workers_that_keep_dying_or_cannot_start_are_turned_off_with_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    import itertools
    import threading

    monkeypatch.setattr(precompile, "_PROCESSES_FAILED", threading.Event())
    monkeypatch.setattr(precompile, "_DEATHS", itertools.count(1))
    monkeypatch.setattr(precompile.torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    g = og.Graph()
    from opgraph.codegen.triton.kernel import region_kernel, region_of

    x = g.placeholder((64, 64), og.float32)
    y = g.exp(x)
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], cache_dir=tmp_path)
    started = {"value": True}

    def run(self: precompile.WorkerProcess, job: Job, timeout: float) -> tuple[bool, str, float]:
        raise precompile.WorkerDied("gone", started=started["value"])

    monkeypatch.setattr(precompile.WorkerProcess, "run", run)
    call = lambda: precompile._in_worker_process(kernel, [], (1,), {}, torch.device("cpu"))  # noqa: E731
    for _ in range(precompile._DEATHS_ALLOWED):  # each job fails; the processes stay on
        ok, message = call()
        assert not ok and "compile worker died" in message and not precompile._PROCESSES_FAILED.is_set()
    with pytest.warns(RuntimeWarning, match="compile worker processes turned off"):
        assert call() == (True, "")  # compiled in the thread from now on
    assert precompile._PROCESSES_FAILED.is_set()
    precompile._PROCESSES_FAILED.clear()
    started["value"] = False
    with pytest.warns(RuntimeWarning, match="cannot|gone"):
        assert call() == (True, "")
    assert precompile._PROCESSES_FAILED.is_set()


@pytest.mark.gpu
def test_a_kernel_compiled_by_a_worker_loads_here_without_compiling(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.compiler import compiler

    from opgraph.codegen.triton.kernel import region_kernel, region_of

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    g = og.Graph()
    x = g.placeholder((1024, 4096), og.float32)
    y = g.reduce_sum(g.relu(x), [1])
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], cache_dir=tmp_path)
    dev = torch.device("cuda")
    xv = torch.randn(1024, 4096, device=dev)
    launch = kernel._launch(((1024, 4096),))
    outs = [compile_worker.stand_in(s, torch.float32, dev) for s in launch.out_shapes]
    args, options = kernel._arguments(launch, [compile_worker.stand_in((1024, 4096), torch.float32, dev)], outs, dev)
    assert precompile._in_worker_process(kernel, args, launch.grid, options, dev) == (True, "")
    assert not precompile._PROCESSES_FAILED.is_set()
    assert list((tmp_path / "triton").rglob("*.cubin"))  # written by the worker
    worker = precompile._THREAD.worker
    try:
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                              capture_output=True, text=True, check=False).stdout.split() \
            if shutil.which("nvidia-smi") else []
        if str(os.getpid()) in apps:  # PIDs visible here (not hidden by a container): the worker holds no context
            assert worker.process is not None and str(worker.process.pid) not in apps
    finally:
        worker.close()

    def front_end(*a: object, **k: object) -> None:
        raise AssertionError("compiled in the parent")

    monkeypatch.setattr(compiler.ASTSource, "make_ir", front_end)  # a cache hit never reaches the front end
    kernel._tuned[((1024, 4096),)] = kernel  # launch this configuration, untuned
    torch.testing.assert_close(kernel(xv)[0], xv.relu().sum(1), rtol=1e-4, atol=1e-3)


WORKER_THEN_HERE = '''
import json, sys
import torch
from triton.compiler import compiler
from triton.runtime import driver
from unittest import mock

import opgraph as og
from opgraph.codegen.triton import compile_worker, configs, precompile
from opgraph.codegen.triton.kernel import region_kernel, region_of

driver.set_active(compile_worker.CompileOnlyDriver((9, 0)))
torch.cuda.get_device_capability = lambda device=None: (9, 0)
dev = torch.device("cuda")  # stand-ins only: nothing is allocated or launched
g = og.Graph()
x = g.placeholder((256, 1024), og.bfloat16)
r = g.placeholder((64, 4096), og.float32)
c = g.placeholder((4096, 96), og.float32)
cases = [([g.exp(x) * 2.0], None), ([g.softmax(r, 1)], None), ([g.reduce_sum(g.relu(c), [0])], None),
         ([g.reduce_sum(g.exp(r), [1])], (1, 97))]
kernels = []
folder = __import__("pathlib").Path(sys.argv[1])
with mock.patch.object(configs, "multiprocessors", lambda: 132):
    for outs, strides in cases:
        ops, ins = region_of(outs)
        k = region_kernel(ops, ins, outs, cache_dir=folder, strided=strides is not None)
        for each in [k, *(k.alternatives() if k.alternatives else [])]:
            kernels.append((each, strides))
results = []
for k, strides in kernels:
    shapes = [tuple(t.shape) for t in k.in_types]
    stand = [compile_worker.stand_in(s, t.dtype.torch_dtype, dev, *((4, strides) if len(s) == 2 and strides else ()))
             for s, t in zip(shapes, k.in_types)]
    launch, args, options = precompile.stand_in_arguments(k, stand, dev)
    results.append([precompile._in_worker_process(k, args, launch.grid, options, dev), k.config.split, args, options,
                    launch.grid, k])
def front_end(*a, **kw):
    raise AssertionError("compiled here, not loaded from the worker's cache")
compiler.ASTSource.make_ir = front_end
loaded = 0
for (ok, message), split, args, options, grid, k in results:
    if ok:
        k.fn.warmup(*args, grid=grid, **options)
        loaded += 1
print(json.dumps({"kernels": len(results), "compiled": [r[0][0] for r in results], "loaded": loaded,
                  "splits": sum(r[1] > 1 for r in results), "errors": [r[0][1] for r in results if not r[0][0]]}))
'''


def test_kernels_a_worker_compiles_for_sm90_load_here_from_its_cache(tmp_path: Path) -> None:
    """Without a GPU: a worker compiles generated kernels (flat, row and column reductions with their split
    candidates, a strided variant at a misaligned address) for sm_90, and a process compiling for the same target
    finds each in Triton's cache with its own cache key (its front end made to fail). Both processes compile
    (Triton's interpreter off), as on a GPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    env["OPGRAPH_COMPILE_PROCESSES"] = "1"
    done = subprocess.run([sys.executable, "-c", WORKER_THEN_HERE, str(tmp_path / "sources")], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["kernels"] >= 6 and result["splits"] >= 1, result
    assert all(result["compiled"]), result["errors"]
    assert result["loaded"] == result["kernels"]
    assert list((tmp_path / "triton").rglob("*.cubin"))


def test_workers_start_ahead_one_per_compile_thread_and_stop_once_their_job_is_done(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    monkeypatch.setenv("OPGRAPH_COMPILE_PROCESSES", "1")
    monkeypatch.setattr(precompile, "_PROCESSES_FAILED", threading.Event())
    n = precompile._ensure_threads()
    assert precompile.stop_workers()
    gate = threading.Event()
    busy: list[object] = []
    try:
        precompile.start_workers()
        deadline = time.monotonic() + 60  # n processes importing torch on a loaded machine
        while len(precompile._LIVE) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = list(precompile._LIVE)
        assert len(workers) == n and all(w.process.poll() is None for w in workers)  # type: ignore[attr-defined]
        processes = [w.process for w in workers]  # type: ignore[attr-defined]
        busy = [precompile._submit(lambda: gate.wait(10)) for _ in range(n)]  # every thread in a job
        deadline = time.monotonic() + 60
        while not all(f.running() for f in busy) and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.01)
        assert not precompile.stop_workers(wait_s=0.3)  # busy threads stop theirs after the job
        gate.set()
        assert precompile.stop_workers(wait_s=10)
        assert all(p.poll() is not None for p in processes)
    finally:
        gate.set()
        for f in busy:
            f.result(10)  # type: ignore[attr-defined]
        precompile.stop_workers()
