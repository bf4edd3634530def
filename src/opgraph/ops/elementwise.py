"""Elementwise ops with two or three inputs (arithmetic, comparison, logic, bitwise), cast and select.

Binary builders broadcast and promote: Python scalars are weak (they take the tensor's dtype), and
two tensors of different dtypes are cast to ``promote_types`` of both before the op, so each op
itself sees one dtype (this also keeps PyTorch's 0-d tensor promotion out of the picture).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..core.dtype import DType, as_dtype, bool_, promote_types, promote_with_scalar, weak_scalar_dtype
from ..core.errors import DTypeError
from ..core.types import TensorType
from ..ir.graph import GraphCore, Tensor
from ._rules import broadcast_types, expect_arity, expect_dtype, same_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs, direct

ELEMENTWISE = FusionKind.ELEMENTWISE


# ---- rule factories --------------------------------------------------------------------------
def binary_rule(*, result: DType | None = None, floating: bool = False, integer: bool = False,
                boolean: bool = False, numeric: bool = False) -> Callable[[Any, tuple[TensorType, ...]], TensorType]:
    """Two inputs of one dtype (in the named categories), broadcast; ``result`` fixes the output dtype."""

    def rule(a: Any, ins: tuple[TensorType, ...]) -> TensorType:
        expect_arity(ins, 2)
        dt = same_dtype(ins)
        for t in ins:
            expect_dtype(t, floating=floating, integer=integer, boolean=boolean, numeric=numeric)
        return TensorType(broadcast_types(ins), result or dt)

    return rule


def binary(name: str, fn: Callable[..., Any], doc: str = "", **kinds: Any) -> OpDef:
    return OpDef(name, infer=binary_rule(**kinds), lower=direct(fn), fusion=ELEMENTWISE, doc=doc,
                 differentiable=kinds.get("result") is None and not kinds.get("integer", False) and not kinds.get("boolean", False))


# ---- declarations ----------------------------------------------------------------------------
ARITH = dict(numeric=True)
ADD = binary("add", torch.add, "x + y", **ARITH)
SUBTRACT = binary("subtract", torch.sub, "x - y", **ARITH)
MULTIPLY = binary("multiply", torch.mul, "x * y", **ARITH)


def _divide_lower(ctx: LowerContext) -> Callable[..., Any]:
    if ctx.in_types[0].dtype.is_integer:
        return lambda x, y: torch.div(x, y, rounding_mode="trunc")
    return torch.div


DIVIDE = OpDef("divide", infer=binary_rule(numeric=True), lower=_divide_lower, fusion=ELEMENTWISE,
               doc="x / y (true division for floats; integers truncate toward zero)")


@attrs
class CastAttrs:
    dtype: DType


def _cast_rule(a: CastAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    if ins[0].dtype.packed or a.dtype.packed:
        raise DTypeError(f"cast between {ins[0].dtype.name} and {a.dtype.name}: use the quantization ops for 4-bit types")
    return TensorType(ins[0].shape, a.dtype)


def _cast_lower(ctx: LowerContext) -> Callable[..., Any]:
    target = ctx.attrs.dtype.torch_dtype
    return lambda x: x.to(target)


CAST = OpDef("cast", infer=_cast_rule, lower=_cast_lower, attrs=CastAttrs, fusion=ELEMENTWISE,
             doc="convert values to another dtype (float to int truncates toward zero)")


# ---- builder methods -------------------------------------------------------------------------
class ElementwiseBuilders(GraphCore):
    """Graph methods for elementwise ops with several inputs."""

    def _operands(self, values: Sequence[Any]) -> list[Tensor]:
        """Tensors of one promoted dtype from tensors and weak Python scalars."""
        tensors = [v for v in values if isinstance(v, Tensor)]
        if tensors:
            dt = tensors[0].dtype
            for t in tensors[1:]:
                dt = promote_types(dt, t.dtype)
            for v in values:
                if not isinstance(v, Tensor):
                    dt = promote_with_scalar(dt, v)
        else:
            dt = weak_scalar_dtype(values[0])
            for v in values[1:]:
                dt = promote_types(dt, weak_scalar_dtype(v))
        out = []
        for v in values:
            t = self._as_tensor(v, like=dt)
            out.append(t if t.dtype is dt else self.cast(t, dt))
        return out

    def _binary(self, op: OpDef, x: Any, y: Any, name: str | None) -> Tensor:
        a, b = self._operands([x, y])
        return self._apply(op, [a, b], None, name)

    def add(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x + y`` with broadcasting.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,), og.float32)
        >>> g.run({x: [1.0, 2.0]}, [g.add(x, 1)])[0].tolist()
        [2.0, 3.0]
        """
        return self._binary(ADD, x, y, name)

    def subtract(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x - y`` with broadcasting."""
        return self._binary(SUBTRACT, x, y, name)

    def multiply(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x * y`` with broadcasting."""
        return self._binary(MULTIPLY, x, y, name)

    def divide(self, x: Any, y: Any, *, name: str | None = None) -> Tensor:
        """``x / y`` with broadcasting; integer inputs divide with truncation (as MPSGraph)."""
        return self._binary(DIVIDE, x, y, name)

    def cast(self, x: Tensor, dtype: object, *, name: str | None = None) -> Tensor:
        """``x`` converted to ``dtype``."""
        return self._apply(CAST, [self._as_tensor(x)], CastAttrs(as_dtype(dtype)), name)


__all__ = ["ADD", "CAST", "DIVIDE", "MULTIPLY", "SUBTRACT", "ElementwiseBuilders", "binary", "binary_rule", "bool_"]
