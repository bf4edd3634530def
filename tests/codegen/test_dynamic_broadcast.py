"""Dynamic dims that broadcast at run time: region formation takes a dynamic dim of a value to match the domain's
(``None`` against ``None``), so a value that broadcasts past the domain at run time (a row of a reduction times a
longer operand) would be cut short. The kernel refuses such shapes at launch (``DynamicBroadcast``) and the fused
op runs a kernel written for those static shapes instead (at most ``SPECIALIZED_MAX`` a region, then its steps
unfused); shapes that agree, inputs of size 1 (broadcast by the kernel itself) and inputs read through index rules
keep the kernel."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton.kernel import DynamicBroadcast, region_kernel, region_of  # noqa: E402

FUSED = og.CompilationDescriptor(fusion=True, triton_interpret=True)
PLAIN = og.CompilationDescriptor(fusion=False)


@pytest.mark.parametrize("keepdims", [False, True])
def test_a_row_that_broadcasts_against_a_longer_dynamic_operand_matches_unfused(keepdims: bool) -> None:
    g = og.Graph()
    x = g.placeholder((None, 8), og.float32, name="x")
    b = g.placeholder((None,) if not keepdims else (None, 1), og.float32, name="b")
    y = g.tanh(g.reduce_sum(x, axes=(1,), keepdims=keepdims) * b)
    types = {x: x.type, b: b.type}
    fused = g.compile(types, [y], device="cpu", descriptor=FUSED)
    plain = g.compile(types, [y], device="cpu", descriptor=PLAIN)
    assert any(o.op.name == "fused_region" for o in fused.program.graph.ops)
    for rows, others in ((1, 4), (4, 4), (3, 1)):
        xv = torch.randn(rows, 8)
        bv = torch.randn(others) if not keepdims else torch.randn(others, 1)
        torch.testing.assert_close(fused.run([xv, bv])[0], plain.run([xv, bv])[0], rtol=1e-5, atol=1e-6)


def _region_launcher(exe: og.Executable) -> Any:
    """The launcher of the executable's one fused region (its kernel as ``.kernel``, the static ones as
    ``.specialized``)."""
    (launcher,) = [fn for fn in exe._generated.kernels.values() if hasattr(fn, "specialized")]
    return launcher


def test_refused_shapes_run_the_steps_compiled_for_them_up_to_a_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shapes the dynamic kernel refuses run the region's steps compiled for those static shapes (fused as they
    allow: here the row sum's kernel and the epilogue's), each compiled once; past the cap, the steps unfused."""
    from opgraph.codegen.triton import fused as fused_module

    monkeypatch.setattr(fused_module, "SPECIALIZED_MAX", 2)
    g = og.Graph()
    x = g.placeholder((None, 8), og.float32)
    b = g.placeholder((None,), og.float32)
    y = g.tanh(g.reduce_sum(x, axes=(1,), name="rowsum") * b, name="squash")  # x's one row against b's many
    types = {x: x.type, b: b.type}
    fused = g.compile(types, [y], device="cpu", descriptor=FUSED)
    launcher = _region_launcher(fused)
    for others in (4, 6, 4, 5):
        xv, bv = torch.randn(1, 8), torch.randn(others)
        torch.testing.assert_close(fused.run([xv, bv])[0], torch.tanh(xv.sum(1) * bv), rtol=1e-5, atol=1e-6)
    written = list(launcher.specialized.items())  # by the region's input shapes (b's as the region reads it)
    assert [shapes[0] for shapes, _ in written] == [(1, 8)] * 2
    assert [math.prod(shapes[1]) for shapes, _ in written] == [4, 6]  # 5, past the cap: the steps one by one
    for _, p in written:  # static, and fused: generated kernels, which list the graph's names
        assert p is not None
        names = [name for k in p.kernels() for name in k.ops]
        assert "rowsum" in names and "squash" in names
        assert all(t.is_static for t in p.input_types)
        sources = [k.source for k in p.kernels() if k.source is not None]
        assert sources and all("tl.load" in s for s in sources)
    assert launcher.kernel._refused  # the dynamic kernel refused each first
    # and the executable's kernels say so: the fused kernel, with the programs run for the shapes it refused
    (info,) = [k for k in fused.kernels() if k.op == "fused_region"]
    assert [p.shapes for p in info.specialized] == [shapes for shapes, _ in written]
    assert all(p.kernels and {"rowsum", "squash"} <= {n for k in p.kernels for n in k.ops} for p in info.specialized)


def test_a_refused_region_keeps_its_constants_constant() -> None:
    """The static program of refused shapes holds the region's constants as constants (inlined where scalars),
    fed only the region's other inputs."""
    g = og.Graph()
    x = g.placeholder((None, 8), og.float32)
    b = g.placeholder((None,), og.float32)
    scale = g.constant(torch.linspace(0.5, 2.0, 8))
    y = g.tanh(g.reduce_sum(x * scale, axes=(1,)) * b * 0.25)
    fused = g.compile({x: x.type, b: b.type}, [y], device="cpu", descriptor=FUSED)
    xv, bv = torch.randn(1, 8), torch.randn(5)  # one row against five
    want = torch.tanh((xv * torch.linspace(0.5, 2.0, 8)).sum(1) * bv * 0.25)
    for _ in range(2):
        torch.testing.assert_close(fused.run([xv, bv])[0], want, rtol=1e-5, atol=1e-6)
    ((_, program),) = _region_launcher(fused).specialized.items()
    assert program is not None and len(program.input_types) == 2  # x and b: the constants are the program's own


def _feed(inputs: list[og.Tensor], given: dict[og.Tensor, torch.Tensor]) -> list[torch.Tensor]:
    """The kernel's arguments: the given placeholders' values and the constants the region reads."""
    by_id = {id(t): v for t, v in given.items()}
    return [by_id.get(id(t), t.op.payload) for t in inputs]


def test_the_kernel_refuses_a_value_larger_than_its_domain_and_accepts_agreeing_shapes() -> None:
    g = og.Graph()
    x = g.placeholder((None, 8), og.float32)
    b = g.placeholder((None,), og.float32)
    y = g.exp(g.reduce_sum(x, axes=(1,), keepdims=True) * g.expand_dims(b, (1,)))  # (?, 1): x's rows or b's
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y])
    xv, bv = torch.randn(4, 8), torch.randn(4)
    torch.testing.assert_close(kernel(*_feed(ins, {x: xv, b: bv}))[0], torch.exp(xv.sum(1, keepdim=True) * bv[:, None]))
    xv = torch.randn(1, 8)  # one row, broadcast against b's four: the kernel's domain has one row
    for _ in range(2):  # the second time from the shapes it remembers refusing
        with pytest.raises(DynamicBroadcast, match="fused region"):
            kernel(*_feed(ins, {x: xv, b: bv}))
    assert len(kernel._refused) == 1


def test_inputs_of_size_one_broadcast_in_the_kernel_itself() -> None:
    g = og.Graph()
    x = g.placeholder((None, 8), og.float32)
    b = g.placeholder((None, 8), og.float32)
    y = g.exp(x) * b
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y])
    for rows in (1, 4):  # b's rows broadcast against x's, or x's against b's
        xv, bv = torch.randn(5 - rows, 8), torch.randn(rows, 8)
        torch.testing.assert_close(kernel(*_feed(ins, {x: xv, b: bv}))[0], torch.exp(xv) * bv)


def test_an_input_read_through_a_transpose_is_not_taken_for_a_broadcast() -> None:
    g = og.Graph()
    x = g.placeholder((None, 8), og.float32)
    y = g.exp(g.transpose(x, (1, 0))) * 2.0  # the domain is (8, ?): x's dynamic dim is the domain's last
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y])
    xv = torch.randn(5, 8)
    torch.testing.assert_close(kernel(*_feed(ins, {x: xv}))[0], torch.exp(xv.T) * 2.0)


def test_a_layer_norm_with_its_affine_and_activation_is_one_kernel_with_a_dynamic_batch() -> None:
    """Values computed in a reduction's region keep the domain's dynamic dims (checked at launch), so the epilogue
    reads them at the domain's index: with a dynamic batch, the chain is one kernel, as with a static one."""
    g = og.Graph()
    x = g.placeholder((None, 64), og.float32)
    w, b = torch.randn(64), torch.randn(64)
    y = g.gelu(g.layer_norm(x * 2.0, (1,), epsilon=1e-5) * g.constant(w) + g.constant(b))
    fused = g.compile({x: x.type}, [y], device="cpu", descriptor=FUSED)
    regions = [o for o in fused.program.graph.ops if o.op.name == "fused_region"]
    assert len(regions) == 1 and [s.op for s in regions[0].attrs.steps][-2:] == ["add", "gelu"]
    for rows in (1, 3, 8):
        xv = torch.randn(rows, 64)
        want = torch.nn.functional.gelu(torch.nn.functional.layer_norm(xv * 2.0, (64,), w, b, eps=1e-5))
        torch.testing.assert_close(fused.run([xv])[0], want, rtol=1e-5, atol=1e-5)


_UNARY = [lambda g, t: g.tanh(t), lambda g, t: g.exp(t * 0.1), lambda g, t: t * 2.0 + 1.0, lambda g, t: g.relu(t)]
_BINARY = [lambda g, a, b: a + b, lambda g, a, b: a * b, lambda g, a, b: g.maximum(a, b)]
_REDUCE = {
    "sum": lambda g, t: g.reduce_sum(t, axes=(1,)),
    "sum-kept": lambda g, t: g.reduce_sum(t, axes=(1,), keepdims=True),
    "max": lambda g, t: g.reduce_max(t, axes=(1,)),
    "mean-kept": lambda g, t: g.reduce_mean(t, axes=(1,), keepdims=True),
    "softmax": lambda g, t: g.softmax(t, -1), "layer_norm": lambda g, t: g.layer_norm(t, (1,), epsilon=0.5),
    "none": lambda g, t: t,
}


def _dynamic_graph(seed: int) -> tuple[og.Graph, list[og.Tensor], og.Tensor]:
    """A prologue on a (?, 6) input, a reduction or norm, and an epilogue whose operands have the batch dim (dynamic)
    or 1, right-aligned: at run time any dynamic batch may be 1 and broadcast."""
    import random

    rnd = random.Random(seed)
    g = og.Graph()
    x = g.placeholder((None, 6), og.float32)
    feeds, t = [x], x
    for _ in range(rnd.randint(0, 2)):
        t = rnd.choice(_UNARY)(g, t)
    t = _REDUCE[rnd.choice(sorted(_REDUCE))](g, t)
    for _ in range(rnd.randint(1, 3)):
        if rnd.random() < 0.5:
            t = rnd.choice(_UNARY)(g, t)
            continue
        shape = tuple(rnd.choice([d, 1]) for d in t.shape)
        u = g.placeholder(shape[1:] if len(shape) > 1 and rnd.random() < 0.3 else shape, og.float32)
        feeds.append(u)
        t = rnd.choice(_BINARY)(g, t, u) if rnd.random() < 0.5 else rnd.choice(_BINARY)(g, u, t)
    return g, feeds, t


@pytest.mark.parametrize("seed", range(40))
def test_random_dynamic_batch_graphs_match_unfused(seed: int) -> None:
    """Before the launch check, 17 of 400 such graphs gave wrong values fused (31 with keep-dims epilogues)."""
    import random

    g, feeds, y = _dynamic_graph(seed)
    types = {f: f.type for f in feeds}
    fused = g.compile(types, [y], device="cpu", descriptor=FUSED)
    plain = g.compile(types, [y], device="cpu", descriptor=PLAIN)
    rnd = random.Random(seed + 1)
    for _ in range(3):
        batch = rnd.choice([1, 2, 5])
        values = [torch.randn([1 if d is None and rnd.random() < 0.4 else batch if d is None else d for d in f.shape])
                  for f in feeds]
        try:
            want = plain.run(values)[0]
        except og.OpgraphError:  # batches that do not broadcast: an error either way
            with pytest.raises(og.OpgraphError):
                fused.run(values)
            continue
        torch.testing.assert_close(fused.run(values)[0], want, rtol=1e-4, atol=1e-5)


def test_a_gradient_summed_back_to_a_broadcast_operand_matches_unfused() -> None:
    """``sum_to`` takes its shape from its reference: b's gradient, (1, 8) when b broadcast, was stored as (4, 8)
    into its buffer (found by the second review: wrong values, then a corrupted heap)."""
    g = og.Graph()
    x = g.placeholder((None, 8), og.float32)
    b = g.placeholder((None, 8), og.float32)
    found = g.gradients(g.reduce_sum(g.tanh(x * b)), [x, b])
    types = {x: x.type, b: b.type}
    fused = g.compile(types, [found[x], found[b]], device="cpu", descriptor=FUSED)
    plain = g.compile(types, [found[x], found[b]], device="cpu", descriptor=PLAIN)
    for rows in (4, 1):
        values = [torch.randn(4, 8), torch.randn(rows, 8)]
        for got, want in zip(fused.run(values), plain.run(values), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_a_norm_weight_of_size_one_at_run_time_matches_unfused(kind: str) -> None:
    """A norm reads gamma and beta along the row as they are: a dynamic one of size 1 at run time is refused at
    launch (the steps run unfused) instead of being read past its end."""
    g = og.Graph()
    x = g.placeholder((None, 8), og.float32)
    w = g.placeholder((None,), og.float32)
    y = g.layer_norm(x, (1,), gamma=w, beta=w, epsilon=1e-5) if kind == "layer_norm" else g.rms_norm(x, (1,), gamma=w)
    types = {x: x.type, w: w.type}
    fused = g.compile(types, [y], device="cpu", descriptor=FUSED)
    plain = g.compile(types, [y], device="cpu", descriptor=PLAIN)
    for size in (8, 1):
        values = [torch.randn(3, 8), torch.randn(size)]
        torch.testing.assert_close(fused.run(values)[0], plain.run(values)[0], rtol=1e-5, atol=1e-5)


def test_a_static_program_result_that_is_an_input_is_copied_before_the_planner_writes_over_it() -> None:
    """Compiled for static shapes, the region's ``broadcast_like`` of an intermediate ran as a PyTorch view of it:
    the planner, which owns a fused op's results, then wrote a later kernel's output over that memory and the
    intermediate read after it was wrong (max error 13; found by review). Such results are copied."""
    g = og.Graph()
    x = g.placeholder((None, 8), og.float32)
    p = g.placeholder((None, 8), og.float32)
    q = g.placeholder((8, 1), og.float32)
    b = g.placeholder((None, 8), og.float32)
    w = g.placeholder((8, 8), og.float32)
    c = g.reshape(g.matmul(p, q), (-1,))  # an intermediate, read again at the end
    s = g.reduce_sum(x, axes=(0,))
    v = g.broadcast_like(c, s)  # (8,): static
    m = g.matmul(g.tanh(v * b * s), w)  # the matmul seals the region
    z = g.tanh(g.exp(v))  # v's last reader: planned in place into v's memory
    late = g.matmul(g.reshape(c, (1, -1)), w)  # reads c after that
    feeds = (x, p, q, b, w)
    types = {t: t.type for t in feeds}
    fused = g.compile(types, [m, z, late], device="cpu", descriptor=FUSED)
    plain = g.compile(types, [m, z, late], device="cpu", descriptor=PLAIN)
    values = [torch.randn(1, 8), torch.randn(8, 8), torch.randn(8, 1), torch.randn(4, 8), torch.randn(8, 8)]
    kept = [v.clone() for v in values]
    for got, want in zip(fused.run(values), plain.run(values), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for v, k in zip(values, kept, strict=True):
        assert torch.equal(v, k)  # the caller's inputs untouched
    launchers = [fn for fn in fused._generated.kernels.values() if hasattr(fn, "specialized")]
    assert any(p is not None for fn in launchers for p in fn.specialized.values())  # a static program ran
