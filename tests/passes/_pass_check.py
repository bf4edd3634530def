"""A graph pass checked on a graph built for it: the ops it leaves and the values, compiled at the default level
(where the pass runs) against an unoptimised run in float64."""

from __future__ import annotations

from collections.abc import Callable

import torch

import opgraph as og
from opgraph.passes.program import Program


def check_pass(pass_fn: Callable[[Program], Program], build: Callable[[og.Graph, list[og.Tensor]], list[og.Tensor]],
               shapes: list[tuple[int, ...]], *, tol: float = 0.0, interpret: bool = False
               ) -> tuple[list[str], list[torch.Tensor]]:
    """The ops after ``pass_fn`` (placeholders left out) and the compiled results, each within ``tol`` of the
    unoptimised run; with ``interpret`` the values in generated kernels under Triton's interpreter are checked too."""
    g = og.Graph()
    xs = [g.placeholder(s, og.float64) for s in shapes]
    outs = build(g, xs)
    after = pass_fn(Program(g, xs, outs, []))
    after.graph.verify()
    gen = torch.Generator().manual_seed(0)
    feeds = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    types = {t: t.type for t in xs}
    want = g.compile(types, outs, descriptor=og.CompilationDescriptor(optimization_level=0)).run(feeds)
    runs = [g.compile(types, outs).run(feeds)]
    if interpret:
        runs.append(g.compile(types, outs, descriptor=og.CompilationDescriptor(triton_interpret=True)).run(feeds))
    for got in runs:
        for w, r in zip(want, got, strict=True):
            torch.testing.assert_close(r, w, rtol=tol, atol=tol)
    return [o.op.name for o in after.graph.ops if o.op.name != "placeholder"], runs[0]
