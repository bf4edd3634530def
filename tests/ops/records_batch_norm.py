"""Records for ``batch_norm`` (the fused ``batch_norm_training`` op and assigns in training mode,
``normalize`` in inference mode), ``batch_norm_training`` itself and its gradient op
``batch_norm_training_gradient``, against ``torch.nn.functional.batch_norm`` (and ``torch.autograd``
through it) in float64: the semantics (biased batch variance, unbiased running variance, momentum) are
PyTorch's. In training mode the ``batch_norm`` record also returns the values the two ``assign`` ops
write, so the running-statistics update is checked too (and differentiated: the statistics outputs of
``batch_norm_training`` then carry nonzero cotangents)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import opgraph as og
from opgraph.ops import norm
from opgraph.ops.batch_norm import BATCH_NORM_TRAINING
from opgraph.ops.batch_norm_grad import BATCH_NORM_TRAINING_GRADIENT

from .opinfo import ErrorCase, OpInfo, Sample, rand

BF16 = torch.bfloat16


def torch_batch_norm(x: np.ndarray, *p: np.ndarray, training: bool, running_mean: np.ndarray,
                     running_var: np.ndarray, affine: Sequence[str] = (), momentum: float = 0.1,
                     epsilon: float = 1e-5, axis: int = 1, stats_dtype: Any = None) -> Any:
    f = torch.float64
    xt = torch.from_numpy(np.asarray(x, np.float64)).movedim(axis, 1)
    rm = torch.from_numpy(np.asarray(running_mean, np.float64)).clone()
    rv = torch.from_numpy(np.asarray(running_var, np.float64)).clone()
    ps = {k: torch.from_numpy(np.asarray(v)).to(f) for k, v in zip(affine, p, strict=True)}
    y = F.batch_norm(xt, rm, rv, ps.get("gamma"), ps.get("beta"), training, momentum, epsilon).movedim(1, axis)
    return [y.numpy(), rm.numpy(), rv.numpy()] if training else y.numpy()


def _build(g: og.Graph, x: og.Tensor, *p: og.Tensor, training: bool, running_mean: np.ndarray,
           running_var: np.ndarray, affine: Sequence[str] = (), stats_dtype: Any = None, **kw: Any) -> Any:
    dt = stats_dtype or x.dtype
    rm, rv = g.variable(running_mean, dt, name="running_mean"), g.variable(running_var, dt, name="running_var")
    y, updates = g.batch_norm(x, rm, rv, **dict(zip(affine, p, strict=True)), training=training, **kw)
    assert len(updates) == (2 if training else 0)
    return [y, *(u.inputs[1] for u in updates)]  # the values the assigns write


def _stats(rng: np.random.Generator, c: int) -> dict[str, np.ndarray]:
    return {"running_mean": rng.uniform(-1, 1, c), "running_var": rng.uniform(0.5, 2, c)}


def _samples(rng: np.random.Generator) -> list[Sample]:
    gb = ("gamma", "beta")
    return [
        Sample([rand(rng, (2, 3, 4, 5)), rand(rng, (3,)), rand(rng, (3,))],
               {"training": True, "affine": gb, **_stats(rng, 3)}, "f32-nchw-train"),
        Sample([rand(rng, (6, 4), np.float64)],
               {"training": True, "momentum": 0.3, "epsilon": 1e-3, **_stats(rng, 4)}, "f64-nc-train"),
        Sample([rand(rng, (3, 2, 5), np.float64), rand(rng, (2,), np.float64), rand(rng, (2,), np.float64)],
               {"training": False, "affine": gb, **_stats(rng, 2)}, "f64-ncl-eval"),
        Sample([rand(rng, (2, 3, 4, 4)), rand(rng, (3,))],
               {"training": False, "affine": ("gamma",), **_stats(rng, 3)}, "f32-nchw-eval"),
        Sample([rand(rng, (2, 3, 3, 4)), rand(rng, (4,)), rand(rng, (4,))],
               {"training": True, "affine": gb, "axis": -1, "momentum": 1.0, **_stats(rng, 4)}, "f32-nhwc-train"),
        Sample([rand(rng, (4, 3, 5), np.float16), rand(rng, (3,), np.float16)],
               {"training": True, "affine": ("beta",), "stats_dtype": og.float32, **_stats(rng, 3)}, "f16-train"),
        Sample([rand(rng, (4, 3, 5), BF16)], {"training": False, **_stats(rng, 3)}, "bf16-eval"),
    ]


def _ph(g: og.Graph, shape: tuple[int | None, ...], dtype: og.DType = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


def _var(g: og.Graph, n: int = 3, dtype: og.DType = og.float32) -> og.Tensor:
    return g.variable(torch.zeros(n, dtype=dtype.torch_dtype))


ERRORS = [
    ErrorCase(lambda g: g.batch_norm(_ph(g, (4,)), _var(g), _var(g), training=False), og.ShapeError, "rank >= 2",
              "rank1"),
    ErrorCase(lambda g: g.batch_norm(_ph(g, (2, 3)), _var(g, 4), _var(g), training=False), og.ShapeError,
              "running_mean must have shape", "bad-running-mean"),
    ErrorCase(lambda g: g.batch_norm(_ph(g, (2, 3)), _var(g), _var(g), _ph(g, (2,)), training=True),
              og.ShapeError, "gamma must have shape", "bad-gamma"),
    ErrorCase(lambda g: g.batch_norm(_ph(g, (2, 3)), _ph(g, (3,)), _var(g), training=True), og.GraphError,
              "expects a variable", "placeholder-stats-in-training"),
    ErrorCase(lambda g: g.batch_norm(_ph(g, (2, 3)), _var(g), _var(g), training=True, momentum=1.5),
              og.AttributeValueError, "momentum", "bad-momentum"),
    ErrorCase(lambda g: g.batch_norm(_ph(g, (2, 3)), _var(g), _var(g), training=1),  # type: ignore[arg-type]
              og.AttributeValueError, "training must be a bool", "int-training"),
    ErrorCase(lambda g: g.batch_norm(_ph(g, (2, 3)), _var(g), _var(g), training=False, epsilon=-1.0),
              og.AttributeValueError, "epsilon", "negative-eps"),
    ErrorCase(lambda g: g.batch_norm(_ph(g, (2, 3), og.int32), _var(g), _var(g), training=False), og.DTypeError,
              "floating", "int-input"),
    ErrorCase(lambda g: g.batch_norm(_ph(g, (1, 3)), _var(g), _var(g), training=True), og.ShapeError,
              "more than one value", "one-value-per-channel"),
    ErrorCase(lambda g: g.batch_norm(_ph(g, (2, 3)), _var(g), _var(g), training=False, axis=2), og.ShapeError,
              "axis", "bad-axis"),
]

# ---- batch_norm_training: (y, batch mean, biased batch variance) ---------------------------------
def _f64(v: Any) -> torch.Tensor:
    return torch.from_numpy(np.asarray(v, np.float64))


def torch_bn_training(x: np.ndarray, *p: np.ndarray, affine: Sequence[str] = (), epsilon: float = 1e-5,
                      axis: int = 1) -> list[np.ndarray]:
    xt = _f64(x).movedim(axis, 1)
    ps = {k: _f64(v) for k, v in zip(affine, p, strict=True)}
    var, mean = torch.var_mean(xt, [d for d in range(xt.dim()) if d != 1], correction=0)
    # written out (F.batch_norm refuses epsilon 0 on some torch versions)
    shape = [1, -1] + [1] * (xt.dim() - 2)
    y = (xt - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + epsilon)
    if "gamma" in ps:
        y = y * ps["gamma"].reshape(shape)
    if "beta" in ps:
        y = y + ps["beta"].reshape(shape)
    return [y.movedim(1, axis).numpy(), mean.numpy(), var.numpy()]


def _build_training(g: og.Graph, x: og.Tensor, *p: og.Tensor, affine: Sequence[str] = (), **kw: Any) -> Any:
    return list(g.batch_norm_training(x, **dict(zip(affine, p, strict=True)), **kw))


def _training_samples(rng: np.random.Generator) -> list[Sample]:
    gb = ("gamma", "beta")
    return [
        Sample([rand(rng, (2, 3, 2, 2), np.float64), rand(rng, (3,), np.float64), rand(rng, (3,), np.float64)],
               {"affine": gb}, "f64-nchw-affine"),
        Sample([rand(rng, (5, 4), np.float64)], {"epsilon": 1e-3}, "f64-nc"),
        Sample([rand(rng, (4, 3, 5)), rand(rng, (3,)), rand(rng, (3,))], {"affine": gb}, "f32-ncl"),
        Sample([rand(rng, (2, 3, 2, 4)), rand(rng, (4,))], {"affine": ("gamma",), "axis": -1}, "f32-nhwc-gamma"),
        Sample([rand(rng, (4, 3, 5), np.float16), rand(rng, (3,), np.float16)], {"affine": ("beta",)}, "f16-beta"),
        Sample([rand(rng, (4, 3, 5), np.float16)], {"epsilon": 0.0}, "f16-no-affine-eps0"),
        Sample([rand(rng, (4, 2, 3), BF16), rand(rng, (2,), np.float32), rand(rng, (2,), np.float32)],
               {"affine": gb}, "bf16-f32-params"),
        Sample([rand(rng, (3, 2, 4)), rand(rng, (3,))], {"affine": ("gamma",), "axis": 0}, "f32-axis0"),
    ]


TRAINING_ERRORS = [
    ErrorCase(lambda g: g.batch_norm_training(_ph(g, (4,))), og.ShapeError, "rank >= 2", "rank1"),
    ErrorCase(lambda g: g.batch_norm_training(_ph(g, (2, 3, 4)), _ph(g, (4,))), og.ShapeError,
              "gamma must have shape", "bad-gamma"),
    ErrorCase(lambda g: g.batch_norm_training(_ph(g, (2, 3)), None, _ph(g, (3, 1))), og.ShapeError,
              "beta must have shape", "rank2-beta"),
    ErrorCase(lambda g: g.batch_norm_training(_ph(g, (2, 3), og.int32)), og.DTypeError, "floating", "int-input"),
    ErrorCase(lambda g: g.batch_norm_training(_ph(g, (2, 3)), _ph(g, (3,), og.int32)), og.DTypeError,
              "gamma must be real floating", "int-gamma"),
    ErrorCase(lambda g: g.batch_norm_training(_ph(g, (2, 3)), epsilon=-1.0), og.AttributeValueError, "epsilon",
              "negative-eps"),
    ErrorCase(lambda g: g.batch_norm_training(_ph(g, (2, 3)), axis=2), og.ShapeError, "axis", "bad-axis"),
]


# ---- batch_norm_training_gradient: (dx, dgamma, dbeta) given dy and the batch statistics -------------
def _batch_stats(x: Any, axis: int, dtype: Any) -> list[Any]:
    """The batch mean and biased variance of ``x`` over every dim but ``axis``, as the forward returns."""
    xt = (x.double() if isinstance(x, torch.Tensor) else _f64(x)).movedim(axis, 1)
    var, mean = torch.var_mean(xt, [d for d in range(xt.dim()) if d != 1], correction=0)
    return [mean.numpy().astype(dtype), var.numpy().astype(dtype)]


def torch_bn_training_gradient(dy: np.ndarray, x: np.ndarray, mean: np.ndarray, var: np.ndarray,
                               *gamma: np.ndarray, epsilon: float = 1e-5, axis: int = 1) -> list[np.ndarray]:
    # mean/var are x's batch statistics (see the samples), so the op is batch norm's backward
    xt = _f64(x).movedim(axis, 1).requires_grad_()
    c = xt.shape[1]
    w = (_f64(gamma[0]) if gamma else torch.ones(c, dtype=torch.float64)).requires_grad_()
    b = torch.zeros(c, dtype=torch.float64, requires_grad=True)
    y = F.batch_norm(xt, None, None, w, b, True, 0.0, epsilon)
    dx, dw, db = torch.autograd.grad(y, [xt, w, b], _f64(dy).movedim(axis, 1))
    return [dx.movedim(1, axis).numpy(), dw.numpy(), db.numpy()]


def _build_gradient(g: og.Graph, dy: og.Tensor, x: og.Tensor, mean: og.Tensor, var: og.Tensor, *gamma: og.Tensor,
                    **kw: Any) -> Any:
    return list(g.batch_norm_training_gradient(dy, x, mean, var, *gamma, **kw))


def _gradient_sample(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, gamma: bool, desc: str,
                     axis: int = 1, **kw: Any) -> Sample:
    x, dy = rand(rng, shape, dtype), rand(rng, shape, dtype)
    st = np.float32 if dtype in (np.float16, BF16) else dtype
    c = shape[axis]
    ins = [dy, x, *_batch_stats(x, axis, st), *([rand(rng, (c,), st, 0.5, 1.5)] if gamma else [])]
    return Sample(ins, {"axis": axis, **kw}, desc)


def _gradient_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        _gradient_sample(rng, (2, 3, 2, 2), np.float64, True, "f64-nchw-gamma"),
        _gradient_sample(rng, (5, 2), np.float64, False, "f64-nc", epsilon=1e-3),
        _gradient_sample(rng, (4, 3, 5), np.float32, True, "f32-ncl-gamma"),
        _gradient_sample(rng, (2, 2, 3, 3), np.float32, False, "f32-nhwc", axis=3),
        _gradient_sample(rng, (4, 3, 5), np.float16, True, "f16-gamma"),
        _gradient_sample(rng, (4, 2, 3), BF16, False, "bf16"),
    ]


GRADIENT_ERRORS = [
    ErrorCase(lambda g: g.batch_norm_training_gradient(_ph(g, (2, 3, 5)), _ph(g, (2, 3, 4)), _ph(g, (3,)),
                                                       _ph(g, (3,))), og.ShapeError, "incoming gradient",
              "gradient-shape"),
    ErrorCase(lambda g: g.batch_norm_training_gradient(_ph(g, (2, 3), og.float64), _ph(g, (2, 3)), _ph(g, (3,)),
                                                       _ph(g, (3,))), og.DTypeError, "input's dtype",
              "gradient-dtype"),
    ErrorCase(lambda g: g.batch_norm_training_gradient(_ph(g, (2, 3)), _ph(g, (2, 3)), _ph(g, (2,)),
                                                       _ph(g, (3,))), og.ShapeError, "mean must have shape",
              "bad-mean"),
    ErrorCase(lambda g: g.batch_norm_training_gradient(_ph(g, (2, 3)), _ph(g, (2, 3)), _ph(g, (3,)),
                                                       _ph(g, (3,)), _ph(g, (4,))), og.ShapeError,
              "gamma must have shape", "bad-gamma"),
    ErrorCase(lambda g: g.batch_norm_training_gradient(_ph(g, (2,)), _ph(g, (2,)), _ph(g, (2,)), _ph(g, (2,))),
              og.ShapeError, "rank >= 2", "rank1"),
]


RECORDS = [
    OpInfo("batch_norm", (norm.NORMALIZE, BATCH_NORM_TRAINING), _build, _samples, torch_batch_norm, errors=ERRORS,
           tol={torch.float16: (5e-3, 5e-3)}),
    OpInfo("batch_norm_training", (BATCH_NORM_TRAINING,), _build_training, _training_samples, torch_bn_training,
           errors=TRAINING_ERRORS, tol={torch.float16: (5e-3, 5e-3)}),
    # the gradient checks differentiate the gradient op (its second-order rule) in all five inputs
    OpInfo("batch_norm_training_gradient", (BATCH_NORM_TRAINING_GRADIENT,), _build_gradient, _gradient_samples,
           torch_bn_training_gradient, errors=GRADIENT_ERRORS,
           tol={torch.float16: (5e-3, 5e-3), torch.bfloat16: (3e-2, 3e-2)},
           # CUDA's half-precision backward kernel accumulates differently from the CPU one
           # (its float32 dgamma/dbeta of 16-bit inputs included)
           gpu_tol={torch.float16: (2e-2, 2e-2), torch.bfloat16: (6e-2, 6e-2), torch.float32: (5e-3, 1e-2)}),
]
