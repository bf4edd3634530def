"""passes/views.py: reshape and transpose chains fold into one view, or into nothing where they end where they
began; results keep their own op, and links read elsewhere stay. Values are the graph's before the pass."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import opgraph as og
from opgraph.passes.program import Program
from opgraph.passes.views import fold_views

from ._pass_check import check_pass


def _check(build: Callable[[og.Graph, list[og.Tensor]], list[og.Tensor]], shapes: list[tuple[int, ...]]
           ) -> list[str]:
    """The ops after the pass, with the values exact op by op and in generated kernels (the interpreter)."""
    return check_pass(fold_views, build, shapes, interpret=True)[0]


def test_a_reshape_back_to_the_start_is_no_op() -> None:
    # AOTAutograd's view of a view: (32, 8) -> (2, 16, 8) -> (32, 8)
    assert _check(lambda g, x: [g.exp(g.reshape(g.reshape(x[0], (2, 16, 8)), (32, 8)))], [(32, 8)]) == ["exp"]


def test_reshape_chains_through_squeeze_and_expand_dims_are_one_reshape() -> None:
    def build(g: og.Graph, x: list[og.Tensor]) -> list[og.Tensor]:
        y = g.reshape(g.squeeze(g.expand_dims(x[0], [0]), [0]), (4, 6))
        return [g.exp(g.reshape(y, (2, 12)))]

    assert _check(build, [(3, 8)]) == ["reshape", "exp"]


@pytest.mark.parametrize("perms,left", [
    (((1, 0), (1, 0)), []),  # back to the start
    (((1, 2, 0), (2, 0, 1)), []),  # a rotation and its inverse
    (((0, 2, 1, 3), (2, 0, 1, 3)), ["transpose"]),  # attention's head swaps: one transpose
])
def test_transpose_chains_compose(perms: tuple[tuple[int, ...], ...], left: list[str]) -> None:
    rank = len(perms[0])
    shape = (2, 3, 4, 5)[:rank]

    def build(g: og.Graph, x: list[og.Tensor]) -> list[og.Tensor]:
        y = x[0]
        for p in perms:
            y = g.transpose(y, list(p))
        return [g.exp(y)]

    assert _check(build, [shape]) == [*left, "exp"]


def test_results_keep_their_op_and_shared_links_stay() -> None:
    def build(g: og.Graph, x: list[og.Tensor]) -> list[og.Tensor]:
        inner = g.reshape(x[0], (4, 6))
        back = g.reshape(inner, (6, 4))  # a result the same shape as x: shortened, not replaced by x
        return [back, g.exp(inner), g.transpose(g.transpose(x[0], [1, 0]), [1, 0])]

    ops = _check(build, [(6, 4)])
    assert ops.count("reshape") == 2 and ops.count("transpose") == 1 and "exp" in ops


def test_dynamic_shapes_shorten_but_are_never_proven_equal() -> None:
    g = og.Graph()
    x = g.placeholder((None, 8), og.float32)
    y = g.exp(g.reshape(g.reshape(x, (-1,)), (-1, 8)))
    out = fold_views(Program(g, [x], [y], []))
    assert [o.op.name for o in out.graph.ops] == ["placeholder", "reshape", "exp"]
    exe = g.compile({x: x.type}, [y])
    xv = torch.randn(5, 8)
    torch.testing.assert_close(exe.run([xv])[0], torch.exp(xv))


def test_in_the_default_pipeline_after_constant_folding() -> None:
    g = og.Graph()
    x = g.placeholder((32, 8), og.float32)
    y = g.exp(g.reshape(g.reshape(x, (2, 16, 8)), (32, 8)))
    exe = g.compile({x: x.type}, [y])
    names = [r.name for r in exe.pass_log]
    assert names.index("fold_views") == names.index("constant_folding") + 1
    record = exe.pass_log[names.index("fold_views")]
    assert record.ops_after == record.ops_before - 2  # both reshapes gone
    assert [o.op.name for o in exe.program.graph.ops] == ["placeholder", "exp"]
