"""Records for attention: ``scaled_dot_product_attention`` (its output and logsumexp) and its gradient op
``scaled_dot_product_attention_gradient``, against NumPy float64 oracles written from the definitions::

    S = q k^T * scale (+ mask | causal),  lse = log(sum(exp(S))),  out = exp(S - lse) v

with the conventions of PyTorch's attention: a query that keeps no key has a zero output row (and a -inf
logsumexp); the gradient is the explicit function of (gradient, q, k, v, mask, out, lse) the kernels compute.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops.attention import SCALED_DOT_PRODUCT_ATTENTION
from opgraph.ops.attention_grad import SCALED_DOT_PRODUCT_ATTENTION_GRADIENT

from .opinfo import ErrorCase, OpInfo, Sample, rand, to_numpy

BF16 = torch.bfloat16
F64 = np.float64


# ---- oracles -------------------------------------------------------------------------------------
def _f64(x: Any) -> np.ndarray:
    return np.asarray(to_numpy(x) if isinstance(x, torch.Tensor) else x).astype(F64)


def np_scores(q: Any, k: Any, mask: Any = None, scale: float | None = None, causal: bool = False) -> np.ndarray:
    q, k = _f64(q), _f64(k)
    sc = scale if scale is not None else 1.0 / np.sqrt(q.shape[-1])
    s = q @ np.swapaxes(k, -1, -2) * sc
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    if mask is not None:
        m = np.asarray(to_numpy(mask) if isinstance(mask, torch.Tensor) else mask)
        s = np.where(m, s, -np.inf) if m.dtype == np.bool_ else s + m.astype(F64)
    return s


def np_logsumexp(s: np.ndarray) -> np.ndarray:
    top = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(s - top).sum(-1)) + top[..., 0]  # log(0) = -inf: nothing kept


def _batch(*ts: np.ndarray) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*(t.shape[:-2] for t in ts)))


def np_attention(q: Any, k: Any, v: Any, *mask: Any, scale: float | None = None,
                 causal: bool = False) -> list[np.ndarray]:
    """[out, logsumexp] of the attention."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    s = np_scores(q, k, mask[0] if mask else None, scale, causal)
    lse = np_logsumexp(s)
    p = np.exp(s - np.where(lse == -np.inf, np.inf, lse)[..., None])
    batch = _batch(q, k, v)
    out = np.broadcast_to(p @ v, (*batch, q.shape[-2], v.shape[-1]))
    return [out, np.broadcast_to(lse, (*batch, q.shape[-2]))]


def _sum_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    x = x.sum(axis=tuple(range(x.ndim - len(shape))))
    return x.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True).reshape(shape)


def np_attention_gradient(go: Any, q: Any, k: Any, v: Any, *rest: Any, scale: float | None = None,
                          causal: bool = False, mask_gradient: bool = False) -> list[np.ndarray]:
    """[dq, dk, dv(, dmask)]: the explicit function of its inputs (see ops/attention_grad.py)."""
    go, q, k, v = (_f64(t) for t in (go, q, k, v))
    mask = rest[0] if len(rest) == 3 else None
    out, lse = _f64(rest[-2]), _f64(rest[-1])
    sc = scale if scale is not None else 1.0 / np.sqrt(q.shape[-1])
    s = np_scores(q, k, mask, scale, causal)
    p = np.exp(s - np.where(lse == -np.inf, np.inf, lse)[..., None])
    ds = p * (go @ np.swapaxes(v, -1, -2) - (go * out).sum(-1, keepdims=True))
    grads = [_sum_to(ds @ k * sc, q.shape), _sum_to(np.swapaxes(ds, -1, -2) @ q * sc, k.shape),
             _sum_to(np.swapaxes(p, -1, -2) @ go, v.shape)]
    if mask_gradient:
        grads.append(_sum_to(ds, np.shape(mask)))
    return grads


# ---- builders ------------------------------------------------------------------------------------
def _build(g: og.Graph, q: og.Tensor, k: og.Tensor, v: og.Tensor, *mask: og.Tensor, **kw: Any) -> list[og.Tensor]:
    return list(g.scaled_dot_product_attention_with_logsumexp(q, k, v, mask[0] if mask else None, **kw))


def _build_gradient(g: og.Graph, go: og.Tensor, q: og.Tensor, k: og.Tensor, v: og.Tensor, *rest: og.Tensor,
                    **kw: Any) -> list[og.Tensor]:
    mask = rest[0] if len(rest) == 3 else None
    return list(g.scaled_dot_product_attention_gradient(go, q, k, v, rest[-2], rest[-1], mask, **kw))


# ---- samples -------------------------------------------------------------------------------------
def _qkv(rng: np.random.Generator, q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...],
         dtype: Any = np.float32) -> list[Any]:
    return [rand(rng, q, dtype), rand(rng, k, dtype), rand(rng, v, dtype)]


def _masked_row(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> Any:
    m = rand(rng, shape, dtype)
    m[..., 1, :] = -np.inf  # query 1 keeps no key
    m[..., 2, :2] = -np.inf
    return m


def attention_samples(rng: np.random.Generator) -> list[Sample]:
    no_row = rng.random((4, 6)) < 0.7
    no_row[2] = False  # query 2 attends to nothing
    return [
        Sample(_qkv(rng, (2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8)), {}, "f32-plain"),
        Sample(_qkv(rng, (2, 4, 8), (2, 6, 8), (2, 6, 5), F64), {"scale": 0.3}, "f64-value-head-5-scale"),
        Sample([*_qkv(rng, (2, 5, 4), (2, 7, 4), (2, 7, 3), F64), rng.random((5, 7)) < 0.6], {}, "f64-bool-mask"),
        Sample([*_qkv(rng, (2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8)), rand(rng, (3, 1, 6))], {},
               "f32-float-mask-bcast"),
        Sample(_qkv(rng, (1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), F64), {"causal": True}, "f64-causal-fewer-queries"),
        Sample(_qkv(rng, (2, 6, 4), (2, 3, 4), (2, 3, 4)), {"causal": True, "scale": 0.5}, "f32-causal-more-queries"),
        Sample(_qkv(rng, (2, 3, 4, 8), (1, 3, 6, 8), (2, 1, 6, 8), F64), {"scale": 0.5}, "f64-broadcast-batch"),
        Sample(_qkv(rng, (4, 8), (6, 8), (6, 8)), {}, "f32-rank2"),
        Sample(_qkv(rng, (2, 2, 2, 3, 4), (2, 1, 2, 5, 4), (1, 2, 2, 5, 4)), {}, "f32-rank5"),
        Sample(_qkv(rng, (2, 2, 4, 16), (2, 2, 6, 16), (2, 2, 6, 16), BF16), {}, "bf16"),
        Sample(_qkv(rng, (2, 2, 4, 16), (2, 2, 6, 16), (2, 2, 6, 16), np.float16), {"causal": True}, "f16-causal"),
        Sample([*_qkv(rng, (2, 2, 4, 8), (2, 2, 6, 8), (2, 2, 6, 8), BF16), rng.random((2, 1, 4, 6)) < 0.6], {},
               "bf16-bool-mask"),
        Sample([*_qkv(rng, (3, 4, 8), (3, 6, 8), (3, 6, 8)), no_row], {}, "f32-bool-mask-empty-row"),
        Sample([*_qkv(rng, (2, 4, 4), (2, 6, 4), (2, 6, 4), F64), _masked_row(rng, (4, 6), F64)], {},
               "f64-float-mask-empty-row"),
        Sample(_qkv(rng, (2, 3, 4), (2, 0, 4), (2, 0, 5)), {}, "f32-no-keys"),
    ]


def attention_grad_samples(rng: np.random.Generator) -> list[Sample]:
    """The gradient checks take two: a float mask (its gradient too) over broadcast batches, and causality."""
    return [
        Sample([*_qkv(rng, (2, 3, 4, 4), (1, 3, 5, 4), (2, 1, 5, 3), F64), rand(rng, (3, 1, 5), F64)], {"scale": 0.6},
               "f64-float-mask-broadcast-batch"),
        Sample(_qkv(rng, (2, 5, 3), (2, 4, 3), (2, 4, 2), F64), {"causal": True}, "f64-causal-more-queries"),
    ]


def _gradient_sample(rng: np.random.Generator, ins: list[Any], kw: dict[str, Any], desc: str,
                     mask_gradient: bool = False) -> Sample:
    """(gradient, q, k, v, [mask,] out, lse) with out and lse the forward's, in the samples' dtypes."""
    fwd = {k: v for k, v in kw.items() if k != "mask_gradient"}
    out, lse = np_attention(*ins, **fwd)
    dt = ins[0].dtype
    go = rand(rng, out.shape, dt)
    if dt == BF16:
        out_t: Any = torch.from_numpy(np.ascontiguousarray(out, np.float32)).to(BF16)
        lse_t: Any = np.ascontiguousarray(lse, np.float32)
    else:
        out_t, lse_t = np.ascontiguousarray(out, dt), np.ascontiguousarray(lse, F64 if dt == F64 else np.float32)
    return Sample([go, *ins, out_t, lse_t], {**kw, "mask_gradient": mask_gradient}, desc)


def gradient_samples(rng: np.random.Generator) -> list[Sample]:
    no_row = rng.random((4, 6)) < 0.7
    no_row[1] = False
    return [
        _gradient_sample(rng, [*_qkv(rng, (2, 5, 4), (2, 7, 4), (2, 7, 3), F64), rng.random((5, 7)) < 0.6], {},
                         "f64-bool-mask"),
        _gradient_sample(rng, [*_qkv(rng, (2, 4, 4), (1, 6, 4), (2, 6, 3), F64), rand(rng, (4, 6), F64)],
                         {"scale": 0.4}, "f64-float-mask-gradient-bcast", True),
        _gradient_sample(rng, _qkv(rng, (2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8)), {}, "f32-plain"),
        _gradient_sample(rng, _qkv(rng, (2, 6, 4), (2, 3, 4), (2, 3, 4), F64), {"causal": True},
                         "f64-causal-more-queries"),
        _gradient_sample(rng, _qkv(rng, (2, 2, 4, 16), (2, 2, 6, 16), (2, 2, 6, 16), BF16), {"causal": True},
                         "bf16-causal"),
        _gradient_sample(rng, [*_qkv(rng, (3, 4, 8), (3, 6, 8), (3, 6, 8)), no_row], {}, "f32-bool-mask-empty-row"),
        _gradient_sample(rng, [*_qkv(rng, (2, 4, 4), (2, 6, 4), (2, 6, 4), F64), _masked_row(rng, (4, 6), F64)], {},
                         "f64-float-mask-empty-row", True),
        _gradient_sample(rng, _qkv(rng, (2, 2, 3, 4), (2, 1, 5, 4), (1, 2, 5, 6)), {"scale": 0.7},
                         "f32-broadcast-batch"),
    ]


# ---- errors --------------------------------------------------------------------------------------
def _ph(g: og.Graph, shape: tuple[int, ...], dtype: og.DType = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


def _sdpa(q: tuple[int, ...] = (2, 4, 8), k: tuple[int, ...] = (2, 6, 8), v: tuple[int, ...] = (2, 6, 8),
          dtype: og.DType = og.float32, mask: Any = None, **kw: Any) -> Any:
    def build(g: og.Graph) -> Any:
        m = None if mask is None else _ph(g, mask[0], mask[1])
        return g.scaled_dot_product_attention(_ph(g, q, dtype), _ph(g, k, dtype), _ph(g, v, dtype), m, **kw)

    return build


ERRORS = [
    ErrorCase(_sdpa(mask=((4, 6), og.bool_), causal=True), og.AttributeValueError,
              "scaled_dot_product_attention.*mutually exclusive", "mask-and-causal"),
    ErrorCase(_sdpa(k=(2, 6, 7)), og.ShapeError, "scaled_dot_product_attention.*head sizes differ", "head-sizes"),
    ErrorCase(_sdpa(v=(2, 5, 8)), og.ShapeError, "key and value lengths", "key-value-lengths"),
    ErrorCase(_sdpa(dtype=og.int32), og.DTypeError, "scaled_dot_product_attention.*int32", "int-inputs"),
    ErrorCase(lambda g: g.scaled_dot_product_attention(_ph(g, (8,)), _ph(g, (6, 8)), _ph(g, (6, 8))), og.ShapeError,
              "scaled_dot_product_attention.*rank >= 2", "rank1-query"),
    ErrorCase(lambda g: g.scaled_dot_product_attention(_ph(g, (4, 8)), _ph(g, (6, 8), og.float64), _ph(g, (6, 8))),
              og.DTypeError, "one dtype", "mixed-dtypes"),
    ErrorCase(_sdpa(q=(3, 4, 8)), og.ShapeError, "do not broadcast", "batch-dims"),
    ErrorCase(_sdpa(mask=((4, 6), og.float64)), og.DTypeError, "mask must be bool or the query's dtype", "mask-dtype"),
    ErrorCase(_sdpa(mask=((4, 5), og.bool_)), og.ShapeError, "mask of shape", "mask-shape"),
    ErrorCase(_sdpa(mask=((3, 2, 4, 6), og.float32)), og.ShapeError, "mask of shape", "mask-grows-batch"),
    ErrorCase(_sdpa(scale=True), og.AttributeValueError, "scale", "bool-scale"),
]


def _gradient_error(lse: tuple[tuple[int, ...], og.DType] = ((2, 4), og.float32), go: tuple[int, ...] = (2, 4, 8),
                    mask: Any = None, **kw: Any) -> Any:
    def build(g: og.Graph) -> Any:
        q, k, v = _ph(g, (2, 4, 8)), _ph(g, (2, 6, 8)), _ph(g, (2, 6, 8))
        m = None if mask is None else _ph(g, mask[0], mask[1])
        return g.scaled_dot_product_attention_gradient(_ph(g, go), q, k, v, _ph(g, (2, 4, 8)),
                                                       _ph(g, lse[0], lse[1]), m, **kw)

    return build


GRADIENT_ERRORS = [
    ErrorCase(_gradient_error(go=(2, 4, 7)), og.ShapeError, "incoming gradient has shape", "gradient-shape"),
    ErrorCase(_gradient_error(lse=((2, 4), og.float16)), og.DTypeError, "logsumexp must have dtype float32",
              "lse-dtype"),
    ErrorCase(_gradient_error(lse=((2, 5), og.float32)), og.ShapeError, "logsumexp has shape", "lse-shape"),
    ErrorCase(_gradient_error(mask=((4, 6), og.bool_), mask_gradient=True), og.AttributeValueError,
              "mask_gradient needs a float mask", "bool-mask-gradient"),
    ErrorCase(_gradient_error(mask=((4, 6), og.float32), causal=True), og.AttributeValueError,
              "scaled_dot_product_attention_gradient.*mutually exclusive", "mask-and-causal"),
]

# CUDA: the memory-efficient kernel's float32 and the kernels' 16-bit accumulation differ from the CPU's
GPU_TOL = {torch.float32: (1e-3, 1e-3), torch.float16: (5e-3, 5e-3), torch.bfloat16: (3e-2, 3e-2)}

RECORDS = [
    OpInfo("scaled_dot_product_attention", (SCALED_DOT_PRODUCT_ATTENTION,), _build, attention_samples, np_attention,
           errors=ERRORS, tol={torch.float16: (4e-3, 4e-3), torch.bfloat16: (2e-2, 2e-2)}, gpu_tol=GPU_TOL,
           grad_samples=attention_grad_samples),
    # the gradient checks differentiate the gradient op (its second-order rule) in all its inputs
    OpInfo("scaled_dot_product_attention_gradient", (SCALED_DOT_PRODUCT_ATTENTION_GRADIENT,), _build_gradient,
           gradient_samples, np_attention_gradient, errors=GRADIENT_ERRORS,
           tol={torch.float32: (1e-4, 1e-5), torch.bfloat16: (3e-2, 3e-2)}, gpu_tol=GPU_TOL),
]
