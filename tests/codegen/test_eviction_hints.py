"""L2 eviction hints of row reductions (``region.resolve_eviction``): a row walked more than once is kept in L2
until its last walk, which lets it go first; a row-invariant input (a norm's weight) stays; a row read once, a
column reduction and a flat kernel keep the default. The kernels still match the unfused graph (interpreter)."""

from __future__ import annotations

import re

import pytest
import torch

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton.hints import resolve_eviction  # noqa: E402
from opgraph.codegen.triton.kernel import region_kernel, region_of  # noqa: E402
from opgraph.codegen.triton.region import Config  # noqa: E402

LOAD = re.compile(r"tl\.load\((in\d+) \+ ([^,]*), mask=[^,)]*(?:, eviction_policy=\"(\w+)\")?\)")


def _layer_norm(width: int) -> tuple[og.Graph, og.Tensor, list[og.Tensor]]:
    g = og.Graph()
    x = g.placeholder((6, width), og.float32)
    w, b = g.placeholder((width,), og.float32), g.placeholder((width,), og.float32)
    return g, g.layer_norm(x, -1, w, b, 1e-5), [x, w, b]


def _hints(config: Config, width: int = 256) -> list[tuple[str, str | None]]:
    _, y, _ = _layer_norm(width)
    ops, ins = region_of([y])
    source = region_kernel(ops, ins, [y], config=config).source
    assert source is not None and "@@" not in source
    return [(m.group(1), m.group(3)) for m in LOAD.finditer(source)]


def test_a_row_walked_twice_stays_in_l2_until_its_last_walk() -> None:
    hints = _hints(Config(reduction=True, xblock=1, rblock=64, looped=True, num_warps=4))
    row = [h for i, h in hints if i == "in0"]
    # the shift (the row's first element), the statistics' walk, the variance guard's walk (rows seldom take it: no
    # hint, and not counted as a walk), the final walk
    assert row == ["evict_last", "evict_last", None, "evict_first"]
    assert {h for i, h in hints if i in ("in1", "in2")} == {"evict_last"}


def test_a_row_read_once_keeps_the_default_and_weights_stay() -> None:
    hints = _hints(Config(reduction=True, xblock=1, rblock=256, num_warps=4))
    assert [h for i, h in hints if i == "in0"] == [None, None]  # the row, and its first element (the shift of its
    # variance's sums)
    assert {h for i, h in hints if i != "in0"} == {"evict_last"}


def test_flat_kernels_and_column_reductions_have_no_hints() -> None:
    g = og.Graph()
    x = g.placeholder((4096, 32), og.float32)
    w = g.placeholder((32,), og.float32)
    # a flat kernel; a column statistic walked in steps, normalising the rows again with a per-column weight
    column = (x - g.reduce_mean(x, [0], keepdims=True)) * w
    for y, config in ((g.exp(x) * 2.0, None),
                      (column, Config(reduction=True, xblock=32, rblock=64, looped=True, num_warps=4))):
        ops, ins = region_of([y])
        source = region_kernel(ops, ins, [y], config=config).source
        assert source is not None and "eviction_policy" not in source and "@@" not in source
        assert config is None or "for start" in source


def test_resolve_eviction_reads_the_marks_by_walk() -> None:
    mark = "@@evict@@"
    lines = [f"s = tl.load(in0 + o, mask=m{mark}0r0{mark})",  # before the loops (a row's first element)
             f"a = tl.load(in0 + o, mask=m{mark}0r1{mark})", f"b = tl.load(in1 + r, mask=m{mark}1c2{mark})",
             f"c = tl.load(in0 + o, mask=m{mark}0r2{mark})", f"d = tl.load(in2 + o, mask=m{mark}2r1{mark})",
             f"e = tl.load(in2 + o, mask=m{mark}2r0{mark})"]
    assert resolve_eviction(lines) == [
        's = tl.load(in0 + o, mask=m, eviction_policy="evict_last")',
        'a = tl.load(in0 + o, mask=m, eviction_policy="evict_last")',
        'b = tl.load(in1 + r, mask=m, eviction_policy="evict_last")',
        'c = tl.load(in0 + o, mask=m, eviction_policy="evict_first")',
        "d = tl.load(in2 + o, mask=m)",  # walked by one loop only (and read once before it): the default
        "e = tl.load(in2 + o, mask=m)"]


def test_a_row_walked_once_keeps_the_default_beside_its_first_element() -> None:
    """A looped variance reads a row's first element (its shift) before its one walk: still one walk."""
    g = og.Graph()
    x = g.placeholder((6, 1000), og.float32)
    y = g.variance(x, [1], keepdims=True)
    ops, ins = region_of([y])
    source = region_kernel(ops, ins, [y], config=Config(reduction=True, xblock=1, rblock=128, looped=True,
                                                        num_warps=4)).source
    assert source is not None and source.count("tl.load(in0") >= 2 and "eviction_policy" not in source


def test_hinted_looped_kernel_matches_torch() -> None:
    g, y, (x, w, b) = _layer_norm(1000)
    gen = torch.Generator().manual_seed(0)
    xs, ws, bs = torch.randn(6, 1000, generator=gen), torch.randn(1000, generator=gen), torch.randn(1000, generator=gen)
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], config=Config(reduction=True, xblock=1, rblock=128, looped=True,
                                                          num_warps=4))
    assert kernel.source is not None and "evict_first" in kernel.source
    feed = {id(x): xs, id(w): ws, id(b): bs}
    got = kernel(*[feed[id(t)] for t in ins])[0]
    torch.testing.assert_close(got, torch.nn.functional.layer_norm(xs, (1000,), ws, bs, 1e-5), rtol=1e-5, atol=1e-5)
