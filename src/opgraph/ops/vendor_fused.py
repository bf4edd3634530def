"""Ops the compiler makes where no kernel generator fuses elementwise work (the CPU): one vendor call for what the
graph spells as several ops (``passes/vendor_fused.py``), after autodiff, so they have no gradient rule.

* ``conv2d_bias``: a 2-D convolution with its per-channel bias added by the call (oneDNN folds it into the
  convolution), where the graph had ``conv2d`` and an ``add`` of the bias reshaped to ``(C, 1, 1)``. Only the
  plain case: NCHW data, OIHW weights, symmetric padding known at compile time (what ``torch.nn.Conv2d`` makes).
* ``batch_norm_inference``: ``normalize`` with per-channel (C,) statistics and affine parameters, as PyTorch's
  inference batch norm (one pass over x, eager's values), where the graph reshaped each of the four to
  broadcast along the channel axis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..core.dtype import FLOAT_DTYPES
from ..core.errors import AttributeValueError, ShapeError
from ..core.types import TensorType
from ._rules import expect_arity, expect_dtype, same_dtype
from .batch_norm import BatchNormTrainingAttrs
from .batch_norm_grad import check_bn_attrs, check_flags
from .registry import FusionKind, LowerContext, OpDef, attrs


@attrs
class ConvBiasAttrs:
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)  # (y, x), on both sides
    dilation_rates: tuple[int, int] = (1, 1)
    groups: int = 1
    names: tuple[str, ...] = ()  # the graph ops it replaced (introspection only)


def _pairs(a: ConvBiasAttrs) -> None:
    for field, low in (("strides", 1), ("padding", 0), ("dilation_rates", 1)):
        v = getattr(a, field)
        if not (isinstance(v, tuple) and len(v) == 2 and all(isinstance(k, int) and not isinstance(k, bool)
                                                            and k >= low for k in v)):
            raise AttributeValueError(f"{field} must be two ints >= {low}, got {v!r}")
    if isinstance(a.groups, bool) or not isinstance(a.groups, int) or a.groups < 1:
        raise AttributeValueError(f"groups must be an int >= 1, got {a.groups!r}")
    if not isinstance(a.names, tuple) or not all(isinstance(n, str) for n in a.names):
        raise AttributeValueError(f"names must be a tuple of str, got {a.names!r}")


def _rule(a: ConvBiasAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    _pairs(a)
    expect_arity(ins, 3)
    dt = same_dtype(ins)
    for t in ins:
        expect_dtype(t, FLOAT_DTYPES)
    x, w, b = ins
    if x.rank != 4 or w.rank != 4:
        raise ShapeError(f"expects NCHW x and OIHW weights of rank 4, got ranks {x.rank} and {w.rank}")
    c, o = x.shape[1], w.shape[0]
    if c is not None and w.shape[1] is not None and c != w.shape[1] * a.groups:
        raise ShapeError(f"x has {c} channels, the weights take {w.shape[1]} x {a.groups} groups")
    if o is not None and o % a.groups:
        raise ShapeError(f"{o} output channels do not split into {a.groups} groups")
    if b.rank != 1 or (b.shape[0] is not None and o is not None and b.shape[0] != o):
        raise ShapeError(f"bias must be 1-D of length {o}, got shape {b.shape}")
    out: list[int | None] = [x.shape[0], o]
    for k in range(2):
        size, kernel = x.shape[2 + k], w.shape[2 + k]
        if size is None or kernel is None:
            out.append(None)
            continue
        reach = a.dilation_rates[k] * (kernel - 1) + 1
        span = size + 2 * a.padding[k] - reach
        if span < 0:
            raise ShapeError(f"the kernel reaches {reach} but the padded input is {size + 2 * a.padding[k]} wide")
        out.append(span // a.strides[k] + 1)
    return TensorType(tuple(out), dt)


def _lower(ctx: LowerContext) -> Callable[..., Any]:
    a: ConvBiasAttrs = ctx.attrs

    def run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, b, a.strides, a.padding, a.dilation_rates, a.groups)

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
    if not isinstance(a.names, tuple) or not all(isinstance(n, str) for n in a.names):
        raise AttributeValueError(f"names must be a tuple of str, got {a.names!r}")
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
        gamma = affine[0] if a.has_gamma else None
        beta = affine[-1] if a.has_beta else None
        xc = x if a.axis == 1 else x.movedim(a.axis, 1)
        y = F.batch_norm(xc, mean, var, gamma, beta, False, 0.0, a.epsilon)
        return y if a.axis == 1 else y.movedim(1, a.axis)

    return run


BATCH_NORM_INFERENCE = OpDef("batch_norm_inference", infer=_bn_rule, lower=_bn_lower, attrs=BatchNormInferenceAttrs,
                             fusion=FusionKind.OPAQUE, differentiable=False,
                             doc="(x - mean) / sqrt(var + epsilon) * gamma + beta with (C,) statistics along "
                                 "axis, as PyTorch's inference batch norm; made by the compiler")

__all__ = ["BATCH_NORM_INFERENCE", "CONV2D_BIAS", "BatchNormInferenceAttrs", "ConvBiasAttrs"]
