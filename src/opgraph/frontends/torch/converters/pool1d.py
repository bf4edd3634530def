"""1-D average pooling (core ATen ops PyTorch keeps 1-D): the 2-D converters on a height-1 view."""

from __future__ import annotations

from typing import Any

import torch

from ....ir.graph import Tensor
from ..registry import ConvertContext, Unsupported, converts
from .nn import _adaptive_avg, _avg_pool

aten = torch.ops.aten


def _one(value: Any, what: str) -> int:
    v = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(v) != 1 or isinstance(v[0], bool) or not isinstance(v[0], int):
        raise Unsupported(f"1-d {what} {value!r}")
    return int(v[0])


def _as_2d(ctx: ConvertContext, x: Tensor) -> Tensor:
    if x.rank not in (2, 3):
        raise Unsupported(f"1-d pooling of a rank-{x.rank} input")
    return ctx.g.expand_dims(x, [x.rank - 1])


@converts(aten.avg_pool1d.default)
def _avg_pool1d(ctx: ConvertContext, x: Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    k = _one(kernel_size, "kernel size")
    s = _one(stride, "stride") if stride not in ((), [], None) else k
    p = _one(padding, "padding")
    y = _avg_pool(ctx, 2, _as_2d(ctx, x), [1, k], [1, s], [0, p], ceil_mode, count_include_pad, None)
    return ctx.g.squeeze(y, [y.rank - 2])


@converts(aten.adaptive_avg_pool1d.default)
def _adaptive_avg_pool1d(ctx: ConvertContext, x: Tensor, output_size: Any) -> Tensor:
    y = _adaptive_avg(ctx, 2, _as_2d(ctx, x), [1, _one(output_size, "output size")])
    return ctx.g.squeeze(y, [y.rank - 2])
