"""Ops: sort, argsort, top_k, bottom_k."""

from __future__ import annotations

from ..ir.graph import GraphCore


class SortBuilders(GraphCore):
    """Graph methods for sort, argsort, top_k, bottom_k."""
