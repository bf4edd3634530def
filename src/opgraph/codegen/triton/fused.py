"""The lowering of ``fused_elementwise`` (a codegen facet of the op, keyed by the op object): the region's
steps are rebuilt as a small graph and emitted as one Triton kernel (``kernel.elementwise_kernel``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...ir.graph import Operation
from ...ir.opdef import LowerContext
from ...passes.fuse import FUSED_ELEMENTWISE, region_graph
from .expr import EXPRESSIONS, NotExpressible
from .kernel import elementwise_kernel, emit_elementwise


def can_fuse(op: Operation) -> bool:
    """An elementwise op the expression table can write for these dtypes, with static shapes."""
    if op.op not in EXPRESSIONS or not all(t.type.is_static for t in (*op.inputs, *op.outputs)):
        return False
    try:
        emit_elementwise([op], list(op.inputs), list(op.outputs))
    except NotExpressible:
        return False
    return True


def _lower_fused(ctx: LowerContext) -> Callable[..., Any]:
    ops, inputs, outputs = region_graph(ctx.attrs, ctx.in_types)
    kernel = elementwise_kernel(ops, inputs, outputs)
    device = ctx.device
    if len(outputs) == 1:
        def one(*xs: Any) -> Any:
            return kernel(*xs, device=device)[0]

        one.source = kernel.source  # type: ignore[attr-defined]
        return one

    def several(*xs: Any) -> Any:
        return tuple(kernel(*xs, device=device))

    several.source = kernel.source  # type: ignore[attr-defined]
    return several


FUSED_ELEMENTWISE.lower = _lower_fused
