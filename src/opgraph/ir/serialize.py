"""Graphs to disk and back: ``graph.json`` (ops, attributes, types) + ``weights.safetensors``.

No pickle, ever: loading reads JSON and raw tensor bytes and looks ops up in the op registry, so a
file cannot run code. Every problem in a file raises ``SerializationError``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors.torch import load_file, save_file

from ..core.dtype import dtype_from_name
from ..core.errors import OpgraphError, SerializationError
from ..core.types import TensorType
from .attrs import decode, encode
from .graph import GraphCore, Tensor
from .opdef import op_by_name

FORMAT = "opgraph.graph"
VERSION = 1
G = TypeVar("G", bound=GraphCore)


def graph_to_json(graph: GraphCore) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    index: dict[int, tuple[int, int]] = {}  # id(tensor) -> (op id, output index)
    ops, weights = [], {}
    for op in graph.ops:
        entry: dict[str, Any] = {
            "id": op.id, "op": op.op.name, "name": op.name,
            "inputs": [list(index[id(t)]) for t in op.inputs],
            "attrs": encode(op.attrs),
            "outputs": [{"shape": list(t.type.shape), "dtype": t.type.dtype.name} for t in op.outputs],
        }
        if op.payload is not None:
            weights[f"op{op.id}"] = op.payload.detach().cpu().contiguous()
            entry["payload"] = f"op{op.id}"
        ops.append(entry)
        for t in op.outputs:
            index[id(t)] = (op.id, t.index)
    return {"format": FORMAT, "version": VERSION, "ops": ops}, weights


def graph_from_json(cls: type[G], doc: Any, weights: dict[str, torch.Tensor]) -> G:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SerializationError("not an opgraph graph file (missing or wrong 'format')")
    if doc.get("version") != VERSION:
        raise SerializationError(f"graph format version {doc.get('version')!r}; this opgraph reads {VERSION}")
    graph = cls()
    outputs: dict[tuple[int, int], Tensor] = {}
    try:
        for entry in doc["ops"]:
            op = op_by_name(entry["op"])
            inputs = [outputs[(int(i), int(k))] for i, k in entry["inputs"]]
            payload = weights[entry["payload"]] if "payload" in entry else None
            out_types = [TensorType(tuple(o["shape"]), dtype_from_name(o["dtype"])) for o in entry["outputs"]]
            graph._next_id = int(entry["id"])
            operation = graph._add_op(op, inputs, decode(entry["attrs"]), entry["name"], payload, out_types)
            for t in operation.outputs:
                outputs[(operation.id, t.index)] = t
        graph._next_id = max((o.id for o in graph.ops), default=-1) + 1
        graph.verify()
    except SerializationError:
        raise
    except (OpgraphError, KeyError, TypeError, ValueError, IndexError) as e:
        raise SerializationError(f"corrupt graph file: {type(e).__name__}: {e}") from None
    return graph


def save_graph(graph: GraphCore, path: str | os.PathLike[str]) -> None:
    """Write ``path/graph.json`` and ``path/weights.safetensors`` (``path`` is a directory)."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    doc, weights = graph_to_json(graph)
    (root / "graph.json").write_text(json.dumps(doc, indent=1, allow_nan=False))
    save_file(weights, str(root / "weights.safetensors"))


def load_graph(cls: type[G], path: str | os.PathLike[str]) -> G:
    root = Path(path)
    try:
        doc = json.loads((root / "graph.json").read_text())
    except FileNotFoundError:
        raise SerializationError(f"no graph.json in {root}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SerializationError(f"{root / 'graph.json'} is not valid JSON: {e}") from None
    try:
        weights = load_file(str(root / "weights.safetensors"))
    except FileNotFoundError:
        raise SerializationError(f"no weights.safetensors in {root}") from None
    except Exception as e:  # safetensors raises its own error types on corrupt headers
        raise SerializationError(f"{root / 'weights.safetensors'} is corrupt: {e}") from None
    return graph_from_json(cls, doc, weights)
