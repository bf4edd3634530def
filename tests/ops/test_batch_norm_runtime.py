"""Batch-norm training at run time: an empty batch is an error naming the op (PyTorch's batch-norm dispatcher
would return uninitialised statistics for it)."""

from __future__ import annotations

import pytest
import torch

import opgraph as og


def test_batch_norm_training_of_an_empty_batch_raises() -> None:
    g = og.Graph()
    x = g.placeholder((None, 3, 4), og.float32)
    y, mean, var = g.batch_norm_training(x, axis=1)
    with pytest.raises(og.OpgraphError, match="batch_norm_training"):
        g.run({x: torch.zeros(0, 3, 4)}, [mean])
    got = g.run({x: torch.ones(2, 3, 4)}, [mean, var])
    assert got[0].tolist() == [1.0] * 3 and got[1].abs().max().item() < 1e-6  # var from 1 / sqrt(var + eps)
