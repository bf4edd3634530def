"""Ops: gather, scatter, one_hot, coordinate_along_axis, band_part."""

from __future__ import annotations

from ..ir.graph import GraphCore


class GatherBuilders(GraphCore):
    """Graph methods for gather, scatter, one_hot, coordinate_along_axis, band_part."""
