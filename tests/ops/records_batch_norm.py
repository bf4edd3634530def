"""Records for ``batch_norm`` (composed from reduce_mean, variance, normalize and assign), against
``torch.nn.functional.batch_norm`` in float64: its semantics (biased batch variance, unbiased running
variance, momentum) are PyTorch's. In training mode the record also returns the values the two
``assign`` ops write, so the running-statistics update is checked too (and differentiated)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import opgraph as og
from opgraph.ops import norm, reduce

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

RECORDS = [
    OpInfo("batch_norm", (norm.NORMALIZE, reduce.REDUCE_MEAN, reduce.VARIANCE), _build, _samples,
           torch_batch_norm, errors=ERRORS, tol={torch.float16: (5e-3, 5e-3)}),
]
