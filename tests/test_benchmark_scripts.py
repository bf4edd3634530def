"""Every script in ``benchmarks/`` and ``scripts/`` answers ``--help`` (exit 0, its usage and description)
without a GPU: the scripts are run by people on machines CI never sees, so at least their argument parsing and
imports are checked."""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted(p for folder in ("benchmarks", "scripts") for p in (Path(__file__).parents[1] / folder).glob("*.py")
                 if not p.name.startswith("_"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_answers_help(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        runpy.run_path(str(script), run_name="__main__")
    assert stop.value.code == 0
    text = out.getvalue()
    assert text.startswith("usage:") and "--help" in text and len(text.splitlines()) > 5, text


def test_column_sweep_grid_holds_the_asked_tiles_after_the_candidates() -> None:
    """``column_reductions.py``'s swept grid (``--tiles``, ``--warps``, ``--per-sm``) on the CPU: the region's
    own candidates first, then one split column configuration per grid point not already among them."""
    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "column_reductions.py"))
    import opgraph as og

    region = module["build"]("statistics", (8, 4, 4, 64), og.float32, "cpu")
    grid = module["Grid"](((64, 128), (32, 32)), (4, 8), (4,))
    candidates, swept = module["configs"](region, 8 * 4 * 4, 64, 132, grid)
    assert swept[:len(candidates)] == candidates
    extra = swept[len(candidates):]
    assert {(c.xblock, c.rblock, c.num_warps) for c in extra} <= {(64, 128, 4), (64, 128, 8), (32, 32, 4), (32, 32, 8)}
    assert any(c.rblock == 128 and c.num_warps == 8 for c in extra) and all(c.split >= 1 for c in extra)
    with pytest.raises(SystemExit):
        module["main"](["--tiles", "64x48"])


def test_step_breakdown_isolates_each_backend_in_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "step_breakdown.py"))
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "call", lambda cmd: calls.append(cmd) or 0)
    argv = ["--model", "resnet50", "--backends", "eager,opgraph", "--isolate", "--repeats", "3", "--option", "a=b"]
    assert module["_isolated"](argv, ["eager", "opgraph"]) == 0
    assert [c[2:] for c in calls] == [["--model", "resnet50", "--repeats", "3", "--option", "a=b", "--backends", b]
                                      for b in ("eager", "opgraph")]
    assert all(c[0] == sys.executable and c[1].endswith("step_breakdown.py") for c in calls)


def test_region_census_records_outermost_launches_and_rebuilds_their_inputs() -> None:
    """``region_census.py`` on the CPU: launches inside ``recording`` are counted once per kernel and input layout
    (the strided variant a call dispatches to is not counted again), the class is restored afterwards, and the
    random stand-ins keep each input's shape, strides (broadcast dims too) and dtype."""
    import torch

    import opgraph as og
    from opgraph.codegen.triton.kernel import RegionKernel, region_kernel, region_of

    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "region_census.py"))
    g = og.Graph()
    x = g.placeholder((6, 8), og.float32)
    total = g.reduce_sum(x * x, [0])
    ops, ins = region_of([total])
    kernel = region_kernel(ops, ins, [total])
    plain, strided = torch.randn(6, 8), torch.randn(8, 6).t()
    call = RegionKernel.__call__
    with module["recording"](True, device_type="cpu") as seen:
        for v in (plain, plain, strided):
            torch.testing.assert_close(kernel(v)[0], (v * v).sum(0))
    assert RegionKernel.__call__ is call
    assert sorted((s.launches, s.inputs[0][1]) for s in seen.values()) == [(1, (1, 6)), (2, (8, 1))]
    variant, launched = module["launched_for"](kernel, [strided])
    assert variant is not kernel and launched is variant and variant in kernel._strided.values()
    assert module["moved_bytes"](kernel, [plain]) == (6 * 8 + 8) * 4
    assert module["moved_bytes"](kernel, [torch.randn(8).expand(6, 8)]) == (8 + 8) * 4  # a broadcast row read once
    meta = ((4, 3, 5), (0, 5, 1), torch.bfloat16)
    stand_in = module["random_like"](meta, torch.device("cpu"))
    assert (stand_in.shape, stand_in.stride(), stand_in.dtype) == ((4, 3, 5), (0, 5, 1), torch.bfloat16)


def test_shared_argument_types_reject_what_they_cannot_take() -> None:
    import argparse

    fusion = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "fusion.py"))
    assert fusion["positive_ints"]("8,16") == (8, 16)
    assert fusion["names_of"](["a", "b"])("b,a") == ["b", "a"]
    for bad in ("8,x", "0", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            fusion["positive_ints"](bad)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown c"):
        fusion["names_of"](["a", "b"])("a,c")


@pytest.mark.parametrize("case", ["chain-8", "bn-forward", "bn-backward"])
def test_elementwise_config_regions_compute_their_case(case: str) -> None:
    """``elementwise_configs.py`` on the CPU (Triton's interpreter): each case's region, in its default and in a
    larger block, equals the same expression written in PyTorch; the swept pairs keep 2-32 elements a thread."""
    import torch

    import opgraph as og
    from opgraph.codegen.triton.configs import Config
    from opgraph.codegen.triton.kernel import region_kernel

    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "elementwise_configs.py"))
    r = module["build"](case, og.float32, 3000 * 4 / 2**20, (2, 3, 5, 8), "cpu")
    v = {t.name: x for t, x in zip(r.inputs, r.feed, strict=True)}
    x = v["x"]
    if case.startswith("chain"):
        y = v["y"]
        want = torch.sigmoid(torch.maximum(torch.exp(torch.tanh(x * 0.5 + y) * 1.5), y)) + 0.25
    elif case == "bn-forward":
        want = torch.relu((x - v["mean"]) * v["scale"] + v["beta"])
    else:
        want = (v["grad"] - v["gmean"] - (x - v["mean"]) * v["k"]) * v["scale"]
    for cfg in (module["DEFAULT"], Config(reduction=False, block=2048, num_warps=8)):
        (got,) = region_kernel(r.ops, r.inputs, r.outputs, config=cfg)(*r.feed)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    cfgs = module["configs"]((256, 1024, 8192), (4, 16))
    assert cfgs[0] == module["DEFAULT"]
    assert all(2 <= c.block // (32 * c.num_warps) <= 32 for c in cfgs)
    assert {(c.block, c.num_warps) for c in cfgs} == {(1024, 4), (256, 4), (1024, 16), (8192, 16)}


def test_max_pool_benchmark_steps_agree_on_the_cpu() -> None:
    """``max_pool.py``'s correctness check and its eager and opgraph steps, on small channels-last tensors (opgraph's
    kernels in Triton's interpreter)."""
    import torch

    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "max_pool.py"))
    x = torch.randn(2, 5, 9, 9).contiguous(memory_format=torch.channels_last)
    grad = torch.randn(2, 5, 5, 5).contiguous(memory_format=torch.channels_last)
    assert module["check"](x, grad, 3, 2, 1)
    fns = module["steps"](x, grad, 3, 2, 1)
    torch.testing.assert_close(fns["opgraph"](), fns["eager"]())


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_max_pool_relu_backward_steps_agree_on_the_cpu(layout: str) -> None:
    """``max_pool.py --relu-backward``: the pool gradient fused with the ReLU mask and the channel sums, and the
    pool's backward kernel before a masking region, from the same int8 offsets (Triton's interpreter); ``nhwc``:
    the graphs as the layout pass leaves them, the masked gradient NHWC."""
    import torch

    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "max_pool.py"))
    r = torch.randn(2, 5, 8, 6).relu().contiguous(memory_format=torch.channels_last)
    grad = torch.randn(2, 5, 4, 3).contiguous(memory_format=torch.channels_last)
    fns = module["relu_backward_steps"](r, grad, 2, "cpu", interpret=True, layout=layout)
    fused, apart = fns["fused"](), fns["apart"]()
    assert len(fused) == 2 and fused[1].shape == (5,)
    assert fused[0].shape == ((2, 8, 6, 5) if layout == "nhwc" else (2, 5, 8, 6))
    for a, b in zip(fused, apart, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_cpu_inference_splits_off_the_time_outside_executables(capsys: pytest.CaptureFixture[str]) -> None:
    """``cpu_inference.py`` on a stand-in: the table gives the time outside opgraph's executables (a share of the
    call, Executable._run restored afterwards) and the executables' own ratio against eager."""
    from opgraph.runtime.executable import Executable

    run = Executable._run
    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "cpu_inference.py"))
    assert module["main"](["--models", "tiny_vgg", "--batches", "1", "--iters", "5", "--warmup", "1"]) == 0
    assert Executable._run is run
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny_vgg"))
    opgraph_ms, outside_ms = float(row.split()[4]), float(row.split()[7])
    assert 0.0 <= outside_ms < opgraph_ms, row


def test_long_rows_kernels_under_the_interpreter() -> None:
    """``long_rows.py``'s hand-written kernels on the CPU (Triton's interpreter runs programs one after another, so
    one program a row: a meeting of several would wait forever): every op and mode, rows walked by 1-3 groups, a
    width that fills its chunk and one that does not, against the same functions in PyTorch."""
    import os

    import torch

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the GPU runs these through the script itself")
    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "long_rows.py"))
    torch_fns = {"softmax": lambda x: torch.softmax(x, -1),
                 "rms_norm": lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
                 "layer_norm": lambda x, w, b: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, 1e-5)}
    gen = torch.Generator().manual_seed(0)
    for op, fn in torch_fns.items():
        for width in (64, 48):
            x = torch.randn(5, width, generator=gen)
            inputs = [x, torch.rand(width, generator=gen) + 0.5, torch.randn(width, generator=gen)]
            inputs = inputs[:fn.__code__.co_argcount]
            for mode in module["MODES"]:
                switches = module["ROW_MODES"].get(mode, module["RowMode"]())
                if switches.DSMEM or not switches.MEET:  # the peers' shared memory is PTX's; no meeting: wrong
                    continue
                packed = switches.PACKED
                wanted = [t.bfloat16() for t in inputs] if packed else inputs  # a packed chunk is bfloat16's
                k = module["LongRows"](op, wanted, 1, 4, mode, 1)
                for groups in (1, 2, 3):
                    if mode not in module["ROW_MODES"]:  # a cluster a row: no groups walking rows
                        k._size(groups)
                    k()
                    want = fn(*(t.float() for t in wanted))
                    torch.testing.assert_close(k.y.float(), want, rtol=1e-2 if packed else 1e-5,
                                               atol=1e-2 if packed else 1e-6)
                    assert k.err.item() == 0


def test_split_statistics_references_match_the_regions_on_the_cpu() -> None:
    """``split_statistics_error.py``'s float64 references against both column regions' outputs, run in their default
    configuration under the interpreter: the inputs are found by name and the outputs line up."""

    import opgraph as og
    from opgraph.codegen.triton.kernel import region_kernel

    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "split_statistics_error.py"))
    for region in ("statistics", "backward"):
        r = module["build"](region, (2, 3, 3, 8), og.float32, "cpu")
        want, scale = module["references"](region, {t.name: v for t, v in zip(r.inputs, r.feed, strict=True)}, 8)
        got = list(region_kernel(r.ops, r.inputs, r.outputs)(*r.feed))[-len(want):]
        assert len(got) == len(want) == len(scale) == (3 if region == "statistics" else 2)
        for g, w, k in zip(got, want, scale, strict=True):
            assert module["relative"](g, w, k) < 1e-5


def test_profile_backend_names_the_graph_op_behind_each_aten_op() -> None:
    """``profile_backend.py --aten-ops`` groups ATen ops by the graph op whose profiler range holds them
    (``CompilationDescriptor(profile_ops=True)``); checked with the CPU profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import opgraph as og

    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "profile_backend.py"))
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    y = g.reduce_sum(g.exp(x, name="e"), [1], name="s")
    exe = g.compile({x: x.type}, [y], device="cpu", descriptor=og.CompilationDescriptor(profile_ops=True))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        exe.run([torch.randn(4, 8)])
        torch.ones(3).add_(1)  # outside any executable
    kinds = {e.name: module["graph_op"](e) for e in prof.events() if e.name.startswith("aten::")}
    assert kinds["aten::exp"] == "exp" and kinds["aten::sum"] == "reduce_sum" and kinds["aten::add_"] == "-"


def test_cpu_training_times_aot_eager_beside_opgraph(capsys: pytest.CaptureFixture[str]) -> None:
    """``cpu_training.py --aot-eager`` on a stand-in: a third timed column, Dynamo and AOTAutograd alone."""
    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "cpu_training.py"))
    assert module["main"](["--models", "tiny_cnn", "--dtypes", "float32", "--iters", "1", "--repeats", "1",
                           "--aot-eager"]) == 0
    table = capsys.readouterr().out
    assert "aot_eager ms (range, vs eager)" in table and "tiny_cnn" in table


def test_tuning_census_counts_wins_and_prices_what_pruning_would_cost(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``tuning_census.py`` on two hand-written tunings: family ``b`` wins once and is near in both, ``c`` is always
    slower than another candidate and ``d`` only ever left at one launch (both left out first, losing nothing);
    leaving out ``b`` last costs the first tuning 0.2 ms (the first choice ``a`` is kept)."""
    module = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "tuning_census.py"))
    a, b, c, d = ({"reduction": True, "xblock": x, "rblock": 32, "num_warps": 4, "looped": True, "split": 1,
                   "programs": 0, "stages": 2} for x in (1, 2, 4, 8))
    entries = [
        {"candidates": [a, b, c, d], "outcomes": [{"ms": 1.0}, {"ms": 0.8}, {"ms": 1.2}, {"one_launch_ms": 5.0}],
         "winner": 1, "gpu": "H200"},
        {"candidates": [a, b, c], "outcomes": [{"ms": 1.0}, {"ms": 1.01}, {"ms": 1.5}], "winner": 0, "gpu": "H200"},
    ]
    log = tmp_path / "t.jsonl"
    log.write_text("\n".join(json.dumps(e) for e in entries) + "\nnot json\n")
    stats = module["families"](entries, 0.03)
    fam = module["family"]
    assert (stats[fam(b)]["offered"], stats[fam(b)]["wins"], stats[fam(b)]["near"]) == (2, 1, 2)
    assert stats[fam(a)]["first"] == 2 and stats[fam(d)]["untimed"] == 1 and not stats[fam(d)]["ratios"]
    rows = module["pruning"](entries, stats)
    assert [r[1] for r in rows] == sorted([fam(c), fam(d)]) + [fam(b)]
    assert [r[2:] for r in rows] == [["1 of 7 (14%)", "0.0", "1.000"] if rows[0][1] == fam(d) else
                                     ["2 of 7 (29%)", "0.0", "1.000"],
                                     ["3 of 7 (43%)", "0.0", "1.000"], ["5 of 7 (71%)", "200.0", "1.250"]]
    for e, ops, reductions in zip(entries, (["exp", "reduce_sum"], ["mul"]), (["reduce_sum"], []), strict=True):
        e.update(ops=ops, reductions=reductions, inputs=[[[64, 64], [64, 1], "float32"]])
    assert [r[:3] for r in module["kinds"](entries)] == [["reduce_sum (float32)", "1", "0%"],
                                                         ["flat (float32)", "1", "100%"]]
    untimed = {**entries[1], "outcomes": [{"error": "OutOfResources"}] * 3, "winner": None}
    log.write_text("\n".join(json.dumps(e) for e in [*entries, untimed]) + "\nnot json\n")
    assert len(module["read"]([log])) == 2  # the untimed tuning and the bad line left out
    assert module["main"]([str(log)]) == 0
    out = capsys.readouterr().out
    assert "2 tunings" in out and "first choice wins" in out and "1 (50%)" in out and "reduce_sum (float32)" in out
