"""Gradients of every differentiable op against central finite differences in float64.

For each record, a couple of samples are rebuilt with float64 placeholders; the loss is
``sum_i reduce_sum(out_i * w_i)`` with fixed random weights, so every output element matters.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import opgraph as og

from .opinfo import OpInfo, Sample, all_records, placeholder_like
from .test_ops import _as_list

EPS = 1e-6
MAX_ELEMENTS = 48  # finite differences cost two runs per element: check a random subset beyond this
CPU = og.device("cpu")


def _float64(v: Any) -> Any:
    t = v if isinstance(v, torch.Tensor) else torch.from_numpy(np.asarray(v))
    return t.to(torch.float64) if t.dtype.is_floating_point else t


def _grad_cases() -> list[tuple[OpInfo, Sample]]:
    cases = []
    for r in all_records():
        if not r.grad or not any(op.differentiable for op in r.ops):
            continue
        source = r.grad_samples or r.samples
        taken = 0
        for s in source(np.random.default_rng(2)):
            ins = [_float64(v) for v in s.inputs]
            if not any(t.dtype == torch.float64 and t.numel() for t in ins):
                continue
            if any(t.dtype == torch.float64 and not torch.isfinite(t).all() for t in ins):
                continue
            cases.append((r, Sample(ins, s.kwargs, s.desc)))
            taken += 1
            if taken == 2:
                break
    return cases


CASES = _grad_cases()


def check_gradients(record: OpInfo, sample: Sample, rng: np.random.Generator) -> None:
    g = og.Graph()
    phs = [placeholder_like(g, v) for v in sample.inputs]
    outs = [o for o in _as_list(record.build(g, *phs, **sample.kwargs)) if o.dtype is og.float64]
    if not outs:
        pytest.skip("no float64 output for this sample")
    loss: Any = None
    for o in outs:
        w = g.constant(torch.from_numpy(rng.uniform(0.5, 1.5, [d or 1 for d in o.shape])))
        term = g.reduce_sum(o * w)
        loss = term if loss is None else loss + term
    positions = [i for i, p in enumerate(phs) if p.dtype is og.float64]
    wrt = [phs[i] for i in positions]
    grads = g.gradients(loss, wrt)
    feeds = {p: v for p, v in zip(phs, sample.inputs, strict=True)}
    types = {p: og.TensorType.of(v) for p, v in feeds.items()}
    exe = g.compile(types, [loss, *[grads[p] for p in wrt]], device=CPU)
    loss_only = g.compile(types, [loss], device=CPU)
    values = list(feeds.values())
    analytic = exe.run(values)[1:]
    for k, (p, pos) in enumerate(zip(wrt, positions, strict=True)):
        base = values[pos]
        n = base.numel()
        idx = range(n) if n <= MAX_ELEMENTS else rng.choice(n, MAX_ELEMENTS, replace=False)
        for i in idx:
            i = int(i)
            plus, minus = base.clone(), base.clone()
            plus.view(-1)[i] += EPS
            minus.view(-1)[i] -= EPS
            up = loss_only.run(values[:pos] + [plus] + values[pos + 1:])[0].item()
            down = loss_only.run(values[:pos] + [minus] + values[pos + 1:])[0].item()
            numeric = (up - down) / (2 * EPS)
            got = analytic[k].reshape(-1)[i].item()
            assert abs(got - numeric) <= 1e-5 + 1e-4 * abs(numeric), (
                f"{record.name} {sample.desc}: d loss / d %{p.name}[{i}] = {got} (graph), "
                f"{numeric} (finite differences)")


@pytest.mark.parametrize("record,sample", CASES, ids=[f"{r.name}-{s.desc}" for r, s in CASES])
def test_gradient_matches_finite_differences(record: OpInfo, sample: Sample) -> None:
    check_gradients(record, sample, np.random.default_rng(3))
