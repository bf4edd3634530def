"""Op: reshape_dims — a reshape whose target sizes may be other tensors' sizes, read when the graph runs.

Each target dim is ``factor * product of referenced dims`` (``(factor, ((ref, axis), ...))``; a static dim has no
references), so a graph with several dynamic dims can still say "merge these two batch dims" or "split them
back" without a recompile per size (PyTorch's ``view(x, [s0 * s1, 8])`` under ``dynamic=True``). The
references only lend their shapes; their values are not read and get no gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..core.errors import AttributeValueError, ShapeError
from ..core.shape import format_shape, numel
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.opdef import FusionKind, LowerContext, OpDef
from .registry import attrs, defvjp
from .shape import check_ints, reshape_back

DimSpec = tuple[int, tuple[tuple[int, int], ...]]


@attrs
class ReshapeDimsAttrs:
    dims: tuple[tuple[int, tuple[tuple[int, int], ...]], ...]  # per target dim: (factor, ((ref, axis), ...));
    # (-1, ()) once at most: the dim that takes the remaining elements


def _check(a: ReshapeDimsAttrs, refs: Sequence[TensorType]) -> None:
    if not isinstance(a.dims, tuple):
        raise AttributeValueError(f"dims must be a tuple, got {type(a.dims).__name__}")
    if sum(d == (-1, ()) for d in a.dims) > 1:
        raise AttributeValueError("at most one dim may be -1")
    for d in a.dims:
        if not (isinstance(d, tuple) and len(d) == 2 and isinstance(d[1], tuple)):
            raise AttributeValueError(f"each dim must be (factor, ((ref, axis), ...)), got {d!r}")
        if d == (-1, ()):
            continue
        check_ints((d[0],), "factor", minimum=0)
        for ref in d[1]:
            if not (isinstance(ref, tuple) and len(ref) == 2):
                raise AttributeValueError(f"a reference must be (ref, axis), got {ref!r}")
            check_ints(ref, "reference", minimum=0)
            i, axis = ref
            if i >= len(refs) or axis >= refs[i].rank:
                raise AttributeValueError(f"reference {ref} names a dim the {len(refs)} reference(s) lack")


def _size(d: DimSpec, refs: Sequence[TensorType]) -> int | None:
    factor, used = d
    dims = [refs[i].shape[axis] for i, axis in used]
    known = [x for x in dims if x is not None]
    return None if len(known) < len(dims) else factor * math.prod(known)


def _rule(a: ReshapeDimsAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    if not ins:
        raise ShapeError("reshape_dims takes the tensor and its references")
    x, refs = ins[0], ins[1:]
    _check(a, refs)
    shape = tuple(_size(d, refs) if d != (-1, ()) else -1 for d in a.dims)
    if -1 in shape:  # the remaining elements: known when everything else is
        rest = [d for d in shape if d != -1]
        n = numel(x.shape)
        inferred = None if n is None or None in rest or 0 in rest else n // math.prod(rest)  # type: ignore[arg-type]
        shape = tuple(inferred if d == -1 else d for d in shape)
    n, m = numel(x.shape), numel(shape)
    if n is not None and m is not None and n != m:
        raise ShapeError(f"cannot reshape {format_shape(x.shape)} ({n} elements) to {format_shape(shape)} "
                         f"({m} elements)")
    return TensorType(shape, x.dtype)


def _lower(ctx: LowerContext) -> Callable[..., Any]:
    out = ctx.out_types[0]
    if out.is_static:
        shape = out.shape
        return lambda x, *refs: x.reshape(shape)
    dims = ctx.attrs.dims
    return lambda x, *refs: x.reshape([-1 if (f, used) == (-1, ()) else f * math.prod(refs[i].shape[a] for i, a in used)
                                       for f, used in dims])


RESHAPE_DIMS = OpDef("reshape_dims", infer=_rule, lower=_lower, attrs=ReshapeDimsAttrs, fusion=FusionKind.INJECTIVE,
                     doc="reshape to sizes that are products of other tensors' sizes (read at run time)")


@defvjp(RESHAPE_DIMS)
def _vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    return (reshape_back(g, ct[0], op.inputs[0]), *(None for _ in op.inputs[1:]))


class ReshapeDimsBuilders(GraphCore):
    def reshape_dims(self, x: Tensor, refs: Sequence[Tensor], dims: Sequence[int | DimSpec], *,
                     name: str | None = None) -> Tensor:
        """``x`` reshaped to ``dims``: each an int (-1 once at most: the remaining elements), or ``(factor, ((ref,
        axis), ...))``, the product of the factor and the referenced dims of ``refs``, read when the graph runs.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((None, 3, 4), og.float32); y = g.placeholder((None, 5), og.float32)
        >>> z = g.reshape_dims(x, [x], [(3, ((0, 0),)), 4])     # (batch * 3, 4)
        >>> g.run({x: torch.zeros(2, 3, 4), y: torch.zeros(1, 5)}, [z])[0].shape
        torch.Size([6, 4])
        """
        spec = tuple((int(d), ()) if isinstance(d, int) else (int(d[0]), tuple((int(i), int(a)) for i, a in d[1]))
                     for d in dims)
        return self._apply(RESHAPE_DIMS, [x, *refs], ReshapeDimsAttrs(spec), name)


__all__ = ["RESHAPE_DIMS", "ReshapeDimsAttrs", "ReshapeDimsBuilders"]
