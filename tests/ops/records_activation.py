"""Records for the activations (relu, gelu, silu, ...), with NumPy/SciPy oracles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.special
import torch

import opgraph as og
from opgraph.ops import activation as act

from .opinfo import ErrorCase, OpInfo, Sample, rand

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 30.0, -30.0], np.float32)


def _samples(kwargs: dict[str, Any] | None = None) -> Callable[[np.random.Generator], list[Sample]]:
    kw = kwargs or {}

    def samples(rng: np.random.Generator) -> list[Sample]:
        return [Sample([rand(rng, (3, 4), np.float32, -8, 8)], dict(kw), "float32"),
                Sample([rand(rng, (5,), np.float64, -8, 8)], dict(kw), "float64"),
                Sample([rand(rng, (2, 3), np.float16, -8, 8)], dict(kw), "float16"),
                Sample([rand(rng, (4,), torch.bfloat16, -8, 8)], dict(kw), "bfloat16"),
                Sample([SPECIAL], dict(kw), "special"),
                Sample([np.zeros((0, 2), np.float32)], dict(kw), "empty")]

    return samples


def _grad_samples(kinks: tuple[float, ...], kwargs: dict[str, Any] | None = None
                  ) -> Callable[[np.random.Generator], list[Sample]]:
    """float64 samples kept at least 0.05 away from the kinks (and jumps), where finite differences fail."""
    kw = kwargs or {}

    def samples(rng: np.random.Generator) -> list[Sample]:
        out = []
        for shape in ((3, 4), (6,)):
            v = rng.uniform(-8, 8, shape)
            for k in kinks:
                v = np.where(np.abs(v - k) < 0.05, v + 0.1, v)
            out.append(Sample([v], dict(kw), f"float64-rank{len(shape)}"))
        return out

    return samples


def _wide(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Evaluate the oracle in float64 and round once to the input's dtype."""

    def oracle(x: np.ndarray, **kw: Any) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(x.astype(np.float64), **kw)).astype(x.dtype)

    return oracle


def _errors(method: str, **kw: Any) -> list[ErrorCase]:
    return [ErrorCase(lambda g: getattr(g, method)(g.placeholder((2,), og.int32), **kw), og.DTypeError, "int32",
                      "int32"),
            ErrorCase(lambda g: getattr(g, method)(g.placeholder((2,), og.complex64), **kw), og.DTypeError,
                      "complex64", "complex64")]


def _bad_attr(method: str, match: str, **kw: Any) -> ErrorCase:
    return ErrorCase(lambda g: getattr(g, method)(g.placeholder((2,)), **kw), og.AttributeValueError, match,
                     f"bad-{'-'.join(kw)}")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return scipy.special.expit(x)


def _softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    return np.where(beta * x > threshold, x, np.logaddexp(0.0, beta * x) / beta)


def _gelu(x: np.ndarray, approximate: Any = act.GeluApproximation.NONE) -> np.ndarray:
    if approximate in (True, act.GeluApproximation.TANH):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2)))


def _elu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    return np.where(x > 0, x, alpha * np.expm1(x))


def _hard_sigmoid(x: np.ndarray, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    return np.clip(alpha * x + beta, 0.0, 1.0)


def _record(method: str, op: Any, oracle: Callable[..., Any], kwargs: dict[str, Any] | None = None,
            errors: list[ErrorCase] | None = None, suffix: str = "", kinks: tuple[float, ...] = ()) -> OpInfo:
    return OpInfo(method + suffix, (op,), lambda g, x, **kw: getattr(g, method)(x, **kw), _samples(kwargs),
                  _wide(oracle), errors=_errors(method, **(kwargs or {})) + (errors or []),
                  grad_samples=_grad_samples(kinks, kwargs) if kinks else None)


RECORDS = [
    _record("relu", act.RELU, lambda x: np.maximum(x, 0), kinks=(0.0,)),
    _record("relu6", act.RELU6, lambda x: np.clip(x, 0, 6), kinks=(0.0, 6.0)),
    _record("leaky_relu", act.LEAKY_RELU, lambda x: np.where(x >= 0, x, 0.01 * x),
            errors=[_bad_attr("leaky_relu", "alpha", alpha=float("nan")),
                    _bad_attr("leaky_relu", "alpha", alpha="0.1")], kinks=(0.0,)),
    _record("leaky_relu", act.LEAKY_RELU, lambda x, alpha: np.where(x >= 0, x, alpha * x), {"alpha": 0.2},
            suffix="-alpha", kinks=(0.0,)),
    _record("elu", act.ELU, _elu, errors=[_bad_attr("elu", "alpha", alpha=float("inf"))], kinks=(0.0,)),
    _record("elu", act.ELU, _elu, {"alpha": 0.5}, suffix="-alpha", kinks=(0.0,)),
    _record("gelu", act.GELU, _gelu, errors=[_bad_attr("gelu", "GeluApproximation", approximate="tanh")]),
    _record("gelu", act.GELU, _gelu, {"approximate": act.GeluApproximation.TANH}, suffix="-tanh"),
    _record("gelu", act.GELU, _gelu, {"approximate": True}, suffix="-true"),
    _record("silu", act.SILU, lambda x: x * _sigmoid(x)),
    _record("sigmoid", act.SIGMOID, _sigmoid),
    _record("hard_sigmoid", act.HARD_SIGMOID, _hard_sigmoid, errors=[_bad_attr("hard_sigmoid", "beta", beta=None)],
            kinks=(-2.5, 2.5)),
    _record("hard_sigmoid", act.HARD_SIGMOID, _hard_sigmoid, {"alpha": 1 / 6, "beta": 0.5}, suffix="-torch",
            kinks=(-3.0, 3.0)),
    _record("softplus", act.SOFTPLUS, _softplus,
            errors=[_bad_attr("softplus", "beta must be positive", beta=0.0),
                    _bad_attr("softplus", "threshold", threshold=float("nan"))]),
    _record("softplus", act.SOFTPLUS, _softplus, {"beta": 2.0, "threshold": 5.0}, suffix="-beta",
            kinks=(2.5,)),  # the small jump at beta * x == threshold
    _record("softsign", act.SOFTSIGN, lambda x: x / (1 + np.abs(x))),
    _record("mish", act.MISH, lambda x: x * np.tanh(np.logaddexp(0.0, x))),
]
