"""``F.max_pool2d`` of a training step captured before AOTAutograd (``frontends/torch/capture.py``) as
``opgraph::max_pool2d`` (``frontends/torch/pool_ops.py``), which saves 8-bit window offsets for its backward: the
custom ops against PyTorch's max pooling (values, the offsets decoded to PyTorch's index, the gradient; opcheck;
finite differences in float64), the rewrite of Dynamo's graphs, and CNNs through ``torch.compile(backend="opgraph")``
against eager: the forward program stores int8 offsets."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import opgraph as og
from opgraph.frontends.torch import recording
from opgraph.frontends.torch.capture import capture_max_pool
from opgraph.frontends.torch.pool_ops import MAX_POOL2D, MAX_POOL2D_BACKWARD
from tests.frontends.torch_harness import check_training, compiled

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

WINDOWS = {  # kernel, stride, padding, dilation, ceil_mode
    "stem": ([3, 3], [2, 2], [1, 1], [1, 1], False),
    "vgg": ([2, 2], [2, 2], [0, 0], [1, 1], False),
    "ceil": ([3, 3], [2, 2], [0, 0], [1, 1], True),
    "dilated-uneven": ([3, 2], [2, 1], [1, 0], [2, 1], False),
    "big-window": ([12, 11], [1, 1], [0, 0], [1, 1], False),  # 132 offsets: int16
}


@pytest.mark.parametrize("layout", ["nchw", "channels_last", "unbatched"])
@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_offsets_name_pytorchs_argmax(window: str, layout: str) -> None:
    args = WINDOWS[window]
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (2, 3, 14, 13), generator=gen).double()  # ties in most windows
    x = x[0] if layout == "unbatched" else x.contiguous(memory_format=torch.channels_last) \
        if layout == "channels_last" else x
    values, offsets = MAX_POOL2D(x, *args)
    want, index = torch.ops.aten.max_pool2d_with_indices(x, *args)
    assert torch.equal(values, want)
    assert offsets.dtype == (torch.int16 if window == "big-window" else torch.int8)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), _ = args
    oh, ow = want.shape[-2:]
    rows = (torch.arange(oh)[:, None] * sh - ph) + offsets.long() // kw * dh
    cols = (torch.arange(ow) * sw - pw) + offsets.long() % kw * dw
    assert torch.equal(rows * x.shape[-1] + cols, index)
    assert values.is_contiguous(memory_format=torch.channels_last) == (layout == "channels_last")
    grad = torch.randn(want.shape, generator=gen, dtype=torch.float64)
    dx = MAX_POOL2D_BACKWARD(grad, offsets, list(x.shape), *args)
    torch.testing.assert_close(dx, torch.ops.aten.max_pool2d_with_indices_backward(grad, x, *args, index))


def test_a_window_too_large_for_16_bit_offsets_is_refused() -> None:
    x = torch.randn(1, 1, 200, 200)
    with pytest.raises(og.OpgraphError, match="opgraph::max_pool2d: a 200x200 window"):
        MAX_POOL2D(x, [200, 200], [1, 1], [0, 0], [1, 1], False)
    gm = _traced(lambda t: F.max_pool2d(t, 200), x)
    assert capture_max_pool(gm) == 0  # PyTorch's op keeps it


def test_custom_ops_opcheck_and_finite_differences() -> None:
    opcheck = getattr(torch.library, "opcheck", None)
    x = torch.randn(2, 3, 9, 8, dtype=torch.float64, requires_grad=True)
    args = WINDOWS["stem"]
    assert torch.autograd.gradcheck(lambda t: MAX_POOL2D(t, *args)[0], (x,))
    if opcheck is None:
        pytest.skip("torch.library.opcheck needs PyTorch 2.4")
    opcheck(MAX_POOL2D, (x, *args))
    values, offsets = MAX_POOL2D(x.detach(), *args)
    opcheck(MAX_POOL2D_BACKWARD, (torch.randn_like(values), offsets, list(x.shape), *args))


def _traced(fn: Any, *example: torch.Tensor) -> torch.fx.GraphModule:
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    gm = torch.fx.symbolic_trace(fn)
    FakeTensorProp(gm).propagate(*example)
    for node in gm.graph.nodes:  # Dynamo's graphs keep their example values here
        if "val" in node.meta:
            node.meta["example_value"] = node.meta["val"]
    return gm


def test_capture_rewrites_pools_without_indices_only() -> None:
    x = torch.randn(1, 2, 8, 8)
    gm = _traced(lambda t: F.max_pool2d(t, 2) + torch.max_pool2d(t, (2, 2), [], 0, 1, False)
                 + F.max_pool2d(t, 3, 2, 1, ceil_mode=True)[..., :4, :4], x)
    assert capture_max_pool(gm) == 3
    assert [n.args[1:] for n in gm.graph.nodes if n.target is MAX_POOL2D] == [
        ([2, 2], [2, 2], [0, 0], [1, 1], False), ([2, 2], [2, 2], [0, 0], [1, 1], False),
        ([3, 3], [2, 2], [1, 1], [1, 1], True)]
    torch.testing.assert_close(gm(x), F.max_pool2d(x, 2) * 2 + F.max_pool2d(x, 3, 2, 1, ceil_mode=True)[..., :4, :4])
    kept = _traced(lambda t: F.max_pool2d(t, 2, return_indices=True)[0] + F.max_pool2d(t.long(), 2).float(), x)
    assert capture_max_pool(kept) == 0  # indices asked for; an integer input


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(), nn.MaxPool2d(3, 2, 1, ceil_mode=True), nn.Flatten(), nn.LazyLinear(5))


def _offsets_saved(reports: list[Any]) -> list[str]:
    return [t.dtype.name for r in reports if r.kind == "forward" and r.executable is not None
            for o in r.executable.program.graph.ops if o.op.name == "max_pool2d_return_indices" for t in o.outputs[1:]]


def test_a_cnn_trains_with_window_offsets_in_the_interpreter() -> None:
    """Under the interpreter (where the pool kernels may run, as on CUDA) the training step's forward saves int8
    offsets; its loss, gradients and SGD step equal eager's."""
    model = _cnn()
    x = torch.randn(2, 3, 12, 12)
    model(x)  # the lazy layer's size
    with recording() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = compiled(model, {"triton_interpret": True})
        fast(x).square().mean().backward()
    assert _offsets_saved(reports) == ["int8", "int8"]
    check_training(model, x, rtol=1e-5, atol=1e-6)  # (on the CPU: PyTorch's index, captured or not)


def test_no_capture_where_the_kernels_do_not_run() -> None:
    model = _cnn()
    x = torch.randn(2, 3, 12, 12)
    model(x)
    for options in ({}, {"triton_interpret": True, "capture_max_pool": False}):
        with recording() as reports, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled(model, options)(x).sum().backward()
        assert _offsets_saved(reports) == ["int64", "int64"], options


def test_inference_pools_keep_no_int64_indices() -> None:
    """No indices leave an inference graph: ``compact_pool_indices`` makes the unread ones int8 offsets."""
    model = _cnn().eval()
    x = torch.randn(2, 3, 12, 12)
    model(x)
    with recording() as reports, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        got = compiled(model, {"triton_interpret": True})(x)
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-6)
    dtypes = [t.dtype for r in reports for o in r.executable.program.graph.ops
              if o.op.name == "max_pool2d_return_indices" for t in o.outputs[1:]]
    assert dtypes == [og.int8, og.int8]


def test_a_vgg_block_gradient_is_one_nhwc_region_under_the_layout_pass() -> None:
    """Channels-last convolution graphs (the CUDA default, forced here under the interpreter): each 2x2 pool's
    gradient is computed in NHWC inside the region of the ReLU mask and the bias sum before it. Split across an
    NCHW region and a region reading it back against its order, VGG16's first step hung the GPU (RESULTS.md,
    fifteenth session). The step's gradients equal eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 3 * 3, 5))
    x = torch.randn(2, 3, 12, 12)
    mine, ref = copy.deepcopy(model), model
    with recording() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(mine, {"triton_interpret": True, "channels_last": True})(x).square().mean().backward()
    ref(x).square().mean().backward()
    for p, q in zip(mine.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    (backward,) = [r.executable for r in reports if r.kind == "backward"]
    ops = backward.program.graph.ops
    assert not any(o.op.name == "max_pool2d_gradient" for o in ops)
    pooled = [[s.op for s in o.attrs.steps] for o in ops if o.op.name == "fused_region"
              and any(s.op == "resize_nearest" for s in o.attrs.steps)]
    assert len(pooled) == 2 and all("reduce_sum" in steps and "less_equal" in steps for steps in pooled), pooled
