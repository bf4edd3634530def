"""Ops: cumulative sum/prod/max/min."""

from __future__ import annotations

from ..ir.graph import GraphCore


class ScanBuilders(GraphCore):
    """Graph methods for cumulative sum/prod/max/min."""
