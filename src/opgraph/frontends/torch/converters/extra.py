"""Converters of ATen ops outside the other families: ``masked_scatter`` (and its backward), ``_embedding_bag``
(forward, forward-only and the dense, per-sample-weight backward), ``atan2.out`` and ``native_group_norm_backward``.

Data-dependent positions become running sums: ``masked_scatter`` reads ``source`` at the running count of true mask
values, and each embedding-bag index finds its bag as ATen builds ``offset2bag`` (ones scatter-added at the
run-time offsets, then a running sum). The embedding bag follows ATen's CPU kernel in all four results, including
the private ``offset2bag``, ``bag_size`` and ``max_indices`` that its backward reads: zeros where the kernel writes
zeros, and ``offset2bag`` left empty on the fast sum path, except for bfloat16, whose fast path PyTorch's meta
function misses (the full ``offset2bag`` it traces is given: ATen's backward would rebuild the same). It assumes the
documented contract of the offsets (``offsets[0] == 0``, non-decreasing, and with ``include_last_offset`` a last
offset of ``len(indices)``), which ATen checks and a graph cannot.

Unsupported (the node runs as the ATen op): 2-D indices, sparse gradients, empty inputs, ``scale_grad_by_freq`` in
the backward (ATen's CPU kernel divides by the count of another index), and calls whose other traced shapes
(PyTorch's meta function) differ from what the CPU kernel returns. CUDA's kernel differs in the private outputs;
these converters reproduce the CPU ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ....core.dtype import DType, bfloat16, float16, float32, int64
from ....core.types import TensorType
from ....ir.graph import Tensor
from ....ops.gather import ScatterMode
from ..registry import ConvertContext, Unsupported, converts
from .elementwise import _binary, _result_dtype
from .nn import _cast, _compute, _floating, _static, _want
from .shape import ints, slice_axis

aten = torch.ops.aten

_SUM, _MEAN, _MAX = 0, 1, 2
_FAST_SUM = (float32, float16, bfloat16)  # ATen's CPU fast sum path: it leaves offset2bag empty


def _zeros(ctx: ConvertContext, shape: Sequence[int], dt: DType, value: float = 0) -> Tensor:
    return ctx.g.constant(torch.full(tuple(shape), value, dtype=dt.torch_dtype))


def _running_count(ctx: ConvertContext, flags: Tensor) -> Tensor:
    """How many of ``flags`` (1-D bool) are true up to and including each position, minus one (int64)."""
    return ctx.g.subtract(ctx.g.cumulative_sum(ctx.g.cast(flags, int64), 0), 1)


# ---- masked_scatter ------------------------------------------------------------------------------------------
def _broadcast(ctx: ConvertContext, x: Tensor, shape: tuple[int, ...]) -> Tensor:
    return x if tuple(x.shape) == shape else ctx.g.broadcast_to(x, shape)


@converts(aten.masked_scatter.default)
def _masked_scatter(ctx: ConvertContext, x: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """The k-th true position (row-major, ``x`` and ``mask`` broadcast together) takes ``source``'s k-th element."""
    g = ctx.g
    if not mask.dtype.is_bool:
        raise Unsupported(f"a {mask.dtype.name} mask (ATen takes bool)")
    shape = _static(ctx.out_type.shape, "masked_scatter's result")
    m = math.prod(_static(source.shape, "masked_scatter's source"))
    if math.prod(shape) == 0:
        raise Unsupported("masked_scatter of an empty tensor")
    xb, mb = _broadcast(ctx, x, shape), _broadcast(ctx, mask, shape)
    if m == 0:  # nothing to take (ATen raises if any mask value is true)
        return xb
    k = g.clamp(_running_count(ctx, g.reshape(mb, (-1,))), 0, m - 1)  # before the first true: -1, unused
    taken = g.reshape(g.gather(g.reshape(_cast(ctx, source, x.dtype), (-1,)), k, axis=0), shape)
    return g.select(mb, taken, xb)


@converts(aten.masked_scatter_backward.default)
def _masked_scatter_backward(ctx: ConvertContext, grad: Tensor, mask: Tensor, sizes: Any) -> Tensor:
    """``source``'s gradient: the gradient at the k-th true position into element k, zeros after the last one."""
    g = ctx.g
    out_shape = ints(sizes, "masked_scatter_backward sizes")
    numel = math.prod(out_shape)
    shape = tuple(torch.broadcast_shapes(_static(grad.shape, "a gradient"), _static(mask.shape, "a mask")))
    if numel == 0 or math.prod(shape) == 0:
        raise Unsupported("masked_scatter_backward of an empty tensor")
    flat_mask = g.reshape(_broadcast(ctx, mask, shape), (-1,))
    dest = g.select(flat_mask, _running_count(ctx, flat_mask), numel)  # false positions go to a spare slot
    data = _zeros(ctx, (numel + 1,), grad.dtype)
    out = g.scatter(data, g.reshape(_broadcast(ctx, grad, shape), (-1,)), dest, 0, ScatterMode.SET)
    return g.reshape(slice_axis(ctx, out, 0, 0, numel), out_shape)


# ---- atan2.out -----------------------------------------------------------------------------------------------
_atan2 = _binary("atan2")


@converts(aten.atan2.out)
def _atan2_out(ctx: ConvertContext, x: Any, y: Any, *, out: Any = None) -> Tensor:
    """The functional result, computed in the inputs' dtype and cast to ``out``'s as ATen does; ``out`` itself is
    not written (out= variants appear only in graphs that were not functionalised: their users read the result)."""
    dt = _result_dtype(x, y)
    if not dt.is_floating:
        dt = ctx.dtype(torch.get_default_dtype())
    inner = ConvertContext(ctx.g, [TensorType(ctx.out_type.shape, dt)], ctx.size_refs)
    return _cast(ctx, _atan2(inner, x, y), ctx.out_type.dtype)


# ---- embedding bag -------------------------------------------------------------------------------------------
def _bag_of(ctx: ConvertContext, offsets: Tensor, n: int) -> Tensor:
    """ATen's offset2bag: ones added at each offset into n + 1 zeros, a running sum, minus one (int64)."""
    g = ctx.g
    off = _cast(ctx, offsets, int64)
    hist = g.scatter(_zeros(ctx, (n + 1,), int64), g.fill_like(off, 1), off, 0, ScatterMode.ADD)
    return g.subtract(slice_axis(ctx, g.cumulative_sum(hist, 0), 0, 0, n), 1)


def _keep(ctx: ConvertContext, indices: Tensor, padding_idx: Any) -> Tensor | None:
    """Where an index is not ``padding_idx`` (None without one: ATen's ``-1``; indices are never negative)."""
    if not isinstance(padding_idx, int):
        raise Unsupported(f"padding_idx {padding_idx!r}")
    return ctx.g.not_equal(indices, padding_idx) if padding_idx >= 0 else None


def _bag_sizes(ctx: ConvertContext, offsets: Tensor, bag: Tensor, keep: Tensor | None, n: int,
               num_bags: int) -> Tensor:
    """ATen's bag_size: each bag's offset to the next (the last ends at n), less the padding indices it holds."""
    g = ctx.g
    off = _cast(ctx, offsets, int64)
    last = g.constant(torch.tensor([n]))
    ends = last if num_bags == 1 else g.concat([slice_axis(ctx, off, 0, 1, num_bags), last], 0)
    sizes = g.subtract(ends, slice_axis(ctx, off, 0, 0, num_bags))
    if keep is None:
        return sizes
    pads = g.scatter(_zeros(ctx, (num_bags,), int64), g.cast(g.logical_not(keep), int64), bag, 0, ScatterMode.ADD)
    return g.subtract(sizes, pads)


def _bag_sum(ctx: ConvertContext, weight: Tensor, indices: Tensor, bag: Tensor, keep: Tensor | None,
             psw: Tensor | None, num_bags: int) -> Tensor:
    """Each bag's (weighted) sum of its rows, accumulated in float32 for 16-bit weights as ATen's CPU kernel."""
    g = ctx.g
    ct = _compute(weight.dtype)
    rows = _cast(ctx, g.gather(weight, indices, axis=0), ct)
    if psw is not None:
        rows = g.multiply(rows, g.expand_dims(_cast(ctx, psw, ct), 1))
    if keep is not None:
        rows = g.select(g.expand_dims(keep, 1), rows, 0.0)
    total = g.scatter(_zeros(ctx, (num_bags, int(weight.shape[1] or 0)), ct), rows, bag, 0, ScatterMode.ADD)
    return _cast(ctx, total, weight.dtype)


def _bag_max(ctx: ConvertContext, weight: Tensor, indices: Tensor, bag: Tensor, keep: Tensor | None, n: int,
             num_bags: int) -> tuple[Tensor, Tensor]:
    """(max, max_indices) per bag and feature as ATen's CPU loop: the first item starts the maximum, a later one
    replaces it only when greater (so ties keep the first, and a NaN counts only as the first); empty bags 0."""
    g = ctx.g
    d = int(weight.shape[1] or 0)
    rows = g.gather(weight, indices, axis=0)
    pos = g.constant(torch.arange(n).unsqueeze(1))
    live = pos if keep is None else g.select(g.expand_dims(keep, 1), pos, n)
    first = g.scatter(_zeros(ctx, (num_bags, 1), int64, n), live, bag, 0, ScatterMode.MIN)
    is_first = g.equal(pos, g.gather(first, bag, axis=0))
    nan = g.isnan(rows)
    ignored = nan if keep is None else g.logical_or(g.expand_dims(g.logical_not(keep), 1), nan)
    cand = g.select(ignored, -math.inf, rows)
    top = g.scatter(_zeros(ctx, (num_bags, d), weight.dtype, -math.inf), cand, bag, 0, ScatterMode.MAX)
    hit = g.logical_or(g.logical_and(g.logical_not(ignored), g.equal(cand, g.gather(top, bag, axis=0))),
                       g.logical_and(is_first, nan))
    at = g.scatter(_zeros(ctx, (num_bags, d), int64, n), g.select(hit, pos, n), bag, 0, ScatterMode.MIN)
    words = g.gather(g.concat([_cast(ctx, indices, int64), g.constant(torch.tensor([0]))], 0), at, axis=0)
    nonempty = g.less(first, n)
    return g.select(nonempty, g.gather_along_axis(weight, words, 0), 0.0), words


def _private_shapes(weight: Tensor, n: int, b: int, num_bags: int, mode: int, padding_idx: int,
                    requires_grad: bool) -> list[tuple[int, ...]]:
    """The shapes of offset2bag, bag_size and max_indices that ATen's CPU kernel returns."""
    fast = mode == _SUM and weight.dtype in _FAST_SUM and padding_idx < 0
    bag_size = (b,) if mode == _SUM and not requires_grad else (num_bags,)
    d = int(weight.shape[1] or 0)
    return [(0,) if fast else (n,), bag_size, (num_bags, d) if mode == _MAX else bag_size]


def _bag_checks(ctx: ConvertContext, weight: Tensor, indices: Tensor, offsets: Tensor, mode: Any,
                psw: Tensor | None) -> tuple[int, int]:
    """(number of indices, number of offsets) once the call is one these converters express."""
    _floating(weight, psw)
    if weight.rank != 2 or indices.rank != 1 or offsets.rank != 1:
        raise Unsupported(f"embedding_bag of rank-{indices.rank} indices (1-D indices with offsets only)")
    if not (indices.dtype.is_integer and offsets.dtype.is_integer):
        raise Unsupported("embedding_bag indices or offsets that are not integers")
    if mode not in (_SUM, _MEAN, _MAX) or (psw is not None and mode != _SUM):
        raise Unsupported(f"embedding_bag mode {mode!r} with per_sample_weights={psw is not None}")
    n = _static(indices.shape, "embedding_bag indices")[0]
    b = _static(offsets.shape, "embedding_bag offsets")[0]
    _static(weight.shape, "embedding_bag weights")
    if n == 0 or b == 0:
        raise Unsupported("embedding_bag with no indices or no offsets")
    return n, b


def _embedding_bag_impl(ctx: ConvertContext, weight: Tensor, indices: Tensor, offsets: Tensor, mode: int,
                        psw: Tensor | None, include_last_offset: bool, padding_idx: int,
                        requires_grad: bool) -> tuple[Tensor, ...]:
    g = ctx.g
    n, b = _bag_checks(ctx, weight, indices, offsets, mode, psw)
    num_bags = b - 1 if include_last_offset else b
    if num_bags < 1:
        raise Unsupported("embedding_bag with no bags")
    shapes = _private_shapes(weight, n, b, num_bags, mode, padding_idx, requires_grad)
    traced = [_static(t.shape, "embedding_bag results") if t is not None else None for t in ctx.out_types[1:4]]
    if traced[0] == (n,):  # the meta function misses bfloat16's fast path: give the offset2bag it traced
        shapes[0] = (n,)
    if traced != shapes:
        raise Unsupported(f"the traced shapes {traced} of offset2bag, bag_size and max_indices differ from the "
                          f"CPU kernel's {shapes} (PyTorch's meta function disagrees with it here)")
    keep = _keep(ctx, indices, padding_idx)
    bag = _bag_of(ctx, slice_axis(ctx, offsets, 0, 0, num_bags) if include_last_offset else offsets, n)
    sizes = _bag_sizes(ctx, offsets, bag, keep, n, num_bags) if mode != _SUM else _zeros(ctx, shapes[1], int64)
    if mode == _MAX:
        out, max_indices = _bag_max(ctx, weight, indices, bag, keep, n, num_bags)
    else:
        out, max_indices = _bag_sum(ctx, weight, indices, bag, keep, psw, num_bags), sizes
        if mode == _MEAN:  # ATen divides the result, in its dtype, by max(bag_size, 1)
            out = g.divide(out, g.expand_dims(g.cast(g.maximum(sizes, 1), weight.dtype), 1))
    offset2bag = _zeros(ctx, (0,), int64) if shapes[0] == (0,) else bag
    results = [offset2bag, sizes, max_indices]
    return (out, *(_cast(ctx, t, _want(ctx, i + 1, int64)) for i, t in enumerate(results)))


def _embedding_bag_converter(requires_grad: bool) -> Callable[..., tuple[Tensor, ...]]:
    """(output, offset2bag, bag_size, max_indices); the forward ignores ``scale_grad_by_freq`` and ``sparse``.
    The forward-only op differs in one output: a sum's bag_size (unused without a backward) has one entry per
    offset."""

    def convert(ctx: ConvertContext, weight: Tensor, indices: Tensor, offsets: Tensor, scale_grad_by_freq: bool = False,
                mode: int = 0, sparse: bool = False, per_sample_weights: Tensor | None = None,
                include_last_offset: bool = False, padding_idx: int = -1) -> tuple[Tensor, ...]:
        return _embedding_bag_impl(ctx, weight, indices, offsets, mode, per_sample_weights, bool(include_last_offset),
                                   padding_idx, requires_grad=requires_grad)

    return convert


converts(aten._embedding_bag.default)(_embedding_bag_converter(requires_grad=True))
converts(aten._embedding_bag_forward_only.default)(_embedding_bag_converter(requires_grad=False))


def _given_bags(ctx: ConvertContext, indices: Tensor, offsets: Tensor, offset2bag: Tensor) -> Tensor:
    """offset2bag as the backward reads it: rebuilt from all the offsets when the fast sum path left it empty."""
    n = _static(indices.shape, "embedding_bag indices")[0]
    if offset2bag.shape[0] == 0 and n != 0:
        return _bag_of(ctx, offsets, n)
    return offset2bag


@converts(aten._embedding_bag_backward.default)
def _embedding_bag_backward(ctx: ConvertContext, grad: Tensor, indices: Tensor, offsets: Tensor,
                            offset2bag: Tensor, bag_size: Tensor, maximum_indices: Tensor, num_weights: Any,
                            scale_grad_by_freq: bool, mode: int, sparse: bool, per_sample_weights: Tensor | None,
                            padding_idx: int = -1) -> Tensor:
    if sparse:
        raise Unsupported("a sparse embedding_bag gradient")
    return _embedding_bag_dense_backward(ctx, grad, indices, _given_bags(ctx, indices, offsets, offset2bag),
                                         bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode,
                                         per_sample_weights, padding_idx)


@converts(aten._embedding_bag_dense_backward.default)
def _embedding_bag_dense_backward(ctx: ConvertContext, grad: Tensor, indices: Tensor, offset2bag: Tensor,
                                  bag_size: Tensor, maximum_indices: Tensor | None, num_weights: Any,
                                  scale_grad_by_freq: bool, mode: int, per_sample_weights: Tensor | None,
                                  padding_idx: int = -1) -> Tensor:
    """max: each non-empty bag's gradient into the rows its max_indices name; sum/mean: each index's bag gradient
    (times its weight, over its bag's size for mean) into its row, padding indices left out."""
    g = ctx.g
    _floating(grad, per_sample_weights)
    if not isinstance(num_weights, int) or grad.rank != 2 or grad.shape[1] is None:
        raise Unsupported("embedding_bag backward with symbolic sizes")
    if scale_grad_by_freq:
        raise Unsupported("scale_grad_by_freq (ATen's CPU kernel divides by the count of another index)")
    shape = (num_weights, int(grad.shape[1]))
    if mode == _MAX:
        if maximum_indices is None or maximum_indices.rank != 2:
            raise Unsupported("max embedding_bag backward without per-feature max_indices")
        live = g.select(g.expand_dims(g.not_equal(bag_size, 0), 1), grad, 0.0)
        return g.scatter_along_axis(_zeros(ctx, shape, grad.dtype), live, maximum_indices, 0, ScatterMode.ADD)
    if offset2bag.shape[0] != indices.shape[0] or mode not in (_SUM, _MEAN):
        raise Unsupported(f"embedding_bag backward of mode {mode!r} with offset2bag of shape {offset2bag.shape}")
    ct = _compute(grad.dtype)
    rows = _cast(ctx, g.gather(grad, offset2bag, axis=0), ct)
    scale = None if per_sample_weights is None else _cast(ctx, per_sample_weights, ct)
    if mode == _MEAN:  # ATen scales by 1 / bag_size where it is not 0
        sizes = _cast(ctx, g.gather(bag_size, offset2bag, axis=0), ct)
        scale = g.select(g.equal(sizes, 0.0), 1.0, g.divide(1.0, sizes))
    if scale is not None:
        rows = g.multiply(rows, g.expand_dims(scale, 1))
    keep = _keep(ctx, indices, padding_idx)
    if keep is not None:
        rows = g.select(g.expand_dims(keep, 1), rows, 0.0)
    return _cast(ctx, g.scatter(_zeros(ctx, shape, ct), rows, indices, 0, ScatterMode.ADD), grad.dtype)


@converts(aten._embedding_bag_per_sample_weights_backward.default)
def _embedding_bag_per_sample_weights_backward(ctx: ConvertContext, grad: Tensor, weight: Tensor, indices: Tensor,
                                               offsets: Tensor, offset2bag: Tensor, mode: int,
                                               padding_idx: int = -1) -> Tensor:
    """Each index's weight gradient: its bag's gradient dotted with its row (0 for padding indices)."""
    g = ctx.g
    _floating(grad, weight)
    if mode != _SUM:
        raise Unsupported("per_sample_weights outside mode='sum'")
    ct = _compute(grad.dtype)
    bag = _given_bags(ctx, indices, offsets, offset2bag)
    rows = _cast(ctx, g.gather(weight, indices, axis=0), ct)
    dots = g.reduce_sum(g.multiply(_cast(ctx, g.gather(grad, bag, axis=0), ct), rows), 1)
    keep = _keep(ctx, indices, padding_idx)
    if keep is not None:
        dots = g.select(keep, dots, 0.0)
    return _cast(ctx, dots, _want(ctx, 0, grad.dtype))


# ---- group norm backward -------------------------------------------------------------------------------------
@converts(aten.native_group_norm_backward.default)
def _group_norm_backward(ctx: ConvertContext, gy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, w: Tensor | None,
                         n: Any, c: Any, hxw: Any, group: int,
                         output_mask: Sequence[bool]) -> tuple[Tensor | None, ...]:
    """With ``xhat = (x - mean) * rstd`` per (sample, group) (statistics of shape (N, group)):
    ``dx = rstd * (dy w - mean(dy w) - xhat * mean(dy w xhat))`` over each group's channels and positions,
    ``dw = sum(dy * xhat)`` and ``db = sum(dy)`` per channel over samples and positions."""
    g = ctx.g
    _floating(gy, x, w)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, c, hxw, group)) or group < 1 or c % group:
        raise Unsupported("group norm backward with symbolic sizes")
    ct = _compute(x.dtype)
    grouped = (n, group, c // group, hxw)
    r = g.reshape(_cast(ctx, rstd, ct), (n, group, 1, 1))
    dy = g.reshape(_cast(ctx, gy, ct), grouped)
    xhat = g.multiply(g.subtract(g.reshape(_cast(ctx, x, ct), grouped),
                                 g.reshape(_cast(ctx, mean, ct), (n, group, 1, 1))), r)
    dx = dw = db = None
    if output_mask[0]:
        gw = dy if w is None else g.multiply(dy, g.reshape(_cast(ctx, w, ct), (1, group, c // group, 1)))
        centred = g.subtract(gw, g.reduce_mean(gw, [2, 3], keepdims=True))
        inner = g.multiply(xhat, g.reduce_mean(g.multiply(gw, xhat), [2, 3], keepdims=True))
        dx = g.reshape(g.multiply(g.subtract(centred, inner), r), _static(x.shape, "group norm input"))
        dx = _cast(ctx, dx, _want(ctx, 0, x.dtype))
    if output_mask[1]:
        dw = _cast(ctx, g.reshape(g.reduce_sum(g.multiply(dy, xhat), [0, 3]), (c,)), _want(ctx, 1, ct))
    if output_mask[2]:
        db = _cast(ctx, g.reshape(g.reduce_sum(dy, [0, 3]), (c,)), _want(ctx, 2, ct))
    return dx, dw, db


__all__: list[str] = []
