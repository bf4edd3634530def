"""Optimizer updates (MPSGraph's ``stochasticGradientDescent``, ``applyStochasticGradientDescent``, ``adam``),
composed from graph ops and ``assign``.

There is no optimizer op: each ``apply_*`` builder reads the variable and its optimizer state
(momentum buffers, moments, a step counter: graph variables the builder creates), computes the
update with ordinary graph ops, and writes the results back with ``assign`` ops, which it returns
for ``target_ops``. So an update compiles (and fuses) with the rest of the step. The formulas are
``torch.optim``'s single-tensor updates, operation for operation, so trajectories match PyTorch's.

Hyper-parameters may be Python numbers (folded at build time, as PyTorch does in Python) or scalar
graph tensors (a placeholder or a variable: a learning-rate schedule). 16-bit variables compute in
float32; the state keeps the variable's dtype, as in PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch

from ..core.dtype import FLOAT_DTYPES, DType, float32
from ..core.errors import AttributeValueError, DTypeError, ShapeError
from ..ir.graph import GraphCore, Operation, Tensor
from .state import expect_variable

Scalar = float | Tensor  # a hyper-parameter: folded when a number, a graph op when a tensor


class Update(NamedTuple):
    """An optimizer update: the ``assign`` operations (for ``target_ops``) and the state variables by
    PyTorch's names (``"step"``, ``"exp_avg"``, ``"momentum_buffer"``, ...)."""

    ops: list[Operation]
    state: dict[str, Tensor]


def _number(what: str, value: object, low: float = 0.0, high: float = math.inf, *, closed_high: bool = True) -> Any:
    """A hyper-parameter: a scalar floating tensor as is, or a number checked against its range."""
    if isinstance(value, Tensor):
        if value.rank != 0 or value.dtype not in FLOAT_DTYPES:
            raise DTypeError(f"{what} must be a number or a scalar floating tensor, got {value.type}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise AttributeValueError(f"{what} must be a number or a scalar tensor, got {value!r}")
    ok = low <= value <= high if closed_high else low <= value < high
    if not ok:
        bracket = "]" if closed_high else ")"
        raise AttributeValueError(f"{what} must lie in [{low}, {high}{bracket}, got {value!r}")
    return float(value)


def _is_zero(v: Scalar) -> bool:
    return not isinstance(v, Tensor) and v == 0.0


def _lerp(g: Any, start: Tensor, end: Tensor, weight: Scalar) -> Tensor:
    """``torch.lerp``: ``start + w (end - start)`` for ``|w| < 0.5``, else ``end - (end - start)(1 - w)``."""
    diff = g.subtract(end, start)
    if not isinstance(weight, Tensor):
        if abs(weight) < 0.5:
            return g.add(start, g.multiply(diff, weight))
        return g.subtract(end, g.multiply(diff, 1.0 - weight))
    low = g.add(start, g.multiply(diff, weight))
    high = g.subtract(end, g.multiply(diff, g.subtract(1.0, weight)))
    return g.select(g.less(g.abs(weight), 0.5), low, high)


def _one_minus_power(g: Any, beta: Scalar, step: Tensor) -> Any:
    """``1 - beta ** step`` (Adam's bias correction) without cancellation for ``beta`` near 1, so float32
    keeps PyTorch's double-precision value: ``-expm1(x) = -2 tanh(x/2) / (1 - tanh(x/2))``, ``x = step log(beta)``."""
    if isinstance(beta, Tensor):
        half_log: Scalar = g.multiply(g.log(beta), 0.5)
    elif beta == 0.0:
        return 1.0
    else:
        half_log = 0.5 * math.log(beta)  # in double, as PyTorch computes the whole correction
    t = g.tanh(g.multiply(step, half_log))
    return g.divide(g.multiply(t, -2.0), g.subtract(1.0, t))


class _Step:
    """One variable's update being built: current values in the compute dtype, queued assigns."""

    def __init__(self, graph: Any, variable: Tensor, gradient: Any, what: str, keys: tuple[str, ...],
                 state: Mapping[str, Tensor] | None, name: str | None) -> None:
        expect_variable(variable, what)
        if variable.dtype not in FLOAT_DTYPES:
            raise DTypeError(f"{what}: the variable must be real floating, got {variable.type}")
        self.g, self.var, self.what = graph, variable, what
        self.ct: DType = float32 if variable.dtype.bits < 32 else variable.dtype  # compute dtype
        grad = graph._as_tensor(gradient, like=variable.dtype)
        if grad.dtype not in FLOAT_DTYPES:
            raise DTypeError(f"{what}: the gradient must be real floating, got {grad.type}")
        if grad.rank != variable.rank or any(a is not None and b is not None and a != b
                                             for a, b in zip(grad.shape, variable.shape, strict=True)):
            raise ShapeError(f"{what}: the gradient {grad.type} does not match the variable {variable.type}")
        self.grad = self.cast(grad)
        self.prefix = name or variable.name
        self.keys = keys
        self.state: dict[str, Tensor] = {}
        for key, v in (state or {}).items():
            if key not in keys:
                raise AttributeValueError(f"{what}: unknown state {key!r} (expects {', '.join(keys)})")
            expect_variable(v, f"{what}: state {key!r}")
            want = () if key == "step" else variable.shape
            if v.shape != want or v.dtype not in FLOAT_DTYPES:
                raise ShapeError(f"{what}: state {key!r} must be a floating variable of shape {want}, got {v.type}")
            self.state[key] = v
        self.assigns: list[tuple[Tensor, Tensor]] = []

    def cast(self, t: Tensor) -> Tensor:
        return t if t.dtype is self.ct else self.g.cast(t, self.ct)

    def hyper(self, value: Scalar) -> Scalar:
        """A hyper-parameter in the compute dtype (numbers stay numbers)."""
        return self.cast(value) if isinstance(value, Tensor) else value

    def buffer(self, key: str, init: float = 0.0) -> Tensor:
        """The state variable ``key``, created (filled with ``init``) on first use."""
        if key not in self.state:
            payload: torch.Tensor = self.var.op.payload  # type: ignore[assignment]
            shape = () if key == "step" else tuple(payload.shape)
            dtype = self.ct.torch_dtype if key == "step" else payload.dtype
            base = f"{self.prefix}.{key}"
            name = base if base not in self.g._names else self.g._fresh_name(base)
            self.state[key] = self.g.variable(torch.full(shape, init, dtype=dtype), name=name)
        return self.state[key]

    def current(self, key: str, init: float = 0.0) -> Tensor:
        """The state's value at this point of the run, in the compute dtype."""
        return self.cast(self.g.read(self.buffer(key, init)))

    def param(self) -> Tensor:
        return self.cast(self.g.read(self.var))

    def set(self, target: Tensor, value: Tensor) -> None:
        self.assigns.append((target, value))

    def step_count(self) -> Tensor:
        """The incremented step counter (``step += 1``), assigned back."""
        step = self.g.add(self.current("step"), 1.0)
        self.set(self.state["step"], step)
        return step

    def finish(self, new_param: Tensor) -> Update:
        """Assign the state (in creation order) and then the variable."""
        g, ops = self.g, []
        for target, value in [*self.assigns, (self.var, new_param)]:
            if value.dtype is not target.dtype:
                value = g.cast(value, target.dtype)
            ops.append(g.assign(target, value))
        return Update(ops, dict(self.state))


def _decay(g: Any, grad: Tensor, p: Tensor, weight_decay: Scalar, maximize: bool) -> Tensor:
    """``-grad`` when maximising, then L2 weight decay ``grad + weight_decay * p``."""
    if maximize:
        grad = g.negative(grad)
    if not _is_zero(weight_decay):
        grad = g.add(grad, g.multiply(p, weight_decay))
    return grad


# ---- hyper-parameter checks (shared with og.optim, which checks when an optimizer is made) ---------
_POS = (0.0, math.inf, True)
_UNIT = (0.0, 1.0, True)
_UNIT_OPEN = (0.0, 1.0, False)
_SPECS: dict[str, dict[str, tuple[float, float, bool]]] = {
    "sgd": {"learning_rate": _POS, "momentum": _POS, "weight_decay": _POS, "dampening": (-math.inf, math.inf, True)},
    "adam": {"learning_rate": _POS, "beta1": _UNIT_OPEN, "beta2": _UNIT_OPEN, "epsilon": _POS, "weight_decay": _POS},
    "rmsprop": {"learning_rate": _POS, "alpha": _POS, "epsilon": _POS, "weight_decay": _POS, "momentum": _POS},
    "adagrad": {"learning_rate": _POS, "lr_decay": _POS, "weight_decay": _POS, "initial_accumulator_value": _POS,
                "epsilon": _POS},
    "adadelta": {"learning_rate": _POS, "rho": _UNIT, "epsilon": _POS, "weight_decay": _POS},
}


def _checked(algo: str, what: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Hyper-parameters checked against their ranges (tensors: scalar and floating)."""
    out = dict(values)
    for key, (low, high, closed) in _SPECS[algo].items():
        if key in out:
            out[key] = _number(f"{what}: {key}", out[key], low, high, closed_high=closed)
    if algo == "sgd" and out.get("nesterov") and (_is_zero(out.get("momentum", 0.0))
                                                  or not _is_zero(out.get("dampening", 0.0))):
        raise AttributeValueError(f"{what}: nesterov needs a momentum > 0 and zero dampening")
    if algo == "adagrad" and isinstance(out.get("initial_accumulator_value"), Tensor):
        raise AttributeValueError(f"{what}: initial_accumulator_value must be a number")
    return out


def check_hyper_parameters(update: Any, values: Mapping[str, Any], what: str) -> None:
    """Check the hyper-parameters of one of the ``*_update`` functions (raises ``AttributeValueError``)."""
    _checked(_ALGO[update], what, values)


# ---- the updates, one per torch.optim algorithm ---------------------------------------------------
def sgd_update(graph: Any, variable: Tensor, gradient: Any, learning_rate: Scalar, momentum: Scalar = 0.0,
               nesterov: bool = False, weight_decay: Scalar = 0.0, dampening: Scalar = 0.0, maximize: bool = False,
               state: Mapping[str, Tensor] | None = None, name: str | None = None) -> Update:
    """``torch.optim.SGD``'s update (state: ``momentum_buffer``; ``step`` only with dampening)."""
    h = _checked("sgd", "apply_sgd", dict(learning_rate=learning_rate, momentum=momentum, weight_decay=weight_decay,
                                          dampening=dampening, nesterov=nesterov))
    s = _Step(graph, variable, gradient, "apply_sgd", ("momentum_buffer", "step"), state, name)
    g = graph
    lr, mom, wd, damp = (s.hyper(h[k]) for k in ("learning_rate", "momentum", "weight_decay", "dampening"))
    p = s.param()
    grad = _decay(g, s.grad, p, wd, maximize)
    if not _is_zero(mom):
        buf = s.current("momentum_buffer")
        scaled = grad if _is_zero(damp) else g.multiply(grad, g.subtract(1.0, damp) if isinstance(damp, Tensor)
                                                        else 1.0 - damp)
        new_buf = g.add(g.multiply(buf, mom), scaled)
        if not _is_zero(damp):  # PyTorch's first step takes the gradient itself (zero buffers cover dampening 0)
            new_buf = g.select(g.equal(s.step_count(), 1.0), grad, new_buf)
        s.set(s.state["momentum_buffer"], new_buf)
        grad = g.add(grad, g.multiply(new_buf, mom)) if nesterov else new_buf
    return s.finish(g.subtract(p, g.multiply(grad, lr)))


def adam_update(graph: Any, variable: Tensor, gradient: Any, learning_rate: Scalar = 1e-3, beta1: Scalar = 0.9,
                beta2: Scalar = 0.999, epsilon: Scalar = 1e-8, weight_decay: Scalar = 0.0, amsgrad: bool = False,
                decoupled_weight_decay: bool = False, maximize: bool = False,
                state: Mapping[str, Tensor] | None = None, name: str | None = None) -> Update:
    """``torch.optim.Adam``'s update (``AdamW``'s with ``decoupled_weight_decay``); state ``step``,
    ``exp_avg``, ``exp_avg_sq`` (and ``max_exp_avg_sq`` with ``amsgrad``)."""
    what = "apply_adamw" if decoupled_weight_decay else "apply_adam"
    h = _checked("adam", what, dict(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon,
                                    weight_decay=weight_decay))
    s = _Step(graph, variable, gradient, what, ("step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"), state, name)
    g = graph
    lr, b1, b2, eps, wd = (s.hyper(h[k]) for k in ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay"))
    p = s.param()
    grad = g.negative(s.grad) if maximize else s.grad
    step = s.step_count()
    if not _is_zero(wd):
        if decoupled_weight_decay:
            p = g.multiply(p, 1.0 - lr * wd)
        else:
            grad = g.add(grad, g.multiply(p, wd))
    m = _lerp(g, s.current("exp_avg"), grad, 1.0 - b1)
    v = g.add(g.multiply(s.current("exp_avg_sq"), b2), g.multiply(g.multiply(grad, grad), 1.0 - b2))
    s.set(s.state["exp_avg"], m)
    s.set(s.state["exp_avg_sq"], v)
    step_size = g.divide(lr, _one_minus_power(g, b1, step))
    bc2_sqrt = g.sqrt(_one_minus_power(g, b2, step))
    if amsgrad:
        v = g.maximum_with_nan_propagation(s.current("max_exp_avg_sq"), v)
        s.set(s.state["max_exp_avg_sq"], v)
    denom = g.add(g.divide(g.sqrt(v), bc2_sqrt), eps)
    return s.finish(g.subtract(p, g.multiply(g.divide(m, denom), step_size)))


def rmsprop_update(graph: Any, variable: Tensor, gradient: Any, learning_rate: Scalar = 1e-2, alpha: Scalar = 0.99,
                   epsilon: Scalar = 1e-8, weight_decay: Scalar = 0.0, momentum: Scalar = 0.0, centered: bool = False,
                   maximize: bool = False, state: Mapping[str, Tensor] | None = None,
                   name: str | None = None) -> Update:
    """``torch.optim.RMSprop``'s update; state ``square_avg`` (``grad_avg`` when centred,
    ``momentum_buffer`` with momentum)."""
    h = _checked("rmsprop", "apply_rmsprop", dict(learning_rate=learning_rate, alpha=alpha, epsilon=epsilon,
                                                  weight_decay=weight_decay, momentum=momentum))
    s = _Step(graph, variable, gradient, "apply_rmsprop", ("square_avg", "grad_avg", "momentum_buffer"), state, name)
    g = graph
    lr, alpha, eps, wd, mom = (s.hyper(h[k]) for k in ("learning_rate", "alpha", "epsilon", "weight_decay",
                                                        "momentum"))
    p = s.param()
    grad = _decay(g, s.grad, p, wd, maximize)
    sq = g.add(g.multiply(s.current("square_avg"), alpha), g.multiply(g.multiply(grad, grad), 1.0 - alpha))
    s.set(s.state["square_avg"], sq)
    if centered:
        ga = _lerp(g, s.current("grad_avg"), grad, 1.0 - alpha)
        s.set(s.state["grad_avg"], ga)
        avg = g.sqrt(g.subtract(sq, g.multiply(ga, ga)))
    else:
        avg = g.sqrt(sq)
    avg = g.add(avg, eps)
    if _is_zero(mom):
        return s.finish(g.subtract(p, g.multiply(g.divide(grad, avg), lr)))
    buf = g.add(g.multiply(s.current("momentum_buffer"), mom), g.divide(grad, avg))
    s.set(s.state["momentum_buffer"], buf)
    return s.finish(g.subtract(p, g.multiply(buf, lr)))


def adagrad_update(graph: Any, variable: Tensor, gradient: Any, learning_rate: Scalar = 1e-2,
                   lr_decay: Scalar = 0.0, weight_decay: Scalar = 0.0, initial_accumulator_value: float = 0.0,
                   epsilon: Scalar = 1e-10, maximize: bool = False, state: Mapping[str, Tensor] | None = None,
                   name: str | None = None) -> Update:
    """``torch.optim.Adagrad``'s update; state ``sum`` (and ``step`` with ``lr_decay``)."""
    h = _checked("adagrad", "apply_adagrad", dict(learning_rate=learning_rate, lr_decay=lr_decay,
                                                  weight_decay=weight_decay, epsilon=epsilon,
                                                  initial_accumulator_value=initial_accumulator_value))
    s = _Step(graph, variable, gradient, "apply_adagrad", ("sum", "step"), state, name)
    g = graph
    lr, decay, wd, eps = (s.hyper(h[k]) for k in ("learning_rate", "lr_decay", "weight_decay", "epsilon"))
    init = h["initial_accumulator_value"]
    p = s.param()
    grad = _decay(g, s.grad, p, wd, maximize)
    clr: Scalar = lr
    if not _is_zero(decay):
        clr = g.divide(lr, g.add(g.multiply(g.subtract(s.step_count(), 1.0), decay), 1.0))
    total = g.add(s.current("sum", init), g.multiply(grad, grad))
    s.set(s.state["sum"], total)
    std = g.add(g.sqrt(total), eps)
    return s.finish(g.subtract(p, g.multiply(g.divide(grad, std), clr)))


def adadelta_update(graph: Any, variable: Tensor, gradient: Any, learning_rate: Scalar = 1.0, rho: Scalar = 0.9,
                    epsilon: Scalar = 1e-6, weight_decay: Scalar = 0.0, maximize: bool = False,
                    state: Mapping[str, Tensor] | None = None, name: str | None = None) -> Update:
    """``torch.optim.Adadelta``'s update; state ``square_avg`` and ``acc_delta``."""
    h = _checked("adadelta", "apply_adadelta", dict(learning_rate=learning_rate, rho=rho, epsilon=epsilon,
                                                    weight_decay=weight_decay))
    s = _Step(graph, variable, gradient, "apply_adadelta", ("square_avg", "acc_delta"), state, name)
    g = graph
    lr, rho, eps, wd = (s.hyper(h[k]) for k in ("learning_rate", "rho", "epsilon", "weight_decay"))
    p = s.param()
    grad = _decay(g, s.grad, p, wd, maximize)
    sq = g.add(g.multiply(s.current("square_avg"), rho), g.multiply(g.multiply(grad, grad), 1.0 - rho))
    std = g.sqrt(g.add(sq, eps))
    acc = s.current("acc_delta")
    delta = g.multiply(g.divide(g.sqrt(g.add(acc, eps)), std), grad)
    s.set(s.state["square_avg"], sq)
    s.set(s.state["acc_delta"], g.add(g.multiply(acc, rho), g.multiply(g.multiply(delta, delta), 1.0 - rho)))
    return s.finish(g.subtract(p, g.multiply(delta, lr)))


_ALGO: dict[Any, str] = {sgd_update: "sgd", adam_update: "adam", rmsprop_update: "rmsprop",
                         adagrad_update: "adagrad", adadelta_update: "adadelta"}


# ---- builder methods ----------------------------------------------------------------------------
class TrainingBuilders(GraphCore):
    """Graph methods for optimizer updates: each returns the ``assign`` operations to run through ``target_ops``."""

    def stochastic_gradient_descent(self, learning_rate: Any, values: Tensor, gradient: Any, *,
                                    name: str | None = None) -> Tensor:
        """``values - learning_rate * gradient`` (MPSGraph's ``stochasticGradientDescent``; no assign)."""
        g: Any = self
        v = self._as_tensor(values)
        return g.subtract(v, g.multiply(self._as_tensor(gradient, like=v.dtype), learning_rate), name=name)

    def apply_stochastic_gradient_descent(self, learning_rate: Any, variable: Tensor, gradient: Any, *,
                                          name: str | None = None) -> Operation:
        """Assign ``variable - learning_rate * gradient`` to ``variable`` (MPSGraph's
        ``applyStochasticGradientDescent``)."""
        return sgd_update(self, variable, gradient, learning_rate, name=name).ops[0]

    def adam(self, learning_rate: Any, beta1: Any, beta2: Any, epsilon: Any, beta1_power: Any, beta2_power: Any,
             values: Tensor, momentum: Tensor, velocity: Tensor, gradient: Any, maximum_velocity: Tensor | None = None,
             *, name: str | None = None) -> list[Tensor]:
        """One Adam step on tensors, without assigning (MPSGraph's ``adam``): ``beta*_power`` are
        ``beta ** t``; returns ``[values, momentum, velocity]`` (and the new ``maximum_velocity`` when
        one is given) with ``lr_t = learning_rate * sqrt(1 - beta2_power) / (1 - beta1_power)``,
        ``m = beta1 m + (1 - beta1) g``, ``v = beta2 v + (1 - beta2) g ** 2``,
        ``values - lr_t * m / (sqrt(max(v)) + epsilon)``."""
        g: Any = self
        x = self._as_tensor(values)
        grad = self._as_tensor(gradient, like=x.dtype)
        lr_t = g.divide(g.multiply(learning_rate, g.sqrt(g.subtract(1.0, self._as_tensor(beta2_power, like=x.dtype)))),
                        g.subtract(1.0, self._as_tensor(beta1_power, like=x.dtype)))
        m = g.add(g.multiply(momentum, beta1), g.multiply(grad, g.subtract(1.0, self._as_tensor(beta1, like=x.dtype))))
        v = g.add(g.multiply(velocity, beta2),
                  g.multiply(g.multiply(grad, grad), g.subtract(1.0, self._as_tensor(beta2, like=x.dtype))))
        vmax = v if maximum_velocity is None else g.maximum_with_nan_propagation(maximum_velocity, v)
        new = g.subtract(x, g.divide(g.multiply(m, lr_t), g.add(g.sqrt(vmax), epsilon)), name=name)
        return [new, m, v] if maximum_velocity is None else [new, m, v, vmax]

    def apply_sgd(self, variable: Tensor, gradient: Any, learning_rate: Scalar, momentum: Scalar = 0.0,
                  nesterov: bool = False, weight_decay: Scalar = 0.0, momentum_variable: Tensor | None = None, *,
                  dampening: Scalar = 0.0, maximize: bool = False, state: Mapping[str, Tensor] | None = None,
                  name: str | None = None) -> list[Operation]:
        """Update ``variable`` in place as ``torch.optim.SGD`` does (momentum, Nesterov, L2 weight decay,
        dampening); the momentum buffer is ``momentum_variable`` or a variable created here.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); w = g.variable(torch.tensor([1.0, 2.0])); grad = g.placeholder((2,))
        >>> ops = g.apply_sgd(w, grad, 0.5, momentum=0.5)
        >>> for _ in range(2): _ = g.run({grad: [1.0, 1.0]}, target_ops=ops)
        >>> g.variable_value(w).tolist()
        [-0.25, 0.75]
        """
        st = dict(state or {})
        if momentum_variable is not None:
            st["momentum_buffer"] = momentum_variable
        return sgd_update(self, variable, gradient, learning_rate, momentum, nesterov, weight_decay, dampening,
                          maximize, st, name).ops

    def apply_adam(self, variable: Tensor, gradient: Any, learning_rate: Scalar = 1e-3, beta1: Scalar = 0.9,
                   beta2: Scalar = 0.999, epsilon: Scalar = 1e-8, weight_decay: Scalar = 0.0, amsgrad: bool = False, *,
                   maximize: bool = False, state: Mapping[str, Tensor] | None = None,
                   name: str | None = None) -> list[Operation]:
        """Update ``variable`` in place as ``torch.optim.Adam`` does (bias-corrected moments, L2 weight decay
        added to the gradient, AMSGrad); the moments and the step count are variables created here."""
        return adam_update(self, variable, gradient, learning_rate, beta1, beta2, epsilon, weight_decay, amsgrad,
                           False, maximize, state, name).ops

    def apply_adamw(self, variable: Tensor, gradient: Any, learning_rate: Scalar = 1e-3, beta1: Scalar = 0.9,
                    beta2: Scalar = 0.999, epsilon: Scalar = 1e-8, weight_decay: Scalar = 1e-2, amsgrad: bool = False,
                    *, maximize: bool = False, state: Mapping[str, Tensor] | None = None,
                    name: str | None = None) -> list[Operation]:
        """Update ``variable`` in place as ``torch.optim.AdamW`` does (Adam with decoupled weight decay
        ``p *= 1 - lr * weight_decay``)."""
        return adam_update(self, variable, gradient, learning_rate, beta1, beta2, epsilon, weight_decay, amsgrad,
                           True, maximize, state, name).ops

    def apply_rmsprop(self, variable: Tensor, gradient: Any, learning_rate: Scalar = 1e-2, alpha: Scalar = 0.99,
                      epsilon: Scalar = 1e-8, weight_decay: Scalar = 0.0, momentum: Scalar = 0.0,
                      centered: bool = False, *, maximize: bool = False, state: Mapping[str, Tensor] | None = None,
                      name: str | None = None) -> list[Operation]:
        """Update ``variable`` in place as ``torch.optim.RMSprop`` does (centred, momentum, weight decay)."""
        return rmsprop_update(self, variable, gradient, learning_rate, alpha, epsilon, weight_decay, momentum,
                              centered, maximize, state, name).ops

    def apply_adagrad(self, variable: Tensor, gradient: Any, learning_rate: Scalar = 1e-2, lr_decay: Scalar = 0.0,
                      weight_decay: Scalar = 0.0, initial_accumulator_value: float = 0.0, epsilon: Scalar = 1e-10, *,
                      maximize: bool = False, state: Mapping[str, Tensor] | None = None,
                      name: str | None = None) -> list[Operation]:
        """Update ``variable`` in place as ``torch.optim.Adagrad`` does (learning-rate decay, weight decay)."""
        return adagrad_update(self, variable, gradient, learning_rate, lr_decay, weight_decay,
                              initial_accumulator_value, epsilon, maximize, state, name).ops

    def apply_adadelta(self, variable: Tensor, gradient: Any, learning_rate: Scalar = 1.0, rho: Scalar = 0.9,
                       epsilon: Scalar = 1e-6, weight_decay: Scalar = 0.0, *, maximize: bool = False,
                       state: Mapping[str, Tensor] | None = None, name: str | None = None) -> list[Operation]:
        """Update ``variable`` in place as ``torch.optim.Adadelta`` does."""
        return adadelta_update(self, variable, gradient, learning_rate, rho, epsilon, weight_decay, maximize,
                               state, name).ops


__all__ = [
    "TrainingBuilders", "Update", "adadelta_update", "adagrad_update", "adam_update", "check_hyper_parameters",
    "rmsprop_update", "sgd_update",
]
