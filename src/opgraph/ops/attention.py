"""Attention: ``scaled_dot_product_attention`` (MPSGraph ``scaledDotProductAttention``)::

    out = softmax(query key^T * scale + mask) value

``query`` ``(..., L, E)``, ``key`` ``(..., S, E)``, ``value`` ``(..., S, Ev)``: the leading (batch, heads) dims
broadcast, the result is ``(..., L, Ev)``. ``mask`` broadcasts to ``(..., L, S)``: boolean (True: the query
attends to the key) or additive (the query's dtype; -inf drops a key). ``causal`` is the top-left lower
triangle (query i attends to keys j <= i), mutually exclusive with ``mask`` as in MPSGraph's descriptor.
``scale`` defaults to ``1 / sqrt(E)``. A query that attends to no key gives a row of zeros (as PyTorch's
``F.scaled_dot_product_attention``).

The op (``SCALED_DOT_PRODUCT_ATTENTION``) has a second output, the logsumexp of each query's scaled, masked
scores (float32; float64 for float64 inputs; -inf for a query that attends to nothing): the gradient op
(``ops/attention_grad.py``) reads it, as flash and memory-efficient attention do, instead of recomputing the
softmax. It lowers to PyTorch's fused attention kernels where they take the inputs, else to the math
(``ops/_attention_kernels.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ..core.dtype import FLOAT_DTYPES, DType, bool_, float32, float64
from ..core.errors import AttributeValueError, DTypeError, ShapeError
from ..core.shape import Shape, broadcast_shapes, format_shape
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.sources import READ, VARIABLE
from ._attention_kernels import attention_forward
from ._rules import expect_arity, expect_bool, expect_dtype, same_dtype
from .batch_norm_grad import is_zero
from .linalg import swap_last
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp


@attrs
class ScaledDotProductAttentionAttrs:
    """``scale`` (None: ``1 / sqrt(E)``), ``causal`` and whether a ``mask`` input follows query, key, value."""

    scale: float | None = None
    causal: bool = False
    has_mask: bool = False


# ---- type rule (shared with the gradient op) ------------------------------------------------------
def check_attrs(a: Any) -> None:
    s = a.scale
    if s is not None and (isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s)):
        raise AttributeValueError(f"scale must be a finite number or None, got {s!r}")
    expect_bool(a.causal, "causal")
    expect_bool(a.has_mask, "has_mask")
    if a.causal and a.has_mask:
        raise AttributeValueError("mask and causal are mutually exclusive (as in MPSGraph): put the causal "
                                  "triangle into the mask")


def lse_dtype(dt: DType) -> DType:
    """The logsumexp's dtype: float64 for float64 inputs, else float32."""
    return float64 if dt is float64 else float32


def _agree(a: int | None, b: int | None) -> bool:
    return a is None or b is None or a == b


def _fits(t: TensorType, target: Shape) -> bool:
    """``t`` broadcasts to ``target`` without growing it."""
    tail = target[len(target) - t.rank:]
    return t.rank <= len(target) and all(d == 1 or _agree(d, e) for d, e in zip(t.shape, tail, strict=True))


def attention_types(q: TensorType, k: TensorType, v: TensorType,
                    mask: TensorType | None) -> tuple[TensorType, TensorType]:
    """(out, logsumexp) types of query, key, value and an optional mask; raises on bad inputs."""
    for t, what in ((q, "query"), (k, "key"), (v, "value")):
        expect_dtype(t, FLOAT_DTYPES, what=what)
        if t.rank < 2:
            raise ShapeError(f"{what} must have rank >= 2 (..., length, head size), got rank {t.rank}")
    same_dtype((q, k, v), "query, key and value")
    if not _agree(q.shape[-1], k.shape[-1]):
        raise ShapeError(f"query and key head sizes differ: {q.shape[-1]} and {k.shape[-1]}")
    if not _agree(k.shape[-2], v.shape[-2]):
        raise ShapeError(f"key and value lengths differ: {k.shape[-2]} and {v.shape[-2]}")
    try:
        batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ShapeError:
        raise ShapeError(f"the leading (batch) dims of query {format_shape(q.shape)}, key {format_shape(k.shape)} "
                         f"and value {format_shape(v.shape)} do not broadcast") from None
    length, keys = q.shape[-2], k.shape[-2] if k.shape[-2] is not None else v.shape[-2]
    if mask is not None:
        if not (mask.dtype.is_bool or mask.dtype is q.dtype):
            raise DTypeError(f"mask must be bool or the query's dtype {q.dtype.name}, got {mask.dtype.name}")
        scores = (*batch, length, keys)
        if not _fits(mask, scores):
            raise ShapeError(f"mask of shape {format_shape(mask.shape)} does not broadcast to the scores' shape "
                             f"{format_shape(scores)}")
    return TensorType((*batch, length, v.shape[-1]), q.dtype), TensorType((*batch, length), lse_dtype(q.dtype))


def _rule(a: ScaledDotProductAttentionAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    check_attrs(a)
    expect_arity(ins, 4 if a.has_mask else 3)
    return attention_types(ins[0], ins[1], ins[2], ins[3] if a.has_mask else None)


def _lower(ctx: LowerContext) -> Callable[..., Any]:
    a: ScaledDotProductAttentionAttrs = ctx.attrs
    lse_dt = ctx.out_types[1].dtype.torch_dtype

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            *mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return attention_forward(q, k, v, mask[0] if mask else None, a.causal, a.scale, lse_dt)

    return run


SCALED_DOT_PRODUCT_ATTENTION = OpDef(
    "scaled_dot_product_attention", infer=_rule, lower=_lower, attrs=ScaledDotProductAttentionAttrs,
    fusion=FusionKind.OPAQUE,
    doc="(softmax(query key^T * scale + mask) value, logsumexp of each query's scores)")


# ---- graph forms, for the gradient rules ----------------------------------------------------------
def compute(g: Any, t: Tensor) -> Tensor:
    """16-bit floats take their gradient graphs in float32, as the kernels compute."""
    return g.cast(t, float32) if t.dtype.bits < 32 else t


def graph_scale(g: Any, q: Tensor, scale: float | None) -> float | Tensor:
    """The attention scale: the attribute, ``1 / sqrt(E)`` when static, else read from ``q``'s shape."""
    if scale is not None:
        return scale
    e = q.shape[-1]
    if e is not None:
        return 1.0 / math.sqrt(e) if e else 1.0
    size = g.gather(g.shape_of(q), g.constant(torch.tensor(q.rank - 1)))
    dim = g.cast(size, float32 if q.dtype.bits < 64 else float64)
    return g.select(g.equal(dim, 0.0), 1.0, g.rsqrt(dim))  # an empty head: 1, as the kernels take it


def graph_probs(g: Any, q: Tensor, k: Tensor, mask: Tensor | None, lse: Tensor, causal: bool,
                scale: float | Tensor) -> Tensor:
    """``exp(q k^T * scale + mask - lse)`` in the compute dtype: the attention probabilities when ``lse`` is
    the forward's (0 where a key is dropped; a -inf ``lse``, a query that keeps nothing, counts as +inf)."""
    qc, kc = compute(g, q), compute(g, k)
    s = g.multiply(g.matmul(qc, swap_last(g, kc)), scale)
    if causal:
        s = g.select(g.band_part(g.fill_like(s, True, bool_), -1, 0), s, -math.inf)
    if mask is not None:
        s = g.select(mask, s, -math.inf) if mask.dtype.is_bool else g.add(s, compute(g, mask))
    lse = g.cast(lse, s.dtype) if lse.dtype is not s.dtype else lse
    safe = g.select(g.equal(lse, -math.inf), math.inf, lse)
    return g.exp(g.subtract(s, g.expand_dims(safe, -1)))


@defvjp(SCALED_DOT_PRODUCT_ATTENTION)
def _vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    a: ScaledDotProductAttentionAttrs = op.attrs
    q, k, v, *rest = op.inputs
    mask = rest[0] if rest else None
    out, lse = op.outputs
    c_out, c_lse = ct
    grads = list(g.scaled_dot_product_attention_gradient(c_out, q, k, v, out, lse, mask, a.scale, a.causal,
                                                         mask_gradient=_mask_varies(mask)))
    if mask is not None and mask.dtype.is_floating and len(grads) == 3:
        # a separate op that compiling drops unless the mask's gradient is asked for
        grads.append(g.scaled_dot_product_attention_gradient(c_out, q, k, v, out, lse, mask, a.scale, a.causal,
                                                             mask_gradient=True)[3])
    if not is_zero(c_lse):  # d lse / d scores = the probabilities
        sc = graph_scale(g, q, a.scale)
        ds = g.multiply(graph_probs(g, q, k, mask, lse, a.causal, sc), g.expand_dims(compute(g, c_lse), -1))
        extra = [g.multiply(g.matmul(ds, compute(g, k)), sc), g.multiply(g.matmul(swap_last(g, ds), compute(g, q)), sc)]
        for i, (x, t) in enumerate(zip(extra, (q, k), strict=True)):
            grads[i] = g.add(compute(g, grads[i]), g.sum_to(x, t))
        if len(grads) == 4:
            grads[3] = g.add(compute(g, grads[3]), g.sum_to(ds, mask))
    return (*grads, None) if mask is not None and len(grads) == 3 else tuple(grads)


def _mask_varies(mask: Tensor | None) -> bool:
    """Whether a float mask is computed from a variable (a learned bias): its gradient is then built with
    the others; any other mask's gradient is a separate op, dropped unless asked for."""
    if mask is None or not mask.dtype.is_floating:
        return False
    seen: set[int] = set()
    todo = [mask.op]
    while todo:
        o = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if o.op in (VARIABLE, READ):
            return True
        todo.extend(t.op for t in o.inputs if t.dtype.is_floating)
    return False


# ---- builder methods -----------------------------------------------------------------------------
def as_scale(scale: Any, op: str = "scaled_dot_product_attention") -> float | None:
    """``scale`` as the attrs keep it; ``op`` names the builder in the error."""
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise AttributeValueError(f"{op}: scale must be a number or None, got {scale!r}")
    return float(scale)


class AttentionBuilders(GraphCore):
    """Graph methods for scaled dot-product attention."""

    def scaled_dot_product_attention(self, query: Tensor, key: Tensor, value: Tensor, mask: Any = None,
                                     scale: float | None = None, causal: bool = False, *,
                                     name: str | None = None) -> Tensor:
        """``softmax(query key^T * scale + mask) value`` (MPSGraph ``scaledDotProductAttention``).

        ``query`` ``(..., L, E)``, ``key`` ``(..., S, E)``, ``value`` ``(..., S, Ev)`` with broadcasting leading
        dims; the result is ``(..., L, Ev)``. ``mask`` broadcasts to ``(..., L, S)``: bool (True: attend) or
        additive in the query's dtype. ``causal``: query i attends to keys j <= i (not with a mask).
        ``scale`` defaults to ``1 / sqrt(E)``. A query attending to nothing gives zeros. Runs PyTorch's fused
        attention kernels where they apply.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); q = g.placeholder((2, 1)); k = g.placeholder((2, 1)); v = g.placeholder((2, 2))
        >>> y = g.scaled_dot_product_attention(q, k, v, causal=True)
        >>> g.run({q: torch.ones(2, 1), k: torch.zeros(2, 1), v: torch.tensor([[1.0, 2.0], [3.0, 4.0]])},
        ...       [y])[0].tolist()
        [[1.0, 2.0], [2.0, 3.0]]
        """
        return self.scaled_dot_product_attention_with_logsumexp(query, key, value, mask, scale, causal,
                                                                name=name)[0]

    def scaled_dot_product_attention_with_logsumexp(self, query: Tensor, key: Tensor, value: Tensor,
                                                    mask: Any = None, scale: float | None = None,
                                                    causal: bool = False, *,
                                                    name: str | None = None) -> tuple[Tensor, Tensor]:
        """``scaled_dot_product_attention`` and the logsumexp of each query's scaled, masked scores, shape
        ``(..., L)`` (float32; float64 for float64 inputs; -inf for a query attending to nothing), which
        ``scaled_dot_product_attention_gradient`` reads.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); q = g.placeholder((1, 1)); k = g.placeholder((2, 1)); v = g.placeholder((2, 1))
        >>> y, lse = g.scaled_dot_product_attention_with_logsumexp(q, k, v, scale=1.0)
        >>> [t.tolist() for t in g.run({q: torch.ones(1, 1), k: torch.zeros(2, 1), v: torch.ones(2, 1)}, [y, lse])]
        [[[1.0]], [0.6931471824645996]]
        """
        ins = [self._as_tensor(t) for t in (query, key, value)]
        if mask is not None:
            ins.append(self._as_tensor(mask))
        a = ScaledDotProductAttentionAttrs(as_scale(scale), causal, mask is not None)
        out, lse = self._apply_multi(SCALED_DOT_PRODUCT_ATTENTION, ins, a, name)
        return out, lse


__all__ = ["SCALED_DOT_PRODUCT_ATTENTION", "AttentionBuilders", "ScaledDotProductAttentionAttrs", "as_scale",
           "attention_types", "check_attrs", "compute", "graph_probs", "graph_scale", "lse_dtype"]
