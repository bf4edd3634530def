"""Converters of PyTorch's attention ops: ``scaled_dot_product_attention`` itself (as ``torch.export`` leaves it),
the CPU flash kernel and the CUDA ones (flash, memory-efficient, cuDNN) that it becomes when AOTAutograd traces
it, forward and backward, opgraph's own ``opgraph::attention`` and its backward (what the backend turns
Dynamo's calls of ``F.scaled_dot_product_attention`` into, ``../custom_ops.py``), and
``nn.TransformerEncoderLayer``'s inference fast path.

All build opgraph's fused ``scaled_dot_product_attention`` (its logsumexp shaped as each kernel returns it, 0 for
a query that attends to nothing, as the kernels give it) and ``scaled_dot_product_attention_gradient``, which reads
the traced logsumexp (recomputed in float64 for float64 inputs, whose kernels return it in float32). A mask given
with ``is_causal`` (the CPU and memory-efficient kernels take both) becomes one mask. The kernels' bookkeeping
outputs (random-number state, sequence offsets, debug masks) are zeros of their traced types; dropout inside
attention runs as the ATen op (no random ops yet).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ....core.errors import ShapeError
from ....core.shape import broadcast_shapes
from ....ir.graph import Tensor
from ....ops.attention import lse_dtype
from ....ops.vendor_layers import TRANSFORMER_ENCODER_LAYER, EncoderLayerAttrs
from ..custom_ops import ATTENTION, ATTENTION_BACKWARD
from ..registry import ConvertContext, Unsupported, converts
from .nn import _cast, _floating, _static, _traced_zeros, _want

aten = torch.ops.aten


def _check_attention(q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> None:
    _floating(q, k, v)
    if dropout_p:
        raise Unsupported("attention dropout (opgraph has no random ops yet)")
    if not (q.dtype is k.dtype and k.dtype is v.dtype) or min(q.rank, k.rank, v.rank) < 2:
        raise Unsupported("attention over inputs of different dtypes or of rank < 2")
    try:
        broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ShapeError:
        raise Unsupported("attention with grouped key/value heads") from None


def _scale(scale: Any) -> float | None:
    return None if scale is None else float(scale)


class _Mask:
    """An ATen attention mask as the op takes it (bool, or the query's dtype), with the top-left causal triangle
    folded in when ``is_causal`` comes with it; ``grad`` takes the folded mask's gradient back to the original."""

    def __init__(self, ctx: ConvertContext, q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool) -> None:
        g = ctx.g
        self.ctx, self.original, self.causal, self.tri = ctx, mask, bool(is_causal), None
        self.mask = mask if mask is None or mask.dtype.is_bool else _cast(ctx, mask, q.dtype)
        if self.mask is not None and self.causal:
            rows, cols = _static(q.shape[-2:-1] + k.shape[-2:-1], "a causal attention mask")
            self.tri = tri = g.constant(torch.ones(rows, cols, dtype=torch.bool).tril())
            m = self.mask
            self.mask = g.logical_and(m, tri) if m.dtype.is_bool else g.select(tri, m, -math.inf)
            self.causal = False

    @property
    def floating(self) -> bool:
        return self.mask is not None and self.mask.dtype.is_floating

    def grad(self, dm: Tensor) -> Tensor:
        g, original = self.ctx.g, self.original
        assert original is not None
        if self.tri is not None:
            dm = g.sum_to(g.select(self.tri, dm, 0.0), original)
        return _cast(self.ctx, dm, original.dtype)


def _forward(ctx: ConvertContext, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
             is_causal: bool, scale: Any, *, kept_nothing: float = 0.0) -> tuple[Tensor, Tensor]:
    """(output, logsumexp per query in the op's dtype; ``kept_nothing`` for a query with nothing kept: PyTorch's
    kernels give 0, the op -inf)."""
    g = ctx.g
    _check_attention(q, k, v, dropout_p)
    m = _Mask(ctx, q, k, mask, is_causal)
    out, lse = g.scaled_dot_product_attention_with_logsumexp(q, k, v, m.mask, _scale(scale), m.causal)
    if m.mask is not None and kept_nothing != -math.inf:
        lse = g.select(g.equal(lse, -math.inf), kept_nothing, lse)
    return out, lse


def _backward(ctx: ConvertContext, go: Tensor, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, out: Tensor,
              logsumexp: Tensor, dropout_p: float, is_causal: bool, scale: Any, mask_grad: bool = False,
              cudnn: bool = False) -> tuple[Tensor | None, ...]:
    """(dq, dk, dv, gradient of the mask or None) from the kernel's output and logsumexp."""
    g = ctx.g
    _floating(go)
    _check_attention(q, k, v, dropout_p)
    m = _Mask(ctx, q, k, mask, is_causal)
    if mask_grad and not m.floating:
        raise Unsupported("the gradient of a boolean attention mask")
    lse, sc = _unfit_logsumexp(ctx, logsumexp, q, cudnn), _scale(scale)
    # recomputed where it is no logsumexp or, for float64 inputs, a float32 one (not precise enough)
    if lse is None or logsumexp.dtype is not lse.dtype:
        out, lse = g.scaled_dot_product_attention_with_logsumexp(q, k, v, m.mask, sc, m.causal)
    grads = g.scaled_dot_product_attention_gradient(go, q, k, v, out, lse, m.mask, sc, m.causal,
                                                    mask_gradient=mask_grad)
    return (*grads[:3], m.grad(grads[3]) if mask_grad else None)


def _unfit_logsumexp(ctx: ConvertContext, lse: Tensor, q: Tensor, trailing_one: bool) -> Tensor | None:
    """A kernel's logsumexp as the op's: (..., queries), without the padding (or cuDNN's trailing 1), in its
    dtype; None when it is not one (core ATen's decomposition of the CPU kernel returns the probabilities)."""
    g = ctx.g
    if trailing_one and lse.rank == q.rank and lse.shape[-1] == 1:
        lse = g.squeeze(lse, -1)
    length, have = q.shape[-2], lse.shape[-1] if lse.rank else None
    if lse.rank != q.rank - 1 or lse.shape[:-1] != q.shape[:-2] or have is None or length is None or have < length:
        return None
    return _cast(ctx, lse[..., :length] if have != length else lse, lse_dtype(q.dtype))


@converts(aten.scaled_dot_product_attention.default)
def _sdpa(ctx: ConvertContext, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
          dropout_p: float = 0.0, is_causal: bool = False, *, scale: Any = None, enable_gqa: bool = False) -> Tensor:
    if attn_mask is not None and is_causal:
        raise Unsupported("attn_mask with is_causal (PyTorch rejects it)")
    _check_attention(q, k, v, dropout_p)
    m = _Mask(ctx, q, k, attn_mask, is_causal)
    return ctx.g.scaled_dot_product_attention(q, k, v, m.mask, _scale(scale), m.causal)


@converts(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa_flash_cpu(ctx: ConvertContext, q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0,
                    is_causal: bool = False, *, attn_mask: Tensor | None = None,
                    scale: Any = None) -> tuple[Tensor, Tensor]:
    """(output, logsumexp per query in float32, float64 for float64 inputs)."""
    out, lse = _forward(ctx, q, k, v, attn_mask, dropout_p, is_causal, scale)
    return out, _cast(ctx, lse, _want(ctx, 1, lse.dtype))


@converts(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _sdpa_flash_cpu_backward(ctx: ConvertContext, go: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                             logsumexp: Tensor, dropout_p: float, is_causal: bool, *, attn_mask: Tensor | None = None,
                             scale: Any = None) -> tuple[Tensor | None, ...]:
    return _backward(ctx, go, q, k, v, attn_mask, out, logsumexp, dropout_p, is_causal, scale)[:3]


@converts(ATTENTION)
def _opgraph_attention(ctx: ConvertContext, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None,
                       is_causal: bool, scale: Any) -> tuple[Tensor, Tensor]:
    """(output, logsumexp; -inf for a query with nothing kept, as the op's convention); a float mask cast to the
    query's dtype."""
    return _forward(ctx, q, k, v, attn_mask, 0.0, is_causal, scale, kept_nothing=-math.inf)


@converts(ATTENTION_BACKWARD)
def _opgraph_attention_backward(ctx: ConvertContext, go: Tensor, q: Tensor, k: Tensor, v: Tensor,
                                attn_mask: Tensor | None, out: Tensor, logsumexp: Tensor, is_causal: bool, scale: Any,
                                mask_grad: bool) -> tuple[Tensor | None, ...]:
    """(dquery, dkey, dvalue, dmask): the mask's gradient in its dtype when asked for and float, else the op's
    empty tensor."""
    wanted = bool(mask_grad) and attn_mask is not None and attn_mask.dtype.is_floating
    grads = _backward(ctx, go, q, k, v, attn_mask, out, logsumexp, 0.0, is_causal, scale, mask_grad=wanted)
    return (*grads[:3], grads[3] if wanted else _traced_zeros(ctx, 3))


@converts(aten._transformer_encoder_layer_fwd.default)
def _encoder_layer(ctx: ConvertContext, src: Tensor, embed_dim: int, num_heads: int, qkv_weight: Tensor,
                   qkv_bias: Tensor, proj_weight: Tensor, proj_bias: Tensor, use_gelu: bool, norm_first: bool,
                   eps: float, norm_weight_1: Tensor, norm_bias_1: Tensor, norm_weight_2: Tensor, norm_bias_2: Tensor,
                   ffn_weight_1: Tensor, ffn_bias_1: Tensor, ffn_weight_2: Tensor, ffn_bias_2: Tensor,
                   mask: Tensor | None = None, mask_type: int | None = None) -> Tensor:
    """``nn.TransformerEncoderLayer``'s inference fast path (batch first), as its slow path computes it; where no
    kernels are generated, PyTorch's one call (``ops/vendor_layers.py``)."""
    g = ctx.g
    _floating(src)
    if mask is not None:
        raise Unsupported("a masked encoder-layer fast path")
    if src.rank != 3:
        raise Unsupported(f"an encoder layer on a rank-{src.rank} input")
    weights = [qkv_weight, qkv_bias, proj_weight, proj_bias, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
               ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2]
    if ctx.vendor_ops and all(isinstance(t, Tensor) and t.dtype is src.dtype for t in weights):
        return g._apply(TRANSFORMER_ENCODER_LAYER, [src, *weights],
                        EncoderLayerAttrs(int(num_heads), bool(use_gelu), bool(norm_first), float(eps)))
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
        o = g.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
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


@converts(aten._scaled_dot_product_efficient_attention.default)
def _sdpa_efficient(ctx: ConvertContext, q: Tensor, k: Tensor, v: Tensor, attn_bias: Tensor | None,
                    compute_log_sumexp: bool, dropout_p: float = 0.0, is_causal: bool = False, *,
                    scale: Any = None) -> tuple[Tensor | None, ...]:
    """(output, logsumexp padded to 32 queries, philox seed, philox offset)."""
    out, lse = _forward(ctx, q, k, v, attn_bias, dropout_p, is_causal, scale)
    return out, _fit_logsumexp(ctx, lse, 1), _traced_zeros(ctx, 2), _traced_zeros(ctx, 3)


@converts(aten._scaled_dot_product_efficient_attention_backward.default)
def _sdpa_efficient_backward(ctx: ConvertContext, go: Tensor, q: Tensor, k: Tensor, v: Tensor,
                             attn_bias: Tensor | None, out: Tensor, logsumexp: Tensor, philox_seed: Tensor,
                             philox_offset: Tensor, dropout_p: float, grad_input_mask: Any,
                             is_causal: bool = False, *, scale: Any = None) -> tuple[Tensor | None, ...]:
    traced = len(ctx.out_types) > 3 and ctx.out_types[3] is not None  # the bias gradient, when asked for
    wanted = traced and attn_bias is not None and len(grad_input_mask) > 3 and bool(grad_input_mask[3])
    return _backward(ctx, go, q, k, v, attn_bias, out, logsumexp, dropout_p, is_causal, scale, mask_grad=wanted)


def _seq_outputs(ctx: ConvertContext, q: Tensor, k: Tensor) -> tuple[Any, ...]:
    """(cum_seq_q, cum_seq_k, max_q, max_k, rng state, unused, debug mask) of the flash and cuDNN kernels."""
    max_q, max_k = _static(q.shape[-2:-1] + k.shape[-2:-1], "the attention sequence lengths")
    return (_traced_zeros(ctx, 2), _traced_zeros(ctx, 3), max_q, max_k, _traced_zeros(ctx, 6),
            _traced_zeros(ctx, 7), _traced_zeros(ctx, 8))


@converts(aten._scaled_dot_product_flash_attention.default)
def _sdpa_flash(ctx: ConvertContext, q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0,
                is_causal: bool = False, return_debug_mask: bool = False, *, scale: Any = None) -> tuple[Any, ...]:
    _top_left_causal(q, k, is_causal)
    out, lse = _forward(ctx, q, k, v, None, dropout_p, is_causal, scale)
    return (out, _fit_logsumexp(ctx, lse, 1)) + _seq_outputs(ctx, q, k)


@converts(aten._scaled_dot_product_flash_attention_backward.default)
def _sdpa_flash_backward(ctx: ConvertContext, go: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                         logsumexp: Tensor, cum_seq_q: Tensor, cum_seq_k: Tensor, max_q: Any, max_k: Any,
                         dropout_p: float, is_causal: bool, philox_seed: Tensor, philox_offset: Tensor, *,
                         scale: Any = None) -> tuple[Tensor | None, ...]:
    _top_left_causal(q, k, is_causal)
    return _backward(ctx, go, q, k, v, None, out, logsumexp, dropout_p, is_causal, scale)[:3]


def _top_left_causal(q: Tensor, k: Tensor, is_causal: bool) -> None:
    """The flash kernel aligns a causal mask bottom-right when queries and keys differ in number (PyTorch's
    dispatcher never picks it then); the converters' mask is top-left."""
    if is_causal and q.shape[-2] != k.shape[-2]:
        raise Unsupported("a causal flash attention with different query and key lengths")


@converts(aten._scaled_dot_product_cudnn_attention.default)
def _sdpa_cudnn(ctx: ConvertContext, q: Tensor, k: Tensor, v: Tensor, attn_bias: Tensor | None,
                compute_log_sumexp: bool, dropout_p: float = 0.0, is_causal: bool = False,
                return_debug_mask: bool = False, *, scale: Any = None) -> tuple[Any, ...]:
    out, lse = _forward(ctx, q, k, v, attn_bias, dropout_p, is_causal, scale)
    return (out, _fit_logsumexp(ctx, lse, 1)) + _seq_outputs(ctx, q, k)


@converts(aten._scaled_dot_product_cudnn_attention_backward.default)
def _sdpa_cudnn_backward(ctx: ConvertContext, go: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                         logsumexp: Tensor, philox_seed: Tensor, philox_offset: Tensor, attn_bias: Tensor | None,
                         cum_seq_q: Tensor, cum_seq_k: Tensor, max_q: Any, max_k: Any, dropout_p: float,
                         is_causal: bool, *, scale: Any = None) -> tuple[Tensor | None, ...]:
    return _backward(ctx, go, q, k, v, attn_bias, out, logsumexp, dropout_p, is_causal, scale, cudnn=True)[:3]


__all__: list[str] = []
