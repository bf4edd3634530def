"""Optimizers in ``torch.optim``'s spelling, built into a graph: ``og.optim.SGD``, ``Adam``, ``AdamW``,
``RMSprop``, ``Adagrad``, ``Adadelta``.

An optimizer is made for a graph and its variables; ``step(loss)`` adds the gradient ops
(``graph.gradients``) and the update ops (the graph's ``apply_*`` builders: reads, graph ops and
``assign``), and returns the ``assign`` operations to run through ``target_ops``. Each run of those
operations is one optimisation step, with ``torch.optim``'s arithmetic. A learning rate (or another
hyper-parameter) given as a scalar graph tensor, a placeholder or a variable, is a schedule.

>>> import opgraph as og, torch
>>> g = og.Graph()
>>> w = g.variable(torch.tensor([3.0]), name="w")
>>> loss = g.reduce_sum(w * w)
>>> step = og.optim.SGD(g, [w], lr=0.25).step(loss)
>>> for _ in range(2): _ = g.run(target_ops=step)
>>> g.variable_value(w).tolist()
[0.75]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .core.errors import GraphError
from .ir.graph import Operation, Tensor
from .ops import training
from .ops.state import expect_variable

__all__ = ["SGD", "Adadelta", "Adagrad", "Adam", "AdamW", "Optimizer", "RMSprop"]

Scalar = float | Tensor


class Optimizer:
    """Base class: ``graph``, ``variables`` and ``state`` (per variable, its state variables by
    PyTorch's names, created by the first ``step``). ``foreach=True`` (SGD, Adam, AdamW: the default)
    updates all the variables with one multi-tensor op; the others accept ``foreach`` and use graph ops
    per variable."""

    _what = "optimizer"

    def __init__(self, graph: Any, variables: Sequence[Tensor], update: Callable[..., training.Update],
                 hyper: Mapping[str, Any], multi: Callable[..., list[training.Update]] | None = None) -> None:
        variables = list(variables)
        if not variables:
            raise GraphError(f"{self._what}: got an empty list of variables")
        for v in variables:
            expect_variable(v, self._what)
            if v.graph is not graph:
                raise GraphError(f"{self._what}: variable %{v.name} belongs to another graph")
        if len(set(map(id, variables))) != len(variables):
            raise GraphError(f"{self._what}: a variable appears twice")
        training.check_hyper_parameters(update, hyper, self._what)  # fail here, not at the first step
        self.graph = graph
        self.variables = variables
        self.state: dict[Tensor, dict[str, Tensor]] = {}
        self._fn, self._hyper, self._multi = update, dict(hyper), multi

    def apply_gradients(self, gradients: Mapping[Tensor, Any]) -> list[Operation]:
        """Add the update of each variable from its gradient (a tensor or a value); returns the assigns."""
        ops: list[Operation] = []
        for v in self.variables:
            if v not in gradients:
                raise GraphError(f"{self._what}: no gradient given for %{v.name}")
        if self._multi is not None:  # one multi-tensor op for all the variables
            updates = self._multi(self.graph, self.variables, [gradients[v] for v in self.variables],
                                  states=[self.state.get(v, {}) for v in self.variables], **self._hyper)
            for v, upd in zip(self.variables, updates, strict=True):
                self.state[v] = upd.state
                ops.extend(upd.ops)
            return ops
        for v in self.variables:
            upd = self._fn(self.graph, v, gradients[v], state=self.state.get(v, {}), **self._hyper)
            self.state[v] = upd.state
            ops.extend(upd.ops)
        return ops

    def step(self, loss: Tensor) -> list[Operation]:
        """Add ``d loss / d variables`` and the updates to the graph; returns the ``assign`` operations
        to run through ``target_ops`` (one optimisation step per run)."""
        return self.apply_gradients(self.graph.gradients(loss, self.variables))

    def minimize(self, loss: Tensor) -> list[Operation]:
        """The same as ``step``."""
        return self.step(loss)


class SGD(Optimizer):
    """``torch.optim.SGD``: momentum (with dampening, Nesterov) and L2 weight decay. ``foreach`` (the
    default): one multi-tensor op updates all the variables; ``False``: graph ops per variable."""

    _what = "SGD"

    def __init__(self, graph: Any, variables: Sequence[Tensor], lr: Scalar = 1e-3, momentum: Scalar = 0.0,
                 dampening: Scalar = 0.0, weight_decay: Scalar = 0.0, nesterov: bool = False, *,
                 maximize: bool = False, foreach: bool = True) -> None:
        super().__init__(graph, variables, training.sgd_update, dict(
            learning_rate=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay, dampening=dampening,
            maximize=maximize), training.sgd_multi_update if foreach else None)


class Adam(Optimizer):
    """``torch.optim.Adam`` (AMSGrad with ``amsgrad=True``; L2 weight decay added to the gradient);
    ``foreach`` as for ``SGD``."""

    _what = "Adam"
    _decoupled = False

    def __init__(self, graph: Any, variables: Sequence[Tensor], lr: Scalar = 1e-3,
                 betas: tuple[Scalar, Scalar] = (0.9, 0.999), eps: Scalar = 1e-8, weight_decay: Scalar = 0.0,
                 amsgrad: bool = False, *, maximize: bool = False, foreach: bool = True) -> None:
        super().__init__(graph, variables, training.adam_update, dict(
            learning_rate=lr, beta1=betas[0], beta2=betas[1], epsilon=eps, weight_decay=weight_decay,
            amsgrad=amsgrad, decoupled_weight_decay=self._decoupled, maximize=maximize),
            training.adam_multi_update if foreach else None)


class AdamW(Adam):
    """``torch.optim.AdamW``: Adam with decoupled weight decay (``p *= 1 - lr * weight_decay``)."""

    _what = "AdamW"
    _decoupled = True

    def __init__(self, graph: Any, variables: Sequence[Tensor], lr: Scalar = 1e-3,
                 betas: tuple[Scalar, Scalar] = (0.9, 0.999), eps: Scalar = 1e-8, weight_decay: Scalar = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False, foreach: bool = True) -> None:
        super().__init__(graph, variables, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, foreach=foreach)


class RMSprop(Optimizer):
    """``torch.optim.RMSprop`` (centred, momentum, L2 weight decay)."""

    _what = "RMSprop"

    def __init__(self, graph: Any, variables: Sequence[Tensor], lr: Scalar = 1e-2, alpha: Scalar = 0.99,
                 eps: Scalar = 1e-8, weight_decay: Scalar = 0.0, momentum: Scalar = 0.0, centered: bool = False, *,
                 maximize: bool = False, foreach: bool = False) -> None:
        super().__init__(graph, variables, training.rmsprop_update, dict(
            learning_rate=lr, alpha=alpha, epsilon=eps, weight_decay=weight_decay, momentum=momentum,
            centered=centered, maximize=maximize))


class Adagrad(Optimizer):
    """``torch.optim.Adagrad`` (learning-rate decay, initial accumulator value, L2 weight decay)."""

    _what = "Adagrad"

    def __init__(self, graph: Any, variables: Sequence[Tensor], lr: Scalar = 1e-2, lr_decay: Scalar = 0.0,
                 weight_decay: Scalar = 0.0, initial_accumulator_value: float = 0.0, eps: Scalar = 1e-10, *,
                 maximize: bool = False, foreach: bool = False) -> None:
        super().__init__(graph, variables, training.adagrad_update, dict(
            learning_rate=lr, lr_decay=lr_decay, weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value, epsilon=eps, maximize=maximize))


class Adadelta(Optimizer):
    """``torch.optim.Adadelta``."""

    _what = "Adadelta"

    def __init__(self, graph: Any, variables: Sequence[Tensor], lr: Scalar = 1.0, rho: Scalar = 0.9,
                 eps: Scalar = 1e-6, weight_decay: Scalar = 0.0, *, maximize: bool = False,
                 foreach: bool = False) -> None:
        super().__init__(graph, variables, training.adadelta_update, dict(
            learning_rate=lr, rho=rho, epsilon=eps, weight_decay=weight_decay, maximize=maximize))
