"""Losses cross-checked against ``torch.nn.functional`` (whose semantics they follow): values and
gradients (PyTorch autograd), for every reduction, with static and dynamic dims (the gradient rules
then read counts at run time)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import opgraph as og

CPU = og.device("cpu")
R = og.LossReduction
F64 = torch.float64


def _check(build: Callable[..., og.Tensor], ref: Callable[..., torch.Tensor], inputs: list[torch.Tensor],
           dynamic: bool) -> None:
    g = og.Graph()
    phs = [g.placeholder(tuple(None for _ in t.shape) if dynamic else tuple(t.shape), og.TensorType.of(t).dtype)
           for t in inputs]
    loss = build(g, *phs)
    total = g.reduce_sum(loss * g.constant(1.5, og.float64))
    wrt = [p for p, t in zip(phs, inputs, strict=True) if t.dtype.is_floating_point]
    grads = g.gradients(total, wrt)
    got = g.run(dict(zip(phs, inputs, strict=True)), [loss, *[grads[p] for p in wrt]], device=CPU)
    leaves = [t.clone().requires_grad_() if t.dtype.is_floating_point else t for t in inputs]
    want = ref(*leaves)
    (want * 1.5).sum().backward()
    torch.testing.assert_close(got[0], want.detach(), rtol=1e-12, atol=1e-12, equal_nan=True)
    for a, leaf in zip(got[1:], [t for t in leaves if t.dtype.is_floating_point], strict=True):
        torch.testing.assert_close(a, leaf.grad, rtol=1e-12, atol=1e-12)


REDUCTIONS = [R.MEAN, R.SUM, R.NONE]


@pytest.mark.parametrize("reduction", REDUCTIONS, ids=lambda r: r.name)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("smoothing", [0.0, 0.15])
def test_softmax_cross_entropy_class_indices(reduction: R, dynamic: bool, smoothing: float) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 2, generator=gen, dtype=F64)
    y = torch.randint(0, 5, (3, 2), generator=gen)
    _check(lambda g, a, b: g.softmax_cross_entropy(a, b, axis=1, label_smoothing=smoothing, reduction=reduction),
           lambda a, b: F.cross_entropy(a, b, label_smoothing=smoothing, reduction=reduction.value), [x, y], dynamic)


@pytest.mark.parametrize("reduction", REDUCTIONS, ids=lambda r: r.name)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_softmax_cross_entropy_probabilities(reduction: R, dynamic: bool, smoothing: float) -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 6, generator=gen, dtype=F64)
    p = torch.softmax(torch.randn(4, 6, generator=gen, dtype=F64), -1)
    _check(lambda g, a, b: g.softmax_cross_entropy(a, b, label_smoothing=smoothing, reduction=reduction),
           lambda a, b: F.cross_entropy(a, b, label_smoothing=smoothing, reduction=reduction.value), [x, p], dynamic)


def test_softmax_cross_entropy_last_axis_matches_class_dim_one() -> None:
    """opgraph's class axis is any axis (MPSGraph); torch's is dim 1: the same numbers, moved."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 4, generator=gen, dtype=F64)
    y = torch.randint(0, 4, (2, 3), generator=gen)
    _check(lambda g, a, b: g.softmax_cross_entropy(a, b, reduction=R.NONE),
           lambda a, b: F.cross_entropy(a.movedim(-1, 1), b, reduction="none"), [x, y], False)


PAIRS: list[tuple[str, Callable[..., og.Tensor], Callable[..., torch.Tensor]]] = [
    ("sigmoid_cross_entropy", lambda g, a, b, r: g.sigmoid_cross_entropy(a, b, r),
     lambda a, b, r: F.binary_cross_entropy_with_logits(a, b, reduction=r)),
    ("mse", lambda g, a, b, r: g.mse(a, b, r), lambda a, b, r: F.mse_loss(a, b, reduction=r)),
    ("l1", lambda g, a, b, r: g.l1(a, b, r), lambda a, b, r: F.l1_loss(a, b, reduction=r)),
    ("huber", lambda g, a, b, r: g.huber(a, b, 0.7, r), lambda a, b, r: F.huber_loss(a, b, reduction=r, delta=0.7)),
]


@pytest.mark.parametrize("reduction", REDUCTIONS, ids=lambda r: r.name)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name,build,ref", PAIRS, ids=[p[0] for p in PAIRS])
def test_pair_losses(name: str, build: Any, ref: Any, reduction: R, dynamic: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    x = 3 * torch.randn(4, 3, generator=gen, dtype=F64)
    y = torch.rand(4, 3, generator=gen, dtype=F64) if name == "sigmoid_cross_entropy" else torch.randn(
        4, 3, generator=gen, dtype=F64)
    _check(lambda g, a, b: build(g, a, b, reduction), lambda a, b: ref(a, b, reduction.value), [x, y], dynamic)


def test_sigmoid_cross_entropy_is_stable() -> None:
    g = og.Graph()
    x = g.placeholder((4,), og.float32)
    z = g.placeholder((4,), og.float32)
    (got,) = g.run({x: [-200.0, 200.0, -1e4, 1e4], z: [0.0, 1.0, 1.0, 0.0]},
                   [g.sigmoid_cross_entropy(x, z, R.NONE)], device=CPU)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, 1e4, 1e4]))


def test_training_a_classifier_with_softmax_cross_entropy() -> None:
    """A loss in a training step: logits from a linear model, Adam, the loss goes down (and matches torch)."""
    gen = torch.Generator().manual_seed(4)
    xv = torch.randn(16, 3, generator=gen, dtype=F64)
    yv = (xv[:, 0] > 0).long() + (xv[:, 1] > 0.5).long()
    w0 = 0.1 * torch.randn(3, 3, generator=gen, dtype=F64)
    g = og.Graph()
    x, y = g.placeholder((16, 3), og.float64), g.placeholder((16,), og.int64)
    w = g.variable(w0)
    logits = g.reduce_sum(g.expand_dims(x, 2) * w, axes=1)  # x @ w through ops with gradient rules
    loss = g.softmax_cross_entropy(logits, y, label_smoothing=0.05)
    step = og.optim.Adam(g, [w], lr=0.1).minimize(loss)
    tw = w0.clone().requires_grad_()
    opt = torch.optim.Adam([tw], lr=0.1)
    history = []
    for _ in range(20):
        (value,) = g.run({x: xv, y: yv}, [loss], target_ops=step, device=CPU)
        opt.zero_grad()
        ref = F.cross_entropy(xv @ tw, yv, label_smoothing=0.05)
        ref.backward()
        opt.step()
        torch.testing.assert_close(value, ref.detach(), rtol=0, atol=1e-10)
        history.append(value.item())
    torch.testing.assert_close(g.variable_value(w, CPU), tw.detach(), rtol=0, atol=1e-10)
    assert history[-1] < 0.8 * history[0]
