"""Batch normalisation, composed from graph ops (reduce_mean, variance, normalize, assign).

There is no batch-norm op: the builder decomposes it, so gradients flow through the VJP rules of
the parts and fusion sees ordinary elementwise ops and reductions. In training mode the batch
statistics normalise the input (biased variance) and two ``assign`` ops update the running
statistics in place with PyTorch's rule (``new = (1 - momentum) * old + momentum * stat``, the
unbiased variance for the running variance); the builder returns those ``Operation``s, to be run
through ``target_ops``. In inference mode the running statistics normalise the input.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

from ..core.dtype import float32
from ..core.errors import AttributeValueError, DTypeError, ShapeError
from ..core.shape import normalize_axis
from ..ir.graph import GraphCore, Operation, Tensor
from .state import VARIABLE, expect_variable


class BatchNormResult(NamedTuple):
    """``batch_norm``'s result: the normalised tensor and the running-statistics updates (empty in
    inference mode), to be run through ``target_ops``."""

    output: Tensor
    updates: tuple[Operation, ...]


def _check_momentum(momentum: object) -> float:
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0.0 <= momentum <= 1.0:
        raise AttributeValueError(f"batch_norm: momentum must be a number in [0, 1], got {momentum!r}")
    return float(momentum)


def _check_epsilon(epsilon: object) -> float:
    if (isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon)
            or epsilon < 0):
        raise AttributeValueError(f"batch_norm: epsilon must be a finite number >= 0, got {epsilon!r}")
    return float(epsilon)


class BatchNormBuilders(GraphCore):
    """Graph methods for batch normalisation."""

    def batch_norm(self, x: Tensor, running_mean: Tensor, running_var: Tensor, gamma: Any = None,
                   beta: Any = None, *, training: bool, momentum: float = 0.1, epsilon: float = 1e-5,
                   axis: int = 1, name: str | None = None) -> BatchNormResult:
        """Batch normalisation over every dim but ``axis`` (the channels), as ``torch.nn.functional.batch_norm``.

        ``running_mean``/``running_var`` (shape ``(C,)``) are variables in training mode; ``gamma``/``beta``
        have shape ``(C,)``. Returns ``(output, updates)``: run ``updates`` through ``target_ops`` to write
        the new running statistics.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((2, 1), og.float32)
        >>> rm, rv = g.variable(torch.zeros(1)), g.variable(torch.ones(1))
        >>> y, updates = g.batch_norm(x, rm, rv, training=True, momentum=0.5, epsilon=0.0)
        >>> g.run({x: [[1.0], [5.0]]}, [y], target_ops=updates)[0].tolist()
        [[-1.0], [1.0]]
        >>> g.variable_value(rm).tolist(), g.variable_value(rv).tolist()
        ([1.5], [4.5])
        """
        g: Any = self
        x = self._as_tensor(x)
        if not isinstance(training, bool):
            raise AttributeValueError(f"batch_norm: training must be a bool, got {training!r}")
        m, eps = _check_momentum(momentum), _check_epsilon(epsilon)
        if not x.dtype.is_floating:
            raise DTypeError(f"batch_norm: expects a floating input, got {x.dtype.name}")
        if x.rank < 2:
            raise ShapeError(f"batch_norm: expects an input of rank >= 2 (N, C, ...), got {x.type}")
        ax = normalize_axis(axis, x.rank, "batch_norm: axis")
        channels = x.shape[ax]
        stats = [self._as_tensor(t) for t in (running_mean, running_var)]
        affine = [None if p is None else self._as_tensor(p, like=x.dtype) for p in (gamma, beta)]
        for what, t in zip(("running_mean", "running_var", "gamma", "beta"), (*stats, *affine), strict=True):
            if t is None:
                continue
            if t.rank != 1 or (t.shape[0] is not None and channels is not None and t.shape[0] != channels):
                raise ShapeError(f"batch_norm: {what} must have shape ({channels},) (the size of axis {ax} "
                                 f"of {x.type}), got {t.type}")
            if not t.dtype.is_floating:
                raise DTypeError(f"batch_norm: {what} must be floating, got {t.dtype.name}")
        if training:
            for what, t in zip(("running_mean", "running_var"), stats, strict=True):
                expect_variable(t, f"batch_norm: {what} in training mode")
        # 16-bit inputs compute in float32 and round once, as normalize does
        ct = float32 if x.dtype.bits < 32 else x.dtype
        xc = x if ct is x.dtype else g.cast(x, ct)
        trailing = x.rank - 1 - ax
        size = channels if channels is not None else -1

        def per_channel(t: Tensor) -> Tensor:
            """A (C,) tensor in the compute dtype, shaped to broadcast along ``axis``."""
            t = t if t.dtype is ct else g.cast(t, ct)
            return g.reshape(t, (size,) + (1,) * trailing) if trailing else t

        # the current value of a variable (after earlier assigns in the run), any other tensor as is
        current = [g.read(t) if t.op.op is VARIABLE else t for t in stats]
        updates: tuple[Operation, ...] = ()
        if training:
            axes = tuple(a for a in range(x.rank) if a != ax)
            mean = g.reduce_mean(xc, axes)
            var = g.variance(xc, axes)
            updates = (self._running_update(stats[0], current[0], mean, m),
                       self._running_update(stats[1], current[1], g.multiply(var, self._bessel(x, axes, ct)), m))
        else:
            mean, var = current
        params = [None if p is None else per_channel(p) for p in affine]
        y = g.normalize(xc, per_channel(mean), per_channel(var), params[0], params[1], eps,
                        name=name if ct is x.dtype else None)
        if ct is not x.dtype:
            y = g.cast(y, x.dtype, name=name)
        return BatchNormResult(y, updates)

    def _bessel(self, x: Tensor, axes: tuple[int, ...], dtype: Any) -> Tensor:
        """``n / (n - 1)`` for the ``n`` elements each channel's statistics reduce (read at run time if dynamic)."""
        g: Any = self
        dims = [x.shape[a] for a in axes]
        if all(d is not None for d in dims):
            n = math.prod(d for d in dims if d is not None)
            if n <= 1:
                raise ShapeError(f"batch_norm: training needs more than one value per channel, {x.type} has {n}")
            # divided in ``dtype``, as the dynamic path does, so both give the same bits
            return g.constant(torch.tensor(n, dtype=dtype.torch_dtype) / (n - 1))
        n = g.cast(g.reduce_prod(g.gather(g.shape_of(x), g.constant(list(axes)))), dtype)
        return g.divide(n, g.subtract(n, 1.0))

    def _running_update(self, variable: Tensor, current: Tensor, stat: Tensor, momentum: float) -> Operation:
        g: Any = self
        if stat.dtype is not variable.dtype:
            stat = g.cast(stat, variable.dtype)
        if stat.shape != variable.shape:
            stat = g.reshape(stat, variable.shape)  # a dynamic channel count: the variable's is static
        new = g.add(g.multiply(current, 1.0 - momentum), g.multiply(stat, momentum))
        op: Operation = g.assign(variable, new)
        return op


__all__ = ["BatchNormBuilders", "BatchNormResult"]
