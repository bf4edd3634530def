"""Ops the compiler makes where no kernel generator fuses elementwise work (the CPU): one vendor call for what the
graph spells as several ops (``passes/vendor_fused.py``), after autodiff, so they have no gradient rule.

* ``conv2d_bias``: a 2-D convolution with its per-channel bias added by the call (oneDNN folds it into the
  convolution), where the graph had ``conv2d`` and an ``add`` of the bias reshaped to ``(C, 1, 1)``. conv2d's
  descriptor, NCHW data and OIHW weights only (what ``torch.nn.Conv2d`` makes); its rule and padding are conv2d's.
* ``batch_norm_inference``: ``normalize`` with per-channel (C,) statistics and affine parameters, as PyTorch's
  inference batch norm (one pass over x, eager's values), where the graph reshaped each of the four to
  broadcast along the channel axis.
* ``conv2d_gradients``: a 2-D convolution's data and weights gradients from one ``convolution_backward`` call
  (oneDNN's backward for both), where the graph has ``conv2d_data_gradient`` and ``conv2d_weights_gradient`` of
  one incoming gradient (the data gradient alone is a transposed convolution, which is slower on the CPU); with
  ``bias``, also the bias gradient, where the graph sums that gradient per output channel.
  conv2d's descriptor, NCHW data and OIHW weights only.
* ``batch_norm_backward``: PyTorch's ``native_batch_norm_backward`` in training, ``(dx, dgamma, dbeta)`` from the
  saved mean and inverse standard deviation, one call; made by the PyTorch frontend where no kernels are generated
  (elsewhere its converter spells it with elementwise ops and two sums, which fuse into regions).
* ``batch_norm_update``: PyTorch's ``_native_batch_norm_legit_functional`` in training, the normalised result, the
  batch mean and inverse standard deviation, and the running mean and variance moved by ``momentum`` (the variance
  unbiased), one call where the converter otherwise spells the update with elementwise ops; made by the PyTorch
  frontend where no kernels are generated.
* ``layer_norm_forward`` / ``layer_norm_backward``: PyTorch's ``native_layer_norm`` (the result and the mean and
  inverse standard deviation it saves) and its backward, float32 and float64, one call each; made by the PyTorch
  frontend where no kernels are generated, as ``batch_norm_backward`` is.
* ``threshold_gradient``: ``select(less_equal(x, threshold), 0, g)``, ReLU's gradient as PyTorch's
  decompositions spell ``threshold_backward`` (one pass, where ``less_equal`` and ``select`` make two and the CPU's
  ``torch.where`` is many times slower than a copy: benchmarks/cpu_calls.py). A NaN x passes g, as ``less_equal``
  does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..core.dtype import FLOAT_DTYPES, float32, float64
from ..core.errors import AttributeValueError, DTypeError, ShapeError
from ..core.types import TensorType
from ._rules import expect_arity, expect_dtype, same_dtype
from .batch_norm import BatchNormTrainingAttrs
from .batch_norm_grad import Ones, check_bn_attrs, check_flags, stat_dtype
from .conv import Conv2dDescriptor, TensorLayout, WeightsLayout, _conv_rule, _memo, _pad_for_torch, _pads
from .norm import inference_batch_norm
from .registry import FusionKind, LowerContext, OpDef, attrs


@attrs
class ConvBiasAttrs(Conv2dDescriptor):
    """conv2d's descriptor (NCHW data and OIHW weights only) and the ops it replaced."""

    names: tuple[str, ...] = ()  # introspection only


def _check_names(a: Any) -> None:
    if not isinstance(a.names, tuple) or not all(isinstance(n, str) for n in a.names):
        raise AttributeValueError(f"names must be a tuple of str, got {a.names!r}")


def _check_torch_layouts(a: Conv2dDescriptor) -> None:
    if a.data_layout is not TensorLayout.NCHW or a.weights_layout is not WeightsLayout.OIHW:
        raise AttributeValueError(f"computes NCHW data with OIHW weights, got {a.data_layout.value} and "
                                  f"{a.weights_layout.value}")


def _rule(a: ConvBiasAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    _check_names(a)
    _check_torch_layouts(a)
    expect_arity(ins, 3)
    same_dtype(ins)
    y = _conv_rule(a, ins[:2])
    b, o = ins[2], y.shape[1]
    if b.rank != 1 or (b.shape[0] is not None and o is not None and b.shape[0] != o):
        raise ShapeError(f"bias must be 1-D of length {o}, got shape {b.shape}")
    return y


def _lower(ctx: LowerContext) -> Callable[..., Any]:
    a: ConvBiasAttrs = ctx.attrs
    plan = _memo(lambda sizes, kernel: _pads(a, sizes, kernel))

    def run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        x, padding = _pad_for_torch(x, plan(tuple(x.shape[2:]), tuple(w.shape[2:])))
        return F.conv2d(x, w, b, a.strides, padding, a.dilation_rates, a.groups)

    return run


CONV2D_BIAS = OpDef("conv2d_bias", infer=_rule, lower=_lower, attrs=ConvBiasAttrs, fusion=FusionKind.OPAQUE,
                    differentiable=False,
                    doc="conv2d(x, w) + bias (per output channel) as one vendor call; made by the compiler")

# ---- batch_norm_inference -------------------------------------------------------------------------------
@attrs
class BatchNormInferenceAttrs(BatchNormTrainingAttrs):
    """batch_norm_training's attributes (axis, epsilon, has_gamma, has_beta) and the ops it replaced."""

    names: tuple[str, ...] = ()  # introspection only


def _bn_rule(a: BatchNormInferenceAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    check_flags(has_gamma=a.has_gamma, has_beta=a.has_beta)
    _check_names(a)
    expect_arity(ins, 3 + a.has_gamma + a.has_beta)
    same_dtype(ins)
    x = ins[0]
    check_bn_attrs(a.axis, a.epsilon, x)
    c = x.shape[a.axis]
    for t in ins[1:]:
        if t.rank != 1 or (t.shape[0] is not None and c is not None and t.shape[0] != c):
            raise ShapeError(f"statistics and affine parameters must be 1-D of length {c}, got shape {t.shape}")
    return x


def _bn_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: BatchNormInferenceAttrs = ctx.attrs

    def run(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, *affine: torch.Tensor) -> torch.Tensor:
        return inference_batch_norm(x, mean, var, affine[0] if a.has_gamma else None,
                                    affine[-1] if a.has_beta else None, a.axis, a.epsilon, flat=True)

    return run


BATCH_NORM_INFERENCE = OpDef("batch_norm_inference", infer=_bn_rule, lower=_bn_lower, attrs=BatchNormInferenceAttrs,
                             fusion=FusionKind.OPAQUE, differentiable=False,
                             doc="(x - mean) / sqrt(var + epsilon) * gamma + beta with (C,) statistics along "
                                 "axis, as PyTorch's inference batch norm; made by the compiler")

# ---- conv2d_gradients -------------------------------------------------------------------------------------------
@attrs
class ConvGradientsAttrs(Conv2dDescriptor):
    """conv2d's descriptor (NCHW data and OIHW weights only), whether the bias gradient (the incoming gradient
    summed per output channel) is a third output, and the gradient ops it replaced."""

    bias: bool = False
    names: tuple[str, ...] = ()  # introspection only


def _gradients_rule(a: ConvGradientsAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    _check_names(a)
    check_flags(bias=a.bias)
    _check_torch_layouts(a)
    expect_arity(ins, 3)
    same_dtype(ins)
    grad, x, w = ins
    y = _conv_rule(a, (x, w))
    if grad.rank != y.rank or any(m is not None and n is not None and m != n
                                  for m, n in zip(grad.shape, y.shape, strict=True)):
        raise ShapeError(f"the incoming gradient must have the convolution's shape {y.shape}, got {grad.shape}")
    return (x, w, TensorType((w.shape[0],), w.dtype)) if a.bias else (x, w)


def _gradients_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: ConvGradientsAttrs = ctx.attrs
    plan = _memo(lambda sizes, kernel: _pads(a, sizes, kernel))

    def run(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        sizes = tuple(x.shape[2:])
        pads = plan(sizes, tuple(w.shape[2:]))
        padded, padding = _pad_for_torch(x, pads)  # asymmetric: the gradient of the padded source, cropped
        dx, dw, db = torch.ops.aten.convolution_backward(grad, padded, w, [w.shape[0]] if a.bias else None,
                                                         a.strides, padding, a.dilation_rates, False, [0, 0],
                                                         a.groups, (True, True, a.bias))
        if padded is not x:
            crop = tuple(slice(b, b + n) for n, (b, _) in zip(sizes, pads, strict=True))
            dx = dx[(slice(None), slice(None)) + crop]
        return (dx, dw, db) if a.bias else (dx, dw)

    return run


CONV2D_GRADIENTS = OpDef("conv2d_gradients", infer=_gradients_rule, lower=_gradients_lower, attrs=ConvGradientsAttrs,
                         fusion=FusionKind.OPAQUE, differentiable=False,
                         doc="(data gradient, weights gradient) of conv2d(x, w) for the incoming gradient, as one "
                             "vendor call; made by the compiler")


# ---- batch_norm_backward ----------------------------------------------------------------------------------------
@attrs
class BatchNormBackwardAttrs:
    has_gamma: bool = False


def _bn_backward_rule(a: BatchNormBackwardAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    check_flags(has_gamma=a.has_gamma)
    expect_arity(ins, 4 + a.has_gamma)
    gy, x, *stats = ins
    for t in ins:
        expect_dtype(t, FLOAT_DTYPES)
    st = stat_dtype(x.dtype)
    if gy.dtype is not x.dtype or any(t.dtype is not st for t in stats):
        raise DTypeError(f"expects the incoming gradient in x's dtype {x.dtype.name} and mean, inverse standard "
                         f"deviation and gamma in {st.name}, got {', '.join(t.dtype.name for t in ins)}")
    if gy.shape != x.shape or x.rank < 2:
        raise ShapeError(f"the incoming gradient must have x's shape, x of rank >= 2, got {gy} and {x}")
    c = x.shape[1]
    for t in stats:
        if t.rank != 1 or (t.shape[0] is not None and c is not None and t.shape[0] != c):
            raise ShapeError(f"mean, inverse standard deviation and gamma must be of shape ({c},), got {t}")
    return x, TensorType((c,), st), TensorType((c,), st)


def _bn_backward_lower(ctx: LowerContext) -> Callable[..., Any]:
    st = stat_dtype(ctx.in_types[1].dtype).torch_dtype
    ones = Ones(st, ctx.device)

    def run(gy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor,
            *gamma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        w = gamma[0] if gamma else ones(x.shape[1])
        return torch.ops.aten.native_batch_norm_backward(gy, x, w, None, None, mean, invstd, True, 0.0, [True] * 3)

    return run


BATCH_NORM_BACKWARD = OpDef("batch_norm_backward", infer=_bn_backward_rule, lower=_bn_backward_lower,
                            attrs=BatchNormBackwardAttrs, fusion=FusionKind.OPAQUE, differentiable=False,
                            doc="(dx, dgamma, dbeta) of a training batch norm along axis 1 from the saved mean and "
                                "inverse standard deviation, as PyTorch's native_batch_norm_backward")


# ---- batch_norm_update ------------------------------------------------------------------------------------------
@attrs
class BatchNormUpdateAttrs:
    momentum: float = 0.1
    epsilon: float = 1e-5
    has_gamma: bool = False
    has_beta: bool = False


def _bn_update_rule(a: BatchNormUpdateAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    check_flags(has_gamma=a.has_gamma, has_beta=a.has_beta)
    if isinstance(a.momentum, bool) or not isinstance(a.momentum, (int, float)) or not 0 <= a.momentum <= 1:
        raise AttributeValueError(f"momentum must be a number in [0, 1], got {a.momentum!r}")
    expect_arity(ins, 3 + a.has_gamma + a.has_beta)
    x, *per_channel = ins
    check_bn_attrs(1, a.epsilon, x)
    st = stat_dtype(x.dtype)
    c = x.shape[1]
    for t in per_channel:
        if t.dtype is not st:
            raise DTypeError(f"gamma, beta and the running statistics must be {st.name} for {x.dtype.name} "
                             f"inputs, got {t.dtype.name}")
        if t.rank != 1 or (t.shape[0] is not None and c is not None and t.shape[0] != c):
            raise ShapeError(f"gamma, beta and the running statistics must be of shape ({c},), got {t}")
    stat = TensorType((c,), st)
    return x, stat, stat, stat, stat


def _bn_update_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: BatchNormUpdateAttrs = ctx.attrs
    momentum, eps = float(a.momentum), float(a.epsilon)

    def run(x: torch.Tensor, *per_channel: torch.Tensor) -> tuple[torch.Tensor, ...]:
        *params, running_mean, running_var = per_channel
        gamma = params[0] if a.has_gamma else None
        beta = params[-1] if a.has_beta else None
        return tuple(torch.ops.aten._native_batch_norm_legit_functional(x, gamma, beta, running_mean, running_var,
                                                                         True, momentum, eps))

    return run


BATCH_NORM_UPDATE = OpDef("batch_norm_update", infer=_bn_update_rule, lower=_bn_update_lower,
                          attrs=BatchNormUpdateAttrs, fusion=FusionKind.OPAQUE, differentiable=False,
                          doc="a training batch norm along axis 1 with its running statistics' update: (y, mean, "
                              "inverse standard deviation, new running mean, new running variance)")


# ---- layer_norm_forward / layer_norm_backward ---------------------------------------------------------------------
@attrs
class LayerNormVendorAttrs:
    normalized_rank: int = 1  # the trailing dims normalised
    epsilon: float = 1e-5


def _layer_norm_types(a: LayerNormVendorAttrs, x: TensorType, params: Sequence[TensorType]) -> tuple[int | None, ...]:
    """The normalised shape (dynamic dims None); checks x, the affine parameters and the attributes."""
    if isinstance(a.normalized_rank, bool) or not isinstance(a.normalized_rank, int) \
            or not 0 < a.normalized_rank <= x.rank:
        raise AttributeValueError(f"normalized_rank must be an int in [1, {x.rank}], got {a.normalized_rank!r}")
    if isinstance(a.epsilon, bool) or not isinstance(a.epsilon, float) or not a.epsilon >= 0:
        raise AttributeValueError(f"epsilon must be a float >= 0, got {a.epsilon!r}")
    for t in (x, *params):
        expect_dtype(t, (float32, float64))
    normalised = x.shape[x.rank - a.normalized_rank:]
    for t in params:
        if t.dtype is not x.dtype or t.rank != len(normalised) or any(
                m is not None and n is not None and m != n for m, n in zip(t.shape, normalised, strict=True)):
            raise ShapeError(f"gamma and beta must be {x.dtype.name} of shape {normalised}, got {t}")
    return normalised


def _stat_type(a: LayerNormVendorAttrs, x: TensorType) -> TensorType:
    return TensorType(x.shape[:x.rank - a.normalized_rank] + (1,) * a.normalized_rank, x.dtype)


def _ln_forward_rule(a: LayerNormVendorAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    if not 1 <= len(ins) <= 3:
        raise ShapeError(f"expects x and at most gamma and beta, got {len(ins)} inputs")
    _layer_norm_types(a, ins[0], ins[1:])
    return ins[0], _stat_type(a, ins[0]), _stat_type(a, ins[0])


def _ln_forward_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: LayerNormVendorAttrs = ctx.attrs
    k = a.normalized_rank
    gamma, beta = len(ctx.in_types) > 1, len(ctx.in_types) > 2  # x, then gamma, then beta (only with gamma)

    def run(x: torch.Tensor, *affine: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        w = affine[0] if gamma else None
        b = affine[1] if beta else None
        return torch.ops.aten.native_layer_norm(x, x.shape[x.dim() - k:], w, b, a.epsilon)

    return run


LAYER_NORM_FORWARD = OpDef("layer_norm_forward", infer=_ln_forward_rule, lower=_ln_forward_lower,
                           attrs=LayerNormVendorAttrs, fusion=FusionKind.OPAQUE, differentiable=False,
                           doc="(y, mean, inverse standard deviation) of a layer norm over the trailing "
                               "normalized_rank dims with optional gamma and beta, as PyTorch's native_layer_norm")


def _ln_backward_rule(a: LayerNormVendorAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    expect_arity(ins, 6)
    gy, x, mean, rstd, w, b = ins
    shape = _layer_norm_types(a, x, (w, b))
    stat = _stat_type(a, x)
    if gy.dtype is not x.dtype or gy.rank != x.rank or any(t.dtype is not x.dtype or t.rank != stat.rank or any(
            d not in (1, None) for d in t.shape[x.rank - a.normalized_rank:]) for t in (mean, rstd)):
        raise ShapeError(f"expects the incoming gradient typed as x ({x}) and statistics of type {stat}, got {gy}, "
                         f"{mean} and {rstd}")
    return x, TensorType(shape, x.dtype), TensorType(shape, x.dtype)


def _ln_backward_lower(ctx: LowerContext) -> Callable[..., Any]:
    k = ctx.attrs.normalized_rank

    def run(gy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor, w: torch.Tensor,
            b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.ops.aten.native_layer_norm_backward(gy, x, x.shape[x.dim() - k:], mean, rstd, w, b, [True] * 3)

    return run


LAYER_NORM_BACKWARD = OpDef("layer_norm_backward", infer=_ln_backward_rule, lower=_ln_backward_lower,
                            attrs=LayerNormVendorAttrs, fusion=FusionKind.OPAQUE, differentiable=False,
                            doc="(dx, dgamma, dbeta) of a layer norm with gamma and beta from its saved mean and "
                                "inverse standard deviation, as PyTorch's native_layer_norm_backward")


# ---- threshold_gradient --------------------------------------------------------------------------------------
@attrs
class ThresholdGradientAttrs:
    threshold: float = 0.0
    names: tuple[str, ...] = ()  # the graph ops it replaced (introspection only)


def _threshold_rule(a: ThresholdGradientAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    _check_names(a)
    if isinstance(a.threshold, bool) or not isinstance(a.threshold, (int, float)):
        raise AttributeValueError(f"threshold must be a number, got {a.threshold!r}")
    expect_arity(ins, 2)
    same_dtype(ins)
    for t in ins:
        expect_dtype(t, FLOAT_DTYPES)
    g, x = ins
    if g.rank != x.rank or any(m is not None and n is not None and m != n for m, n in zip(g.shape, x.shape,
                                                                                         strict=True)):
        raise ShapeError(f"the gradient and x must have one shape, got {g.shape} and {x.shape}")
    return g


def _threshold_lower(ctx: LowerContext) -> Callable[..., Any]:
    threshold = float(ctx.attrs.threshold)
    return lambda g, x: torch.ops.aten.threshold_backward(g, x, threshold)


THRESHOLD_GRADIENT = OpDef("threshold_gradient", infer=_threshold_rule, lower=_threshold_lower,
                           attrs=ThresholdGradientAttrs, fusion=FusionKind.OPAQUE, differentiable=False,
                           doc="0 where x <= threshold, else g (ReLU's gradient as one call); made by the compiler")

__all__ = ["BATCH_NORM_BACKWARD", "BATCH_NORM_INFERENCE", "BATCH_NORM_UPDATE", "CONV2D_BIAS", "CONV2D_GRADIENTS",
           "LAYER_NORM_BACKWARD", "LAYER_NORM_FORWARD", "THRESHOLD_GRADIENT", "BatchNormBackwardAttrs",
           "BatchNormInferenceAttrs", "BatchNormUpdateAttrs", "ConvBiasAttrs", "ConvGradientsAttrs",
           "LayerNormVendorAttrs", "ThresholdGradientAttrs"]
