"""Timing shared by the benchmark scripts: each case's mean seconds per call over ``iters`` calls, measured in
``repeats`` rounds with the cases interleaved (the order rotating, so that none always runs first) and the
garbage collector off."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any


def time_calls(fn: Callable[[], Any], iters: int, sync: Callable[[], None]) -> float:
    """Mean seconds per call of ``iters`` back-to-back calls, synchronised before and after."""
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def interleaved(cases: dict[str, Callable[[], Any]], iters: int, repeats: int,
                sync: Callable[[], None]) -> dict[str, list[float]]:
    """Per case, ``repeats`` samples of ``time_calls`` after one warm-up pass of ``iters // 4`` calls."""
    for fn in cases.values():
        time_calls(fn, max(1, iters // 4), sync)
    samples: dict[str, list[float]] = {k: [] for k in cases}
    order = list(cases)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeats):
            for k in order[r % len(order):] + order[:r % len(order)]:
                samples[k].append(time_calls(cases[k], iters, sync))
    finally:
        if was_enabled:
            gc.enable()
    return samples


def common_arguments(p: Any, args: Any, iters: tuple[int, int], repeats: tuple[int, int]) -> tuple[int, int, Any]:
    """Apply ``--threads`` and resolve ``--iters``, ``--repeats`` (defaults as (quick, full)) and ``--device``
    (CUDA when present); bad values end the program through ``p.error``."""
    import torch

    import opgraph as og

    if args.threads is not None:
        if args.threads < 1:
            p.error("--threads must be >= 1")
        torch.set_num_threads(args.threads)
    n_iters = args.iters or iters[0 if args.quick else 1]
    n_repeats = args.repeats or repeats[0 if args.quick else 1]
    if n_iters < 1 or n_repeats < 1:
        p.error("--iters and --repeats must be >= 1")
    try:
        dev = og.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except og.DeviceError as e:
        p.error(str(e))
    return n_iters, n_repeats, dev


def aten_calls(fn: Callable[[], Any], runs: int = 3) -> int:
    """Outermost ATen calls one call of ``fn`` makes (the profiler's top-level ``aten::`` events)."""
    import torch

    with torch.profiler.profile() as prof:
        for _ in range(runs):
            fn()
    outermost = [e for e in prof.events() if e.name.startswith("aten::")
                 and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
    return len(outermost) // runs


class PageFaults:
    """Minor page faults of the process during the calls of each wrapped function: memory the C allocator gave back
    to the system and touched again (on the CPU a training step can spend milliseconds there). ``per_call`` is
    None where ``resource`` is missing (Windows)."""

    def __init__(self) -> None:
        try:
            import resource
        except ImportError:
            self._usage = None
        else:
            self._usage = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        self._faults: dict[str, int] = {}
        self._calls: dict[str, int] = {}

    def wrap(self, name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        usage = self._usage
        if usage is None:
            return fn
        self._faults[name], self._calls[name] = 0, 0

        def counted() -> Any:
            before = usage()
            try:
                return fn()
            finally:
                self._faults[name] += usage() - before
                self._calls[name] += 1

        return counted

    def per_call(self, name: str) -> float | None:
        calls = self._calls.get(name)
        return self._faults[name] / calls if calls else None
