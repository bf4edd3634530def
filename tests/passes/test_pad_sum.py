"""passes/pad_sum.py: a sum of zero pads that tile one axis becomes a concat of the padded tensors; sums that do
not tile, pads read elsewhere, other pads and broadcasts stay. Values are the graph's before the pass."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import opgraph as og
from opgraph.passes.pad_sum import pads_to_concat

from ._pass_check import check_pass

C = og.PaddingMode.CONSTANT


def _check(build: Callable[[og.Graph, list[og.Tensor]], list[og.Tensor]], shapes: list[tuple[int, ...]]
           ) -> list[str]:
    """The ops after the pass, with the values exact op by op and in generated kernels (the interpreter)."""
    return check_pass(pads_to_concat, build, shapes, interpret=True)[0]


def _qkv(g: og.Graph, x: list[og.Tensor], order: tuple[int, int, int] = (0, 1, 2)) -> og.Tensor:
    """Three (1, 5, 4) gradients padded back to (3, 5, 4) and summed, as autograd writes a split's gradient."""
    pads = [g.pad(x[k], C, [k, 0, 0], [2 - k, 0, 0]) for k in range(3)]
    return g.add(g.add(pads[order[0]], pads[order[1]]), pads[order[2]])


def test_a_split_gradient_becomes_one_concat_in_axis_order() -> None:
    assert _check(lambda g, x: [_qkv(g, x)], [(1, 5, 4)] * 3) == ["concat"]
    assert _check(lambda g, x: [_qkv(g, x, (2, 0, 1))], [(1, 5, 4)] * 3) == ["concat"]
    # parts of unequal sizes along a middle axis, ZERO mode, a balanced tree of adds
    def four(g: og.Graph, x: list[og.Tensor]) -> list[og.Tensor]:
        z = og.PaddingMode.ZERO
        p = [g.pad(x[0], z, [0, 0], [0, 6]), g.pad(x[1], C, [0, 1], [0, 4]), g.pad(x[2], C, [0, 3], [0, 3]),
             g.pad(x[3], C, [0, 4], [0, 0])]
        return [g.add(g.add(p[0], p[1]), g.add(p[2], p[3]))]
    assert _check(four, [(3, 1), (3, 2), (3, 1), (3, 3)]) == ["concat"]


NOT_A_CONCAT: dict[str, tuple[Callable[[og.Graph, list[og.Tensor]], list[og.Tensor]], list[tuple[int, ...]]]] = {
    "gap": (lambda g, x: [g.add(g.pad(x[0], C, [0, 0], [2, 0]), g.pad(x[1], C, [2, 0], [0, 0]))], [(1, 4)] * 2),
    "overlap": (lambda g, x: [g.add(g.pad(x[0], C, [0, 0], [1, 0]), g.pad(x[1], C, [1, 0], [0, 0]))], [(2, 4)] * 2),
    "pad-read-elsewhere": (lambda g, x: (lambda pa: [g.add(pa, g.pad(x[1], C, [1, 0], [0, 0])), pa])(
        g.pad(x[0], C, [0, 0], [1, 0])), [(1, 4)] * 2),
    "nonzero": (lambda g, x: [g.add(g.pad(x[0], C, [0, 0], [1, 0], 1.0), g.pad(x[1], C, [1, 0], [0, 0]))],
                [(1, 4)] * 2),
    "reflect": (lambda g, x: [g.add(g.pad(x[0], og.PaddingMode.REFLECT, [0, 0], [1, 0]),
                                    g.pad(x[1], C, [2, 0], [0, 0]))], [(2, 4), (1, 4)]),
    "two-axes": (lambda g, x: [g.add(g.pad(x[0], C, [0, 0], [1, 1]), g.pad(x[1], C, [1, 1], [0, 0]))],
                 [(1, 4)] * 2),
    "broadcast": (lambda g, x: [g.add(g.pad(x[0], C, [0, 0], [1, 0]), x[1])], [(1, 4)] * 2),
    "one-pad": (lambda g, x: [g.add(g.pad(x[0], C, [0, 0], [1, 0]), x[1])], [(1, 4), (2, 4)]),
}


@pytest.mark.parametrize("case", list(NOT_A_CONCAT))
def test_sums_that_are_no_concat_stay(case: str) -> None:
    build, shapes = NOT_A_CONCAT[case]
    ops = _check(build, shapes)
    assert "concat" not in ops and "pad" in ops and "add" in ops, ops


def test_a_partial_sum_read_elsewhere_is_its_own_concat() -> None:
    """(pa + pb) read by an output too: it is a tree of its own (a concat); the add above it keeps it as an addend."""
    def build(g: og.Graph, x: list[og.Tensor]) -> list[og.Tensor]:
        inner = g.add(g.pad(x[0], C, [0, 0], [1, 0]), g.pad(x[1], C, [1, 0], [0, 0]))
        return [g.add(inner, x[2]), inner]

    assert _check(build, [(1, 4), (1, 4), (2, 4)]) == ["concat", "add"]


@pytest.mark.parametrize("dynamic", [False, True])
def test_the_torch_backend_gives_a_packed_projection_gradient_as_a_concat(dynamic: bool) -> None:
    """nn.MultiheadAttention splits its packed in-projection in three; on the CPU the backward's gradient of it is
    one concat and no pads, with static or dynamic shapes, and the parameter gradients match eager's."""
    from opgraph.frontends.torch import recording

    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)

    def loss(module: torch.nn.Module) -> torch.Tensor:
        return module(x, x, x, need_weights=False)[0].square().sum()

    loss(layer).backward()
    want = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad(set_to_none=True)
    with recording() as reports:
        compiled = torch.compile(layer, backend="opgraph", dynamic=dynamic, options={"warn_fallbacks": False})
        loss(compiled).backward()
    for p, w in zip(layer.parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, w, rtol=1e-10, atol=1e-10)
    backward = [r for r in reports if r.kind == "backward"]
    assert backward and backward[0].executable is not None, [(r.kind, r.eager_reason) for r in reports]
    names = [o.op.name for o in backward[0].executable.program.graph.ops]
    assert "pad" not in names and "concat" in names, names
