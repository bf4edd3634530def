"""``opgraph.kernels.max_pool`` against PyTorch's max pooling (values, argmax indices, gradient), on the CPU under
Triton's interpreter: ResNet's and VGG's windows, dilation, uneven windows, channels past one tile, ties, NaN and
windows of -inf."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from opgraph.kernels import max_pool  # noqa: E402

WINDOWS = {  # (kernel, stride, padding, dilation), each (along H, along W)
    "resnet-stem": ((3, 3), (2, 2), (1, 1), (1, 1)),
    "vgg": ((2, 2), (2, 2), (0, 0), (1, 1)),
    "overlapping": ((3, 3), (1, 1), (1, 1), (1, 1)),
    "dilated": ((3, 3), (2, 2), (1, 1), (2, 2)),
    "uneven": ((3, 2), (2, 1), (1, 0), (1, 2)),
}


def _out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _case(shape: tuple[int, int, int, int], dtype: torch.dtype, special: bool, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=gen).float()  # few distinct values: ties in most windows
    if special:
        flat = x.view(-1)
        flat[torch.randperm(flat.numel(), generator=gen)[:4]] = float("nan")
        x[0, :, :4, :4] = float("-inf")  # windows of the padded corner see only -inf (dilated ones too)
    return x.to(dtype)


@pytest.mark.parametrize("special", [False, True], ids=["ties", "nan-inf"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16],
                         ids=["f64", "f32", "f16", "bf16"])
@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_forward_and_backward_match_pytorch(window: str, dtype: torch.dtype, special: bool) -> None:
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = win = WINDOWS[window]
    shape = (2, 70, 7, 6)  # 70 channels: two channel tiles, the second partly masked
    x = _case(shape, dtype, special, seed=len(window))
    out_hw = (_out(7, kh, sh, ph, dh), _out(6, kw, sw, pw, dw))
    want_v, want_i = torch.ops.aten.max_pool2d_with_indices(x.double(), [kh, kw], [sh, sw], [ph, pw], [dh, dw])
    got_v, got_i = max_pool.forward(x.contiguous(memory_format=torch.channels_last), win, out_hw)
    assert got_v.is_contiguous(memory_format=torch.channels_last) and got_i.dtype == torch.int64
    torch.testing.assert_close(got_v.double(), want_v.double(), equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got_i, want_i), (got_i != want_i).nonzero()[:5]

    grad = torch.randn(want_v.shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    want_dx = torch.ops.aten.max_pool2d_with_indices_backward(
        grad.double(), x.double(), [kh, kw], [sh, sw], [ph, pw], [dh, dw], False, want_i)
    got_dx = max_pool.backward(grad.contiguous(memory_format=torch.channels_last), got_i, (7, 6), win)
    assert got_dx.is_contiguous(memory_format=torch.channels_last) and got_dx.dtype == dtype
    tol = {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float32: dict(rtol=1e-6, atol=1e-6),
           torch.float16: dict(rtol=1e-3, atol=1e-3), torch.bfloat16: dict(rtol=1e-2, atol=1e-2)}[dtype]
    torch.testing.assert_close(got_dx.double(), want_dx, **tol)


@pytest.mark.parametrize("special", [False, True], ids=["ties", "nan-inf"])
@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_window_offsets_name_pytorchs_maximum(window: str, special: bool) -> None:
    """``local``: the index is the offset in the window (int8), the same element as PyTorch's ``h * W + w``
    (decoded here independently), and the backward from it equals PyTorch's."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = win = WINDOWS[window]
    x = _case((2, 70, 7, 6), torch.float32, special, seed=len(window))
    oh, ow = _out(7, kh, sh, ph, dh), _out(6, kw, sw, pw, dw)
    want_v, want_i = torch.ops.aten.max_pool2d_with_indices(x, [kh, kw], [sh, sw], [ph, pw], [dh, dw])
    starts_h = (torch.arange(oh) * sh - ph).view(1, 1, oh, 1)
    starts_w = (torch.arange(ow) * sw - pw).view(1, 1, 1, ow)
    want_local = ((want_i // 6 - starts_h) // dh) * kw + (want_i % 6 - starts_w) // dw
    got_v, got_i = max_pool.forward(x.contiguous(memory_format=torch.channels_last), win, (oh, ow), torch.int8,
                                    local=True)
    assert got_i.dtype == torch.int8
    torch.testing.assert_close(got_v, want_v, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got_i.long(), want_local), (got_i.long() != want_local).nonzero()[:5]
    grad = torch.randn(want_v.shape, generator=torch.Generator().manual_seed(3))
    want_dx = torch.ops.aten.max_pool2d_with_indices_backward(grad, x, [kh, kw], [sh, sw], [ph, pw], [dh, dw],
                                                              False, want_i)
    got_dx = max_pool.backward(grad.contiguous(memory_format=torch.channels_last), got_i, (7, 6), win, local=True)
    torch.testing.assert_close(got_dx, want_dx, rtol=1e-6, atol=1e-6)


def test_a_later_nan_replaces_an_earlier_one() -> None:
    """PyTorch's rule: a NaN wins, and each later NaN of the window takes its place (also beside -inf)."""
    x = torch.zeros(1, 2, 4, 4)
    x[0, 0, 0, 1], x[0, 0, 1, 0] = float("nan"), float("nan")  # two NaNs in the first 2x2 window
    x[0, 1, :2, :2] = float("-inf")
    x[0, 1, 1, 1] = float("nan")
    want_v, want_i = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2], [0, 0], [1, 1])
    got_v, got_i = max_pool.forward(x.contiguous(memory_format=torch.channels_last),
                                    ((2, 2), (2, 2), (0, 0), (1, 1)), (2, 2))
    assert got_i[0, 0, 0, 0] == 4 and got_i[0, 1, 0, 0] == 5  # h * W + w of the later NaN
    assert torch.equal(got_i, want_i)
    torch.testing.assert_close(got_v, want_v, equal_nan=True)


def test_windows_that_do_not_fit_keep_pytorchs_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(max_pool, "ENABLED", True)
    x = torch.randn(2, 8, 4, 4).contiguous(memory_format=torch.channels_last)
    stem = ((3, 3), (2, 2), (1, 1), (1, 1))
    assert max_pool.use_kernels(x, stem, 10**6, interpret=True)
    assert not max_pool.use_kernels(x, stem, 2**31, interpret=True)  # the other tensor needs 64-bit offsets
    assert not max_pool.use_kernels(x, ((9, 9), (1, 1), (4, 4), (1, 1)), 10, interpret=True)  # 81 unrolled
    assert not max_pool.use_kernels(x, ((5, 5), (1, 1), (2, 2), (3, 3)), 10, interpret=True)  # 13 x 13 covering


def test_int32_indices_and_strided_inputs() -> None:
    """Indices in the dtype asked for; inputs at any strides (an NCHW tensor read as it is)."""
    win = WINDOWS["resnet-stem"]
    x = torch.randn(1, 3, 9, 9)
    want_v, want_i = torch.ops.aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1], [1, 1])
    got_v, got_i = max_pool.forward(x, win, (5, 5), torch.int32)
    assert got_i.dtype == torch.int32 and torch.equal(got_i.long(), want_i) and torch.equal(got_v, want_v)
    dx = max_pool.backward(torch.ones_like(got_v), got_i, (9, 9), win)
    assert torch.equal(dx, torch.ops.aten.max_pool2d_with_indices_backward(
        torch.ones_like(want_v), x, [3, 3], [2, 2], [1, 1], [1, 1], False, want_i))


def test_used_only_for_channels_last_tensors_on_cuda_or_in_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(max_pool, "ENABLED", True)
    x = torch.randn(2, 8, 4, 4)
    cl = x.contiguous(memory_format=torch.channels_last)
    stem = ((3, 3), (2, 2), (1, 1), (1, 1))
    assert not max_pool.use_kernels(cl, stem, 64)  # the CPU keeps PyTorch's
    assert max_pool.use_kernels(cl, stem, 64, interpret=True) and not max_pool.use_kernels(x, stem, 64, interpret=True)
    monkeypatch.setattr(max_pool, "ENABLED", False)
    assert not max_pool.use_kernels(cl, stem, 64, interpret=True)


def _train_against_eager(monkeypatch: pytest.MonkeyPatch, device: str, options: dict[str, object]) -> list[str]:
    """Three SGD steps of a CNN with a max pool after NHWC convolutions, through the torch backend and eagerly:
    the same parameters after each; returns which of these kernels the backend called."""
    import copy

    from torch import nn

    calls: list[str] = []
    monkeypatch.setattr(max_pool, "ENABLED", True)
    for name in ("forward", "backward"):
        fn = getattr(max_pool, name)
        monkeypatch.setattr(max_pool, name, lambda *a, _fn=fn, _n=name, **kw: (
            calls.append(_n + (" offsets" if kw.get("local") else "")), _fn(*a, **kw))[1])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                          nn.Conv2d(16, 8, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    model = model.to(device)
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="opgraph", options={"warn_fallbacks": False, **options})
    opt, opt2 = (torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, twin))
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        for _ in range(3):
            x = torch.randn(4, 3, 17, 17, device=device)
            for m, o in ((compiled, opt), (twin, opt2)):
                o.zero_grad()
                m(x).square().mean().backward()  # a loss that SGD at this rate does not blow up
                o.step()
    finally:
        torch.backends.cudnn.allow_tf32 = saved
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    return calls


def test_a_channels_last_cnn_trains_through_them_in_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _train_against_eager(monkeypatch, "cpu", {"triton_interpret": True, "channels_last": True})
    # a training step saves window offsets (capture_max_pool), not PyTorch's int64 index
    assert "forward offsets" in calls and "backward offsets" in calls, calls
    calls = _train_against_eager(monkeypatch, "cpu", {"triton_interpret": True, "channels_last": True,
                                                      "capture_max_pool": False})
    assert "forward" in calls and "backward" in calls, calls


@pytest.mark.gpu
def test_a_channels_last_cnn_trains_through_them_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA the convolutions run NHWC by default, so the pool reads channels-last storage."""
    calls = _train_against_eager(monkeypatch, "cuda", {})
    assert "forward offsets" in calls and "backward offsets" in calls, calls
