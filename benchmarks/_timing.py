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
