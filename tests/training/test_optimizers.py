"""Optimizers built into graphs (``og.optim`` and the ``apply_*`` builders) against ``torch.optim``.

Each test runs a few steps in float64 from the same initial values with the same gradients (or the
same loss) in opgraph and in PyTorch, and compares the trajectories to 1e-10; every optimizer test runs
with ``foreach`` on (one multi-tensor op for SGD, Adam, AdamW) and off (graph ops per variable).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import opgraph as og

CPU = og.device("cpu")
STEPS = 5
F64 = torch.float64

# (opgraph class, torch class, keyword arguments both accept)
CASES: list[tuple[str, Any, Any, dict[str, Any]]] = [
    ("sgd", og.optim.SGD, torch.optim.SGD, dict(lr=0.1)),
    ("sgd-momentum", og.optim.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
    ("sgd-nesterov-wd", og.optim.SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1)),
    ("sgd-dampening", og.optim.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("sgd-maximize", og.optim.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.5, maximize=True)),
    ("adam", og.optim.Adam, torch.optim.Adam, dict(lr=0.1)),
    ("adam-wd-amsgrad", og.optim.Adam, torch.optim.Adam, dict(lr=0.05, betas=(0.8, 0.99), weight_decay=0.1,
                                                               amsgrad=True, eps=1e-6)),
    ("adam-maximize", og.optim.Adam, torch.optim.Adam, dict(lr=0.02, maximize=True)),
    ("adamw", og.optim.AdamW, torch.optim.AdamW, dict(lr=0.1)),
    ("adamw-amsgrad", og.optim.AdamW, torch.optim.AdamW, dict(lr=0.1, weight_decay=0.2, amsgrad=True)),
    ("rmsprop", og.optim.RMSprop, torch.optim.RMSprop, dict(lr=0.01)),
    ("rmsprop-centered-momentum-wd", og.optim.RMSprop, torch.optim.RMSprop,
     dict(lr=0.01, alpha=0.9, momentum=0.7, centered=True, weight_decay=0.05)),
    ("adagrad", og.optim.Adagrad, torch.optim.Adagrad, dict(lr=0.1)),
    ("adagrad-decay-init-wd", og.optim.Adagrad, torch.optim.Adagrad,
     dict(lr=0.1, lr_decay=0.05, initial_accumulator_value=0.3, weight_decay=0.1, eps=1e-8)),
    ("adadelta", og.optim.Adadelta, torch.optim.Adadelta, dict(lr=1.0)),
    ("adadelta-wd", og.optim.Adadelta, torch.optim.Adadelta, dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.1)),
]
IDS = [c[0] for c in CASES]


@pytest.fixture(params=[True, False], ids=["foreach", "per-variable"])
def foreach(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def _problem(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A small linear regression: inputs (8, 3), targets (8,), initial weights (3,) and bias ()."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 3, generator=gen, dtype=F64)
    y = x @ torch.tensor([1.5, -2.0, 0.5], dtype=F64) + 0.3 + 0.1 * torch.randn(8, generator=gen, dtype=F64)
    return x, y, torch.randn(3, generator=gen, dtype=F64), torch.randn((), generator=gen, dtype=F64)


def _graph_loss(g: og.Graph, x: og.Tensor, y: og.Tensor, w: og.Tensor, b: og.Tensor) -> og.Tensor:
    pred = g.reduce_sum(x * w, axes=1) + b  # x @ w, from ops with gradient rules
    return g.mse(pred, y)


def _torch_loss(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss((x * w).sum(1) + b, y)


@pytest.mark.parametrize("name,og_cls,torch_cls,kw", CASES, ids=IDS)
def test_given_gradients_match_torch(name: str, og_cls: Any, torch_cls: Any, kw: dict[str, Any],
                                     foreach: bool) -> None:
    """The update alone: gradients fed through a placeholder."""
    rng = np.random.default_rng(0)
    w0 = torch.from_numpy(rng.normal(size=(3, 2)))
    grads = [torch.from_numpy(rng.normal(size=(3, 2))) for _ in range(STEPS)]
    g = og.Graph()
    w = g.variable(w0, name="w")
    grad = g.placeholder((3, 2), og.float64, name="grad")
    ops = og_cls(g, [w], **kw, foreach=foreach).apply_gradients({w: grad})
    ref = w0.clone().requires_grad_()
    opt = torch_cls([ref], **kw)
    for k, gr in enumerate(grads):
        g.run({grad: gr}, target_ops=ops, device=CPU)
        ref.grad = gr.clone()
        opt.step()
        torch.testing.assert_close(g.variable_value(w), ref.detach(), rtol=0, atol=1e-10, msg=f"step {k}")


@pytest.mark.parametrize("name,og_cls,torch_cls,kw", CASES, ids=IDS)
def test_step_on_a_loss_matches_torch(name: str, og_cls: Any, torch_cls: Any, kw: dict[str, Any],
                                      foreach: bool) -> None:
    """``step(loss)``: gradients from graph.gradients, updates compiled into the same executable as the loss."""
    xv, yv, w0, b0 = _problem()
    g = og.Graph()
    x, y = g.placeholder((8, 3), og.float64), g.placeholder((8,), og.float64)
    w, b = g.variable(w0, name="w"), g.variable(b0, name="b")
    loss = _graph_loss(g, x, y, w, b)
    ops = og_cls(g, [w, b], **kw, foreach=foreach).step(loss)
    tw, tb = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    opt = torch_cls([tw, tb], **kw)
    for k in range(STEPS):
        (got,) = g.run({x: xv, y: yv}, [loss], target_ops=ops, device=CPU)
        opt.zero_grad()
        want = _torch_loss(xv, yv, tw, tb)
        want.backward()
        opt.step()
        torch.testing.assert_close(got, want.detach(), rtol=0, atol=1e-10, msg=f"loss before step {k}")
        torch.testing.assert_close(g.variable_value(w), tw.detach(), rtol=0, atol=1e-10, msg=f"w after step {k}")
        torch.testing.assert_close(g.variable_value(b), tb.detach(), rtol=0, atol=1e-10, msg=f"b after step {k}")


SCHEDULED: list[tuple[str, Any, Any, dict[str, Any]]] = [
    ("sgd-momentum", og.optim.SGD, torch.optim.SGD, dict(momentum=0.9, weight_decay=0.01)),
    ("adam", og.optim.Adam, torch.optim.Adam, dict(weight_decay=0.01)),
    ("adamw", og.optim.AdamW, torch.optim.AdamW, {}),
    ("rmsprop", og.optim.RMSprop, torch.optim.RMSprop, dict(momentum=0.5)),
    ("adagrad", og.optim.Adagrad, torch.optim.Adagrad, dict(lr_decay=0.1)),
    ("adadelta", og.optim.Adadelta, torch.optim.Adadelta, {}),
]
LRS = [0.1, 0.05, 0.2, 0.0, 0.01]


@pytest.mark.parametrize("name,og_cls,torch_cls,kw", SCHEDULED, ids=[c[0] for c in SCHEDULED])
@pytest.mark.parametrize("source", ["placeholder", "variable"])
def test_tensor_learning_rate_schedule(name: str, og_cls: Any, torch_cls: Any, kw: dict[str, Any],
                                       source: str, foreach: bool) -> None:
    """A learning rate that is a graph tensor, changed between runs (torch: the param group's lr)."""
    xv, yv, w0, b0 = _problem(1)
    g = og.Graph()
    x, y = g.placeholder((8, 3), og.float64), g.placeholder((8,), og.float64)
    w, b = g.variable(w0), g.variable(b0)
    lr = g.placeholder((), og.float64) if source == "placeholder" else g.variable(torch.tensor(0.0, dtype=F64))
    ops = og_cls(g, [w, b], lr=lr, **kw, foreach=foreach).step(_graph_loss(g, x, y, w, b))
    tw, tb = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    opt = torch_cls([tw, tb], lr=LRS[0], **kw)
    for rate in LRS:
        feeds = {x: xv, y: yv}
        if source == "placeholder":
            feeds[lr] = torch.tensor(rate, dtype=F64)
        else:
            g.set_variable_value(lr, torch.tensor(rate, dtype=F64), device=CPU)
        g.run(feeds, target_ops=ops, device=CPU)
        for group in opt.param_groups:
            group["lr"] = rate
        opt.zero_grad()
        _torch_loss(xv, yv, tw, tb).backward()
        opt.step()
        torch.testing.assert_close(g.variable_value(w), tw.detach(), rtol=0, atol=1e-10, msg=f"lr {rate}")
        torch.testing.assert_close(g.variable_value(b), tb.detach(), rtol=0, atol=1e-10, msg=f"lr {rate}")


def test_tensor_betas_and_momentum(foreach: bool) -> None:
    """Other hyper-parameters may be tensors too (fed as float32 for a float64 variable: cast)."""
    rng = np.random.default_rng(4)
    w0 = torch.from_numpy(rng.normal(size=(4,)))
    grads = [torch.from_numpy(rng.normal(size=(4,))) for _ in range(STEPS)]
    for og_cls, torch_cls, og_kw, t_kw in [
        (og.optim.Adam, torch.optim.Adam, lambda g: dict(betas=(g.constant(0.8, og.float64), g.constant(0.95))),
         dict(betas=(0.8, 0.95))),
        (og.optim.SGD, torch.optim.SGD, lambda g: dict(momentum=g.constant(0.75, og.float64), dampening=g.constant(
            0.25, og.float64)), dict(momentum=0.75, dampening=0.25)),
    ]:
        g = og.Graph()
        w = g.variable(w0)
        grad = g.placeholder((4,), og.float64)
        ops = og_cls(g, [w], lr=0.1, **og_kw(g), foreach=foreach).apply_gradients({w: grad})
        ref = w0.clone().requires_grad_()
        opt = torch_cls([ref], lr=0.1, **t_kw)
        for gr in grads:
            g.run({grad: gr}, target_ops=ops, device=CPU)
            ref.grad = gr.clone()
            opt.step()
        tol = 1e-10 if og_cls is og.optim.SGD else 1e-6  # beta2 went through float32
        torch.testing.assert_close(g.variable_value(w), ref.detach(), rtol=0, atol=tol)


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 3e-7), (torch.float16, 2e-3), (torch.bfloat16, 2e-2)])
def test_lower_precision_variables(dtype: torch.dtype, atol: float, foreach: bool) -> None:
    """16-bit variables compute in float32 and keep their dtype (state included)."""
    rng = np.random.default_rng(5)
    w0 = torch.from_numpy(rng.normal(size=(6,))).to(dtype)
    grads = [torch.from_numpy(rng.normal(size=(6,))).to(dtype) for _ in range(3)]
    g = og.Graph()
    w = g.variable(w0)
    grad = g.placeholder((6,), og.TensorType.of(w0).dtype)
    opt = og.optim.Adam(g, [w], lr=0.1, foreach=foreach)
    ops = opt.apply_gradients({w: grad})
    ref = w0.float().clone().requires_grad_()
    topt = torch.optim.Adam([ref], lr=0.1)
    for gr in grads:
        g.run({grad: gr}, target_ops=ops, device=CPU)
        ref.grad = gr.float()
        topt.step()
    got = g.variable_value(w)
    assert got.dtype == dtype
    assert all(g.variable_value(v).dtype == dtype for k, v in opt.state[w].items() if k != "step")
    torch.testing.assert_close(got.float(), ref.detach(), rtol=0, atol=atol)


# ---- the builders: apply_*, and MPSGraph's spellings ------------------------------------------------
def _drive(build: Callable[[og.Graph, og.Tensor, og.Tensor], list[og.Operation]], torch_cls: Any,
           t_kw: dict[str, Any]) -> None:
    rng = np.random.default_rng(6)
    w0 = torch.from_numpy(rng.normal(size=(2, 3)))
    g = og.Graph()
    w = g.variable(w0)
    grad = g.placeholder((2, 3), og.float64)
    ops = build(g, w, grad)
    assert all(isinstance(op, og.Operation) and op.op.name == "assign" for op in ops)
    ref = w0.clone().requires_grad_()
    opt = torch_cls([ref], **t_kw)
    for _ in range(STEPS):
        gr = torch.from_numpy(rng.normal(size=(2, 3)))
        g.run({grad: gr}, target_ops=ops, device=CPU)
        ref.grad = gr.clone()
        opt.step()
        torch.testing.assert_close(g.variable_value(w), ref.detach(), rtol=0, atol=1e-10)


def test_apply_builders() -> None:
    _drive(lambda g, w, d: g.apply_sgd(w, d, 0.1, momentum=0.9, nesterov=True, weight_decay=0.1),
           torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1))
    _drive(lambda g, w, d: g.apply_adam(w, d, 0.01, 0.8, 0.9, 1e-6, 0.1, True),
           torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, amsgrad=True))
    _drive(lambda g, w, d: g.apply_adamw(w, d, 0.01), torch.optim.AdamW, dict(lr=0.01))
    _drive(lambda g, w, d: g.apply_rmsprop(w, d, 0.01, centered=True), torch.optim.RMSprop,
           dict(lr=0.01, centered=True))
    _drive(lambda g, w, d: g.apply_adagrad(w, d, 0.1, lr_decay=0.01), torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01))
    _drive(lambda g, w, d: g.apply_adadelta(w, d, 0.9), torch.optim.Adadelta, dict(lr=0.9))


def test_apply_sgd_uses_a_given_momentum_variable() -> None:
    g = og.Graph()
    w = g.variable(torch.tensor([1.0, 2.0], dtype=F64))
    buf = g.variable(torch.zeros(2, dtype=F64), name="buf")
    ops = g.apply_sgd(w, g.constant([1.0, -1.0], og.float64), 0.5, momentum=0.9, momentum_variable=buf)
    g.run(target_ops=ops, device=CPU)
    g.run(target_ops=ops, device=CPU)
    assert g.variable_value(buf, CPU).tolist() == pytest.approx([1.9, -1.9])
    assert g.variable_value(w, CPU).tolist() == pytest.approx([1.0 - 0.5 - 0.95, 2.0 + 0.5 + 0.95])


def test_state_variables_are_named_and_kept(foreach: bool) -> None:
    g = og.Graph()
    w = g.variable(torch.zeros(3, dtype=F64), name="w")
    opt = og.optim.Adam(g, [w], amsgrad=True, foreach=foreach)
    opt.apply_gradients({w: g.constant([1.0, 2.0, 3.0], og.float64)})
    assert sorted(opt.state[w]) == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]
    assert g.tensor("w.exp_avg") is opt.state[w]["exp_avg"]
    ops = opt.apply_gradients({w: g.constant([1.0, 2.0, 3.0], og.float64)})  # a second update reuses the state
    assert len(g.variables) == 5
    g.run(target_ops=ops, device=CPU)
    assert g.variable_value(opt.state[w]["step"], CPU).item() == 1.0


def test_two_steps_in_one_run(foreach: bool) -> None:
    """Updates take effect at their point: a second step in the same graph sees the first one's results."""
    g = og.Graph()
    w = g.variable(torch.tensor([4.0], dtype=F64))
    opt = og.optim.SGD(g, [w], lr=0.25, foreach=foreach)
    first = opt.step(g.reduce_sum(w * w))
    second = opt.apply_gradients({w: g.read(w) * 2.0})
    g.run(target_ops=first + second, device=CPU)
    assert g.variable_value(w, CPU).item() == pytest.approx(1.0)  # 4 -> 2 -> 1


def test_mpsgraph_spellings() -> None:
    g = og.Graph()
    v = g.placeholder((3,), og.float64)
    d = g.placeholder((3,), og.float64)
    vv, dv = torch.tensor([1.0, -2.0, 0.5], dtype=F64), torch.tensor([0.2, 0.4, -1.0], dtype=F64)
    (sgd,) = g.run({v: vv, d: dv}, [g.stochastic_gradient_descent(0.1, v, d)], device=CPU)
    torch.testing.assert_close(sgd, vv - 0.1 * dv)
    m, vel, vmax = (torch.tensor(x, dtype=F64) for x in ([0.1, 0.0, -0.1], [0.01, 0.02, 0.03], [0.05, 0.0, 0.0]))
    outs = g.adam(0.01, 0.9, 0.999, 1e-8, 0.9**3, 0.999**3, v, g.constant(m), g.constant(vel), d,
                  g.constant(vmax))
    got = g.run({v: vv, d: dv}, outs, device=CPU)
    lr_t = 0.01 * np.sqrt(1 - 0.999**3) / (1 - 0.9**3)
    m1 = 0.9 * m + 0.1 * dv
    v1 = 0.999 * vel + 0.001 * dv * dv
    vm = torch.maximum(vmax, v1)
    for a, b in zip(got, [vv - lr_t * m1 / (vm.sqrt() + 1e-8), m1, v1, vm], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    w = g.variable(vv.clone())
    op = g.apply_stochastic_gradient_descent(0.5, w, d)
    g.run({d: dv}, target_ops=[op], device=CPU)
    torch.testing.assert_close(g.variable_value(w, CPU), vv - 0.5 * dv)


# ---- errors -----------------------------------------------------------------------------------------
def _var(g: og.Graph, shape: tuple[int, ...] = (2,), dtype: torch.dtype = F64) -> og.Tensor:
    return g.variable(torch.zeros(shape, dtype=dtype))


@pytest.mark.parametrize("build,error,match", [
    (lambda g: og.optim.SGD(g, [], lr=0.1), og.GraphError, "empty"),
    (lambda g: og.optim.SGD(g, [g.placeholder((2,))], lr=0.1), og.GraphError, "variable"),
    (lambda g: og.optim.SGD(g, [_var(g)], lr=-0.1), og.AttributeValueError, "learning_rate"),
    (lambda g: og.optim.SGD(g, [_var(g)], lr=0.1, nesterov=True), og.AttributeValueError, "nesterov"),
    (lambda g: og.optim.SGD(g, [_var(g)], lr=0.1, momentum=0.9, dampening=0.1, nesterov=True),
     og.AttributeValueError, "nesterov"),
    (lambda g: og.optim.Adam(g, [_var(g)], betas=(1.0, 0.999)), og.AttributeValueError, "beta1"),
    (lambda g: og.optim.Adam(g, [_var(g)], eps=-1.0), og.AttributeValueError, "epsilon"),
    (lambda g: og.optim.Adam(g, [_var(g)], lr="0.1"), og.AttributeValueError, "learning_rate"),
    (lambda g: og.optim.Adam(g, [_var(g)], lr=g.placeholder((2,))), og.DTypeError, "scalar floating tensor"),
    (lambda g: og.optim.Adadelta(g, [_var(g)], rho=1.5), og.AttributeValueError, "rho"),
    (lambda g: og.optim.Adagrad(g, [_var(g)], initial_accumulator_value=g.constant(1.0)), og.AttributeValueError,
     "initial_accumulator_value"),
    (lambda g: g.apply_sgd(_var(g), g.placeholder((3,), og.float64), 0.1), og.ShapeError, "does not match"),
    (lambda g: g.apply_sgd(g.placeholder((2,)), g.placeholder((2,)), 0.1), og.GraphError, "variable"),
    (lambda g: g.apply_adam(_var(g, (2,), torch.int32), g.placeholder((2,)), 0.1), og.DTypeError, "real floating"),
    (lambda g: g.apply_adam(_var(g), g.placeholder((2,), og.int32)), og.DTypeError, "gradient"),
    (lambda g: g.apply_adam(_var(g), g.placeholder((2,), og.float64), state={"momentum": _var(g)}),
     og.AttributeValueError, "unknown state"),
    (lambda g: g.apply_sgd(_var(g), g.placeholder((2,), og.float64), 0.1, 0.9, momentum_variable=_var(g, (3,))),
     og.ShapeError, "momentum_buffer"),
    (lambda g: og.optim.SGD(g, [_var(g)], lr=0.1).apply_gradients({}), og.GraphError, "no gradient"),
    (lambda g: og.optim.Adam(g, [w := _var(g)]).apply_gradients({w: g.placeholder((3,), og.float64)}),
     og.ShapeError, "does not match"),
    (lambda g: og.optim.SGD(g, [w := _var(g, (2,), torch.int32)], lr=0.1).apply_gradients({w: g.placeholder((2,))}),
     og.DTypeError, "real floating"),
])
def test_errors(build: Callable[[og.Graph], Any], error: type[og.OpgraphError], match: str) -> None:
    with pytest.raises(error, match=match):
        build(og.Graph())


# ---- the multi-tensor path ----------------------------------------------------------------------------
def _model(g: og.Graph, dtypes: list[torch.dtype], seed: int = 7) -> tuple[list[og.Tensor], list[og.Tensor]]:
    """Variables of several shapes and dtypes, and a gradient placeholder for each."""
    gen = torch.Generator().manual_seed(seed)
    shapes = [(3, 4), (5,), (), (2, 1, 3)]
    ws = [g.variable(torch.randn(shapes[i % 4], generator=gen, dtype=F64).to(dt), name=f"w{i}")
          for i, dt in enumerate(dtypes)]
    return ws, [g.placeholder(w.shape, w.dtype) for w in ws]


MULTI: list[tuple[str, Any, dict[str, Any]]] = [
    ("sgd-dampening-wd-maximize", og.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.1,
                                                     maximize=True)),
    ("sgd-nesterov", og.optim.SGD, dict(lr=0.1, momentum=0.8, nesterov=True)),
    ("adam-amsgrad-wd", og.optim.Adam, dict(lr=0.05, weight_decay=0.1, amsgrad=True)),
    ("adamw-maximize", og.optim.AdamW, dict(lr=0.05, maximize=True)),
]


@pytest.mark.parametrize("name,og_cls,kw", MULTI, ids=[c[0] for c in MULTI])
def test_foreach_matches_per_variable_on_mixed_dtypes(name: str, og_cls: Any, kw: dict[str, Any]) -> None:
    """One optimizer over float64, float32, float16 and bfloat16 variables: the multi-tensor ops (one per
    compute dtype) give the per-variable graph ops' results, state included."""
    dtypes = [F64, torch.float32, torch.float16, torch.bfloat16, torch.float32, F64]
    results = []
    for foreach in (True, False):
        g = og.Graph()
        ws, ds = _model(g, dtypes)
        opt = og_cls(g, ws, **kw, foreach=foreach)
        ops = opt.apply_gradients(dict(zip(ws, ds, strict=True)))
        multi = [op for op in g.ops if op.op.name.endswith("_multi_tensor")]
        assert len(multi) == (2 if foreach else 0)  # float64, and float32 for the rest
        gen = torch.Generator().manual_seed(3)
        for _ in range(4):
            g.run({d: torch.randn(d.shape, generator=gen, dtype=F64).to(d.dtype.torch_dtype) for d in ds},
                  target_ops=ops, device=CPU)
        results.append([(g.variable_value(w), {k: g.variable_value(v) for k, v in opt.state[w].items()})
                        for w in ws])
    for (a, sa), (b, sb), dt in zip(*results, dtypes, strict=True):
        assert a.dtype == b.dtype == dt
        tol = 1e-12 if dt == F64 else 1e-6 if dt == torch.float32 else 1e-2
        torch.testing.assert_close(a.double(), b.double(), rtol=0, atol=tol)
        assert sorted(sa) == sorted(sb)
        for k in sa:
            assert sa[k].dtype == sb[k].dtype
            torch.testing.assert_close(sa[k].double(), sb[k].double(), rtol=0, atol=tol)


def test_foreach_is_one_op_with_a_shared_step() -> None:
    g = og.Graph()
    ws, ds = _model(g, [torch.float32] * 5)
    opt = og.optim.Adam(g, ws, lr=0.1)
    ops = opt.apply_gradients(dict(zip(ws, ds, strict=True)))
    names = [op.op.name for op in g.ops]
    assert names.count("adam_multi_tensor") == 1
    assert not {"multiply", "add", "subtract", "divide", "sqrt"} & set(names)
    assert len({id(opt.state[w]["step"]) for w in ws}) == 1  # one counter for the group
    assert sum(op.op.name == "assign" for op in ops) == len(ops) == 3 * 5 + 1
    g.run({d: torch.ones(d.shape) for d in ds}, target_ops=ops, device=CPU)
    assert g.variable_value(opt.state[ws[0]]["step"], CPU).item() == 1.0


@pytest.mark.parametrize("algo", ["sgd", "adam"])
def test_foreach_with_per_variable_steps(algo: str) -> None:
    """State with a step counter per variable (different counts): the multi-tensor op keeps one per variable."""
    from opgraph.ops import training

    rng = np.random.default_rng(8)
    w0 = [torch.from_numpy(rng.normal(size=s)) for s in [(3,), (2, 2), ()]]
    grads = [torch.from_numpy(rng.normal(size=w.shape)) for w in w0]
    hyper = (dict(learning_rate=0.1, momentum=0.9, dampening=0.2) if algo == "sgd"
             else dict(learning_rate=0.1, beta1=0.8, weight_decay=0.1))
    single, multi = ((training.sgd_update, training.sgd_multi_update) if algo == "sgd"
                     else (training.adam_update, training.adam_multi_update))
    got = []
    for fn in (single, multi):
        g = og.Graph()
        ws = [g.variable(w) for w in w0]
        states = [{"step": g.variable(torch.tensor(float(3 * i), dtype=F64))} for i in range(3)]
        if fn is multi:
            ups = fn(g, ws, [g.constant(d) for d in grads], states=states, **hyper)
        else:
            ups = [fn(g, w, g.constant(d), state=s, **hyper) for w, s, d in zip(ws, states, grads, strict=True)]
        ops = [op for u in ups for op in u.ops]
        assert sum(op.op.name.endswith("_multi_tensor") for op in g.ops) == (fn is multi)
        for _ in range(3):
            g.run(target_ops=ops, device=CPU)
        got.append([g.variable_value(w, CPU) for w in ws] + [g.variable_value(s["step"], CPU) for s in states])
    for a, b in zip(*got, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
