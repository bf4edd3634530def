"""Records for the pooling gradients: avg/L2-norm gradient ops, and the gradients of every pooling op
(``g.gradients``) on every forward sample.

The oracle is a NumPy loop over output positions and window offsets, as ``records_pooling.np_pool``,
that sends each output's gradient to its window: max to the first maximum among the source
elements, avg divided by the window's count, L2 norm times ``x / y``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import pooling_grad as pg
from opgraph.ops import pooling_indices as pi
from opgraph.ops.conv import PaddingStyle, TensorLayout
from opgraph.ops.pooling import Pooling2dDescriptor, Pooling4dDescriptor

from .opinfo import ErrorCase, OpInfo, Sample, rand
from .records_conv import pad_pair
from .records_pooling import POOL2D_CASES, POOL4D_CASES, _out_size, np_pool

TOL = {torch.float16: (1e-2, 1e-2)}
P2, P4 = Pooling2dDescriptor, Pooling4dDescriptor


def np_pool_grad(x: np.ndarray, gy: np.ndarray, kind: str, kernel: tuple[int, ...], strides: tuple[int, ...],
                 dilations: tuple[int, ...], explicit: list[tuple[int, int]], style: PaddingStyle,
                 ceil_mode: bool, include_pad: bool) -> np.ndarray:
    """d sum(pool(x) * gy) / dx over the len(kernel) innermost dims, in float64."""
    n = len(kernel)
    sizes = x.shape[-n:]
    pads = [pad_pair(style, sizes[i], kernel[i], strides[i], dilations[i], explicit[i]) for i in range(n)]
    outs = [_out_size(sizes[i], kernel[i], strides[i], dilations[i], *pads[i], ceil_mode) for i in range(n)]
    x, gy = x.astype(np.float64), gy.astype(np.float64)
    y = np_pool(x, kind, kernel, strides, dilations, explicit, style, ceil_mode, include_pad)
    dx = np.zeros_like(x)
    for o in np.ndindex(*outs):
        g = gy[(Ellipsis, *o)]
        inside, count = [], 0
        for j in np.ndindex(*kernel):
            pos = tuple(o[i] * strides[i] - pads[i][0] + j[i] * dilations[i] for i in range(n))
            if all(0 <= pos[i] < sizes[i] for i in range(n)):
                inside.append(pos)
            in_pad = all(-pads[i][0] <= pos[i] < sizes[i] + pads[i][1] for i in range(n))
            count += in_pad if include_pad else (pos in inside)
        taken = np.zeros(x.shape[:-n], bool)
        for pos in inside:
            v = x[(Ellipsis, *pos)]
            if kind == "max":
                first = (v == y[(Ellipsis, *o)]) & ~taken  # the first maximum in window order
                dx[(Ellipsis, *pos)] += np.where(first, g, 0.0)
                taken |= first
            elif kind == "avg":
                dx[(Ellipsis, *pos)] += g / count
            else:
                yo = y[(Ellipsis, *o)]
                dx[(Ellipsis, *pos)] += np.where(yo > 0, g * v / np.where(yo > 0, yo, 1.0), 0.0)
    return dx


def _args(desc: Any, two_d: bool) -> tuple[Any, ...]:
    if two_d:
        return ((desc.kernel_height, desc.kernel_width), (desc.stride_in_y, desc.stride_in_x),
                (desc.dilation_rate_in_y, desc.dilation_rate_in_x),
                [(desc.padding_top, desc.padding_bottom), (desc.padding_left, desc.padding_right)])
    v = desc.padding_values
    return desc.kernel_sizes, desc.strides, desc.dilation_rates, [(v[2 * i], v[2 * i + 1]) for i in range(4)]


def pool_grad_oracle(x: np.ndarray, gy: np.ndarray, kind: str, desc: Any) -> np.ndarray:
    two_d = isinstance(desc, Pooling2dDescriptor)
    cl = two_d and desc.data_layout is TensorLayout.NHWC
    if cl:
        x, gy = x.transpose(0, 3, 1, 2), gy.transpose(0, 3, 1, 2)
    dx = np_pool_grad(np.asarray(x, np.float64), np.asarray(gy, np.float64), kind, *_args(desc, two_d),
                      desc.padding_style, desc.ceil_mode, desc.include_zero_pad_to_average)
    return dx.transpose(0, 2, 3, 1) if cl else dx


def _floats(v: Any) -> np.ndarray:
    return np.asarray(v.float() if isinstance(v, torch.Tensor) else v, dtype=np.float64)


def _result_shape(x: Any, desc: Any) -> tuple[int, ...]:
    g = og.Graph()
    method = "avg_pool2d" if isinstance(desc, Pooling2dDescriptor) else "avg_pool4d"
    return tuple(getattr(g, method)(g.placeholder(tuple(x.shape), og.float32), desc).shape)


# full windows that PyTorch's avg_pool2d backward computes (padding counted in the average)
EXTRA2D = [("f64-nhwc-include_pad-torch-kernel", P2(3, 3, 2, 2, padding_left=1, padding_right=1, padding_top=1,
                                                    padding_bottom=1, include_zero_pad_to_average=True,
                                                    data_layout=TensorLayout.NHWC), (2, 7, 9, 3), np.float64)]


def _samples(two_d: bool) -> Any:
    """(incoming gradient, source); gradients of max pooling see no ties (distinct random values)."""

    def samples(rng: np.random.Generator) -> list[Sample]:
        out = []
        for label, d, shape, dt in [*POOL2D_CASES, *EXTRA2D] if two_d else POOL4D_CASES:
            x = rand(rng, shape, dt)
            out.append(Sample([rand(rng, _result_shape(x, d), dt), x], {"desc": d}, label))
        return out

    return samples


def _gradient_record(kind: str, two_d: bool, op: Any, errors: list[ErrorCase]) -> OpInfo:
    method = f"{'l2_norm' if kind == 'l2' else kind}_pool{'2' if two_d else '4'}d_gradient"
    return OpInfo(method, (op,), lambda g, gy, x, desc: getattr(g, method)(gy, x, desc), _samples(two_d),
                  lambda gy, x, desc: pool_grad_oracle(_floats(x), _floats(gy), kind, desc), errors=errors,
                  tol=TOL)


def _vjp_record(kind: str, two_d: bool, ops: tuple[Any, ...]) -> OpInfo:
    method = f"{'l2_norm' if kind == 'l2' else kind}_pool{'2' if two_d else '4'}d"

    def build(g: og.Graph, gy: og.Tensor, x: og.Tensor, desc: Any) -> og.Tensor:
        return g.gradients(g.reduce_sum(getattr(g, method)(x, desc) * gy), [x])[x]

    return OpInfo(f"{method}-gradients", ops, build, _samples(two_d),
                  lambda gy, x, desc: pool_grad_oracle(_floats(x), _floats(gy), kind, desc), tol=TOL)


def _errors(method: str, two_d: bool) -> list[ErrorCase]:
    d = P2(2, 2, 2, 2) if two_d else P4((1, 1, 2, 2), 2)
    other = P4((1, 1, 2, 2), 2) if two_d else P2(2, 2, 2, 2)
    ph = lambda g, s, t=og.float32: g.placeholder(s, t)
    return [
        ErrorCase(lambda g: getattr(g, method)(ph(g, (1, 1, 3, 2)), ph(g, (1, 1, 4, 4)), d), og.ShapeError,
                  "incoming gradient", "gradient-shape"),
        ErrorCase(lambda g: getattr(g, method)(ph(g, (1, 1, 2, 2)), ph(g, (1, 1, 4, 4), og.float64), d),
                  og.DTypeError, "one dtype", "dtype-mismatch"),
        ErrorCase(lambda g: getattr(g, method)(ph(g, (1, 1, 2, 2)), ph(g, (1, 1, 4, 4)), other),
                  og.AttributeValueError, "Descriptor", "wrong-descriptor"),
    ]


RECORDS = [
    _gradient_record("avg", True, pg.AVG_POOL2D_GRADIENT, _errors("avg_pool2d_gradient", True)),
    _gradient_record("avg", False, pg.AVG_POOL4D_GRADIENT, _errors("avg_pool4d_gradient", False)),
    _gradient_record("l2", True, pg.L2_NORM_POOL2D_GRADIENT, _errors("l2_norm_pool2d_gradient", True)),
    _gradient_record("l2", False, pg.L2_NORM_POOL4D_GRADIENT, _errors("l2_norm_pool4d_gradient", False)),
    _vjp_record("avg", True, (pg.AVG_POOL2D_GRADIENT,)),
    _vjp_record("avg", False, (pg.AVG_POOL4D_GRADIENT,)),
    _vjp_record("l2", True, (pg.L2_NORM_POOL2D_GRADIENT,)),
    _vjp_record("l2", False, (pg.L2_NORM_POOL4D_GRADIENT,)),
    _vjp_record("max", True, (pi.MAX_POOL2D_RETURN_INDICES, pi.MAX_POOL2D_GRADIENT)),
    _vjp_record("max", False, (pi.MAX_POOL4D_RETURN_INDICES, pi.MAX_POOL4D_GRADIENT)),
]
