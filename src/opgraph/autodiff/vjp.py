"""Reverse-mode autodiff: ``graph.gradients(of, wrt)`` builds gradient ops into the graph.

The walk visits, in reverse creation order, the ops that lie on a path from ``wrt`` to ``of`` and
calls each op's VJP rule (``OpDef.vjp``, declared next to the op). Integer and bool tensors carry no
gradient; a gradient asked through an op declared ``differentiable=False`` whose floating result depends on
the values (a fused region, a PyTorch fallback, an optimizer update) raises ``GraphError`` rather than
silently give zeros; comparisons and the like (integer/bool results) simply carry none.
Autodiff happens on the graph, before any fusion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.errors import DTypeError, GraphError
from ..ir.graph import GraphCore, Tensor
from ..ir.printer import format_op

if TYPE_CHECKING:
    from ..graph import Graph


def _carries_gradient(t: Tensor) -> bool:
    return t.dtype.is_floating or t.dtype.is_complex


def _check(graph: GraphCore, t: object, what: str) -> Tensor:
    if not isinstance(t, Tensor) or t.graph is not graph:
        raise GraphError(f"gradients: {what} {t!r} is not a tensor of this graph")
    return t


def vjp(graph: Graph, outputs: Sequence[Tensor], cotangents: Sequence[Tensor],
        wrt: Sequence[Tensor]) -> list[Tensor]:
    """Gradients of ``sum(outputs[i] * cotangents[i])`` with respect to each of ``wrt``."""
    outputs = [_check(graph, t, "output") for t in outputs]
    wrt = [_check(graph, t, "wrt tensor") for t in wrt]
    for t in wrt:
        if not _carries_gradient(t):
            raise DTypeError(f"gradients: cannot differentiate with respect to %{t.name} of dtype {t.dtype.name} "
                             "(only floating and complex tensors carry gradients)")
    ops = list(graph.ops)
    # the ops on a path wrt -> outputs: reachable forward from wrt and backward from the outputs
    forward: set[int] = {id(t) for t in wrt}
    for op in ops:  # non-differentiable ops that read values are reached too, so asking through one raises
        if any(id(t) in forward for t in op.inputs) and (op.op.differentiable or op.op.reads_values):
            forward.update(id(t) for t in op.outputs if _carries_gradient(t))
    backward: set[int] = {id(t.op) for t in outputs}
    for op in reversed(ops):
        if id(op) in backward:
            backward.update(id(t.op) for t in op.inputs)

    cts: dict[int, Tensor] = {}

    def accumulate(t: Tensor, ct: Tensor) -> None:
        prev = cts.get(id(t))
        cts[id(t)] = ct if prev is None else graph.add(prev, ct)

    for out, ct in zip(outputs, cotangents, strict=True):
        if ct.shape != out.shape and None not in out.shape:
            ct = graph.broadcast_like(ct, out)
        accumulate(out, ct if ct.dtype is out.dtype else graph.cast(ct, out.dtype))

    for op in reversed(ops):
        if id(op) not in backward or not any(id(t) in cts for t in op.outputs):
            continue
        if not any(id(t) in forward for t in op.inputs):
            continue  # nothing upstream needs a gradient
        if not op.op.differentiable:
            if any(_carries_gradient(t) for t in op.outputs) and any(id(t) in forward for t in op.inputs):
                raise GraphError(f"gradients: op {op.op.name} is not differentiable, and the gradient asked for "
                                 f"flows through it, at\n    {format_op(op)}")
            continue
        if op.op.vjp is None:
            raise GraphError(f"gradients: op {op.op.name} has no gradient rule yet, at\n    {format_op(op)}")
        out_cts = tuple(_or_zeros(graph, cts.get(id(t)), t) for t in op.outputs)
        in_cts = op.op.vjp(graph, op, out_cts)
        if len(in_cts) != len(op.inputs):
            raise GraphError(f"gradients: the rule of {op.op.name} returned {len(in_cts)} gradients "
                             f"for {len(op.inputs)} inputs")
        for t, ct in zip(op.inputs, in_cts, strict=True):
            if ct is None or id(t) not in forward or not _carries_gradient(t):
                continue
            if ct.dtype is not t.dtype:
                ct = graph.cast(ct, t.dtype)
            accumulate(t, ct)
    return [_or_zeros(graph, cts.get(id(t)), t) for t in wrt]


def _or_zeros(graph: Graph, ct: Tensor | None, like: Tensor) -> Tensor:
    return ct if ct is not None else graph.zeros_like(like)


def gradients(graph: Graph, of: Tensor, wrt: Sequence[Tensor]) -> dict[Tensor, Tensor]:
    """``{w: d of / d w}``; a non-scalar ``of`` is summed first (MPSGraph's ``gradients(of:with:)``)."""
    of = _check(graph, of, "of")
    if not _carries_gradient(of):
        raise DTypeError(f"gradients: %{of.name} has dtype {of.dtype.name}; only floating tensors are differentiated")
    grads = vjp(graph, [of], [graph.ones_like(of)], list(wrt))
    return dict(zip(wrt, grads, strict=True))


def jvp(graph: Graph, outputs: Sequence[Tensor], inputs: Sequence[Tensor],
        tangents: Sequence[Tensor]) -> list[Tensor]:
    """Forward mode from the VJP rules by transposition: the VJP ``u -> J^T u`` is linear in ``u``, so
    ``J t`` is the gradient, with respect to ``u``, of ``<J^T u, t>``. ``u`` is a zero stand-in (its
    value never matters) and the second differentiation uses the same VJP rules."""
    if len(inputs) != len(tangents):
        raise GraphError(f"jvp: {len(inputs)} inputs but {len(tangents)} tangents")
    for x, t in zip(inputs, tangents, strict=True):
        _check(graph, t, "tangent")
        if x.dtype is not t.dtype or (x.shape != t.shape and None not in x.shape + t.shape):
            raise DTypeError(f"jvp: tangent %{t.name}: {t.type} does not match input %{x.name}: {x.type}")
    outputs = list(outputs)
    # not a bare zeros_like: rules may skip terms for cotangents that are the engine's zero fills
    dummies = [graph.multiply(graph.zeros_like(o), 1) for o in outputs]
    pulled = vjp(graph, outputs, dummies, inputs)
    inner: Any = None
    for p, t in zip(pulled, tangents, strict=True):
        term = graph.reduce_sum(graph.multiply(p, t))
        inner = term if inner is None else graph.add(inner, term)
    return vjp(graph, [inner], [graph.ones_like(inner)], dummies)


class AutodiffMethods(GraphCore):
    """``gradients`` and ``jvp`` on a graph."""

    def gradients(self, of: Tensor, wrt: Sequence[Tensor]) -> dict[Tensor, Tensor]:
        """Gradients of ``of`` (summed if not scalar) with respect to each of ``wrt`` (MPSGraph's
        ``gradients(of:with:)``); the gradient ops are added to this graph.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((3,), og.float64)
        >>> dx = g.gradients(g.reduce_sum(x * x), [x])[x]
        >>> g.run({x: torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)}, [dx])[0].tolist()
        [2.0, 4.0, 6.0]
        """
        return gradients(self, of, wrt)  # type: ignore[arg-type]

    def jvp(self, outputs: Sequence[Tensor], inputs: Sequence[Tensor], tangents: Sequence[Tensor]) -> list[Tensor]:
        """Forward-mode derivatives: ``sum_i d outputs / d inputs[i] . tangents[i]`` for each output.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((2,), og.float64); t = g.placeholder((2,), og.float64)
        >>> (dy,) = g.jvp([x * x], [x], [t])
        >>> g.run({x: torch.tensor([1.0, 3.0], dtype=torch.float64), t: torch.ones(2, dtype=torch.float64)},
        ...       [dy])[0].tolist()
        [2.0, 6.0]
        """
        return jvp(self, outputs, inputs, tangents)  # type: ignore[arg-type]
