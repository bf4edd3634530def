"""Ops: resize."""

from __future__ import annotations

from ..ir.graph import GraphCore


class ResizeBuilders(GraphCore):
    """Graph methods for resize."""
