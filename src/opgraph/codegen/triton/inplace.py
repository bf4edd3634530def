"""Which outputs of a generated region kernel may be written into the buffers of its inputs.

The memory planner hands an input's buffer to an output when the kernel reads that input only where it writes the
output: each program then reads an element before it overwrites it, and no other program reads it afterwards.
What the emitter recorded while writing the kernel decides it: where each input was loaded (``loaded_at``, per
index; ``None`` for an index other than the domain's own) and in which walk (``loaded_in``), and which outputs the
first walk of a looped reduction stores (``early``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.errors import GraphError
from ...ir.graph import Tensor
from .expr import NotExpressible

if TYPE_CHECKING:
    from .region import RegionEmitter


def inplace_pairs(em: RegionEmitter) -> frozenset[tuple[int, int]]:
    """Pairs (input i, output j): the kernel reads input i only where it writes output j (same shape and dtype),
    so output j may be written into input i's buffer. Not for an output broadcast along a kept dim: one program
    stores it while the others still read the input there (a batch norm's (1, 1, 1, C) mean)."""
    pairs = set()
    early = em.config.looped or em.config.split > 1  # row outputs are stored while others still read
    stored_first = {j for j, _ in em.early} if em.early_loop is not None else set()
    for i, t in enumerate(em.inputs):
        seen = em.loaded_at.get(i, set())
        if not seen or None in seen:
            continue
        # an output stored by the first walk may take the buffer of an input only that walk reads (not a later
        # walk, nor the code between: a row's first element, or a split row's shift, read by others)
        only_first = em.loaded_in.get(i) == {em.early_loop}
        for j, o in enumerate(em.outputs):
            if o.type == t.type and t.type.is_static and not (early and _row_level(em, o)) \
                    and not _stored_by_some(em, o) and (j not in stored_first or only_first):
                pairs.add((i, j))
    return frozenset(pairs)


def _row_level(em: RegionEmitter, t: Tensor) -> bool:
    """``t`` is stored once per row (a reduction's output, or broadcast along the reduced dims)."""
    try:
        return em.store_index(t)[2]
    except (NotExpressible, GraphError):
        return True


def _stored_by_some(em: RegionEmitter, t: Tensor) -> bool:
    """Only some programs store ``t`` (broadcast along a kept dim)."""
    try:
        return bool(em.store_index(t)[1])
    except (NotExpressible, GraphError):
        return True


__all__ = ["inplace_pairs"]
