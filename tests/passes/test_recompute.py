"""Recomputation for fusion (``passes.recompute``): a cheap producer read by fusable ops that cannot share one
region is copied into each, so it fuses there instead of being written and read back. Batch-norm's gradient
pattern against the unfused executable (Triton's interpreter), and the cost rule's refusals."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton.fused import can_fuse, reduced_axes  # noqa: E402
from opgraph.passes.program import Program  # noqa: E402
from opgraph.passes.recompute import recompute_cheap_producers  # noqa: E402

FUSED = og.CompilationDescriptor(fusion=True, triton_interpret=True, verify_each_pass=True)
PLAIN = og.CompilationDescriptor(fusion=False)


def _bn_gradient(g: og.Graph) -> tuple[list[og.Tensor], og.Tensor, og.Tensor]:
    """The input and weight gradients of batch norm over (N, C, H, W), as autodiff writes them: ``x - mean`` is
    read by the weight-gradient reduction and by the input gradient that uses the reduction's result."""
    x = g.placeholder((4, 3, 5, 6), og.float32, name="x")
    dy = g.placeholder((4, 3, 5, 6), og.float32, name="dy")
    mean = g.placeholder((3,), og.float32, name="mean")
    invstd = g.placeholder((3,), og.float32, name="invstd")
    channel = lambda v: g.expand_dims(g.expand_dims(g.expand_dims(v, 0), 2), 3)  # noqa: E731
    xm = g.subtract(x, channel(mean), name="xm")
    dw = g.reduce_sum(dy * xm, [0, 2, 3], name="dw")
    k = dw * invstd * invstd * (1.0 / 120)
    dx = (dy - xm * channel(k)) * channel(invstd)
    return [x, dy, mean, invstd], dx, g.multiply(dw, invstd, name="dgamma")


def _ops(exe: og.Executable) -> list[str]:
    return [o.op.name for o in exe.program.graph.ops]


def test_batch_norm_gradient_recomputes_the_centred_input() -> None:
    g = og.Graph()
    feeds, dx, dgamma = _bn_gradient(g)
    types = {t: t.type for t in feeds}
    fused = g.compile(types, [dx, dgamma], device="cpu", descriptor=FUSED)
    plain = g.compile(types, [dx, dgamma], device="cpu", descriptor=PLAIN)
    names = _ops(fused)
    assert "subtract" not in names, names  # no kernel writes x - mean ...
    reading_x = [[s.name for s in o.attrs.steps] for o in fused.program.graph.ops
                 if o.op.name == "fused_region" and any(t.name == "x" for t in o.inputs)]
    # ... the reduction's region and the input gradient's each compute their copy
    assert len(reading_x) == 2 and all(any(n.startswith("xm.r") for n in s) for s in reading_x), reading_x
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(4, 3, 5, 6, generator=gen), torch.randn(4, 3, 5, 6, generator=gen),
            torch.randn(3, generator=gen), torch.rand(3, generator=gen) + 0.5]
    for got, want in zip(fused.run(args), plain.run(args), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _program(g: og.Graph, feeds: list[og.Tensor], outs: list[og.Tensor]) -> Program:
    exe = g.compile({t: t.type for t in feeds}, outs, device="cpu", descriptor=og.CompilationDescriptor(
        fusion=False, optimization_level=0))
    return exe.program


def _copies(program: Program) -> list[str]:
    return [o.name for o in recompute_cheap_producers(program, can_fuse, reduced_axes).graph.ops if ".r" in o.name]


def test_independent_readers_share_a_region_instead() -> None:
    # two elementwise readers that do not read each other's results join one region: nothing to copy
    g = og.Graph()
    x = g.placeholder((8, 8), og.float32)
    e = g.exp(x, name="e")
    assert _copies(_program(g, [x], [g.sin(e), g.cos(e)])) == []


def test_a_producer_with_three_full_inputs_is_stored() -> None:
    # recomputing reads 3 inputs per reader (6 passes) where storing costs 3 + 1 + 2 (6): not fewer, kept
    g = og.Graph()
    c = g.placeholder((8, 8), og.bool)
    a, b = (g.placeholder((8, 8), og.float32) for _ in range(2))
    s = g.select(c, a, b, name="s")
    r = g.reduce_sum(s, [1], keepdims=True)
    assert _copies(_program(g, [c, a, b], [s * r])) == []


def test_a_program_output_is_not_copied() -> None:
    g = og.Graph()
    x = g.placeholder((8, 8), og.float32)
    e = g.exp(x, name="e")
    r = g.reduce_sum(e, [0], keepdims=True)  # a column sum: its use cannot share its region
    assert _copies(_program(g, [x], [e * r])) == ["e.r", "e.r2"]  # read by the reduction and by its use
    assert _copies(_program(g, [x], [e * r, e])) == []  # stored anyway: its readers read it back
    # returned as a view (a channels-last graph's NCHW transpose of an NHWC value): stored anyway too
    assert _copies(_program(g, [x], [e * r, g.transpose(g.reshape(e, (4, 16)), [1, 0])])) == []


def test_a_row_reduction_and_its_use_keep_one_region() -> None:
    # the normalisation pattern: one region computes e once, so nothing is copied
    g = og.Graph()
    x = g.placeholder((8, 8), og.float32)
    e = g.exp(x, name="e")
    assert _copies(_program(g, [x], [e * g.reduce_sum(e, [1], keepdims=True)])) == []


def test_chains_stay_linear() -> None:
    """Layers of cheap ops, each read twice, under a column reduction and its use: the bookkeeping counts
    copies (it does not list them, which doubled per layer), and the copies stay within the graph's size;
    a chain of row reductions and their uses is not copied at all."""
    import time

    g = og.Graph()
    x0 = g.placeholder((4, 8), og.float32)
    x = x0
    for _ in range(24):
        x = x * 1.1 + g.slice(x * 0.9, [0, 0], [1, 8])
    out = x * g.reduce_sum(x, [0], keepdims=True)
    program = _program(g, [x0], [out])
    start = time.perf_counter()
    copies = _copies(program)
    assert time.perf_counter() - start < 20 and len(copies) <= len(program.graph.ops) + 64, len(copies)
    g = og.Graph()
    y0 = g.placeholder((4, 8), og.float32)
    y = y0
    for _ in range(40):
        y = y - g.reduce_sum(y, [1], keepdims=True) * 0.1
    assert _copies(_program(g, [y0], [y])) == []


def test_a_diamond_of_copied_producers_is_copied_once_per_reader() -> None:
    # d reads b and c, both read a; all three are copied into the reduction and its use: one copy of each per
    # reader, not one per path
    g = og.Graph()
    x = g.placeholder((8, 8), og.float32)
    a = g.exp(x, name="a")
    d = g.add(g.sin(a, name="b"), g.cos(a, name="c"), name="d")
    r = g.reduce_sum(d, [0], keepdims=True)
    copies = _copies(_program(g, [x], [d * r]))
    assert sorted(n.split(".")[0] for n in copies) == ["a", "a", "b", "b", "c", "c", "d", "d"], copies


def test_a_value_compared_exactly_is_not_recomputed() -> None:
    """A min's gradient compares each element with the min (``equal``): a kernel's own copy of the sigmoid could
    differ in its last bit from the one the min was taken on, and a row with no match divides 0 by 0. Found by a
    review: the fused gradient had NaN in 20 of 20 runs."""
    g = og.Graph()
    x = g.placeholder((64, 3, 32), og.float32)
    t = g.transpose(g.sigmoid(x), (2, 0, 1))
    loss = g.reduce_sum(g.square(g.reduce_min(t, axes=(1,)))) + g.reduce_sum(g.tanh(t))
    dx = g.gradients(loss, [x])[x]
    fused = g.compile({x: x.type}, [dx], device="cpu", descriptor=FUSED)
    plain = g.compile({x: x.type}, [dx], device="cpu", descriptor=PLAIN)
    for seed in range(3):
        xv = torch.randn(64, 3, 32, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(fused.run([xv])[0], plain.run([xv])[0], rtol=1e-5, atol=1e-6)
