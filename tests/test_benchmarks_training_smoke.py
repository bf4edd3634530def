"""``benchmarks/training.py --quick`` runs on the CPU and prints its table and JSON."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_training_benchmark_quick_on_cpu(tmp_path: Path) -> None:
    path = tmp_path / "training.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "training.py"), "--quick", "--device", "cpu",
                        "--iters", "3", "--json", str(path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ResNet-18-like training step: batch 8, 16x16 images, width 8" in r.stdout
    assert "ms/step" in r.stdout and "images/s" in r.stdout and "vs eager" in r.stdout
    rows = {re.split(r"\s{2,}", line)[1]: line for line in r.stdout.splitlines() if line.startswith("cpu ")}
    assert set(rows) == {"opgraph", "eager PyTorch", "torch.compile"}
    assert "skipped" in rows["torch.compile"]  # --quick leaves it out on the CPU
    data = json.loads(path.read_text())
    assert data["config"] == {"batch": 8, "image": 16, "width": 8, "classes": 10, "seed": 0, "fusion": False}
    by_name = {res["implementation"]: res for res in data["results"]}
    og_res, eager = by_name["opgraph"], by_name["eager PyTorch"]
    for res in (og_res, eager):
        assert res["device"] == "cpu" and res["steps"] == 3 and res["ms_per_step"] > 0 and res["images_per_s"] > 0
    assert eager["vs_eager"] == 1.0 and og_res["vs_eager"] > 0
    assert "ops in one executable" in og_res["note"]
    # the same weights and batch: the first training steps' losses agree
    assert abs(og_res["first_loss"] - eager["first_loss"]) < 1e-4
    assert by_name["torch.compile"]["ms_per_step"] is None
