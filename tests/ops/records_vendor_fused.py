"""Records for the ops of ops/vendor_fused.py (made by the compiler; built here directly from their attributes).
conv2d_bias's oracle is a direct convolution in NumPy float64 (every kernel tap's strided window of the padded
input, contracted per group), conv2d_gradients' the same windows contracted with the incoming gradient;
batch_norm_inference's the formula in float64, batch_norm_backward's, batch_norm_update's and the layer norms'
too; threshold_gradient's ``np.where``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops.vendor_fused import (
    BATCH_NORM_BACKWARD,
    BATCH_NORM_INFERENCE,
    BATCH_NORM_UPDATE,
    CONV2D_BIAS,
    CONV2D_GRADIENTS,
    LAYER_NORM_BACKWARD,
    LAYER_NORM_FORWARD,
    THRESHOLD_GRADIENT,
    BatchNormBackwardAttrs,
    BatchNormInferenceAttrs,
    BatchNormUpdateAttrs,
    ConvBiasAttrs,
    ConvGradientsAttrs,
    LayerNormVendorAttrs,
    ThresholdGradientAttrs,
)

from .opinfo import ErrorCase, OpInfo, Sample, rand


def _build(g: og.Graph, x: og.Tensor, w: og.Tensor, b: og.Tensor, **kw: Any) -> og.Tensor:
    return g._apply(CONV2D_BIAS, [x, w, b], ConvBiasAttrs(**kw))


def np_conv_bias(x: np.ndarray, w: np.ndarray, b: np.ndarray, strides: tuple[int, int] = (1, 1),
                 dilation_rates: tuple[int, int] = (1, 1), padding_top: int = 0, padding_bottom: int = 0,
                 padding_left: int = 0, padding_right: int = 0, groups: int = 1) -> np.ndarray:
    x, w = x.astype(np.float64), w.astype(np.float64)
    (n, _, h, wd), (o, cg, kh, kw) = x.shape, w.shape
    (sh, sw), (dh, dw) = strides, dilation_rates
    xp = np.pad(x, ((0, 0), (0, 0), (padding_top, padding_bottom), (padding_left, padding_right)))
    oh = (h + padding_top + padding_bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + padding_left + padding_right - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    per = o // groups
    for gi in range(groups):
        xs, ws = xp[:, gi * cg:(gi + 1) * cg], w[gi * per:(gi + 1) * per]
        for i in range(kh):
            for j in range(kw):
                window = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, gi * per:(gi + 1) * per] += np.einsum("nchw,oc->nohw", window, ws[:, :, i, j])
    return out + b.astype(np.float64)[None, :, None, None]


_PAD1 = dict(padding_top=1, padding_bottom=1, padding_left=1, padding_right=1)
# (x shape, w shape, dtype, description, descriptor fields): conv2d_bias's and conv2d_gradients' geometries
GEOMETRIES: list[tuple[tuple[int, ...], tuple[int, ...], Any, str, dict[str, Any]]] = [
    ((2, 3, 6, 5), (4, 3, 3, 3), np.float32, "f32-3x3-pad1", _PAD1),
    ((1, 4, 9, 8), (6, 4, 3, 2), np.float32, "f32-stride2-dilation2", dict(strides=(2, 2), dilation_rates=(2, 1))),
    ((2, 4, 5, 5), (6, 2, 3, 3), np.float64, "f64-groups2-pad",
     dict(padding_top=1, padding_bottom=1, padding_left=2, padding_right=2, groups=2)),
    ((2, 2, 5, 6), (3, 2, 2, 2), np.float64, "f64-asymmetric-pad",
     dict(padding_top=0, padding_bottom=1, padding_left=1, padding_right=0)),
    ((3, 2, 4, 4), (5, 2, 1, 1), np.float64, "f64-1x1", {}),
    ((1, 3, 7, 7), (3, 1, 3, 3), np.float32, "f32-depthwise-as-groups", dict(groups=3, **_PAD1)),
]


def _samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, x, dt), rand(rng, w, dt), rand(rng, (w[0],), dt)], kw, desc)
            for x, w, dt, desc, kw in GEOMETRIES]


def _ph(g: og.Graph, shape: tuple[int | None, ...], dtype: Any = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


def _with(**kw: Any) -> Any:
    return lambda g: g._apply(CONV2D_BIAS, [_ph(g, (1, 4, 5, 5)), _ph(g, (2, 4, 3, 3)), _ph(g, (2,))],
                              ConvBiasAttrs(**kw))


ERRORS = [
    ErrorCase(lambda g: _build(g, _ph(g, (1, 3, 5, 5)), _ph(g, (2, 4, 3, 3)), _ph(g, (2,))), og.ShapeError,
              "the source has 3 channels", "channels"),
    ErrorCase(lambda g: _build(g, _ph(g, (1, 4, 5, 5)), _ph(g, (2, 4, 3, 3)), _ph(g, (3,))), og.ShapeError,
              "bias must be 1-D of length 2", "bias-length"),
    ErrorCase(lambda g: _build(g, _ph(g, (1, 4, 5, 5)), _ph(g, (3, 2, 3, 3)), _ph(g, (3,)), groups=2),
              og.ShapeError, "not divisible by groups=2", "groups"),
    ErrorCase(lambda g: _build(g, _ph(g, (4, 5, 5)), _ph(g, (2, 4, 3, 3)), _ph(g, (2,))), og.ShapeError,
              "rank 4", "x-rank3"),
    ErrorCase(lambda g: _build(g, _ph(g, (1, 4, 5, 5), og.int32), _ph(g, (2, 4, 3, 3), og.int32),
                               _ph(g, (2,), og.int32)), og.DTypeError, "int32", "integer"),
    ErrorCase(lambda g: _build(g, _ph(g, (1, 4, 5, 5)), _ph(g, (2, 4, 3, 3), og.float64), _ph(g, (2,))),
              og.DTypeError, "one dtype", "mixed-dtypes"),
    ErrorCase(_with(data_layout=og.TensorLayout.NHWC), og.AttributeValueError, "computes NCHW data", "nhwc"),
    ErrorCase(_with(names=("a", 1)), og.AttributeValueError, "names must be a tuple of str", "names"),
]


def _bn_build(g: og.Graph, *xs: og.Tensor, **kw: Any) -> og.Tensor:
    flags = {"has_gamma": len(xs) > 3, "has_beta": len(xs) > 4, **kw}
    return g._apply(BATCH_NORM_INFERENCE, list(xs), BatchNormInferenceAttrs(**flags))


def np_batch_norm(x: np.ndarray, mean: np.ndarray, var: np.ndarray, *affine: np.ndarray, axis: int = 1,
                  epsilon: float = 1e-5, **_: Any) -> np.ndarray:
    shape = [1] * x.ndim
    shape[axis] = -1
    up = [np.asarray(v, dtype=np.float64).reshape(shape) for v in (mean, var, *affine)]
    y = (x.astype(np.float64) - up[0]) / np.sqrt(up[1] + epsilon)
    if len(up) > 2:
        y = y * up[2]
    return y + up[3] if len(up) > 3 else y


def _bn_samples(rng: np.random.Generator) -> list[Sample]:
    def s(x: tuple[int, ...], axis: int, dt: Any, desc: str, params: int = 2, **kw: Any) -> Sample:
        c = x[axis]
        stats = [rand(rng, (c,), dt), rand(rng, (c,), dt, low=0.5, high=2.0)]
        return Sample([rand(rng, x, dt), *stats, *(rand(rng, (c,), dt) for _ in range(params))],
                      {"axis": axis, **kw}, desc)

    return [
        s((2, 3, 4, 5), 1, np.float32, "f32-nchw"),
        s((2, 4, 5, 3), 3, np.float64, "f64-channels-last-axis", epsilon=1e-3),
        s((6, 4), 1, np.float32, "f32-2d"),
        s((2, 3, 4, 5), 1, np.float64, "f64-no-affine", params=0),
        s((2, 3, 7), 1, np.float32, "f32-gamma-only", params=1),
    ]


BN_ERRORS = [
    ErrorCase(lambda g: _bn_build(g, _ph(g, (2, 3, 4)), _ph(g, (4,)), _ph(g, (4,))), og.ShapeError,
              "1-D of length 3", "stats-length"),
    ErrorCase(lambda g: _bn_build(g, _ph(g, (3,)), _ph(g, (3,)), _ph(g, (3,))), og.ShapeError, "rank >= 2",
              "x-rank1"),
    ErrorCase(lambda g: _bn_build(g, _ph(g, (2, 3)), _ph(g, (3,)), _ph(g, (3,)), axis=2), og.ShapeError,
              "axis must be an int in", "axis"),
    ErrorCase(lambda g: _bn_build(g, _ph(g, (2, 3)), _ph(g, (3,)), _ph(g, (3,)), epsilon=-1.0),
              og.AttributeValueError, "epsilon must be a finite number >= 0", "epsilon"),
    ErrorCase(lambda g: _bn_build(g, _ph(g, (2, 3)), _ph(g, (3,), og.float64), _ph(g, (3,))), og.DTypeError,
              "one dtype", "mixed-dtypes"),
    ErrorCase(lambda g: _bn_build(g, _ph(g, (2, 3)), _ph(g, (3,)), _ph(g, (3,)), has_gamma=True),
              og.ShapeError, "expects 4 inputs", "arity"),
]

def _gradients_build(g: og.Graph, grad: og.Tensor, x: og.Tensor, w: og.Tensor, **kw: Any) -> list[og.Tensor]:
    return g._apply_multi(CONV2D_GRADIENTS, [grad, x, w], ConvGradientsAttrs(**kw))


def np_conv_gradients(grad: np.ndarray, x: np.ndarray, w: np.ndarray, strides: tuple[int, int] = (1, 1),
                      dilation_rates: tuple[int, int] = (1, 1), padding_top: int = 0, padding_bottom: int = 0,
                      padding_left: int = 0, padding_right: int = 0, groups: int = 1,
                      bias: bool = False) -> list[np.ndarray]:
    """(dx, dw[, db]) of y = conv2d(x, w[) + b]: each kernel tap's strided window of the padded source, against the
    gradient; db the gradient summed per output channel."""
    grad, x, w = (v.astype(np.float64) for v in (grad, x, w))
    (_, _, h, wd), (o, cg, kh, kw) = x.shape, w.shape
    (sh, sw), (dh, dw_) = strides, dilation_rates
    xp = np.pad(x, ((0, 0), (0, 0), (padding_top, padding_bottom), (padding_left, padding_right)))
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    oh, ow = grad.shape[2:]
    per = o // groups
    for gi in range(groups):
        cs, os_ = slice(gi * cg, (gi + 1) * cg), slice(gi * per, (gi + 1) * per)
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
                cols = slice(j * dw_, j * dw_ + sw * (ow - 1) + 1, sw)
                dw[os_, :, i, j] = np.einsum("nohw,nchw->oc", grad[:, os_], xp[:, cs, rows, cols])
                dxp[:, cs, rows, cols] += np.einsum("nohw,oc->nchw", grad[:, os_], w[os_, :, i, j])
    dx = dxp[:, :, padding_top:padding_top + h, padding_left:padding_left + wd]
    return [dx, dw, grad.sum((0, 2, 3))] if bias else [dx, dw]


def _gradients_samples(rng: np.random.Generator) -> list[Sample]:
    def sample(x: tuple[int, ...], w: tuple[int, ...], dt: Any, desc: str, kw: dict[str, Any]) -> Sample:
        y = _conv_shape(x, w, ConvGradientsAttrs(**kw))
        return Sample([rand(rng, y, dt), rand(rng, x, dt), rand(rng, w, dt)], kw, desc)

    with_bias = [(x, w, dt, f"{desc}-bias", {**kw, "bias": True}) for x, w, dt, desc, kw in GEOMETRIES[:3]]
    return [sample(*geometry) for geometry in [*GEOMETRIES, *with_bias]]


def _conv_shape(x: tuple[int, ...], w: tuple[int, ...], a: Any) -> list[int]:
    out = [x[0], w[0]]
    for k, (size, kernel) in enumerate(zip(x[2:], w[2:], strict=True)):
        before, after = a.padding_pairs[k]
        span = a.dilation_rates[k] * (kernel - 1) + 1
        out.append((size + before + after - span) // a.strides[k] + 1)
    return out


GRADIENTS_ERRORS = [
    ErrorCase(lambda g: _gradients_build(g, _ph(g, (1, 2, 4, 4)), _ph(g, (1, 4, 5, 5)), _ph(g, (2, 4, 3, 3))),
              og.ShapeError, "the convolution's shape", "gradient-shape"),
    ErrorCase(lambda g: _gradients_build(g, _ph(g, (1, 2, 3, 3)), _ph(g, (1, 4, 5, 5)), _ph(g, (2, 4, 3, 3)),
                                         data_layout=og.TensorLayout.NHWC), og.AttributeValueError,
              "computes NCHW data", "nhwc"),
    ErrorCase(lambda g: _gradients_build(g, _ph(g, (1, 2, 3, 3), og.float64), _ph(g, (1, 4, 5, 5)),
                                         _ph(g, (2, 4, 3, 3))), og.DTypeError, "one dtype", "mixed-dtypes"),
]


def _bn_backward_build(g: og.Graph, *xs: og.Tensor) -> list[og.Tensor]:
    return g._apply_multi(BATCH_NORM_BACKWARD, list(xs), BatchNormBackwardAttrs(len(xs) > 4))


def np_batch_norm_backward(gy: np.ndarray, x: np.ndarray, mean: np.ndarray, invstd: np.ndarray,
                           *gamma: np.ndarray) -> list[np.ndarray]:
    """dbeta = sum(gy), dgamma = sum(gy * xhat), dx = gamma r (gy - mean(gy) - xhat mean(gy xhat)), over all dims but
    the channels' (axis 1)."""
    gy, x = (np.asarray(v.float() if isinstance(v, torch.Tensor) else v, dtype=np.float64) for v in (gy, x))
    axes = (0, *range(2, x.ndim))
    shape = [1] * x.ndim
    shape[1] = -1
    r = invstd.astype(np.float64).reshape(shape)
    xhat = (x - mean.astype(np.float64).reshape(shape)) * r
    dbeta, dgamma = gy.sum(axes), (gy * xhat).sum(axes)
    n = gy.size // gy.shape[1]
    w = gamma[0].astype(np.float64).reshape(shape) if gamma else 1.0
    dx = w * r * (gy - dbeta.reshape(shape) / n - xhat * dgamma.reshape(shape) / n)
    return [dx, dgamma, dbeta]


def _bn_backward_samples(rng: np.random.Generator) -> list[Sample]:
    def s(x: tuple[int, ...], dt: Any, desc: str, gamma: bool = True) -> Sample:
        c, st = x[1], np.float32 if dt is torch.bfloat16 else dt
        values = rand(rng, x, dt)
        as_np = values.float().numpy() if isinstance(values, torch.Tensor) else values
        stats = [as_np.astype(np.float64).mean((0, *range(2, len(x)))).astype(st),
                 rand(rng, (c,), st, low=0.5, high=2.0)]
        return Sample([rand(rng, x, dt), values, *stats, *([rand(rng, (c,), st)] if gamma else [])], {}, desc)

    return [
        s((2, 3, 4, 5), np.float32, "f32-nchw"),
        s((4, 3), np.float64, "f64-2d"),
        s((2, 4, 3, 3), np.float64, "f64-no-gamma", gamma=False),
        s((2, 3, 4, 4), torch.bfloat16, "bf16-float32-statistics"),
    ]


BN_BACKWARD_ERRORS = [
    ErrorCase(lambda g: _bn_backward_build(g, _ph(g, (2, 3, 4)), _ph(g, (2, 3, 4)), _ph(g, (4,)), _ph(g, (4,))),
              og.ShapeError, "must be of shape", "stats-length"),
    ErrorCase(lambda g: _bn_backward_build(g, _ph(g, (2, 3)), _ph(g, (2, 4)), _ph(g, (3,)), _ph(g, (3,))),
              og.ShapeError, "the incoming gradient must have x's shape", "gradient-shape"),
    ErrorCase(lambda g: _bn_backward_build(g, _ph(g, (2, 3), og.bfloat16), _ph(g, (2, 3), og.bfloat16),
                                           _ph(g, (3,), og.bfloat16), _ph(g, (3,))), og.DTypeError,
              "deviation and gamma in float32", "16-bit-statistics"),
]


def _bn_update_build(g: og.Graph, *xs: og.Tensor, **kw: Any) -> list[og.Tensor]:
    return g._apply_multi(BATCH_NORM_UPDATE, list(xs), BatchNormUpdateAttrs(**kw))


def np_batch_norm_update(x: Any, *per_channel: np.ndarray, momentum: float = 0.1, epsilon: float = 1e-5,
                         has_gamma: bool = False, has_beta: bool = False) -> list[np.ndarray]:
    """y, the batch mean and 1 / sqrt(biased variance + eps), and the running statistics moved by ``momentum``
    towards the mean and the unbiased variance, over all dims but axis 1."""
    x = np.asarray(x.float() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
    *params, rm, rv = (np.asarray(v, np.float64) for v in per_channel)
    axes = (0, *range(2, x.ndim))
    shape = [1] * x.ndim
    shape[1] = -1
    mean, var = x.mean(axes), x.var(axes)
    r = 1.0 / np.sqrt(var + epsilon)
    y = (x - mean.reshape(shape)) * r.reshape(shape)
    if has_gamma:
        y = y * params[0].reshape(shape)
    if has_beta:
        y = y + params[-1].reshape(shape)
    n = x.size // x.shape[1]
    return [y, mean, r, (1 - momentum) * rm + momentum * mean, (1 - momentum) * rv + momentum * var * n / (n - 1)]


def _bn_update_samples(rng: np.random.Generator) -> list[Sample]:
    def s(x: tuple[int, ...], dt: Any, desc: str, gamma: bool = True, beta: bool = True, **kw: Any) -> Sample:
        c, st = x[1], np.float32 if dt is torch.bfloat16 else dt
        params = [rand(rng, (c,), st) for flag in (gamma, beta) if flag]
        running = [rand(rng, (c,), st), rand(rng, (c,), st, low=0.5, high=2.0)]
        return Sample([rand(rng, x, dt), *params, *running], {"has_gamma": gamma, "has_beta": beta, **kw}, desc)

    return [
        s((2, 3, 4, 5), np.float32, "f32-nchw"),
        s((5, 3), np.float64, "f64-2d", momentum=0.3, epsilon=1e-3),
        s((2, 4, 3, 3), np.float64, "f64-no-affine", gamma=False, beta=False),
        s((2, 3, 4, 4), torch.bfloat16, "bf16-float32-statistics", beta=False),
    ]


BN_UPDATE_ERRORS = [
    ErrorCase(lambda g: _bn_update_build(g, _ph(g, (2, 3, 4)), _ph(g, (4,)), _ph(g, (4,))), og.ShapeError,
              "running statistics must be of shape", "stats-length"),
    ErrorCase(lambda g: _bn_update_build(g, _ph(g, (2, 3), og.bfloat16), _ph(g, (3,), og.bfloat16),
                                         _ph(g, (3,), og.bfloat16)), og.DTypeError, "must be float32 for bfloat16",
              "16-bit-statistics"),
    ErrorCase(lambda g: _bn_update_build(g, _ph(g, (2, 3)), _ph(g, (3,)), _ph(g, (3,)), momentum=2.0),
              og.AttributeValueError, "momentum must be", "momentum"),
    ErrorCase(lambda g: _bn_update_build(g, _ph(g, (2, 3)), _ph(g, (3,))), og.ShapeError, "expects 3 inputs",
              "arity"),
]


def _ln_forward_build(g: og.Graph, *xs: og.Tensor, **kw: Any) -> list[og.Tensor]:
    return g._apply_multi(LAYER_NORM_FORWARD, list(xs), LayerNormVendorAttrs(**kw))


def _ln_axes(x: np.ndarray, normalized_rank: int) -> tuple[int, ...]:
    return tuple(range(x.ndim - normalized_rank, x.ndim))


def np_layer_norm_forward(x: np.ndarray, *affine: np.ndarray, normalized_rank: int = 1,
                          epsilon: float = 1e-5) -> list[np.ndarray]:
    x = x.astype(np.float64)
    axes = _ln_axes(x, normalized_rank)
    mean = x.mean(axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axes, keepdims=True) + epsilon)
    y = (x - mean) * rstd
    if affine:
        y = y * affine[0]
    return [y + affine[1] if len(affine) > 1 else y, mean, rstd]


def _ln_backward_build(g: og.Graph, *xs: og.Tensor, **kw: Any) -> list[og.Tensor]:
    return g._apply_multi(LAYER_NORM_BACKWARD, list(xs), LayerNormVendorAttrs(**kw))


def np_layer_norm_backward(gy: np.ndarray, x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, w: np.ndarray,
                           b: np.ndarray, normalized_rank: int = 1, **_: Any) -> list[np.ndarray]:
    gy, x = gy.astype(np.float64), x.astype(np.float64)
    axes = _ln_axes(x, normalized_rank)
    outer = tuple(range(x.ndim - normalized_rank))
    xhat = (x - mean) * rstd
    gw = gy * w
    dx = rstd * (gw - gw.mean(axes, keepdims=True) - xhat * (gw * xhat).mean(axes, keepdims=True))
    return [dx, (gy * xhat).sum(outer), gy.sum(outer)]


def _ln_forward_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample([rand(rng, (2, 5, 8)), rand(rng, (8,)), rand(rng, (8,))], {}, "f32-affine"),
        Sample([rand(rng, (3, 4, 5), np.float64), rand(rng, (4, 5), np.float64)],
               {"normalized_rank": 2, "epsilon": 1e-3}, "f64-two-dims-gamma-only"),
        Sample([rand(rng, (4, 6))], {}, "f32-no-affine"),
    ]


def _ln_backward_samples(rng: np.random.Generator) -> list[Sample]:
    def s(shape: tuple[int, ...], k: int, dt: Any, desc: str) -> Sample:
        x = rand(rng, shape, dt)
        _, mean, rstd = np_layer_norm_forward(x, normalized_rank=k)
        ns = shape[len(shape) - k:]
        return Sample([rand(rng, shape, dt), x, mean.astype(dt), rstd.astype(dt), rand(rng, ns, dt),
                       rand(rng, ns, dt)], {"normalized_rank": k}, desc)

    return [s((2, 5, 8), 1, np.float32, "f32"), s((3, 4, 5), 2, np.float64, "f64-two-dims")]


LN_ERRORS = [
    ErrorCase(lambda g: _ln_forward_build(g, _ph(g, (2, 3), og.bfloat16)), og.DTypeError, "bfloat16", "bf16"),
    ErrorCase(lambda g: _ln_forward_build(g, _ph(g, (2, 3)), _ph(g, (4,))), og.ShapeError,
              "gamma and beta must be float32", "gamma-shape"),
    ErrorCase(lambda g: _ln_forward_build(g, _ph(g, (2, 3)), normalized_rank=3), og.AttributeValueError,
              "normalized_rank must be an int", "rank"),
]
LN_BACKWARD_ERRORS = [
    ErrorCase(lambda g: _ln_backward_build(g, *(_ph(g, (2, 3)) for _ in range(2)), *(_ph(g, (2, 1)) for _ in
                                                                                    range(2)), _ph(g, (3,)),
                                           _ph(g, (2,))), og.ShapeError, "gamma and beta", "beta-shape"),
    ErrorCase(lambda g: _ln_backward_build(g, _ph(g, (2, 3)), _ph(g, (2, 3)), _ph(g, (2, 3)), _ph(g, (2, 1)),
                                           _ph(g, (3,)), _ph(g, (3,))), og.ShapeError, "statistics of type",
              "statistics"),
]


def _threshold_build(g: og.Graph, grad: og.Tensor, x: og.Tensor, **kw: Any) -> og.Tensor:
    return g._apply(THRESHOLD_GRADIENT, [grad, x], ThresholdGradientAttrs(**kw))


def np_threshold_gradient(grad: np.ndarray, x: np.ndarray, threshold: float = 0.0, **_: Any) -> np.ndarray:
    return np.where(x <= threshold, 0.0, grad)  # a NaN x compares False: its gradient passes


def _threshold_samples(rng: np.random.Generator) -> list[Sample]:
    x = rand(rng, (4, 6))
    x[0, :3] = [0.0, np.nan, -0.0]  # at the threshold, NaN, negative zero
    grad = rand(rng, (4, 6))
    grad[1, 1] = np.nan  # masked or passed, as x says
    x[1, 1] = -1.0
    return [
        Sample([grad, x], {}, "f32-relu"),
        Sample([rand(rng, (2, 3, 5), np.float64), rand(rng, (2, 3, 5), np.float64)], {"threshold": 0.25}, "f64-0.25"),
        Sample([rand(rng, (3, 8), np.float16), rand(rng, (3, 8), np.float16)], {"threshold": -0.5}, "f16"),
        Sample([rand(rng, (0, 3)), rand(rng, (0, 3))], {}, "empty"),
    ]


THRESHOLD_ERRORS = [
    ErrorCase(lambda g: _threshold_build(g, _ph(g, (2, 3)), _ph(g, (3, 2))), og.ShapeError, "one shape", "shapes"),
    ErrorCase(lambda g: _threshold_build(g, _ph(g, (2, 3)), _ph(g, (2, 3), og.float64)), og.DTypeError,
              "one dtype", "mixed-dtypes"),
    ErrorCase(lambda g: _threshold_build(g, _ph(g, (2,), og.int32), _ph(g, (2,), og.int32)), og.DTypeError, "int32",
              "integer"),
    ErrorCase(lambda g: _threshold_build(g, _ph(g, (2,)), _ph(g, (2,)), threshold="0"), og.AttributeValueError,
              "threshold must be a number", "threshold"),
    ErrorCase(lambda g: g._apply(THRESHOLD_GRADIENT, [_ph(g, (2,))], ThresholdGradientAttrs()), og.ShapeError,
              "expects 2 inputs", "arity"),
]

RECORDS = [
    OpInfo("batch_norm_inference", (BATCH_NORM_INFERENCE,), _bn_build, _bn_samples, np_batch_norm, errors=BN_ERRORS,
           tol={torch.float32: (1e-5, 1e-5)}),
    OpInfo("conv2d_bias", (CONV2D_BIAS,), _build, _samples, np_conv_bias, errors=ERRORS,
           tol={torch.float32: (3e-5, 3e-5)}, gpu_tol={torch.float32: (2e-3, 2e-3)}),  # cuDNN's TF32
    OpInfo("conv2d_gradients", (CONV2D_GRADIENTS,), _gradients_build, _gradients_samples, np_conv_gradients,
           errors=GRADIENTS_ERRORS, tol={torch.float32: (3e-5, 3e-5)}, gpu_tol={torch.float32: (2e-3, 2e-3)}),
    OpInfo("batch_norm_backward", (BATCH_NORM_BACKWARD,), _bn_backward_build, _bn_backward_samples,
           np_batch_norm_backward, errors=BN_BACKWARD_ERRORS, tol={torch.float32: (1e-4, 1e-4)},
           # CUDA's kernel for 16-bit inputs sums dgamma/dbeta less exactly (as batch_norm_training_gradient's record)
           gpu_tol={torch.float32: (5e-3, 1e-2)}),
    OpInfo("batch_norm_update", (BATCH_NORM_UPDATE,), _bn_update_build, _bn_update_samples, np_batch_norm_update,
           errors=BN_UPDATE_ERRORS, tol={torch.float32: (1e-4, 1e-5)}),
    OpInfo("layer_norm_forward", (LAYER_NORM_FORWARD,), _ln_forward_build, _ln_forward_samples, np_layer_norm_forward,
           errors=LN_ERRORS, tol={torch.float32: (1e-5, 1e-5)}),
    OpInfo("layer_norm_backward", (LAYER_NORM_BACKWARD,), _ln_backward_build, _ln_backward_samples,
           np_layer_norm_backward, errors=LN_BACKWARD_ERRORS, tol={torch.float32: (1e-4, 1e-4)}),
    OpInfo("threshold_gradient", (THRESHOLD_GRADIENT,), _threshold_build, _threshold_samples, np_threshold_gradient,
           errors=THRESHOLD_ERRORS),
]
