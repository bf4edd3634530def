"""Max pooling's gradient in the region of the ReLU's gradient (``passes.decompose``): windows that tile the image,
with window offsets, become upsamplings (``resize_nearest``'s index rule) and a select, one fused region with the
ReLU mask and the bias sum; other windows keep the op. Fused executables (Triton's interpreter) against the unfused
ones and against PyTorch's ``max_pool2d_with_indices_backward``; the index rule against PyTorch's ``interpolate``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

import opgraph as og  # noqa: E402
from opgraph.passes.fuse import FUSED_REGION  # noqa: E402

M = og.PoolingReturnIndicesMode
FUSED = og.CompilationDescriptor(triton_interpret=True, verify_each_pass=True)
PLAIN = og.CompilationDescriptor(optimization_level=0)


def _pool_backward_graph(shape: tuple[int, ...], window: tuple[int, int, int, int]
                         ) -> tuple[og.Graph, list[og.Tensor], list[og.Tensor]]:
    """ReLU, max pool (PyTorch's indices: the compiler keeps offsets), and the backward of both with the bias sum."""
    k, s, p, dil = window
    g = og.Graph()
    x = g.placeholder(shape, og.float32, name="x")
    r = g.relu(x, name="r")
    d = og.Pooling2dDescriptor(k, k, s, s, dilation_rate_in_x=dil, dilation_rate_in_y=dil, padding_left=p,
                               padding_right=p, padding_top=p, padding_bottom=p,
                               return_indices_mode=M.GLOBAL_FLATTEN_2D, return_indices_data_type=og.int64)
    y, i = g.max_pool2d_return_indices(r, d)
    gy = g.placeholder(y.shape, og.float32, name="gy")
    dx = g.max_pool2d_gradient(gy, i, r, d)
    dy = g.select(g.less_equal(r, 0.0), 0.0, dx, name="dy")
    return g, [x, gy], [y, dy, g.reduce_sum(dy, [0, 2, 3], name="db")]


def _run(shape: tuple[int, ...], window: tuple[int, int, int, int], channels_last: bool
         ) -> tuple[og.Executable, list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor]:
    g, feeds, outs = _pool_backward_graph(shape, window)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, shape, generator=gen).float()  # ties in most windows, zeros for the ReLU
    gy = torch.randn(tuple(outs[0].shape), generator=gen)  # type: ignore[arg-type]
    if channels_last:  # as the layout pass leaves a CNN's activations on CUDA
        x, gy = (t.contiguous(memory_format=torch.channels_last) for t in (x, gy))
    types = {t: t.type for t in feeds}
    exe = g.compile(types, outs, descriptor=FUSED)
    return exe, exe.run([x, gy]), g.compile(types, outs, descriptor=PLAIN).run([x, gy]), x, gy


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("k", [2, 3])
def test_a_tiling_pools_gradient_joins_the_relu_region(k: int, channels_last: bool) -> None:
    exe, got, want, x, gy = _run((2, 5, 4 * k, 3 * k), (k, k, 0, 1), channels_last)
    names = [o.op.name for o in exe.program.graph.ops]
    assert "max_pool2d_gradient" not in names
    (region,) = [[s.op for s in o.attrs.steps] for o in exe.program.graph.ops
                 if o.op is FUSED_REGION and any(s.op == "reduce_sum" for s in o.attrs.steps)]
    assert region.count("resize_nearest") == 2 and region[-3:] == ["less_equal", "select", "reduce_sum"], region
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    # the oracle: PyTorch's pooling backward, masked by the ReLU
    r = x.relu()
    _, index = torch.ops.aten.max_pool2d_with_indices(r, [k, k], [k, k])
    dx = torch.ops.aten.max_pool2d_with_indices_backward(gy, r, [k, k], [k, k], [0, 0], [1, 1], False, index)
    torch.testing.assert_close(got[1], torch.where(r <= 0, 0.0, dx), rtol=0, atol=0)


@pytest.mark.parametrize("shape,window", [
    ((2, 3, 9, 9), (3, 2, 1, 1)),  # ResNet's stem: overlapping, padded
    ((2, 3, 7, 6), (2, 2, 0, 1)),  # a row no window covers
    ((2, 3, 8, 8), (2, 2, 0, 2)),  # dilated
], ids=["overlapping", "remainder", "dilated"])
def test_windows_that_do_not_tile_keep_the_op(shape: tuple[int, ...], window: tuple[int, int, int, int]) -> None:
    exe, got, want, _, _ = _run(shape, window, channels_last=False)
    assert "max_pool2d_gradient" in [o.op.name for o in exe.program.graph.ops]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", ["floor", "half-pixel", "nhwc", "not-whole", "floor-half-pixel"])
def test_resize_nearest_fuses_where_it_is_a_whole_upsampling(case: str) -> None:
    """Its index rule picks ``d // k``: PyTorch's "nearest" and MPSGraph's default rounding at whole factors;
    other sizes and roundings keep the op."""
    rounding = og.ResizeNearestRoundingMode
    kw: dict[str, object] = {"floor": dict(center_result=False, nearest_rounding_mode=rounding.FLOOR),
                             "half-pixel": {}, "nhwc": dict(data_layout=og.TensorLayout.NHWC),
                             "not-whole": {}, "floor-half-pixel": dict(nearest_rounding_mode=rounding.FLOOR)}[case]
    nhwc = case == "nhwc"
    shape = (2, 3, 4, 5) if nhwc else (2, 5, 3, 4)
    size = (5, 8) if case == "not-whole" else (6, 8) if not nhwc else (9, 12)
    g = og.Graph()
    x = g.placeholder(shape, og.float32)
    y = g.add(g.multiply(g.resize_nearest(x, size, **kw), 2.0), 1.0)  # type: ignore[arg-type]
    xv = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    exe = g.compile({x: x.type}, [y], descriptor=FUSED)
    fused = "resize_nearest" not in [o.op.name for o in exe.program.graph.ops]
    assert fused == (case in ("floor", "half-pixel", "nhwc"))
    got = exe.run([xv])[0]
    torch.testing.assert_close(got, g.compile({x: x.type}, [y], descriptor=PLAIN).run([xv])[0], rtol=0, atol=0)
    if fused:
        nchw = xv.permute(0, 3, 1, 2) if nhwc else xv
        want = F.interpolate(nchw, size=size, mode="nearest") * 2.0 + 1.0
        torch.testing.assert_close(got, want.permute(0, 2, 3, 1) if nhwc else want, rtol=0, atol=0)


@pytest.mark.parametrize("incoming", ["nhwc", "nchw"])
@pytest.mark.parametrize("k", [2, 3])
def test_under_the_layout_pass_the_gradient_is_computed_in_nhwc(k: int, incoming: str) -> None:
    """The layout pass leaves a CNN's pool in NCHW between transposes: the NHWC gradient comes in as an NCHW view
    and the result goes back to NHWC for the ReLU. Decomposed in NHWC, the transposes cancel and the pool gradient,
    the ReLU mask and the bias sum make one region over NHWC (the sum a column reduction over the channels).
    ``nchw``: an incoming gradient that is NCHW (VGG's last pool, after the classifier) is read through a
    transpose; the result still goes straight into the NHWC region."""
    n, c, h, w = 2, 5, 3, 4
    g = og.Graph()
    nhwc = incoming == "nhwc"
    gy = g.placeholder((n, h, w, c) if nhwc else (n, c, h, w), og.float32, name="gy")
    idx = g.placeholder((n, c, h, w), og.int8, name="idx")
    r = g.placeholder((n, c, h * k, w * k), og.float32, name="r")
    d = og.Pooling2dDescriptor(k, k, k, k, return_indices_mode=M.LOCAL_FLATTEN_2D, return_indices_data_type=og.int8)
    dx = g.max_pool2d_gradient(g.transpose(gy, [0, 3, 1, 2]) if nhwc else gy, idx, r, d)
    masked = g.select(g.less_equal(g.transpose(r, [0, 2, 3, 1]), 0.0), 0.0, g.transpose(dx, [0, 2, 3, 1]))
    outs = [masked, g.reduce_sum(masked, [0, 1, 2])]
    types = {t: t.type for t in (gy, idx, r)}
    exe = g.compile(types, outs, descriptor=FUSED)
    ops = exe.program.graph.ops
    assert "max_pool2d_gradient" not in [o.op.name for o in ops]
    (region,) = [[s.op for s in o.attrs.steps] for o in ops if o.op is FUSED_REGION]
    assert "resize_nearest" in region and region[-3:] == ["less_equal", "select", "reduce_sum"], region
    gen = torch.Generator().manual_seed(k)
    rv = torch.randint(-3, 4, (n, c, h * k, w * k), generator=gen).float().relu()
    gv = torch.randn(n, c, h, w, generator=gen)
    _, index = torch.ops.aten.max_pool2d_with_indices(rv, [k, k], [k, k])
    # the window offset of each maximum from PyTorch's flat index: (row % k) * k + column % k
    offsets = ((index // (w * k)) % k * k + index % (w * k) % k).to(torch.int8)
    fed = gv.permute(0, 2, 3, 1).contiguous() if nhwc else gv
    got = exe.run([fed, offsets, rv])
    want = g.compile(types, outs, descriptor=PLAIN).run([fed, offsets, rv])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    oracle = torch.ops.aten.max_pool2d_with_indices_backward(gv, rv, [k, k], [k, k], [0, 0], [1, 1], False, index)
    torch.testing.assert_close(got[0], torch.where(rv <= 0, 0.0, oracle).permute(0, 2, 3, 1), rtol=0, atol=0)


def test_an_nhwc_incoming_gradient_read_as_nchw_stays_nchw() -> None:
    """Found by a review: the NHWC form is for results that only transposes to NHWC read. An NCHW ReLU mask and
    bias sum after a pool whose incoming gradient is an NHWC tensor's view keep one NCHW region, the gradient
    read through the view."""
    n, c, h, w, k = 2, 5, 3, 4, 2
    g = og.Graph()
    gy = g.placeholder((n, h, w, c), og.float32, name="gy")
    idx = g.placeholder((n, c, h, w), og.int8, name="idx")
    r = g.placeholder((n, c, h * k, w * k), og.float32, name="r")
    d = og.Pooling2dDescriptor(k, k, k, k, return_indices_mode=M.LOCAL_FLATTEN_2D, return_indices_data_type=og.int8)
    dx = g.max_pool2d_gradient(g.transpose(gy, [0, 3, 1, 2]), idx, r, d)
    masked = g.select(g.less_equal(r, 0.0), 0.0, dx)
    outs = [masked, g.reduce_sum(masked, [0, 2, 3])]
    exe = g.compile({t: t.type for t in (gy, idx, r)}, outs, descriptor=FUSED)
    ops = exe.program.graph.ops
    (region,) = [[s.op for s in o.attrs.steps] for o in ops if o.op is FUSED_REGION]
    assert region.count("resize_nearest") == 2 and region[-3:] == ["less_equal", "select", "reduce_sum"], region
    assert not any(o.op.name == "transpose" for o in ops)  # the incoming view joined the region; nothing after it
    gen = torch.Generator().manual_seed(0)
    offsets = torch.randint(0, k * k, (n, c, h, w), generator=gen).to(torch.int8)
    feeds = [torch.randn(n, h, w, c, generator=gen), offsets, torch.randn(n, c, h * k, w * k, generator=gen)]
    want = g.compile({t: t.type for t in (gy, idx, r)}, outs, descriptor=PLAIN).run(feeds)
    for a, b in zip(exe.run(feeds), want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
