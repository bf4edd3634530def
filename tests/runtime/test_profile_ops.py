"""``CompilationDescriptor(profile_ops=True)``: each op's PyTorch calls run inside a profiler range named after
the op, so a profile attributes them; without it the generated run has no ranges."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

import opgraph as og


def _graph() -> tuple[og.Graph, og.Tensor, og.Tensor]:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    y = g.reduce_sum(g.exp(x, name="e"), [1], name="s")
    return g, x, y


def _parents(exe: og.Executable, x: torch.Tensor) -> dict[str, str]:
    """Each ATen op of a run -> the name of the profiler range around it ("" where none)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        exe.run([x])
    out = {}
    for e in prof.events():
        if e.name.startswith("aten::") and e.name not in out:
            parent = e.cpu_parent
            while parent is not None and parent.name.startswith("aten::"):
                parent = parent.cpu_parent
            out[e.name] = parent.name if parent is not None else ""
    return out


def test_each_ops_calls_nest_under_its_name() -> None:
    g, x, y = _graph()
    exe = g.compile({x: x.type}, [y], device="cpu",
                    descriptor=og.CompilationDescriptor(profile_ops=True, fusion=False))
    xv = torch.randn(4, 8)
    torch.testing.assert_close(exe.run([xv])[0], torch.exp(xv).sum(1))
    parents = _parents(exe, xv)
    assert parents["aten::exp"] == "exp %e" and parents["aten::sum"] == "reduce_sum %s", parents
    assert "with _range('exp %e'):" in exe.source


def test_off_by_default() -> None:
    g, x, y = _graph()
    exe = g.compile({x: x.type}, [y], device="cpu", descriptor=og.CompilationDescriptor(fusion=False))
    assert "_range" not in exe.source
    assert not any(p.startswith("exp ") for p in _parents(exe, torch.randn(4, 8)).values())


def test_the_torch_backend_takes_the_option() -> None:
    fn = torch.compile(lambda t: torch.exp(t).sum(1), backend="opgraph", options={"profile_ops": True})
    xv = torch.randn(4, 8)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.testing.assert_close(fn(xv), torch.exp(xv).sum(1))
    assert any(e.name.startswith("exp %") for e in prof.events()), sorted({e.name for e in prof.events()})
