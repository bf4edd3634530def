"""Records for the convolution gradients: the gradient ops themselves, and the gradients of conv2d,
conv3d, depthwise_conv2d and conv_transpose2d (``g.gradients``) on every forward sample.

The oracle is torch.autograd in float64 through the forward written in ``records_conv`` (padding
from its own ``pad_pair``), so it shares no code with opgraph's gradient ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import opgraph as og
from opgraph.ops import conv_grad as cg
from opgraph.ops.conv import Conv2dDescriptor, Conv3dDescriptor, DepthwiseConv2dDescriptor

from .opinfo import ErrorCase, OpInfo, Sample, rand
from .records_conv import (
    CHANNELS_LAST,
    CONV2D_CASES,
    CONV3D_CASES,
    DEPTHWISE_CASES,
    KERNEL_FIRST,
    _cf,
    _layout,
    _padded,
    _transpose_samples,
    _weights_oi,
    _wlayout,
    explicit_pairs,
    pad_pair,
)

TOL = {torch.float16: (2e-2, 2e-2), torch.float32: (1e-4, 1e-4)}
# cuDNN runs float32 convolutions in TF32 by default; weight gradients sum many such products
GPU_TOL = {**TOL, torch.float32: (1e-2, 1e-2)}
CASES = {"conv2d": CONV2D_CASES, "conv3d": CONV3D_CASES, "depthwise_conv2d": DEPTHWISE_CASES}


# ---- oracle ------------------------------------------------------------------------------------
def torch_conv(kind: str, xt: torch.Tensor, wt: torch.Tensor, desc: Any) -> torch.Tensor:
    """The forward on channels-first float64 tensors with (O, I, k...) weights; differentiable."""
    pads = [pad_pair(desc.padding_style, xt.shape[2 + i], wt.shape[2 + i], desc.strides[i], desc.dilation_rates[i],
                     p) for i, p in enumerate(explicit_pairs(desc))]
    xp = _padded(xt, pads)
    if kind == "depthwise_conv2d":  # channel c with filter m gives result channel c * M + m
        return torch.cat([F.conv2d(xp[:, c:c + 1], wt[m, c][None, None], None, desc.strides, 0, desc.dilation_rates)
                          for c in range(wt.shape[1]) for m in range(wt.shape[0])], dim=1)
    fn = F.conv2d if xt.dim() == 4 else F.conv3d
    return fn(xp, wt, None, desc.strides, 0, desc.dilation_rates, desc.groups)


def _to_layout(t: torch.Tensor, channels_last: bool) -> np.ndarray:
    return (t.permute(0, *range(2, t.dim()), 1) if channels_last else t).detach().numpy()


def _to_wlayout(t: torch.Tensor, kernel_first: bool) -> np.ndarray:
    return (t.permute(*range(2, t.dim()), 1, 0) if kernel_first else t).detach().numpy()


def conv_grads(kind: str, x: np.ndarray, w: np.ndarray, dy: np.ndarray, desc: Any) -> tuple[np.ndarray, np.ndarray]:
    """(d source, d weights) of ``sum(conv(x, w) * dy)`` in the descriptor's layouts."""
    cl, kf = desc.data_layout in CHANNELS_LAST, desc.weights_layout in KERNEL_FIRST
    xt, wt = _cf(x, cl).clone().requires_grad_(), _weights_oi(w, kf).clone().requires_grad_()
    dx, dw = torch.autograd.grad(torch_conv(kind, xt, wt, desc), [xt, wt], _cf(dy, cl))
    return _to_layout(dx, cl), _to_wlayout(dw, kf)


def _out_shape(kind: str, x: Any, w: Any, desc: Any) -> tuple[int, ...]:
    cl, kf = desc.data_layout in CHANNELS_LAST, desc.weights_layout in KERNEL_FIRST
    y = torch_conv(kind, torch.zeros(_cf(np.zeros(x.shape), cl).shape, dtype=torch.float64),
                   torch.zeros(_weights_oi(np.zeros(w.shape), kf).shape, dtype=torch.float64), desc)
    return tuple(_layout(tuple(y.shape), cl))


def _floats(v: Any) -> np.ndarray:
    return np.asarray(v.float() if isinstance(v, torch.Tensor) else v, dtype=np.float64)


# ---- samples -----------------------------------------------------------------------------------
def _gradient_samples(kind: str, wrt: str) -> Any:
    """(incoming gradient, weights | source[, shape reference]); every third sample by reference."""

    def samples(rng: np.random.Generator) -> list[Sample]:
        out = []
        for n, (label, d, xs, ws, dt) in enumerate(CASES[kind]):
            x = rand(rng, _layout(xs, d.data_layout in CHANNELS_LAST), dt)
            w = rand(rng, _wlayout(ws, d.weights_layout in KERNEL_FIRST), dt, -1, 1)
            dy = rand(rng, _out_shape(kind, x, w, d), dt)
            target = x if wrt == "data" else w
            ins = [dy, w if wrt == "data" else x]
            if n % 3 == 2:
                ins.append(np.zeros(target.shape, np.float32))
                label += "-by-reference"
            out.append(Sample(ins, {"desc": d, "output_shape": tuple(target.shape)}, label))
        return out

    return samples


def _gradient_oracle(kind: str, wrt: str) -> Any:
    def oracle(dy: Any, other: Any, *ref: Any, desc: Any, output_shape: tuple[int, ...]) -> np.ndarray:
        if wrt == "data":
            return conv_grads(kind, np.zeros(output_shape), _floats(other), _floats(dy), desc)[0]
        return conv_grads(kind, _floats(other), np.zeros(output_shape), _floats(dy), desc)[1]

    return oracle


def _gradient_build(kind: str, wrt: str) -> Any:
    method = f"{kind}_{wrt}_gradient"

    def build(g: og.Graph, dy: og.Tensor, other: og.Tensor, *ref: og.Tensor, desc: Any,
              output_shape: tuple[int, ...]) -> og.Tensor:
        return getattr(g, method)(dy, other, ref[0] if ref else output_shape, desc)  # type: ignore[no-any-return]

    return build


def _vjp_samples(kind: str) -> Any:
    """(source, weights, cotangent of the result)."""

    def samples(rng: np.random.Generator) -> list[Sample]:
        out = []
        for label, d, xs, ws, dt in CASES[kind]:
            x = rand(rng, _layout(xs, d.data_layout in CHANNELS_LAST), dt)
            w = rand(rng, _wlayout(ws, d.weights_layout in KERNEL_FIRST), dt, -1, 1)
            out.append(Sample([x, w, rand(rng, _out_shape(kind, x, w, d), dt)], {"desc": d}, label))
        return out

    return samples


def _vjp_build(kind: str) -> Any:
    def build(g: og.Graph, x: og.Tensor, w: og.Tensor, c: og.Tensor, desc: Any) -> list[og.Tensor]:
        y = getattr(g, kind)(x, w, desc)
        grads = g.gradients(g.reduce_sum(y * c), [x, w])
        return [grads[x], grads[w]]

    return build


def _vjp_oracle(kind: str) -> Any:
    return lambda x, w, c, desc: conv_grads(kind, _floats(x), _floats(w), _floats(c), desc)


# ---- conv_transpose2d: y = the data gradient of conv2d; oracle through autograd twice --------
def _transpose_torch(xt: torch.Tensor, wt: torch.Tensor, desc: Any, size: list[int]) -> torch.Tensor:
    r = torch.zeros(xt.shape[0], wt.shape[1] * desc.groups, *size, dtype=torch.float64, requires_grad=True)
    y = torch_conv("conv2d", r, wt, desc)
    return torch.autograd.grad(y, r, grad_outputs=xt, create_graph=True)[0]


def _transpose_size(x: np.ndarray, w: np.ndarray, desc: Any, output_shape: Any) -> list[int]:
    cl = desc.data_layout in CHANNELS_LAST
    if output_shape is not None:
        return list(output_shape[1:3] if cl else output_shape[2:])
    g = og.Graph()
    y = g.conv_transpose2d(g.placeholder(x.shape, og.float64), g.placeholder(w.shape, og.float64), None, desc)
    return list(y.shape[1:3] if cl else y.shape[2:])  # type: ignore[arg-type]


def _transpose_vjp_samples(rng: np.random.Generator) -> list[Sample]:
    out = []
    for s in _transpose_samples(rng):
        x, w = s.inputs
        d, shape = s.kwargs["desc"], s.kwargs["output_shape"]
        size = _transpose_size(np.asarray(x), np.asarray(w), d, shape)
        cl = d.data_layout in CHANNELS_LAST
        c_out = (w.shape[-2] if d.weights_layout in KERNEL_FIRST else w.shape[1]) * d.groups
        res = (x.shape[0], *size, c_out) if cl else (x.shape[0], c_out, *size)
        out.append(Sample([x, w, rand(rng, res, np.asarray(x).dtype)], s.kwargs, s.desc))
    return out


def _transpose_vjp_build(g: og.Graph, x: og.Tensor, w: og.Tensor, c: og.Tensor, desc: Any,
                         output_shape: Any) -> list[og.Tensor]:
    grads = g.gradients(g.reduce_sum(g.conv_transpose2d(x, w, output_shape, desc) * c), [x, w])
    return [grads[x], grads[w]]


def _transpose_vjp_oracle(x: Any, w: Any, c: Any, desc: Any, output_shape: Any) -> tuple[np.ndarray, np.ndarray]:
    cl, kf = desc.data_layout in CHANNELS_LAST, desc.weights_layout in KERNEL_FIRST
    xt, wt = _cf(_floats(x), cl).clone().requires_grad_(), _weights_oi(_floats(w), kf).clone().requires_grad_()
    y = _transpose_torch(xt, wt, desc, _transpose_size(_floats(x), _floats(w), desc, output_shape))
    dx, dw = torch.autograd.grad(y, [xt, wt], _cf(_floats(c), cl))
    return _to_layout(dx, cl), _to_wlayout(dw, kf)


# ---- errors ------------------------------------------------------------------------------------
def _ph(g: og.Graph, shape: tuple[int, ...], dtype: Any = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


ERRORS_DATA = [
    ErrorCase(lambda g: g.conv2d_data_gradient(_ph(g, (1, 4, 3, 3)), _ph(g, (4, 3, 3, 3)), (1, 3, 6, 6)),
              og.ShapeError, "incoming gradient", "gradient-shape"),
    ErrorCase(lambda g: g.conv2d_data_gradient(_ph(g, (1, 4, 3, 3)), _ph(g, (4, 3, 3, 3)), (1, 3, 5)),
              og.ShapeError, "rank 4", "output_shape-rank"),
    ErrorCase(lambda g: g.conv2d_data_gradient(_ph(g, (1, 4, 3, 3)), _ph(g, (4, 3, 3, 3)), (1, 2, 5, 5)),
              og.ShapeError, "the source has 2 channels", "channels"),
    ErrorCase(lambda g: g.conv2d_data_gradient(_ph(g, (1, 4, 3, 3)), _ph(g, (4, 3, 3, 3)), (1, -3, 5, 5)),
              og.AttributeValueError, "output_shape", "negative"),
    ErrorCase(lambda g: g.conv2d_data_gradient(_ph(g, (1, 4, 3, 3), og.int32), _ph(g, (4, 3, 3, 3), og.int32),
                                               (1, 3, 5, 5)), og.DTypeError, "int32", "int"),
    ErrorCase(lambda g: g.conv2d_data_gradient(_ph(g, (1, 4, 3, 3)), _ph(g, (4, 3, 3, 3)), (1, 3, 5, 5),
                                               Conv3dDescriptor()), og.AttributeValueError, "Conv2dDescriptor",
              "wrong-descriptor"),
]
ERRORS_WEIGHTS = [
    ErrorCase(lambda g: g.conv2d_weights_gradient(_ph(g, (1, 4, 3, 3)), _ph(g, (1, 3, 5, 5)), (4, 3, 2, 2)),
              og.ShapeError, "incoming gradient", "gradient-shape"),
    ErrorCase(lambda g: g.conv2d_weights_gradient(_ph(g, (1, 4, 3, 3)), _ph(g, (1, 3, 5, 5)), (4, 2, 3, 3)),
              og.ShapeError, "the source has 3 channels", "channels"),
    ErrorCase(lambda g: g.conv2d_weights_gradient(_ph(g, (1, 4, 3, 3)), _ph(g, (1, 3, 5, 5)),
                                                  _ph(g, (4, 3, 3))), og.ShapeError, "rank 4", "reference-rank"),
    ErrorCase(lambda g: g.conv2d_weights_gradient(_ph(g, (1, 4, 3, 3)), _ph(g, (1, 3, 5, 5), og.float64),
                                                  (4, 3, 3, 3)), og.DTypeError, "one dtype", "dtype-mismatch"),
]
ERRORS_3D = [
    ErrorCase(lambda g: g.conv3d_data_gradient(_ph(g, (1, 2, 2, 2, 2)), _ph(g, (2, 2, 2, 2, 2)), (1, 2, 3, 3, 3),
                                               Conv2dDescriptor()), og.AttributeValueError, "Conv3dDescriptor",
              "wrong-descriptor"),
    ErrorCase(lambda g: g.conv3d_weights_gradient(_ph(g, (1, 2, 2, 2, 2)), _ph(g, (1, 2, 3, 3, 3)), (2, 2, 3, 3, 3)),
              og.ShapeError, "incoming gradient", "gradient-shape"),
]
ERRORS_DEPTHWISE = [
    ErrorCase(lambda g: g.depthwise_conv2d_data_gradient(_ph(g, (1, 5, 3, 3)), _ph(g, (2, 3, 3, 3)), (1, 3, 5, 5)),
              og.ShapeError, "incoming gradient", "gradient-shape"),
    ErrorCase(lambda g: g.depthwise_conv2d_weights_gradient(_ph(g, (1, 6, 3, 3)), _ph(g, (1, 3, 5, 5)),
                                                            (2, 3, 3, 3), DepthwiseConv2dDescriptor(strides=2)),
              og.ShapeError, "incoming gradient", "stride-mismatch"),
]


def _gradient_record(kind: str, wrt: str, op: Any, errors: list[ErrorCase]) -> OpInfo:
    return OpInfo(f"{kind}_{wrt}_gradient", (op,), _gradient_build(kind, wrt), _gradient_samples(kind, wrt),
                  _gradient_oracle(kind, wrt), errors=errors, tol=TOL, gpu_tol=GPU_TOL)


def _vjp_record(kind: str, ops: tuple[Any, ...]) -> OpInfo:
    return OpInfo(f"{kind}-gradients", ops, _vjp_build(kind), _vjp_samples(kind), _vjp_oracle(kind), tol=TOL,
                  gpu_tol=GPU_TOL)


RECORDS = [
    _gradient_record("conv2d", "data", cg.CONV2D_DATA_GRADIENT, ERRORS_DATA),
    _gradient_record("conv2d", "weights", cg.CONV2D_WEIGHTS_GRADIENT, ERRORS_WEIGHTS),
    _gradient_record("conv3d", "data", cg.CONV3D_DATA_GRADIENT, ERRORS_3D),
    _gradient_record("conv3d", "weights", cg.CONV3D_WEIGHTS_GRADIENT, []),
    _gradient_record("depthwise_conv2d", "data", cg.DEPTHWISE_CONV2D_DATA_GRADIENT, ERRORS_DEPTHWISE),
    _gradient_record("depthwise_conv2d", "weights", cg.DEPTHWISE_CONV2D_WEIGHTS_GRADIENT, []),
    _vjp_record("conv2d", (cg.CONV2D_DATA_GRADIENT, cg.CONV2D_WEIGHTS_GRADIENT)),
    _vjp_record("conv3d", (cg.CONV3D_DATA_GRADIENT, cg.CONV3D_WEIGHTS_GRADIENT)),
    _vjp_record("depthwise_conv2d", (cg.DEPTHWISE_CONV2D_DATA_GRADIENT, cg.DEPTHWISE_CONV2D_WEIGHTS_GRADIENT)),
    OpInfo("conv_transpose2d-gradients", (cg.CONV2D_WEIGHTS_GRADIENT,), _transpose_vjp_build,
           _transpose_vjp_samples, _transpose_vjp_oracle, tol=TOL, gpu_tol=GPU_TOL),
]
