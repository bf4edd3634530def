"""Constant folding: an op whose inputs are all constants becomes a constant (computed on the CPU), and
so does an op that reads only its inputs' types (``shape_of``) once those types are static."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..core.shape import numel
from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.opdef import FusionKind, LowerContext
from ..ir.sources import CONSTANT
from .program import Program, rewrite

FOLD_LIMIT = 1 << 16  # elements; larger results stay computed, to keep executables small


def constant_folding(program: Program, limit: int = FOLD_LIMIT) -> Program:
    def fn(op: Operation, ins: list[Tensor], g: GraphCore) -> Sequence[Tensor] | None:
        if op.op.side_effects or op.op.fusion is FusionKind.SOURCE or op.op.lower is None:
            return None
        if op.op.reads_values:
            if any(t.op.op is not CONSTANT for t in ins):
                return None
            args = [t.op.payload for t in ins]
        elif all(t.type.is_static for t in ins):  # only the types matter: stand-ins without data
            args = [torch.empty(t.type.shape, dtype=t.type.dtype.torch_dtype, device="meta")  # type: ignore[arg-type]
                    for t in ins]
        else:
            return None
        sizes = [numel(t.type.shape) for t in op.outputs]
        if any(n is None or n > limit for n in sizes):
            return None
        ctx = LowerContext(op.attrs, tuple(t.type for t in ins), tuple(t.type for t in op.outputs),
                           torch.device("cpu"))
        try:
            result = op.op.lower(ctx)(*args)
        except Exception:  # a failing kernel (bad index, ...) stays in, to fail with a clear error at run time
            return None
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        if any(v.is_meta for v in values):  # a type-only op that still echoed its stand-in input
            return None
        outs = []
        for t, v in zip(op.outputs, values, strict=True):
            v = v.contiguous().to(t.type.dtype.torch_dtype)
            outs.append(g._add_op(CONSTANT, [], None, None, payload=v, out_types=[t.type]).outputs[0])
        return outs

    return rewrite(program, fn)
