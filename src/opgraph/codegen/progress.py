"""Progress of an executable's first run, where its generated kernels compile (and reductions tune) one by one as
they first launch: a ResNet-50 training step compiles hundreds of them, which takes minutes the first time.

On a terminal, a line on stderr is redrawn as kernels start, once the run has taken ``QUIET_SECONDS`` (quick
compiles print nothing), and ends with the total. ``OPGRAPH_PROGRESS=0`` silences it; ``OPGRAPH_PROGRESS=1``
prints it where stderr is not a terminal too (the final line only). Per thread: autograd runs a backward
executable on a thread of its own.

>>> import io
>>> stream = io.StringIO()
>>> with first_run(2, stream=stream, show=True, quiet_seconds=0.0):
...     kernel_started("fused_region_exp")
...     kernel_started("fused_region_sum")
>>> stream.getvalue().splitlines()[-1].startswith("opgraph: first run compiled 2 of 2 generated kernels in")
True
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

QUIET_SECONDS = 2.0  # first runs shorter than this print nothing
REDRAW_SECONDS = 0.1
_STATE = threading.local()


class _Run:
    def __init__(self, total: int, stream: TextIO, live: bool, quiet_seconds: float) -> None:
        self.total, self.stream, self.live, self.quiet_seconds = total, stream, live, quiet_seconds
        self.done = 0
        self.start = self.last = time.perf_counter()
        self.drawn = False

    def started(self, name: str) -> None:
        self.done += 1
        now = time.perf_counter()
        if not self.live or now - self.start < self.quiet_seconds or now - self.last < REDRAW_SECONDS:
            return
        self.last, self.drawn = now, True
        self.stream.write(f"\ropgraph: first run, kernel {self.done}/{self.total} ({now - self.start:.0f} s) "
                          f"{name[:48]:<48}")
        self.stream.flush()

    def finish(self) -> None:
        elapsed = time.perf_counter() - self.start
        if elapsed < self.quiet_seconds and not self.drawn:
            return
        back, pad = ("\r", " " * 64) if self.drawn else ("", "")
        self.stream.write(f"{back}opgraph: first run compiled {self.done} of {self.total} generated kernels in "
                          f"{elapsed:.1f} s{pad}\n")
        self.stream.flush()


def _wanted(stream: TextIO) -> tuple[bool, bool]:
    """(print at all, redraw live) from ``OPGRAPH_PROGRESS`` and whether ``stream`` is a terminal."""
    setting = os.environ.get("OPGRAPH_PROGRESS", "")
    terminal = bool(getattr(stream, "isatty", lambda: False)())
    if setting == "0":
        return False, False
    return terminal or setting == "1", terminal


@contextmanager
def first_run(total: int, *, stream: TextIO | None = None, show: bool | None = None,
              quiet_seconds: float | None = None) -> Iterator[None]:
    """Report the ``total`` generated kernels that start (``kernel_started``) on this thread inside the block.
    ``show``: force printing on or off (default: ``OPGRAPH_PROGRESS`` and whether stderr is a terminal);
    ``quiet_seconds``: print nothing for a block shorter than this (default ``QUIET_SECONDS``)."""
    out = stream if stream is not None else sys.stderr
    enabled, live = _wanted(out)
    if show is not None:
        enabled, live = show, show
    if not enabled or total == 0 or getattr(_STATE, "run", None) is not None:  # nested runs report to the outer
        yield
        return
    run = _STATE.run = _Run(total, out, live, QUIET_SECONDS if quiet_seconds is None else quiet_seconds)
    try:
        yield
    finally:
        _STATE.run = None
        run.finish()


def kernel_started(name: str) -> None:
    """A generated kernel launches for the first time (it compiles, and tunes, now)."""
    run = getattr(_STATE, "run", None)
    if run is not None:
        run.started(name)


__all__ = ["QUIET_SECONDS", "first_run", "kernel_started"]
