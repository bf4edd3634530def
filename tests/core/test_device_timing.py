"""``core.device_timing.device_probe``: a device question is asked once per arguments, and not while a CUDA graph
is being captured (the answer is then no, and not kept)."""

from __future__ import annotations

import pytest
import torch

from opgraph.core import device_timing


def test_a_probe_is_asked_once_per_arguments_and_not_during_a_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[int, str]] = []

    @device_timing.device_probe
    def probe(n: int, kind: str) -> bool:
        asked.append((n, kind))
        return True

    assert probe(1, "a") and probe(1, "a") and probe(2, "a")
    assert asked == [(1, "a"), (2, "a")] and probe.cache_info().hits == 1  # type: ignore[attr-defined]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert probe(3, "a") is False and probe(1, "a") is False  # nothing runs, cached answers included
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert probe(3, "a") is True and asked[-1] == (3, "a")  # the capture's "no" was not kept
    probe.cache_clear()  # type: ignore[attr-defined]
    assert probe(1, "a") and asked[-1] == (1, "a")
