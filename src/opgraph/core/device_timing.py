"""Device time of a call on CUDA, as the kernel tuner and the compile-time probes measure it, and probes of the
device cached per question.

Timed back to back from the host, kernels under ~60 us measure Python's launch rate, not themselves: the timed
launches are queued behind a spinning kernel (~1.5 ms), so they wait while the GPU is busy.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

TUNE_LAUNCHES = 5
TUNE_HEAD_START_CYCLES = 3_000_000
SPIN_CYCLES_PER_MS = 2_000_000  # the H200's SMs run at up to 1.98 GHz: a spin lasts at least cycles / this ms


def device_ms(call: Callable[[], object], launches: int = TUNE_LAUNCHES,
              head_start_cycles: int = TUNE_HEAD_START_CYCLES) -> float:
    """Device time of ``launches`` calls queued behind a spinning kernel of ``head_start_cycles``. Should the host
    take longer to queue them than the spin lasts (a GC pause, a busy process), the GPU waited on it: timed again
    with a spin twice as long, up to twice."""
    cycles = head_start_cycles
    while True:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        torch.cuda._sleep(cycles)
        start.record()
        for _ in range(launches):
            call()
        end.record()
        queued_ms = (time.perf_counter() - t0) * 1e3
        end.synchronize()
        if queued_ms < cycles / SPIN_CYCLES_PER_MS or cycles >= 4 * head_start_cycles:
            return float(start.elapsed_time(end))
        cycles *= 2


F = TypeVar("F", bound=Callable[..., bool])


def device_probe(fn: F) -> F:
    """``fn`` (a question asked of the device by running something on it) answered once per arguments, except
    while a CUDA graph is being captured: nothing may run then, so the answer is no (``False``) and not kept.
    The wrapper has ``cache_clear`` and ``cache_info``."""
    cached = functools.cache(fn)

    @functools.wraps(fn)
    def probe(*args: Any) -> bool:
        if torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
            return False
        return cached(*args)

    probe.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    probe.cache_info = cached.cache_info  # type: ignore[attr-defined]
    return probe  # type: ignore[return-value]


__all__ = ["SPIN_CYCLES_PER_MS", "TUNE_HEAD_START_CYCLES", "TUNE_LAUNCHES", "device_ms", "device_probe"]
