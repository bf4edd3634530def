"""Every script in ``benchmarks/`` answers ``--help`` (exit 0, its usage and description) without a GPU: the
scripts are run by people on machines CI never sees, so at least their argument parsing and imports are checked."""

from __future__ import annotations

import contextlib
import io
import runpy
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted(p for p in (Path(__file__).parents[1] / "benchmarks").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_answers_help(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        runpy.run_path(str(script), run_name="__main__")
    assert stop.value.code == 0
    text = out.getvalue()
    assert text.startswith("usage:") and "--help" in text and len(text.splitlines()) > 5, text
