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


# ---- the fused op and its gradient op ---------------------------------------------------------------
def _torch_train(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, axis: int = 1) -> torch.Tensor:
    return torch.nn.functional.batch_norm(x.movedim(axis, 1), None, None, gamma, beta, training=True).movedim(1, axis)


def test_training_mode_is_one_op_and_its_gradient_one_more() -> None:
    """No reductions or elementwise pieces: one batch_norm_training forward, one gradient op backward,
    and nothing for the statistics outputs the loss does not read."""
    g = og.Graph()
    bn = og.nn.BatchNorm2d(g, 3, dtype=og.float64)
    x = g.placeholder((4, 3, 2, 2), og.float64)
    y = bn(x)
    forward = [op.op.name for op in g.ops]
    assert forward.count("batch_norm_training") == 1
    assert not {"reduce_mean", "variance", "normalize"} & set(forward)
    loss = g.reduce_sum(g.multiply(y, y))
    start = len(g.ops)
    g.gradients(loss, [x, bn.weight, bn.bias])
    backward = [op.op.name for op in g.ops[start:]]
    assert backward.count("batch_norm_training_gradient") == 1
    # the loss's own rule (5 ops), the zeros for the two unused outputs, the gradient op: no 1/N terms
    assert len(backward) == 9 and not {"subtract", "divide", "reduce_sum"} & set(backward), backward


def test_gradients_through_the_statistics_outputs() -> None:
    """Cotangents on (mean, variance) add 1/N and 2 (x - mean) / N terms, as torch's var_mean gives."""
    g = og.Graph()
    x = g.placeholder((3, 2, 4), og.float64)
    gamma, beta = g.placeholder((2,), og.float64), g.placeholder((2,), og.float64)
    y, mean, var = g.batch_norm_training(x, gamma, beta)
    ws = [torch.randn(*s, dtype=F64, generator=_gen(i)) for i, s in enumerate([(3, 2, 4), (2,), (2,)])]
    loss = sum((g.reduce_sum(g.multiply(t, g.constant(w))) for t, w in zip((y, mean, var), ws, strict=True)),
               start=g.constant(torch.zeros((), dtype=F64)))
    grads = g.gradients(loss, [x, gamma, beta])
    xv, gv, bv = (torch.randn(*s, dtype=F64, generator=_gen(10 + i)) for i, s in enumerate([(3, 2, 4), (2,), (2,)]))
    got = g.run({x: xv, gamma: gv, beta: bv}, [grads[x], grads[gamma], grads[beta]], device="cpu")
    xt, gt, bt = (t.clone().requires_grad_() for t in (xv, gv, bv))
    vt, mt = torch.var_mean(xt, (0, 2), correction=0)
    tl = (_torch_train(xt, gt, bt) * ws[0]).sum() + (mt * ws[1]).sum() + (vt * ws[2]).sum()
    want = torch.autograd.grad(tl, [xt, gt, bt])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("axis", [1, -1])
def test_second_derivatives_match_torch_double_backward(axis: int) -> None:
    """Gradients of the gradient (the gradient op's own rule, and the statistics terms it feeds) and
    forward-over-reverse (jvp of the gradient) equal torch's double backward."""
    shape, c = ((3, 2, 2, 2), 2) if axis == 1 else ((2, 3, 2, 3), 3)
    g = og.Graph()
    rm, rv = g.variable(torch.zeros(c, dtype=F64)), g.variable(torch.ones(c, dtype=F64))
    x = g.placeholder(shape, og.float64)
    gamma, beta = g.placeholder((c,), og.float64), g.placeholder((c,), og.float64)
    w, v = (torch.randn(*shape, dtype=F64, generator=_gen(s)) for s in (1, 2))
    y, _ = g.batch_norm(x, rm, rv, gamma, beta, training=True, axis=axis)
    loss = g.reduce_sum(g.multiply(g.tanh(y), g.constant(w)))
    first = g.gradients(loss, [x, gamma])
    inner = g.reduce_sum(g.multiply(first[x], g.constant(v)))
    second = g.gradients(inner, [x, gamma, beta])
    tangent = g.constant(v)
    fwd = g.jvp([first[x], first[gamma]], [x], [tangent])
    xv, gv, bv = (torch.randn(*s, dtype=F64, generator=_gen(20 + i)) for i, s in enumerate([shape, (c,), (c,)]))
    outs = [second[x], second[gamma], second[beta], *fwd]
    got = g.run({x: xv, gamma: gv, beta: bv}, outs, device="cpu")
    xt, gt, bt = (t.clone().requires_grad_() for t in (xv, gv, bv))
    tl = (torch.tanh(_torch_train(xt, gt, bt, axis)) * w).sum()
    (gx,) = torch.autograd.grad(tl, [xt], create_graph=True)
    want = list(torch.autograd.grad((gx * v).sum(), [xt, gt, bt]))
    # jvp along v of (dL/dx, dL/dgamma): H_xx v and H_gamma,x v, the first two above by symmetry
    want += want[:2]
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=f"output {i}")


def test_jvp_of_the_normalised_output() -> None:
    g = og.Graph()
    x = g.placeholder((4, 3, 2), og.float64)
    gamma = g.placeholder((3,), og.float64)
    y, _, _ = g.batch_norm_training(x, gamma)
    t = g.placeholder((4, 3, 2), og.float64)
    (dy,) = g.jvp([y], [x], [t])
    shapes = [(4, 3, 2), (4, 3, 2), (3,)]
    xv, tv, gv = (torch.randn(*s, dtype=F64, generator=_gen(30 + i)) for i, s in enumerate(shapes))
    (got,) = g.run({x: xv, t: tv, gamma: gv}, [dy], device="cpu")
    e = 1e-6  # central differences
    want = (_torch_train(xv + e * tv, gv, None) - _torch_train(xv - e * tv, gv, None)) / (2 * e)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_jvp_through_the_batch_statistics() -> None:
    # jvp's stand-in cotangents must not look like the engine's zero fills (rules skip those)
    g = og.Graph()
    x, t = g.placeholder((4, 3), og.float64), g.placeholder((4, 3), og.float64)
    _, mean, var = g.batch_norm_training(x, axis=1)
    dmean, dvar = g.jvp([mean, var], [x], [t])
    xv, tv = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    got_mean, got_var = g.run({x: xv, t: tv}, [dmean, dvar])
    torch.testing.assert_close(got_mean, tv.mean(0))
    torch.testing.assert_close(got_var, (2 * (xv - xv.mean(0)) * (tv - tv.mean(0))).mean(0))
