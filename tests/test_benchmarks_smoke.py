"""Smoke runs of the benchmark scripts: tiny sizes on the CPU, so a broken script fails CI."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def _threads() -> Any:
    before = torch.get_num_threads()  # --threads sets torch's process-wide thread count
    yield
    torch.set_num_threads(before)


def test_maxpool_indices_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str], _threads: Any) -> None:
    out = tmp_path / "maxpool.json"
    bench = _load("maxpool_indices")
    assert bench.main(["--device", "cpu", "--quick", "--threads", "1", "--iters", "1", "--repeats", "1",
                       "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "og recompute/idx32" in printed and "resnet-stem" in printed
    results = json.loads(out.read_text())["results"]
    assert {(r["shape"], r["dtype"]) for r in results} == {(s, d) for s in ("resnet-stem", "2x2-s2")
                                                           for d in ("float32", "bfloat16")}
    assert all(r[k] > 0 for r in results for k in ("torch_ms", "og_idx32_ms", "og_recompute_ms", "idx32_vs_torch"))
