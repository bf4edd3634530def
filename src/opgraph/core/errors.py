"""The ``OpgraphError`` family. Every user-facing failure is one of these.

Messages name the op and the types involved; where a graph is at hand they also show the ops
around the failing one (see ``opgraph.ir.printer.excerpt``).
"""

from __future__ import annotations


class OpgraphError(Exception):
    """Base class of every error opgraph raises on bad input."""


class ShapeError(OpgraphError, ValueError):
    """Shapes that do not fit: wrong rank, incompatible broadcasting, bad axis, bad slice."""


class DTypeError(OpgraphError, TypeError):
    """A dtype an op does not accept, or two dtypes that do not go together."""


class AttributeValueError(OpgraphError, ValueError):
    """A bad attribute or descriptor field (negative stride, unknown mode, ...)."""


class GraphError(OpgraphError, ValueError):
    """Misuse of the graph: a tensor from another graph, an unknown name, a cycle, a bad target."""


class FeedError(OpgraphError, ValueError):
    """A missing, unknown or mistyped feed at compile or run time."""


class SerializationError(OpgraphError, ValueError):
    """A saved graph or package that is corrupt, truncated or from an unknown format version."""


class ExecutionError(OpgraphError, RuntimeError):
    """A failure inside a kernel at run time (index out of range, singular matrix, ...)."""


class VerificationError(GraphError):
    """The IR verifier found a broken invariant (a bug in a pass, or a hand-edited graph)."""


class DeviceError(OpgraphError, RuntimeError):
    """A device that does not exist here, or data on the wrong device."""
