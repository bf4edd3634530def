"""Batch norm: og.nn.BatchNorm2d / g.batch_norm against torch.nn.BatchNorm2d over several steps,
in training mode (batch statistics, running-statistics updates) and eval mode."""

from __future__ import annotations

import pytest
import torch

import opgraph as og

F64 = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _torch_bn(c: int, momentum: float = 0.1) -> torch.nn.BatchNorm2d:
    ref = torch.nn.BatchNorm2d(c, momentum=momentum, dtype=F64)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5, generator=_gen(1))
        ref.bias.uniform_(-0.5, 0.5, generator=_gen(2))
    return ref


@pytest.mark.parametrize("momentum", [0.1, 0.5])
@pytest.mark.parametrize("batch", [4, None], ids=["static", "dynamic"])
def test_batch_norm2d_training_steps_match_torch(momentum: float, batch: int | None) -> None:
    ref = _torch_bn(3, momentum)
    g = og.Graph()
    bn = og.nn.BatchNorm2d(g, 3, momentum=momentum, dtype=og.float64)
    bn.load_state_dict(ref.state_dict())
    x = g.placeholder((batch, 3, None, 5), og.float64)
    y = bn(x)
    assert len(bn.updates) == 2
    for step in range(5):
        xv = torch.randn(4, 3, 6, 5, dtype=F64, generator=_gen(10 + step)) * (step + 1) + step
        (got,) = g.run({x: xv}, [y], target_ops=bn.updates, device="cpu")
        want = ref(xv).detach()
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        state = bn.state_dict()
        for k in ("running_mean", "running_var"):
            torch.testing.assert_close(state[k], getattr(ref, k), rtol=1e-12, atol=1e-12, msg=f"step {step} {k}")
    # eval mode from the same variables: the running statistics normalise
    ref.eval()
    bn.eval()
    y_eval = bn(x)
    assert len(bn.updates) == 2
    xv = torch.randn(4, 3, 6, 5, dtype=F64, generator=_gen(99))
    (got,) = g.run({x: xv}, [y_eval], device="cpu")
    torch.testing.assert_close(got, ref(xv).detach(), rtol=1e-12, atol=1e-12)


def test_without_update_targets_running_stats_stay() -> None:
    g = og.Graph()
    bn = og.nn.BatchNorm2d(g, 2)
    x = g.placeholder((3, 2, 2, 2))
    y = bn(x)
    g.run({x: torch.randn(3, 2, 2, 2)}, [y], device="cpu")
    state = bn.state_dict()
    assert torch.equal(state["running_mean"], torch.zeros(2)) and torch.equal(state["running_var"], torch.ones(2))


def test_layer_applied_twice_updates_twice_in_order() -> None:
    """Two calls in one graph update the running statistics one after the other, as two torch calls do."""
    ref = _torch_bn(2)
    g = og.Graph()
    bn = og.nn.BatchNorm2d(g, 2, dtype=og.float64)
    bn.load_state_dict(ref.state_dict())
    a, b = g.placeholder((4, 2, 3, 3), og.float64), g.placeholder((4, 2, 3, 3), og.float64)
    ya, yb = bn(a), bn(b)
    av, bv = (torch.randn(4, 2, 3, 3, dtype=F64, generator=_gen(s)) for s in (1, 2))
    got = g.run({a: av, b: bv}, [ya, yb], target_ops=bn.updates, device="cpu")
    want = [ref(av).detach(), ref(bv).detach()]
    for o, w in zip(got, want, strict=True):
        torch.testing.assert_close(o, w, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(bn.state_dict()["running_var"], ref.running_var, rtol=1e-12, atol=1e-12)


def test_batch_norm1d_and_float32() -> None:
    ref = torch.nn.BatchNorm1d(5)
    g = og.Graph()
    bn = og.nn.BatchNorm1d(g, 5)
    x = g.placeholder((None, 5, None))
    y = bn(x)
    for step in range(3):
        xv = torch.randn(8, 5, 3, generator=_gen(step))
        (got,) = g.run({x: xv}, [y], target_ops=bn.updates, device="cpu")
        torch.testing.assert_close(got, ref(xv).detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bn.state_dict()["running_var"], ref.running_var, rtol=1e-6, atol=1e-6)
    with pytest.raises(og.ShapeError, match="rank 2 or 3"):
        bn(g.placeholder((2, 5, 3, 3)))


def test_half_input_with_float32_statistics() -> None:
    g = og.Graph()
    rm, rv = g.variable(torch.zeros(3)), g.variable(torch.ones(3))
    x = g.placeholder((4, 3, 2), og.float16)
    y, updates = g.batch_norm(x, rm, rv, training=True)
    assert y.dtype is og.float16
    xv = torch.randn(4, 3, 2, generator=_gen()).half()
    (got,) = g.run({x: xv}, [y], target_ops=updates, device="cpu")
    rm_t, rv_t = torch.zeros(3), torch.ones(3)
    want = torch.nn.functional.batch_norm(xv.float(), rm_t, rv_t, training=True)
    torch.testing.assert_close(got.float(), want, rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(g.variable_value(rv), rv_t, rtol=1e-3, atol=1e-3)


def test_gradients_flow_through_batch_norm() -> None:
    """d loss / d (x, gamma, beta) through the composed ops equals torch's batch-norm backward."""
    g = og.Graph()
    rm, rv = g.variable(torch.zeros(3, dtype=F64)), g.variable(torch.ones(3, dtype=F64))
    gamma, beta = g.variable(torch.rand(3, dtype=F64, generator=_gen(1))), g.variable(torch.zeros(3, dtype=F64))
    x = g.placeholder((4, 3, 2, 2), og.float64)
    w = torch.randn(4, 3, 2, 2, dtype=F64, generator=_gen(2))
    y, _ = g.batch_norm(x, rm, rv, gamma, beta, training=True)
    loss = g.reduce_sum(y * g.constant(w))
    grads = g.gradients(loss, [x, gamma, beta])
    xv = torch.randn(4, 3, 2, 2, dtype=F64, generator=_gen(3))
    got = g.run({x: xv}, [grads[x], grads[gamma], grads[beta]], device="cpu")
    xt = xv.clone().requires_grad_()
    gt = g.variable_value(gamma).requires_grad_()
    bt = g.variable_value(beta).requires_grad_()
    (torch.nn.functional.batch_norm(xt, None, None, gt, bt, training=True) * w).sum().backward()
    for a, b in zip(got, [xt.grad, gt.grad, bt.grad], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
