"""Compiling an executable's generated kernels in the background as soon as it is built, before its first run.

Without it each kernel compiles at its first launch, one after another on the calling thread (a tuned kernel's
candidates in threads, but one kernel at a time). A kernel whose input types are static is compiled here for
contiguous inputs of those types, in ``compile_threads()`` background threads, while the caller goes on (a torch
step's backward graph is traced and compiled meanwhile). A kernel that will be tuned has all its candidates
compiled, or only the configuration a tuning record names. Nothing runs and no device memory is allocated: the
inputs, outputs and split workspaces are Triton's ``MockTensor`` stand-ins, whose address is aligned as PyTorch's
allocations are, so the launch that follows finds its kernel compiled. Inputs that turn out strided, or at an
address that is not a multiple of 16 bytes, take another specialisation, compiled at launch.

A launch (and a tuner's own compile) of a configuration compiling here waits for it instead of compiling it twice;
one still queued is taken off the queue and compiled by the launch itself. The workers are daemon threads, so a
process exits without finishing the queue. Off unless ``OPGRAPH_PRECOMPILE=1``: whether it pays, against the GIL it
shares with the caller, is measured by ``benchmarks/compile_breakdown.py``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .kernel import RegionKernel

_PENDING: dict[tuple[str, Any], Future[None]] = {}  # (source key, configuration) -> its background compile
_LOCK = threading.Lock()
_QUEUE: queue.Queue[tuple[Future[None], Callable[[], None]]] = queue.Queue()
_WORKERS: list[threading.Thread] = []
_WORKERS_LOCK = threading.Lock()  # apart from _LOCK, which ``precompile`` holds while it submits


def enabled() -> bool:
    return os.environ.get("OPGRAPH_PRECOMPILE", "0") == "1"


def wait_for(key: str, config: Any) -> None:
    """Return once no background compile of the source ``key`` in ``config`` is running (at once where none is;
    configurations differ in their launch options, so candidates may share a source)."""
    pending = _PENDING.get((key, config))
    if pending is None:
        return
    if pending.cancel():  # still queued: the launch compiles it now rather than wait for the queue ahead of it
        with _LOCK:
            _PENDING.pop((key, config), None)
        return
    with contextlib.suppress(Exception):  # a failed compile is left to the launch, which reports it
        pending.result()


def stand_in(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Any:
    """A contiguous tensor of ``shape`` and ``dtype`` on ``device`` as Triton's ``warmup`` sees one (Triton's
    ``MockTensor``: an aligned address), with the sizes, strides and device the launcher code reads."""
    from triton.runtime.jit import MockTensor

    class Contiguous(MockTensor):
        def stride(self, dim: int | None = None) -> Any:
            strides = tuple(math.prod(shape[k + 1:]) for k in range(len(shape)))
            return strides if dim is None else strides[dim]

    t = Contiguous(dtype, list(shape))
    t.shape, t.device = tuple(shape), device
    return t


def precompile(kernel: RegionKernel, device: torch.device) -> list[RegionKernel]:
    """Queue the background compiles of ``kernel`` (module docstring); the configurations queued."""
    from .kernel import TUNE_MIN_ELEMENTS

    if not all(t.is_static for t in kernel.in_types):
        return []
    shapes = [tuple(int(d) for d in t.shape) for t in kernel.in_types]  # type: ignore[arg-type]
    ins = [stand_in(s, t.dtype.torch_dtype, device) for s, t in zip(shapes, kernel.in_types, strict=True)]
    jobs: list[RegionKernel] = [kernel]
    if kernel.alternatives is not None and max((math.prod(s) for s in shapes), default=0) >= TUNE_MIN_ELEMENTS:
        candidates = [kernel, *kernel.alternatives()]
        remembered = kernel.recorded_choice(candidates, ins)[1]
        jobs = [k for k in candidates if k.config == remembered] or candidates
    queued = []
    with _LOCK:
        for k in jobs:
            if (k.key, k.config) in _PENDING:
                continue
            _PENDING[(k.key, k.config)] = _submit(functools.partial(_compile, k, ins, device))
            queued.append(k)
    return queued


def _compile(kernel: RegionKernel, ins: list[Any], device: torch.device) -> None:
    try:
        launch = kernel._launch(tuple(tuple(x.shape) for x in ins))
        if not launch.grid[0]:
            return
        outs = [stand_in(s, t.dtype.torch_dtype, device) for s, t in zip(launch.out_shapes, kernel.out_types,
                                                                         strict=True)]
        workspace = None
        if kernel.config.split > 1:  # stand-ins too: a background thread allocates nothing on the device
            sizes = kernel.workspace_sizes(launch.grid[0] // kernel.config.split)
            workspace = [stand_in((n,), dt, device) for n, dt in zip(sizes, (torch.float32, torch.int32),
                                                                        strict=True)]
        args, options = kernel._arguments(launch, ins, outs, device, workspace)
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            kernel.fn.warmup(*args, grid=launch.grid, **options)
    finally:
        with _LOCK:
            _PENDING.pop((kernel.key, kernel.config), None)


def _submit(job: Callable[[], None]) -> Future[None]:
    """``job`` run by the daemon workers (``compile_threads()`` of them, started on first use)."""
    future: Future[None] = Future()
    _QUEUE.put((future, job))
    with _WORKERS_LOCK:
        if not _WORKERS:
            from .kernel import compile_threads

            for n in range(compile_threads()):
                worker = threading.Thread(target=_work, name=f"opgraph-precompile_{n}", daemon=True)
                worker.start()
                _WORKERS.append(worker)
    return future


def _work() -> None:
    while True:
        future, job = _QUEUE.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            job()
            future.set_result(None)
        except BaseException as e:  # the launch compiles again and reports it
            future.set_exception(e)


__all__ = ["enabled", "precompile", "stand_in", "wait_for"]
