"""Ops: reductions, argmax/argmin, variance."""

from __future__ import annotations

from ..ir.graph import GraphCore


class ReduceBuilders(GraphCore):
    """Graph methods for reductions, argmax/argmin, variance."""
