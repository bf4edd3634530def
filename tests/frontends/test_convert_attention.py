"""The CUDA attention kernels' ATen ops (memory-efficient, flash, cuDNN; forward and backward) converted to
opgraph, checked on the CPU: traced with fake tensors (the kernels themselves need CUDA) and run on real ones
against PyTorch's math attention (outputs, logsumexp and gradients by autograd, in float64). The GPU model zoo
runs the same converters inside whole models."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from opgraph.frontends.torch import TorchOptions, compile_fx, recording
from tests.frontends.torch_harness import fallbacks

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

aten = torch.ops.aten


def _run(fn: Callable[..., Any], *inputs: torch.Tensor) -> list[Any]:
    """``fn`` traced with fake tensors, translated and compiled, run on ``inputs``; no fallback allowed."""
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    with recording() as reports:
        run = compile_fx(gm, inputs, TorchOptions(warn_fallbacks=False))
    assert not fallbacks(reports), fallbacks(reports)
    return list(run(list(inputs)))


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, causal: bool,
               scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Output and logsumexp of the scores per query, from the definition."""
    s = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), -math.inf)
    if bias is not None:
        s = s + bias
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def _qkv(seq_k: int = 7) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    q = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    k, v = (torch.randn(2, 3, seq_k, 4, dtype=torch.float64) for _ in range(2))
    return q, k, v, torch.randn(2, 3, 5, 4, dtype=torch.float64)


CASES = {"plain": (False, None, False), "causal-scaled": (True, 0.3, False), "bias": (False, None, True)}


@pytest.mark.parametrize("case", list(CASES))
def test_efficient_attention(case: str) -> None:
    causal, scale, with_bias = CASES[case]
    q, k, v, go = _qkv(5 if causal else 7)
    bias = torch.randn(1, 3, 5, k.shape[2], dtype=torch.float64) if with_bias else None

    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *b: torch.Tensor) -> Any:
        return aten._scaled_dot_product_efficient_attention(q, k, v, b[0] if b else None, True, 0.0, causal,
                                                            scale=scale)

    out, lse, seed, offset = _run(forward, q, k, v, *([bias] if bias is not None else []))
    want_out, want_lse = _reference(q, k, v, bias, causal, scale)
    torch.testing.assert_close(out, want_out)
    assert lse.shape == (2, 3, 32) and lse.dtype == torch.float32  # the kernel's queries rounded up to 32
    torch.testing.assert_close(lse[..., :5], want_lse.float())
    assert seed.shape == offset.shape == () and seed.dtype == torch.int64

    def backward(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor) -> Any:
        out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(q, k, v, b, True, 0.0, causal,
                                                                              scale=scale)
        return aten._scaled_dot_product_efficient_attention_backward(go, q, k, v, b, out, lse, seed, offset, 0.0,
                                                                     [True, True, True, True], causal, scale=scale)

    b = bias if bias is not None else torch.zeros(1, 3, 5, k.shape[2], dtype=torch.float64)
    grads = _run(backward, go, q, k, v, b)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, b)]
    (_reference(*leaves[:3], leaves[3], causal, scale)[0] * go).sum().backward()
    for got, leaf in zip(grads, leaves, strict=True):
        torch.testing.assert_close(got, leaf.grad)


@pytest.mark.parametrize("kernel", ["flash", "cudnn"])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_and_cudnn_attention(kernel: str, causal: bool) -> None:
    q, k, v, go = _qkv(5)
    if kernel == "flash":
        def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
            return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=0.4)[:2]

        def backward(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
            o = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=0.4)
            return aten._scaled_dot_product_flash_attention_backward(go, q, k, v, o[0], o[1], o[2], o[3], o[4],
                                                                     o[5], 0.0, causal, o[6], o[7], scale=0.4)
    else:
        def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
            return aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=0.4)[:2]

        def backward(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
            o = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=0.4)
            return aten._scaled_dot_product_cudnn_attention_backward(go, q, k, v, o[0], o[1], o[6], o[7], None,
                                                                     o[2], o[3], o[4], o[5], 0.0, causal,
                                                                     scale=0.4)

    got = _run(forward, q, k, v)
    want_out, want_lse = _reference(q, k, v, None, causal, 0.4)
    torch.testing.assert_close(got[0], want_out)
    torch.testing.assert_close(got[1].reshape(want_lse.shape), want_lse.float())
    grads = _run(backward, go, q, k, v)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    (_reference(*leaves, None, causal, 0.4)[0] * go).sum().backward()
    for g, leaf in zip(grads, leaves, strict=True):
        torch.testing.assert_close(g, leaf.grad)


def test_attention_dropout_runs_as_the_aten_op() -> None:
    q, k, v, _ = _qkv()
    gm = make_fx(lambda q, k, v: aten._scaled_dot_product_efficient_attention(q, k, v, None, False, 0.1),
                 tracing_mode="fake")(q, k, v)
    with recording() as reports:
        compile_fx(gm, [q, k, v], TorchOptions(warn_fallbacks=False))
    assert fallbacks(reports) == {"aten::_scaled_dot_product_efficient_attention.default": 1}
    assert "dropout" in reports[0].reasons["aten::_scaled_dot_product_efficient_attention.default"]


def test_math_attention_matches_the_reference() -> None:  # the oracle above is PyTorch's attention
    q, k, v, _ = _qkv()
    torch.testing.assert_close(_reference(q, k, v, None, False, None)[0], F.scaled_dot_product_attention(q, k, v))


# ---- the fused op ---------------------------------------------------------------------------------------------
def _compiled(fn: Callable[..., Any], *inputs: torch.Tensor, pre_dispatch: bool = False) -> tuple[list[Any], Any]:
    """``fn`` traced with fake tensors (pre-dispatch keeps ``aten.scaled_dot_product_attention``), compiled and run;
    no fallback allowed. Also returns the names of the executable's ops."""
    gm = make_fx(fn, tracing_mode="fake", pre_dispatch=pre_dispatch)(*inputs)
    with recording() as reports:
        run = compile_fx(gm, inputs, TorchOptions(warn_fallbacks=False))
    assert not fallbacks(reports), fallbacks(reports)
    return list(run(list(inputs))), {k.op for r in reports for k in r.kernels}


def _qkv32(seq_k: int = 7) -> tuple[torch.Tensor, ...]:
    return tuple(t.float() for t in _qkv(seq_k))


@pytest.mark.parametrize("case", list(CASES))
def test_efficient_attention_builds_the_fused_ops_and_reads_the_logsumexp(case: str) -> None:
    # float32: the backward reads the traced logsumexp (float64 recomputes it, see above)
    causal, scale, with_bias = CASES[case]
    q, k, v, go = _qkv32(5 if causal else 7)
    b = torch.randn(1, 3, 5, k.shape[2]) if with_bias else torch.zeros(1, 3, 5, k.shape[2])

    def both(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor) -> Any:
        bias = b if with_bias else None
        out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, causal,
                                                                              scale=scale)
        grads = aten._scaled_dot_product_efficient_attention_backward(
            go, q, k, v, b, out, lse, seed, offset, 0.0, [True, True, True, with_bias], causal, scale=scale)
        return out, lse, *grads[:3]

    (out, lse, *grads), ops = _compiled(both, go, q, k, v, b)
    assert {"scaled_dot_product_attention", "scaled_dot_product_attention_gradient"} <= ops
    assert "softmax" not in ops and "matmul" not in ops  # nothing recomputed
    want_out, want_lse = _reference(q.double(), k.double(), v.double(), b.double() if with_bias else None, causal,
                                    scale)
    torch.testing.assert_close(out, want_out.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse[..., :5], want_lse.float(), rtol=1e-5, atol=1e-5)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    (_reference(*leaves, b.double() if with_bias else None, causal, scale)[0] * go.double()).sum().backward()
    for got, leaf in zip(grads, leaves, strict=True):
        torch.testing.assert_close(got, leaf.grad.float(), rtol=1e-4, atol=1e-5)


def test_efficient_attention_with_a_mask_and_causality_and_a_query_that_sees_nothing() -> None:
    q, k, v, go = _qkv(7)
    bias = torch.randn(2, 1, 5, 7, dtype=torch.float64)
    bias[:, :, 3] = -math.inf  # query 3 attends to nothing

    def backward(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor) -> Any:
        out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(q, k, v, b, True, 0.0, True)
        return [out, lse, *aten._scaled_dot_product_efficient_attention_backward(
            go, q, k, v, b, out, lse, seed, offset, 0.0, [True, True, True, True], True)]

    out, lse, *grads = _run(backward, go, q, k, v, bias)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, bias)]
    want = F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3] + torch.ones(5, 7).tril().log())
    (want * go).sum().backward()
    torch.testing.assert_close(out, want.detach())
    assert (out[:, :, 3] == 0).all() and (lse[:, :, 3] == 0).all()  # the kernels' 0 for a query seeing nothing
    for got, leaf in zip(grads, leaves, strict=True):
        assert leaf.grad is not None
        torch.testing.assert_close(got, leaf.grad)
    assert grads[3].shape == bias.shape


@pytest.mark.parametrize("kernel", ["flash", "cudnn", "cpu"])
def test_flash_cudnn_and_cpu_kernels_read_the_logsumexp(kernel: str) -> None:
    q, k, v, go = _qkv32(5)

    def both(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        if kernel == "flash":
            o = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False, scale=0.4)
            g = aten._scaled_dot_product_flash_attention_backward(go, q, k, v, o[0], o[1], o[2], o[3], o[4], o[5],
                                                                  0.0, True, o[6], o[7], scale=0.4)
        elif kernel == "cudnn":
            o = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False, scale=0.4)
            g = aten._scaled_dot_product_cudnn_attention_backward(go, q, k, v, o[0], o[1], o[6], o[7], None, o[2],
                                                                  o[3], o[4], o[5], 0.0, True, scale=0.4)
        else:
            o = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True, scale=0.4)
            g = aten._scaled_dot_product_flash_attention_for_cpu_backward(go, q, k, v, o[0], o[1], 0.0, True,
                                                                          scale=0.4)
        return [o[0], *g]

    (out, *grads), ops = _compiled(both, go, q, k, v)
    assert "matmul" not in ops and "scaled_dot_product_attention_gradient" in ops
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    want = _reference(*leaves, None, True, 0.4)[0]
    (want * go.double()).sum().backward()
    torch.testing.assert_close(out, want.detach().float(), rtol=1e-5, atol=1e-5)
    for got, leaf in zip(grads, leaves, strict=True):
        torch.testing.assert_close(got, leaf.grad.float(), rtol=1e-4, atol=1e-5)


SDPA_CASES = {"plain": (None, False, None), "causal": (None, True, 0.3), "bool-mask": ("bool", False, None),
              "float-mask": ("float", False, 0.5)}


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_scaled_dot_product_attention_itself(case: str) -> None:
    kind, causal, scale = SDPA_CASES[case]
    q, k, v, _ = _qkv(7)
    mask = {"bool": torch.rand(5, 7) < 0.7, "float": torch.randn(3, 5, 7, dtype=torch.float64)}.get(kind or "")
    if mask is not None and mask.dtype == torch.bool:
        mask[2] = False  # a query that sees nothing: zeros, as PyTorch gives them

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *m: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m[0] if m else None, is_causal=causal, scale=scale)

    ins = (q, k, v) if mask is None else (q, k, v, mask)
    (out,), ops = _compiled(fn, *ins, pre_dispatch=True)
    assert "scaled_dot_product_attention" in ops
    torch.testing.assert_close(out, fn(*ins))


def test_scaled_dot_product_attention_dropout_and_grouped_heads_fall_back() -> None:
    q, k, v, _ = _qkv(7)
    gm = make_fx(lambda q, k, v: F.scaled_dot_product_attention(q, k[:, :1], v[:, :1], dropout_p=0.5),
                 tracing_mode="fake", pre_dispatch=True)(q, k, v)
    with recording() as reports:
        compile_fx(gm, [q, k, v], TorchOptions(warn_fallbacks=False))
    assert fallbacks(reports) == {"aten::scaled_dot_product_attention.default": 1}
    q8 = torch.randn(1, 4, 5, 8)
    kv = torch.randn(1, 2, 5, 8)
    gm = make_fx(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), tracing_mode="fake",
                 pre_dispatch=True)(q8, kv, kv)
    with recording() as reports:
        run = compile_fx(gm, [q8, kv, kv], TorchOptions(warn_fallbacks=False))
    assert "grouped" in reports[0].reasons["aten::scaled_dot_product_attention.default"]
    torch.testing.assert_close(run([q8, kv, kv])[0], F.scaled_dot_product_attention(q8, kv, kv, enable_gqa=True))


def test_from_torch_keeps_attention_fused() -> None:
    import opgraph as og

    class Attention(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    q, k, v, _ = (t.float() for t in _qkv(5))
    g = og.from_torch(Attention(), (q, k, v))
    assert [o.op.name for o in g.ops if o.op.name != "placeholder"] == ["scaled_dot_product_attention"]
    torch.testing.assert_close(g.run(dict(zip(g.inputs, (q, k, v), strict=True)), g.outputs)[0],
                               Attention()(q, k, v))


def test_backend_on_the_cpu_trains_through_the_fused_attention_op() -> None:
    # torch.compile on the CPU: the CPU flash kernel is converted (not decomposed to its math), forward and
    # backward, and the gradients match eager's
    import opgraph as og

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True))

    torch.manual_seed(0)
    model = Attention()
    q, k, v = (torch.randn(2, 3, 5, 8, requires_grad=True) for _ in range(3))
    report = og.torch.explain(model, q, k, v, train=True)
    ops = {kk.op for gr in report.graphs for kk in gr.executable.kernels()}
    assert {"scaled_dot_product_attention", "scaled_dot_product_attention_gradient"} <= ops, ops
    for t in (q, k, v):
        t.grad = None  # explain ran a training step
    compiled = torch.compile(model, backend="opgraph")
    got = compiled(q, k, v)
    got.square().sum().backward()
    want_grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    want = model(q, k, v)
    want.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for a, t in zip(want_grads, (q, k, v), strict=True):
        torch.testing.assert_close(a, t.grad, rtol=1e-4, atol=1e-5)
