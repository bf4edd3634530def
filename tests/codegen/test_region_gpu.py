"""Every fused reduction kind on CUDA against the unfused executable: rows held in registers, rows walked in
steps (looped), and rows split across programs that meet at a barrier (split), in float32/float16/bfloat16."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import opgraph as og

pytest.importorskip("triton")
pytestmark = pytest.mark.gpu

FUSED = og.CompilationDescriptor(fusion=True, cuda_graphs=False)
PLAIN = og.CompilationDescriptor(cuda_graphs=False)
TOL = {og.float32: dict(rtol=2e-5, atol=2e-5), og.float16: dict(rtol=2e-2, atol=2e-2),
       og.bfloat16: dict(rtol=5e-2, atol=5e-2)}

# each builds a region of at least two computing ops around one reduction kind
CASES: dict[str, Callable[..., og.Tensor]] = {
    "softmax": lambda g, x, w: g.softmax(x * 0.5, -1) * 2.0,
    "log_softmax": lambda g, x, w: g.log_softmax(x + w, -1),
    "layer_norm": lambda g, x, w: g.relu(g.layer_norm(x * 2.0, [1], gamma=w, beta=w)),
    "rms_norm": lambda g, x, w: g.rms_norm(x + 1.0, [1], gamma=w),
    "variance": lambda g, x, w: g.sqrt(g.variance(x, [1], keepdims=True) + 1.0),
    "sum": lambda g, x, w: g.reduce_sum(x * w, [1]),
    "mean_keep": lambda g, x, w: x - g.reduce_mean(x, [1], keepdims=True),
    "max": lambda g, x, w: g.exp(x - g.reduce_max(x, [1], keepdims=True)),
    "column_sum": lambda g, x, w: g.reduce_sum(g.tanh(x), [0]),
}


def _run(case: str, rows: int, width: int, dt: og.DType) -> tuple[list[torch.Tensor], list[torch.Tensor], Any]:
    g = og.Graph()
    x = g.placeholder((rows, width), dt)
    w = g.placeholder((width,), dt)
    y = CASES[case](g, x, w)
    feeds = {x: x.type, w: w.type}
    gen = torch.Generator().manual_seed(width)
    xs = [torch.randn(rows, width, generator=gen).to(dt.torch_dtype).cuda(),
          torch.randn(width, generator=gen).to(dt.torch_dtype).cuda()]
    fused = g.compile(feeds, [y], device="cuda", descriptor=FUSED)
    plain = g.compile(feeds, [y], device="cuda", descriptor=PLAIN)
    return fused.run(xs), plain.run(xs), fused


@pytest.mark.parametrize("dt", [og.float32, og.float16, og.bfloat16])
@pytest.mark.parametrize("width", [1000, 40000, 100003])  # persistent; split (or looped); split, ragged
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_reduction_matches_unfused(case: str, width: int, dt: og.DType) -> None:
    got, want, exe = _run(case, 6, width, dt)
    assert any(k.op == "fused_region" for k in exe.kernels())
    tol = dict(TOL[dt])
    if case in ("sum", "column_sum", "variance"):  # sums of many terms: summation order differs
        tol = dict(rtol=max(tol["rtol"], 1e-3), atol=max(tol["atol"], 1e-3 * width ** 0.5))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.float(), b.float(), equal_nan=True, **tol)


def test_split_reduction_replays_in_a_cuda_graph() -> None:
    """The barrier counters are reset by each launch, so replays (and reruns) keep giving the same result."""
    g = og.Graph()
    x = g.placeholder((4, 70000), og.float32)
    y = g.softmax(x * 3.0, -1)
    exe = g.compile({x: x.type}, [y], device="cuda", descriptor=og.CompilationDescriptor(fusion=True))
    ref = torch.softmax(torch.ones(1, device="cuda") * 0, -1)  # noqa: F841  (initialises the context)
    for k in range(5):
        v = torch.randn(4, 70000, device="cuda") * (k + 1)
        torch.testing.assert_close(exe.run([v])[0], torch.softmax(v * 3.0, -1), rtol=1e-5, atol=1e-6)
    (kernel,) = [k for k in exe.kernels() if k.op == "fused_region"]
    assert "atomic_add" in (kernel.source or "")  # the split (barrier) variant ran
