"""Ops: reshape, transpose, expand_dims, squeeze, split, stack, concat, broadcast_to, tile, ...."""

from __future__ import annotations

from ..ir.graph import GraphCore


class ShapeBuilders(GraphCore):
    """Graph methods for reshape, transpose, expand_dims, squeeze, split, stack, concat, broadcast_to, tile, ...."""
