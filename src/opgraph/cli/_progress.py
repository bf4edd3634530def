"""A tiny progress indicator on stderr: animated on a terminal, one line per step otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class Progress:
    """Report steps (``with p.step("compiling"): ...``) and loops (``p.update(i, n)``).

    ``enabled=False`` prints nothing (``--quiet``); off a terminal only finished steps are printed.
    """

    def __init__(self, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self._label = ""
        self._last = 0.0

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        """Show ``label`` while the block runs, then ``label ... done (time)``."""
        self._label = label
        if self.live:
            self._write(f"\r{label} ...")
        t0 = time.perf_counter()
        try:
            yield
        except BaseException:
            if self.live:
                self._write(f"\r{label} ... failed\n")
            raise
        dt = time.perf_counter() - t0
        if self.enabled:
            pad = "\r" if self.live else ""
            self._write(f"{pad}{label} ... done ({_seconds(dt)})" + (" " * 24 if self.live else "") + "\n")

    def update(self, done: int, total: int) -> None:
        """Draw a bar for ``done``/``total`` inside the current step (at most ~20 times a second)."""
        now = time.perf_counter()
        if not self.live or (now - self._last < 0.05 and done < total):
            return
        self._last = now
        width = 24
        filled = width * done // max(total, 1)
        self._write(f"\r{self._label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def _seconds(dt: float) -> str:
    return f"{dt * 1e3:.0f} ms" if dt < 1 else f"{dt:.2f} s"
