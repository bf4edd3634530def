"""passes/pad_matmul.py: products with a misaligned leading dimension computed on zero-padded operands. Where the
pass pads (which sizes, before which transposes, one pad shared), and the values against NumPy in float64 and the
unpadded graph; on the CPU the pass runs only when asked (``pad_matmuls=True``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import opgraph as og
from opgraph.passes.pad_matmul import MIN_FLOPS, Padding, padding_for, timed_decision

PADDED = og.CompilationDescriptor(pad_matmuls=True, verify_each_pass=True)
PLAIN = og.CompilationDescriptor(optimization_level=0)
Build = Callable[[og.Graph, list[og.Tensor]], list[og.Tensor]]


def _run(build: Build, shapes: list[tuple[int, ...]], dtype: og.DType = og.float32,
         descriptor: og.CompilationDescriptor = PADDED) -> tuple[list[str], list[torch.Tensor], list[torch.Tensor],
                                                                 list[np.ndarray]]:
    """(ops after compiling, padded results, unoptimised results, the feeds in float64)."""
    g = og.Graph()
    xs = [g.placeholder(s, dtype) for s in shapes]
    outs = build(g, xs)
    gen = torch.Generator().manual_seed(0)
    feeds = [torch.randn(s, generator=gen).to(dtype.torch_dtype) for s in shapes]
    exe = g.compile({t: t.type for t in xs}, outs, device="cpu", descriptor=descriptor)
    plain = g.compile({t: t.type for t in xs}, outs, device="cpu", descriptor=PLAIN)
    ops = [o.op.name for o in exe.program.graph.ops if o.op.name not in ("placeholder", "variable", "constant")]
    return ops, exe.run(feeds), plain.run(feeds), [f.double().numpy() for f in feeds]


def _close(got: torch.Tensor, want: np.ndarray, dtype: og.DType) -> None:
    tol = {og.bfloat16: 2e-2, og.float16: 2e-3}.get(dtype, 1e-4)  # a rounding of the result
    np.testing.assert_allclose(got.double().numpy(), want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("dtype", [og.float32, og.bfloat16, og.float16])
def test_a_misaligned_product_width_is_padded_and_sliced_back(dtype: og.DType) -> None:
    n = 30 if dtype is og.float32 else 1001  # not a multiple of 4 (float32) or 8 (16-bit) elements
    ops, got, plain, (a, b) = _run(lambda g, x: [g.matmul(x[0], x[1])], [(6, 16), (16, n)], dtype)
    assert ops == ["pad", "matmul", "slice"]
    assert got[0].shape == (6, n)
    _close(got[0], a @ b, dtype)
    torch.testing.assert_close(got[0], plain[0], rtol=1e-2, atol=1e-2)


def test_a_misaligned_inner_size_pads_both_operands_and_slices_nothing() -> None:
    ops, got, _, (a, b) = _run(lambda g, x: [g.matmul(x[0], x[1], name="y")], [(8, 30), (30, 16)])
    assert ops == ["pad", "pad", "matmul"]
    _close(got[0], a @ b, og.float32)
    g = og.Graph()
    a_, b_ = g.placeholder((8, 30)), g.placeholder((30, 16))
    exe = g.compile({a_: a_.type, b_: b_.type}, [g.matmul(a_, b_, name="y")], device="cpu", descriptor=PADDED)
    assert [o.name for o in exe.program.graph.ops if o.op.name == "matmul"] == ["y"]  # the product keeps its name


def test_aligned_products_and_rows_read_along_k_are_left_alone() -> None:
    ops, *_ = _run(lambda g, x: [g.matmul(x[0], x[1])], [(8, 16), (16, 32)])
    assert ops == ["matmul"]
    ops, *_ = _run(lambda g, x: [g.matmul(x[0], x[1])], [(7, 16), (16, 32)])  # M is no leading dim of row-major x
    assert ops == ["matmul"]


def test_transposed_operands_are_padded_before_their_transpose() -> None:
    # x = transpose(X): read along M; w = transpose(W): read along K, so a misaligned K pads W's columns
    ops, got, _, (xs, ws) = _run(lambda g, x: [g.matmul(g.transpose(x[0], [1, 0]), g.transpose(x[1], [1, 0]))],
                                 [(30, 30), (16, 30)])
    assert ops == ["pad", "transpose", "pad", "transpose", "matmul", "slice"]
    _close(got[0], xs.T @ ws.T, og.float32)


def test_a_gradient_read_by_two_products_is_padded_once() -> None:
    # a vocabulary layer's backward: dx = g @ w and dw = transpose(g) @ x, both misaligned along the vocabulary
    def build(g: og.Graph, x: list[og.Tensor]) -> list[og.Tensor]:
        grad, w, h = x
        return [g.matmul(grad, w), g.matmul(g.transpose(grad, [1, 0]), h)]

    ops, got, plain, (gr, w, h) = _run(build, [(8, 1001), (1001, 16), (8, 16)], og.bfloat16)
    assert ops.count("pad") == 2  # the gradient once, w once
    _close(got[0], gr @ w, og.bfloat16)
    _close(got[1], gr.T @ h, og.bfloat16)
    assert got[1].shape == (1001, 16)


def test_a_linear_layer_pads_its_bias_with_the_product() -> None:
    def build(g: og.Graph, x: list[og.Tensor]) -> list[og.Tensor]:
        fc = og.nn.Linear(g, 16, 30, name="fc", generator=torch.Generator().manual_seed(0))
        return [g.relu(fc(x[0]))]

    ops, got, plain, _ = _run(build, [(2, 3, 16)])
    assert "matmul_epilogue" in ops and ops.count("pad") == 2 and ops[-1] == "slice"
    assert got[0].shape == (2, 3, 30)
    torch.testing.assert_close(got[0], plain[0], rtol=1e-5, atol=1e-5)


def test_padded_products_inside_generated_regions_under_the_interpreter() -> None:
    # the slice of the padded product is read by a softmax region: a strided read of the padded buffer
    desc = og.CompilationDescriptor(pad_matmuls=True, triton_interpret=True, verify_each_pass=True)
    ops, got, plain, _ = _run(lambda g, x: [g.softmax(g.matmul(x[0], x[1]), -1)], [(6, 16), (16, 30)],
                              descriptor=desc)
    assert ops == ["pad", "matmul", "fused_region"]  # the slice is read inside the softmax's region
    torch.testing.assert_close(got[0], plain[0], rtol=1e-5, atol=1e-6)


def test_the_default_pads_nothing_on_the_cpu_and_small_products_are_not_timed() -> None:
    ops, *_ = _run(lambda g, x: [g.matmul(x[0], x[1])], [(6, 16), (16, 30)], descriptor=og.CompilationDescriptor())
    assert ops == ["matmul"]
    p = Padding(0, 0, 2, False, False)
    assert not timed_decision("cpu")(4096, 4096, 4094, torch.float32, p)
    assert MIN_FLOPS > 2 * 64 * 64 * 62
    assert not timed_decision("cuda")(64, 64, 62, torch.float32, p)  # decided without a device


def test_a_probe_out_of_memory_pads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from opgraph.passes import pad_matmul

    def no_memory(*_: object) -> bool:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    cleared = []
    monkeypatch.setattr(pad_matmul, "_time_padding", no_memory)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: cleared.append(True))
    pad_matmul.padded_gemm_is_faster.cache_clear()  # type: ignore[attr-defined]
    try:
        assert pad_matmul.padded_gemm_is_faster(8192, 768, 30522, torch.float32, Padding(0, 0, 2, False, True)) \
            is False
        assert cleared == [True]  # the failed probe's memory goes back to the device
    finally:
        pad_matmul.padded_gemm_is_faster.cache_clear()  # type: ignore[attr-defined]


def test_which_sizes_need_padding_follows_the_layouts() -> None:
    g = og.Graph()
    a, b = g.placeholder((30, 30)), g.placeholder((30, 30))
    plain, xt = g.matmul(a, b), g.matmul(g.transpose(a, [1, 0]), b)
    wt = g.matmul(a, g.transpose(b, [1, 0]))
    assert padding_for(plain.op)[3] == Padding(0, 2, 2, False, False)  # type: ignore[index]
    assert padding_for(xt.op)[3] == Padding(2, 0, 2, True, False)  # type: ignore[index]
    assert padding_for(wt.op)[3] == Padding(0, 2, 2, False, True)  # type: ignore[index]
    ints = g.matmul(g.placeholder((30, 30), og.int32), g.placeholder((30, 30), og.int32))
    assert padding_for(ints.op) is None


def test_the_torch_backend_option_reaches_the_pass() -> None:
    torch._dynamo.reset()  # earlier tests' compilations of nn.Sequential count towards Dynamo's recompile limit
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 1001), torch.nn.LogSoftmax(-1))
    x = torch.randn(8, 16)
    want = model(x)
    want.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    from opgraph.frontends.torch.backend import recording

    fast = torch.compile(model, backend="opgraph", options={"pad_matmuls": True, "warn_fallbacks": False})
    with recording() as reports:
        got = fast(x)
        got.sum().backward()
    padded = {r.kind: sum(o.op.name == "pad" for o in r.executable.program.graph.ops) for r in reports}
    assert padded == {"forward": 2, "backward": 1}  # weight and bias; the output gradient (shared by two products)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for p, w in zip(model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, w, rtol=1e-4, atol=1e-5)


def _vocabulary_layer(g: og.Graph, x: list[og.Tensor]) -> list[og.Tensor]:
    """An output layer's three products as its training step has them: logits, the input's and the weight's
    gradients (``h @ transpose(w)``, ``grad @ w``, ``transpose(grad) @ h``)."""
    h, w, grad = x
    return [g.matmul(h, g.transpose(w, [1, 0])), g.matmul(grad, w), g.matmul(g.transpose(grad, [1, 0]), h)]


def test_a_vocabulary_layer_pads_its_weight_and_gradient_once_each() -> None:
    ops, got, _, (h, w, grad) = _run(_vocabulary_layer, [(8, 16), (1001, 16), (8, 1001)], og.bfloat16)
    assert ops.count("pad") == 2 and ops.count("matmul") == 3
    for r, want in zip(got, [h @ w.T, grad @ w, grad.T @ h], strict=True):
        _close(r, want, og.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("pad", [None, True])
@pytest.mark.parametrize("dtype", [og.bfloat16, og.float32])
def test_a_vocabulary_layer_on_cuda_against_the_unpadded_products(pad: bool | None, dtype: og.DType) -> None:
    m, k, v = 4096, 768, 30522  # 2mkn = 192 GFLOP: past MIN_FLOPS, so the default asks the probe
    g = og.Graph()
    xs = [g.placeholder(s, dtype) for s in [(m, k), (v, k), (m, v)]]
    outs = _vocabulary_layer(g, xs)
    gen = torch.Generator(device="cuda").manual_seed(0)
    feeds = [torch.randn(t.shape, generator=gen, device="cuda").to(dtype.torch_dtype) for t in xs]
    types = {t: t.type for t in xs}
    desc = og.CompilationDescriptor(pad_matmuls=pad, cuda_graphs=False)
    exe = g.compile(types, outs, device="cuda", descriptor=desc)
    plain = g.compile(types, outs, device="cuda", descriptor=og.CompilationDescriptor(pad_matmuls=False))
    pads = [o for o in exe.program.graph.ops if o.op.name == "pad"]
    if pad:
        assert len(pads) == 2  # h needs none; w and the gradient once each, shared by their two products
    for got, want in zip(exe.run(feeds), plain.run(feeds), strict=True):
        assert got.shape == want.shape
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2 * want.float().abs().max().item())


@pytest.mark.gpu
def test_the_padding_probe_answers_once_per_question() -> None:
    from opgraph.passes.pad_matmul import padded_gemm_is_faster

    padded_gemm_is_faster.cache_clear()  # type: ignore[attr-defined]
    p = Padding(0, 0, 6, False, True)
    first = padded_gemm_is_faster(4096, 768, 30522, torch.bfloat16, p)
    assert isinstance(first, bool) and padded_gemm_is_faster(4096, 768, 30522, torch.bfloat16, p) is first
    assert padded_gemm_is_faster.cache_info().hits == 1  # type: ignore[attr-defined]


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 19), k=st.integers(1, 19), n=st.integers(1, 19), x_t=st.booleans(), w_t=st.booleans(),
       batch=st.sampled_from([(), (2,)]), bias=st.booleans(), dtype=st.sampled_from([og.float32, og.bfloat16]))
def test_random_products_padded_equal_numpy(m: int, k: int, n: int, x_t: bool, w_t: bool, batch: tuple[int, ...],
                                            bias: bool, dtype: og.DType) -> None:
    """Any sizes and layouts (transposed operands, a batched x, a bias that becomes an epilogue): the padded
    program gives the product NumPy gives, and pads exactly the sizes ``padding_for`` names."""
    x_t = x_t and not batch  # a batched x is read row-major
    shapes = [(*batch, k, m) if x_t else (*batch, m, k), (n, k) if w_t else (k, n)] + ([(n,)] if bias else [])

    def build(g: og.Graph, xs: list[og.Tensor]) -> list[og.Tensor]:
        x = g.transpose(xs[0], [1, 0]) if x_t else xs[0]
        w = g.transpose(xs[1], [1, 0]) if w_t else xs[1]
        y = g.matmul(x, w)
        return [g.add(y, xs[2]) if bias else y]

    ops, got, _, feeds = _run(build, shapes, dtype)
    x = feeds[0].swapaxes(-1, -2) if x_t else feeds[0]
    w = feeds[1].T if w_t else feeds[1]
    want = x @ w + (feeds[2] if bias else 0)
    assert got[0].shape == want.shape
    _close(got[0], want, dtype)
    align = 16 // dtype.itemsize
    needs = (m % align and x_t) or (k % align and (not x_t or w_t)) or n % align
    assert ("pad" in ops) == bool(needs)


@pytest.mark.parametrize("field", ["pad_matmuls", "channels_last", "batch_norm_regions"])
def test_a_three_way_option_that_is_not_a_bool_or_none_is_refused(field: str) -> None:
    with pytest.raises(og.OpgraphError, match=f"{field} must be True, False or None, got 'yes'"):
        og.CompilationDescriptor(**{field: "yes"})  # type: ignore[arg-type]
    assert getattr(og.CompilationDescriptor(**{field: False}), field) is False
