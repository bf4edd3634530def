"""Ops: pooling."""

from __future__ import annotations

from ..ir.graph import GraphCore


class PoolingBuilders(GraphCore):
    """Graph methods for pooling."""
