"""Building ops into a pass's new graph: fresh names that no op of the old graph has (``rewrite`` copies the old
ops under their own names, so a name taken early would collide later) and a few common ops."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core.dtype import DType
from ..ir.graph import GraphCore, Tensor
from ..ir.opdef import OpDef
from ..ir.sources import CONSTANT
from ..ops import elementwise as ew
from ..ops import gradient_support as gs
from ..ops import shape


def fresh_name(base: str, taken: set[str], g: GraphCore) -> str:
    """``base``, or ``base2``, ``base3``, ...: the first that neither ``taken`` (the old graph's names) nor
    ``g`` has."""
    name, k = base, 1
    while name in taken or name in g._names:
        k += 1
        name = f"{base}{k}"
    return name


class OpBuilder:
    """Adds the ops of one decomposition to the new graph, named after the op they replace (``gn.grouped``)
    with names no op of the old graph has, so the ops copied after it keep theirs."""

    def __init__(self, g: GraphCore, base: str, taken: set[str]) -> None:
        self.g, self.base, self.taken = g, base, taken

    def _name(self, part: str) -> str:
        return fresh_name(f"{self.base}.{part}", self.taken, self.g)

    def op(self, op: OpDef, ins: Sequence[Tensor], attrs: Any = None, *, part: str = "", last: bool = False) -> Tensor:
        """``part`` names the op (default: its op name); ``last``: the op standing for the decomposed one, which
        takes its name."""
        return self.g._add_op(op, ins, attrs, self.base if last else self._name(part or op.name)).outputs[0]

    def constant(self, value: torch.Tensor, part: str = "constant") -> Tensor:
        return self.g._add_op(CONSTANT, [], None, self._name(part), payload=value).outputs[0]

    def scalar(self, value: float, dtype: DType) -> Tensor:
        return self.constant(torch.tensor(value, dtype=dtype.torch_dtype))

    def cast(self, t: Tensor, dtype: DType, *, last: bool = False) -> Tensor:
        return t if t.dtype is dtype else self.op(ew.CAST, [t], ew.CastAttrs(dtype), last=last)

    def reshape(self, t: Tensor, to: Sequence[int | None], *, part: str = "", last: bool = False) -> Tensor:
        """A reshape to ``to`` (one dynamic dim becomes -1)."""
        return self.op(shape.RESHAPE, [t], shape.ReshapeAttrs(tuple(-1 if d is None else d for d in to)), part=part,
                       last=last)

    def tie(self, t: Tensor, anchor: Tensor) -> Tensor:
        """``t`` read inside ``anchor``'s region (it broadcasts into ``anchor``'s shape)."""
        return self.op(gs.BROADCAST_LIKE, [t, anchor])
