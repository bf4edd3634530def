"""Tuning decisions recorded on disk (``codegen.triton.tuning_records``): a kernel tuned once is launched with the
recorded winner by a later process (a fresh ``RegionKernel`` of the same source) without timing its candidates; a
record of other candidates, of a configuration not offered, or one that does not parse is ignored and the kernel
tuned again. On the CPU,
under Triton's interpreter, with the device timing replaced by a fake (``_tune`` itself is GPU code)."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest
import torch

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton import configs, tuning_records  # noqa: E402
from opgraph.codegen.triton import kernel as kmod  # noqa: E402
from opgraph.codegen.triton.kernel import RegionKernel, region_kernel, region_of  # noqa: E402
from opgraph.codegen.triton.region import Config  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _column_sum(folder: Path) -> RegionKernel:
    """A column sum whose candidates include split ones (132 multiprocessors pretended)."""
    g = og.Graph()
    x = g.placeholder((2048, 64), og.float32)
    y = g.reduce_sum(g.relu(x), [0])
    ops, ins = region_of([y])
    return region_kernel(ops, ins, [y], cache_dir=folder)


def _key(kernel: RegionKernel, inputs: list[torch.Tensor]) -> str:
    offered = repr([k.config for k in [kernel, *kernel.alternatives()]])
    return tuning_records.record_key(kernel.key, offered, inputs)


@pytest.fixture
def tuner(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Config]]:
    """Tuning on the CPU: every input big enough, no compile threads, and a fake device time that makes the third
    candidate the fastest; ``timed`` lists the configurations timed."""
    monkeypatch.setattr(kmod, "TUNE_MIN_ELEMENTS", 0)
    monkeypatch.setattr(kmod, "compile_in_threads", lambda kernels, inputs: [])
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    seen: dict[str, list[Config]] = {"timed": [], "order": []}

    def device_ms(k: RegionKernel, inputs: object) -> float:
        seen["timed"].append(k.config)
        return 1.0 if len(seen["timed"]) != 3 else 0.5

    monkeypatch.setattr(kmod, "_device_ms", device_ms)
    monkeypatch.setattr(kmod, "_single_launch_ms", lambda k, inputs: 0.0)  # no candidate looks slow on one launch
    with mock.patch.object(configs, "multiprocessors", lambda: 132), \
            mock.patch.object(configs, "_splittable", lambda em: True):
        yield seen


def test_a_later_process_launches_the_recorded_winner_untimed(tuner: dict[str, list[Config]],
                                                               tmp_path: Path) -> None:
    xv = torch.randn(2048, 64)
    first = _column_sum(tmp_path)
    best = first._tune([xv])
    assert len(tuner["timed"]) >= 3 and best.config == tuner["timed"][2] and best is not first
    assert len(list((tmp_path / "tuning").glob("*.json"))) == 1
    tuner["timed"].clear()
    again = _column_sum(tmp_path)  # what a new process builds: the same source, no in-memory choice
    chosen = again._tune([xv])
    assert tuner["timed"] == [] and chosen.config == best.config
    torch.testing.assert_close(chosen(xv)[0], xv.relu().sum(0), rtol=1e-5, atol=1e-4)
    # inputs stored otherwise (a transposed copy) make a decision of their own
    other = xv.t().contiguous().t()
    assert _key(again, [other]) != _key(again, [xv])


def test_a_candidate_added_since_the_record_is_timed(tuner: dict[str, list[Config]], tmp_path: Path) -> None:
    xv = torch.randn(2048, 64)
    first = _column_sum(tmp_path)
    every = first.alternatives
    first.alternatives = lambda: every()[:1]  # an older opgraph offered fewer candidates
    first._tune([xv])
    assert len(tuner["timed"]) == 2
    tuner["timed"].clear()
    _column_sum(tmp_path)._tune([xv])  # now with all of them: the old choice is not taken for the new set
    assert len(tuner["timed"]) > 2


@pytest.mark.parametrize("record", ["stale", "garbled", "wrong-type"])
def test_a_record_the_kernel_cannot_use_is_tuned_again(tuner: dict[str, list[Config]], tmp_path: Path,
                                                       record: str) -> None:
    xv = torch.randn(2048, 64)
    kernel = _column_sum(tmp_path)
    key = _key(kernel, [xv])
    path = tmp_path / "tuning" / f"{key}.json"
    path.parent.mkdir(parents=True)
    text = {"stale": json.dumps({"reduction": True, "xblock": 4, "rblock": 4, "looped": True, "split": 3}),
            "garbled": "{not json", "wrong-type": json.dumps({"reduction": "yes", "xblock": 64})}[record]
    path.write_text(text)
    best = kernel._tune([xv])
    assert tuner["timed"] and best.config == tuner["timed"][2]
    assert tuning_records.lookup(key, tmp_path) == best.config  # the new decision replaced the record


def test_a_candidate_still_compiling_is_passed_over_and_nothing_recorded(tuner: dict[str, list[Config]],
                                                                         tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # ``compile_in_threads`` names the candidates it stopped waiting for (ptxas for minutes): they are neither
    # launched nor timed, the log says why, and the choice is not recorded, so a later process times them all
    xv = torch.randn(2048, 64)
    kernel = _column_sum(tmp_path)
    candidates = [kernel, *kernel.alternatives()]
    slow = candidates[1]
    monkeypatch.setattr(kmod, "compile_in_threads",
                        lambda kernels, inputs: [k for k in kernels if k.config == slow.config])
    monkeypatch.setenv("OPGRAPH_TUNING_LOG", str(tmp_path / "log.jsonl"))
    best = kernel._tune([xv])
    assert slow.config not in tuner["timed"] and len(tuner["timed"]) == len(candidates) - 1
    assert best.config == tuner["timed"][2]
    assert not (tmp_path / "tuning").exists() or not list((tmp_path / "tuning").glob("*.json"))
    entry = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[-1])
    assert entry["outcomes"][1] == {"error": "compile too slow"}, entry


def test_records_can_be_turned_off(tuner: dict[str, list[Config]], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPGRAPH_TUNING_RECORDS", "0")
    xv = torch.randn(2048, 64)
    _column_sum(tmp_path)._tune([xv])
    assert not (tmp_path / "tuning").exists()
    tuner["timed"].clear()
    _column_sum(tmp_path)._tune([xv])
    assert tuner["timed"]


def test_a_candidate_far_slower_on_one_launch_is_not_timed_further(tuner: dict[str, list[Config]], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = _column_sum(tmp_path)
    candidates = [kernel, *kernel.alternatives()]
    assert len(candidates) >= 3
    per_launch = {c.config: 1.0 for c in candidates}
    per_launch[candidates[1].config] = 5.0  # the second: far slower than the first
    per_launch[candidates[2].config] = 0.8  # the third: the fastest
    probed: list[Config] = []
    timed: list[Config] = []

    def single(k: RegionKernel, inputs: object) -> float:
        probed.append(k.config)
        return per_launch[k.config]

    def full(k: RegionKernel, inputs: object) -> float:
        timed.append(k.config)
        return per_launch[k.config] * kmod.TUNE_LAUNCHES

    monkeypatch.setattr(kmod, "_single_launch_ms", single)
    monkeypatch.setattr(kmod, "_device_ms", full)
    kernel.alternatives = lambda: candidates[1:]
    best = kernel._tune([torch.randn(2048, 64)])
    assert best.config == candidates[2].config
    assert candidates[1].config not in timed and candidates[1].config in probed
    assert timed[:2] == [candidates[0].config, candidates[2].config]
    assert probed[0] == candidates[1].config  # the first candidate, with nothing to compare against, is not probed


def test_the_tuning_log_lists_every_candidate_with_its_time_or_why_not(tuner: dict[str, list[Config]], tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "tuning.jsonl"
    monkeypatch.setenv("OPGRAPH_TUNING_LOG", str(log))
    kernel = _column_sum(tmp_path)
    candidates = [kernel, *kernel.alternatives()]
    slow = candidates[-1].config  # its one launch is far slower than the fastest so far: not timed in full
    monkeypatch.setattr(kmod, "_single_launch_ms", lambda k, inputs: 9.0 if k.config == slow else 0.0)
    xv = torch.randn(2048, 64)
    best = kernel._tune([xv])
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["source"] == kernel.key and {"relu", "reduce_sum"} <= set(entry["ops"])
    assert entry["reductions"] == ["reduce_sum"]
    assert entry["inputs"] == [[[2048, 64], [64, 1], "float32"]] and entry["gpu"] == "cpu"
    assert [Config(**c) for c in entry["candidates"]] == [k.config for k in candidates]
    outcomes = entry["outcomes"]
    assert len(outcomes) == len(candidates) and outcomes[-1] == {"one_launch_ms": 9.0}
    assert [o["ms"] for o in outcomes[:-1]] == [1.0 / kmod.TUNE_LAUNCHES if i != 2 else 0.5 / kmod.TUNE_LAUNCHES
                                                 for i in range(len(candidates) - 1)]
    assert Config(**entry["candidates"][entry["winner"]]) == best.config == tuner["timed"][2]
