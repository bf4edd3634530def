"""Converters of PyTorch's attention ops: the CPU flash kernel and the CUDA ones (flash, memory-efficient,
cuDNN) that ``scaled_dot_product_attention`` becomes when AOTAutograd traces it, forward and backward, and
``nn.TransformerEncoderLayer``'s inference fast path.

All compute ``softmax(q k^T * scale + mask) v`` with opgraph ops (opgraph has no fused attention op yet:
the scores are materialised); the backward recomputes the probabilities from q, k and v instead of reading
the kernels' ``logsumexp``. The kernels' bookkeeping outputs (random-number state, sequence offsets, debug
masks) are zeros of their traced types; dropout inside attention runs as the ATen op (no random ops yet).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ....core.dtype import float32
from ....ir.graph import Tensor
from ..registry import ConvertContext, Unsupported, converts
from .nn import _cast, _floating, _static, _traced_zeros, _want

aten = torch.ops.aten


def _mT(ctx: ConvertContext, t: Tensor) -> Tensor:
    perm = list(range(t.rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return ctx.g.transpose(t, perm)


def _attention_scores(ctx: ConvertContext, q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool,
                      scale: float) -> Tensor:
    """q k^T * scale with PyTorch's masks (bool: True keeps; float: added; causal: top-left lower triangle)."""
    g = ctx.g
    s = g.multiply(g.matmul(q, _mT(ctx, k)), scale)
    if is_causal:
        rows, cols = _static(s.shape[-2:], "a causal attention mask")
        s = g.select(g.constant(torch.ones(rows, cols, dtype=torch.bool).tril()), s, -math.inf)
    if mask is not None:
        s = g.select(mask, s, -math.inf) if mask.dtype.is_bool else g.add(s, _cast(ctx, mask, s.dtype))
    return s


def _attention_probs(ctx: ConvertContext, s: Tensor, masked: bool) -> Tensor:
    """softmax of the scores; with a mask, rows with nothing kept are 0, as PyTorch's attention gives them."""
    g = ctx.g
    p = g.softmax(s, -1)
    return g.select(_kept_rows(ctx, s), p, 0.0) if masked else p


def _kept_rows(ctx: ConvertContext, s: Tensor) -> Tensor:
    return ctx.g.reduce_or(ctx.g.not_equal(s, -math.inf), -1, keepdims=True)


def _attention_scale(q: Tensor, scale: Any) -> float:
    if scale is not None:
        return float(scale)
    return 1.0 / math.sqrt(_static(q.shape[-1:], "the attention head size")[0])


def _check_attention(q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> None:
    _floating(q, k, v)
    if dropout_p:
        raise Unsupported("attention dropout (opgraph has no random ops yet)")
    if q.rank != k.rank or q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]:
        raise Unsupported("attention with broadcast or grouped key/value heads")


@converts(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa_flash_cpu(ctx: ConvertContext, q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0,
                    is_causal: bool = False, *, attn_mask: Tensor | None = None,
                    scale: Any = None) -> tuple[Tensor, Tensor]:
    """(softmax(scores) v, logsumexp of the scores per query in float32; 0 for a query with nothing kept)."""
    g = ctx.g
    _check_attention(q, k, v, dropout_p)
    s = _attention_scores(ctx, q, k, attn_mask, is_causal, _attention_scale(q, scale))
    out = g.matmul(_attention_probs(ctx, s, attn_mask is not None), v)
    s32 = _cast(ctx, s, _want(ctx, 1, float32))
    top = g.reduce_max(s32, -1, keepdims=True)
    kept = _kept_rows(ctx, s32)
    top = g.select(kept, top, 0.0)
    lse = g.add(g.log(g.reduce_sum(g.exp(g.subtract(s32, top)), -1, keepdims=True)), top)
    return out, g.squeeze(g.select(kept, lse, 0.0), -1)


@converts(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _sdpa_flash_cpu_backward(ctx: ConvertContext, go: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                             logsumexp: Tensor, dropout_p: float, is_causal: bool, *, attn_mask: Tensor | None = None,
                             scale: Any = None) -> tuple[Tensor | None, ...]:
    return _backward(ctx, go, q, k, v, attn_mask, dropout_p, is_causal, scale)[:3]


@converts(aten._transformer_encoder_layer_fwd.default)
def _encoder_layer(ctx: ConvertContext, src: Tensor, embed_dim: int, num_heads: int, qkv_weight: Tensor,
                   qkv_bias: Tensor, proj_weight: Tensor, proj_bias: Tensor, use_gelu: bool, norm_first: bool,
                   eps: float, norm_weight_1: Tensor, norm_bias_1: Tensor, norm_weight_2: Tensor, norm_bias_2: Tensor,
                   ffn_weight_1: Tensor, ffn_bias_1: Tensor, ffn_weight_2: Tensor, ffn_bias_2: Tensor,
                   mask: Tensor | None = None, mask_type: int | None = None) -> Tensor:
    """``nn.TransformerEncoderLayer``'s inference fast path (batch first), as its slow path computes it."""
    g = ctx.g
    _floating(src)
    if mask is not None:
        raise Unsupported("a masked encoder-layer fast path")
    if src.rank != 3:
        raise Unsupported(f"an encoder layer on a rank-{src.rank} input")
    batch, length, e = _static(src.shape, "the encoder layer's input")
    heads = int(num_heads)
    if e != embed_dim or e % heads:
        raise Unsupported(f"embed_dim {embed_dim} with {heads} heads for an input of width {e}")
    dh = e // heads

    def linear(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return g.add(g.matmul(x, g.transpose(w, [1, 0])), b)

    def norm(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return g.layer_norm(x, [2], w, b, float(eps))

    def attention(x: Tensor) -> Tensor:
        qkv = g.transpose(g.reshape(linear(x, qkv_weight, qkv_bias), (batch, length, 3, heads, dh)), [2, 0, 3, 1, 4])
        q, k, v = (qkv[i] for i in range(3))
        o = g.matmul(_attention_probs(ctx, _attention_scores(ctx, q, k, None, False, 1.0 / math.sqrt(dh)), False), v)
        return linear(g.reshape(g.transpose(o, [0, 2, 1, 3]), (batch, length, e)), proj_weight, proj_bias)

    def ffn(x: Tensor) -> Tensor:
        h = linear(x, ffn_weight_1, ffn_bias_1)
        return linear(g.gelu(h) if use_gelu else g.relu(h), ffn_weight_2, ffn_bias_2)

    if norm_first:
        x = g.add(src, attention(norm(src, norm_weight_1, norm_bias_1)))
        return g.add(x, ffn(norm(x, norm_weight_2, norm_bias_2)))
    x = norm(g.add(src, attention(src)), norm_weight_1, norm_bias_1)
    return norm(g.add(x, ffn(x)), norm_weight_2, norm_bias_2)


# ---- the CUDA kernels' forms ---------------------------------------------------------------------------------
def _fit_logsumexp(ctx: ConvertContext, lse: Tensor, i: int) -> Tensor | None:
    """``lse`` (batch, heads, queries) shaped as the kernel returns it: padded along the queries (the
    memory-efficient kernel rounds them up to 32), with a trailing 1 (cuDNN), or empty when not asked for."""
    g = ctx.g
    t = ctx.out_types[i] if i < len(ctx.out_types) else None
    if t is None:
        return None
    want = _static(t.shape, "the attention logsumexp")
    if math.prod(want) == 0:
        return _traced_zeros(ctx, i)
    have = _static(lse.shape, "the attention logsumexp")
    queries = len(have) - 1
    if len(want) == len(have) + 1 and want[-1] == 1:
        lse = g.expand_dims(lse, -1)
    extra = want[queries] - have[queries] if len(want) > queries else -1
    if len(want) != lse.rank or want[:queries] != have[:queries] or extra < 0:
        raise Unsupported(f"an attention logsumexp of shape {want} (computed {have})")
    if extra:
        right = [0] * lse.rank
        right[queries] = extra
        lse = g.pad(lse, "constant", [0] * lse.rank, right, 0.0)
    return _cast(ctx, lse, t.dtype)


def _backward(ctx: ConvertContext, go: Tensor, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None,
              dropout_p: float, is_causal: bool, scale: Any, bias_grad: bool = False) -> tuple[Tensor | None, ...]:
    """(dq, dk, dv) and, when asked, the gradient of an additive ``bias`` (that of the scores, summed to its
    shape)."""
    g = ctx.g
    _floating(go)
    _check_attention(q, k, v, dropout_p)
    sc = _attention_scale(q, scale)
    p = _attention_probs(ctx, _attention_scores(ctx, q, k, bias, is_causal, sc), bias is not None)
    dv = g.matmul(_mT(ctx, p), go)
    dp = g.matmul(go, _mT(ctx, v))
    ds = g.multiply(p, g.subtract(dp, g.reduce_sum(g.multiply(dp, p), -1, keepdims=True)))
    dq, dk = g.multiply(g.matmul(ds, k), sc), g.multiply(g.matmul(_mT(ctx, ds), q), sc)
    db = None
    if bias_grad and bias is not None:
        if bias.dtype.is_bool:
            raise Unsupported("the gradient of a boolean attention mask")
        db = _cast(ctx, g.sum_to(ds, bias), bias.dtype)
    return dq, dk, dv, db


@converts(aten._scaled_dot_product_efficient_attention.default)
def _sdpa_efficient(ctx: ConvertContext, q: Tensor, k: Tensor, v: Tensor, attn_bias: Tensor | None,
                    compute_log_sumexp: bool, dropout_p: float = 0.0, is_causal: bool = False, *,
                    scale: Any = None) -> tuple[Tensor | None, ...]:
    """(output, logsumexp padded to 32 queries, philox seed, philox offset)."""
    out, lse = _sdpa_flash_cpu(ctx, q, k, v, dropout_p, is_causal, attn_mask=attn_bias, scale=scale)
    return out, _fit_logsumexp(ctx, lse, 1), _traced_zeros(ctx, 2), _traced_zeros(ctx, 3)


@converts(aten._scaled_dot_product_efficient_attention_backward.default)
def _sdpa_efficient_backward(ctx: ConvertContext, go: Tensor, q: Tensor, k: Tensor, v: Tensor,
                             attn_bias: Tensor | None, out: Tensor, logsumexp: Tensor, philox_seed: Tensor,
                             philox_offset: Tensor, dropout_p: float, grad_input_mask: Any,
                             is_causal: bool = False, *, scale: Any = None) -> tuple[Tensor | None, ...]:
    traced = len(ctx.out_types) > 3 and ctx.out_types[3] is not None  # the bias gradient, when asked for
    wanted = traced and len(grad_input_mask) > 3 and bool(grad_input_mask[3])
    return _backward(ctx, go, q, k, v, attn_bias, dropout_p, is_causal, scale, bias_grad=wanted)


def _seq_outputs(ctx: ConvertContext, q: Tensor, k: Tensor) -> tuple[Any, ...]:
    """(cum_seq_q, cum_seq_k, max_q, max_k, rng state, unused, debug mask) of the flash and cuDNN kernels."""
    max_q, max_k = _static(q.shape[-2:-1] + k.shape[-2:-1], "the attention sequence lengths")
    return (_traced_zeros(ctx, 2), _traced_zeros(ctx, 3), max_q, max_k, _traced_zeros(ctx, 6),
            _traced_zeros(ctx, 7), _traced_zeros(ctx, 8))


@converts(aten._scaled_dot_product_flash_attention.default)
def _sdpa_flash(ctx: ConvertContext, q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0,
                is_causal: bool = False, return_debug_mask: bool = False, *, scale: Any = None) -> tuple[Any, ...]:
    _top_left_causal(q, k, is_causal)
    out, lse = _sdpa_flash_cpu(ctx, q, k, v, dropout_p, is_causal, scale=scale)
    return (out, _fit_logsumexp(ctx, lse, 1)) + _seq_outputs(ctx, q, k)


@converts(aten._scaled_dot_product_flash_attention_backward.default)
def _sdpa_flash_backward(ctx: ConvertContext, go: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                         logsumexp: Tensor, cum_seq_q: Tensor, cum_seq_k: Tensor, max_q: Any, max_k: Any,
                         dropout_p: float, is_causal: bool, philox_seed: Tensor, philox_offset: Tensor, *,
                         scale: Any = None) -> tuple[Tensor | None, ...]:
    _top_left_causal(q, k, is_causal)
    return _backward(ctx, go, q, k, v, None, dropout_p, is_causal, scale)[:3]


def _top_left_causal(q: Tensor, k: Tensor, is_causal: bool) -> None:
    """The flash kernel aligns a causal mask bottom-right when queries and keys differ in number (PyTorch's
    dispatcher never picks it then); the converters' mask is top-left."""
    if is_causal and q.shape[-2] != k.shape[-2]:
        raise Unsupported("a causal flash attention with different query and key lengths")


@converts(aten._scaled_dot_product_cudnn_attention.default)
def _sdpa_cudnn(ctx: ConvertContext, q: Tensor, k: Tensor, v: Tensor, attn_bias: Tensor | None,
                compute_log_sumexp: bool, dropout_p: float = 0.0, is_causal: bool = False,
                return_debug_mask: bool = False, *, scale: Any = None) -> tuple[Any, ...]:
    out, lse = _sdpa_flash_cpu(ctx, q, k, v, dropout_p, is_causal, attn_mask=attn_bias, scale=scale)
    return (out, _fit_logsumexp(ctx, lse, 1)) + _seq_outputs(ctx, q, k)


@converts(aten._scaled_dot_product_cudnn_attention_backward.default)
def _sdpa_cudnn_backward(ctx: ConvertContext, go: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                         logsumexp: Tensor, philox_seed: Tensor, philox_offset: Tensor, attn_bias: Tensor | None,
                         cum_seq_q: Tensor, cum_seq_k: Tensor, max_q: Any, max_k: Any, dropout_p: float,
                         is_causal: bool, *, scale: Any = None) -> tuple[Tensor | None, ...]:
    return _backward(ctx, go, q, k, v, attn_bias, dropout_p, is_causal, scale)[:3]


__all__: list[str] = []
