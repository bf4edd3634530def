"""Golden tests of region formation (``passes.fuse.fuse_regions`` with the Triton generator's predicates): small
graphs printed before and after the pass, against expected text written here.

The text is the graph's printed form (``str(graph)``) without its braces, a ``fused_region``'s attributes
shortened to its steps' op names and the steps it outputs: ``[exp add -> 1]``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton.configs import Config  # noqa: E402
from opgraph.codegen.triton.fused import can_emit, can_fuse, reduced_axes  # noqa: E402
from opgraph.ir.graph import GraphCore, Tensor  # noqa: E402
from opgraph.passes.fuse import FUSED_REGION, LONE_COLUMN_MIN, MAX_REGION_OPS, fuse_regions  # noqa: E402
from opgraph.passes.program import Program  # noqa: E402

FUSED = og.CompilationDescriptor(fusion=True, triton_interpret=True, verify_each_pass=True)
PLAIN = og.CompilationDescriptor(fusion=False)
_STEPS = re.compile(r" \{steps=\((.*)\), outputs=\(([0-9, ]*)\)\}$")


def text(graph: GraphCore) -> str:
    lines = []
    for line in str(graph).splitlines()[1:-1]:
        line = line.strip()
        m = _STEPS.search(line)
        if m:
            ops = " ".join(re.findall(r"FusedStep\(op='(\w+)'", m.group(1)))
            line = f"{line[:m.start()]} [{ops} -> {m.group(2).rstrip(',')}]"
        lines.append(line)
    return "\n".join(lines)


def fuse(g: og.Graph, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> GraphCore:
    out = fuse_regions(Program(g, list(inputs), list(outputs), []), can_fuse, reduced_axes, can_emit)
    out.graph.verify()
    return out.graph


def golden(text_block: str) -> str:
    return "\n".join(line.strip() for line in text_block.strip().splitlines())


def test_text_form_of_a_fused_op() -> None:
    """The shortening above against the full printed line (so the goldens below read the real text)."""
    g = og.Graph()
    x = g.placeholder((4,), og.float32, name="x")
    y = g.relu(g.exp(x, name="e"), name="y")
    fused = fuse(g, [x], [y])
    assert str(fused) == (
        "graph {\n"
        "  %x: float32(4,) = placeholder()\n"
        "  %fused_region_1: float32(4,) = fused_region(%x) {steps=(FusedStep(op='exp', attrs=None, inputs=(-1,), "
        "name='e'), FusedStep(op='relu', attrs=None, inputs=(0,), name='y')), outputs=(1,)}\n"
        "}")
    assert text(fused) == golden("""
        %x: float32(4,) = placeholder()
        %fused_region_1: float32(4,) = fused_region(%x) [exp relu -> 1]""")


def test_elementwise_chain_becomes_one_region() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    b = g.placeholder((8,), og.float32, name="b")
    y = g.relu(g.exp(x, name="e") * b - x, name="y")
    assert text(g) == golden("""
        %x: float32(4, 8) = placeholder()
        %b: float32(8,) = placeholder()
        %e: float32(4, 8) = exp(%x)
        %multiply_3: float32(4, 8) = multiply(%e, %b)
        %subtract_4: float32(4, 8) = subtract(%multiply_3, %x)
        %y: float32(4, 8) = relu(%subtract_4)""")
    assert text(fuse(g, [x, b], [y])) == golden("""
        %x: float32(4, 8) = placeholder()
        %b: float32(8,) = placeholder()
        %fused_region_2: float32(4, 8) = fused_region(%x, %b) [exp multiply subtract relu -> 3]""")


def test_softmax_with_prologue_and_epilogue_is_one_region() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    b = g.placeholder((8,), og.float32, name="b")
    y = g.relu(g.softmax(g.add(x, b, name="a"), name="s") * 2.0, name="y")
    assert text(g) == golden("""
        %x: float32(4, 8) = placeholder()
        %b: float32(8,) = placeholder()
        %a: float32(4, 8) = add(%x, %b)
        %s: float32(4, 8) = softmax(%a) {axis=1}
        %constant_4: float32() = constant() <[2.0]>
        %multiply_5: float32(4, 8) = multiply(%s, %constant_4)
        %y: float32(4, 8) = relu(%multiply_5)""")
    assert text(fuse(g, [x, b], [y])) == golden("""
        %x: float32(4, 8) = placeholder()
        %b: float32(8,) = placeholder()
        %constant_4: float32() = constant() <[2.0]>
        %fused_region_3: float32(4, 8) = fused_region(%x, %b, %constant_4) [add softmax multiply relu -> 3]""")


def test_two_reductions_over_one_domain_share_a_region() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    y = g.softmax(g.layer_norm(x, -1, name="ln"), name="s")
    assert text(fuse(g, [x], [y])) == golden("""
        %x: float32(4, 8) = placeholder()
        %fused_region_1: float32(4, 8) = fused_region(%x) [layer_norm softmax -> 1]""")
    # mean, centre, square, sum: two reductions over the rows, the region's result is the row sums
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    c = g.subtract(x, g.reduce_mean(x, -1, keepdims=True, name="m"), name="c")
    v = g.reduce_sum(c * c, -1, name="v")
    assert text(fuse(g, [x], [v])) == golden("""
        %x: float32(4, 8) = placeholder()
        %fused_region_1: float32(4,) = fused_region(%x) [reduce_mean subtract multiply reduce_sum -> 3]""")


def test_reductions_over_different_domains_split() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    e = g.exp(g.softmax(x * 2.0, 1, name="rows"), name="e")
    y = g.relu(g.softmax(e, 0, name="columns"), name="y")
    assert text(fuse(g, [x], [y])) == golden("""
        %x: float32(4, 8) = placeholder()
        %constant_1: float32() = constant() <[2.0]>
        %fused_region_2: float32(4, 8) = fused_region(%x, %constant_1) [multiply softmax exp -> 2]
        %fused_region_3: float32(4, 8) = fused_region(%fused_region_2) [softmax relu -> 1]""")
    # a row mean then a column mean: the second needs every row's result
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    c = g.subtract(x, g.reduce_mean(x, 1, True, name="m"), name="c")
    v = g.reduce_mean(c * c, 0, name="v")
    assert text(fuse(g, [x], [v])) == golden("""
        %x: float32(4, 8) = placeholder()
        %fused_region_1: float32(4, 8) = fused_region(%x) [reduce_mean subtract multiply -> 2]
        %v: float32(8,) = reduce_mean(%fused_region_1) {axes=(0,)}""")


@pytest.mark.parametrize("opaque", ["sort", "matmul"])
def test_an_outside_reader_seals_the_region(opaque: str) -> None:
    g = og.Graph()
    x = g.placeholder((4, 4), og.float32, name="x")
    a = g.add(g.exp(x, name="e"), 1.0, name="a")
    o = g.sort(a, 1, name="o") if opaque == "sort" else g.matmul(a, x, name="o")
    y = g.multiply(g.tanh(a, name="t"), o, name="y")
    attrs = " {axis=1}" if opaque == "sort" else ""
    inputs = "%fused_region_2" if opaque == "sort" else "%fused_region_2, %x"
    # tanh(a) would fit the first region, but %o (outside) already read it: a region stands where its last op
    # stood, so joining would put %o before the value it reads
    assert text(fuse(g, [x], [y])) == golden(f"""
        %x: float32(4, 4) = placeholder()
        %constant_2: float32() = constant() <[1.0]>
        %fused_region_2: float32(4, 4) = fused_region(%x, %constant_2) [exp add -> 1]
        %o: float32(4, 4) = {opaque}({inputs}){attrs}
        %fused_region_4: float32(4, 4) = fused_region(%fused_region_2, %o) [tanh multiply -> 1]""")


def test_region_reading_an_opaque_op_stands_after_it() -> None:
    """%s does not depend on the region, so %b joins it; the region is emitted at its last op, after %s."""
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    a = g.exp(x, name="a")
    s = g.sort(x, 1, name="s")
    b = g.add(a, s, name="b")
    assert text(fuse(g, [x], [b])) == golden("""
        %x: float32(4, 8) = placeholder()
        %s: float32(4, 8) = sort(%x) {axis=1}
        %fused_region_2: float32(4, 8) = fused_region(%x, %s) [exp add -> 1]""")


def test_values_read_outside_become_outputs() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    e = g.exp(x, name="e")
    y = g.tanh(e, name="y")
    assert text(fuse(g, [x], [y, e])) == golden("""
        %x: float32(4, 8) = placeholder()
        %fused_region_1:0: float32(4, 8), %fused_region_1:1: float32(4, 8) = fused_region(%x) [exp tanh -> 0, 1]""")


@pytest.mark.parametrize("build,original", [
    (lambda g, x: g.reduce_sum(x, -1, name="s"), "%s: float32(4,) = reduce_sum(%x) {axes=(1,)}"),
    (lambda g, x: g.exp(x, name="e"), "%e: float32(4, 8) = exp(%x)"),
    (lambda g, x: g.transpose(g.exp(x, name="e"), [1, 0], name="t"),
     "%e: float32(4, 8) = exp(%x)\n%t: float32(8, 4) = transpose(%e) {perm=(1, 0)}"),
], ids=["lone_reduction", "lone_elementwise", "elementwise_and_a_view"])
def test_one_computing_op_is_not_fused(build: object, original: str) -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    y = build(g, x)  # type: ignore[operator]
    assert text(fuse(g, [x], [y])) == "%x: float32(4, 8) = placeholder()\n" + original


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_a_lone_normalisation_is_worth_a_kernel(op: str) -> None:
    """A reduction shaped like its input keeps its row in registers where PyTorch makes several passes."""
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    getattr(g, op)(x, name="n")
    assert text(fuse(g, [x], [g.tensor("n")])) == golden(f"""
        %x: float32(4, 8) = placeholder()
        %fused_region_1: float32(4, 8) = fused_region(%x) [{op} -> 0]""")


def test_a_long_lone_column_reduction_is_worth_a_kernel() -> None:
    """A bias gradient's column sum (through a view) gets a split column kernel once its input is large; a short
    one, and a row sum of the same size, stay with PyTorch."""
    rows = LONE_COLUMN_MIN // 128
    g = og.Graph()
    x = g.placeholder((rows // 64, 64, 128), og.float32, name="x")
    g.reduce_sum(g.reshape(x, [rows, 128], name="r"), 0, keepdims=True, name="s")
    assert text(fuse(g, [x], [g.tensor("s")])) == golden(f"""
        %x: float32({rows // 64}, 64, 128) = placeholder()
        %fused_region_1: float32(1, 128) = fused_region(%x) [reshape reduce_sum -> 1]""")
    for shape, axis in (((rows // 2, 128), 0), ((128, rows), 1)):  # too small; a row sum
        g = og.Graph()
        x = g.placeholder(shape, og.float32, name="x")
        g.reduce_sum(x, axis, name="s")
        assert "fused_region" not in text(fuse(g, [x], [g.tensor("s")]))


def test_views_at_a_region_end_stay_outside() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    r = g.reshape(g.exp(g.multiply(x, x, name="m"), name="e"), [32], name="r")
    assert text(fuse(g, [x], [r])) == golden("""
        %x: float32(4, 8) = placeholder()
        %fused_region_1: float32(4, 8) = fused_region(%x) [multiply exp -> 1]
        %r: float32(32,) = reshape(%fused_region_1) {shape=(32,)}""")
    # a view read inside the region is part of it
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    t = g.tanh(g.reshape(g.exp(x, name="e"), [32], name="r"), name="t")
    assert text(fuse(g, [x], [t])) == golden("""
        %x: float32(4, 8) = placeholder()
        %fused_region_1: float32(32,) = fused_region(%x) [exp reshape tanh -> 2]""")


def test_a_view_of_an_input_read_outside_is_made_outside() -> None:
    # as in layer norm's gradient: the incoming gradient, reshaped, is read in the region and by a bias sum outside;
    # the kernel does not store a copy of it
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    r = g.reshape(x, [2, 2, 8], name="r")
    y = g.tanh(g.softmax(r, -1, name="n"), name="y")  # rows: the column sum below cannot join
    s = g.reduce_sum(r, [0, 1], name="s")
    fused = fuse(g, [x], [y, s])
    assert text(fused) == golden("""
        %x: float32(4, 8) = placeholder()
        %r: float32(2, 2, 8) = reshape(%x) {shape=(2, 2, 8)}
        %fused_region_2: float32(2, 2, 8) = fused_region(%x) [reshape softmax tanh -> 2]
        %s: float32(8,) = reduce_sum(%r) {axes=(0, 1)}""")
    xv = torch.randn(4, 8)
    exe = g.compile({x: x.type}, [y, s], device="cpu", descriptor=og.CompilationDescriptor(triton_interpret=True))
    got = exe.run([xv])
    torch.testing.assert_close(got[0], torch.tanh(torch.softmax(xv, -1)).reshape(2, 2, 8))
    torch.testing.assert_close(got[1], xv.sum(0))
    # a region storing nothing but views would store nothing: it keeps them
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    r = g.reshape(x, [32], name="r")
    t = g.transpose(x, [1, 0], name="t")
    assert "fused_region" not in text(fuse(g, [x], [r, t]))


def test_ops_the_generator_refuses_stay_unfused() -> None:
    g = og.Graph()
    z = g.placeholder((4, 8), og.complex64, name="z")
    w = g.exp(g.multiply(z, z, name="m"), name="w")  # no complex kernels
    assert text(fuse(g, [z], [w])) == golden("""
        %z: complex64(4, 8) = placeholder()
        %m: complex64(4, 8) = multiply(%z, %z)
        %w: complex64(4, 8) = exp(%m)""")


def test_a_region_whose_kernel_cannot_be_written_is_split() -> None:
    """Each op alone is fine, but the region reads a row sum at another row (reverse over the kept axis):
    ``can_emit`` refuses the whole region, so its longest writable prefix is fused and the rest left as is."""
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    e = g.exp(x, name="e")
    r = g.reverse(g.reduce_sum(e, -1, keepdims=True, name="s"), 0, name="r")
    y = g.multiply(e, r, name="y")
    assert text(fuse(g, [x], [y])) == golden("""
        %x: float32(4, 8) = placeholder()
        %fused_region_1:0: float32(4, 8), %fused_region_1:1: float32(4, 1) = fused_region(%x) [exp reduce_sum -> 0, 1]
        %r: float32(4, 1) = reverse(%fused_region_1:1) {axes=(0,)}
        %y: float32(4, 8) = multiply(%fused_region_1:0, %r)""")
    # and the split graph computes what the graph says
    exe = g.compile({x: x.type}, [y], device="cpu", descriptor=FUSED)
    v = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    s = torch.exp(v).sum(-1, keepdim=True)
    torch.testing.assert_close(exe.run([v])[0], torch.exp(v) * s.flip(0))


def test_long_chains_split_at_the_region_limit() -> None:
    g = og.Graph()
    x = g.placeholder((4,), og.float32, name="x")
    v = x
    for i in range(MAX_REGION_OPS + 8):
        v = g.negative(v) if i % 2 else g.abs(v)
    body = " ".join(["abs negative"] * (MAX_REGION_OPS // 2))
    assert text(fuse(g, [x], [v])) == golden(f"""
        %x: float32(4,) = placeholder()
        %fused_region_1: float32(4,) = fused_region(%x) [{body} -> {MAX_REGION_OPS - 1}]
        %fused_region_2: float32(4,) = fused_region(%fused_region_1) [abs negative abs negative abs negative abs negative -> 7]""")  # noqa: E501


def test_compiled_executable_shows_the_region() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    b = g.placeholder((8,), og.float32, name="b")
    y = g.relu(g.softmax(x + b, name="s"), name="y")
    exe = g.compile({x: x.type, b: b.type}, [y], device="cpu", descriptor=FUSED)
    assert str(exe).splitlines()[0] == "Executable on cpu: 3 ops (placeholder x2, fused_region x1)"
    assert text(exe.program.graph) == golden("""
        %x: float32(4, 8) = placeholder()
        %b: float32(8,) = placeholder()
        %fused_region_2: float32(4, 8) = fused_region(%x, %b) [add softmax relu -> 2]""")
    (kernel,) = [k for k in exe.kernels() if k.op == "fused_region"]
    assert kernel.ops == ["add_2", "s", "y"] and "tl.sum(" in (kernel.source or "")
    plain = g.compile({x: x.type, b: b.type}, [y], device="cpu", descriptor=PLAIN)
    assert "fused_region" not in str(plain)
    xs = [torch.randn(4, 8), torch.randn(8)]
    torch.testing.assert_close(exe.run(xs)[0], plain.run(xs)[0])


def test_kernels_name_the_launch_configuration_their_tuner_chose() -> None:
    # tuning is CUDA's: on the CPU nothing is tuned; a choice (set here as the tuner sets it) is listed per shapes
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    exe = g.compile({x: x.type}, [g.softmax(x)], device="cpu", descriptor=FUSED)
    exe.run([torch.randn(4, 8)])
    (info,) = [k for k in exe.kernels() if k.op == "fused_region"]
    assert info.tuned == ()
    (launcher,) = [k for k in exe._generated.kernels.values() if getattr(k, "source", None) == info.source]
    region = launcher.kernel
    region._tuned[((4, 8),)] = dataclasses.replace(region, config=Config(reduction=True, rblock=4096, looped=True,
                                                                         num_warps=16))
    (info,) = [k for k in exe.kernels() if k.op == "fused_region"]
    (tuned,) = info.tuned
    assert (tuned.shapes, tuned.num_warps, tuned.split) == (((4, 8),), 16, 1)
    assert str(tuned) == "[(4, 8)]: looped, 4096 a program, 16 warps"


def test_gradient_graphs_fuse() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    w = g.placeholder((8,), og.float32, name="w")
    b = g.placeholder((8,), og.float32, name="b")
    p = g.softmax(g.tanh(g.layer_norm(x * w + b, -1)))
    loss = g.reduce_sum(p * p)
    grads = g.gradients(loss, [x, w, b])
    outs = [loss, grads[x], grads[w], grads[b]]
    feeds = {t: t.type for t in (x, w, b)}
    fused = g.compile(feeds, outs, device="cpu", descriptor=FUSED)
    plain = g.compile(feeds, outs, device="cpu", descriptor=PLAIN)
    names = [o.op.name for o in fused.program.graph.ops]
    assert names.count("fused_region") >= 3
    assert len(names) < len(plain.program.graph.ops) // 2
    # the backward ops are inside regions too (fusion runs after autodiff)
    steps = {s.op for o in fused.program.graph.ops if o.op is FUSED_REGION for s in o.attrs.steps}
    assert {"softmax", "layer_norm"} <= steps and steps & {"sum_to", "broadcast_like"}
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(4, 8, generator=gen), torch.randn(8, generator=gen), torch.randn(8, generator=gen)]
    for got, want in zip(fused.run(xs), plain.run(xs), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_can_fuse_answers_a_repeated_op_from_its_structure(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model repeats its layers' ops: ``can_fuse`` writes an op's kernel once per structure (definition,
    attributes, types, which inputs coincide, launch configuration) and answers the same op in another graph from
    that. Ops differing in any of those are written again, and the answers match writing each afresh."""
    from opgraph.codegen.triton import fused
    from opgraph.codegen.triton.region import RegionEmitter

    written: list[object] = []
    real = RegionEmitter.source
    monkeypatch.setattr(RegionEmitter, "source", lambda self: written.append(self) or real(self))
    monkeypatch.setattr(fused, "_WRITABLE", {})

    def op_of(build: object, shape: tuple[int, ...] = (8, 16), dtype: object = og.float32) -> object:
        g = og.Graph()
        x = g.placeholder(shape, dtype)
        return build(g, x).op  # type: ignore[operator]

    square = lambda g, x: g.multiply(x, x)  # noqa: E731  (one input read twice)
    times = lambda g, x: g.multiply(x, g.placeholder((8, 16), og.float32))  # noqa: E731
    ops = [op_of(square), op_of(square), op_of(times), op_of(square, (8, 32)), op_of(square, dtype=og.bfloat16),
           op_of(lambda g, x: g.reduce_sum(x, [1])), op_of(lambda g, x: g.reduce_sum(x, [1]))]
    answers = [can_fuse(op) for op in ops]  # type: ignore[arg-type]
    assert answers == [True] * len(ops)
    assert len(written) == 5  # the second square and the second sum were answered from the first
    fused._WRITABLE.clear()
    assert [fused._emits(RegionEmitter([op], [t for t in dict.fromkeys(op.inputs)], list(op.outputs)))  # type: ignore[attr-defined]
            for op in ops] == answers
