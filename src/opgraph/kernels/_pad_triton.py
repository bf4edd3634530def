"""The Triton kernel of ``opgraph.kernels.pad`` (imported on first use: Triton is an optional dependency)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def pad_last_axis(x_ptr, out_ptr, cols, out_cols, x_row_stride, left, value, BLOCK: tl.constexpr):
    """Row ``program_id(0)`` of ``out`` (rows of ``out_cols``): ``x``'s row read ``left`` columns further left,
    ``value`` where that falls outside its ``cols``. 64-bit row offsets: rows of any count and length."""
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    src = c - left
    inside = (src >= 0) & (src < cols)
    v = tl.load(x_ptr + row * x_row_stride + src, mask=inside, other=0)
    fill = tl.full([BLOCK], value, out_ptr.dtype.element_ty)
    v = tl.where(inside, v, fill)  # selected in x's dtype: its values are copied bit for bit
    tl.store(out_ptr + row * out_cols + c, v, mask=c < out_cols)
