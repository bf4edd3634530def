"""Optimizer updates (MPSGraph's ``stochasticGradientDescent``, ``applyStochasticGradientDescent``, ``adam``),
composed from graph ops and ``assign``.

Each ``apply_*`` builder reads the variable and its optimizer state (momentum buffers, moments, a
step counter: graph variables the builder creates), computes the update with ordinary graph ops, and
writes the results back with ``assign`` ops, which it returns for ``target_ops``. ``og.optim``'s SGD,
Adam and AdamW instead update all their variables with one multi-tensor op (``sgd_multi_tensor``,
``adam_multi_tensor``: a few ``torch._foreach_*`` kernels instead of several ops per variable). The formulas are
``torch.optim``'s single-tensor updates, operation for operation, so trajectories match PyTorch's.

Hyper-parameters may be Python numbers (folded at build time, as PyTorch does in Python) or scalar
graph tensors (a placeholder or a variable: a learning-rate schedule). 16-bit variables compute in
float32; the state keeps the variable's dtype, as in PyTorch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import torch

from ..core.dtype import FLOAT_DTYPES, DType, float32
from ..core.errors import AttributeValueError, DTypeError, ShapeError
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from .norm import compute_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs
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
        self.grad_in = grad  # cast on first use: the multi-tensor ops cast inside their kernels
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

    @functools.cached_property
    def grad(self) -> Tensor:
        return self.cast(self.grad_in)

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

# ---- multi-tensor updates: one op per optimizer step over all its variables ------------------------
# Inputs: the lists (params, grads, state...; ``count`` each), the step counters (0, 1 shared by the
# group, or ``count``), then the hyper-parameters that are tensors (attribute None) in declaration order.
# Outputs: new params, new state lists, new steps. Lowered with ``torch._foreach_*`` (out of place on
# the inputs, in place only on fresh temporaries), in the compute dtype (float32 for 16-bit variables).
_SGD_HYPER = ("learning_rate", "momentum", "dampening", "weight_decay")
_ADAM_HYPER = ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay")


@attrs
class SgdMultiAttrs:
    count: int
    learning_rate: float | None  # None: a scalar tensor input
    momentum: float | None = 0.0
    dampening: float | None = 0.0
    weight_decay: float | None = 0.0
    nesterov: bool = False
    maximize: bool = False
    steps: int = 0


@attrs
class AdamMultiAttrs:
    count: int
    learning_rate: float | None
    beta1: float | None = 0.9
    beta2: float | None = 0.999
    epsilon: float | None = 1e-8
    weight_decay: float | None = 0.0
    amsgrad: bool = False
    decoupled_weight_decay: bool = False
    maximize: bool = False
    steps: int = 1


def _sgd_lists(a: SgdMultiAttrs) -> int:
    return 2 if a.momentum == 0.0 else 3  # params, grads (, momentum buffers)


def _adam_lists(a: AdamMultiAttrs) -> int:
    return 5 if a.amsgrad else 4  # params, grads, exp_avg, exp_avg_sq (, max_exp_avg_sq)


def _multi_rule(a: Any, ins: tuple[TensorType, ...], lists: int, hyper: tuple[str, ...]) -> tuple[TensorType, ...]:
    n, k = a.count, a.steps
    tensors = [h for h in hyper if getattr(a, h) is None]
    if n < 1 or k not in (0, 1, n):
        raise AttributeValueError(f"needs count >= 1 and steps 0, 1 or count, got count {n}, steps {k}")
    for h in hyper:
        v = getattr(a, h)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v)):
            raise AttributeValueError(f"{h} must be a number or None (a tensor input), got {v!r}")
    want = lists * n + k + len(tensors)
    if len(ins) != want:
        raise ShapeError(f"expects {want} inputs ({lists} lists of {n}, {k} steps, {len(tensors)} "
                         f"hyper-parameters), got {len(ins)}")
    params = ins[:n]
    for j in range(lists):
        for i in range(n):
            t, p = ins[j * n + i], params[i]
            if t.dtype not in FLOAT_DTYPES:
                raise DTypeError(f"input {j * n + i} must be real floating, got {t}")
            if t.rank != p.rank or any(x is not None and y is not None and x != y
                                       for x, y in zip(t.shape, p.shape, strict=True)):
                raise ShapeError(f"input {j * n + i} {t} does not match parameter {i} {p}")
    for i, t in enumerate(ins[lists * n:], lists * n):
        if t.rank != 0 or t.dtype not in FLOAT_DTYPES:
            raise DTypeError(f"input {i} (a step or a hyper-parameter) must be a scalar floating tensor, got {t}")
    return (*params, *ins[2 * n:lists * n], *ins[lists * n:lists * n + k])


class _Lists:
    """The inputs of a multi-tensor op, split; ``group`` yields them per compute dtype, cast where needed
    (decided at compile time: a no-op ``.to`` per tensor still costs a call)."""

    def __init__(self, ctx: LowerContext, lists: int, hyper: tuple[str, ...]) -> None:
        a, n = ctx.attrs, ctx.attrs.count
        self.n, self.lists, self.k = n, lists, a.steps
        self.numbers = {h: getattr(a, h) for h in hyper}
        self.tensors = [h for h in hyper if self.numbers[h] is None]
        by: dict[torch.dtype, list[int]] = {}
        for i, t in enumerate(ctx.in_types[:n]):
            by.setdefault(compute_dtype(t.dtype), []).append(i)
        self.groups = [(ct, idx, [any(ctx.in_types[j * n + i].dtype.torch_dtype != ct for i in idx)
                                  for j in range(lists)]) for ct, idx in by.items()]
        self.out_dtypes = [t.dtype.torch_dtype for t in ctx.out_types]
        cast = [i for i, t in enumerate(ctx.out_types) if t.dtype.torch_dtype not in by or len(by) > 1]
        self.out_cast = cast  # outputs whose dtype may differ from their compute dtype
        self.cpu = ctx.device.type == "cpu"

    def split(self, xs: tuple[torch.Tensor, ...]) -> tuple[list[torch.Tensor], dict[str, Any]]:
        base = self.lists * self.n + self.k
        hyper = dict(self.numbers)
        hyper.update(zip(self.tensors, xs[base:], strict=True))
        steps = list(xs[self.lists * self.n:base])
        return [s + 1.0 for s in steps], hyper  # the incremented counters: fresh tensors

    def group(self, xs: tuple[torch.Tensor, ...], hyper: dict[str, Any]) -> Any:
        n = self.n
        for ct, idx, casts in self.groups:
            whole = len(idx) == n
            lists = [[xs[j * n + i].to(ct) for i in idx] if cast else list(xs[j * n:(j + 1) * n]) if whole
                     else [xs[j * n + i] for i in idx] for j, cast in enumerate(casts)]
            yield idx, lists, {h: v.to(ct) if isinstance(v, torch.Tensor) else v for h, v in hyper.items()}

    def scalar(self, v: Any, ct: torch.dtype) -> Any:
        """A multiplier: on the CPU a 0-d tensor, since a Python scalar is wrapped again for every tensor."""
        return torch.tensor(v, dtype=ct) if self.cpu and not isinstance(v, torch.Tensor) else v

    def finish(self, outs: list[Any]) -> Any:
        for i in self.out_cast:
            outs[i] = outs[i].to(self.out_dtypes[i])
        return outs[0] if len(outs) == 1 else tuple(outs)


def _nonzero(v: Any) -> bool:
    return isinstance(v, torch.Tensor) or v != 0.0


def _add_scaled(xs: list[torch.Tensor], ys: list[torch.Tensor], alpha: Any) -> list[torch.Tensor]:
    """``xs + alpha * ys`` (fresh tensors); ``alpha`` a number or a 0-d tensor."""
    if isinstance(alpha, torch.Tensor):
        return list(torch._foreach_add(xs, torch._foreach_mul(ys, alpha)))
    return list(torch._foreach_add(xs, ys, alpha=alpha))


def _sgd_multi_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: SgdMultiAttrs = ctx.attrs
    lay = _Lists(ctx, _sgd_lists(a), _SGD_HYPER)
    n, has_buf = a.count, lay.lists == 3

    def run(*xs: torch.Tensor) -> Any:
        new_steps, h = lay.split(xs)
        new_p: list[Any] = [None] * n
        new_b: list[Any] = [None] * n
        for idx, (ps, gs, *rest), c in lay.group(xs, h):
            lr, mom, damp, wd = (c[k] for k in _SGD_HYPER)
            if a.maximize:
                gs = list(torch._foreach_neg(gs))
            if _nonzero(wd):
                gs = _add_scaled(gs, ps, wd)
            d = gs
            if has_buf:
                if not _nonzero(damp):  # buf * momentum + grad, as grad + momentum * buf: one kernel
                    nb = _add_scaled(gs, rest[0], mom)
                else:
                    nb = list(torch._foreach_mul(rest[0], lay.scalar(mom, gs[0].dtype)))
                    if isinstance(damp, torch.Tensor):
                        torch._foreach_add_(nb, torch._foreach_mul(gs, 1.0 - damp))
                    else:
                        torch._foreach_add_(nb, gs, alpha=1.0 - damp)
                if new_steps:  # PyTorch's first step takes the gradient itself
                    st = [new_steps[0 if len(new_steps) == 1 else i] for i in idx]
                    nb = [torch.where(s == 1.0, gr, b) for s, gr, b in zip(st, gs, nb, strict=True)]
                d = _add_scaled(gs, nb, mom) if a.nesterov else nb
                for i, b in zip(idx, nb, strict=True):
                    new_b[i] = b
            for i, p in zip(idx, _add_scaled(ps, d, lr.neg() if isinstance(lr, torch.Tensor) else -lr), strict=True):
                new_p[i] = p
        return lay.finish([*new_p, *(new_b if has_buf else []), *new_steps])

    return run


def _bias_correction(beta: Any, step: torch.Tensor) -> Any:
    """``1 - beta ** step`` as ``-expm1(step log beta)``: no cancellation for ``beta`` near 1."""
    if not isinstance(beta, torch.Tensor):
        return 1.0 if beta == 0.0 else -torch.expm1(step * math.log(beta))
    return -torch.expm1(step * torch.log(beta))


def _adam_multi_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: AdamMultiAttrs = ctx.attrs
    lay = _Lists(ctx, _adam_lists(a), _ADAM_HYPER)
    n = a.count

    def run(*xs: torch.Tensor) -> Any:
        new_steps, h = lay.split(xs)
        outs: list[list[Any]] = [[None] * n for _ in range(lay.lists - 1)]
        for idx, (ps, gs, ms, vs, *mx), c in lay.group(xs, h):
            lr, b1, b2, eps, wd = (c[k] for k in _ADAM_HYPER)
            ct = ps[0].dtype
            if a.maximize:
                gs = list(torch._foreach_neg(gs))
            if _nonzero(wd):
                if a.decoupled_weight_decay:
                    ps = list(torch._foreach_mul(ps, lay.scalar(1.0 - lr * wd, ct)))
                else:
                    gs = _add_scaled(gs, ps, wd)
            if isinstance(b1, torch.Tensor):
                m = [torch.lerp(x, y, 1.0 - b1) for x, y in zip(ms, gs, strict=True)]
            else:
                m = list(torch._foreach_lerp(ms, gs, 1.0 - b1))
            v = list(torch._foreach_mul(vs, lay.scalar(b2, ct)))
            if isinstance(b2, torch.Tensor):
                torch._foreach_addcmul_(v, torch._foreach_mul(gs, 1.0 - b2), gs)
            else:
                torch._foreach_addcmul_(v, gs, gs, 1.0 - b2)
            top = list(torch._foreach_maximum(mx[0], v)) if a.amsgrad else v
            st = [s.to(ct) for s in (new_steps if len(new_steps) == 1 else [new_steps[i] for i in idx])]
            sizes = [lr / _bias_correction(b1, s) for s in st]
            roots = [torch.sqrt(torch.as_tensor(_bias_correction(b2, s), dtype=ct)) for s in st]
            denom = list(torch._foreach_sqrt(top))
            if len(st) == 1:  # one step for the group: 0-d tensor scalars, the fast multi-tensor path
                torch._foreach_div_(denom, roots[0])
            else:
                torch._foreach_div_(denom, roots)
            torch._foreach_add_(denom, eps)
            upd = list(torch._foreach_div(m, denom))
            if len(st) == 1:
                torch._foreach_mul_(upd, lay.scalar(sizes[0], ct))
            else:
                torch._foreach_mul_(upd, [torch.as_tensor(z, dtype=ct) for z in sizes])
            for j, vals in enumerate([torch._foreach_sub(ps, upd), m, v, *([top] if a.amsgrad else [])]):
                for i, x in zip(idx, vals, strict=True):
                    outs[j][i] = x
        return lay.finish([*(x for o in outs for x in o), *new_steps])

    return run


SGD_MULTI_TENSOR = OpDef("sgd_multi_tensor", infer=lambda a, ins: _multi_rule(a, ins, _sgd_lists(a), _SGD_HYPER),
                         lower=_sgd_multi_lower, attrs=SgdMultiAttrs, fusion=FusionKind.OPAQUE, differentiable=False,
                         doc="torch.optim.SGD's step over lists of tensors (multi-tensor kernels)")
ADAM_MULTI_TENSOR = OpDef("adam_multi_tensor",
                          infer=lambda a, ins: _multi_rule(a, ins, _adam_lists(a), _ADAM_HYPER),
                          lower=_adam_multi_lower, attrs=AdamMultiAttrs, fusion=FusionKind.OPAQUE,
                          differentiable=False, doc="torch.optim.Adam's (AdamW's) step over lists of tensors")


def _multi_op(graph: Any, op: OpDef, cls: type, what: str, algo: str, h: dict[str, Any], lists: Sequence[Sequence[Any]],
              steps: Sequence[Tensor], flags: dict[str, bool], name: str | None) -> tuple[Tensor, ...]:
    """Apply a multi-tensor op: ``h`` the hyper-parameters (numbers become attributes, tensors inputs)."""
    hyper = _SGD_HYPER if op is SGD_MULTI_TENSOR else _ADAM_HYPER
    h = {k: v for k, v in _checked(algo, what, h).items() if k in hyper}
    n = len(lists[0])
    if n == 0 or any(len(x) != n for x in lists):
        raise ShapeError(f"{what}: expects non-empty lists of one length, got lengths {[len(x) for x in lists]}")
    params = [graph._as_tensor(p) for p in lists[0]]
    ins = [*params, *(graph._as_tensor(x, like=p.dtype) for xs in lists[1:] for x, p in zip(xs, params, strict=True))]
    numbers = {k: None if isinstance(h[k], Tensor) else h[k] for k in hyper}
    ins += [*steps, *(h[k] for k in hyper if isinstance(h[k], Tensor))]
    return graph._apply_multi(op, ins, cls(count=n, steps=len(steps), **numbers, **flags), name)


def _multi_updates(ss: list[_Step], keys: Sequence[str], counted: bool,
                   build: Callable[[list[list[Tensor]], list[Tensor]], tuple[Tensor, ...]]) -> list[Update]:
    """Read the variables and their state, apply one multi-tensor op per compute dtype (usually one for
    all), assign the results back; ``counted``: the group shares one step counter unless given others."""
    g = ss[0].g
    by_ct: dict[DType, list[int]] = {}
    for i, s in enumerate(ss):
        by_ct.setdefault(s.ct, []).append(i)
    ops: list[list[Operation]] = [[] for _ in ss]
    for idx in by_ct.values():
        grp = [ss[i] for i in idx]
        step_vars: list[Tensor] = []
        if counted:
            if all("step" not in s.state for s in grp):
                shared = grp[0].buffer("step")
                for s in grp:
                    s.state["step"] = shared
            step_vars = [s.buffer("step") for s in grp]
            if all(v is step_vars[0] for v in step_vars):
                step_vars = step_vars[:1]
        lists = [[g.read(s.var) for s in grp], [s.grad_in for s in grp],
                 *([g.read(s.buffer(k)) for s in grp] for k in keys)]
        outs = build(lists, [g.read(v) for v in step_vars])
        m = len(grp)
        for j, v in enumerate(step_vars):
            ops[idx[j]].append(g.assign(v, outs[(1 + len(keys)) * m + j]))
        for i, s in enumerate(grp):
            for j, k in enumerate(keys):
                ops[idx[i]].append(g.assign(s.state[k], outs[(1 + j) * m + i]))
            ops[idx[i]].append(g.assign(s.var, outs[i]))
    return [Update(o, dict(s.state)) for o, s in zip(ops, ss, strict=True)]


def sgd_multi_update(graph: Any, variables: Sequence[Tensor], gradients: Sequence[Any], learning_rate: Scalar,
                     momentum: Scalar = 0.0, nesterov: bool = False, weight_decay: Scalar = 0.0,
                     dampening: Scalar = 0.0, maximize: bool = False,
                     states: Sequence[Mapping[str, Tensor] | None] | None = None,
                     name: str | None = None) -> list[Update]:
    """``sgd_update`` for many variables at once: one ``sgd_multi_tensor`` op (per compute dtype)."""
    h = _checked("sgd", "SGD", dict(learning_rate=learning_rate, momentum=momentum, weight_decay=weight_decay,
                                    dampening=dampening, nesterov=nesterov))
    ss = [_Step(graph, v, d, "SGD", ("momentum_buffer", "step"), st, None)
          for v, d, st in zip(variables, gradients, states or [None] * len(variables), strict=True)]
    has_buf = not _is_zero(h["momentum"])
    counted = has_buf and not _is_zero(h["dampening"])
    return _multi_updates(ss, ("momentum_buffer",) if has_buf else (), counted, lambda lists, steps: _multi_op(
        graph, SGD_MULTI_TENSOR, SgdMultiAttrs, "SGD", "sgd", h, lists, steps,
        dict(nesterov=nesterov, maximize=maximize), name))


def adam_multi_update(graph: Any, variables: Sequence[Tensor], gradients: Sequence[Any], learning_rate: Scalar = 1e-3,
                      beta1: Scalar = 0.9, beta2: Scalar = 0.999, epsilon: Scalar = 1e-8, weight_decay: Scalar = 0.0,
                      amsgrad: bool = False, decoupled_weight_decay: bool = False, maximize: bool = False,
                      states: Sequence[Mapping[str, Tensor] | None] | None = None,
                      name: str | None = None) -> list[Update]:
    """``adam_update`` for many variables at once: one ``adam_multi_tensor`` op (per compute dtype)."""
    what = "AdamW" if decoupled_weight_decay else "Adam"
    h = dict(learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon, weight_decay=weight_decay)
    keys = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if amsgrad else ("exp_avg", "exp_avg_sq")
    ss = [_Step(graph, v, d, what, ("step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"), st, None)
          for v, d, st in zip(variables, gradients, states or [None] * len(variables), strict=True)]
    return _multi_updates(ss, keys, True, lambda lists, steps: _multi_op(
        graph, ADAM_MULTI_TENSOR, AdamMultiAttrs, what, "adam", h, lists, steps,
        dict(amsgrad=amsgrad, decoupled_weight_decay=decoupled_weight_decay, maximize=maximize), name))



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

    def sgd_multi_tensor(self, params: Sequence[Tensor], gradients: Sequence[Any],
                         momentum_buffers: Sequence[Tensor] = (), learning_rate: Scalar = 1e-3,
                         momentum: Scalar = 0.0, dampening: Scalar = 0.0, weight_decay: Scalar = 0.0,
                         nesterov: bool = False, maximize: bool = False, steps: Sequence[Tensor] = (), *,
                         name: str | None = None) -> list[Tensor]:
        """``torch.optim.SGD``'s step on lists of tensors in one op, without assigning: returns the new
        params, then the new momentum buffers (given with momentum), then the incremented ``steps`` (one,
        or one per param; needed with dampening, for the first step).

        >>> import opgraph as og
        >>> g = og.Graph(); p = g.constant([1.0, 2.0]); d = g.constant([1.0, -1.0])
        >>> g.run(targets=g.sgd_multi_tensor([p], [d], learning_rate=0.5))[0].tolist()
        [0.5, 2.5]
        """
        if _is_zero(momentum) == bool(momentum_buffers):
            raise AttributeValueError("sgd_multi_tensor: give momentum_buffers exactly when momentum is not 0")
        if not _is_zero(momentum) and not _is_zero(dampening) and not steps:
            raise AttributeValueError("sgd_multi_tensor: dampening needs steps (to find the first step)")
        lists = [params, gradients, *([momentum_buffers] if momentum_buffers else [])]
        return list(_multi_op(self, SGD_MULTI_TENSOR, SgdMultiAttrs, "sgd_multi_tensor", "sgd", dict(
            learning_rate=learning_rate, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
            nesterov=nesterov), lists, steps, dict(nesterov=nesterov, maximize=maximize), name))

    def adam_multi_tensor(self, params: Sequence[Tensor], gradients: Sequence[Any], exp_avgs: Sequence[Tensor],
                          exp_avg_sqs: Sequence[Tensor], steps: Sequence[Tensor], learning_rate: Scalar = 1e-3,
                          beta1: Scalar = 0.9, beta2: Scalar = 0.999, epsilon: Scalar = 1e-8,
                          weight_decay: Scalar = 0.0, max_exp_avg_sqs: Sequence[Tensor] = (),
                          decoupled_weight_decay: bool = False, maximize: bool = False, *,
                          name: str | None = None) -> list[Tensor]:
        """``torch.optim.Adam``'s (``AdamW``'s with ``decoupled_weight_decay``) step on lists of tensors in
        one op, without assigning; AMSGrad when ``max_exp_avg_sqs`` are given. Returns the new params,
        moments (and maxima), then the incremented ``steps`` (one, or one per param)."""
        lists = [params, gradients, exp_avgs, exp_avg_sqs, *([max_exp_avg_sqs] if max_exp_avg_sqs else [])]
        return list(_multi_op(self, ADAM_MULTI_TENSOR, AdamMultiAttrs, "adam_multi_tensor", "adam", dict(
            learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon, weight_decay=weight_decay),
            lists, steps, dict(amsgrad=bool(max_exp_avg_sqs), decoupled_weight_decay=decoupled_weight_decay,
                               maximize=maximize), name))

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
    "ADAM_MULTI_TENSOR", "SGD_MULTI_TENSOR", "TrainingBuilders", "Update", "adadelta_update", "adagrad_update",
    "adam_multi_update", "adam_update", "check_hyper_parameters", "rmsprop_update", "sgd_multi_update", "sgd_update",
]
