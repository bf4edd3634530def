"""Normalisation ops: normalize (given mean and variance), layer_norm, group_norm, rms_norm.

Optional ``gamma``/``beta`` are extra inputs whose presence is recorded in the attributes
(``has_gamma``/``has_beta``), so each op stays one declaration with a fixed input order:
``x, [mean, variance,] [gamma,] [beta]``. float16/bfloat16 inputs are computed in float32 and the
result is rounded back once.

Gradients (every input, parameters and statistics included) recompute the mean and ``rsqrt`` of the
variance with graph ops, so they differentiate again; ``group_norm``'s needs a static channel count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..core.dtype import FLOAT_DTYPES, DType, float32
from ..core.errors import AttributeValueError, GraphError, ShapeError
from ..core.shape import Shape, broadcast_shapes, format_shape, normalize_axes
from ..core.types import TensorType
from ..ir.graph import GraphCore, Tensor
from ._rules import expect_arity, expect_bool, expect_dtype, same_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp

REDUCTION = FusionKind.REDUCTION


# ---- shared helpers --------------------------------------------------------------------------
def compute_dtype(dt: DType) -> torch.dtype:
    """The torch dtype a float op computes in: float32 for the 16-bit types, else the input's own."""
    return torch.float32 if dt.bits < 32 else dt.torch_dtype


def _check_epsilon(eps: object) -> None:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise AttributeValueError(f"epsilon must be a finite number >= 0, got {eps!r}")


def _eps(value: Any) -> Any:
    """Numbers become floats for the attributes; anything else is left for the type rule to reject."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _check_flags(**flags: object) -> None:
    for k, v in flags.items():
        expect_bool(v, k)


def _check_axes(axes: object, rank: int) -> tuple[int, ...]:
    if not isinstance(axes, tuple) or not axes:
        raise ShapeError(f"axes must be a non-empty tuple of ints, got {axes!r}")
    norm = normalize_axes(axes, rank)
    if norm != axes:
        raise ShapeError(f"axes {axes} must be sorted and non-negative (the builder normalises them)")
    return norm


def _fits_into(t: TensorType, target: Shape, what: str) -> None:
    """``t`` broadcasts to ``target`` without growing it (rank <= and each dim 1, dynamic or equal)."""
    ok = t.rank <= len(target) and all(
        d == 1 or d is None or e is None or d == e for d, e in zip(t.shape, target[len(target) - t.rank:], strict=True))
    if not ok:
        raise ShapeError(f"{what} of shape {format_shape(t.shape)} does not broadcast to {format_shape(target)}")


def _affine_inputs(ins: tuple[TensorType, ...], n_fixed: int, flags: Sequence[bool]) -> tuple[TensorType, ...]:
    expect_arity(ins, n_fixed + sum(flags))
    expect_dtype(ins[0], FLOAT_DTYPES, what="input")
    same_dtype(ins)
    return ins[n_fixed:]


def _place(p: torch.Tensor, axes: Sequence[int], rank: int) -> torch.Tensor:
    """Reshape a parameter laid out over the normalised dims (trailing-aligned) to broadcast against x."""
    shape = [1] * rank
    for a, d in zip(axes[len(axes) - p.dim():], p.shape, strict=True):
        shape[a] = d
    return p.reshape(shape)


def _trailing(axes: Sequence[int], rank: int) -> bool:
    return tuple(axes) == tuple(range(rank - len(axes), rank))


# ---- shared gradient helpers -----------------------------------------------------------------
Mean = Callable[[Tensor], Tensor]


def _up(g: Any, t: Tensor) -> Tensor:
    """16-bit floats take their gradient in float32, as the forward computes (the engine casts it back)."""
    return g.cast(t, float32) if t.dtype.bits < 32 else t


def _placed(g: Any, p: Tensor, axes: Sequence[int], rank: int) -> tuple[Tensor, tuple[int, ...]]:
    """A parameter laid out over the normalised dims with size-1 axes inserted so it broadcasts against
    x (the graph form of ``_place``), and the inserted axes (to squeeze its gradient back)."""
    if p.rank == 0:
        return p, ()
    first = axes[len(axes) - p.rank]
    inserted = tuple(i - first for i in range(first, rank) if i not in axes)
    return (g.expand_dims(p, axes=inserted) if inserted else p), inserted


def _standardised_vjp(g: Any, op: Any, ct: Tensor, xhat: Tensor, r: Tensor, mean: Mean, centred: bool,
                      place: Callable[[Tensor], tuple[Tensor, tuple[int, ...]]]) -> tuple[Tensor | None, ...]:
    """Gradients of ``xhat * gamma + beta`` for ``op``'s inputs ``x, [gamma,] [beta]``, where
    ``xhat = (x - mean(x)) * r`` (``centred``) or ``x * r``, ``r = rsqrt(mean of squares + eps)``."""
    flags = (op.attrs.has_gamma, getattr(op.attrs, "has_beta", False))
    params = iter(op.inputs[1:])
    gh, grads = ct, []
    for kind, present in zip(("gamma", "beta"), flags, strict=True):
        if not present:
            continue
        p, inserted = place(_up(g, next(params)))
        if kind == "gamma":
            gh = g.multiply(ct, p)
        dp = g.sum_to(g.multiply(ct, xhat) if kind == "gamma" else ct, p)
        grads.append(g.squeeze(dp, axes=inserted) if inserted else dp)
    # r * (gh - mean(gh) - xhat * mean(gh * xhat)): the mean(gh) term only when x was centred
    inner = g.subtract(gh, g.multiply(xhat, mean(g.multiply(gh, xhat))))
    if centred:
        inner = g.subtract(inner, mean(gh))
    return (g.multiply(r, inner), *grads)


# ---- normalize -------------------------------------------------------------------------------
@attrs
class NormalizeAttrs:
    epsilon: float
    has_gamma: bool = False
    has_beta: bool = False


def _normalize_rule(a: NormalizeAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    _check_epsilon(a.epsilon)
    _check_flags(has_gamma=a.has_gamma, has_beta=a.has_beta)
    _affine_inputs(ins, 3, (a.has_gamma, a.has_beta))
    return TensorType(broadcast_shapes(*(t.shape for t in ins)), ins[0].dtype)


def channel_axis(ins: Sequence[TensorType]) -> int | None:
    """The axis of ``x`` (``ins[0]``) along which every other input varies, when each of them has x's dtype and
    size 1 everywhere else (a batch norm's per-channel statistics and affine); None otherwise."""
    x, *rest = ins
    axes = set()
    for t in rest:
        if t.dtype is not x.dtype or t.rank > x.rank or x.rank < 2:
            return None
        varying = [x.rank - t.rank + j for j, d in enumerate(t.shape) if d != 1]
        if len(varying) != 1 or t.shape[varying[0] - x.rank + t.rank] != x.shape[varying[0]] or None in t.shape:
            return None
        axes.add(varying[0])
    return axes.pop() if len(axes) == 1 else None


def inference_batch_norm(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, gamma: torch.Tensor | None,
                         beta: torch.Tensor | None, axis: int, eps: float, flat: bool = False) -> torch.Tensor:
    """PyTorch's inference batch norm along ``axis`` (one pass over x, eager's values); per-channel tensors of
    any shape holding C values (``flat``: all of shape (C,) already, which saves a reshape call each)."""
    c = x.shape[axis]
    ps = [mean, var, gamma, beta] if flat else [None if t is None else t.reshape(c) for t in (mean, var, gamma, beta)]
    xc = x if axis == 1 else x.movedim(axis, 1)
    y = F.batch_norm(xc, ps[0], ps[1], ps[2], ps[3], False, 0.0, eps)
    return y if axis == 1 else y.movedim(1, axis)


def _normalize_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: NormalizeAttrs = ctx.attrs
    out, ct, eps = ctx.out_types[0].dtype.torch_dtype, compute_dtype(ctx.in_types[0].dtype), a.epsilon
    axis = channel_axis(ctx.in_types)
    if axis is not None and ctx.in_types[0].dtype.torch_dtype in (torch.float32, torch.float64):
        # per-channel statistics: PyTorch's inference batch norm, one pass over x (the formula below makes four)
        def batch_norm(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, *affine: torch.Tensor) -> torch.Tensor:
            return inference_batch_norm(x, mean, var, affine[0] if a.has_gamma else None,
                                        affine[-1] if a.has_beta else None, axis, eps)

        return batch_norm

    def up(t: torch.Tensor) -> torch.Tensor:
        return t if t.dtype == ct else t.to(ct)

    def run(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, *affine: torch.Tensor) -> torch.Tensor:
        gamma = up(affine[0]) if a.has_gamma else None
        beta = up(affine[-1]) if a.has_beta else None
        y = (up(x) - up(mean)) * torch.rsqrt(up(var) + eps)
        if gamma is not None:
            y = y * gamma
        if beta is not None:
            y = y + beta
        return y if y.dtype == out else y.to(out)

    return run


# given the statistics this is elementwise (out[i] = f(x[i], mean[i], ...) after broadcasting)
NORMALIZE = OpDef("normalize", infer=_normalize_rule, lower=_normalize_lower, attrs=NormalizeAttrs,
                  fusion=FusionKind.ELEMENTWISE,
                  doc="(x - mean) / sqrt(variance + epsilon) * gamma + beta, with broadcasting")


@defvjp(NORMALIZE)
def _normalize_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    a: NormalizeAttrs = op.attrs
    x, mean, var, *rest = op.inputs
    c = _up(g, ct[0])
    r = g.rsqrt(g.add(_up(g, var), a.epsilon))
    centred = g.subtract(_up(g, x), _up(g, mean))
    params = iter(rest)
    gamma = next(params) if a.has_gamma else None
    beta = next(params) if a.has_beta else None
    ghr = g.multiply(c if gamma is None else g.multiply(c, _up(g, gamma)), r)
    grads = [g.sum_to(ghr, x), g.sum_to(g.negative(ghr), mean),
             g.sum_to(g.multiply(g.multiply(ghr, centred), g.multiply(g.multiply(r, r), -0.5)), var)]
    if gamma is not None:
        grads.append(g.sum_to(g.multiply(c, g.multiply(centred, r)), gamma))
    if beta is not None:
        grads.append(g.sum_to(c, beta))
    return tuple(grads)


# ---- layer_norm ------------------------------------------------------------------------------
@attrs
class LayerNormAttrs:
    axes: tuple[int, ...]
    epsilon: float = 1e-5
    has_gamma: bool = False
    has_beta: bool = False


def _layer_norm_rule(a: LayerNormAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    _check_epsilon(a.epsilon)
    _check_flags(has_gamma=a.has_gamma, has_beta=a.has_beta)
    params = _affine_inputs(ins, 1, (a.has_gamma, a.has_beta))
    x = ins[0]
    axes = _check_axes(a.axes, x.rank)
    normalised = tuple(x.shape[i] for i in axes)
    for p, what in zip(params, [w for w, f in (("gamma", a.has_gamma), ("beta", a.has_beta)) if f], strict=True):
        _fits_into(p, normalised, what)
    return x


def _layer_norm_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: LayerNormAttrs = ctx.attrs
    x_t = ctx.in_types[0]
    out, ct, eps, rank, axes = x_t.dtype.torch_dtype, compute_dtype(x_t.dtype), a.epsilon, x_t.rank, a.axes
    k = len(axes)

    if _trailing(axes, rank):
        # casts and broadcasts decided here where the types allow: on the CPU each is a call per run
        normalised = x_t.shape[rank - k:]
        affine_types = ctx.in_types[1:]
        as_is = all(t.dtype.torch_dtype == ct and t.shape == normalised and None not in normalised
                    for t in affine_types)
        cast = out != ct

        def fused(x: torch.Tensor, *affine: torch.Tensor) -> torch.Tensor:
            ns = x.shape[rank - k:]
            rest = list(affine) if as_is else [p.to(ct).expand(ns) for p in affine]
            w = rest.pop(0) if a.has_gamma else None
            b = rest.pop(0) if a.has_beta else None
            if not cast:
                return F.layer_norm(x, ns, w, b, eps)
            return F.layer_norm(x.to(ct), ns, w, b, eps).to(out)

        return fused

    def composite(x: torch.Tensor, *affine: torch.Tensor) -> torch.Tensor:
        xc = x.to(ct)
        var, mean = torch.var_mean(xc, dim=axes, correction=0, keepdim=True)
        y = (xc - mean) * torch.rsqrt(var + eps)
        rest = list(affine)
        if a.has_gamma:
            y = y * _place(rest.pop(0).to(ct), axes, rank)
        if a.has_beta:
            y = y + _place(rest.pop(0).to(ct), axes, rank)
        return y.to(out)

    return composite


LAYER_NORM = OpDef("layer_norm", infer=_layer_norm_rule, lower=_layer_norm_lower, attrs=LayerNormAttrs,
                   fusion=REDUCTION, doc="normalise over axes to mean 0 and variance 1, then * gamma + beta")


@defvjp(LAYER_NORM)
def _layer_norm_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    a: LayerNormAttrs = op.attrs
    x, axes = _up(g, op.inputs[0]), list(a.axes)

    def mean(t: Tensor) -> Tensor:
        return g.reduce_mean(t, axes, keepdims=True)

    r = g.rsqrt(g.add(g.variance(x, axes, keepdims=True), a.epsilon))
    xhat = g.multiply(g.subtract(x, mean(x)), r)
    return _standardised_vjp(g, op, _up(g, ct[0]), xhat, r, mean, True, lambda p: _placed(g, p, axes, x.rank))


# ---- group_norm ------------------------------------------------------------------------------
@attrs
class GroupNormAttrs:
    num_groups: int
    epsilon: float = 1e-5
    has_gamma: bool = False
    has_beta: bool = False


def _group_norm_rule(a: GroupNormAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    _check_epsilon(a.epsilon)
    _check_flags(has_gamma=a.has_gamma, has_beta=a.has_beta)
    g = a.num_groups
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise AttributeValueError(f"num_groups must be an int >= 1, got {g!r}")
    params = _affine_inputs(ins, 1, (a.has_gamma, a.has_beta))
    x = ins[0]
    if x.rank < 2:
        raise ShapeError(f"expects an input of rank >= 2 (N, C, ...), got rank {x.rank}")
    c = x.shape[1]
    if c is not None and c % g:
        raise ShapeError(f"num_groups {g} does not divide the {c} channels")
    for p, what in zip(params, [w for w, f in (("gamma", a.has_gamma), ("beta", a.has_beta)) if f], strict=True):
        _fits_into(p, (c,), what)
    return x


def _group_norm_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: GroupNormAttrs = ctx.attrs
    x_t = ctx.in_types[0]
    out, ct = x_t.dtype.torch_dtype, compute_dtype(x_t.dtype)

    def run(x: torch.Tensor, *affine: torch.Tensor) -> torch.Tensor:
        rest = [p.to(ct).expand(x.shape[1]) for p in affine]
        w = rest.pop(0) if a.has_gamma else None
        b = rest.pop(0) if a.has_beta else None
        return F.group_norm(x.to(ct), a.num_groups, w, b, a.epsilon).to(out)

    return run


GROUP_NORM = OpDef("group_norm", infer=_group_norm_rule, lower=_group_norm_lower, attrs=GroupNormAttrs,
                   fusion=REDUCTION,
                   doc="normalise each group of channels (axis 1) over the group and the spatial dims")


@defvjp(GROUP_NORM)
def _group_norm_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    a: GroupNormAttrs = op.attrs
    x = _up(g, op.inputs[0])
    c, groups, spatial = x.shape[1], a.num_groups, list(range(2, x.rank))
    if c is None:
        raise GraphError("gradients: group_norm needs a static channel count (dimension 1) to differentiate")
    size = c // groups
    ones = (1,) * len(spatial)

    def group_sum(t: Tensor) -> Tensor:  # shaped like x -> (N, C, 1, ...): each channel's group total
        per_channel = g.reduce_sum(t, spatial, keepdims=True) if spatial else t
        grouped = g.reshape(per_channel, (-1, groups, size))
        return g.reshape(g.broadcast_like(g.reduce_sum(grouped, 2, keepdims=True), grouped), (-1, c, *ones))

    dims = [x.shape[i] for i in spatial]
    count = float(size * math.prod(dims)) if None not in dims else group_sum(g.ones_like(x))  # type: ignore[arg-type]

    def mean(t: Tensor) -> Tensor:
        return g.divide(group_sum(t), count)

    centred = g.subtract(x, mean(x))
    r = g.rsqrt(g.add(mean(g.multiply(centred, centred)), a.epsilon))

    def place(p: Tensor) -> tuple[Tensor, tuple[int, ...]]:  # (C,) -> (C, 1, ...) against (N, C, ...)
        inserted = tuple(range(1, 1 + len(spatial))) if p.rank and spatial else ()
        return (g.expand_dims(p, axes=inserted) if inserted else p), inserted

    return _standardised_vjp(g, op, _up(g, ct[0]), g.multiply(centred, r), r, mean, True, place)


# ---- rms_norm --------------------------------------------------------------------------------
@attrs
class RMSNormAttrs:
    axes: tuple[int, ...]
    epsilon: float = 1e-6
    has_gamma: bool = False


def _rms_norm_rule(a: RMSNormAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    _check_epsilon(a.epsilon)
    _check_flags(has_gamma=a.has_gamma)
    params = _affine_inputs(ins, 1, (a.has_gamma,))
    x = ins[0]
    axes = _check_axes(a.axes, x.rank)
    for p in params:
        _fits_into(p, tuple(x.shape[i] for i in axes), "gamma")
    return x


def _rms_norm_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: RMSNormAttrs = ctx.attrs
    x_t = ctx.in_types[0]
    out, ct, eps, rank, axes = x_t.dtype.torch_dtype, compute_dtype(x_t.dtype), a.epsilon, x_t.rank, a.axes
    k = len(axes)

    if _trailing(axes, rank):
        def fused(x: torch.Tensor, *gamma: torch.Tensor) -> torch.Tensor:
            ns = x.shape[rank - k:]
            w = gamma[0].to(ct).expand(ns) if gamma else None
            return F.rms_norm(x.to(ct), ns, w, eps).to(out)

        return fused

    def composite(x: torch.Tensor, *gamma: torch.Tensor) -> torch.Tensor:
        xc = x.to(ct)
        y = xc * torch.rsqrt(xc.square().mean(dim=axes, keepdim=True) + eps)
        if gamma:
            y = y * _place(gamma[0].to(ct), axes, rank)
        return y.to(out)

    return composite


RMS_NORM = OpDef("rms_norm", infer=_rms_norm_rule, lower=_rms_norm_lower, attrs=RMSNormAttrs,
                 fusion=REDUCTION, doc="x / sqrt(mean(x ** 2 over axes) + epsilon) * gamma")


@defvjp(RMS_NORM)
def _rms_norm_vjp(g: Any, op: Any, ct: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
    a: RMSNormAttrs = op.attrs
    x, axes = _up(g, op.inputs[0]), list(a.axes)

    def mean(t: Tensor) -> Tensor:
        return g.reduce_mean(t, axes, keepdims=True)

    r = g.rsqrt(g.add(mean(g.multiply(x, x)), a.epsilon))
    return _standardised_vjp(g, op, _up(g, ct[0]), g.multiply(x, r), r, mean, False,
                             lambda p: _placed(g, p, axes, x.rank))


# ---- builder methods -------------------------------------------------------------------------
class NormBuilders(GraphCore):
    """Graph methods for normalize, layer_norm, group_norm, rms_norm."""

    def _norm_params(self, x: Tensor, *params: Any) -> list[Tensor]:
        """The given (non-None) parameters as tensors; Python scalars take ``x``'s dtype."""
        return [self._as_tensor(p, like=x.dtype) for p in params if p is not None]

    def _norm_axes(self, x: Tensor, axes: Sequence[int] | int | None) -> tuple[int, ...]:
        return normalize_axes(-1 if axes is None else axes, self._as_tensor(x).rank)

    def normalize(self, x: Tensor, mean: Any, variance: Any, gamma: Any = None, beta: Any = None,
                  epsilon: float = 1e-5, *, name: str | None = None) -> Tensor:
        """``(x - mean) / sqrt(variance + epsilon) * gamma + beta`` with broadcasting (MPSGraph ``normalize``).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,), og.float32)
        >>> g.run({x: [1.0, 3.0]}, [g.normalize(x, 2.0, 1.0, epsilon=0.0)])[0].tolist()
        [-1.0, 1.0]
        """
        x = self._as_tensor(x)
        ins = [x, *self._norm_params(x, mean, variance, gamma, beta)]
        return self._apply(NORMALIZE, ins, NormalizeAttrs(_eps(epsilon), gamma is not None, beta is not None), name)

    def layer_norm(self, x: Tensor, axes: Sequence[int] | int | None = None, gamma: Any = None, beta: Any = None,
                   epsilon: float = 1e-5, *, name: str | None = None) -> Tensor:
        """Normalise over ``axes`` (default: the last); ``gamma``/``beta`` broadcast over the normalised dims.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((1, 2), og.float32)
        >>> g.run({x: [[1.0, 3.0]]}, [g.layer_norm(x, epsilon=0.0)])[0].tolist()
        [[-1.0, 1.0]]
        """
        x = self._as_tensor(x)
        ins = [x, *self._norm_params(x, gamma, beta)]
        a = LayerNormAttrs(self._norm_axes(x, axes), _eps(epsilon), gamma is not None, beta is not None)
        return self._apply(LAYER_NORM, ins, a, name)

    def group_norm(self, x: Tensor, num_groups: int, gamma: Any = None, beta: Any = None, epsilon: float = 1e-5,
                   *, name: str | None = None) -> Tensor:
        """Group normalisation of an (N, C, ...) input; ``gamma``/``beta`` have shape (C,)."""
        x = self._as_tensor(x)
        ins = [x, *self._norm_params(x, gamma, beta)]
        a = GroupNormAttrs(num_groups, _eps(epsilon), gamma is not None, beta is not None)
        return self._apply(GROUP_NORM, ins, a, name)

    def rms_norm(self, x: Tensor, axes: Sequence[int] | int | None = None, gamma: Any = None, epsilon: float = 1e-6,
                 *, name: str | None = None) -> Tensor:
        """``x / sqrt(mean(x ** 2) + epsilon) * gamma`` over ``axes`` (default: the last)."""
        x = self._as_tensor(x)
        ins = [x, *self._norm_params(x, gamma)]
        a = RMSNormAttrs(self._norm_axes(x, axes), _eps(epsilon), gamma is not None)
        return self._apply(RMS_NORM, ins, a, name)


__all__ = ["GROUP_NORM", "LAYER_NORM", "NORMALIZE", "RMS_NORM", "GroupNormAttrs", "LayerNormAttrs", "NormBuilders",
           "NormalizeAttrs", "RMSNormAttrs", "compute_dtype"]
