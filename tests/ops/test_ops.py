"""Generic op tests driven by the OpInfo records: type rule, numerics, dynamic dims, errors, round trip."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import opgraph as og
from opgraph.ir.opdef import FusionKind, all_ops

from .opinfo import OpInfo, Sample, all_records, placeholder_like, to_numpy

RECORDS = all_records()
SAMPLES = [(r, s) for r in RECORDS for s in r.samples(np.random.default_rng(0))]
ERRORS = [(r, e) for r in RECORDS for e in r.errors]
CPU = og.device("cpu")
CHECKED = og.CompilationDescriptor(verify_each_pass=True)


def _sid(rs: tuple[OpInfo, Any]) -> str:
    r, s = rs
    return f"{r.name}-{getattr(s, 'desc', '')}"


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _build(record: OpInfo, sample: Sample, dynamic: bool) -> tuple[og.Graph, list[og.Tensor], list[og.Tensor]]:
    g = og.Graph()
    phs = [placeholder_like(g, v, dynamic) for v in sample.inputs]
    outs = _as_list(record.build(g, *phs, **sample.kwargs))
    return g, phs, outs


def _feed(sample: Sample) -> list[torch.Tensor]:
    return [v if isinstance(v, torch.Tensor) else torch.from_numpy(np.asarray(v)) for v in sample.inputs]


def check_close(record: OpInfo, got: torch.Tensor, want: Any, label: str, gpu: bool = False) -> None:
    want_np = np.asarray(want)
    got_np = to_numpy(got)
    assert got_np.shape == want_np.shape, f"{label}: shape {got_np.shape} != oracle {want_np.shape}"
    rtol, atol = record.tolerance(got.dtype, gpu)
    if got.dtype.is_floating_point or got.dtype.is_complex:
        np.testing.assert_allclose(got_np, want_np.astype(got_np.dtype) if got.dtype != torch.bfloat16 else want_np,
                                   rtol=rtol, atol=atol, equal_nan=True, err_msg=label)
    else:
        np.testing.assert_array_equal(got_np, want_np.astype(got_np.dtype), err_msg=label)


@pytest.mark.parametrize("record,sample", SAMPLES, ids=[_sid(x) for x in SAMPLES])
def test_numerics_and_type_rule(record: OpInfo, sample: Sample) -> None:
    g, phs, outs = _build(record, sample, dynamic=False)
    results = g.run(dict(zip(phs, _feed(sample), strict=True)), outs, device=CPU, descriptor=CHECKED)
    expected = _as_list(record.oracle(*[to_numpy(v) for v in sample.inputs], **sample.kwargs))
    assert len(results) == len(expected)
    for i, (t, r, e) in enumerate(zip(outs, results, expected, strict=True)):
        assert r.dtype == t.dtype.torch_dtype, f"output {i}: type rule says {t.dtype}, kernel gave {r.dtype}"
        assert tuple(r.shape) == t.shape, f"output {i}: type rule says {t.shape}, kernel gave {tuple(r.shape)}"
        check_close(record, r, e, f"{record.name} {sample.desc} output {i}")


@pytest.mark.parametrize("record,sample", SAMPLES, ids=[_sid(x) for x in SAMPLES])
def test_dynamic_dims(record: OpInfo, sample: Sample) -> None:
    if not record.dynamic:
        pytest.skip("record opts out of dynamic dims")
    g, phs, outs = _build(record, sample, dynamic=True)
    for t in outs:
        assert t.rank >= 0  # the type rule accepted dynamic dims
    g2, phs2, outs2 = _build(record, sample, dynamic=False)
    feeds = _feed(sample)
    # compile for the dynamic types themselves, so the lowerings' dynamic paths run
    exe = g.compile({p: p.type for p in phs}, outs, device=CPU)
    dyn = exe.run(feeds)
    static = g2.run(dict(zip(phs2, feeds, strict=True)), outs2, device=CPU)
    for t, a, b in zip(outs, dyn, static, strict=True):
        assert all(d is None or d == s for d, s in zip(t.shape, a.shape, strict=True)), (t.type, a.shape)
        assert a.dtype == b.dtype and a.shape == b.shape
        rtol, atol = record.tolerance(a.dtype)  # a dynamic path may use another kernel than the static one
        torch.testing.assert_close(a, b, equal_nan=True, rtol=rtol, atol=atol)


@pytest.mark.parametrize("record,case", ERRORS, ids=[_sid(x) for x in ERRORS])
def test_error_inputs(record: OpInfo, case: Any) -> None:
    with pytest.raises(case.error, match=case.match) as info:
        case.build(og.Graph())
    assert isinstance(info.value, og.OpgraphError)


@pytest.mark.parametrize("record", [r for r in RECORDS if r.roundtrip], ids=lambda r: r.name)
def test_save_load_roundtrip(record: OpInfo, tmp_path: Any) -> None:
    sample = next(iter(record.samples(np.random.default_rng(1))))
    g, phs, outs = _build(record, sample, dynamic=False)
    g.save(tmp_path / "g")
    g2 = og.Graph.load(tmp_path / "g")
    assert str(g2) == str(g)
    feeds = _feed(sample)
    a = g.run(dict(zip(phs, feeds, strict=True)), outs, device=CPU)
    phs2 = [g2.tensor(p.name) for p in phs]
    b = g2.run(dict(zip(phs2, feeds, strict=True)), [g2.tensor(t.name) for t in outs], device=CPU)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, equal_nan=True, rtol=0, atol=0)


def test_every_op_has_a_record() -> None:
    covered = {op for r in RECORDS for op in r.ops}
    # fused_region is made by the compiler, not by users: tests/codegen/test_fusion_pass.py checks it
    # against the unfused executable (it needs Triton's interpreter on the CPU)
    compiler_made = {"assign", "fused_region", "torch_fallback"}  # torch_fallback: tests/frontends
    missing = sorted(op.name for op in all_ops() if op not in covered and op.fusion is not FusionKind.SOURCE
                     and op.name not in compiler_made)
    assert not missing, f"ops without an OpInfo record: {missing}"
