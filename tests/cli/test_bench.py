"""``opgraph bench``: the quick run on the smallest model writes the JSON and PNG it should, failures and
mismatches are reported in their cells, stand-ins replace missing libraries, ``--help`` works.

The end-to-end run is a subprocess (``--threads 1``: a loaded CPU otherwise spends most of its time in thread
barriers) without Inductor, whose C++ compiles take tens of seconds here; one in-process case compiles a single
inference cell with Inductor. The others replace ``Bench._compile`` to test the reporting without compiling.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import opgraph as og
from opgraph.cli import _bench_models as bench_models
from opgraph.cli import bench
from opgraph.cli.__main__ import build_parser, main
from opgraph.cli._plot import BLUE, ORANGE, Bars, bar_chart, encode_png, read_png_size

ROOT = Path(__file__).resolve().parents[2]
CELL_KEYS = {"backend", "times_s", "first_call_s", "median_ms", "samples_per_s", "speedup_vs_eager", "rel_err",
             "tolerance", "exact_err", "matches_eager", "error", "aten_ops", "fallback_ops"}
ROW_KEYS = {"section", "model", "title", "library", "device", "dtype", "batch", "input", "stands_for", "skipped",
            "eager_exact_err", "cells"}


@pytest.fixture(autouse=True)
def _restore_threads() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def check_png(data: bytes) -> tuple[int, int]:
    """The PNG signature, the IHDR and an IDAT that inflates to the right size; returns (width, height)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = read_png_size(data)
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert len(zlib.decompress(idat)) == height * (1 + 3 * width)
    return width, height


def test_quick_run_writes_json_and_png(tmp_path: Path) -> None:
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "opgraph.cli", "bench", "--quick", "--device", "cpu",
                        "--models", "tiny_cnn", "--iters", "1", "--threads", "1", "--backends", "eager,opgraph",
                        "--json", str(out_json), "--plot", str(out_png)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    elapsed = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    assert elapsed < 60, f"opgraph bench --quick on tiny_cnn took {elapsed:.0f} s"
    out = r.stdout
    for title in ("training throughput on cpu", "CPU vs GPU:", "inference latency on cpu", "first call on cpu"):
        assert title in out, out
    assert "skipped: no GPU here" in out and "tiny_cnn (for ResNet-50)" in out
    assert f"results written to {out_json}" in out and f"plot saved to {out_png}" in out
    assert "training tiny_cnn float32 batch 8 on cpu: opgraph ... done" in r.stderr  # the progress lines

    data = json.loads(out_json.read_text())
    assert {"environment", "argv", "sections", "backends", "iters", "warmup", "training", "cpu_gpu", "inference",
            "compile"} <= set(data)
    assert data["environment"]["device"] == "cpu" and data["environment"]["torch"] == torch.__version__
    assert data["backends"] == ["eager", "opgraph"] and data["cpu_gpu"] == []
    assert [(row["dtype"], row["batch"]) for row in data["training"]] == [("float32", 8), ("bfloat16", 8)]
    assert [row["batch"] for row in data["inference"]] == [1, 8]
    for row in data["training"] + data["inference"]:
        assert set(row) >= ROW_KEYS and row["model"] == "tiny_cnn" and row["skipped"] is None
        assert [c["backend"] for c in row["cells"]] == ["eager", "opgraph"]
        eager, opg = row["cells"]
        assert set(eager) >= CELL_KEYS
        assert eager["error"] is None and eager["median_ms"] > 0 and eager["first_call_s"] > 0
        assert eager["speedup_vs_eager"] == pytest.approx(1.0)
        if opg["error"] is None:  # the opgraph backend may still fail where converters are missing; never a crash
            assert opg["matches_eager"] is True, opg
            assert opg["speedup_vs_eager"] > 0 and opg["aten_ops"] > 0
    assert data["complete"] is True and not out_json.with_name("bench.json.partial").exists()
    assert len(data["compile"]) == 4
    assert all(set(e["first_call_s"]) == {"eager", "opgraph"} for e in data["compile"])
    width, height = check_png(out_png.read_bytes())
    assert width == 900 and height > 100


def test_inductor_column_compiles_or_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One inference cell through torch.compile's default backend (Inductor): timed, or its error in the row."""
    out_json = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--device", "cpu", "--only", "inference", "--models", "tiny_cnn",
                 "--batches", "1", "--iters", "1", "--threads", "1", "--quiet", "--json", str(out_json)]) == 0
    (row,) = json.loads(out_json.read_text())["inference"]
    cells = {c["backend"]: c for c in row["cells"]}
    assert list(cells) == ["eager", "inductor", "opgraph"]
    inductor = cells["inductor"]
    assert (inductor["error"] is None and inductor["median_ms"] > 0 and inductor["matches_eager"]) or \
        inductor["error"], inductor
    out = capsys.readouterr().out
    assert "inference latency on cpu" in out and "inductor" in out


def fake_compile(module: Any, backend: str) -> Callable[..., Any]:
    """Eager as itself; "inductor" fails to compile; "opgraph" returns twice the right result."""
    if backend == "inductor":
        raise RuntimeError("no C++ compiler here\nsecond line")
    if backend == "opgraph":
        return lambda *args: module(*args) * 2
    return module  # type: ignore[no-any-return]


def test_failures_and_mismatches_are_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench.Bench, "_compile", staticmethod(fake_compile))
    out_json = tmp_path / "bench.json"
    assert main(["bench", "--device", "cpu", "--only", "training,inference", "--models", "tiny_cnn",
                 "--dtypes", "float32", "--batches", "2", "--iters", "2", "--warmup", "0", "--threads", "1", "--quiet",
                 "--json", str(out_json), "--plot", str(tmp_path / "chart.png")]) == 0
    out = capsys.readouterr().out
    assert out.count("error [") == 2 and out.count(" ! [") == 2, out
    assert "inductor: RuntimeError: no C++ compiler here" in out and "second line" not in out
    assert "opgraph: differs from eager: relative error 1 > 0.001" in out
    data = json.loads(out_json.read_text())
    for row in data["training"] + data["inference"]:
        cells = {c["backend"]: c for c in row["cells"]}
        assert cells["inductor"]["error"] == "RuntimeError: no C++ compiler here"
        assert cells["inductor"]["median_ms"] is None and cells["inductor"]["speedup_vs_eager"] is None
        assert cells["opgraph"]["matches_eager"] is False and cells["opgraph"]["rel_err"] == pytest.approx(1.0)
        assert len(cells["opgraph"]["times_s"]) == 2
    assert data["compile"] == []
    check_png((tmp_path / "chart.png").read_bytes())


def test_a_mismatch_as_close_to_float64_as_eager_is_marked_as_right(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Training cells are also judged against eager in float64: the same doubled result, with an oracle that agrees
    with it, is '=' (as right as eager), not '!'; without that agreement it stays '!' and shows both distances."""
    def training(extra: list[str]) -> tuple[str, dict[str, Any]]:
        out_json = tmp_path / "bench.json"
        assert main(["bench", "--device", "cpu", "--only", "training", "--models", "tiny_cnn", "--dtypes", "float32",
                     "--backends", "opgraph", "--iters", "1", "--warmup", "0", "--threads", "1", "--quiet",
                     "--json", str(out_json), *extra]) == 0
        row = json.loads(out_json.read_text())["training"][0]
        return capsys.readouterr().out, {c["backend"]: c for c in row["cells"]} | {"row": row}

    monkeypatch.setattr(bench.Bench, "_compile", staticmethod(fake_compile))
    out, cells = training([])
    assert " ! [" in out and "; from float64 1, eager " in out, out
    assert cells["opgraph"]["exact_err"] == pytest.approx(1.0) and cells["row"]["eager_exact_err"] < 1e-4
    doubled = bench.Bench._float64_step

    def oracle_of_doubles(model0: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(2 * t for t in doubled(model0, x, y))

    monkeypatch.setattr(bench.Bench, "_float64_step", staticmethod(oracle_of_doubles))
    out, cells = training([])
    assert " = [" in out and " ! [" not in out and "as close to eager in float64 as eager is" in out, out
    assert cells["opgraph"]["exact_err"] < 1e-4 and cells["row"]["eager_exact_err"] == pytest.approx(0.5)
    assert cells["opgraph"]["matches_eager"] is False


def test_compile_section_alone_times_first_calls_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench.Bench, "_compile", staticmethod(lambda module, backend: module))
    out_json, out_png = tmp_path / "bench.json", tmp_path / "compile.png"
    assert main(["bench", "--device", "cpu", "--only", "compile", "--models", "tiny_vgg", "--backends", "eager",
                 "--threads", "1", "--quiet", "--json", str(out_json), "--plot", str(out_png)]) == 0
    out = capsys.readouterr().out
    assert "first call on cpu" in out and "training throughput" not in out and "inference latency" not in out
    data = json.loads(out_json.read_text())
    assert data["training"] == [] and data["inference"] == []
    assert [e["workload"] for e in data["compile"]] == ["train float32 batch 8", "infer batch 1"]
    assert all(e["first_call_s"]["eager"] > 0 for e in data["compile"])
    check_png(out_png.read_bytes())


def test_cpu_gpu_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU-vs-GPU section's rows and table, run here with the CPU in both places."""
    monkeypatch.setattr(bench.Bench, "_compile", staticmethod(lambda module, backend: module))
    args = build_parser().parse_args(["bench", "--models", "tiny_transformer", "--iters", "1", "--quiet"])
    cpu = og.device("cpu")
    torch.set_num_threads(1)  # restored by _restore_threads
    b = bench.Bench(args, cpu, bench.Progress(enabled=False))
    rows = b.cpu_gpu([cpu, cpu])
    assert [(r.model, r.device, r.batch, r.dtype) for r in rows] == [("tiny_transformer", "cpu", 8, "float32")] * 2
    assert all([c.backend for c in r.cells] == ["eager", "opgraph"] for r in rows)
    assert all(c.error is None and c.median_s for r in rows for c in r.cells)
    table = bench.results_table(rows, ["eager", "opgraph"], per_second=True, vs_cpu=True)
    assert "tiny_transformer (for BERT-base)" in table and "x)" in table


def test_missing_libraries_skip_rows_or_use_stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_models, "library_missing",
                        lambda lib: None if lib == "torch" else f"{lib} not installed")
    full = bench.pick_models(bench.INFERENCE, quick=False, only=None)
    assert [p.skipped for p in full] == ["skipped: torchvision not installed"] * 7 + ["skipped: timm not installed"]
    quick = bench.pick_models(bench.INFERENCE, quick=True, only=None)
    assert [p.title for p in quick] == [
        "tiny_vgg (for VGG16, AlexNet)", "tiny_cnn (for ResNet-18, ResNet-50)", "tiny_vit (for ViT-B/16)",
        "tiny_mbconv (for EfficientNet-B0, EfficientNet-B4)", "tiny_convmixer (for ConvMixer-768/32)"]
    training = bench.pick_models(bench.TRAINING, quick=False, only=["bert", "tiny_vgg"])
    assert [(p.name, p.skipped) for p in training] == [("bert", "skipped: transformers not installed"),
                                                       ("tiny_vgg", None)]
    monkeypatch.setattr(bench_models, "library_missing", lambda lib: None)  # installed: the stand-in only when named
    assert [p.name for p in bench.pick_models(bench.TRAINING, quick=True, only=["tiny_cnn"])] == ["tiny_cnn"]
    assert [p.name for p in bench.pick_models(bench.TRAINING, quick=True, only=None)] == list(bench.TRAINING)


@pytest.mark.parametrize("name", [m for m in bench.MODELS if m.startswith("tiny_")])
def test_stand_ins_train_and_infer(name: str) -> None:
    m = bench.MODELS[name]
    model = m.build(True)
    x, y = bench.make_data(m, 2, m.size, torch.device("cpu"))
    loss = bench.WithLoss(model)(x, y)
    loss.backward()
    assert loss.ndim == 0 and torch.isfinite(loss)
    with torch.inference_mode():
        out = model.eval()(x)
    assert out.shape == ((2, m.size, m.classes) if m.kind == "tokens" else (2, m.classes))


def test_help_and_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "usage: opgraph bench" in out and "example:" in out and "--quick" in out and "--json PATH" in out
    assert "resnet50" in out and "tiny_cnn" in out and "convmixer" in out
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert "opgraph bench --quick" in capsys.readouterr().out
    for bad in (["--only", "training,nope"], ["--models", "resnet51"], ["--batches", "0"], ["--iters", "0"]):
        with pytest.raises(SystemExit) as e:
            main(["bench", *bad])
        assert e.value.code == 2
        assert "opgraph bench: error: argument" in capsys.readouterr().err
    assert main(["bench", "--json", "/nonexistent/dir/bench.json"]) == 1  # before any measurement
    assert "opgraph bench: error: cannot write /nonexistent/dir/bench.json" in capsys.readouterr().err


def test_bar_chart_png() -> None:
    img = bar_chart(["a model train", "a model infer"], [Bars("inductor", [1.5, float("nan")], BLUE),
                                                        Bars("opgraph", [0.5, 2.0], ORANGE)],
                    title="speed-up", reference=1.0, reference_label="eager = 1", value_format="{:.2f}x")
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[1] == 800
    for color in (BLUE, ORANGE):
        assert (img == color).all(axis=-1).any()
    check_png(encode_png(img))
    with pytest.raises(ValueError, match="2 categories"):
        bar_chart(["a", "b"], [Bars("x", [1.0])])


def test_relative_error_counts_nan_as_a_mismatch() -> None:
    ref = [torch.ones(3)]
    assert bench.rel_err([torch.tensor([1.0, float("nan"), 1.0])], ref) == float("inf")
    assert bench.rel_err([torch.ones(3)], ref) == 0.0


def test_the_rounding_allowance_is_capped(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # eager's own rounding error is huge (or inf): the tolerance stays at most MAX_TOLERANCE, so zeros do not match
    monkeypatch.setattr(bench.Bench, "_compile", staticmethod(fake_compile))
    for rounding in (10.0, float("inf")):
        monkeypatch.setattr(bench.Bench, "_rounding", lambda self, *args, r=rounding: r)
        assert main(["bench", "--device", "cpu", "--only", "training", "--models", "tiny_cnn", "--dtypes", "float32",
                     "--backends", "opgraph", "--iters", "1", "--warmup", "0", "--threads", "1", "--quiet"]) == 0
        out = capsys.readouterr().out
        assert "opgraph: differs from eager: relative error 1 >" in out, out


def test_a_cell_run_op_by_op_says_why() -> None:
    # on CUDA, a graph that did not replay a CUDA graph is named under the table with the executable's reason
    row = bench.Row("training", "bert", "BERT-base", "transformers", "cuda:0", "bfloat16", 64, "128 tokens")
    row.cells = [bench.Cell("eager", times_s=[0.04]),
                 bench.Cell("opgraph", times_s=[0.05], op_by_op=["forward graph off: capture failed (RuntimeError)"])]
    table = bench.results_table([row], ["eager", "opgraph"], per_second=True)
    assert "1280.0 (0.80x) ~ [1]" in table
    assert "[1] BERT-base bfloat16 batch 64 on cuda:0, opgraph: 1 graph(s) ran op by op: forward graph off: " \
           "capture failed" in table


def test_backend_options_are_parsed_checked_and_passed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert bench.backend_option("channels_last=none") == ("channels_last", None)
    assert bench.backend_option("fusion=False") == ("fusion", False)
    assert bench.backend_option("optimization_level=0") == ("optimization_level", 0)
    for bad, words in (("fusion", "KEY=VALUE"), ("no_such_option=1", "unknown options"),
                       ("fusion=maybe", "true, false, none or a number")):
        with pytest.raises(argparse.ArgumentTypeError, match=words):
            bench.backend_option(bad)
    seen: list[Any] = []

    def fake(module: Any, backend: Any = None, options: Any = None) -> Any:
        seen.append(options)
        return module

    monkeypatch.setattr(torch, "compile", fake)
    assert main(["bench", "--device", "cpu", "--only", "inference", "--models", "tiny_cnn", "--backends",
                 "eager,opgraph", "--batches", "1", "--iters", "1", "--warmup", "0", "--quiet",
                 "--option", "channels_last=true", "--option", "fusion=false"]) == 0
    assert seen and all(o == {"warn_fallbacks": False, "channels_last": True, "fusion": False} for o in seen)


def test_json_keeps_the_models_measured_before_a_run_stops(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The JSON is rewritten after each model: a run stopped in its second model (a time limit, Ctrl-C) leaves the
    first one's rows, marked incomplete."""
    inference_row = bench.Bench.inference_row

    def stop_at_the_second(self: Any, m: Any, model: Any, row: Any, size: int) -> None:
        if m.name != "tiny_vgg":  # the first of the inference table
            raise KeyboardInterrupt
        inference_row(self, m, model, row, size)

    monkeypatch.setattr(bench.Bench, "inference_row", stop_at_the_second)
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--device", "cpu", "--only", "inference", "--models", "tiny_cnn,tiny_vgg",
                 "--backends", "eager", "--batches", "1", "--iters", "1", "--warmup", "0", "--quiet",
                 "--json", str(out)]) == 130  # interrupted
    data = json.loads(out.read_text())
    assert data["complete"] is False and data["training"] == [] and data["compile"] == []
    assert [(r["model"], r["batch"]) for r in data["inference"]] == [("tiny_vgg", 1)]
    assert data["inference"][0]["cells"][0]["median_ms"] > 0


@pytest.mark.parametrize("cold", [False, True])
def test_a_cold_cache_gives_opgraph_an_empty_triton_cache_and_no_tuning_records(cold: bool) -> None:
    args = build_parser().parse_args(["bench", "--models", "tiny_cnn", "--quiet", *(["--cold-cache"] if cold else [])])
    b = bench.Bench(args, og.device("cpu"), bench.Progress(enabled=False))
    before = (os.environ.get("TRITON_CACHE_DIR"), os.environ.get("OPGRAPH_TUNING_RECORDS"))
    with b._cell_context("opgraph", bench.Cell("opgraph")):
        inside = (os.environ.get("TRITON_CACHE_DIR"), os.environ.get("OPGRAPH_TUNING_RECORDS"))
        if cold:
            assert inside[1] == "0" and inside[0] is not None and Path(inside[0]).is_dir()
            assert not any(Path(inside[0]).iterdir())
        else:
            assert inside == before
    assert (os.environ.get("TRITON_CACHE_DIR"), os.environ.get("OPGRAPH_TUNING_RECORDS")) == before
