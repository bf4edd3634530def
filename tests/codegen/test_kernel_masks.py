"""Masks of reduction kernels: where the grid's rows and the tile's columns cannot pass the tensor's end (static
sizes that divide evenly), they are constants that Triton folds out of loads, stores and selects; a ragged edge
keeps a real bound. Constant or not, a mask keeps a tile's full shape, so a reduction of a value that varies only by
row (a broadcast statistic) still adds up every column. Each kernel is checked against PyTorch (interpreter)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton.kernel import region_kernel, region_of  # noqa: E402
from opgraph.codegen.triton.region import Config  # noqa: E402


def _case(rows: int, width: int, config: Config) -> tuple[str, Callable[[], torch.Tensor], torch.Tensor]:
    g = og.Graph()
    x = g.placeholder((rows, width), og.float32)
    peak = g.reduce_max(x, [1], keepdims=True)
    # softmax's shape of work, plus a row statistic broadcast back over the row and summed again
    y = g.softmax(x, -1) + g.reduce_sum(g.broadcast_to(peak, (rows, width)), [1], keepdims=True)
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], config=config)
    xs = torch.randn(rows, width, generator=torch.Generator().manual_seed(rows * width))
    want = torch.softmax(xs, -1) + xs.amax(1, keepdim=True) * width
    assert kernel.source is not None
    return kernel.source, lambda: kernel(xs)[0], want  # run after the source is checked: a wrong mask may crash


@pytest.mark.parametrize("rows,width,config,constant_rows,constant_cols", [
    (6, 256, Config(reduction=True, xblock=1, rblock=256, num_warps=4), True, True),
    (6, 200, Config(reduction=True, xblock=1, rblock=256, num_warps=4), True, False),
    (6, 256, Config(reduction=True, xblock=4, rblock=256, num_warps=4), False, True),
    (6, 1024, Config(reduction=True, xblock=1, rblock=128, looped=True, num_warps=4), True, True),
    (6, 1000, Config(reduction=True, xblock=2, rblock=128, looped=True, num_warps=4), True, False),
])
def test_masks_are_constant_only_where_nothing_is_past_the_end(rows: int, width: int, config: Config,
                                                               constant_rows: bool, constant_cols: bool) -> None:
    source, run, want = _case(rows, width, config)
    assert ("xmask = tl.full([XBLOCK, 1], 1, tl.int1)" in source) == constant_rows
    assert (f"xi < {rows}" in source) == (not constant_rows)
    assert (f"< {width})" in source) == (not constant_cols), source
    torch.testing.assert_close(run(), want, rtol=1e-5, atol=1e-4)
