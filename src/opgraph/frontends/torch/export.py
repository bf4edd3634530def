"""``og.from_torch(module, example_inputs)``: a PyTorch module as an ``og.Graph``, through ``torch.export``.

Parameters become variables, buffers become variables (constants with ``buffers="constants"``), lifted tensor
constants become constants, and buffer mutations (batch-norm running statistics) become ``assign`` ops, so the
graph can be inspected, saved, differentiated and compiled with the graph API. ATen ops without a converter are
``torch_fallback`` ops (``graph.fallbacks`` counts them).

    >>> import torch, opgraph as og
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    >>> g = og.from_torch(model, (torch.randn(2, 4),))
    >>> [t.name for t in g.inputs], [v.op.name for v in g.parameters]
    (['input'], ['0.weight', '0.bias'])
    >>> x = torch.randn(2, 4)  # the exported shapes (torch.export's dynamic_shapes makes dims dynamic)
    >>> torch.allclose(g.run({g.inputs[0]: x}, g.outputs)[0], model(x), atol=1e-6)
    True
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from ...core.errors import GraphError
from ...graph import Graph
from ...ir.graph import Operation, Tensor
from . import converters as _converters  # noqa: F401  (registers the converters)
from .registry import decompositions
from .translation import Translation, translate


class TorchGraph(Graph):
    """An ``og.Graph`` made from a PyTorch module: ``inputs`` (placeholders of the module's tensor arguments,
    in order), ``outputs`` (its tensor results), ``parameters`` / ``buffers`` (the variables, by PyTorch
    name), ``updates`` (the assigns of mutated buffers) and ``fallbacks`` (ATen ops run as themselves)."""

    inputs: list[Tensor]
    outputs: list[Tensor]
    parameters: list[Tensor]
    buffers: list[Tensor]
    updates: list[Operation]
    fallbacks: Counter[str]


def from_torch(module: torch.nn.Module, example_inputs: Sequence[Any], *, buffers: str = "variables",
               dynamic_shapes: Any = None, strict: bool = False) -> TorchGraph:
    """``module`` exported with ``torch.export`` (``dynamic_shapes`` as there) and translated to a graph."""
    from torch.export.graph_signature import InputKind, OutputKind

    if buffers not in ("variables", "constants"):
        raise GraphError(f"from_torch: buffers must be 'variables' or 'constants', got {buffers!r}")
    ep = torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes, strict=strict)
    ep = ep.run_decompositions(decompositions(torch.ops.aten.scaled_dot_product_attention.default))  # fused op
    sig = ep.graph_signature
    specs = {s.arg.name: s for s in sig.input_specs}
    values = {**ep.state_dict, **ep.constants}
    g = TorchGraph()
    g.parameters, g.buffers, g.updates = [], [], []
    by_target: dict[str, Tensor] = {}

    def on_placeholder(node: torch.fx.Node, graph: Graph) -> Tensor | None:
        spec = specs.get(node.name)
        if spec is None or spec.kind is InputKind.USER_INPUT:
            return None
        value = values[spec.target].detach()
        if spec.kind is InputKind.PARAMETER:
            t = graph.variable(value, name=spec.target)
            g.parameters.append(t)
        elif spec.kind is InputKind.BUFFER and buffers == "variables":
            t = graph.variable(value, name=spec.target)
            g.buffers.append(t)
        else:
            t = graph.constant(value, name=spec.target.replace(":", "_"))
        by_target[spec.target] = t
        return t

    tr: Translation = translate(ep.graph_module, on_placeholder, graph=g)
    g.inputs = tr.inputs
    g.outputs = []
    g.fallbacks = tr.fallbacks
    for spec, value in zip(sig.output_specs, tr.outputs, strict=True):
        if value is None:
            continue
        if not isinstance(value, Tensor):
            raise GraphError(f"from_torch: output {spec.arg} is a size, not a tensor")
        if spec.kind is OutputKind.BUFFER_MUTATION:
            target = by_target.get(spec.target)
            if target is not None and target.op.op.name == "variable":
                g.updates.append(g.assign(target, value))
        elif spec.kind is OutputKind.USER_OUTPUT:
            g.outputs.append(value)
        else:
            raise GraphError(f"from_torch: exported output kind {spec.kind.name} is not supported")
    return g


__all__ = ["TorchGraph", "from_torch"]
