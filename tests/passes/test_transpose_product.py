"""passes/transpose_product.py: consecutive transposes composed (dropped where they cancel), a transposed product
computed transposed where its product has no other use; the values are the graph's before the pass."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import opgraph as og
from opgraph.passes.transpose_product import transpose_products

from ._pass_check import check_pass


def _check(build: Callable[[og.Graph, list[og.Tensor]], list[og.Tensor]], shapes: list[tuple[int, ...]]
           ) -> tuple[list[str], list[torch.Tensor]]:
    return check_pass(transpose_products, build, shapes, tol=1e-12)


def test_a_transposed_product_is_computed_transposed_and_contiguous() -> None:
    ops, got = _check(lambda g, x: [g.add(g.transpose(g.matmul(x[0], x[1]), [1, 0]), x[2])],
                      [(3, 4), (4, 5), (5, 3)])
    assert ops == ["transpose", "transpose", "matmul", "add"]
    ops, got = _check(lambda g, x: [g.transpose(g.matmul(x[0], x[1]), [1, 0])], [(3, 4), (4, 5)])
    assert got[0].is_contiguous() and got[0].shape == (5, 3)


def test_batched_products_swap_only_the_last_two_axes() -> None:
    ops, got = _check(lambda g, x: [g.transpose(g.matmul(x[0], x[1]), [0, 2, 1])], [(2, 3, 4), (1, 4, 5)])
    assert ops.count("matmul") == 1 and got[0].is_contiguous() and got[0].shape == (2, 5, 3)
    ops, _ = _check(lambda g, x: [g.transpose(g.matmul(x[0], x[1]), [1, 0, 2])], [(2, 3, 4), (2, 4, 5)])
    assert ops == ["matmul", "transpose"]  # a batch axis moves: not a transposed product


def test_consecutive_transposes_compose_and_cancel() -> None:
    ops, _ = _check(lambda g, x: [g.add(g.transpose(g.transpose(g.matmul(x[0], x[1]), [1, 0]), [1, 0]), 1.0)],
                    [(3, 4), (4, 5)])
    assert ops == ["matmul", "constant", "add"]
    ops, _ = _check(lambda g, x: [g.transpose(g.transpose(x[0], [1, 2, 0]), [1, 2, 0])], [(2, 3, 4)])
    assert ops == ["transpose"]
    # an output that would cancel to an input keeps its transposes; one that cancels to a computed value does not
    ops, _ = _check(lambda g, x: [g.transpose(g.transpose(x[0], [1, 0]), [1, 0])], [(2, 3)])
    assert ops == ["transpose", "transpose"]
    ops, got = _check(lambda g, x: [g.transpose(g.transpose(g.matmul(x[0], x[1]), [1, 0]), [1, 0])], [(3, 4), (4, 5)])
    assert ops == ["matmul"] and got[0].is_contiguous()


@pytest.mark.parametrize("case", ["product-read-twice", "product-is-an-output", "vector-operand"])
def test_a_product_with_another_use_or_a_vector_operand_stays(case: str) -> None:
    def build(g: og.Graph, x: list[og.Tensor]) -> list[og.Tensor]:
        if case == "vector-operand":  # (2, 3, 4) @ (4,) is (2, 3): its transpose moves the batch axis
            return [g.transpose(g.matmul(x[0], x[1]), [1, 0])]
        p = g.matmul(x[0], x[1])
        t = g.transpose(p, [1, 0])
        return [t, g.relu(p)] if case == "product-read-twice" else [t, p]

    ops, _ = _check(build, [(3, 4), (4, 5)] if case != "vector-operand" else [(2, 3, 4), (4,)])
    assert ops.count("matmul") == 1 and "transpose" in ops
