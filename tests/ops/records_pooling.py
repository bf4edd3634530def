"""Records for pooling: max/avg/L2-norm over 2-D (NCHW/NHWC) and over the 4 innermost dims.

The oracle is a NumPy loop over output positions and window offsets that decides, offset by offset,
whether an element is in the source, in the padding or past it: the MPSGraph definitions written
out, sharing no code with opgraph (padding from ``records_conv.pad_pair``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import pooling as pl
from opgraph.ops.conv import PaddingStyle, TensorLayout
from opgraph.ops.pooling import Pooling2dDescriptor, Pooling4dDescriptor

from .opinfo import ErrorCase, OpInfo, Sample, rand
from .records_conv import pad_pair

TOL = {torch.float16: (4e-3, 4e-3)}
E, SAME, LOWER, VALID = (PaddingStyle.EXPLICIT, PaddingStyle.TF_SAME, PaddingStyle.ONNX_SAME_LOWER,
                         PaddingStyle.TF_VALID)


def _out_size(size: int, k: int, s: int, d: int, before: int, after: int, ceil_mode: bool) -> int:
    span = size + before + after - (d * (k - 1) + 1)
    if not ceil_mode:
        return span // s + 1
    out = math.ceil(span / s) + 1
    return out - 1 if (out - 1) * s >= size + before else out  # no window may start in the after-padding


def np_pool(x: np.ndarray, kind: str, kernel: tuple[int, ...], strides: tuple[int, ...],
            dilations: tuple[int, ...], explicit: list[tuple[int, int]], style: PaddingStyle, ceil_mode: bool,
            include_pad: bool) -> np.ndarray:
    """Pool the len(kernel) innermost dims of ``x`` in float64, one output position at a time."""
    n = len(kernel)
    sizes = x.shape[-n:]
    pads = [pad_pair(style, sizes[i], kernel[i], strides[i], dilations[i], explicit[i]) for i in range(n)]
    outs = [_out_size(sizes[i], kernel[i], strides[i], dilations[i], *pads[i], ceil_mode) for i in range(n)]
    x = x.astype(np.float64)
    res = np.empty(x.shape[:-n] + tuple(outs))
    for o in np.ndindex(*outs):
        best = np.full(x.shape[:-n], -np.inf)
        total = np.zeros(x.shape[:-n])
        count = 0
        for j in np.ndindex(*kernel):
            pos = [o[i] * strides[i] - pads[i][0] + j[i] * dilations[i] for i in range(n)]
            inside = all(0 <= pos[i] < sizes[i] for i in range(n))
            in_pad = all(-pads[i][0] <= pos[i] < sizes[i] + pads[i][1] for i in range(n))
            if inside:
                v = x[(Ellipsis, *pos)]
                best = np.maximum(best, v)
                total = total + (v * v if kind == "l2" else v)
            count += in_pad if include_pad else inside
        if kind == "max":
            res[(Ellipsis, *o)] = best
        elif kind == "avg":
            res[(Ellipsis, *o)] = total / count if count else np.nan
        else:
            res[(Ellipsis, *o)] = np.sqrt(total)
    return res


def pool2d_oracle(kind: str) -> Any:
    def oracle(x: np.ndarray, desc: Pooling2dDescriptor) -> np.ndarray:
        cl = desc.data_layout is TensorLayout.NHWC
        xc = x.transpose(0, 3, 1, 2) if cl else x
        y = np_pool(xc, kind, (desc.kernel_height, desc.kernel_width), (desc.stride_in_y, desc.stride_in_x),
                    (desc.dilation_rate_in_y, desc.dilation_rate_in_x),
                    [(desc.padding_top, desc.padding_bottom), (desc.padding_left, desc.padding_right)],
                    desc.padding_style, desc.ceil_mode, desc.include_zero_pad_to_average)
        return y.transpose(0, 2, 3, 1) if cl else y

    return oracle


def pool4d_oracle(kind: str) -> Any:
    def oracle(x: np.ndarray, desc: Pooling4dDescriptor) -> np.ndarray:
        v = desc.padding_values
        return np_pool(x, kind, desc.kernel_sizes, desc.strides, desc.dilation_rates,
                       [(v[0], v[1]), (v[2], v[3]), (v[4], v[5]), (v[6], v[7])], desc.padding_style,
                       desc.ceil_mode, desc.include_zero_pad_to_average)

    return oracle


P2, P4 = Pooling2dDescriptor, Pooling4dDescriptor
NHWC = dict(data_layout=TensorLayout.NHWC)
POOL2D_CASES: list[tuple[str, Pooling2dDescriptor, tuple[int, ...], Any]] = [
    ("f32-explicit-sym", P2(3, 3, 2, 2, padding_left=1, padding_right=1, padding_top=1, padding_bottom=1),
     (2, 3, 7, 8), np.float32),
    ("f64-nhwc-explicit-asym-dil", P2(3, 2, stride_in_x=2, dilation_rate_in_y=2, padding_right=2, padding_top=1,
                                      **NHWC), (1, 7, 8, 2), np.float64),
    ("f32-tf_same-s2", P2(3, 3, 2, 2, padding_style=SAME), (1, 2, 7, 6), np.float32),
    ("f32-tf_same-s1-symmetric", P2(3, 3, padding_style=SAME), (2, 2, 5, 6), np.float32),
    ("f64-nhwc-onnx_same_lower-include_pad", P2(2, 3, 3, 2, padding_style=LOWER, include_zero_pad_to_average=True,
                                                **NHWC), (2, 6, 8, 3), np.float64),
    ("f16-tf_valid-s2", P2(2, 2, 2, 2, padding_style=VALID), (2, 2, 6, 7), np.float16),
    ("f64-ceil-include_pad", P2(3, 3, 2, 2, padding_left=1, padding_bottom=1, ceil_mode=True,
                                include_zero_pad_to_average=True), (1, 2, 8, 7), np.float64),
    ("f32-ceil-exclude_pad", P2(2, 2, 3, 3, padding_left=1, ceil_mode=True), (1, 1, 7, 8), np.float32),
    ("f64-tf_same-include_pad-dil2", P2(3, 2, 1, 2, dilation_rate_in_x=2, padding_style=SAME,
                                        include_zero_pad_to_average=True), (1, 2, 7, 9), np.float64),
    ("f32-nhwc-ceil-dil2", P2(2, 3, 2, 2, dilation_rate_in_x=2, dilation_rate_in_y=2, padding_top=1,
                              ceil_mode=True, **NHWC), (1, 8, 9, 2), np.float32),
]
POOL4D_CASES: list[tuple[str, Pooling4dDescriptor, tuple[int, ...], Any]] = [
    ("f32-explicit-asym", P4((2, 1, 3, 2), (1, 1, 2, 2), padding_values=(1, 0, 0, 0, 1, 1, 0, 1)),
     (3, 5, 4, 6), np.float32),
    ("f64-rank5-tf_same-include_pad-dil", P4((1, 2, 2, 3), (1, 2, 1, 2), (1, 1, 2, 1), padding_style=SAME,
                                             include_zero_pad_to_average=True), (2, 3, 5, 4, 6), np.float64),
    ("f32-onnx_same_lower-s2", P4((2, 2, 2, 2), 2, padding_style=LOWER), (3, 5, 4, 5), np.float32),
    ("f64-tf_valid", P4((3, 1, 2, 2), (2, 1, 1, 2), padding_style=VALID), (5, 2, 4, 6), np.float64),
    ("f64-ceil-exclude_pad", P4((2, 2, 1, 3), (2, 1, 1, 2), padding_values=(0, 1, 1, 0, 0, 0, 1, 0),
                                ceil_mode=True), (4, 4, 3, 6), np.float64),
    ("f64-ceil-include_pad-dil2", P4((1, 2, 2, 2), (1, 2, 2, 1), (1, 2, 1, 2), (0, 0, 1, 0, 1, 1, 0, 1),
                                     ceil_mode=True, include_zero_pad_to_average=True), (2, 7, 6, 6), np.float64),
    ("f16-as-2d", P4((1, 1, 2, 2), (1, 1, 2, 2)), (2, 3, 4, 6), np.float16),
]


def _samples(cases: list[tuple[str, Any, tuple[int, ...], Any]]) -> Any:
    def samples(rng: np.random.Generator) -> list[Sample]:
        return [Sample([rand(rng, shape, dt)], {"desc": d}, label) for label, d, shape, dt in cases]

    return samples


def _ph(g: og.Graph, shape: tuple[int, ...], dtype: Any = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


def _errors2d(method: str) -> list[ErrorCase]:
    def call(shape: tuple[int, ...], d: Any, dtype: Any = og.float32) -> Any:
        return lambda g: getattr(g, method)(_ph(g, shape, dtype), d)

    return [
        ErrorCase(call((1, 1, 4, 4, 4), P2(2, 2)), og.ShapeError, "rank 4", "rank"),
        ErrorCase(call((1, 1, 4, 4), P2(2, 2), og.int32), og.DTypeError, "int32", "int"),
        ErrorCase(call((1, 1, 2, 4), P2(3, 3)), og.ShapeError, "larger than the padded source", "window-too-large"),
        ErrorCase(call((1, 1, 4, 4), P4((1, 1, 2, 2))), og.AttributeValueError, "Pooling2dDescriptor",
                  "wrong-descriptor"),
    ]


def _errors4d(method: str) -> list[ErrorCase]:
    def call(shape: tuple[int, ...], d: Any, dtype: Any = og.float32) -> Any:
        return lambda g: getattr(g, method)(_ph(g, shape, dtype), d)

    return [
        ErrorCase(call((4, 4, 4), P4((1, 2, 2, 2))), og.ShapeError, "rank >= 4", "rank"),
        ErrorCase(call((1, 1, 4, 4), P4((1, 1, 2, 2)), og.int64), og.DTypeError, "int64",
                  "int"),
        ErrorCase(call((1, 1, 4, 4), P4((2, 1, 2, 2))), og.ShapeError, "larger than the padded source",
                  "window-too-large"),
        ErrorCase(call((1, 1, 4, 4), P2(2, 2)), og.AttributeValueError, "Pooling4dDescriptor", "wrong-descriptor"),
    ]


DESCRIPTOR_ERRORS = [
    ErrorCase(lambda g: P2(0, 2), og.AttributeValueError, "Pooling2dDescriptor.kernel_width", "kernel-0"),
    ErrorCase(lambda g: P2(2, 2, stride_in_y=0), og.AttributeValueError, "Pooling2dDescriptor.stride_in_y",
              "stride-0"),
    ErrorCase(lambda g: P2(2, 2, dilation_rate_in_x=-1), og.AttributeValueError,
              "Pooling2dDescriptor.dilation_rate_in_x", "negative-dilation"),
    ErrorCase(lambda g: P2(2, 2, padding_top=-1), og.AttributeValueError, "Pooling2dDescriptor.padding_top",
              "negative-pad"),
    ErrorCase(lambda g: P2(2, 2, data_layout=TensorLayout.NCDHW), og.AttributeValueError,
              "Pooling2dDescriptor.data_layout", "layout"),
    ErrorCase(lambda g: P2(2, 2, ceil_mode=1), og.AttributeValueError,  # type: ignore[arg-type]
              "Pooling2dDescriptor.ceil_mode", "ceil_mode-int"),
    ErrorCase(lambda g: P2(2, 2, padding_style=3), og.AttributeValueError,  # type: ignore[arg-type]
              "Pooling2dDescriptor.padding_style", "style-int"),
]
DESCRIPTOR4D_ERRORS = [
    ErrorCase(lambda g: P4((1, 2, 3)), og.AttributeValueError, "Pooling4dDescriptor.kernel_sizes", "kernel-length"),
    ErrorCase(lambda g: P4((1, 1, 2, 2), padding_values=(0, 0, 0, 0)), og.AttributeValueError,
              "Pooling4dDescriptor.padding_values", "padding-length"),
    ErrorCase(lambda g: P4((1, 1, 2, 2), dilation_rates=(1, 1, 0, 1)), og.AttributeValueError,
              "Pooling4dDescriptor.dilation_rates", "dilation-0"),
    ErrorCase(lambda g: P4((1, 1, 2, 2), strides=(1, 1, -2, 1)), og.AttributeValueError,
              "Pooling4dDescriptor.strides", "negative-stride"),
    ErrorCase(lambda g: P4((1, 1, 2, 2), include_zero_pad_to_average=None), og.AttributeValueError,  # type: ignore[arg-type]
              "Pooling4dDescriptor.include_zero_pad_to_average", "include-none"),
]


def _record(name: str, op: Any, kind: str, two_d: bool, errors: list[ErrorCase]) -> OpInfo:
    return OpInfo(name, (op,), lambda g, x, desc: getattr(g, name)(x, desc),
                  _samples(POOL2D_CASES if two_d else POOL4D_CASES),
                  pool2d_oracle(kind) if two_d else pool4d_oracle(kind), errors=errors, tol=TOL)


RECORDS = [
    _record("max_pool2d", pl.MAX_POOL2D, "max", True, _errors2d("max_pool2d") + DESCRIPTOR_ERRORS),
    _record("avg_pool2d", pl.AVG_POOL2D, "avg", True, _errors2d("avg_pool2d")),
    _record("l2_norm_pool2d", pl.L2_NORM_POOL2D, "l2", True, _errors2d("l2_norm_pool2d")),
    _record("max_pool4d", pl.MAX_POOL4D, "max", False, _errors4d("max_pool4d") + DESCRIPTOR4D_ERRORS),
    _record("avg_pool4d", pl.AVG_POOL4D, "avg", False, _errors4d("avg_pool4d")),
    _record("l2_norm_pool4d", pl.L2_NORM_POOL4D, "l2", False, _errors4d("l2_norm_pool4d")),
]
