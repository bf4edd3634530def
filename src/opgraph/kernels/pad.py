"""Constant padding of the last axis in one pass: each output row is written once, its ``x`` part read in order.

PyTorch's constant pad fills the whole result and then copies ``x`` into a strided interior; opgraph's fallback
lowering copies and then fills only the borders. Either way the copy writes rows whose starts are not 16-byte
aligned when the padding makes them so, and the copy kernel cannot use vector accesses. The padding pass for
misaligned GEMMs (``passes.pad_matmul``) pads a language model's output-layer gradient this way: for 8192 x 30522
in bfloat16 the padded input-gradient product took 1.108 ms against 0.491 ms for its GEMM on operands padded
beforehand, about 0.6 ms of pads where Inductor's took about 0.27 ms (RESULTS.md, sixteenth session). This kernel
writes each output row in blocks, reading ``x`` with a mask: that pad (8192 x 30522 -> 30528, bfloat16) takes it
0.273 ms, against 0.580 ms for the fallback and 0.242 ms for Inductor's (seventeenth session).

Used by the ``pad`` op's lowering for constant padding of the last axis alone of floating-point tensors whose
rows are evenly strided with contiguous elements, on CUDA or under Triton's interpreter when the compilation asks
for it (``use_kernel``). ``OPGRAPH_PAD_KERNEL=0`` turns it off (A/B timing).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import os
from typing import Any

import torch

from ..core.errors import ShapeError

ENABLED = os.environ.get("OPGRAPH_PAD_KERNEL", "1") != "0"
BLOCK = 1024  # output elements a program: 8 a thread with 4 warps
MAX_COLUMN_BLOCKS = 65535  # the grid's second axis
MAX_ROWS = 2**31 - 1  # its first
_kernels: dict[str, Any] = {}


def _rows_stride(x: torch.Tensor) -> int | None:
    """The stride between consecutive rows of ``x`` viewed as (rows, last axis), or None where rows are not evenly
    strided (or the last axis is not contiguous)."""
    if x.dim() == 0 or (x.shape[-1] > 1 and x.stride(-1) != 1):
        return None
    if x.dim() == 1:
        return x.shape[-1]
    step = x.stride(-2)
    expected = step  # each leading dim must step over whole blocks of rows
    for d in range(x.dim() - 2, -1, -1):
        if x.shape[d] > 1 and x.stride(d) != expected:
            return None
        expected *= x.shape[d]
    return step


def use_kernel(x: torch.Tensor, left: int, right: int, value: float = 0.0, interpret: bool = False) -> bool:
    """This kernel pads ``x``'s last axis by ``left`` and ``right`` with ``value``: a floating-point ``x`` with
    evenly strided rows (and a ``value`` that float32 holds exactly: the kernel takes it as a float32), on CUDA or
    on the CPU under Triton's interpreter when asked (``interpret``), with Triton installed and the kernel not
    switched off."""
    on_device = x.is_cuda or (interpret and x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1")
    out_cols = x.shape[-1] + left + right if x.dim() else 0
    rows = x.numel() // x.shape[-1] if x.dim() and x.shape[-1] else 0
    return (ENABLED and on_device and x.dtype.is_floating_point and _float32_holds(value) and x.numel() > 0
            and x.dim() >= 1 and rows < MAX_ROWS and -(-out_cols // BLOCK) <= MAX_COLUMN_BLOCKS
            and _rows_stride(x) is not None and _triton_installed())


@functools.lru_cache(maxsize=64)
def _float32_holds(value: float) -> bool:
    return math.isnan(value) or float(torch.tensor(value, dtype=torch.float32)) == value


@functools.cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def pad_last_axis(x: torch.Tensor, left: int, right: int, value: float = 0.0) -> torch.Tensor:
    """``x`` with ``left`` and ``right`` elements of ``value`` around each row of its last axis (contiguous).

    Under Triton's interpreter (``TRITON_INTERPRET=1``) on the CPU, or on a GPU:

    >>> pad_last_axis(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), 1, 2).tolist()
    [[0.0, 1.0, 2.0, 0.0, 0.0], [0.0, 3.0, 4.0, 0.0, 0.0]]
    """
    stride = _rows_stride(x)
    if stride is None:
        raise ShapeError(f"pad_last_axis: the rows of x must be evenly strided with contiguous elements; got shape "
                         f"{tuple(x.shape)} with strides {x.stride()}")
    cols = x.shape[-1]
    out = torch.empty((*x.shape[:-1], cols + left + right), dtype=x.dtype, device=x.device)
    rows = out.numel() // out.shape[-1] if out.numel() else 0
    if rows:
        k = _load()
        grid = (rows, -(-out.shape[-1] // BLOCK))
        with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():
            k["pad"][grid](x, out, cols, out.shape[-1], stride, left, float(value), BLOCK=BLOCK, num_warps=4)
    return out


def _load() -> dict[str, Any]:
    if not _kernels:
        from . import _pad_triton as kt

        _kernels.update(pad=kt.pad_last_axis)
    return _kernels
