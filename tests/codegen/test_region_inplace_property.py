"""``RegionKernel.inplace_ok`` on random regions: every pair (input i, output j) it allows, run with output j
written into input i's buffer (as the memory planner does), gives the unfused graph's values. Regions mix an
elementwise prologue, full outputs with or without the statistics, one or two reductions (sums, a mean, a
maximum, a variance, a centred sum after a mean: one or two walks) over leading or trailing axes, and reads of a
row's first element (a slice); looped configurations store full outputs in the first walk or in a final one."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("triton")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton.kernel import region_kernel, region_of  # noqa: E402
from opgraph.codegen.triton.region import Config  # noqa: E402

CONFIGS = [None, Config(reduction=True, xblock=2, rblock=4, looped=True),
           Config(reduction=True, xblock=1, rblock=2, looped=True)]
PROLOGUE = ["add", "multiply", "tanh", "mask"]
REDUCTIONS = ["sum", "two_sums", "mean", "max", "variance", "centred"]


def _build(g: og.Graph, xs: list[Any], prologue: list[tuple[str, int, int]], reduction: str, axes: list[int],
           full: str, first_element: bool) -> list[Any]:
    vals = list(xs)
    for op, a, b in prologue:
        u, v = vals[a % len(vals)], vals[b % len(vals)]
        if op == "add":
            vals.append(u + v)
        elif op == "multiply":
            vals.append(u * v)
        elif op == "tanh":
            vals.append(g.tanh(u))
        else:  # a ReLU-style mask
            vals.append(g.select(g.less_equal(u, 0.0), 0.0, v))
    base = vals[-1] if len(vals) > len(xs) else xs[0] * 2.0
    outs: list[Any] = []
    if reduction == "sum":
        stats = [g.reduce_sum(base, axes, True)]
    elif reduction == "two_sums":
        stats = [g.reduce_sum(base, axes, True), g.reduce_sum(base * xs[0], axes, True)]
    elif reduction == "mean":
        stats = [g.reduce_mean(base, axes, True)]
    elif reduction == "max":
        stats = [g.reduce_max(base, axes, True)]
    elif reduction == "variance":
        stats = [g.variance(base, axes, keepdims=True)]
    else:  # a mean, then a second walk about it
        stats = [g.reduce_sum(g.square(base - g.reduce_mean(base, axes, True)), axes, True)]
    if first_element:  # the row's first element of the first input, read beside the statistics
        ends = [1 if k in axes else d for k, d in enumerate(xs[0].shape)]
        stats[0] = stats[0] + g.slice(xs[0], [0] * len(ends), ends, [1] * len(ends))
    outs += stats
    if full in ("plain", "both"):
        outs.insert(0, base)  # needs no statistics
    if full in ("normalised", "both"):
        outs.append(base - stats[0])  # needs them: a final walk
    return outs


@settings(max_examples=150, deadline=None)
@given(n_inputs=st.integers(1, 3), prologue=st.lists(st.tuples(st.sampled_from(PROLOGUE), st.integers(0, 5),
                                                               st.integers(0, 5)), max_size=3),
       reduction=st.sampled_from(REDUCTIONS), leading=st.booleans(), full=st.sampled_from(["plain", "normalised",
                                                                                          "both", "none"]),
       first_element=st.booleans(), config=st.sampled_from(CONFIGS), seed=st.integers(0, 2**16))
def test_every_allowed_in_place_pair_gives_the_unfused_values(n_inputs: int, prologue: list[tuple[str, int, int]],
                                                              reduction: str, leading: bool, full: str,
                                                              first_element: bool, config: Config | None,
                                                              seed: int) -> None:
    shape = (6, 9)
    axes = [0] if leading else [1]
    g = og.Graph()
    xs = [g.placeholder(shape, og.float32) for _ in range(n_inputs)]
    outs = _build(g, xs, prologue, reduction, axes, full, first_element)
    ops, inputs = region_of(outs)
    kernel = region_kernel(ops, inputs, outs, config=config)
    gen = torch.Generator().manual_seed(seed)
    feeds = {x: torch.randn(shape, generator=gen) for x in xs}
    want = g.run(feeds, outs)
    by_id = {id(t): v for t, v in feeds.items()}
    for i, j in sorted(kernel.inplace_ok):
        ins = [by_id.get(id(t), t.op.payload).clone() for t in inputs]
        out: list[torch.Tensor | None] = [None] * len(outs)
        out[j] = ins[i]
        got = kernel(*ins, out=out)
        assert got[j] is ins[i]
        for a, b in zip(got, want, strict=True):
            assert torch.allclose(a, b, rtol=3e-5, atol=3e-5), f"pair {(i, j)}:\n{kernel.source}"
