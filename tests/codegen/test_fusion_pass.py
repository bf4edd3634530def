"""Region formation and the fused op, run through Triton's interpreter against the unfused executable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import opgraph as og

pytest.importorskip("triton")

FUSED = og.CompilationDescriptor(fusion=True, triton_interpret=True, verify_each_pass=True)
PLAIN = og.CompilationDescriptor()


def _names(exe: og.Executable) -> list[str]:
    return [o.op.name for o in exe.program.graph.ops]


def test_chain_becomes_one_kernel_and_matches_unfused() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    b = g.placeholder((8,), og.float32, name="b")
    y = g.sigmoid(g.exp(x) * 0.5 + b, name="y")
    feeds = {x: x.type, b: b.type}
    fused = g.compile(feeds, [y], device="cpu", descriptor=FUSED)
    plain = g.compile(feeds, [y], device="cpu", descriptor=PLAIN)
    assert _names(fused).count("fused_region") == 1 and "exp" not in _names(fused)
    (kernel,) = [k for k in fused.kernels() if k.op == "fused_region"]
    assert kernel.ops[-1] == "y" and "@triton.jit" in (kernel.source or "")
    xs = [torch.randn(4, 8), torch.randn(8)]
    torch.testing.assert_close(fused.run(xs)[0], plain.run(xs)[0])


def test_region_stops_where_an_outside_op_reads_it() -> None:
    g = og.Graph()
    x = g.placeholder((3, 5), og.float32, name="x")
    a = g.exp(x) + 1.0
    s = g.sort(a, axis=1)  # an opaque op reads the region's value: seals it
    c = g.tanh(a) * s  # so this starts a new region
    feeds = {x: x.type}
    fused = g.compile(feeds, [c, a], device="cpu", descriptor=FUSED)
    plain = g.compile(feeds, [c, a], device="cpu", descriptor=PLAIN)
    assert _names(fused).count("fused_region") == 2
    xs = [torch.randn(3, 5)]
    for got, want in zip(fused.run(xs), plain.run(xs), strict=True):
        torch.testing.assert_close(got, want)


def test_an_outside_read_of_a_small_value_does_not_stop_the_region() -> None:
    # a batch norm's per-channel mean read by the running-mean update: the ReLU after the normalisation still joins
    g = og.Graph()
    x = g.placeholder((64, 32), og.float32, name="x")
    w, running = g.placeholder((32,), og.float32, name="w"), g.placeholder((32,), og.float32, name="running")
    col = g.exp(w)
    y = x * col
    s = running * 0.9 + col  # another region reads the (32,) value, 64x smaller than the (64, 32) ones
    z = g.relu(y)
    feeds = {x: x.type, w: w.type, running: running.type}
    fused = g.compile(feeds, [z, s], device="cpu", descriptor=FUSED)
    plain = g.compile(feeds, [z, s], device="cpu", descriptor=PLAIN)
    assert _names(fused).count("fused_region") == 2 and "relu" not in _names(fused), _names(fused)
    xs = [torch.randn(64, 32), torch.randn(32), torch.randn(32)]
    for got, want in zip(fused.run(xs), plain.run(xs), strict=True):
        torch.testing.assert_close(got, want)


def _matches_unfused(g: og.Graph, feeds: list[og.Tensor], out: og.Tensor) -> None:
    """Compiles (region formation leaves no op unplaced) and computes what the unfused executable does."""
    types = {t: t.type for t in feeds}
    descriptor = og.CompilationDescriptor(triton_interpret=True, verify_each_pass=True, matmul_epilogues=False)
    fused = g.compile(types, [out], device="cpu", descriptor=descriptor)
    plain = g.compile(types, [out], device="cpu", descriptor=PLAIN)
    xs = [torch.randn(t.shape) for t in feeds]  # type: ignore[arg-type]
    torch.testing.assert_close(fused.run(xs)[0], plain.run(xs)[0])


def test_a_region_read_outside_is_not_merged_into_the_readers_region() -> None:
    # u's region, read outside only through a small slice, stays open; merging it into z's region (z reads the
    # matmul of that slice) would make the merged kernel and the matmul wait for each other
    g = og.Graph()
    x, y = g.placeholder((64, 16), og.float32, name="x"), g.placeholder((64, 16), og.float32, name="y")
    w = g.placeholder((16, 16), og.float32, name="w")
    u = x * 2.0
    product = g.matmul(g.slice(u, [0, 0], [1, 16], [1, 1]), w)
    out = (g.exp(y) + product) * u
    _matches_unfused(g, [x, y, w], out)


def test_a_merged_regions_outside_reader_still_counts_as_depending_on_it() -> None:
    # a's region merges into b's at m; the matmul then reads a's small value: an op on the matmul's result cannot
    # join b's region, which now holds a's ops (the dependency was recorded against a's old region)
    g = og.Graph()
    x, y = g.placeholder((64, 16), og.float32, name="x"), g.placeholder((64, 16), og.float32, name="y")
    w = g.placeholder((16, 16), og.float32, name="w")
    a = x * x
    small = g.slice(a, [5, 0], [6, 16], [1, 1]) * 2.0
    b = y * 3.0
    m = b * a
    product = g.matmul(small, w)
    out = b * product + m
    _matches_unfused(g, [x, y, w], out)


@pytest.mark.parametrize("rows,regions", [(32, 1), (256, 2)])
def test_values_from_long_column_statistics_start_a_region(rows: int, regions: int) -> None:
    # centred columns: 32 rows stay in registers (one kernel); 256 are split across programs on a GPU, which
    # cannot go on to the centred values, so those are a second kernel (not one program per column tile)
    g = og.Graph()
    x = g.placeholder((rows, 16), og.float32, name="x")
    y = g.relu(x - g.reduce_mean(x * 2.0, 0, keepdims=True))
    fused = g.compile({x: x.type}, [y], device="cpu", descriptor=FUSED)
    plain = g.compile({x: x.type}, [y], device="cpu", descriptor=PLAIN)
    assert _names(fused).count("fused_region") == regions, _names(fused)
    xs = [torch.randn(rows, 16)]
    torch.testing.assert_close(fused.run(xs)[0], plain.run(xs)[0])


def test_a_small_update_of_statistics_joins_their_region() -> None:
    # a running-mean update: running * 0.9 starts a region of its own, the add reading the statistics joins the
    # reduction's region instead and takes that small one along (one kernel, not two)
    g = og.Graph()
    x = g.placeholder((256, 16), og.float32, name="x")
    running = g.placeholder((1, 16), og.float32, name="running")
    stats = g.reduce_sum(x * 2.0, 0, keepdims=True)
    update = running * 0.9 + stats * 0.1
    fused = g.compile({x: x.type, running: running.type}, [stats, update], device="cpu", descriptor=FUSED)
    plain = g.compile({x: x.type, running: running.type}, [stats, update], device="cpu", descriptor=PLAIN)
    assert _names(fused).count("fused_region") == 1, _names(fused)
    xs = [torch.randn(256, 16), torch.randn(1, 16)]
    for got, want in zip(fused.run(xs), plain.run(xs), strict=True):
        torch.testing.assert_close(got, want)


def test_fused_graph_prints_verifies_and_round_trips(tmp_path: Path) -> None:
    from opgraph.ir.serialize import save_graph
    from opgraph.passes.fuse import FUSED_REGION

    g = og.Graph()
    x = g.placeholder((6,), og.float32, name="x")
    y = g.relu(x * 2.0 - 1.0)
    exe = g.compile({x: x.type}, [y], device="cpu", descriptor=FUSED)
    compiled = exe.program.graph
    compiled.verify()
    assert "fused_region" in str(compiled)
    save_graph(compiled, tmp_path / "fused")
    back = og.Graph.load(tmp_path / "fused")
    assert str(back) == str(compiled)
    op = next(o for o in back.ops if o.op is FUSED_REGION)
    assert [s.op for s in op.attrs.steps] == ["multiply", "subtract", "relu"]
    assert np.allclose(exe.run([torch.arange(6.0)])[0].numpy(), np.maximum(np.arange(6.0) * 2 - 1, 0))


def test_fusion_is_off_on_the_cpu_without_the_interpreter() -> None:
    g = og.Graph()
    x = g.placeholder((6,), og.float32, name="x")
    exe = g.compile({x: x.type}, [g.exp(x) + 1.0], device="cpu", descriptor=og.CompilationDescriptor(fusion=True))
    assert "fused_region" not in _names(exe)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [og.float32, og.float16, og.bfloat16])
def test_fused_kernels_on_cuda(dtype: og.DType) -> None:
    g = og.Graph()
    x = g.placeholder((256, 512), dtype, name="x")
    b = g.placeholder((512,), dtype, name="b")
    # smooth ops only: fused 16-bit chains keep float32 between ops (more exact than rounding each op's
    # result), so a threshold on an intermediate may fall the other way for values at the boundary
    h = g.gelu(x * 1.5 + b)
    y = g.maximum(h, g.sigmoid(x) * 0.25) - g.tanh(b)
    feeds = {x: x.type, b: b.type}
    cuda = og.CompilationDescriptor(fusion=True)
    fused = g.compile(feeds, [y, h], device="cuda", descriptor=cuda)
    plain = g.compile(feeds, [y, h], device="cuda")
    assert "fused_region" in _names(fused)
    xs = [torch.randn(256, 512, device="cuda").to(dtype.torch_dtype),
          torch.randn(512, device="cuda").to(dtype.torch_dtype)]
    tol = {og.float32: 1e-5, og.float16: 2e-3, og.bfloat16: 2e-2}[dtype]
    for got, want in zip(fused.run(xs), plain.run(xs), strict=True):
        torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)


def test_a_dynamic_dim_that_is_one_at_run_time_broadcasts() -> None:
    """opgraph lets a dynamic dim be 1 at run time where the other operand's is not: the kernel reads index 0."""
    g = og.Graph()
    a = g.placeholder((None, 8), og.float32, name="a")
    b = g.placeholder((None, 8), og.float32, name="b")
    y = g.softmax(g.exp(a) * 0.5 + b, -1)
    feeds = {a: a.type, b: b.type}
    fused = g.compile(feeds, [y], device="cpu", descriptor=FUSED)
    plain = g.compile(feeds, [y], device="cpu", descriptor=og.CompilationDescriptor(fusion=False))
    assert any(k.op == "fused_region" for k in fused.kernels())
    for sa, sb in (((4, 8), (1, 8)), ((1, 8), (4, 8)), ((3, 8), (3, 8))):
        xs = [torch.randn(*sa), torch.randn(*sb)]
        torch.testing.assert_close(fused.run(xs)[0], plain.run(xs)[0])


def test_a_non_contiguous_out_buffer_is_refused() -> None:
    from opgraph.codegen.triton.kernel import region_kernel, region_of

    g = og.Graph()
    x = g.placeholder((4, 4), og.float32)
    y = g.exp(x) + 1.0
    ops, inputs = region_of([y])
    kernel = region_kernel(ops, inputs, [y])
    args = [torch.randn(4, 4) if t is x else t.op.payload for t in inputs]
    with pytest.raises(og.ExecutionError, match="contiguous"):
        kernel(*args, out=[torch.empty(4, 4).t()])


@pytest.mark.parametrize("dtype", [og.float32, og.bfloat16])
def test_scalar_constants_are_written_into_the_kernel(dtype: og.DType) -> None:
    # 0.1 rounded to the constant's dtype, inf, NaN (fmax ignores it, maximum_with_nan_propagation keeps it),
    # an int and a bool constant: folded into the source, no load per element, same values as unfused
    g = og.Graph()
    x = g.placeholder((6, 5), dtype, name="x")
    inf, nan = g.constant(float("inf"), dtype), g.constant(float("nan"), dtype)
    k, on = g.constant(3, og.int32), g.constant(True, og.bool)
    a = g.maximum(g.minimum(x * 0.1, inf), nan) + g.cast(k, dtype)
    y = g.select(on, a, g.maximum_with_nan_propagation(a, nan), name="y")
    feeds = {x: x.type}
    fused = g.compile(feeds, [y], device="cpu", descriptor=FUSED)
    plain = g.compile(feeds, [y], device="cpu", descriptor=PLAIN)
    (kernel,) = [kk for kk in fused.kernels() if kk.op == "fused_region"]
    source = kernel.source or ""
    assert 'float("inf")' in source and 'float("nan")' in source and "True" in source
    assert source.count("tl.load(") == 1, source  # only x
    xs = [torch.randn(6, 5).to(dtype.torch_dtype)]
    torch.testing.assert_close(fused.run(xs)[0], plain.run(xs)[0], equal_nan=True)


def test_kernels_are_named_after_their_ops_for_profilers() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    y = g.layer_norm(g.reshape(x, (8, 4)) + 1.0, [1], name="y")
    exe = g.compile({x: x.type}, [y], device="cpu", descriptor=FUSED)
    (kernel,) = [k for k in exe.kernels() if k.op == "fused_region"]
    assert "def fused_region_add_layer_norm(" in (kernel.source or "")  # views left out of the name
    torch.testing.assert_close(exe.run([torch.ones(4, 8)])[0], torch.zeros(8, 4))


def test_inputs_read_through_reshapes_load_at_the_flat_position() -> None:
    # a reshape keeps element order: the input is loaded at the domain's flat offset, without undoing the
    # output's div/mod index (expand_dims and size-1 dims too)
    g = og.Graph()
    x = g.placeholder((8, 12), og.float32, name="x")
    b = g.placeholder((12,), og.float32, name="b")
    y = g.expand_dims(g.reshape(g.tanh(x), (2, 4, 12)) * 2.0 + b, 0) + 1.0
    fused = g.compile({x: x.type, b: b.type}, [y], device="cpu", descriptor=FUSED)
    plain = g.compile({x: x.type, b: b.type}, [y], device="cpu", descriptor=PLAIN)
    (kernel,) = [k for k in fused.kernels() if k.op == "fused_region"]
    assert "tl.load(in0 + offs," in (kernel.source or ""), kernel.source
    xs = [torch.randn(8, 12), torch.randn(12)]
    torch.testing.assert_close(fused.run(xs)[0], plain.run(xs)[0])


@pytest.mark.parametrize("case", ["merged", "read_outside", "smaller"])
def test_regions_meeting_at_an_op_merge_when_nothing_else_reads_them(case: str) -> None:
    # two chains joined by an add: one kernel, unless the second chain's value was read by another op before
    # (its region is sealed) or is smaller than the add's output (merging would compute it once per element)
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    y = g.placeholder((4, 8) if case != "smaller" else (8,), og.float32, name="y")
    a = g.tanh(g.exp(x) * 2.0)
    b = g.sigmoid(g.log(y + 3.0))
    early = [g.sort(b, axis=-1)] if case == "read_outside" else []  # read before the add: b's region is sealed
    outs = [g.relu(a + b), *early]
    fused = g.compile({x: x.type, y: y.type}, outs, device="cpu", descriptor=FUSED)
    plain = g.compile({x: x.type, y: y.type}, outs, device="cpu", descriptor=PLAIN)
    assert _names(fused).count("fused_region") == (1 if case == "merged" else 2), _names(fused)
    xs = [torch.randn(4, 8), torch.rand(*y.shape)]  # log(y + 3) of a normal y was NaN in ~4% of runs
    for got, want in zip(fused.run(xs), plain.run(xs), strict=True):
        torch.testing.assert_close(got, want)


def test_a_region_of_another_shape_is_not_merged() -> None:
    # b's chain runs on (32,) and is reshaped to (4, 8) at the add: merged, its values would have no common
    # domain with the add's and the emitter would refuse the whole region (two kernels instead)
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    y = g.placeholder((32,), og.float32, name="y")
    a1, b1 = g.exp(x), g.sin(y)
    a2, b2 = g.tanh(a1), g.sigmoid(b1)
    outs = [g.relu(a2 + g.reshape(b2, (4, 8))), b1]
    fused = g.compile({x: x.type, y: y.type}, outs, device="cpu", descriptor=FUSED)
    plain = g.compile({x: x.type, y: y.type}, outs, device="cpu", descriptor=PLAIN)
    assert _names(fused).count("fused_region") == 2 and "exp" not in _names(fused), _names(fused)
    xs = [torch.randn(4, 8), torch.randn(32)]
    for got, want in zip(fused.run(xs), plain.run(xs), strict=True):
        torch.testing.assert_close(got, want)


def test_an_input_reached_through_two_paths_is_loaded_once() -> None:
    from opgraph.codegen.triton.kernel import region_kernel, region_of

    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    y = g.exp(x) + g.reshape(g.tanh(g.reshape(x, (32,))), (4, 8))
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y])
    assert kernel.source.count("tl.load(") == 1, kernel.source
    v = torch.randn(4, 8)
    torch.testing.assert_close(kernel(v)[0], torch.exp(v) + torch.tanh(v))
