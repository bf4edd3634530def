"""PyTorch custom ops of opgraph for training through max pooling: ``torch.ops.opgraph.max_pool2d`` and its backward.

The backward of ``F.max_pool2d`` needs each window's argmax, which the forward saves for it: PyTorch's index
``h * W + w`` in int64, eight bytes an output. ``opgraph::max_pool2d(x, kernel_size, stride, padding, dilation,
ceil_mode) -> (values, offsets)`` saves the maximum's offset in its window instead, ``i * kW + j`` in int8 (int16
for windows of more than 128 elements), as Inductor does. ``capture.capture_max_pool`` puts it into Dynamo's graph
of a training step before AOTAutograd traces it; the converters build opgraph's ``max_pool2d_return_indices`` with
``LOCAL_FLATTEN_2D`` indices and its gradient, which the max-pool kernels compute on CUDA (H200: forward and
backward in 1.4-2.2x less time than with int64 indices, ``benchmarks/max_pool.py``).

``opgraph::max_pool2d_backward(grad, offsets, input_size, kernel_size, stride, padding, dilation, ceil_mode)`` is
the gradient with respect to an input of ``input_size``. Run eagerly, both are PyTorch's kernels with the offsets
converted from and to PyTorch's index. Arguments are as ``torch.ops.aten.max_pool2d_with_indices`` takes them,
two numbers each.

This module has no ``from __future__ import annotations``: ``torch.library.custom_op`` reads the schema from the
annotations.
"""

from collections.abc import Sequence
from typing import Any

import torch

from ...core.errors import AttributeValueError
from ...ops.pooling import offsets_dtype
from .custom_ops import define_with_backward

Tensor = torch.Tensor


def _offset_dtype(kernel_size: Sequence[int]) -> torch.dtype:
    """The smallest integer dtype that holds every offset of the window (``ops.pooling.offsets_dtype``; the capture
    takes no window too large for 16 bits)."""
    dtype = offsets_dtype(kernel_size[0] * kernel_size[1])
    if dtype is None:
        raise AttributeValueError(f"opgraph::max_pool2d: a {kernel_size[0]}x{kernel_size[1]} window has more "
                                  f"offsets than 16 bits hold")
    return dtype.torch_dtype


def _starts(out: int, stride: int, pad: int, device: torch.device) -> Tensor:
    return torch.arange(out, device=device) * stride - pad


def _format(x: Tensor) -> torch.memory_format:
    """PyTorch's kernels keep a channels-last input's layout in their results."""
    nhwc = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    return torch.channels_last if nhwc else torch.contiguous_format


def _max_pool2d(x: Tensor, kernel_size: list[int], stride: list[int], padding: list[int], dilation: list[int],
                ceil_mode: bool) -> tuple[Tensor, Tensor]:
    values, index = torch.ops.aten.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
    oh, ow = values.shape[-2:]
    width = x.shape[-1]
    hs = _starts(oh, stride[0], padding[0], x.device)[:, None]
    ws = _starts(ow, stride[1], padding[1], x.device)
    offsets = torch.div(torch.div(index, width, rounding_mode="floor") - hs, dilation[0], rounding_mode="floor") \
        * kernel_size[1] + torch.div(index % width - ws, dilation[1], rounding_mode="floor")
    fmt = _format(x)
    return values.contiguous(memory_format=fmt), offsets.to(_offset_dtype(kernel_size)).contiguous(memory_format=fmt)


def _max_pool2d_fake(x: Tensor, kernel_size: list[int], stride: list[int], padding: list[int], dilation: list[int],
                     ceil_mode: bool) -> tuple[Tensor, Tensor]:
    values, _ = torch.ops.aten.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
    fmt = _format(x)
    return (torch.empty_like(values, memory_format=fmt),
            torch.empty_like(values, dtype=_offset_dtype(kernel_size), memory_format=fmt))


def _max_pool2d_backward(grad: Tensor, offsets: Tensor, input_size: list[int], kernel_size: list[int],
                         stride: list[int], padding: list[int], dilation: list[int], ceil_mode: bool) -> Tensor:
    oh, ow = grad.shape[-2:]
    width = input_size[-1]
    off = offsets.long()
    h = _starts(oh, stride[0], padding[0], grad.device)[:, None] + torch.div(off, kernel_size[1],
                                                                             rounding_mode="floor") * dilation[0]
    w = _starts(ow, stride[1], padding[1], grad.device) + off % kernel_size[1] * dilation[1]
    source = torch.empty(input_size, dtype=grad.dtype, device=grad.device, memory_format=_format(grad))
    dx = torch.ops.aten.max_pool2d_with_indices_backward(grad, source, kernel_size, stride, padding, dilation,
                                                         ceil_mode, h * width + w)
    return dx.contiguous(memory_format=_format(grad))


def _max_pool2d_backward_fake(grad: Tensor, offsets: Tensor, input_size: list[int], kernel_size: list[int],
                              stride: list[int], padding: list[int], dilation: list[int], ceil_mode: bool) -> Tensor:
    return torch.empty(input_size, dtype=grad.dtype, device=grad.device, memory_format=_format(grad))


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    x, *args = inputs
    ctx.save_for_backward(output[1])
    ctx.input_size, ctx.args = list(x.shape), args
    ctx.mark_non_differentiable(output[1])


def _backward(ctx: Any, grad: Tensor, grad_offsets: Any) -> tuple[Tensor | None, ...]:
    (offsets,) = ctx.saved_tensors
    dx = torch.ops.opgraph.max_pool2d_backward(grad, offsets, ctx.input_size, *ctx.args)
    return dx, None, None, None, None, None


def _register() -> None:
    define_with_backward("max_pool2d", _max_pool2d, _max_pool2d_fake, _max_pool2d_backward, _max_pool2d_backward_fake,
                         _backward, _setup_context)


_register()
MAX_POOL2D = torch.ops.opgraph.max_pool2d.default
MAX_POOL2D_BACKWARD = torch.ops.opgraph.max_pool2d_backward.default

__all__ = ["MAX_POOL2D", "MAX_POOL2D_BACKWARD"]
