"""``opgraph::max_pool2d`` and its backward (``pool_ops.py``): max pooling whose saved argmax is each maximum's
offset in its window, as opgraph's ``max_pool2d_return_indices`` with ``LOCAL_FLATTEN_2D`` indices (int8, or int16
for windows of more than 128 elements) and the gradient from them."""

from __future__ import annotations

from typing import Any

from ....ir.graph import Tensor
from ....ops.pooling import Pooling2dDescriptor, with_window_offsets
from ..pool_ops import MAX_POOL2D, MAX_POOL2D_BACKWARD
from ..registry import ConvertContext, SymSize, Unsupported, converts
from .nn import _floating, _max_pool, _pool_descriptor, _rebatch


def _descriptor(kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool) -> Pooling2dDescriptor:
    d = _pool_descriptor(2, kernel_size, stride, padding, dilation, ceil_mode, indices=True)
    assert isinstance(d, Pooling2dDescriptor)
    local = with_window_offsets(d)
    if local is None:
        raise Unsupported(f"window offsets of a {d.kernel_height}x{d.kernel_width} window (more than 16 bits)")
    return local


@converts(MAX_POOL2D)
def _max_pool2d(ctx: ConvertContext, x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                ceil_mode: bool) -> tuple[Tensor, Tensor]:
    return _max_pool(ctx, x, _descriptor(kernel_size, stride, padding, dilation, ceil_mode))


@converts(MAX_POOL2D_BACKWARD)
def _max_pool2d_backward(ctx: ConvertContext, gy: Tensor, offsets: Tensor, input_size: Any, kernel_size: Any,
                         stride: Any, padding: Any, dilation: Any, ceil_mode: bool) -> Tensor:
    _floating(gy)
    d = _descriptor(kernel_size, stride, padding, dilation, ceil_mode)
    if any(isinstance(s, SymSize) for s in input_size) or len(input_size) not in (3, 4):
        raise Unsupported(f"max pooling's gradient for an input of size {input_size!r} (capture leaves dynamic "
                          f"shapes to aten.max_pool2d_with_indices)")
    size = [int(s) for s in input_size]
    added = len(size) == 3  # PyTorch's unbatched input
    if added:
        gy, offsets, size = ctx.g.expand_dims(gy, 0), ctx.g.expand_dims(offsets, 0), [1, *size]
    return _rebatch(ctx, ctx.g.max_pool2d_gradient(gy, offsets, size, d), added)
