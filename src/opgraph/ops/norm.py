"""Ops: normalize, layer_norm, group_norm, rms_norm."""

from __future__ import annotations

from ..ir.graph import GraphCore


class NormBuilders(GraphCore):
    """Graph methods for normalize, layer_norm, group_norm, rms_norm."""
