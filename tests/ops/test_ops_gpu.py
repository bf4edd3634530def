"""Every OpInfo sample on the GPU: the same oracle, the same type rule, results on the device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import opgraph as og

from .opinfo import OpInfo, Sample, to_numpy
from .test_ops import SAMPLES, _as_list, _build, _feed, _sid, check_close

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("record,sample", SAMPLES, ids=[_sid(x) for x in SAMPLES])
def test_numerics_on_cuda(record: OpInfo, sample: Sample) -> None:
    g, phs, outs = _build(record, sample, dynamic=False)
    results = g.run(dict(zip(phs, _feed(sample), strict=True)), outs, device="cuda")
    expected = _as_list(record.oracle(*[to_numpy(v) for v in sample.inputs], **sample.kwargs))
    for t, r, e in zip(outs, results, expected, strict=True):
        assert r.device.type == "cuda"
        assert r.dtype == t.dtype.torch_dtype and tuple(r.shape) == t.shape
        check_close(record, r.cpu(), e, f"{record.name} {sample.desc} on cuda", gpu=True)


def test_variables_live_on_the_device() -> None:
    g = og.Graph()
    w = g.variable(torch.ones(4), name="w")
    step = g.assign(w, w * 2.0)
    for _ in range(3):
        g.run({}, [], [step], device="cuda")
    (value,) = g.run({}, [w], device="cuda")
    assert value.device.type == "cuda" and value.tolist() == [8.0] * 4
    assert g.variable_value(w, "cpu").tolist() == [1.0] * 4  # state is per device
    np.testing.assert_array_equal(g.variable_value(w, "cuda").cpu().numpy(), 8.0)


# ops whose lowering synchronises with the host: runs of them go op by op (inverse: torch.linalg.inv raises
# on a singular matrix, which it learns on the host)
HOST_SYNCING = {"inverse"}
FIRST_SAMPLES = list({r.name: (r, s) for r, s in reversed(SAMPLES)}.values())


@pytest.mark.parametrize("record,sample", FIRST_SAMPLES, ids=[r.name for r, _ in FIRST_SAMPLES])
def test_lowering_captures_into_a_cuda_graph(record: OpInfo, sample: Sample) -> None:
    """A run of every op can be captured (no host-to-device copy or host sync in its lowering), and the replay
    gives the oracle's result."""
    g, phs, outs = _build(record, sample, dynamic=False)
    feeds = [v.cuda() for v in _feed(sample)]
    exe = g.compile({p: p.type for p in phs}, outs, device="cuda",
                    descriptor=og.CompilationDescriptor(check_indices=False))
    exe.run(feeds)  # the capture
    results = exe.run(feeds)  # a replay
    status = exe.cuda_graph_status
    if record.name in HOST_SYNCING:
        assert status.startswith("off"), status
        return
    assert not status.startswith("off: capture failed"), status
    expected = _as_list(record.oracle(*[to_numpy(v) for v in sample.inputs], **sample.kwargs))
    for r, e in zip(results, expected, strict=True):
        check_close(record, r.cpu(), e, f"{record.name} {sample.desc} replayed", gpu=True)
