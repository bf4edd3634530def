"""The first run's progress line (codegen/progress.py): generated kernels report their first launch to the run
that compiles them; quiet for quick runs, silenced by ``OPGRAPH_PROGRESS=0``, off a terminal only with ``=1``."""

from __future__ import annotations

import io
import threading

import pytest
import torch

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.codegen import progress  # noqa: E402


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _fused_graph() -> tuple[og.Graph, og.Tensor, list[og.Tensor]]:
    g = og.Graph()
    x = g.placeholder((64, 8), og.float32)
    a = g.exp(x * 2.0) + 1.0
    b = g.reduce_sum(g.tanh(g.matmul(a, g.constant(torch.randn(8, 8)))), [1])  # after the matmul: a second region
    return g, x, [a, b]


def test_an_executables_first_run_counts_its_generated_kernels(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPGRAPH_PROGRESS", "1")
    monkeypatch.setattr(progress, "QUIET_SECONDS", 0.0)
    g, x, outs = _fused_graph()
    exe = g.compile({x: x.type}, outs, device="cpu",
                    descriptor=og.CompilationDescriptor(fusion=True, triton_interpret=True))
    generated = sum(k.source is not None for k in exe.kernels())
    assert generated >= 2
    exe.run([torch.randn(64, 8)])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"opgraph: first run compiled {generated} of {generated} generated kernels in"), lines
    exe.run([torch.randn(64, 8)])  # later runs compile nothing and say nothing
    assert capsys.readouterr().err == ""


def test_quiet_unless_long_or_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    for setting, stream, quiet, want in [("", io.StringIO(), 0.0, False),  # not a terminal
                                         ("1", io.StringIO(), 0.0, True),
                                         ("0", Terminal(), 0.0, False),
                                         ("", Terminal(), 0.0, True),
                                         ("", Terminal(), 60.0, False)]:  # quicker than the quiet time
        monkeypatch.setenv("OPGRAPH_PROGRESS", setting)
        with progress.first_run(3, stream=stream, quiet_seconds=quiet):
            for _ in range(3):
                progress.kernel_started("k")
        assert bool(stream.getvalue()) is want, (setting, type(stream).__name__, quiet)


def test_a_terminal_sees_the_line_redrawn_then_the_total(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "REDRAW_SECONDS", 0.0)
    stream = Terminal()
    with progress.first_run(2, stream=stream, show=True, quiet_seconds=0.0):
        progress.kernel_started("fused_region_exp +1 ops")
        progress.kernel_started("fused_region_sum")
    text = stream.getvalue()
    assert "kernel 1/2" in text and "kernel 2/2" in text and "fused_region_exp +1 ops" in text
    assert text.endswith("\n") and "compiled 2 of 2" in text.rsplit("\r", 1)[-1]


def test_per_thread_and_nested_runs_report_to_the_outer() -> None:
    outer, inner = io.StringIO(), io.StringIO()
    with progress.first_run(2, stream=outer, show=True, quiet_seconds=0.0):
        progress.kernel_started("a")
        with progress.first_run(5, stream=inner, show=True, quiet_seconds=0.0):
            progress.kernel_started("b")
        thread = threading.Thread(target=progress.kernel_started, args=("elsewhere",))  # no run on that thread
        thread.start()
        thread.join()
    assert "compiled 2 of 2" in outer.getvalue() and inner.getvalue() == ""  # "b" counted, "elsewhere" not
