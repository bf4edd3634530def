"""Ops: softmax, log_softmax."""

from __future__ import annotations

from ..ir.graph import GraphCore


class NNBuilders(GraphCore):
    """Graph methods for softmax, log_softmax."""
