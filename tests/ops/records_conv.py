"""Records for convolutions: conv2d, conv3d, depthwise_conv2d, conv_transpose2d.

Oracles run torch.nn.functional in float64 (PyTorch's convolution is the reference semantics here)
on channels-first data with the padding computed here, independently of opgraph's padding code.
conv_transpose2d is checked as what it is defined to be: the data gradient of conv2d (autograd).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import opgraph as og
from opgraph.ops import conv
from opgraph.ops.conv import (
    Conv2dDescriptor,
    Conv3dDescriptor,
    DepthwiseConv2dDescriptor,
    PaddingStyle,
    TensorLayout,
    WeightsLayout,
)
from opgraph.ops.pooling import Pooling2dDescriptor

from .opinfo import ErrorCase, OpInfo, Sample, rand

CHANNELS_LAST = (TensorLayout.NHWC, TensorLayout.NDHWC)
KERNEL_FIRST = (WeightsLayout.HWIO, WeightsLayout.DHWIO)
TOL = {torch.float16: (4e-3, 4e-3), torch.float32: (3e-5, 3e-5)}
GPU_TOL = {**TOL, torch.float32: (2e-3, 2e-3)}  # cuDNN convolutions use TF32 by default in PyTorch


# ---- independent padding arithmetic ------------------------------------------------------------
def pad_pair(style: PaddingStyle, size: int, k: int, s: int, d: int, explicit: tuple[int, int]) -> tuple[int, int]:
    """(before, after) padding of one dim, written from the padding-style definitions."""
    if style is PaddingStyle.EXPLICIT:
        return explicit
    if style is PaddingStyle.TF_VALID:
        return (0, 0)
    out = int(np.ceil(size / s))
    total = max(0, (out - 1) * s + d * (k - 1) + 1 - size)
    if style is PaddingStyle.TF_SAME:
        return (total // 2, total - total // 2)
    assert style is PaddingStyle.ONNX_SAME_LOWER
    return (total - total // 2, total // 2)


def explicit_pairs(d: Any) -> list[tuple[int, int]]:
    pairs = [(d.padding_top, d.padding_bottom), (d.padding_left, d.padding_right)]
    return [(d.padding_front, d.padding_back), *pairs] if hasattr(d, "padding_front") else pairs


def _cf(a: np.ndarray, channels_last: bool) -> torch.Tensor:
    """float64 channels-first torch tensor from a (possibly channels-last) array."""
    t = torch.from_numpy(np.asarray(a, dtype=np.float64))
    return t.permute(0, t.dim() - 1, *range(1, t.dim() - 1)) if channels_last else t


def _back(y: torch.Tensor, channels_last: bool) -> np.ndarray:
    return (y.permute(0, *range(2, y.dim()), 1) if channels_last else y).numpy()


def _weights_oi(w: np.ndarray, kernel_first: bool) -> torch.Tensor:
    t = torch.from_numpy(np.asarray(w, dtype=np.float64))
    n = t.dim() - 2
    return t.permute(n + 1, n, *range(n)) if kernel_first else t


def _padded(x: torch.Tensor, pads: list[tuple[int, int]]) -> torch.Tensor:
    return F.pad(x, [p for pair in reversed(pads) for p in pair])


def _layout(shape_cf: tuple[int, ...], channels_last: bool) -> tuple[int, ...]:
    return (shape_cf[0], *shape_cf[2:], shape_cf[1]) if channels_last else shape_cf


def _wlayout(shape_oi: tuple[int, ...], kernel_first: bool) -> tuple[int, ...]:
    return (*shape_oi[2:], shape_oi[1], shape_oi[0]) if kernel_first else shape_oi


# ---- conv2d / conv3d ---------------------------------------------------------------------------
def conv_oracle(x: np.ndarray, w: np.ndarray, desc: Any) -> np.ndarray:
    cl, kf = desc.data_layout in CHANNELS_LAST, desc.weights_layout in KERNEL_FIRST
    xt, wt = _cf(x, cl), _weights_oi(w, kf)
    pads = [pad_pair(desc.padding_style, xt.shape[2 + i], wt.shape[2 + i], desc.strides[i], desc.dilation_rates[i],
                     p) for i, p in enumerate(explicit_pairs(desc))]
    fn = F.conv2d if xt.dim() == 4 else F.conv3d
    y = fn(_padded(xt, pads), wt, None, desc.strides, 0, desc.dilation_rates, desc.groups)
    return _back(y, cl)


def _conv_samples(cases: list[tuple[str, Any, tuple[int, ...], tuple[int, ...], Any]]) -> Any:
    """cases: (label, descriptor, source shape channels-first, weights shape OI..., dtype)."""

    def samples(rng: np.random.Generator) -> list[Sample]:
        out = []
        for label, d, xs, ws, dt in cases:
            x = rand(rng, _layout(xs, d.data_layout in CHANNELS_LAST), dt)
            w = rand(rng, _wlayout(ws, d.weights_layout in KERNEL_FIRST), dt, -1, 1)
            out.append(Sample([x, w], {"desc": d}, label))
        return out

    return samples


E, SAME, LOWER, VALID = (PaddingStyle.EXPLICIT, PaddingStyle.TF_SAME, PaddingStyle.ONNX_SAME_LOWER,
                         PaddingStyle.TF_VALID)
NHWC, HWIO = dict(data_layout=TensorLayout.NHWC), dict(weights_layout=WeightsLayout.HWIO)
CONV2D_CASES = [
    ("f32-explicit-sym", Conv2dDescriptor(padding_left=1, padding_right=1, padding_top=1, padding_bottom=1),
     (2, 3, 7, 6), (4, 3, 3, 3), np.float32),
    ("f64-explicit-asym-stride-dil", Conv2dDescriptor(strides=(2, 1), dilation_rates=(1, 2), padding_right=2,
                                                      padding_top=1), (1, 2, 9, 8), (3, 2, 3, 2), np.float64),
    ("f32-nhwc-hwio-tf_same-s2", Conv2dDescriptor(strides=2, padding_style=SAME, **NHWC, **HWIO),
     (2, 3, 7, 6), (4, 3, 3, 3), np.float32),
    ("f64-nhwc-oihw-onnx_same_lower", Conv2dDescriptor(strides=(2, 3), dilation_rates=2, padding_style=LOWER,
                                                       **NHWC), (1, 2, 8, 10), (3, 2, 3, 2), np.float64),
    ("f32-nchw-hwio-tf_valid", Conv2dDescriptor(strides=2, padding_style=VALID, **HWIO),
     (2, 2, 9, 8), (3, 2, 3, 3), np.float32),
    ("f32-groups2-dil", Conv2dDescriptor(groups=2, dilation_rates=(2, 1), padding_top=1, padding_bottom=1,
                                         padding_right=1), (2, 4, 7, 7), (6, 2, 2, 3), np.float32),
    ("f64-groups3-nhwc-hwio-same", Conv2dDescriptor(groups=3, padding_style=SAME, **NHWC, **HWIO),
     (1, 6, 5, 6), (3, 2, 2, 2), np.float64),
    ("f64-pad-beyond-kernel", Conv2dDescriptor(padding_left=3, padding_bottom=2), (1, 1, 4, 4), (2, 1, 2, 2),
     np.float64),
    ("f16-tf_same", Conv2dDescriptor(padding_style=SAME), (1, 3, 6, 6), (2, 3, 3, 3), np.float16),
]
CONV3D_CASES = [
    ("f32-explicit-asym", Conv3dDescriptor(strides=(1, 2, 1), padding_front=1, padding_bottom=1, padding_left=2),
     (2, 2, 4, 5, 4), (3, 2, 2, 3, 2), np.float32),
    ("f64-ndhwc-dhwio-tf_same", Conv3dDescriptor(strides=2, dilation_rates=(1, 1, 2), padding_style=SAME,
                                                 data_layout=TensorLayout.NDHWC,
                                                 weights_layout=WeightsLayout.DHWIO),
     (1, 3, 5, 4, 6), (2, 3, 2, 2, 2), np.float64),
    ("f32-groups2-onnx_same_lower", Conv3dDescriptor(groups=2, strides=(2, 1, 2), padding_style=LOWER),
     (1, 4, 4, 4, 5), (4, 2, 2, 3, 2), np.float32),
    ("f16-tf_valid", Conv3dDescriptor(padding_style=VALID), (1, 2, 4, 4, 4), (2, 2, 2, 2, 2), np.float16),
]


def _ph(g: og.Graph, shape: tuple[int, ...], dtype: Any = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


def _conv2d(g: og.Graph, xs: tuple[int, ...], ws: tuple[int, ...], d: Any = None, dtype: Any = og.float32) -> Any:
    return g.conv2d(_ph(g, xs, dtype), _ph(g, ws, dtype), d)


CONV2D_ERRORS = [
    ErrorCase(lambda g: _conv2d(g, (1, 3, 5, 5), (4, 2, 3, 3)), og.ShapeError, "the source has 3 channels",
              "channel-mismatch"),
    ErrorCase(lambda g: _conv2d(g, (1, 3, 5, 5), (4, 1, 3, 3), Conv2dDescriptor(groups=2)), og.ShapeError,
              "divisible by groups", "groups-divide"),
    ErrorCase(lambda g: Conv2dDescriptor(strides=(0, 1)), og.AttributeValueError, "Conv2dDescriptor.strides",
              "zero-stride"),
    ErrorCase(lambda g: Conv2dDescriptor(dilation_rates=(1, 1, 1)), og.AttributeValueError,
              "Conv2dDescriptor.dilation_rates", "tuple-length"),
    ErrorCase(lambda g: Conv2dDescriptor(padding_left=-1), og.AttributeValueError, "Conv2dDescriptor.padding_left",
              "negative-pad"),
    ErrorCase(lambda g: Conv2dDescriptor(groups=0), og.AttributeValueError, "Conv2dDescriptor.groups", "groups-0"),
    ErrorCase(lambda g: Conv2dDescriptor(data_layout=TensorLayout.NCDHW), og.AttributeValueError,
              "Conv2dDescriptor.data_layout", "layout"),
    ErrorCase(lambda g: Conv2dDescriptor(padding_style="same"), og.AttributeValueError,  # type: ignore[arg-type]
              "Conv2dDescriptor.padding_style", "style-string"),
    ErrorCase(lambda g: _conv2d(g, (3, 5, 5), (4, 3, 3, 3)), og.ShapeError, "rank 4", "source-rank"),
    ErrorCase(lambda g: _conv2d(g, (1, 3, 5, 5), (4, 3, 3)), og.ShapeError, "rank 4", "weights-rank"),
    ErrorCase(lambda g: _conv2d(g, (1, 3, 5, 5), (4, 3, 3, 3), dtype=og.int32), og.DTypeError, "int32", "int"),
    ErrorCase(lambda g: g.conv2d(_ph(g, (1, 3, 5, 5)), _ph(g, (4, 3, 3, 3), og.float64)), og.DTypeError,
              "one dtype", "dtype-mismatch"),
    ErrorCase(lambda g: _conv2d(g, (1, 3, 2, 5), (4, 3, 3, 3)), og.ShapeError, "larger than the padded source",
              "kernel-too-large"),
    ErrorCase(lambda g: _conv2d(g, (1, 3, 5, 5), (4, 3, 3, 3), Pooling2dDescriptor(2, 2)), og.AttributeValueError,
              "Conv2dDescriptor", "wrong-descriptor"),
]
CONV3D_ERRORS = [
    ErrorCase(lambda g: Conv3dDescriptor(weights_layout=WeightsLayout.OIHW), og.AttributeValueError,
              "Conv3dDescriptor.weights_layout", "weights-layout"),
    ErrorCase(lambda g: Conv3dDescriptor(strides=(1, 2)), og.AttributeValueError, "Conv3dDescriptor.strides",
              "tuple-length"),
    ErrorCase(lambda g: g.conv3d(_ph(g, (1, 2, 4, 4)), _ph(g, (2, 2, 2, 2, 2))), og.ShapeError, "rank 5", "rank"),
    ErrorCase(lambda g: g.conv3d(_ph(g, (1, 2, 4, 4, 4)), _ph(g, (2, 3, 2, 2, 2))), og.ShapeError,
              "the source has 2 channels", "channel-mismatch"),
]


# ---- depthwise_conv2d --------------------------------------------------------------------------
def depthwise_oracle(x: np.ndarray, w: np.ndarray, desc: Any) -> np.ndarray:
    """Channel c with filter m (weights (M, C, kH, kW) in OIHW) gives result channel c * M + m."""
    cl, kf = desc.data_layout in CHANNELS_LAST, desc.weights_layout in KERNEL_FIRST
    xt, wt = _cf(x, cl), _weights_oi(w, kf)
    mult, chans = wt.shape[0], wt.shape[1]
    pads = [pad_pair(desc.padding_style, xt.shape[2 + i], wt.shape[2 + i], desc.strides[i], desc.dilation_rates[i],
                     p) for i, p in enumerate(explicit_pairs(desc))]
    xp = _padded(xt, pads)
    outs = [F.conv2d(xp[:, c:c + 1], wt[m, c][None, None], None, desc.strides, 0, desc.dilation_rates)
            for c in range(chans) for m in range(mult)]
    return _back(torch.cat(outs, dim=1), cl)


DW = DepthwiseConv2dDescriptor
DEPTHWISE_CASES = [
    ("f32-explicit-m1", DW(padding_left=1, padding_right=1, padding_top=1, padding_bottom=1),
     (2, 3, 6, 5), (1, 3, 3, 3), np.float32),
    ("f64-nhwc-hwio-tf_same-m2-s2", DW(strides=2, padding_style=SAME, **NHWC, **HWIO), (1, 3, 8, 6), (2, 3, 3, 2),
     np.float64),
    ("f32-hwio-onnx_same_lower-m3-dil", DW(dilation_rates=(1, 2), padding_style=LOWER, **HWIO), (1, 2, 6, 7),
     (3, 2, 2, 3), np.float32),
    ("f64-explicit-asym", DW(strides=(1, 2), padding_top=2, padding_right=1), (1, 2, 5, 6), (2, 2, 3, 2),
     np.float64),
    ("f16-nhwc-tf_valid-m2", DW(padding_style=VALID, **NHWC), (1, 3, 5, 5), (2, 3, 2, 2), np.float16),
]
DEPTHWISE_ERRORS = [
    ErrorCase(lambda g: g.depthwise_conv2d(_ph(g, (1, 3, 5, 5)), _ph(g, (2, 4, 3, 3))), og.ShapeError,
              "the source has 3 channels", "channel-mismatch"),
    ErrorCase(lambda g: DW(strides=(1, -1)), og.AttributeValueError, "DepthwiseConv2dDescriptor.strides",
              "negative-stride"),
    ErrorCase(lambda g: g.depthwise_conv2d(_ph(g, (1, 3, 5, 5), og.int64), _ph(g, (2, 3, 3, 3), og.int64)),
              og.DTypeError, "int64", "int"),
    ErrorCase(lambda g: g.depthwise_conv2d(_ph(g, (1, 3, 5, 5)), _ph(g, (2, 3, 3, 3)), Conv2dDescriptor()),
              og.AttributeValueError, "DepthwiseConv2dDescriptor", "wrong-descriptor"),
]


# ---- conv_transpose2d --------------------------------------------------------------------------
def transposed_size(style: PaddingStyle, size: int, k: int, s: int, d: int, explicit: tuple[int, int]) -> int:
    if style in (PaddingStyle.TF_SAME, PaddingStyle.ONNX_SAME_LOWER):
        return size * s
    full = (size - 1) * s + d * (k - 1) + 1
    return full if style is PaddingStyle.TF_VALID else full - sum(explicit)


def conv_transpose_oracle(x: np.ndarray, w: np.ndarray, desc: Any, output_shape: Any = None) -> np.ndarray:
    cl, kf = desc.data_layout in CHANNELS_LAST, desc.weights_layout in KERNEL_FIRST
    xt, wt = _cf(x, cl), _weights_oi(w, kf)  # wt: (source channels, result channels / groups, kH, kW)
    explicit = explicit_pairs(desc)
    if output_shape is None:
        size = [transposed_size(desc.padding_style, xt.shape[2 + i], wt.shape[2 + i], desc.strides[i],
                                desc.dilation_rates[i], explicit[i]) for i in range(2)]
    else:
        size = list(output_shape[1:3] if cl else output_shape[2:])
    r = torch.zeros(xt.shape[0], wt.shape[1] * desc.groups, *size, dtype=torch.float64, requires_grad=True)
    pads = [pad_pair(desc.padding_style, size[i], wt.shape[2 + i], desc.strides[i], desc.dilation_rates[i],
                     explicit[i]) for i in range(2)]
    y = F.conv2d(_padded(r, pads), wt, None, desc.strides, 0, desc.dilation_rates, desc.groups)
    assert y.shape == xt.shape, (y.shape, xt.shape)
    (grad,) = torch.autograd.grad(y, r, grad_outputs=xt)
    return _back(grad, cl)


def _transpose_samples(rng: np.random.Generator) -> list[Sample]:
    cases: list[tuple[str, Conv2dDescriptor, tuple[int, ...], tuple[int, ...], Any, Any]] = [
        ("f32-explicit-sym", Conv2dDescriptor(padding_left=1, padding_right=1, padding_top=1, padding_bottom=1),
         (2, 3, 4, 5), (3, 2, 3, 3), np.float32, None),
        ("f64-explicit-asym-s2-dil-crop", Conv2dDescriptor(strides=2, dilation_rates=(1, 2), padding_top=2,
                                                           padding_right=1), (1, 2, 4, 3), (2, 3, 3, 2),
         np.float64, None),
        ("f64-explicit-output_shape", Conv2dDescriptor(strides=3, padding_left=1, padding_right=1),
         (1, 2, 3, 3), (2, 2, 2, 3), np.float64, (1, 2, 8, 9)),
        ("f32-tf_same-s2", Conv2dDescriptor(strides=2, padding_style=SAME), (2, 3, 3, 4), (3, 2, 3, 3),
         np.float32, None),
        ("f64-onnx_same_lower-output_shape", Conv2dDescriptor(strides=(2, 3), padding_style=LOWER),
         (1, 2, 3, 3), (2, 3, 3, 2), np.float64, (1, 3, 6, 8)),
        ("f32-nhwc-hwio-tf_valid-s2", Conv2dDescriptor(strides=2, padding_style=VALID, **NHWC, **HWIO),
         (1, 3, 3, 4), (3, 2, 2, 3), np.float32, None),
        ("f32-nhwc-groups2", Conv2dDescriptor(groups=2, padding_top=1, padding_bottom=1, **NHWC),
         (2, 4, 4, 4), (4, 3, 3, 2), np.float32, (2, 4, 5, 6)),
        ("f16-tf_same", Conv2dDescriptor(strides=2, padding_style=SAME), (1, 3, 3, 3), (3, 2, 2, 2),
         np.float16, None),
    ]
    out = []
    for label, d, xs, ws, dt, shape in cases:
        x = rand(rng, _layout(xs, d.data_layout in CHANNELS_LAST), dt)
        w = rand(rng, _wlayout(ws, d.weights_layout in KERNEL_FIRST), dt, -1, 1)
        out.append(Sample([x, w], {"desc": d, "output_shape": shape}, label))
    return out


TRANSPOSE_ERRORS = [
    ErrorCase(lambda g: g.conv_transpose2d(_ph(g, (1, 2, 3, 3)), _ph(g, (2, 2, 2, 2)), (1, 2, 9, 9),
                                           Conv2dDescriptor(strides=2)), og.ShapeError, "does not fit",
              "output_shape-mismatch"),
    ErrorCase(lambda g: g.conv_transpose2d(_ph(g, (1, 3, 3, 3)), _ph(g, (2, 2, 2, 2))), og.ShapeError,
              "must equal the source channels", "channel-mismatch"),
    ErrorCase(lambda g: g.conv_transpose2d(_ph(g, (1, 2, 3, 3)), _ph(g, (2, 2, 2, 2)), (1, 3, 4, 4)),
              og.ShapeError, "has 3 channels", "output_shape-channels"),
    ErrorCase(lambda g: g.conv_transpose2d(_ph(g, (1, 2, 3, 3)), _ph(g, (2, 2, 2, 2)), (2, 4, 4)),
              og.AttributeValueError, "output_shape", "output_shape-length"),
    ErrorCase(lambda g: g.conv_transpose2d(_ph(g, (1, 2, 3, 3), og.int32), _ph(g, (2, 2, 2, 2), og.int32)),
              og.DTypeError, "int32", "int"),
]


RECORDS = [
    OpInfo("conv2d", (conv.CONV2D,), lambda g, x, w, desc: g.conv2d(x, w, desc), _conv_samples(CONV2D_CASES),
           conv_oracle, errors=CONV2D_ERRORS, tol=TOL, gpu_tol=GPU_TOL),
    OpInfo("conv3d", (conv.CONV3D,), lambda g, x, w, desc: g.conv3d(x, w, desc), _conv_samples(CONV3D_CASES),
           conv_oracle, errors=CONV3D_ERRORS, tol=TOL, gpu_tol=GPU_TOL),
    OpInfo("depthwise_conv2d", (conv.DEPTHWISE_CONV2D,), lambda g, x, w, desc: g.depthwise_conv2d(x, w, desc),
           _conv_samples(DEPTHWISE_CASES), depthwise_oracle, errors=DEPTHWISE_ERRORS, tol=TOL, gpu_tol=GPU_TOL),
    OpInfo("conv_transpose2d", (conv.CONV_TRANSPOSE2D,),
           lambda g, x, w, desc, output_shape: g.conv_transpose2d(x, w, output_shape, desc), _transpose_samples,
           conv_transpose_oracle, errors=TRANSPOSE_ERRORS, tol=TOL, gpu_tol=GPU_TOL),
]
