"""Op: ``conv2d_bias``, a 2-D convolution with its per-channel bias added by the vendor call (oneDNN folds it into
the convolution on the CPU), where the graph had a ``conv2d`` and an ``add`` of the bias reshaped to ``(C, 1, 1)``.

Made by the compiler (``passes/conv_bias.py``), after autodiff, so it has no gradient rule. Only the plain case:
NCHW data, OIHW weights, symmetric padding known at compile time (what ``torch.nn.Conv2d`` makes).
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

__all__ = ["CONV2D_BIAS", "ConvBiasAttrs"]
