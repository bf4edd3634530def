"""Whole layers as PyTorch's one fused call, for where no kernels are generated (the CPU). The torch frontend makes
them when ``ConvertContext.vendor_ops`` is set, from ATen ops that are such a layer already; elsewhere their
converters spell them with opgraph's ops, which fuse.

* ``transformer_encoder_layer(src, 12 weights)``: ``nn.TransformerEncoderLayer``'s inference fast path, batch
  first, without a mask (PyTorch's ``_transformer_encoder_layer_fwd``): self-attention over ``num_heads`` heads with
  the packed (3E, E) input projection and the output projection, the feed-forward block (GELU or ReLU), and the two
  layer norms before each block (``norm_first``) or after each residual add. Spelled as ops on the CPU it is ~35
  calls against eager's one. Off the CPU a GELU layer runs as PyTorch's separate calls: CUDA's fused call
  approximates the GELU.

The weights follow the ATen op's order: ``qkv_weight (3E, E), qkv_bias (3E,), proj_weight (E, E), proj_bias (E,),
norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2 (E,), ffn_weight_1 (F, E), ffn_bias_1 (F,),
ffn_weight_2 (E, F), ffn_bias_2 (E,)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..core.dtype import FLOAT_DTYPES
from ..core.errors import AttributeValueError, ShapeError
from ..core.types import TensorType
from ._rules import expect_arity, expect_dtype, same_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs


@attrs
class EncoderLayerAttrs:
    num_heads: int
    use_gelu: bool = False
    norm_first: bool = False
    epsilon: float = 1e-5


def _weight_shapes(e: int | None, f: int | None) -> list[tuple[int | None, ...]]:
    three = None if e is None else 3 * e
    return [(three, e), (three,), (e, e), (e,), (e,), (e,), (e,), (e,), (f, e), (f,), (e, f), (e,)]


def _encoder_rule(a: EncoderLayerAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    if isinstance(a.num_heads, bool) or not isinstance(a.num_heads, int) or a.num_heads < 1 \
            or not isinstance(a.use_gelu, bool) or not isinstance(a.norm_first, bool) \
            or isinstance(a.epsilon, bool) or not isinstance(a.epsilon, float) or not a.epsilon >= 0:
        raise AttributeValueError(f"num_heads must be an int >= 1, use_gelu and norm_first bools and epsilon a float "
                                  f">= 0, got {a.num_heads!r}, {a.use_gelu!r}, {a.norm_first!r}, {a.epsilon!r}")
    expect_arity(ins, 13)
    same_dtype(ins)
    for t in ins:
        expect_dtype(t, FLOAT_DTYPES)
    src, *weights = ins
    e, f = src.shape[-1] if src.rank == 3 else None, weights[8].shape[0] if weights[8].rank == 2 else None
    if src.rank != 3 or (e is not None and e % a.num_heads):
        raise ShapeError(f"expects a (batch, length, embed) input whose width divides into {a.num_heads} heads, "
                         f"got {src}")
    for t, want in zip(weights, _weight_shapes(e, f), strict=True):
        if t.rank != len(want) or any(m is not None and n is not None and m != n for m, n in zip(t.shape, want,
                                                                                             strict=True)):
            raise ShapeError(f"expects the weights of shapes {_weight_shapes(e, f)} (E={e}, F={f}), got "
                             f"{[w.shape for w in weights]}")
    return src


def _spelled_out(a: EncoderLayerAttrs, src: torch.Tensor, w: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The layer as PyTorch's separate calls, with an exact GELU."""
    qkv_w, qkv_b, proj_w, proj_b, n1_w, n1_b, n2_w, n2_b, f1_w, f1_b, f2_w, f2_b = w
    x, e, heads = src, src.shape[-1], a.num_heads

    def attention(t: torch.Tensor) -> torch.Tensor:
        q, k, v = F.linear(t, qkv_w, qkv_b).unflatten(-1, (3, heads, e // heads)).permute(2, 0, 3, 1, 4)
        return F.linear(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(-2), proj_w, proj_b)

    def ffn(t: torch.Tensor) -> torch.Tensor:
        h = F.linear(t, f1_w, f1_b)
        return F.linear(F.gelu(h) if a.use_gelu else F.relu(h), f2_w, f2_b)

    def norm(t: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(t, (e,), weight, bias, a.epsilon)

    if a.norm_first:
        x = x + attention(norm(x, n1_w, n1_b))
        return x + ffn(norm(x, n2_w, n2_b))
    x = norm(x + attention(x), n1_w, n1_b)
    return norm(x + ffn(x), n2_w, n2_b)


def _encoder_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: EncoderLayerAttrs = ctx.attrs

    def run(src: torch.Tensor, *w: torch.Tensor) -> torch.Tensor:
        if a.use_gelu and src.device.type != "cpu":
            # CUDA's fused call was 2e-3 off the float64 oracle with a GELU: its FFN takes the GELU from
            # _addmm_activation, which CUDA can leave to cuBLASLt's (tanh-approximated) epilogue
            return _spelled_out(a, src, w)
        return torch._transformer_encoder_layer_fwd(src, src.shape[-1], a.num_heads, w[0], w[1], w[2], w[3],
                                                    a.use_gelu, a.norm_first, a.epsilon, w[4], w[5], w[6], w[7],
                                                    w[8], w[9], w[10], w[11], None, None)

    return run


TRANSFORMER_ENCODER_LAYER = OpDef(
    "transformer_encoder_layer", infer=_encoder_rule, lower=_encoder_lower, attrs=EncoderLayerAttrs,
    fusion=FusionKind.OPAQUE, differentiable=False,
    doc="nn.TransformerEncoderLayer's inference fast path (batch first, no mask) as PyTorch's one call")

__all__ = ["TRANSFORMER_ENCODER_LAYER", "EncoderLayerAttrs"]
