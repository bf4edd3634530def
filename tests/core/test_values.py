"""Concrete values to torch tensors (core/values.py)."""

from __future__ import annotations

import torch

import opgraph as og
from opgraph.core.values import to_torch


def test_python_floats_round_once_to_the_asked_dtype() -> None:
    assert to_torch(0.1, og.float64).item() == 0.1  # not 0.1 rounded to float32 first
    assert to_torch([0.1, 2.0], og.float64).tolist() == [0.1, 2.0]
    assert to_torch(0.1).dtype == torch.float32  # the default stays float32
    g = og.Graph()
    assert g.run({}, [g.constant(0.1, og.float64)])[0].item() == 0.1
