"""The ``opgraph`` command and the overhead benchmark print what they should.

``--help``, ``info`` and ``demo`` run once each as ``python -m opgraph.cli`` subprocesses (each pays
for importing torch); the other cases call ``main`` in-process to keep the file fast.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import opgraph as og
from opgraph.cli.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def opgraph(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opgraph.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, check=False)


def test_help_lists_commands() -> None:
    r = opgraph("--help")
    assert r.returncode == 0, r.stderr
    assert "usage: opgraph" in r.stdout and "info" in r.stdout and "demo" in r.stdout


@pytest.mark.parametrize("command", ["info", "demo"])
def test_subcommand_help_has_description_and_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: opgraph {command}" in out and "example:" in out and f"opgraph {command}" in out


def test_no_command_prints_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "commands:" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"opgraph {og.__version__}"


def test_info_reports_versions_and_cpu() -> None:
    r = opgraph("info")
    assert r.returncode == 0, r.stderr
    for name in ("opgraph", "torch", "triton", "numpy", "python"):
        assert f"  {name} " in r.stdout
    assert torch.__version__ in r.stdout and og.__version__ in r.stdout
    assert "devices:" in r.stdout and "\n  cpu " in r.stdout


def test_info_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["versions"]["torch"] == torch.__version__
    assert data["devices"][0]["device"] == "cpu" and data["devices"][0]["threads"] >= 1
    assert data["default_device"] in [d["device"] for d in data["devices"]]


def test_bad_arguments_fail_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["demo", "--iters", "0"])
    assert e.value.code == 2 and "must be >= 1" in capsys.readouterr().err
    assert main(["demo", "--device", "tpu"]) == 1
    assert "opgraph demo: error:" in capsys.readouterr().err


def test_demo_on_cpu() -> None:
    r = opgraph("demo", "--device", "cpu", "--iters", "2", "--batch", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "Executable on cpu" in out
    for op in ("conv2d", "relu", "max_pool2d", "reshape", "matmul_epilogue", "softmax"):
        assert f" {op} " in out, op
    assert "outputs agree" in out and "max abs difference" in out
    assert "opgraph exe.run" in out and "eager PyTorch" in out and "median ms" in out


def test_overhead_benchmark_on_cpu(tmp_path: Path) -> None:
    path = tmp_path / "overhead.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "overhead.py"), "--device", "cpu",
                        "--iters", "50", "--ops", "20", "--repeats", "3", "--json", str(path)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "exe.run us/run" in r.stdout and "graph.run us/run" in r.stdout
    row = next(line for line in r.stdout.splitlines() if line.startswith("cpu "))
    assert row.split()[2] == "20"
    (result,) = json.loads(path.read_text())["results"]
    assert result["device"] == "cpu" and result["ops"] == 20 and result["exe_run_ratio"] > 0
