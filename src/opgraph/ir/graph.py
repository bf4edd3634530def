"""The IR: ``Operation``s in creation order, each producing ``Tensor``s.

``GraphCore`` holds the data and the mechanics (adding an op runs its type rule; names; lookup).
The public ``opgraph.Graph`` adds the builder methods of every op family and compile/run on top.
Ops are append-only and only reference earlier tensors, so creation order is a topological order
and is also the order in which side effects (``assign``) take place.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..core.dtype import DType
from ..core.errors import DTypeError, GraphError, OpgraphError
from ..core.types import TensorType
from .opdef import OpDef

if TYPE_CHECKING:
    from ..graph import Graph

_graph_counter = itertools.count()


class Tensor:
    """A symbolic tensor: the ``index``-th output of ``op``. Supports Python operators."""

    __slots__ = ("graph", "op", "index", "type", "__weakref__")

    def __init__(self, graph: GraphCore, op: Operation, index: int, type: TensorType) -> None:
        self.graph: Graph = graph  # type: ignore[assignment]
        self.op = op
        self.index = index
        self.type = type

    @property
    def name(self) -> str:
        return self.op.name if len(self.op.outputs) <= 1 else f"{self.op.name}:{self.index}"

    @property
    def shape(self) -> tuple[int | None, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return self.type.rank

    @property
    def ndim(self) -> int:
        return self.type.rank

    def __repr__(self) -> str:
        return f"<Tensor %{self.name}: {self.type}>"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise GraphError(f"the truth value of symbolic tensor %{self.name} is unknown until the graph runs")

    # Python operators: thin calls into the graph's builder methods.
    def __add__(self, o: Any) -> Tensor: return self.graph.add(self, o)
    def __radd__(self, o: Any) -> Tensor: return self.graph.add(o, self)
    def __sub__(self, o: Any) -> Tensor: return self.graph.subtract(self, o)
    def __rsub__(self, o: Any) -> Tensor: return self.graph.subtract(o, self)
    def __mul__(self, o: Any) -> Tensor: return self.graph.multiply(self, o)
    def __rmul__(self, o: Any) -> Tensor: return self.graph.multiply(o, self)
    def __truediv__(self, o: Any) -> Tensor: return self.graph.divide(self, o)
    def __rtruediv__(self, o: Any) -> Tensor: return self.graph.divide(o, self)
    def __pow__(self, o: Any) -> Tensor: return self.graph.power(self, o)
    def __rpow__(self, o: Any) -> Tensor: return self.graph.power(o, self)
    def __mod__(self, o: Any) -> Tensor: return self.graph.floor_modulo(self, o)
    def __rmod__(self, o: Any) -> Tensor: return self.graph.floor_modulo(o, self)
    def __lshift__(self, o: Any) -> Tensor: return self.graph.shift_left(self, o)
    def __rshift__(self, o: Any) -> Tensor: return self.graph.shift_right(self, o)
    def __matmul__(self, o: Any) -> Tensor: return self.graph.matmul(self, o)
    def __rmatmul__(self, o: Any) -> Tensor: return self.graph.matmul(o, self)
    def __neg__(self) -> Tensor: return self.graph.negative(self)
    def __abs__(self) -> Tensor: return self.graph.abs(self)
    def __invert__(self) -> Tensor:
        return self.graph.logical_not(self) if self.dtype.is_bool else self.graph.bitwise_not(self)

    def __and__(self, o: Any) -> Tensor:
        return self.graph.logical_and(self, o) if self.dtype.is_bool else self.graph.bitwise_and(self, o)

    def __or__(self, o: Any) -> Tensor:
        return self.graph.logical_or(self, o) if self.dtype.is_bool else self.graph.bitwise_or(self, o)

    def __xor__(self, o: Any) -> Tensor:
        return self.graph.logical_xor(self, o) if self.dtype.is_bool else self.graph.bitwise_xor(self, o)

    __rand__ = __and__
    __ror__ = __or__
    __rxor__ = __xor__

    def __lt__(self, o: Any) -> Tensor: return self.graph.less(self, o)
    def __le__(self, o: Any) -> Tensor: return self.graph.less_equal(self, o)
    def __gt__(self, o: Any) -> Tensor: return self.graph.greater(self, o)
    def __ge__(self, o: Any) -> Tensor: return self.graph.greater_equal(self, o)
    def __eq__(self, o: Any) -> Tensor: return self.graph.equal(self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Tensor: return self.graph.not_equal(self, o)  # type: ignore[override]
    def __getitem__(self, key: Any) -> Tensor: return self.graph.getitem(self, key)

    def __iter__(self) -> Any:
        raise GraphError(f"symbolic tensor %{self.name} cannot be iterated; index it or use g.split")

    def __len__(self) -> int:
        raise GraphError(f"symbolic tensor %{self.name} has no len(); use .shape")


class Operation:
    """One op application: ``op`` (an ``OpDef``), inputs, attributes and outputs.

    ``payload`` carries the value of a constant or the initial value of a variable.
    """

    __slots__ = ("graph", "id", "op", "inputs", "attrs", "outputs", "name", "payload", "__weakref__")

    def __init__(self, graph: GraphCore, id: int, op: OpDef, inputs: tuple[Tensor, ...], attrs: Any,
                 name: str, payload: torch.Tensor | None) -> None:
        self.graph = graph
        self.id = id
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.name = name
        self.payload = payload
        self.outputs: tuple[Tensor, ...] = ()

    @property
    def output(self) -> Tensor:
        if len(self.outputs) != 1:
            raise GraphError(f"op %{self.name} ({self.op.name}) has {len(self.outputs)} outputs, not one")
        return self.outputs[0]

    def __repr__(self) -> str:
        return f"<Operation %{self.name} = {self.op.name}>"

    def __hash__(self) -> int:
        return id(self)


class GraphCore:
    """Graph data and mechanics; see ``opgraph.Graph`` for the user-facing class."""

    def __init__(self) -> None:
        self._ops: list[Operation] = []
        self._names: dict[str, Tensor | Operation] = {}
        self._next_id = 0
        self._uid = next(_graph_counter)
        self._state: dict[str, dict[str, torch.Tensor]] = {}  # device -> variable name -> value

    # ---- reading ---------------------------------------------------------------------------
    @property
    def ops(self) -> tuple[Operation, ...]:
        return tuple(self._ops)

    def __iter__(self) -> Iterator[Operation]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    @property
    def placeholders(self) -> list[Tensor]:
        """Placeholder tensors in creation order (MPSGraph's ``placeholderTensors``)."""
        from .sources import PLACEHOLDER

        return [o.outputs[0] for o in self._ops if o.op is PLACEHOLDER]

    @property
    def variables(self) -> list[Tensor]:
        from .sources import VARIABLE

        return [o.outputs[0] for o in self._ops if o.op is VARIABLE]

    def tensor(self, name: str) -> Tensor:
        """The tensor called ``name`` (``"op"`` or ``"op:1"`` for the second output of ``op``)."""
        base, sep, index = name.rpartition(":")
        if sep and index.isdigit():
            owner = self._names.get(base)
            if isinstance(owner, Operation) and int(index) < len(owner.outputs):
                return owner.outputs[int(index)]
        found = self._names.get(name)
        if isinstance(found, Tensor):
            return found
        if isinstance(found, Operation) and len(found.outputs) == 1:
            return found.outputs[0]
        if isinstance(found, Operation):
            raise GraphError(f"op %{name} has {len(found.outputs)} outputs; name one as '{name}:i'")
        raise GraphError(f"no tensor named {name!r} in this graph")

    def operation(self, name: str) -> Operation:
        found = self._names.get(name.split(":")[0])
        if isinstance(found, Operation):
            return found
        raise GraphError(f"no operation named {name!r} in this graph")

    def __str__(self) -> str:
        from .printer import format_graph

        return format_graph(self)

    # ---- building --------------------------------------------------------------------------
    def _check_tensor(self, t: object, op: OpDef, position: int) -> Tensor:
        if not isinstance(t, Tensor):
            raise GraphError(f"{op.name}: input {position} is a {type(t).__name__}, not a graph Tensor")
        if t.graph is not self:
            raise GraphError(f"{op.name}: input {position} %{t.name} belongs to another graph")
        return t

    def _fresh_name(self, base: str) -> str:
        name = f"{base}_{self._next_id}"
        while name in self._names:
            self._next_id += 1
            name = f"{base}_{self._next_id}"
        return name

    def _add_op(self, op: OpDef, inputs: Sequence[Tensor], attrs: Any = None, name: str | None = None,
                payload: torch.Tensor | None = None, out_types: Sequence[TensorType] | None = None) -> Operation:
        """Append an op after running its type rule; errors name the op and the input types."""
        ins = tuple(self._check_tensor(t, op, i) for i, t in enumerate(inputs))
        if name is not None:
            if not isinstance(name, str) or not name or ":" in name:
                raise GraphError(f"{op.name}: invalid name {name!r}")
            if name in self._names:
                raise GraphError(f"{op.name}: the name {name!r} is already used in this graph")
        if out_types is None:
            try:
                out_types = infer_types(op, attrs, tuple(t.type for t in ins), payload)
            except OpgraphError as e:
                if ins and not getattr(e, "_opgraph_shown", False):  # show the graph around the op
                    from .printer import excerpt

                    e.args = (f"{e.args[0] if e.args else e}\n  inputs:\n{excerpt(ins)}",)
                    e._opgraph_shown = True  # type: ignore[attr-defined]
                raise
        operation = Operation(self, self._next_id, op, ins, attrs, name or self._fresh_name(op.name), payload)
        self._next_id += 1
        operation.outputs = tuple(Tensor(self, operation, i, ty) for i, ty in enumerate(out_types))
        self._ops.append(operation)
        self._names[operation.name] = operation
        return operation

    def _apply(self, op: OpDef, inputs: Sequence[Tensor], attrs: Any = None, name: str | None = None) -> Tensor:
        """Add a single-output op and return its tensor."""
        return self._add_op(op, inputs, attrs, name).output

    def _apply_multi(self, op: OpDef, inputs: Sequence[Tensor], attrs: Any = None,
                     name: str | None = None) -> tuple[Tensor, ...]:
        return self._add_op(op, inputs, attrs, name).outputs

    def _as_tensor(self, value: Any, like: DType | None = None) -> Tensor:
        """A Tensor as is; a Python scalar becomes a *weak* constant (``like``'s dtype when its kind
        allows); anything else (NumPy, torch, lists) becomes a constant of its own dtype."""
        if isinstance(value, Tensor):
            return value
        from ..core.dtype import promote_with_scalar, weak_scalar_dtype
        from ..core.values import to_torch
        from .sources import CONSTANT

        if is_python_scalar(value):
            dtype = promote_with_scalar(like, value) if like is not None else weak_scalar_dtype(value)
            if dtype.is_integer and not isinstance(value, bool):
                info = torch.iinfo(dtype.torch_dtype)
                if not info.min <= value <= info.max:
                    raise DTypeError(f"the Python scalar {value} does not fit {dtype.name} "
                                     f"(range {info.min}..{info.max}); cast the tensor first")
            payload = torch.tensor(value, dtype=dtype.torch_dtype)
        else:
            payload = to_torch(value)
        return self._add_op(CONSTANT, [], None, None, payload=payload).outputs[0]

    def verify(self) -> None:
        """Check the IR's invariants; raises ``VerificationError``."""
        from .verify import verify_graph

        verify_graph(self)


def is_python_scalar(value: object) -> bool:
    """Python's own bool/int/float/complex (NumPy scalars have a dtype of their own: not weak)."""
    return isinstance(value, (bool, int, float, complex)) and not isinstance(value, np.generic)


def infer_types(op: OpDef, attrs: Any, in_types: tuple[TensorType, ...],
                payload: torch.Tensor | None = None) -> tuple[TensorType, ...]:
    """Run ``op``'s type rule, re-raising any failure as an error that names the op and the types."""
    from ..core.errors import ShapeError

    if op.attrs is not None and payload is None and not isinstance(attrs, op.attrs):
        from ..core.errors import AttributeValueError

        raise AttributeValueError(f"{op.name}: attributes must be {op.attrs.__name__}, got {type(attrs).__name__}")
    try:
        result = op.infer(attrs, in_types) if payload is None else (TensorType.of(payload),)
    except OpgraphError as e:
        if getattr(e, "_opgraph_context", False):
            raise
        shown = ", ".join(str(t) for t in in_types) or "no inputs"
        err = type(e)(f"{op.name}({shown}): {e}")
        err._opgraph_context = True  # type: ignore[attr-defined]
        raise err from None
    except (TypeError, ValueError, IndexError) as e:  # a bug or unchecked input in a type rule
        shown = ", ".join(str(t) for t in in_types) or "no inputs"
        raise ShapeError(f"{op.name}({shown}): {e}") from None
    return (result,) if isinstance(result, TensorType) else tuple(result)
