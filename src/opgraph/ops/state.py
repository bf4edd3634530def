"""Sources and state: placeholder, constant, variable, read, assign.

A variable is state that persists across runs on the device of the run. Its tensor, used directly,
is the value at the start of the run; ``read`` gives the value at the read's point in the graph and
``assign`` writes at its point (ops run in creation order), as in MPSGraph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.dtype import as_dtype, float32
from ..core.errors import GraphError, ShapeError
from ..core.shape import as_shape
from ..core.values import to_torch
from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.sources import ASSIGN, CONSTANT, PLACEHOLDER, READ, VARIABLE, PlaceholderAttrs
from .registry import defvjp


@defvjp(READ)
def _read_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    return (ct[0],)  # a read's gradient flows to the variable itself


class StateBuilders(GraphCore):
    """Graph methods for sources and state."""

    def placeholder(self, shape: Sequence[int | None] | None, dtype: object = float32, *,
                    name: str | None = None) -> Tensor:
        """An input fed at run time; ``None`` dims are dynamic.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((None, 3), og.float32, name="x"); x.shape
        (None, 3)
        """
        return self._apply(PLACEHOLDER, [], PlaceholderAttrs(as_shape(shape), as_dtype(dtype)), name)

    def constant(self, value: Any, dtype: object = None, *, shape: Sequence[int] | None = None,
                 name: str | None = None) -> Tensor:
        """A constant from a scalar, list, NumPy array or torch tensor; a scalar with ``shape`` fills it.

        >>> import opgraph as og
        >>> g = og.Graph(); g.constant(1.5, og.float16, shape=(2, 2)).type
        TensorType((2, 2), opgraph.float16)
        """
        dt = as_dtype(dtype) if dtype is not None else None
        t = to_torch(value, dt)
        if shape is not None:
            if t.numel() != 1:
                raise ShapeError(f"constant: shape= needs a scalar value, got {t.numel()} values")
            t = t.reshape(()).expand(tuple(as_shape(shape))).contiguous()  # type: ignore[arg-type]
        return self._add_op(CONSTANT, [], None, name, payload=t).output

    def variable(self, value: Any, dtype: object = None, *, name: str | None = None) -> Tensor:
        """Persistent state, initialised from ``value``, living on the device of each run.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); w = g.variable(torch.zeros(3), name="w"); w.name
        'w'
        """
        t = to_torch(value, as_dtype(dtype) if dtype is not None else None).clone()
        return self._add_op(VARIABLE, [], None, name, payload=t).output

    def read(self, variable: Tensor, *, name: str | None = None) -> Tensor:
        """The variable's value at this point of the run (after earlier assigns)."""
        expect_variable(variable, "read")
        return self._apply(READ, [variable], None, name)

    def assign(self, variable: Tensor, value: Any, *, name: str | None = None) -> Operation:
        """Write ``value`` into ``variable`` at this point of the run; run it through ``target_ops``."""
        expect_variable(variable, "assign")
        v = self._as_tensor(value, like=variable.dtype)
        return self._add_op(ASSIGN, [variable, v], None, name)


def expect_variable(t: object, what: str) -> None:
    if not isinstance(t, Tensor) or t.op.op is not VARIABLE:
        shown = f"%{t.name} ({t.op.op.name})" if isinstance(t, Tensor) else type(t).__name__
        raise GraphError(f"{what}: expects a variable tensor, got {shown}")


__all__ = ["ASSIGN", "CONSTANT", "PLACEHOLDER", "READ", "VARIABLE", "StateBuilders", "expect_variable", "to_torch"]
