"""Save/load round trips and corrupt files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import opgraph as og


def _graph() -> og.Graph:
    g = og.Graph()
    x = g.placeholder((None, 3), og.float16, name="x")
    w = g.variable(torch.randn(3, dtype=torch.float16), name="w")
    c = g.constant(np.array([1.0, 2.0, 3.0], np.float16), name="c")
    y = g.cast(g.exp(x) * w + c, og.float32, name="y")
    g.assign(w, w * 2.0, name="upd")
    g.constant(float("inf"), og.float32, name="inf")
    _ = y
    return g


def test_roundtrip_exact(tmp_path: Path) -> None:
    g = _graph()
    g.save(tmp_path / "g")
    g2 = og.Graph.load(tmp_path / "g")
    assert str(g2) == str(g)
    assert [p.name for p in g2.placeholders] == ["x"]
    x = torch.randn(2, 3, dtype=torch.float16)
    a = g.run({g.tensor("x"): x}, [g.tensor("y")], [g.operation("upd")])
    b = g2.run({g2.tensor("x"): x}, [g2.tensor("y")], [g2.operation("upd")])
    assert torch.equal(a[0], b[0])
    # saving the loaded graph gives the same files
    g2.save(tmp_path / "g2")
    assert (tmp_path / "g" / "graph.json").read_text() == (tmp_path / "g2" / "graph.json").read_text()


def _corrupt(tmp_path: Path, edit: object) -> Path:
    g = _graph()
    g.save(tmp_path / "g")
    p = tmp_path / "g" / "graph.json"
    doc = json.loads(p.read_text())
    edit(doc)  # type: ignore[operator]
    p.write_text(json.dumps(doc))
    return tmp_path / "g"


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.update(version=99), "version"),
    (lambda d: d.update(format="other"), "not an opgraph graph"),
    (lambda d: d["ops"][2].update(op="no_such_op"), "unknown op"),
    (lambda d: d["ops"][2].update(inputs=[[77, 0]]), "corrupt"),
    (lambda d: d["ops"][2]["outputs"][0].update(dtype="float13"), "unknown dtype"),
    (lambda d: d["ops"][2]["outputs"][0].update(shape=[5, 5]), "verification|corrupt"),
    (lambda d: d["ops"][0].update(attrs={"__attrs__": "os.system", "fields": {}}), "unknown attribute class"),
])
def test_corrupt_graph_files(tmp_path: Path, edit: object, match: str) -> None:
    path = _corrupt(tmp_path, edit)
    with pytest.raises(og.SerializationError, match=match):
        og.Graph.load(path)


def test_truncated_files(tmp_path: Path) -> None:
    g = _graph()
    g.save(tmp_path / "g")
    j = tmp_path / "g" / "graph.json"
    j.write_text(j.read_text()[:100])
    with pytest.raises(og.SerializationError, match="not valid JSON"):
        og.Graph.load(tmp_path / "g")
    g.save(tmp_path / "h")
    w = tmp_path / "h" / "weights.safetensors"
    w.write_bytes(w.read_bytes()[:20])
    with pytest.raises(og.SerializationError, match="corrupt"):
        og.Graph.load(tmp_path / "h")
    with pytest.raises(og.SerializationError, match="no graph.json"):
        og.Graph.load(tmp_path / "missing")


def test_no_pickle_in_files(tmp_path: Path) -> None:
    _graph().save(tmp_path / "g")
    for f in (tmp_path / "g").iterdir():
        assert b"\x80\x04" not in f.read_bytes()[:2]  # no pickle protocol header


def test_wrong_attributes_class_in_file(tmp_path: Path) -> None:
    path = _corrupt(tmp_path, lambda d: d["ops"][0].update(attrs=5))
    with pytest.raises(og.SerializationError, match="attributes must be PlaceholderAttrs"):
        og.Graph.load(path)
