"""Run-time errors of ops/vendor_gradients.py: an index or a target out of range is an og.ExecutionError naming the
op, never an unchecked write (PyTorch's CPU embedding backward adds rows at its indices without a bounds check)."""

from __future__ import annotations

import pytest
import torch

import opgraph as og
from opgraph.ops.vendor_gradients import (
    EMBEDDING_GRADIENT,
    NLL_LOSS_GRADIENT,
    EmbeddingGradientAttrs,
    NllLossGradientAttrs,
)


@pytest.mark.parametrize("index", [9, -1])
def test_an_embedding_index_out_of_range_is_an_execution_error(index: int) -> None:
    g = og.Graph()
    gy, idx = g.placeholder((2, 3)), g.placeholder((2,), og.int64)
    out = g._apply(EMBEDDING_GRADIENT, [gy, idx], EmbeddingGradientAttrs(4))
    with pytest.raises(og.ExecutionError, match=f"embedding_gradient.*index {index} is out of range for 4 rows"):
        g.run({gy: torch.ones(2, 3), idx: torch.tensor([0, index])}, [out])
    got = g.run({gy: torch.ones(2, 3), idx: torch.tensor([0, 0])}, [out])[0]
    assert got[0].tolist() == [2.0, 2.0, 2.0] and not got[1:].any()


def test_an_nll_target_out_of_range_is_an_execution_error() -> None:
    g = og.Graph()
    gy, x, t, total = g.placeholder(()), g.placeholder((2, 3)), g.placeholder((2,), og.int64), g.placeholder(())
    dx = g._apply(NLL_LOSS_GRADIENT, [gy, x, t, total], NllLossGradientAttrs())
    with pytest.raises(og.ExecutionError, match="nll_loss_gradient.*out of bounds"):
        g.run({gy: torch.tensor(1.0), x: torch.zeros(2, 3), t: torch.tensor([0, 7]), total: torch.tensor(2.0)}, [dx])
