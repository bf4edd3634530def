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
