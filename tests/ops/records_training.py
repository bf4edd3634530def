"""Records for the multi-tensor optimizer ops (``sgd_multi_tensor``, ``adam_multi_tensor``), with NumPy
float64 oracles written from ``torch.optim``'s per-parameter formulas (``sgd_update``/``adam_update``).

A sample's inputs are the lists (params, grads, state...), the step counters and the tensor
hyper-parameters, in the op's order; ``hyper`` gives the numbers, ``None`` for one fed as a tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import training as T

from .opinfo import ErrorCase, OpInfo, Sample, rand

SGD_HYPER = ("learning_rate", "momentum", "dampening", "weight_decay")
ADAM_HYPER = ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay")
SGD_DEFAULTS = dict(learning_rate=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0)
ADAM_DEFAULTS = dict(learning_rate=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.0)


def _split(xs: tuple[Any, ...], n: int, lists: int, k: int, names: tuple[str, ...], hyper: dict[str, Any],
           defaults: dict[str, float]) -> tuple[list[list[Any]], list[Any], dict[str, Any]]:
    """The lists, the steps and every hyper-parameter (a number, or the fed tensor/array)."""
    ls = [list(xs[j * n:(j + 1) * n]) for j in range(lists)]
    steps = list(xs[lists * n:lists * n + k])
    rest = iter(xs[lists * n + k:])
    h = {key: hyper.get(key, defaults[key]) for key in names}
    for key in names:
        if h[key] is None:
            h[key] = next(rest)
    return ls, steps, h


def _sgd_lists(hyper: dict[str, Any]) -> int:
    return 2 if hyper.get("momentum", 0.0) == 0.0 else 3


def _build_sgd(g: og.Graph, *xs: og.Tensor, n: int, k: int = 0, hyper: dict[str, Any],
               nesterov: bool = False, maximize: bool = False) -> list[og.Tensor]:
    ls, steps, h = _split(xs, n, _sgd_lists(hyper), k, SGD_HYPER, hyper, SGD_DEFAULTS)
    return g.sgd_multi_tensor(ls[0], ls[1], ls[2] if len(ls) == 3 else (), steps=steps, nesterov=nesterov,
                              maximize=maximize, **h)


def _f64(x: Any) -> Any:
    return np.asarray(x, np.float64) if isinstance(x, np.ndarray) else x


def _sgd_oracle(*xs: np.ndarray, n: int, k: int = 0, hyper: dict[str, Any], nesterov: bool = False,
                maximize: bool = False) -> list[np.ndarray]:
    ls, steps, h = _split(tuple(map(_f64, xs)), n, _sgd_lists(hyper), k, SGD_HYPER, hyper, SGD_DEFAULTS)
    lr, mom, damp, wd = (float(h[key]) for key in SGD_HYPER)
    new_steps = [s + 1.0 for s in steps]
    ps, bs = [], []
    for i in range(n):
        p, d = ls[0][i], ls[1][i]
        d = -d if maximize else d
        d = d + p * wd
        if len(ls) == 3:
            b = ls[2][i] * mom + d * (1.0 - damp)
            if new_steps and new_steps[0 if k == 1 else i] == 1.0:
                b = d
            bs.append(b)
            d = d + b * mom if nesterov else b
        ps.append(p - d * lr)
    return [*ps, *bs, *new_steps]


def _adam_lists(amsgrad: bool) -> int:
    return 5 if amsgrad else 4


def _build_adam(g: og.Graph, *xs: og.Tensor, n: int, k: int = 1, hyper: dict[str, Any], amsgrad: bool = False,
                decoupled: bool = False, maximize: bool = False) -> list[og.Tensor]:
    ls, steps, h = _split(xs, n, _adam_lists(amsgrad), k, ADAM_HYPER, hyper, ADAM_DEFAULTS)
    return g.adam_multi_tensor(ls[0], ls[1], ls[2], ls[3], steps, max_exp_avg_sqs=ls[4] if amsgrad else (),
                               decoupled_weight_decay=decoupled, maximize=maximize, **h)


def _adam_oracle(*xs: np.ndarray, n: int, k: int = 1, hyper: dict[str, Any], amsgrad: bool = False,
                 decoupled: bool = False, maximize: bool = False) -> list[np.ndarray]:
    ls, steps, h = _split(tuple(map(_f64, xs)), n, _adam_lists(amsgrad), k, ADAM_HYPER, hyper, ADAM_DEFAULTS)
    lr, b1, b2, eps, wd = (float(h[key]) for key in ADAM_HYPER)
    new_steps = [s + 1.0 for s in steps]
    out: list[list[np.ndarray]] = [[], [], [], []]
    for i in range(n):
        p, d, m, v = (ls[j][i] for j in range(4))
        step = float(new_steps[0 if k == 1 else i])
        d = -d if maximize else d
        if wd != 0.0:
            if decoupled:
                p = p * (1.0 - lr * wd)
            else:
                d = d + p * wd
        m = m + (1.0 - b1) * (d - m)
        v = v * b2 + d * d * (1.0 - b2)
        top = np.maximum(ls[4][i], v) if amsgrad else v
        denom = np.sqrt(top) / np.sqrt(1.0 - b2 ** step) + eps
        for j, x in enumerate([p - lr / (1.0 - b1 ** step) * m / denom, m, v, top]):
            out[j].append(x)
    return [*out[0], *out[1], *out[2], *(out[3] if amsgrad else []), *new_steps]


SHAPES = [(3, 4), (5,), ()]


def _lists(rng: np.random.Generator, dtypes: list[Any], count: int, nonneg_from: int = 99) -> list[Any]:
    """``count`` lists of one tensor per dtype (lists from ``nonneg_from`` on are non-negative: squares)."""
    out = []
    for j in range(count):
        out += [rand(rng, SHAPES[i % len(SHAPES)], dt, 0.0 if j >= nonneg_from else -2.0)
                for i, dt in enumerate(dtypes)]
    return out


def _scalar(v: float, dt: Any = np.float64) -> np.ndarray:
    return np.asarray(v, dt)


def _sgd_samples(rng: np.random.Generator) -> list[Sample]:
    f64 = [np.float64] * 3
    return [
        Sample(_lists(rng, f64, 3), dict(n=3, hyper=dict(learning_rate=0.1, momentum=0.9, weight_decay=0.01)),
               "f64-momentum-wd"),
        Sample(_lists(rng, [np.float32, np.float16, torch.bfloat16], 3),
               dict(n=3, hyper=dict(learning_rate=0.05, momentum=0.8), nesterov=True, maximize=True),
               "mixed-16bit-nesterov-maximize"),
        Sample([*_lists(rng, f64, 2), _scalar(0.2)], dict(n=3, hyper=dict(learning_rate=None)), "plain-tensor-lr"),
        Sample([*_lists(rng, f64[:2], 3), _scalar(0.0), _scalar(0.25), _scalar(0.5, np.float32), _scalar(0.01)],
               dict(n=2, k=1, hyper=dict(learning_rate=None, momentum=0.9, dampening=None, weight_decay=None)),
               "dampening-first-step-tensors"),
        Sample([*_lists(rng, f64, 3), _scalar(0.0), _scalar(4.0), _scalar(1.0)],
               dict(n=3, k=3, hyper=dict(learning_rate=0.1, momentum=0.9, dampening=0.3)),
               "dampening-per-param-steps"),
        Sample([*_lists(rng, [np.float32] * 2, 3), _scalar(0.7, np.float32)],
               dict(n=2, hyper=dict(learning_rate=0.1, momentum=None, weight_decay=0.1)), "f32-tensor-momentum"),
    ]


def _adam_samples(rng: np.random.Generator) -> list[Sample]:
    f64 = [np.float64] * 3
    return [
        Sample([*_lists(rng, f64, 4, nonneg_from=3), _scalar(2.0)],
               dict(n=3, hyper=dict(learning_rate=0.05, weight_decay=0.1)), "f64-wd"),
        Sample([*_lists(rng, f64[:2], 5, nonneg_from=3), _scalar(0.0)],
               dict(n=2, hyper=dict(learning_rate=0.1, beta1=0.8, beta2=0.99, epsilon=1e-6), amsgrad=True),
               "f64-amsgrad-first-step"),
        Sample([*_lists(rng, [np.float32, np.float16, torch.bfloat16], 4, nonneg_from=3), _scalar(3.0, np.float32),
                _scalar(0.01, np.float32), _scalar(0.85, np.float32)],
               dict(n=3, hyper=dict(learning_rate=None, beta1=None, weight_decay=0.2), decoupled=True, maximize=True),
               "mixed-16bit-adamw-tensors"),
        Sample([*_lists(rng, f64, 4, nonneg_from=3), _scalar(0.0), _scalar(5.0), _scalar(11.0), _scalar(0.95),
                _scalar(1e-3)],
               dict(n=3, k=3, hyper=dict(beta2=None, epsilon=None, beta1=0.0)), "per-param-steps-tensor-betas"),
    ]


def _errors() -> list[ErrorCase]:
    def ph(g: og.Graph, shape: tuple[int, ...] = (2,), dt: Any = og.float32) -> og.Tensor:
        return g.placeholder(shape, dt)

    return [
        ErrorCase(lambda g: g.sgd_multi_tensor([ph(g), ph(g)], [ph(g)]), og.ShapeError, "one length", "lengths"),
        ErrorCase(lambda g: g.sgd_multi_tensor([ph(g)], [ph(g, (3,))]), og.ShapeError, "does not match", "shape"),
        ErrorCase(lambda g: g.sgd_multi_tensor([ph(g, (2,), og.int32)], [ph(g)]), og.DTypeError, "real floating",
                  "int-param"),
        ErrorCase(lambda g: g.sgd_multi_tensor([ph(g)], [ph(g)], learning_rate=-1.0), og.AttributeValueError,
                  "learning_rate", "negative-lr"),
        ErrorCase(lambda g: g.sgd_multi_tensor([ph(g)], [ph(g)], momentum=0.9), og.AttributeValueError,
                  "momentum_buffers", "missing-buffers"),
        ErrorCase(lambda g: g.adam_multi_tensor([ph(g)], [ph(g)], [ph(g)], [ph(g)], [ph(g)]), og.DTypeError,
                  "scalar floating", "vector-step"),
        ErrorCase(lambda g: g.adam_multi_tensor([ph(g)], [ph(g)], [ph(g)], [ph(g)], [ph(g, ())], beta1=1.0),
                  og.AttributeValueError, "beta1", "beta1"),
    ]


RECORDS = [
    OpInfo("sgd_multi_tensor", (T.SGD_MULTI_TENSOR,), _build_sgd, _sgd_samples, _sgd_oracle, errors=_errors()[:5]),
    OpInfo("adam_multi_tensor", (T.ADAM_MULTI_TENSOR,), _build_adam, _adam_samples, _adam_oracle,
           errors=_errors()[5:], tol={torch.float32: (1e-5, 1e-6)}),
]
