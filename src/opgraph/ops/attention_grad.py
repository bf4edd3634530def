"""Op: ``scaled_dot_product_attention_gradient``, the gradient of ``scaled_dot_product_attention``
(``ops/attention.py``), as flash and memory-efficient attention compute it.

Inputs ``(gradient, query, key, value, [mask,] output, logsumexp)``: the incoming gradient of the output and
the forward's inputs and outputs. Outputs ``(dquery, dkey, dvalue[, dmask])``, ``dmask`` when
``mask_gradient`` (a float mask). Per (batch, head), with ``S = query key^T * scale + mask``::

    P = exp(S - logsumexp)        D = rowsum(gradient * output)
    dS = P * (gradient value^T - D)
    dquery = dS key * scale       dkey = dS^T query * scale       dvalue = P^T gradient       dmask = dS

summed over broadcast dims to each input's shape. This is the explicit function of all its inputs the kernels
compute; it equals the attention's gradient when ``output`` and ``logsumexp`` are the forward's. A -inf
logsumexp (a query that attends to nothing) counts as +inf: its row of ``P`` is 0. Its own VJP (second
order) is written out below with graph ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.errors import AttributeValueError, DTypeError
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ._attention_kernels import attention_backward
from ._padding import check_same_dims
from ._rules import expect_arity, expect_bool
from .attention import (
    as_scale,
    attention_types,
    check_attrs,
    compute,
    graph_probs,
    graph_scale,
)
from .linalg import swap_last
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp


@attrs
class ScaledDotProductAttentionGradientAttrs:
    """The forward's attributes, and whether the mask's gradient is an output."""

    scale: float | None = None
    causal: bool = False
    has_mask: bool = False
    mask_gradient: bool = False


def _split(has_mask: bool, ins: tuple[Any, ...]) -> tuple[Any, Any, Any, Any, Any, Any, Any]:
    """(gradient, query, key, value, mask or None, output, logsumexp)."""
    go, q, k, v = ins[:4]
    return go, q, k, v, ins[4] if has_mask else None, ins[-2], ins[-1]


def _rule(a: ScaledDotProductAttentionGradientAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    check_attrs(a)
    expect_bool(a.mask_gradient, "mask_gradient")
    expect_arity(ins, 7 if a.has_mask else 6)
    go, q, k, v, mask, out, lse = _split(a.has_mask, ins)
    want_out, want_lse = attention_types(q, k, v, mask)
    if a.mask_gradient and (mask is None or mask.dtype.is_bool):
        raise AttributeValueError("mask_gradient needs a float mask")
    for t, want, what in ((go, want_out, "the incoming gradient"), (out, want_out, "output"),
                          (lse, want_lse, "logsumexp")):
        if t.dtype is not want.dtype:
            raise DTypeError(f"{what} must have dtype {want.dtype.name}, got {t.dtype.name}")
        check_same_dims(t.shape, want.shape, what)
    return (q, k, v, mask) if a.mask_gradient else (q, k, v)


def _lower(ctx: LowerContext) -> Callable[..., Any]:
    a: ScaledDotProductAttentionGradientAttrs = ctx.attrs

    def run(*ins: torch.Tensor) -> tuple[torch.Tensor, ...]:
        go, q, k, v, mask, out, lse = _split(a.has_mask, ins)
        return attention_backward(go, q, k, v, mask, out, lse, a.causal, a.scale, a.mask_gradient)

    return run


SCALED_DOT_PRODUCT_ATTENTION_GRADIENT = OpDef(
    "scaled_dot_product_attention_gradient", infer=_rule, lower=_lower,
    attrs=ScaledDotProductAttentionGradientAttrs, fusion=FusionKind.OPAQUE,
    doc="(dquery, dkey, dvalue[, dmask]) of scaled_dot_product_attention from its output and logsumexp")


@defvjp(SCALED_DOT_PRODUCT_ATTENTION_GRADIENT)
def _gradient_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    # L = <A, dQ> + <B, dK> + <C, dV> + <Z, dS>. With W = scale (A K^T + Q B^T) + Z, R = P W, r = rowsum(R),
    # H = W (dP - D) + G C^T and T = P H (dP = G V^T, the incoming gradient G):
    #   dG = R V - r O + P C, dQ = scale (dS B + T K), dK = scale (dS^T A + T^T Q), dV = R^T G,
    #   dmask = T, dO = -r G, dlse = -rowsum(T).
    # Every term is built even where a cotangent is zero: jvp transposes this rule with zero stand-ins.
    a: ScaledDotProductAttentionGradientAttrs = op.attrs
    go, q, k, v, mask, out, lse = _split(a.has_mask, op.inputs)
    sc = graph_scale(g, q, a.scale)
    gc, qc, kc, vc, oc = (compute(g, t) for t in (go, q, k, v, out))
    ca, cb, cc = (compute(g, t) for t in ct[:3])
    p = graph_probs(g, q, k, mask, lse, a.causal, sc)
    dp_d = g.subtract(g.matmul(gc, swap_last(g, vc)), g.reduce_sum(g.multiply(gc, oc), -1, keepdims=True))
    ds = g.multiply(p, dp_d)
    w = g.multiply(g.add(g.matmul(ca, swap_last(g, kc)), g.matmul(qc, swap_last(g, cb))), sc)
    if a.mask_gradient:
        w = g.add(w, compute(g, ct[3]))
    r_full = g.multiply(p, w)
    r = g.reduce_sum(r_full, -1, keepdims=True)
    t = g.multiply(p, g.add(g.multiply(w, dp_d), g.matmul(gc, swap_last(g, cc))))
    d_go = g.add(g.subtract(g.matmul(r_full, vc), g.multiply(r, oc)), g.matmul(p, cc))
    d_q = g.multiply(g.add(g.matmul(ds, cb), g.matmul(t, kc)), sc)
    d_k = g.multiply(g.add(g.matmul(swap_last(g, ds), ca), g.matmul(swap_last(g, t), qc)), sc)
    d_v = g.matmul(swap_last(g, r_full), gc)
    grads: list[Tensor | None] = [g.sum_to(x, like) for x, like in ((d_go, go), (d_q, q), (d_k, k), (d_v, v))]
    if mask is not None:
        grads.append(g.sum_to(t, mask) if mask.dtype.is_floating else None)
    grads += [g.sum_to(g.negative(g.multiply(r, gc)), out), g.sum_to(g.negative(g.reduce_sum(t, -1)), lse)]
    return tuple(grads)


# ---- builder methods -----------------------------------------------------------------------------
class AttentionGradientBuilders(GraphCore):
    """Graph method for the gradient of scaled dot-product attention."""

    def scaled_dot_product_attention_gradient(self, gradient: Tensor, query: Tensor, key: Tensor, value: Tensor,
                                              output: Tensor, logsumexp: Tensor, mask: Any = None,
                                              scale: float | None = None, causal: bool = False, *,
                                              mask_gradient: bool = False,
                                              name: str | None = None) -> tuple[Tensor, ...]:
        """``(dquery, dkey, dvalue)`` of ``scaled_dot_product_attention(query, key, value, mask, scale,
        causal)`` given the gradient of its result, and the ``output`` and ``logsumexp`` that
        ``scaled_dot_product_attention_with_logsumexp`` returned; ``mask_gradient`` adds ``dmask`` (a float
        mask's gradient, summed to its shape).

        >>> import opgraph as og
        >>> g = og.Graph(); q, k, v = g.constant([[1.0]]), g.constant([[0.0], [0.0]]), g.constant([[1.0], [3.0]])
        >>> y, lse = g.scaled_dot_product_attention_with_logsumexp(q, k, v, scale=1.0)
        >>> dq, dk, dv = g.scaled_dot_product_attention_gradient(g.constant([[1.0]]), q, k, v, y, lse, scale=1.0)
        >>> [t.tolist() for t in g.run({}, [dq, dk, dv])]
        [[[0.0]], [[-0.5], [0.5]], [[0.5], [0.5]]]
        """
        ins = [self._as_tensor(t) for t in (gradient, query, key, value)]
        if mask is not None:
            ins.append(self._as_tensor(mask))
        ins += [self._as_tensor(output), self._as_tensor(logsumexp)]
        scale = as_scale(scale, "scaled_dot_product_attention_gradient")
        a = ScaledDotProductAttentionGradientAttrs(scale, causal, mask is not None, mask_gradient)
        return self._apply_multi(SCALED_DOT_PRODUCT_ATTENTION_GRADIENT, ins, a, name)


__all__ = ["SCALED_DOT_PRODUCT_ATTENTION_GRADIENT", "AttentionGradientBuilders",
           "ScaledDotProductAttentionGradientAttrs"]
