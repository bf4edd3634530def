"""Records for ops/vendor_layers.py (made by the torch frontend; built here directly from their attributes). The
encoder layer's oracle is its formula in NumPy float64: packed q/k/v projections split into heads, softmax attention,
the output projection, the feed-forward block, and the layer norms before (norm_first) or after each residual add."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops.vendor_layers import TRANSFORMER_ENCODER_LAYER, EncoderLayerAttrs

from .opinfo import ErrorCase, OpInfo, Sample, rand


def _build(g: og.Graph, *ins: og.Tensor, **kw: Any) -> og.Tensor:
    return g._apply(TRANSFORMER_ENCODER_LAYER, list(ins), EncoderLayerAttrs(**kw))


def np_encoder_layer(src: np.ndarray, *w: np.ndarray, num_heads: int, use_gelu: bool = False,
                     norm_first: bool = False, epsilon: float = 1e-5) -> np.ndarray:
    qkv_w, qkv_b, proj_w, proj_b, nw1, nb1, nw2, nb2, fw1, fb1, fw2, fb2 = (v.astype(np.float64) for v in w)
    x = src.astype(np.float64)
    b, length, e = x.shape
    dh = e // num_heads

    def norm(t: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
        return (t - t.mean(-1, keepdims=True)) / np.sqrt(t.var(-1, keepdims=True) + epsilon) * weight + bias

    def attention(t: np.ndarray) -> np.ndarray:
        q, k, v = np.split(t @ qkv_w.T + qkv_b, 3, axis=-1)
        q, k, v = (a.reshape(b, length, num_heads, dh).transpose(0, 2, 1, 3) for a in (q, k, v))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh)
        p = np.exp(s - s.max(-1, keepdims=True))
        o = (p / p.sum(-1, keepdims=True)) @ v
        return o.transpose(0, 2, 1, 3).reshape(b, length, e) @ proj_w.T + proj_b

    def ffn(t: np.ndarray) -> np.ndarray:
        h = t @ fw1.T + fb1
        h = 0.5 * h * (1.0 + np.vectorize(math.erf)(h / math.sqrt(2.0))) if use_gelu else np.maximum(h, 0.0)
        return h @ fw2.T + fb2

    if norm_first:
        x = x + attention(norm(x, nw1, nb1))
        return x + ffn(norm(x, nw2, nb2))
    x = norm(x + attention(x), nw1, nb1)
    return norm(x + ffn(x), nw2, nb2)


def _weights(rng: np.random.Generator, e: int, f: int, dt: Any) -> list[Any]:
    shapes = [(3 * e, e), (3 * e,), (e, e), (e,), (e,), (e,), (e,), (e,), (f, e), (f,), (e, f), (e,)]
    return [rand(rng, s, dt, low=-0.5, high=0.5) for s in shapes]


def _samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample([rand(rng, (2, 5, 8)), *_weights(rng, 8, 16, np.float32)], {"num_heads": 2}, "f32-post-norm-relu"),
        Sample([rand(rng, (3, 4, 6), np.float64), *_weights(rng, 6, 12, np.float64)],
               {"num_heads": 3, "use_gelu": True, "norm_first": True, "epsilon": 1e-6}, "f64-pre-norm-gelu"),
    ]


def _ph(g: og.Graph, shape: tuple[int, ...], dtype: og.DType = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


def _layer(g: og.Graph, e: int = 8, heads: int = 2, dtype: og.DType = og.float32, **kw: Any) -> og.Tensor:
    shapes = [(3 * e, e), (3 * e,), (e, e), (e,), (e,), (e,), (e,), (e,), (16, e), (16,), (e, 16), (e,)]
    return _build(g, _ph(g, (2, 5, 8), dtype), *(_ph(g, s) for s in shapes), num_heads=heads, **kw)


ERRORS = [
    ErrorCase(lambda g: _layer(g, e=6), og.ShapeError, "expects the weights of shapes", "weights-of-another-width"),
    ErrorCase(lambda g: _layer(g, heads=3), og.ShapeError, "divides into 3 heads", "heads"),
    ErrorCase(lambda g: _layer(g, dtype=og.float64), og.DTypeError, "one dtype", "mixed-dtypes"),
    ErrorCase(lambda g: _layer(g, epsilon=1), og.AttributeValueError, "epsilon a float", "epsilon"),
]

RECORDS = [
    OpInfo("transformer_encoder_layer", (TRANSFORMER_ENCODER_LAYER,), _build, _samples, np_encoder_layer,
           errors=ERRORS, tol={torch.float32: (1e-4, 1e-5)}),
]
