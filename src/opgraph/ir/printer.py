"""The text form of a graph: one line per op, ``%out: type = op(%in, ...) {attrs}``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .graph import GraphCore, Operation


def format_attrs(attrs: Any) -> str:
    if attrs is None:
        return ""
    if dataclasses.is_dataclass(attrs) and not isinstance(attrs, type):
        parts = []
        for f in dataclasses.fields(attrs):
            v = getattr(attrs, f.name)
            if f.default is not dataclasses.MISSING and v == f.default:
                continue  # keep lines short: show only what differs from the default
            parts.append(f"{f.name}={_format_value(v)}")
        return " {" + ", ".join(parts) + "}" if parts else ""
    return f" {{{attrs!r}}}"


def _format_value(v: Any) -> str:
    from ..core.dtype import DType

    if isinstance(v, DType):
        return v.name
    if hasattr(v, "name") and hasattr(type(v), "__members__"):
        return str(v.name)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return type(v).__name__ + format_attrs(v).strip()
    return str(v)


def format_op(op: Operation) -> str:
    outs = ", ".join(f"%{t.name}: {t.type}" for t in op.outputs) or "()"
    ins = ", ".join(f"%{t.name}" for t in op.inputs)
    payload = ""
    if op.payload is not None:
        p = op.payload
        payload = f" <{p.numel()} values>" if p.numel() > 4 else f" <{p.flatten().tolist()}>"
    from .sources import PLACEHOLDER

    shown_attrs = "" if op.op is PLACEHOLDER else format_attrs(op.attrs)  # the type says it all
    return f"{outs} = {op.op.name}({ins}){shown_attrs}{payload}"


def format_ops(ops: Iterable[Operation], indent: str = "  ") -> str:
    return "\n".join(indent + format_op(o) for o in ops)


def format_graph(graph: GraphCore) -> str:
    body = format_ops(graph.ops)
    return "graph {\n" + body + ("\n" if body else "") + "}"


def excerpt(op_inputs: Iterable[Any], indent: str = "    ") -> str:
    """The ops that produced ``op_inputs``: the graph around a failing op, for error messages."""
    seen: list[Operation] = []
    for t in op_inputs:
        if hasattr(t, "op") and t.op not in seen:
            seen.append(t.op)
    return format_ops(seen, indent)
