"""Ops: matmul, hamming_distance, inverse."""

from __future__ import annotations

from ..ir.graph import GraphCore


class LinalgBuilders(GraphCore):
    """Graph methods for matmul, hamming_distance, inverse."""
