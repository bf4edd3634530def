"""Ops: convolutions."""

from __future__ import annotations

from ..ir.graph import GraphCore


class ConvBuilders(GraphCore):
    """Graph methods for convolutions."""
