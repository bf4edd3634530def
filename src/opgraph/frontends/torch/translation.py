"""An ATen-level FX graph (what AOTAutograd or ``torch.export`` produce) translated into an ``og.Graph``.

Placeholders become placeholders (their types from the traced FakeTensors; symbolic sizes become dynamic
dims), each ``call_function`` node goes through its converter (``registry``) or, without one, becomes a
``torch_fallback`` op, ``operator.getitem`` picks an output, and the output node gives the targets (``None``
entries stay ``None``). ``Translation.fallbacks`` counts the ATen ops that ran as themselves, with the reason.
"""

from __future__ import annotations

import json
import operator
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from ...core.dtype import float64, int64
from ...core.errors import DTypeError, OpgraphError, ShapeError
from ...graph import Graph
from ...ir.graph import Tensor
from .fallback import TORCH_FALLBACK, FallbackAttrs, encode_args, qualified_name
from .registry import ConvertContext, SymSize, Unsupported, lookup, type_of


class NotTranslatable(OpgraphError):
    """The FX graph has something no op can stand for (a non-tensor input or output, a Python call ...)."""


@dataclass
class Translation:
    graph: Graph
    inputs: list[Tensor]  # one placeholder per FX placeholder, in order
    outputs: list[Tensor | SymSize | None]  # the FX outputs (None where it returns None; a size input as is)
    tensor_inputs: list[int] = field(default_factory=list)  # positions of the FX inputs that are tensors
    size_refs: dict[Any, tuple[Tensor, int]] = field(default_factory=dict)  # size symbol -> an input dim
    fallbacks: Counter[str] = field(default_factory=Counter)  # "aten::op.overload" -> nodes
    reasons: dict[str, str] = field(default_factory=dict)  # "aten::op.overload" -> why it fell back
    state: dict[str, torch.Tensor] = field(default_factory=dict)  # get_attr constants by target
    output_values: list[Any] = field(default_factory=list)  # each FX output's traced (fake) value, or None
    vendor_ops: bool = False  # converters may make one vendor op where the elementwise spelling fuses only on GPUs
    size_inputs: dict[Any, int] = field(default_factory=dict)  # size symbol -> the FX input position giving it

    def size_reader(self, size: SymSize) -> Callable[[Sequence[Any]], int] | None:
        """A function of the FX inputs computing an output ``size`` that no input gives as is."""
        return _size_reader(self, size)


def _size_reader(tr: Translation, size: SymSize) -> Callable[[Sequence[Any]], int] | None:
    """A function of the FX inputs computing ``size`` (an expression of input dims and size inputs, which AOTAutograd
    saves for the backward), or None when one of its symbols is not read from the inputs."""
    import sympy

    expr = size.sym
    if expr is None:
        return None
    sources: list[tuple[Any, int, int | None]] = []  # (symbol, FX input position, axis or None for a size input)
    positions = {id(t): tr.tensor_inputs[k] for k, t in enumerate(tr.inputs)}
    for symbol in sorted(expr.free_symbols, key=str):
        if symbol in tr.size_inputs:
            sources.append((symbol, tr.size_inputs[symbol], None))
        elif symbol in tr.size_refs and id(tr.size_refs[symbol][0]) in positions:
            tensor, axis = tr.size_refs[symbol]
            sources.append((symbol, positions[id(tensor)], axis))
        else:
            return None
    fn = sympy.lambdify([s for s, _, _ in sources], expr, modules="math")

    def read(args: Sequence[Any]) -> int:
        return int(fn(*(int(args[p]) if axis is None else args[p].shape[axis] for _, p, axis in sources)))

    return read


def _types(node: torch.fx.Node) -> list[Any]:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        return [type_of(v) for v in val]
    return [type_of(val)]


def translate(gm: torch.fx.GraphModule, on_placeholder: Callable[[torch.fx.Node, Graph], Tensor | None] | None = None,
              graph: Graph | None = None, vendor_ops: bool = False) -> Translation:
    """Translate ``gm`` (into ``graph``, or a new one); ``on_placeholder`` may make a placeholder node something
    else (a variable), or return None to keep it a placeholder. ``vendor_ops``: the graph runs where no kernels are
    generated (the CPU), so an ATen op whose opgraph spelling is many elementwise ops may become one vendor op."""
    g = graph if graph is not None else Graph()
    env: dict[torch.fx.Node, Any] = {}
    tr = Translation(g, [], [], vendor_ops=vendor_ops)
    position = -1
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            position += 1
            val = node.meta.get("val")
            if isinstance(val, torch.SymInt):  # a size known at run time: converters see a SymSize
                env[node] = SymSize(str(val), position, val.node.expr)
                if val.node.expr.is_Symbol:
                    tr.size_inputs.setdefault(val.node.expr, position)
                continue
            t = on_placeholder(node, g) if on_placeholder is not None else None
            if t is None:
                ty = type_of(val)
                if ty is None:
                    raise NotTranslatable(f"input {node.name} is not a tensor ({type(val).__name__})")
                t = g.placeholder(ty.shape, ty.dtype, name=_name(node.name))
                tr.inputs.append(t)
                tr.tensor_inputs.append(position)
                for axis, d in enumerate(val.shape):  # where each run-time size can be read
                    if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol:
                        tr.size_refs.setdefault(d.node.expr, (t, axis))
            env[node] = t
        elif node.op == "get_attr":
            value = _attr(gm, node.target)
            env[node] = g.constant(value.detach(), name=_name(node.name)) if isinstance(value, torch.Tensor) else value
        elif node.op == "call_function":
            env[node] = _call(tr, node, env)
        elif node.op == "output":
            (result,) = node.args
            items = result if isinstance(result, (tuple, list)) else [result]
            for item in items:
                value = env[item] if isinstance(item, torch.fx.Node) else item
                if isinstance(value, SymSize) and value.position is None and _size_reader(tr, value) is None:
                    raise NotTranslatable(f"output {item} is a size computed at run time ({value.expr}) from "
                                          f"sizes the inputs do not give")
                if value is not None and not isinstance(value, (Tensor, SymSize)):
                    raise NotTranslatable(f"output {item} is not a tensor ({type(value).__name__})")
                tr.outputs.append(value)
                tr.output_values.append(item.meta.get("val") if isinstance(item, torch.fx.Node) else None)
        else:
            raise NotTranslatable(f"FX node {node.name} of kind {node.op} ({node.target})")
    return tr


def _attr(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _name(fx_name: str) -> str:
    return fx_name.replace(":", "_")


def _numbers_as_tensors(ctx: ConvertContext, target: torch._ops.OpOverload, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Symbolic numbers passed where the schema takes a Tensor or a Scalar (``mul(x, 1 / (N * H * W))`` in a
    dynamic-shape batch-norm gradient) as 0-d tensors computed from the input dims; sizes in size lists stay."""
    schema = target._schema.arguments
    out = list(args)
    traced = ctx.out_types[0] if ctx.out_types else None
    # a float number takes the traced result's float dtype: PyTorch's scalars (and 0-d tensors) do not promote a
    # float32 tensor, where a float64 0-d tensor here would make opgraph's product float64
    real = traced.dtype if traced is not None and traced.dtype.is_floating else float64
    for i, a in enumerate(args):
        if isinstance(a, SymSize) and i < len(schema) and str(schema[i].type) in ("Tensor", "Scalar", "number"):
            out[i] = ctx.scalar(a, int64 if a.sym is not None and a.sym.is_integer else real)
    return tuple(out)


def _map(value: Any, env: dict[torch.fx.Node, Any]) -> Any:
    if isinstance(value, torch.fx.Node):
        return env[value]
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, env) for k, v in value.items()}
    return value


def _call(tr: Translation, node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> Any:
    args, kwargs = _map(node.args, env), _map(node.kwargs, env)
    if node.target is operator.getitem:
        seq, i = args
        return seq[i]
    if isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat)):  # size arithmetic: known at run time
        val = node.meta["val"]
        return SymSize(str(val), None, val.node.expr)
    if not isinstance(node.target, torch._ops.OpOverload):
        raise NotTranslatable(f"FX node {node.name} calls {node.target}, not an ATen op")
    types = _types(node)
    converter = lookup(node.target)
    reason = "no converter"
    if converter is not None:
        try:
            ctx = ConvertContext(tr.graph, types, tr.size_refs, tr.vendor_ops)
            args = _numbers_as_tensors(ctx, node.target, args)
            out = converter(ctx, *args, **kwargs)
            return _checked(out, types, node)
        except Unsupported as e:
            reason = str(e) or "unsupported arguments"
        except (DTypeError, ShapeError) as e:  # an opgraph op refused these types: run the ATen op instead
            reason = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return _fallback(tr, node, args, kwargs, types, reason)


def _checked(out: Any, types: Sequence[Any], node: torch.fx.Node) -> Any:
    """A converter's result must have the traced types (a wrong converter fails here, not in the numbers)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for got, want in zip(outs, types, strict=False):
        if isinstance(got, Tensor) and want is not None and not _same(got.type, want):
            raise OpgraphError(f"converter of {node.target} made {got.type} where PyTorch traced {want} "
                               f"(node {node.name})")
    return out


def _same(got: Any, want: Any) -> bool:
    return got.dtype is want.dtype and len(got.shape) == len(want.shape) and all(
        a is None or b is None or a == b for a, b in zip(got.shape, want.shape, strict=True))


def _fallback(tr: Translation, node: torch.fx.Node, args: Any, kwargs: Any, types: list[Any], reason: str) -> Any:
    if not types or any(t is None for t in types):
        raise NotTranslatable(f"{node.target} returns something other than tensors and has no converter")
    if _has_sym(args) or _has_sym(kwargs):
        raise NotTranslatable(f"{node.target} takes a size known only at run time and has no converter ({reason})")
    inputs: list[Tensor] = []

    def index_of(v: Any) -> int | None:
        if not isinstance(v, Tensor):
            return None
        for i, t in enumerate(inputs):
            if t is v:
                return i
        inputs.append(v)
        return len(inputs) - 1

    try:
        template = json.dumps([encode_args(list(args), index_of)["seq"],
                               {k: encode_args(v, index_of) for k, v in kwargs.items()}])
    except TypeError as e:  # an argument a fallback cannot record: the graph runs eagerly
        raise NotTranslatable(f"{node.target} has no converter and {e}") from None
    target = qualified_name(node.target)
    tr.fallbacks[target] += 1
    tr.reasons.setdefault(target, reason)
    attrs = FallbackAttrs(target, template, tuple(t.shape for t in types), tuple(t.dtype for t in types))
    outs = tr.graph._apply_multi(TORCH_FALLBACK, inputs, attrs, name=_name(node.name))
    val = node.meta.get("val")
    return outs if isinstance(val, (tuple, list)) else outs[0]


def _has_sym(value: Any) -> bool:
    if isinstance(value, SymSize):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_sym(v) for v in value)
    if isinstance(value, dict):
        return any(_has_sym(v) for v in value.values())
    return False


__all__ = ["NotTranslatable", "Translation", "translate"]
