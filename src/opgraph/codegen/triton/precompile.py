"""Compiling generated kernels ahead of their launches: a tuned kernel's candidates before the tuner times them, and
(``OPGRAPH_PRECOMPILE=1``) an executable's kernels in the background as soon as it is built.

Without it each kernel compiles at its first launch, one after another on the calling thread. Here compiles queue
for ``compile_threads()`` daemon threads, tuning candidates ahead of background work. With
``OPGRAPH_COMPILE_PROCESSES=1`` each thread on CUDA hands its job to a worker process of its own
(``compile_worker``: Triton's compile holds the GIL for much of its work, so threads alone gained 2.4x on 16 cores),
which writes the kernel into Triton's disk cache; the thread then loads it from there (Triton's ``warmup`` again,
now a cache hit), so the launch finds it in memory. A worker that cannot be started, or that keeps dying, turns them
off with a warning. A launch or tuner waits for a compile here at most ``timeout_s()`` (``OPGRAPH_COMPILE_TIMEOUT``)
before compiling it itself. Nothing runs and no device memory is allocated: the inputs, outputs and split workspaces
are stand-ins (``compile_worker.stand_in``) at the alignment of the tensors they stand for. Inputs that turn out
strided, or otherwise aligned, take another specialisation, compiled at launch. ``STATS`` counts the work and its
seconds.

A kernel whose input types are static is compiled for contiguous inputs of those types; one that will be tuned has
all its candidates compiled, or only the configuration a tuning record names. A launch (and a tuner's own compile)
of a configuration compiling here waits for it instead of compiling it twice; one still queued is taken off the
queue and compiled by the launch itself. The threads are daemons, so a process exits without finishing the queue;
the workers exit when their stdin closes.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import math
import os
import pickle
import queue
import select
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from . import compile_worker
from .compile_worker import contiguous_strides, stand_in

if TYPE_CHECKING:
    from .kernel import RegionKernel

AHEAD, BACKGROUND = 0, 1  # queue priorities: a tuner waiting for its candidates, an executable's kernels
_PENDING: dict[tuple[str, Any], Future[None]] = {}  # (source key, configuration) -> its queued or running compile
_LOCK = threading.Lock()
_QUEUE: queue.PriorityQueue[tuple[int, int, Future[None], Callable[[], None]]] = queue.PriorityQueue()
_ORDER = itertools.count()  # first in, first out within a priority
_WORKERS: list[threading.Thread] = []
_WORKERS_LOCK = threading.Lock()  # apart from _LOCK, which ``precompile`` holds while it submits
_THREAD = threading.local()  # each compile thread's worker process, and the future of the job it runs
_PROCESSES_FAILED = threading.Event()  # workers cannot be started, or keep dying: the threads compile themselves
_DEATHS_ALLOWED = 3  # workers that die in a job before the processes are turned off
_DEATHS = itertools.count(1)
_START_WANTED = threading.Event()  # start_workers asked the compile threads to start their workers
_STOPS = 0  # stop_workers calls: each compile thread closes its worker when it sees the count change
_LIVE: set[Any] = set()  # the worker processes running (WorkerProcess objects)
_LIVE_LOCK = threading.Lock()
_IDLE_S = 0.5  # an idle compile thread looks at the two above this often
# counts and seconds of the work here, by kind (benchmarks/compile_breakdown.py prints them)
STATS: collections.defaultdict[str, float] = collections.defaultdict(float)
_STATS_LOCK = threading.Lock()


def _count(name: str, seconds: float) -> None:
    with _STATS_LOCK:
        STATS[name] += 1
        STATS[name + " s"] += seconds


def enabled() -> bool:
    """Whether executables queue their kernels' compiles when built (``OPGRAPH_PRECOMPILE=1``)."""
    return os.environ.get("OPGRAPH_PRECOMPILE", "0") == "1"


def processes_enabled() -> bool:
    """Whether CUDA compiles go to worker processes (``OPGRAPH_COMPILE_PROCESSES=1``). Off by default until measured
    against threads on a machine in the same state (the first measurement was not: RESULTS.md, seventeenth
    session)."""
    return os.environ.get("OPGRAPH_COMPILE_PROCESSES", "0") == "1" and not _PROCESSES_FAILED.is_set()


def timeout_s() -> float:
    """How long a launch or a tuner waits for a compile here, and a thread for its worker's reply, before the launch
    compiles it itself (``OPGRAPH_COMPILE_TIMEOUT``, seconds; 300 by default)."""
    try:
        return max(1.0, float(os.environ.get("OPGRAPH_COMPILE_TIMEOUT", "300")))
    except ValueError:
        return 300.0


def wait_for(key: str, config: Any) -> None:
    """Return once no compile of the source ``key`` in ``config`` is running here (at once where none is;
    configurations differ in their launch options, so candidates may share a source)."""
    with _LOCK:
        pending = _PENDING.get((key, config))
        if pending is None:
            return
        if pending.cancel():  # still queued: the launch compiles it now rather than wait for the queue ahead of it
            del _PENDING[(key, config)]
            return
    start = time.perf_counter()
    with contextlib.suppress(Exception):  # failed, or too slow: left to the launch, which compiles and reports it
        pending.result(timeout_s())
    _count("launch waits", time.perf_counter() - start)


def precompile(kernel: RegionKernel, device: torch.device) -> list[RegionKernel]:
    """Queue the background compiles of ``kernel`` (module docstring); the configurations queued. Inputs that the
    region transposes from NCHW to NHWC are, in a channels-last graph, stored NHWC (the layout pass arranges it):
    the strided variant such inputs launch is queued too, for channels-last stand-ins of them."""
    if not all(t.is_static for t in kernel.in_types):
        return []
    shapes = [tuple(int(d) for d in t.shape) for t in kernel.in_types]  # type: ignore[arg-type]
    dtypes = [t.dtype.torch_dtype for t in kernel.in_types]
    work = [(kernel, [stand_in(s, dt, device) for s, dt in zip(shapes, dtypes, strict=True)])]
    nhwc = nhwc_stored_inputs(kernel)
    if nhwc and kernel.strided is not None:
        with contextlib.suppress(Exception):  # a guess: whatever goes wrong, the kernel's own compiles go ahead
            work.append(_channels_last_variant(kernel, shapes, dtypes, nhwc, device))
    queued = []
    for k, ins in work:
        jobs = _to_compile(k, ins)
        with _LOCK:
            for job in jobs:
                if (job.key, job.config) in _PENDING:
                    continue
                _PENDING[(job.key, job.config)] = _submit(functools.partial(_compile, job, ins, device))
                queued.append(job)
    return queued


def _channels_last_variant(kernel: RegionKernel, shapes: list[tuple[int, ...]], dtypes: list[torch.dtype],
                           nhwc: set[int], device: torch.device) -> tuple[RegionKernel, list[Any]]:
    """The strided variant a launch with inputs ``nhwc`` stored channels-last takes, and stand-ins of those inputs;
    raises where such inputs would be contiguous after all (H = W = 1, or C = 1: the kernel's own variant runs)."""
    strides = [channels_last_strides(s) if i in nhwc else None for i, s in enumerate(shapes)]
    metas = [torch.empty_strided(s, st or contiguous_strides(s), dtype=dt, device="meta")
             for s, st, dt in zip(shapes, strides, dtypes, strict=True)]
    if all(m.is_contiguous() for m in metas):
        raise ValueError("channels-last and contiguous alike: no strided launch")
    inner = kernel._inner_axis(metas)
    variant = kernel._strided.get(inner)
    if variant is None:  # the launch takes it from there
        variant = kernel._strided[inner] = kernel.strided(inner)
    return variant, [stand_in(s, dt, device, 0, st) for s, st, dt in zip(shapes, strides, dtypes, strict=True)]


def nhwc_stored_inputs(kernel: RegionKernel) -> set[int]:
    """The rank-4 inputs that ``kernel``'s region transposes from NCHW to NHWC."""
    from ...ops.shape import TRANSPOSE

    return {reads[0] for op, attrs, reads in kernel.steps
            if op is TRANSPOSE and tuple(attrs.perm) == (0, 2, 3, 1) and reads[0] < len(kernel.in_types)}


def _to_compile(kernel: RegionKernel, ins: list[Any]) -> list[RegionKernel]:
    """``kernel``, or where it will be tuned its candidates (only the one a tuning record names, if any)."""
    from .kernel import TUNE_MIN_ELEMENTS

    if kernel.alternatives is None or max((math.prod(x.shape) for x in ins), default=0) < TUNE_MIN_ELEMENTS:
        return [kernel]
    candidates = [kernel, *kernel.alternatives()]
    remembered = kernel.recorded_choice(candidates, ins)[1]
    return [k for k in candidates if k.config == remembered] or candidates


def channels_last_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of an NCHW tensor of ``shape`` stored channels-last (NHWC)."""
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def candidate_wait_s() -> float:
    """How long a tuner waits at least for its other candidates' compiles once its default is compiled
    (``OPGRAPH_CANDIDATE_COMPILE_S``, seconds; 30 by default): ``compile_ahead(patience=True)``."""
    try:
        return max(0.0, float(os.environ.get("OPGRAPH_CANDIDATE_COMPILE_S", "30")))
    except ValueError:
        return 30.0


CANDIDATE_FACTOR = 10.0  # ... or this many times as long as the default took, where that is longer


def compile_ahead(kernels: Sequence[RegionKernel], inputs: Sequence[torch.Tensor], patience: bool = False) -> list[int]:
    """Compile ``kernels`` for ``inputs`` ahead of the queue's background work, and return when they are compiled
    (or ``timeout_s()`` has passed); one that fails is left to its launch, which reports it. With ``patience`` (a
    tuner's candidates, its default first) the others get ``candidate_wait_s()`` or ``CANDIDATE_FACTOR`` times the
    default's compile, whichever is longer, after it: ptxas took over two minutes on candidates whose default took
    seconds (RESULTS.md, twentieth session). Returns the positions of those still compiling (they finish in the
    background, their launches waiting for them as usual)."""
    device = inputs[0].device if inputs else torch.device("cpu")
    ins = [stand_in(tuple(x.shape), x.dtype, device, x.data_ptr() % 16, tuple(x.stride())) for x in inputs]
    waits = []
    with _LOCK:
        for k in kernels:
            pending = _PENDING.get((k.key, k.config))
            if pending is None or pending.cancel():  # none, or queued behind background work: queued ahead now
                pending = _PENDING[(k.key, k.config)] = _submit(functools.partial(_compile, k, ins, device), AHEAD)
            waits.append(pending)
    start = time.monotonic()
    deadline = start + timeout_s()
    late = []
    for n, done in enumerate(waits):
        if n == 1 and patience:  # the default is compiled: the others' time is counted from now
            now = time.monotonic()
            deadline = min(deadline, now + max(candidate_wait_s(), CANDIDATE_FACTOR * (now - start)))
        with contextlib.suppress(Exception):
            done.result(max(0.0, deadline - time.monotonic()))
        if not done.done():
            late.append(n)
    for _ in late:
        _count("candidates left compiling", 0.0)
    return late


def stand_in_arguments(kernel: RegionKernel, ins: Sequence[Any], device: torch.device
                       ) -> tuple[Any, list[Any], dict[str, Any]]:
    """(launch, arguments, options) of ``kernel`` launched on the input stand-ins ``ins``, with stand-ins for its
    outputs and split workspaces too: what a compile needs, with nothing allocated on the device."""
    launch = kernel._launch(tuple(tuple(x.shape) for x in ins))
    outs = [stand_in(s, t.dtype.torch_dtype, device) for s, t in zip(launch.out_shapes, kernel.out_types, strict=True)]
    workspace = None
    if kernel.config.split > 1 and launch.grid[0]:
        sizes = kernel.workspace_sizes(launch.grid[0] // kernel.config.split)
        workspace = [stand_in((n,), dt, device) for n, dt in zip(sizes, (torch.float32, torch.int32), strict=True)]
    args, options = kernel._arguments(launch, ins, outs, device, workspace) if launch.grid[0] else ([], {})
    return launch, args, options


def _compile(kernel: RegionKernel, ins: list[Any], device: torch.device) -> None:
    mine = getattr(_THREAD, "future", None)
    try:
        launch, args, options = stand_in_arguments(kernel, ins, device)
        if not launch.grid[0]:
            return
        in_worker = device.type == "cuda" and processes_enabled()
        if in_worker:
            ok, message = _in_worker_process(kernel, args, launch.grid, options, device)
            if not ok:  # resources, say: the launch compiles it again and reports it
                raise RuntimeError(message)
        start = time.perf_counter()
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            compiled = kernel.fn.warmup(*args, grid=launch.grid, **options)  # after a worker's: from its cache
        _count("thread loads (worker-compiled)" if in_worker else "thread compiles", time.perf_counter() - start)
        if kernel.config.cluster and device.type == "cuda":  # every cached copy launches as clusters, even one
            from .kernel import cluster_launch  # that lands after a launch tired of waiting patched its own

            cluster_launch(compiled, kernel.config.split)
        if device.type == "cuda" and not in_worker:  # a worker builds its own
            start = time.perf_counter()
            compile_worker.build_launcher(compiled)
            _count("thread launcher builds", time.perf_counter() - start)
    finally:
        with _LOCK:  # only this job's entry: a launch may have taken it off and a tuner queued another since
            if _PENDING.get((kernel.key, kernel.config)) is mine:
                del _PENDING[(kernel.key, kernel.config)]


def _in_worker_process(kernel: RegionKernel, args: Sequence[Any], grid: tuple[int, ...], options: dict[str, Any],
                       device: torch.device) -> tuple[bool, str]:
    """Compile in this thread's worker process: (True, "") once compiled, else (False, why). Where workers cannot be
    started (or keep dying) they are turned off with a warning and this answers (True, ""): the warmup that follows
    compiles the kernel in this thread."""
    from .kernel import kernel_file

    path, module, function = kernel_file(kernel.source, kernel.cache_dir)
    job = compile_worker.Job(str(path), module, function, tuple(compile_worker.describe(a) for a in args),
                             tuple(grid), tuple(options.items()), torch.cuda.get_device_capability(device),
                             _triton_cache_dir())
    worker = _thread_worker()
    start = time.perf_counter()
    try:
        ok, message, seconds = worker.run(job, timeout_s())
    except WorkerDied as e:
        if e.started and next(_DEATHS) <= _DEATHS_ALLOWED:  # this job fails; the next one starts a new worker
            _count("worker deaths", time.perf_counter() - start)
            return False, f"compile worker died: {e}"
        _turn_processes_off(str(e))
        return True, ""
    _count("worker compiles" if ok else "worker failures", seconds)
    _count("worker round trips", time.perf_counter() - start)
    return ok, message


def _thread_worker() -> WorkerProcess:
    """This compile thread's worker process (made, not started, on first use)."""
    worker: WorkerProcess | None = getattr(_THREAD, "worker", None)
    if worker is None:
        worker = _THREAD.worker = WorkerProcess()
    return worker


def start_workers() -> None:
    """With worker processes on, have every compile thread start its worker ahead of the first compile, without
    waiting: a worker's start costs about 1.7 s, most of it importing PyTorch in the child, which then overlaps the
    caller's work (an executable on CUDA calls this when built). Idle threads act on it within ``_IDLE_S``."""
    if processes_enabled():
        _START_WANTED.set()
        _ensure_threads()


def stop_workers(wait_s: float = 10.0) -> bool:
    """Have every compile thread stop its worker process (an idle thread at once, a busy one after its job), and
    wait up to ``wait_s`` for them to be gone: whether they are. A later job starts a new worker."""
    global _STOPS
    _START_WANTED.clear()
    with _LIVE_LOCK:
        _STOPS += 1
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        with _LIVE_LOCK:
            if not _LIVE:
                return True
        time.sleep(0.02)
    with _LIVE_LOCK:
        return not _LIVE


def _tend_worker(seen_stops: int) -> int:
    """Between jobs, on a compile thread: close its worker after a ``stop_workers``, start it after a
    ``start_workers``; the stop count now seen."""
    worker = getattr(_THREAD, "worker", None)
    with _LIVE_LOCK:
        stops = _STOPS
    if stops != seen_stops and worker is not None:
        worker.close()
    if _START_WANTED.is_set() and processes_enabled() and stops == _STOPS:
        with contextlib.suppress(WorkerDied):
            _thread_worker().start()
    return stops


def _turn_processes_off(why: str) -> None:
    if not _PROCESSES_FAILED.is_set():
        _PROCESSES_FAILED.set()
        warnings.warn(f"opgraph: compile worker processes turned off ({why}); compiling in threads", RuntimeWarning,
                      stacklevel=2)
        stop_workers(wait_s=0)


class WorkerDied(Exception):
    """A worker process that could not be started (``started`` False), or that died, broke its pipe or outlasted
    the timeout in a job."""

    def __init__(self, why: str, started: bool) -> None:
        super().__init__(why)
        self.started = started


class WorkerProcess:
    """A ``compile_worker`` process, started on its first job; ``run`` sends a job and waits for its reply. The
    worker runs in a session of its own (a Ctrl-C at the terminal reaches the parent alone); its stderr goes to
    ``OPGRAPH_COMPILE_WORKER_LOG`` where set."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        log = os.environ.get("OPGRAPH_COMPILE_WORKER_LOG", "")
        isolated = ["-P"] if sys.version_info >= (3, 11) else []  # not the working directory on sys.path
        start = time.perf_counter()
        err: Any = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115  (closed once the child has it)
        try:
            process = subprocess.Popen([sys.executable, *isolated, "-m", compile_worker.__name__],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                       start_new_session=True,
                                       env={**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"})
        except OSError as e:
            raise WorkerDied(f"cannot start {sys.executable}: {e}", started=False) from e
        finally:
            if log:
                err.close()
        _count("worker starts", time.perf_counter() - start)
        return process

    def start(self) -> subprocess.Popen[bytes]:
        """The worker process, started where there is none (or it has exited): returns at once, the child importing
        in the background."""
        if self.process is None or self.process.poll() is not None:
            self.process = self._start()
            with _LIVE_LOCK:
                _LIVE.add(self)
        return self.process

    def run(self, job: compile_worker.Job, timeout: float) -> tuple[bool, str, float]:
        """(ok, error message, seconds in the worker) of ``job``; raises ``WorkerDied`` where the process is gone
        or has not answered within ``timeout`` seconds (it is then killed)."""
        process = self.start()
        assert process.stdin is not None and process.stdout is not None
        try:
            pickle.dump(job, process.stdin)
            process.stdin.flush()
            if not select.select([process.stdout], [], [], timeout)[0]:
                raise WorkerDied(f"no answer in {timeout:.0f} s", started=True)
            reply: tuple[bool, str, float] = pickle.load(process.stdout)
            return reply
        except (OSError, EOFError, ValueError, pickle.UnpicklingError) as e:  # ValueError: a closed pipe
            self.close()
            raise WorkerDied(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__, started=True) from e
        except WorkerDied:
            self.close()
            raise

    def close(self) -> None:
        process, self.process = self.process, None
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if process is None:
            return
        for pipe in (process.stdin, process.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait(5)


def _triton_cache_dir() -> str | None:
    """The Triton cache this process reads (its setting may be Python's, not an environment variable's)."""
    with contextlib.suppress(Exception):
        from triton import knobs

        return str(Path(knobs.cache.dir))
    return os.environ.get("TRITON_CACHE_DIR")


def _submit(job: Callable[[], None], priority: int = BACKGROUND) -> Future[None]:
    """``job`` run by the daemon threads (``compile_threads()`` of them, started on first use)."""
    future: Future[None] = Future()
    _QUEUE.put((priority, next(_ORDER), future, job))
    _ensure_threads()
    return future


def _ensure_threads() -> int:
    """The compile threads, started on first use (``compile_threads()`` of them then): their count."""
    with _WORKERS_LOCK:
        if not _WORKERS:
            from .kernel import compile_threads

            for n in range(compile_threads()):
                worker = threading.Thread(target=_work, name=f"opgraph-compile_{n}", daemon=True)
                worker.start()
                _WORKERS.append(worker)
        return len(_WORKERS)


def _work() -> None:
    seen_stops = _STOPS
    while True:
        seen_stops = _tend_worker(seen_stops)
        try:
            _, _, future, job = _QUEUE.get(timeout=_IDLE_S)
        except queue.Empty:
            continue
        seen_stops = _tend_worker(seen_stops)
        if not future.set_running_or_notify_cancel():
            continue
        _THREAD.future = future
        try:
            job()
            future.set_result(None)
        except BaseException as e:  # the launch compiles again and reports it
            future.set_exception(e)
        finally:
            _THREAD.future = None


__all__ = ["STATS", "channels_last_strides", "compile_ahead", "enabled", "precompile", "processes_enabled",
           "stand_in", "start_workers", "stop_workers", "timeout_s", "wait_for"]
