"""Records for the normalisation ops: normalize, layer_norm, group_norm, rms_norm (NumPy float64 oracles).

Optional parameters: a sample's ``affine`` names which trailing inputs are ``gamma``/``beta``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import norm

from .opinfo import ErrorCase, OpInfo, Sample, rand

BF16 = torch.bfloat16


def _place(p: np.ndarray, axes: Sequence[int], ndim: int) -> np.ndarray:
    """A parameter laid out over the normalised dims (aligned to their end) reshaped to broadcast against x."""
    shape = [1] * ndim
    for a, d in zip(list(axes)[len(axes) - p.ndim:], p.shape, strict=True):
        shape[a] = d
    return np.asarray(p, np.float64).reshape(shape)


def _axes(axes: Any, ndim: int) -> tuple[int, ...]:
    axes = (-1,) if axes is None else (axes,) if isinstance(axes, int) else tuple(axes)
    return tuple(sorted(a % ndim for a in axes))


def _params(p: Sequence[np.ndarray], affine: Sequence[str]) -> dict[str, np.ndarray]:
    return dict(zip(affine, p, strict=True))


# ---- oracles ---------------------------------------------------------------------------------
def np_normalize(x: np.ndarray, mean: np.ndarray, var: np.ndarray, *p: np.ndarray, affine: Sequence[str] = (),
                 epsilon: float = 1e-5) -> np.ndarray:
    f = np.float64
    y = (x.astype(f) - mean.astype(f)) / np.sqrt(var.astype(f) + epsilon)
    ps = _params(p, affine)
    if "gamma" in ps:
        y = y * ps["gamma"].astype(f)
    if "beta" in ps:
        y = y + ps["beta"].astype(f)
    return y


def np_layer_norm(x: np.ndarray, *p: np.ndarray, axes: Any = None, affine: Sequence[str] = (),
                  epsilon: float = 1e-5) -> np.ndarray:
    ax = _axes(axes, x.ndim)
    xf = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        mean = xf.mean(axis=ax, keepdims=True)
        var = np.square(xf - mean).mean(axis=ax, keepdims=True)
        y = (xf - mean) / np.sqrt(var + epsilon)
    ps = _params(p, affine)
    if "gamma" in ps:
        y = y * _place(ps["gamma"], ax, x.ndim)
    if "beta" in ps:
        y = y + _place(ps["beta"], ax, x.ndim)
    return y


def np_group_norm(x: np.ndarray, *p: np.ndarray, num_groups: int, affine: Sequence[str] = (),
                  epsilon: float = 1e-5) -> np.ndarray:
    n, c = x.shape[:2]
    grouped = x.astype(np.float64).reshape(n, num_groups, int(np.prod(x.shape[1:], dtype=np.int64)) // num_groups)
    mean = grouped.mean(axis=2, keepdims=True) if grouped.size else grouped.sum(axis=2, keepdims=True)
    var = np.square(grouped - mean).mean(axis=2, keepdims=True) if grouped.size else mean
    y = ((grouped - mean) / np.sqrt(var + epsilon)).reshape(x.shape)
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    ps = _params(p, affine)
    if "gamma" in ps:
        y = y * np.broadcast_to(ps["gamma"].astype(np.float64), (c,)).reshape(per_channel)
    if "beta" in ps:
        y = y + np.broadcast_to(ps["beta"].astype(np.float64), (c,)).reshape(per_channel)
    return y


def np_rms_norm(x: np.ndarray, *p: np.ndarray, axes: Any = None, affine: Sequence[str] = (),
                epsilon: float = 1e-6) -> np.ndarray:
    ax = _axes(axes, x.ndim)
    xf = x.astype(np.float64)
    y = xf / np.sqrt(np.square(xf).mean(axis=ax, keepdims=True) + epsilon)
    ps = _params(p, affine)
    if "gamma" in ps:
        y = y * _place(ps["gamma"], ax, x.ndim)
    return y


# ---- builders --------------------------------------------------------------------------------
def _build_normalize(g: og.Graph, x: og.Tensor, m: og.Tensor, v: og.Tensor, *p: og.Tensor,
                     affine: Sequence[str] = (), **kw: Any) -> og.Tensor:
    return g.normalize(x, m, v, **_params(p, affine), **kw)


def _build_layer_norm(g: og.Graph, x: og.Tensor, *p: og.Tensor, affine: Sequence[str] = (), **kw: Any) -> og.Tensor:
    return g.layer_norm(x, **_params(p, affine), **kw)


def _build_group_norm(g: og.Graph, x: og.Tensor, *p: og.Tensor, affine: Sequence[str] = (), **kw: Any) -> og.Tensor:
    return g.group_norm(x, **_params(p, affine), **kw)


def _build_rms_norm(g: og.Graph, x: og.Tensor, *p: og.Tensor, affine: Sequence[str] = (), **kw: Any) -> og.Tensor:
    return g.rms_norm(x, **_params(p, affine), **kw)


# ---- samples ---------------------------------------------------------------------------------
def _normalize_samples(rng: np.random.Generator) -> list[Sample]:
    gb = ("gamma", "beta")
    return [
        Sample([rand(rng, (2, 3, 4)), rand(rng, (3, 1)), rand(rng, (3, 1), low=0.1), rand(rng, (4,)),
                rand(rng, ())], {"affine": gb}, "f32-bcast"),
        Sample([rand(rng, (4, 5), np.float64), rand(rng, (), np.float64), rand(rng, (), np.float64, 0.1)],
               {"epsilon": 1e-3}, "f64-scalar-stats"),
        Sample([rand(rng, (4,)), rand(rng, (3, 1)), rand(rng, (3, 1), low=0.1), rand(rng, (1, 4))],
               {"affine": ("gamma",)}, "f32-grows"),
        Sample([rand(rng, (4, 5), np.float16), rand(rng, (5,), np.float16), rand(rng, (5,), np.float16, 0.1),
                rand(rng, (5,), np.float16)], {"affine": ("beta",)}, "f16"),
        Sample([rand(rng, (3, 4), BF16), rand(rng, (4,), BF16), rand(rng, (4,), BF16, 0.1),
                rand(rng, (4,), BF16), rand(rng, (4,), BF16)], {"affine": gb}, "bf16"),
    ]


def _layer_norm_samples(rng: np.random.Generator) -> list[Sample]:
    gb = ("gamma", "beta")
    nan = rand(rng, (3, 6))
    nan[1, 2] = np.nan
    return [
        Sample([rand(rng, (4, 8)), rand(rng, (8,)), rand(rng, (8,))], {"affine": gb}, "f32-last"),
        Sample([rand(rng, (2, 3, 5), np.float64), rand(rng, (3, 5), np.float64), rand(rng, (5,), np.float64)],
               {"axes": (1, 2), "affine": gb, "epsilon": 1e-3}, "f64-trailing2"),
        Sample([rand(rng, (2, 3, 4)), rand(rng, (1, 4)), rand(rng, (2, 1))], {"axes": (0, -1), "affine": gb},
               "f32-non-trailing"),
        Sample([rand(rng, (3, 4, 2), np.float64)], {"axes": 1}, "f64-middle-no-affine"),
        Sample([rand(rng, (3, 16), np.float16), rand(rng, (16,), np.float16)], {"affine": ("gamma",)}, "f16"),
        Sample([rand(rng, (3, 16), BF16), rand(rng, (16,), BF16)], {"affine": ("beta",)}, "bf16"),
        Sample([nan], {}, "nan-row"),
        Sample([rand(rng, (0, 4)), rand(rng, (4,))], {"affine": ("gamma",)}, "empty-batch"),
    ]


def _group_norm_samples(rng: np.random.Generator) -> list[Sample]:
    gb = ("gamma", "beta")
    return [
        Sample([rand(rng, (2, 6, 4, 3)), rand(rng, (6,)), rand(rng, (6,))], {"num_groups": 3, "affine": gb}, "f32"),
        Sample([rand(rng, (3, 4, 5), np.float64), rand(rng, (4,), np.float64)],
               {"num_groups": 2, "affine": ("gamma",), "epsilon": 1e-3}, "f64"),
        Sample([rand(rng, (2, 8, 3), np.float16), rand(rng, (8,), np.float16)],
               {"num_groups": 4, "affine": ("beta",)}, "f16"),
        Sample([rand(rng, (2, 4, 2, 2), BF16), rand(rng, (1,), BF16), rand(rng, (4,), BF16)],
               {"num_groups": 1, "affine": gb}, "bf16-bcast-gamma"),
        Sample([rand(rng, (2, 6))], {"num_groups": 6}, "rank2-singleton-groups"),
        Sample([rand(rng, (0, 4, 3))], {"num_groups": 2}, "empty-batch"),
    ]


def _rms_norm_samples(rng: np.random.Generator) -> list[Sample]:
    return [
        Sample([rand(rng, (4, 8)), rand(rng, (8,))], {"affine": ("gamma",)}, "f32-last"),
        Sample([rand(rng, (2, 3, 4), np.float64), rand(rng, (2, 4), np.float64)],
               {"axes": (0, 2), "affine": ("gamma",), "epsilon": 1e-4}, "f64-non-trailing"),
        Sample([rand(rng, (2, 3, 4)), rand(rng, (1, 4))], {"axes": (-2, -1), "affine": ("gamma",)}, "f32-trailing2"),
        Sample([rand(rng, (3, 16), np.float16)], {}, "f16"),
        Sample([rand(rng, (3, 16), BF16), rand(rng, (16,), BF16)], {"affine": ("gamma",)}, "bf16"),
        Sample([rand(rng, (0, 5))], {}, "empty-batch"),
    ]


# gradient samples: the defaults' first two miss non-trailing parameters and no-affine forms
def _layer_norm_grad_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, (2, 3, 4), np.float64), rand(rng, (1, 4), np.float64), rand(rng, (2, 1), np.float64)],
                   {"axes": (0, -1), "affine": ("gamma", "beta")}, "f64-non-trailing"),
            Sample([rand(rng, (3, 4, 2), np.float64)], {"axes": 1}, "f64-middle-no-affine")]


def _group_norm_grad_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, (2, 6, 4, 3), np.float64), rand(rng, (6,), np.float64), rand(rng, (6,), np.float64)],
                   {"num_groups": 3, "affine": ("gamma", "beta")}, "f64"),
            Sample([rand(rng, (2, 4, 3), np.float64), rand(rng, (1,), np.float64), rand(rng, (4,), np.float64)],
                   {"num_groups": 2, "affine": ("gamma", "beta")}, "f64-bcast-gamma")]


def _rms_norm_grad_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample([rand(rng, (2, 3, 4), np.float64), rand(rng, (2, 4), np.float64)],
                   {"axes": (0, 2), "affine": ("gamma",), "epsilon": 1e-4}, "f64-non-trailing"),
            Sample([rand(rng, (2, 3, 4), np.float64)], {"axes": (-2, -1)}, "f64-trailing2-no-affine")]


# ---- error cases -----------------------------------------------------------------------------
def _ph(g: og.Graph, shape: tuple[int | None, ...], dtype: og.DType = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


ERR_NORMALIZE = [
    ErrorCase(lambda g: g.normalize(_ph(g, (3, 4)), _ph(g, (5,)), _ph(g, (4,))), og.ShapeError, "do not broadcast",
              "bad-broadcast"),
    ErrorCase(lambda g: g.normalize(_ph(g, (3,), og.int32), 0, 1), og.DTypeError, "int32", "int"),
    ErrorCase(lambda g: g.normalize(_ph(g, (3,), og.complex64), _ph(g, (3,), og.complex64),
                                    _ph(g, (3,), og.complex64)), og.DTypeError, "complex64", "complex"),
    ErrorCase(lambda g: g.normalize(_ph(g, (3,)), _ph(g, (3,), og.float16), _ph(g, (3,))), og.DTypeError,
              "one dtype", "mixed-dtypes"),
    ErrorCase(lambda g: g.normalize(_ph(g, (3,)), 0.0, 1.0, epsilon=-1.0), og.AttributeValueError, "epsilon",
              "negative-eps"),
]

ERR_LAYER_NORM = [
    ErrorCase(lambda g: g.layer_norm(_ph(g, (2, 3)), 2), og.ShapeError, "out of range", "bad-axis"),
    ErrorCase(lambda g: g.layer_norm(_ph(g, (2, 3)), (0, -2)), og.ShapeError, "repeat", "repeated-axes"),
    ErrorCase(lambda g: g.layer_norm(_ph(g, (2, 3)), ()), og.ShapeError, "non-empty", "no-axes"),
    ErrorCase(lambda g: g.layer_norm(_ph(g, ())), og.ShapeError, "out of range", "scalar"),
    ErrorCase(lambda g: g.layer_norm(_ph(g, (2, 3)), gamma=_ph(g, (4,))), og.ShapeError, "does not broadcast",
              "bad-gamma"),
    ErrorCase(lambda g: g.layer_norm(_ph(g, (2, 3)), beta=_ph(g, (2, 3))), og.ShapeError, "does not broadcast",
              "beta-over-unnormalised-dim"),
    ErrorCase(lambda g: g.layer_norm(_ph(g, (2, 3), og.int64)), og.DTypeError, "int64", "int"),
    ErrorCase(lambda g: g.layer_norm(_ph(g, (2, 3)), gamma=_ph(g, (3,), og.float16)), og.DTypeError, "one dtype",
              "gamma-dtype"),
    ErrorCase(lambda g: g.layer_norm(_ph(g, (2, 3)), epsilon=float("nan")), og.AttributeValueError, "epsilon",
              "nan-eps"),
]

ERR_GROUP_NORM = [
    ErrorCase(lambda g: g.group_norm(_ph(g, (2, 6, 4)), 4), og.ShapeError, "does not divide", "groups-not-dividing"),
    ErrorCase(lambda g: g.group_norm(_ph(g, (2, 6, 4)), 0), og.AttributeValueError, "num_groups", "zero-groups"),
    ErrorCase(lambda g: g.group_norm(_ph(g, (6,)), 2), og.ShapeError, "rank >= 2", "rank1"),
    ErrorCase(lambda g: g.group_norm(_ph(g, (2, 6, 4)), 2, gamma=_ph(g, (4,))), og.ShapeError, "does not broadcast",
              "bad-gamma"),
    ErrorCase(lambda g: g.group_norm(_ph(g, (2, 6, 4), og.int32), 2), og.DTypeError, "int32", "int"),
]

ERR_RMS_NORM = [
    ErrorCase(lambda g: g.rms_norm(_ph(g, (2, 3)), -3), og.ShapeError, "out of range", "bad-axis"),
    ErrorCase(lambda g: g.rms_norm(_ph(g, (2, 3), og.int8)), og.DTypeError, "int8", "int"),
    ErrorCase(lambda g: g.rms_norm(_ph(g, (2, 3)), gamma=_ph(g, (2,))), og.ShapeError, "does not broadcast",
              "bad-gamma"),
    ErrorCase(lambda g: g.rms_norm(_ph(g, (2, 3)), epsilon="small"), og.AttributeValueError, "epsilon", "str-eps"),
]

RECORDS = [
    OpInfo("normalize", (norm.NORMALIZE,), _build_normalize, _normalize_samples, np_normalize, errors=ERR_NORMALIZE),
    OpInfo("layer_norm", (norm.LAYER_NORM,), _build_layer_norm, _layer_norm_samples, np_layer_norm,
           errors=ERR_LAYER_NORM, grad_samples=_layer_norm_grad_samples),
    OpInfo("group_norm", (norm.GROUP_NORM,), _build_group_norm, _group_norm_samples, np_group_norm,
           errors=ERR_GROUP_NORM, grad_samples=_group_norm_grad_samples),
    OpInfo("rms_norm", (norm.RMS_NORM,), _build_rms_norm, _rms_norm_samples, np_rms_norm, errors=ERR_RMS_NORM,
           grad_samples=_rms_norm_grad_samples),
]
