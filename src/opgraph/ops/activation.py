"""Ops: activations (relu, gelu, silu, ...)."""

from __future__ import annotations

from ..ir.graph import GraphCore


class ActivationBuilders(GraphCore):
    """Graph methods for activations (relu, gelu, silu, ...)."""
