"""Ops: slice, slice_update, pad, reverse and Tensor[...] indexing."""

from __future__ import annotations

from ..ir.graph import GraphCore


class SlicingBuilders(GraphCore):
    """Graph methods for slice, slice_update, pad, reverse and Tensor[...] indexing."""
