"""Text pieces of generated region kernels: the kernel's name, literals, reduction neutrals and combiners, and
the workspace layout of split reductions (shared by the emitter and the launcher)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import torch

from ...core.dtype import DType
from ...ir.graph import Operation, Tensor
from ...ir.opdef import FusionKind
from . import indexing as ix
from .indexing import Index
from .reductions import REDUCTIONS

NEUTRAL = {"sum": "0", "prod": "1", "max": 'float("-inf")', "min": 'float("inf")'}
INT_NEUTRAL = {"sum": "0", "prod": "1", "max": "-2147483648", "min": "2147483647"}
FULL_ROW = "tl.full([1, RBLOCK], 1, tl.int1)"  # a constant mask as wide as a tile (no column past the row's end)


KERNEL_NAME = "fused_region"  # the stem of every generated kernel's name


def kernel_name(ops: Sequence[Operation]) -> str:
    """``fused_region_`` and the region's distinct computing ops, as profilers show the kernel (Inductor's
    ``triton_per_fused_...`` likewise): ``fused_region_add_layer_norm``."""
    names: list[str] = []
    for op in ops:
        if op.op.fusion is not FusionKind.INJECTIVE and op.op.name not in names:
            names.append(op.op.name)
    tail = re.sub(r"\W", "_", "_".join(names))[:80].rstrip("_")  # an identifier whatever the op names
    return f"{KERNEL_NAME}_{tail}" if tail else KERNEL_NAME


MAX_BARRIERS = 6  # statistics groups of a split reduction (a variance needs 2: its sums, its guard's centred sum)
WS_PARTS = 4  # statistics per group
PARTS_AT_ONCE = 32  # partials of a split column reduction combined per step by its last part
NAME_PATTERN = re.compile(r"[A-Za-z_]\w*")
TILE_REDUCE = {"sum": "tl.sum({}, 1)", "max": "tl.max({}, 1)", "min": "tl.min({}, 1)",
                "prod": "tl.reduce({}, 1, og_mul)"}
# a split row's parts' partials, a [split] vector, to one value (``split_parts.reduce_parts``)
PARTS_REDUCE = {"sum": "tl.sum({}, 0)", "max": "tl.max({}, 0)", "min": "tl.min({}, 0)",
                "prod": "tl.reduce({}, 0, og_mul)"}


def generated(op: Operation) -> bool:
    """Whether the emitter has a rule for the op's kind (its dtypes may still be refused)."""
    kind = op.op.fusion
    return (kind is FusionKind.ELEMENTWISE or (kind is FusionKind.INJECTIVE and op.op in ix.INDEX_RULES)
            or (kind is FusionKind.REDUCTION and op.op in REDUCTIONS))


def flat_key(t: Tensor, index: Index) -> tuple[Any, ...]:
    """A memo key for ``index`` in ``t``'s static shape; size-1 dims read at any index are the same element."""
    return ("flat of", t.shape, tuple("0" if d == 1 else e for d, e in zip(t.shape, index, strict=True)))


def literal(v: float | int | bool) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return f'float("{v}")'
    return repr(v)


def inlinable_scalar(value: torch.Tensor | None, dt: DType) -> float | int | bool | None:
    """The Python value of a one-element constant that a kernel may write into its source, else None: floats
    of at most 32 bits (held in float32, where Triton keeps a literal exactly), bools and int32-range ints."""
    if value is None or value.numel() != 1 or value.is_complex():
        return None
    v = value.reshape(()).item()
    if dt.is_floating and dt.bits <= 32:
        return float(v)
    if dt.name == "bool":
        return bool(v)
    if dt.name in ("int8", "int16", "int32", "uint8") and -2**31 <= int(v) < 2**31:
        return int(v)
    return None


def combine(kind: str, acc: str, v: str) -> str:
    return {"sum": f"{acc} + {v}", "prod": f"{acc} * {v}", "max": f"tl.maximum({acc}, {v})",
            "min": f"tl.minimum({acc}, {v})"}[kind]


def identifiers(expr: str) -> list[str]:
    return NAME_PATTERN.findall(expr)


def broadcasts(shape: Sequence[int | None], to: Sequence[int | None]) -> bool:
    if len(shape) > len(to):
        return False
    lead = len(to) - len(shape)
    return all(s == 1 or s is None or d is None or s == d for s, d in zip(shape, to[lead:], strict=True))
