"""Smoke runs of the benchmark scripts: tiny sizes on the CPU, so a broken script fails CI."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
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


def test_epilogue_takes_shapes() -> None:
    bench = _load("epilogue")
    assert bench._shape("197,3072,768") == ("197x3072->768", 197, 3072, 768)
    with pytest.raises(argparse.ArgumentTypeError, match="M,K,N"):
        bench._shape("197,3072")


def test_epilogue_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                        _threads: Any) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the fused column runs in Triton's interpreter on the CPU
    out = tmp_path / "epilogue.json"
    bench = _load("epilogue")
    assert bench.main(["--device", "cpu", "--quick", "--threads", "1", "--iters", "1", "--repeats", "1",
                       "--dtype", "float32", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "og epilogue ms" in printed and "relu: fastest" in printed
    results = json.loads(out.read_text())["results"]
    assert {(r["shape"], r["activation"]) for r in results} == {(s, a) for s in ("tiny", "tiny fc")
                                                                for a in ("none", "relu", "gelu", "gelu_tanh")}
    for r in results:
        assert r["eager_ms"] > 0 and r["mm_ms"] > 0 and r["addmm_ms"] > 0 and r["og_epilogue_ms"] > 0
        assert r["best"] != "mm"  # the bare product adds no bias: never the answer
        # the pass fired (erf gelu stays a separate op: measured faster)
        fused_ops = "matmul_epilogue + gelu" if r["activation"] == "gelu" else "matmul_epilogue"
        assert r["notes"]["og epilogue"] == fused_ops
        assert r["torch_compile_ms"] is None and "skipped" in r["notes"]["torch.compile"]
        if importlib.util.find_spec("triton") is not None:
            assert r["og_fused_ms"] > 0 and "matmul" in r["notes"]["og fused"]
    relu = [r for r in results if r["activation"] == "relu"]
    assert all(r["addmm_act_ms"] is not None for r in relu)
    if importlib.util.find_spec("triton") is not None:  # without the pass: matmul + one generated kernel
        assert all(r["notes"]["og fused"].startswith("matmul + fused_") for r in relu)


def test_fusion_picks_norms_and_dtypes(tmp_path: Path) -> None:
    out = tmp_path / "fusion.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "fusion.py"), "--quick", "--device", "cpu", "--only", "norms",
           "--mib", "0.0078125", "--repeats", "1", "--widths", "256", "--json", str(out)]
    r = subprocess.run([*cmd, "--norms", "rms_norm,softmax", "--dtypes", "bfloat16"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())["norms"]
    assert [(n["case"], n["dtype"]) for n in rows] == [("rms_norm", "bfloat16"), ("softmax", "bfloat16")]
    bad = subprocess.run([*cmd, "--norms", "rms_norm,batch_norm"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, check=False)
    assert bad.returncode == 2 and "--norms takes a comma-separated list of softmax" in bad.stderr


def test_fusion_quick_on_cpu(tmp_path: Path) -> None:
    # a subprocess: on the CPU the script sets TRITON_INTERPRET (read when triton is imported) and the thread count
    out = tmp_path / "fusion.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fusion.py"), "--quick", "--device", "cpu",
                        "--only", "chains,norms,tiny", "--mib", "0.0078125", "--repeats", "2", "--widths", "256",
                        "--tiny-ops", "10", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    for title in ("copy bandwidth (roofline)", "elementwise chains", "softmax and norms", "10 tiny ops"):
        assert f"== {title}" in r.stdout, title
    assert "og GB/s" in r.stdout and "vs compile" in r.stdout and "raw CUDA graph us" in r.stdout
    data = json.loads(out.read_text())
    assert data["meta"]["torch"] == torch.__version__ and data["copy"]["best_gbps"] > 0 and not data["errors"]
    chains = data["chains"]
    assert {(c["case"], c["dtype"]) for c in chains} == {(f"chain-{n}", d) for n in range(3, 9)
                                                         for d in ("float32", "bfloat16")}
    # each chain is one generated kernel, and agrees with PyTorch
    assert all(c["check"] == "ok" and c["kernels"] == c["generated_kernels"] == 1 and c["og_ms"] > 0 for c in chains)
    assert all(c["compile_ms"] is None and "skipped" in c["compile_note"] for c in chains)
    norms = data["norms"]
    assert {(n["case"], n["dtype"], tuple(n["shape"])) for n in norms} == {
        (op, d, (rows, 256)) for op in ("softmax", "log_softmax", "layer_norm", "rms_norm")
        for d, rows in (("float32", 8), ("bfloat16", 16))}
    assert all(n["check"] == "ok" and n["og_ms"] > 0 and n["eager_ms"] > 0 for n in norms)
    (row,) = data["tiny"]
    assert row["check"] == "ok" and row["ops"] == 10 and row["fused_kernels"] < row["og_kernels"]
