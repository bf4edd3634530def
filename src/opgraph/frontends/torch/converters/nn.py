"""Converters of the neural-network ATen ops left after core-ATen decomposition: convolutions and their
backward, pooling (max with PyTorch's flat indices, avg, adaptive) and its backward, batch/layer/group
normalisation, softmax, embedding, dropout without randomness, upsampling, the CPU attention backward and
the encoder layer's inference fast path.

Each converter matches PyTorch's semantics for the arguments it accepts and raises ``Unsupported`` (the node
then runs as the ATen op) where opgraph cannot express the call: uneven adaptive windows,
random dropout, upsampling scales that are not ``in / out``, attention dropout or masks in the fast path.
Some ops here are decomposed by the default core-ATen table (softmax/layer-norm/batch-norm backward, embedding
backward, upsampling); their converters serve other decomposition tables and ``torch.export`` graphs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ....core.dtype import DType, bool_, float32, float64, from_torch, int32, int64
from ....ir.graph import Tensor
from ....ops._padding import shape_or_like
from ....ops.conv import Conv2dDescriptor, Conv3dDescriptor
from ....ops.gather import ScatterMode
from ....ops.pooling import Pooling2dDescriptor, Pooling4dDescriptor, PoolingReturnIndicesMode
from ....ops.resize import ResizeNearestRoundingMode, nearest_indices
from ....ops.vendor_fused import (
    BATCH_NORM_BACKWARD,
    BATCH_NORM_UPDATE,
    LAYER_NORM_BACKWARD,
    LAYER_NORM_FORWARD,
    BatchNormBackwardAttrs,
    BatchNormUpdateAttrs,
    LayerNormVendorAttrs,
)
from ....ops.vendor_gradients import EMBEDDING_GRADIENT, EmbeddingGradientAttrs
from ..registry import ConvertContext, Unsupported, converts

aten = torch.ops.aten


# ---- helpers -------------------------------------------------------------------------------------
def _ints(value: Any, n: int, what: str) -> tuple[int, ...]:
    """ATen's int lists (one value may stand for all ``n``), as a tuple of ``n`` ints."""
    v = [value] if isinstance(value, int) else list(value)
    if len(v) == 1:
        v = v * n
    if len(v) != n or not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        raise Unsupported(f"{what} {value!r} is not {n} ints")
    return tuple(v)


def _static(shape: Sequence[int | None], what: str) -> tuple[int, ...]:
    if any(d is None for d in shape):
        raise Unsupported(f"dynamic sizes in {what}")
    return tuple(int(d) for d in shape if d is not None)


def _floating(*ts: Tensor | None) -> None:
    for t in ts:
        if t is not None and (not t.dtype.is_floating or t.dtype.is_complex):
            raise Unsupported(f"dtype {t.dtype.name} (opgraph computes this op in real floating dtypes)")


def _cast(ctx: ConvertContext, t: Tensor, dtype: DType) -> Tensor:
    return t if t.dtype is dtype else ctx.g.cast(t, dtype)


def _compute(dt: DType) -> DType:
    """The dtype the normalisations compute in: float32 for 16-bit floats."""
    return float32 if dt.bits < 32 else dt


def _want(ctx: ConvertContext, i: int, default: DType) -> DType:
    t = ctx.out_types[i] if i < len(ctx.out_types) else None
    return t.dtype if t is not None else default


def _place(ctx: ConvertContext, t: Tensor, rank: int) -> Tensor:
    """A per-channel (C,) tensor shaped to broadcast against an (N, C, ...) tensor of ``rank``."""
    return ctx.g.expand_dims(t, axes=list(range(1, rank - 1))) if rank > 2 else t


def _traced_zeros(ctx: ConvertContext, i: int) -> Tensor | None:
    """Zeros of output ``i``'s traced type, for outputs an ATen op fills with nothing useful (unused statistics,
    random-number state, debug masks); None for an output traced as no tensor."""
    t = ctx.out_types[i] if i < len(ctx.out_types) else None
    if t is None:
        return None
    return ctx.g.constant(torch.zeros(_static(t.shape, "an unused output"), dtype=t.dtype.torch_dtype))


def _unbatched(ctx: ConvertContext, x: Tensor, rank: int) -> tuple[Tensor, bool]:
    """``x`` with a batch dim of 1 added when it has ``rank - 1`` dims (PyTorch's unbatched inputs)."""
    if x.rank == rank:
        return x, False
    if x.rank == rank - 1:
        return ctx.g.expand_dims(x, 0), True
    raise Unsupported(f"an input of rank {x.rank} (expects {rank})")


def _rebatch(ctx: ConvertContext, t: Tensor | None, added: bool) -> Any:
    return ctx.g.squeeze(t, 0) if added and t is not None else t


# ---- convolution -----------------------------------------------------------------------------------
def _conv_descriptor(n: int, stride: Any, padding: Any, dilation: Any, groups: int) -> Any:
    s, p, d = _ints(stride, n, "stride"), _ints(padding, n, "padding"), _ints(dilation, n, "dilation")
    if n == 2:
        return Conv2dDescriptor(strides=(s[0], s[1]), dilation_rates=(d[0], d[1]), padding_top=p[0],
                                padding_bottom=p[0], padding_left=p[1], padding_right=p[1], groups=groups)
    return Conv3dDescriptor(strides=(s[0], s[1], s[2]), dilation_rates=(d[0], d[1], d[2]), padding_front=p[0],
                            padding_back=p[0], padding_top=p[1], padding_bottom=p[1], padding_left=p[2],
                            padding_right=p[2], groups=groups)


def _as_2d(ctx: ConvertContext, *ts: Tensor) -> list[Tensor]:
    """1-D convolution tensors (N, C, L) / (O, I, K) as 2-D ones with height 1."""
    return [ctx.g.expand_dims(t, 2) for t in ts]


def _conv_args(ctx: ConvertContext, x: Tensor, w: Tensor, stride: Any, padding: Any, dilation: Any,
               output_padding: Any) -> tuple[int, bool, tuple[Any, ...]]:
    """Spatial rank (1-D made 2-D), whether it was 1-D, and (stride, padding, dilation, output_padding)."""
    n = w.rank - 2
    if n not in (1, 2, 3) or x.rank != n + 2:
        raise Unsupported(f"a convolution of a rank-{x.rank} input with rank-{w.rank} weights")
    _floating(x, w)
    if x.dtype is not w.dtype:
        raise Unsupported("input and weights of different dtypes")
    if n == 1:  # height 1: stride and dilation 1, no padding
        s, p, d = (_ints(a, 1, what)[0] for a, what in ((stride, "stride"), (padding, "padding"),
                                                         (dilation, "dilation")))
        extra = _ints(output_padding, 1, "output_padding")[0] if output_padding else 0
        return 2, True, ((1, s), (0, p), (1, d), (0, extra))
    return n, False, (stride, padding, dilation, output_padding)


@converts(aten.convolution.default)
def _convolution(ctx: ConvertContext, x: Tensor, w: Tensor, bias: Tensor | None, stride: Any, padding: Any,
                 dilation: Any, transposed: bool, output_padding: Any, groups: int) -> Tensor:
    g = ctx.g
    n, one_d, (stride, padding, dilation, output_padding) = _conv_args(ctx, x, w, stride, padding, dilation,
                                                                       output_padding)
    out_shape = ctx.out_type.shape
    if one_d:
        x, w = _as_2d(ctx, x, w)
        out_shape = (out_shape[0], out_shape[1], 1, out_shape[2])
    d = _conv_descriptor(n, stride, padding, dilation, groups)
    if not transposed:
        y = g.conv2d(x, w, d) if n == 2 else g.conv3d(x, w, d)
    elif n == 2:  # the data gradient of the forward convolution: output_padding picks the output size
        y = g.conv_transpose2d(x, w, _static(out_shape, "a transposed convolution's result"), d)
    else:
        y = g.conv3d_data_gradient(x, w, _static(out_shape, "a transposed convolution's result"), d)
    if one_d:
        y = g.squeeze(y, 2)
    if bias is not None:
        y = g.add(y, _place(ctx, _cast(ctx, bias, y.dtype), y.rank))
    return y


@converts(aten.convolution_backward.default)
def _convolution_backward(ctx: ConvertContext, gy: Tensor, x: Tensor, w: Tensor, bias_sizes: Any, stride: Any,
                          padding: Any, dilation: Any, transposed: bool, output_padding: Any, groups: int,
                          output_mask: Sequence[bool]) -> tuple[Tensor | None, ...]:
    g = ctx.g
    n, one_d, (stride, padding, dilation, _) = _conv_args(ctx, x, w, stride, padding, dilation, output_padding)
    _floating(gy)
    grad_bias = g.reduce_sum(gy, [0, *range(2, gy.rank)]) if output_mask[2] else None
    if one_d:
        gy, x, w = _as_2d(ctx, gy, x, w)
    d = _conv_descriptor(n, stride, padding, dilation, groups)
    conv, data, weights = ((g.conv2d, g.conv2d_data_gradient, g.conv2d_weights_gradient) if n == 2 else
                           (g.conv3d, g.conv3d_data_gradient, g.conv3d_weights_gradient))
    dx = dw = None
    if transposed:  # y = data(x, w): dx = conv(dy, w), dw = weights(x, dy) (x stands where conv's result is)
        if output_mask[0]:
            dx = conv(gy, w, d)
        if output_mask[1]:
            dw = weights(x, gy, shape_or_like(w), d)
    else:
        if output_mask[0]:
            dx = data(gy, w, shape_or_like(x), d)
        if output_mask[1]:
            dw = weights(gy, x, shape_or_like(w), d)
    if one_d:
        dx, dw = (None if t is None else g.squeeze(t, 2) for t in (dx, dw))
    return dx, dw, grad_bias


# ---- pooling -------------------------------------------------------------------------------------
# 2-D pooling uses opgraph's 2-D ops on (N, C, H, W); 3-D pooling its 4-D ops on the window (1, kD, kH, kW) over
# the innermost (C, D, H, W), with indices flattened over (D, H, W): PyTorch's d * H * W + h * W + w.
Pooling = Pooling2dDescriptor | Pooling4dDescriptor


def _pool_descriptor(n: int, kernel: Any, stride: Any, padding: Any, dilation: Any = 1, ceil_mode: bool = False,
                     count_include_pad: bool = False, indices: bool = False) -> Pooling:
    k = _ints(kernel, n, "kernel_size")
    s = _ints(stride, n, "stride") if stride else k  # an empty stride is the kernel size
    p, d = _ints(padding, n, "padding"), _ints(dilation, n, "dilation")
    ceil, include = bool(ceil_mode), bool(count_include_pad)
    if n == 3:
        mode = PoolingReturnIndicesMode.GLOBAL_FLATTEN_3D if indices else PoolingReturnIndicesMode.NONE
        return Pooling4dDescriptor((1, k[0], k[1], k[2]), (1, s[0], s[1], s[2]), (1, d[0], d[1], d[2]),
                                   (0, 0, p[0], p[0], p[1], p[1], p[2], p[2]), ceil_mode=ceil,
                                   include_zero_pad_to_average=include, return_indices_mode=mode,
                                   return_indices_data_type=int64)
    mode = PoolingReturnIndicesMode.GLOBAL_FLATTEN_2D if indices else PoolingReturnIndicesMode.NONE
    return Pooling2dDescriptor(kernel_width=k[1], kernel_height=k[0], stride_in_x=s[1], stride_in_y=s[0],
                               dilation_rate_in_x=d[1], dilation_rate_in_y=d[0], padding_left=p[1],
                               padding_right=p[1], padding_top=p[0], padding_bottom=p[0], ceil_mode=ceil,
                               include_zero_pad_to_average=include, return_indices_mode=mode,
                               return_indices_data_type=int64)


def _pooled(ctx: ConvertContext, x: Tensor, d: Pooling) -> tuple[Tensor, bool]:
    """``x`` as the pooling ops take it: 2-D ones need a batch dim; 4-D ones pool the innermost dims of any rank."""
    _floating(x)
    if isinstance(d, Pooling4dDescriptor):
        if x.rank not in (4, 5):
            raise Unsupported(f"3-D pooling of a rank-{x.rank} input")
        return x, False
    return _unbatched(ctx, x, 4)


def _pool_op(ctx: ConvertContext, kind: str, d: Pooling) -> Callable[..., Any]:
    """The graph method ``kind`` with "pool" spelled as the descriptor's 2-D or 4-D ops spell it."""
    fn: Callable[..., Any] = getattr(ctx.g, kind.replace("pool", "pool2d" if isinstance(d, Pooling2dDescriptor)
                                                          else "pool4d", 1))
    return fn


def _max_pool(ctx: ConvertContext, x: Tensor, d: Pooling) -> tuple[Tensor, Tensor]:
    x, added = _pooled(ctx, x, d)
    y, idx = _pool_op(ctx, "max_pool_return_indices", d)(x, d)
    return _rebatch(ctx, y, added), _rebatch(ctx, idx, added)


def _max_pool_backward(ctx: ConvertContext, gy: Tensor, x: Tensor, idx: Tensor, d: Pooling) -> Tensor:
    _floating(gy)
    x, added = _pooled(ctx, x, d)
    if added:
        gy, idx = ctx.g.expand_dims(gy, 0), ctx.g.expand_dims(idx, 0)
    return _rebatch(ctx, _pool_op(ctx, "max_pool_gradient", d)(gy, idx, shape_or_like(x), d), added)


def _avg_factor(x: Tensor, d: Pooling, divisor_override: Any) -> float:
    """What an avg pool counting the padding is multiplied by to divide by ``divisor_override`` instead."""
    if divisor_override is None:
        return 1.0
    if not d.include_zero_pad_to_average:
        raise Unsupported("divisor_override with count_include_pad=False")
    kernel = d.kernel_sizes
    sizes = _static(x.shape[-len(kernel):], "an avg pool with divisor_override")
    for size, k, s, (p, _) in zip(sizes, kernel, d.strides, d.padding_pairs, strict=True):
        out = -(-(size + 2 * p - k) // s) + 1 if d.ceil_mode else (size + 2 * p - k) // s + 1
        if d.ceil_mode and (out - 1) * s >= size + p:
            out -= 1
        if (out - 1) * s + k > size + 2 * p:  # a window cut short by ceil_mode: its divisor is not the kernel's
            raise Unsupported("divisor_override with ceil_mode windows past the padding")
    return float(math.prod(kernel)) / float(divisor_override)


def _avg_pool(ctx: ConvertContext, n: int, x: Tensor, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
              count_include_pad: bool, divisor_override: Any, gy: Tensor | None = None) -> Tensor:
    """avg_pool{n}d of ``x``, or with ``gy`` its backward."""
    d = _pool_descriptor(n, kernel_size, stride, padding, 1, ceil_mode,
                         count_include_pad or divisor_override is not None)
    factor = _avg_factor(x, d, divisor_override)
    x, added = _pooled(ctx, x, d)
    if gy is None:
        y = _pool_op(ctx, "avg_pool", d)(x, d)
        return _rebatch(ctx, y if factor == 1.0 else ctx.g.multiply(y, factor), added)
    _floating(gy)
    gy = ctx.g.expand_dims(gy, 0) if added else gy
    gy = gy if factor == 1.0 else ctx.g.multiply(gy, factor)
    return _rebatch(ctx, _pool_op(ctx, "avg_pool_gradient", d)(gy, x, d), added)


def _adaptive_descriptor(n: int, x: Tensor, output_size: Sequence[int | None], indices: bool = False) -> Pooling:
    """Adaptive pooling as a fixed window: only when each output cell covers the same number of inputs."""
    sizes = _static(x.shape[-n:], "adaptive pooling")
    outs = _static(tuple(output_size), "adaptive pooling's output size")
    if len(outs) != n or any(o < 1 or s % o for s, o in zip(sizes, outs, strict=True)):
        raise Unsupported(f"adaptive pooling of {sizes} to {outs}: windows of different sizes")
    kernel = [s // o for s, o in zip(sizes, outs, strict=True)]
    return _pool_descriptor(n, kernel, kernel, 0, indices=indices)


def _adaptive_windows(size: int, out: int) -> list[range]:
    """PyTorch's adaptive window of each output cell: [floor(i * size / out), ceil((i + 1) * size / out))."""
    return [range(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _window_sums(ctx: ConvertContext, x: Tensor, axis: int, picks: Sequence[Sequence[tuple[int, float]]]) -> Tensor:
    """``y[.., j, ..] = sum of w * x[.., i, ..] for (i, w) in picks[j]`` along ``axis``: a gather of the widest
    window (short ones padded with weight 0) and a weighted sum, computed in float32 for 16-bit inputs."""
    g = ctx.g
    width = max(len(p) for p in picks)
    index = torch.tensor([[i for i, _ in p] + [p[0][0]] * (width - len(p)) for p in picks], dtype=torch.int32)
    weight = torch.tensor([[w for _, w in p] + [0.0] * (width - len(p)) for p in picks], dtype=torch.float64)
    dt = _compute(x.dtype)
    picked = g.gather(_cast(ctx, x, dt), g.constant(index), axis=axis)  # (.., J, width, ..)
    weight = weight.reshape(weight.shape + (1,) * (x.rank - axis - 1)).to(dt.torch_dtype)
    return _cast(ctx, g.reduce_sum(g.multiply(picked, g.constant(weight)), [axis + 1]), x.dtype)


def _uneven_adaptive_avg(ctx: ConvertContext, t: Tensor, sizes: Sequence[int], outs: Sequence[int],
                         backward: bool) -> Tensor:
    """Adaptive average pooling of ``sizes`` to ``outs`` (or, ``backward``, its gradient: ``t`` has the shape
    ``outs``) with windows of different sizes, one axis at a time (a box average is an average of averages)."""
    first = t.rank - len(sizes)
    for a, (size, out) in enumerate(zip(sizes, outs, strict=True)):
        windows = _adaptive_windows(size, out)
        if backward:  # each input gets 1/len of the gradient of every window holding it
            picks = [[(j, 1.0 / len(w)) for j, w in enumerate(windows) if i in w] for i in range(size)]
        else:
            picks = [[(i, 1.0 / len(w)) for i in w] for w in windows]
        t = _window_sums(ctx, t, first + a, picks)
    return t


def _nonempty_windows(sizes: Sequence[int], outs: Sequence[int]) -> None:
    if len(sizes) != len(outs) or min(*sizes, *outs) < 1:
        raise Unsupported(f"adaptive pooling of {tuple(sizes)} to {tuple(outs)}: an empty size")


def _adaptive_avg(ctx: ConvertContext, n: int, x: Tensor, output_size: Any) -> Tensor:
    outs = _ints(output_size, n, "output_size")
    if all(o == 1 for o in outs):  # global: a mean, which fuses
        _floating(x)
        return ctx.g.reduce_mean(x, list(range(-n, 0)), keepdims=True)
    try:
        d = _adaptive_descriptor(n, x, outs)
    except Unsupported:
        _floating(x)
        sizes = _static(x.shape[-n:], "adaptive pooling")
        _nonempty_windows(sizes, outs)
        return _uneven_adaptive_avg(ctx, x, sizes, outs, backward=False)
    x, added = _pooled(ctx, x, d)
    return _rebatch(ctx, _pool_op(ctx, "avg_pool", d)(x, d), added)


def _adaptive_avg_backward(ctx: ConvertContext, n: int, gy: Tensor, x: Tensor) -> Tensor:
    _floating(gy)
    try:
        d = _adaptive_descriptor(n, x, gy.shape[-n:])
    except Unsupported:
        outs = _static(gy.shape[-n:], "adaptive pooling's output size")
        sizes = _static(x.shape[-n:], "adaptive pooling")
        _nonempty_windows(sizes, outs)
        return _uneven_adaptive_avg(ctx, gy, sizes, outs, backward=True)
    x, added = _pooled(ctx, x, d)
    gy = ctx.g.expand_dims(gy, 0) if added else gy
    return _rebatch(ctx, _pool_op(ctx, "avg_pool_gradient", d)(gy, x, d), added)


def _register_pools(n: int) -> None:
    """The {n}-d pooling ops and their backward (``kernel_size``, ``stride``, ... as ATen passes them)."""

    def max_pool(ctx: ConvertContext, x: Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                 dilation: Any = 1, ceil_mode: bool = False) -> tuple[Tensor, Tensor]:
        return _max_pool(ctx, x, _pool_descriptor(n, kernel_size, stride, padding, dilation, ceil_mode, indices=True))

    def max_pool_backward(ctx: ConvertContext, gy: Tensor, x: Tensor, kernel_size: Any, stride: Any, padding: Any,
                          dilation: Any, ceil_mode: bool, idx: Tensor) -> Tensor:
        d = _pool_descriptor(n, kernel_size, stride, padding, dilation, ceil_mode, indices=True)
        return _max_pool_backward(ctx, gy, x, idx, d)

    def avg_pool(ctx: ConvertContext, x: Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> Tensor:
        return _avg_pool(ctx, n, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)

    def avg_pool_backward(ctx: ConvertContext, gy: Tensor, x: Tensor, kernel_size: Any, stride: Any, padding: Any,
                          ceil_mode: bool, count_include_pad: bool, divisor_override: Any) -> Tensor:
        return _avg_pool(ctx, n, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, gy)

    def adaptive_avg(ctx: ConvertContext, x: Tensor, output_size: Any) -> Tensor:
        return _adaptive_avg(ctx, n, x, output_size)

    def adaptive_avg_backward(ctx: ConvertContext, gy: Tensor, x: Tensor) -> Tensor:
        return _adaptive_avg_backward(ctx, n, gy, x)

    def adaptive_max(ctx: ConvertContext, x: Tensor, output_size: Any) -> tuple[Tensor, Tensor]:
        return _max_pool(ctx, x, _adaptive_descriptor(n, x, _ints(output_size, n, "output_size"), indices=True))

    def adaptive_max_backward(ctx: ConvertContext, gy: Tensor, x: Tensor, idx: Tensor) -> Tensor:
        return _max_pool_backward(ctx, gy, x, idx, _adaptive_descriptor(n, x, gy.shape[-n:], indices=True))

    for name, fn in ((f"max_pool{n}d_with_indices", max_pool), (f"avg_pool{n}d", avg_pool),
                     (f"_adaptive_avg_pool{n}d", adaptive_avg), (f"adaptive_max_pool{n}d", adaptive_max),
                     (f"max_pool{n}d_with_indices_backward", max_pool_backward),
                     (f"avg_pool{n}d_backward", avg_pool_backward),
                     (f"_adaptive_avg_pool{n}d_backward", adaptive_avg_backward),
                     (f"adaptive_max_pool{n}d_backward", adaptive_max_backward)):
        converts(getattr(aten, name).default)(fn)


_register_pools(2)
_register_pools(3)


# ---- batch normalisation -----------------------------------------------------------------------------
def _batch_stats(ctx: ConvertContext, x: Tensor, w: Tensor | None, b: Tensor | None,
                 eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(y, batch mean, biased batch variance, 1 / sqrt(variance + eps)) in training mode."""
    _floating(x, w, b)
    if x.rank < 2:
        raise Unsupported(f"batch norm of a rank-{x.rank} input")
    y, mean, var = ctx.g.batch_norm_training(x, w, b, axis=1, epsilon=float(eps))
    return y, mean, var, ctx.g.rsqrt(ctx.g.add(var, float(eps)))


@converts(aten._native_batch_norm_legit_functional.default)
def _batch_norm_functional(ctx: ConvertContext, x: Tensor, w: Tensor | None, b: Tensor | None, running_mean: Tensor,
                           running_var: Tensor, training: bool, momentum: float,
                           eps: float) -> tuple[Tensor, ...]:
    if not training:
        raise Unsupported("functional batch norm outside training (PyTorch uses _no_training for it)")
    g = ctx.g
    st = _compute(x.dtype)
    if ctx.vendor_ops and x.rank >= 2 and x.dtype.is_floating and not x.dtype.is_complex \
            and all(t.dtype is st for t in (w, b, running_mean, running_var) if t is not None):
        # no kernels generated here: PyTorch's one call, not a batch norm and 8 more ops for the update
        ins = [x, *(t for t in (w, b) if t is not None), running_mean, running_var]
        whole = g._apply_multi(BATCH_NORM_UPDATE, ins, BatchNormUpdateAttrs(float(momentum), float(eps),
                                                                            w is not None, b is not None))
        return tuple(_cast(ctx, t, _want(ctx, i, t.dtype)) for i, t in enumerate(whole))
    y, mean, var, rstd = _batch_stats(ctx, x, w, b, eps)
    m = float(momentum)
    stat = _want(ctx, 1, mean.dtype)

    def update(i: int, old: Tensor, new: Tensor, factor: float | Tensor) -> Tensor:  # (1 - m) old + m unbiased new
        dt = _want(ctx, i, old.dtype)  # 16-bit running statistics are updated in float32
        scaled = g.multiply(_cast(ctx, new, dt), m * factor) if isinstance(factor, float) else \
            g.multiply(g.multiply(_cast(ctx, new, dt), factor), m)
        return g.add(g.multiply(_cast(ctx, old, dt), 1.0 - m), scaled)

    # n / (n - 1) for the n values per channel: a number when static, read from x's dims when dynamic (the
    # builder's rule; it refuses a single value per channel, which then runs as the ATen op)
    bessel = g._bessel(x, (0, *range(2, x.rank)), _want(ctx, 4, running_var.dtype))
    return (y, _cast(ctx, mean, stat), _cast(ctx, rstd, stat), update(3, running_mean, mean, 1.0),
            update(4, running_var, var, bessel))


@converts(aten._native_batch_norm_legit.no_stats)
def _batch_norm_no_stats(ctx: ConvertContext, x: Tensor, w: Tensor | None, b: Tensor | None, training: bool,
                         momentum: float, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    if not training:
        raise Unsupported("batch norm without running statistics outside training")
    y, mean, _, rstd = _batch_stats(ctx, x, w, b, eps)
    return y, mean, rstd


def _batch_norm_inference(ctx: ConvertContext, x: Tensor, w: Tensor | None, b: Tensor | None, running_mean: Tensor,
                          running_var: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    _floating(x, w, b, running_mean, running_var)
    if x.rank < 2:
        raise Unsupported(f"batch norm of a rank-{x.rank} input")
    g = ctx.g
    y = g.batch_norm(x, running_mean, running_var, w, b, training=False, epsilon=float(eps)).output
    t = ctx.out_types[1] if len(ctx.out_types) > 1 else None
    if t is not None and t.shape != (0,):  # CUDA returns the running statistics there, which its backward reads
        rstd = g.rsqrt(g.add(_cast(ctx, running_var, t.dtype), float(eps)))
        return y, _cast(ctx, running_mean, t.dtype), _cast(ctx, rstd, _want(ctx, 2, t.dtype))
    unused = _traced_zeros(ctx, 1), _traced_zeros(ctx, 2)
    if unused[0] is None or unused[1] is None:
        raise Unsupported("batch norm statistics traced as no tensors")
    return y, unused[0], unused[1]


@converts(aten._native_batch_norm_legit_no_training.default)
def _batch_norm_no_training(ctx: ConvertContext, x: Tensor, w: Tensor | None, b: Tensor | None,
                            running_mean: Tensor, running_var: Tensor, momentum: float,
                            eps: float) -> tuple[Tensor, Tensor, Tensor]:
    return _batch_norm_inference(ctx, x, w, b, running_mean, running_var, eps)


@converts(aten._native_batch_norm_legit.default)
def _batch_norm_legit(ctx: ConvertContext, x: Tensor, w: Tensor | None, b: Tensor | None, running_mean: Tensor,
                      running_var: Tensor, training: bool, momentum: float,
                      eps: float) -> tuple[Tensor, Tensor, Tensor]:
    if training:
        raise Unsupported("batch norm updating the running statistics in place (not functionalised)")
    return _batch_norm_inference(ctx, x, w, b, running_mean, running_var, eps)


@converts(aten.native_batch_norm.default)
def _native_batch_norm(ctx: ConvertContext, x: Tensor, w: Tensor | None, b: Tensor | None, running_mean: Tensor | None,
                       running_var: Tensor | None, training: bool, momentum: float,
                       eps: float) -> tuple[Tensor, Tensor, Tensor]:
    if not training and running_mean is not None and running_var is not None:
        return _batch_norm_inference(ctx, x, w, b, running_mean, running_var, eps)
    if not training or running_mean is not None or running_var is not None:
        raise Unsupported("batch norm updating the running statistics in place (not functionalised)")
    y, mean, _, rstd = _batch_stats(ctx, x, w, b, eps)
    return y, mean, rstd


@converts(aten.native_batch_norm_backward.default)
def _batch_norm_backward(ctx: ConvertContext, gy: Tensor, x: Tensor, w: Tensor | None, running_mean: Tensor | None,
                         running_var: Tensor | None, save_mean: Tensor | None, save_invstd: Tensor | None,
                         train: bool, eps: float, output_mask: Sequence[bool]) -> tuple[Tensor | None, ...]:
    """``dbeta = sum(dy)``, ``dgamma = sum(dy * xhat)``; ``dx = gamma * r * (dy - mean(dy) - xhat * mean(dy * xhat))``
    with the batch statistics in training, ``dx = gamma * r * dy`` with the running ones otherwise."""
    g = ctx.g
    _floating(gy, x, w)
    ct = _compute(x.dtype)
    if train and ctx.vendor_ops and save_mean is not None and save_invstd is not None and x.rank >= 2 \
            and gy.type == x.type:  # no kernels generated here: PyTorch's one call, not a pass per elementwise op
        stats = [_cast(ctx, t, ct) for t in (save_mean, save_invstd, *(() if w is None else (w,)))]
        whole = g._apply_multi(BATCH_NORM_BACKWARD, [gy, x, *stats], BatchNormBackwardAttrs(w is not None))
        return tuple(_cast(ctx, t, _want(ctx, i, x.dtype if i == 0 else ct)) if output_mask[i] else None
                     for i, t in enumerate(whole))
    if train:
        if save_mean is None or save_invstd is None:
            raise Unsupported("training batch norm backward without saved statistics")
        mean, r = _cast(ctx, save_mean, ct), _cast(ctx, save_invstd, ct)
    else:
        if running_mean is None or running_var is None:
            raise Unsupported("inference batch norm backward without running statistics")
        mean, r = _cast(ctx, running_mean, ct), g.rsqrt(g.add(_cast(ctx, running_var, ct), float(eps)))
    rank = x.rank
    axes = [0, *range(2, rank)]
    dy = _cast(ctx, gy, ct)
    xhat = g.multiply(g.subtract(_cast(ctx, x, ct), _place(ctx, mean, rank)), _place(ctx, r, rank))
    dbeta = g.reduce_sum(dy, axes)
    dgamma = g.reduce_sum(g.multiply(dy, xhat), axes)
    scale = r if w is None else g.multiply(_cast(ctx, w, ct), r)
    dx = None
    if output_mask[0]:
        if train:
            n = float(math.prod(_static([x.shape[a] for a in axes], "batch norm backward")))
            inner = g.subtract(g.subtract(dy, _place(ctx, g.divide(dbeta, n), rank)),
                               g.multiply(xhat, _place(ctx, g.divide(dgamma, n), rank)))
        else:
            inner = dy
        dx = _cast(ctx, g.multiply(inner, _place(ctx, scale, rank)), _want(ctx, 0, x.dtype))
    return (dx, _cast(ctx, dgamma, _want(ctx, 1, ct)) if output_mask[1] else None,
            _cast(ctx, dbeta, _want(ctx, 2, ct)) if output_mask[2] else None)


# ---- layer and group normalisation ------------------------------------------------------------------
def _vendor_layer_norm(ctx: ConvertContext, x: Tensor, w: Tensor | None, b: Tensor | None) -> bool:
    """Where no kernels are generated: float32/float64 layer norms with static normalised dims and parameters of
    x's dtype run as PyTorch's calls (beta only with gamma)."""
    return ctx.vendor_ops and x.dtype in (float32, float64) and not (w is None and b is not None) \
        and all(t is None or t.dtype is x.dtype for t in (w, b)) and x.type.is_static


@converts(aten.native_layer_norm.default)
def _layer_norm(ctx: ConvertContext, x: Tensor, normalized_shape: Sequence[int], w: Tensor | None, b: Tensor | None,
                eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(y, mean, rstd); the statistics keep the normalised dims as 1s (unused ones are dead code)."""
    g = ctx.g
    _floating(x, w, b)
    k = len(normalized_shape)
    if not 0 < k <= x.rank:
        raise Unsupported(f"layer norm over {k} dims of a rank-{x.rank} input")
    if _vendor_layer_norm(ctx, x, w, b):  # no kernels generated here: PyTorch's one call, statistics included
        affine = [t for t in (w, b) if t is not None]
        y, mean, rstd = g._apply_multi(LAYER_NORM_FORWARD, [x, *affine], LayerNormVendorAttrs(k, float(eps)))
        return y, mean, rstd
    axes = list(range(x.rank - k, x.rank))
    if any(p is not None and p.dtype is not x.dtype for p in (w, b)):  # autocast: 16-bit x, float32 affine
        ct = _compute(x.dtype)
        wc = None if w is None else _cast(ctx, w, ct)
        bc = None if b is None else _cast(ctx, b, ct)
        y = _cast(ctx, g.layer_norm(_cast(ctx, x, ct), axes, wc, bc, float(eps)), _want(ctx, 0, x.dtype))
    else:
        y = g.layer_norm(x, axes, w, b, float(eps))
    xc = _cast(ctx, x, _compute(x.dtype))
    mean = g.reduce_mean(xc, axes, keepdims=True)
    rstd = g.rsqrt(g.add(g.variance(xc, axes, keepdims=True), float(eps)))
    return y, _cast(ctx, mean, _want(ctx, 1, mean.dtype)), _cast(ctx, rstd, _want(ctx, 2, rstd.dtype))


@converts(aten.native_layer_norm_backward.default)
def _layer_norm_backward(ctx: ConvertContext, gy: Tensor, x: Tensor, normalized_shape: Sequence[int], mean: Tensor,
                         rstd: Tensor, w: Tensor | None, b: Tensor | None,
                         output_mask: Sequence[bool]) -> tuple[Tensor | None, ...]:
    """``dx = r * (dy w - mean(dy w) - xhat * mean(dy w xhat))`` over the normalised dims; ``dw``, ``db`` sum
    ``dy * xhat`` and ``dy`` over the others."""
    g = ctx.g
    _floating(gy, x, w)
    k = len(normalized_shape)
    if _vendor_layer_norm(ctx, x, w, b) and w is not None and b is not None and gy.type == x.type \
            and mean.type == rstd.type and mean.dtype is x.dtype:
        whole = g._apply_multi(LAYER_NORM_BACKWARD, [gy, x, mean, rstd, w, b], LayerNormVendorAttrs(k))
        return tuple(t if output_mask[i] else None for i, t in enumerate(whole))
    inner, outer = list(range(x.rank - k, x.rank)), list(range(x.rank - k))
    ct = _compute(x.dtype)
    dy, r = _cast(ctx, gy, ct), _cast(ctx, rstd, ct)
    xhat = g.multiply(g.subtract(_cast(ctx, x, ct), _cast(ctx, mean, ct)), r)

    def over_outer(t: Tensor) -> Tensor:
        return g.reduce_sum(t, outer) if outer else t

    dx = dw = db = None
    if output_mask[0]:
        gw = dy if w is None else g.multiply(dy, _cast(ctx, w, ct))
        centred = g.subtract(gw, g.reduce_mean(gw, inner, keepdims=True))
        dx = g.multiply(g.subtract(centred, g.multiply(xhat, g.reduce_mean(g.multiply(gw, xhat), inner,
                                                                            keepdims=True))), r)
        dx = _cast(ctx, dx, _want(ctx, 0, x.dtype))
    if output_mask[1] and w is not None:
        dw = _cast(ctx, over_outer(g.multiply(dy, xhat)), _want(ctx, 1, w.dtype))
    if output_mask[2] and b is not None:
        db = _cast(ctx, over_outer(dy), _want(ctx, 2, b.dtype))
    return dx, dw, db


@converts(aten.native_group_norm.default)
def _group_norm(ctx: ConvertContext, x: Tensor, w: Tensor | None, b: Tensor | None, n: Any, c: Any, hxw: Any,
                group: int, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(y, mean, rstd), the statistics per (sample, group): shape (N, group)."""
    g = ctx.g
    _floating(x, w, b)
    if not isinstance(n, int) or x.rank < 2:
        raise Unsupported("group norm with a symbolic batch size")
    y = g.group_norm(x, group, w, b, float(eps))
    grouped = g.reshape(_cast(ctx, x, _compute(x.dtype)), (n, group, -1))
    mean = g.reduce_mean(grouped, 2)
    rstd = g.rsqrt(g.add(g.variance(grouped, 2), float(eps)))
    return y, _cast(ctx, mean, _want(ctx, 1, mean.dtype)), _cast(ctx, rstd, _want(ctx, 2, rstd.dtype))


# ---- softmax ------------------------------------------------------------------------------------------
@converts(aten._softmax.default)
def _softmax(ctx: ConvertContext, x: Tensor, dim: int, half_to_float: bool) -> Tensor:
    _floating(x)
    return ctx.g.softmax(_cast(ctx, x, float32) if half_to_float else x, dim)


@converts(aten._log_softmax.default)
def _log_softmax(ctx: ConvertContext, x: Tensor, dim: int, half_to_float: bool) -> Tensor:
    _floating(x)
    return ctx.g.log_softmax(_cast(ctx, x, float32) if half_to_float else x, dim)


@converts(aten._softmax_backward_data.default)
def _softmax_backward(ctx: ConvertContext, gy: Tensor, y: Tensor, dim: int, input_dtype: torch.dtype) -> Tensor:
    g = ctx.g  # y * (dy - sum(dy * y))
    _floating(gy, y)
    dx = g.multiply(y, g.subtract(gy, g.reduce_sum(g.multiply(gy, y), dim, keepdims=True)))
    return _cast(ctx, dx, from_torch(input_dtype))


# ---- embedding ----------------------------------------------------------------------------------------
@converts(aten.embedding.default)
def _embedding(ctx: ConvertContext, weight: Tensor, indices: Tensor, padding_idx: int = -1,
               scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    if not indices.dtype.is_integer:
        raise Unsupported(f"embedding indices of dtype {indices.dtype.name}")
    return ctx.g.gather(weight, indices, axis=0)


@converts(aten.embedding_dense_backward.default)
def _embedding_backward(ctx: ConvertContext, gy: Tensor, indices: Tensor, num_weights: Any, padding_idx: Any,
                        scale_grad_by_freq: bool) -> Tensor:
    """Each row of ``dy`` added into the weight row its index names (none for ``padding_idx``); divided by
    the index's count in the batch with ``scale_grad_by_freq``."""
    g = ctx.g
    _floating(gy)
    if not isinstance(num_weights, int) or not isinstance(padding_idx, int) or gy.shape[-1] is None:
        raise Unsupported("symbolic sizes in embedding backward")
    if ctx.vendor_ops and indices.dtype in (int32, int64) and gy.rank == indices.rank + 1:
        return g._apply(EMBEDDING_GRADIENT, [gy, indices],  # PyTorch's one call: a zero fill and an index add
                        EmbeddingGradientAttrs(num_weights, padding_idx, bool(scale_grad_by_freq)))
    dim = int(gy.shape[-1])
    idx = g.reshape(indices, (-1,))
    rows = g.reshape(gy, (-1, dim))
    if padding_idx >= 0:
        rows = g.select(g.expand_dims(g.not_equal(idx, padding_idx), 1), rows, 0.0)
    if scale_grad_by_freq:
        counts = g.scatter(g.broadcast_to(g.constant(0.0, gy.dtype), (num_weights,)),
                           g.fill_like(idx, 1.0, gy.dtype), idx, 0, ScatterMode.ADD)
        rows = g.divide(rows, g.expand_dims(g.gather(counts, idx, axis=0), 1))
    zeros = g.broadcast_to(g.constant(0.0, gy.dtype), (num_weights, dim))
    return g.scatter(zeros, rows, idx, 0, ScatterMode.ADD)


# ---- dropout ------------------------------------------------------------------------------------------
@converts(aten.native_dropout.default)
def _native_dropout(ctx: ConvertContext, x: Tensor, p: float, train: bool | None) -> tuple[Tensor, Tensor]:
    """Dropout without randomness only: outside training or with p 0 (all kept) or 1 (all dropped)."""
    g = ctx.g
    keep_all = train is False or p == 0
    if not keep_all and p != 1:
        raise Unsupported("random dropout (opgraph has no random ops yet)")
    mask = g.fill_like(x, keep_all, bool_)
    return (x if keep_all else g.zeros_like(x)), mask


# ---- upsampling ---------------------------------------------------------------------------------------
def _upsample_size(ctx: ConvertContext, x: Tensor, scales: Sequence[Any], uses_scales: bool) -> tuple[int, ...]:
    """The result's (height, width); a given scale must be PyTorch's out / in, or its coordinates differ."""
    if x.rank != 4:
        raise Unsupported(f"2-D upsampling of a rank-{x.rank} input")
    outs = _static(ctx.out_type.shape[-2:], "an upsampling result")
    sizes = _static(x.shape[-2:], "an upsampling input")
    if uses_scales:
        for s, n, m in zip(scales, sizes, outs, strict=True):
            if s is not None and s > 0 and 1.0 / float(s) != n / m:
                raise Unsupported(f"upsampling by {s} from {n} to {m} (source coordinates use 1 / scale)")
    return outs


def _scales(scale_factors: Any) -> list[Any]:
    return list(scale_factors) if scale_factors else [None, None]


def _nearest(ctx: ConvertContext, x: Tensor, scales: list[Any], exact: bool = False) -> Tensor:
    """PyTorch's nearest ("nearest-exact": half-pixel centres rounded half up) where its source pixels, which it
    computes in float32 (and from ``1 / scale`` when given), are the exact ``floor(d * in / out)`` ones."""
    size = _upsample_size(ctx, x, scales, False)
    mode = ResizeNearestRoundingMode.ROUND_PREFER_CEIL if exact else ResizeNearestRoundingMode.FLOOR
    op = aten._upsample_nearest_exact2d.default if exact else aten.upsample_nearest2d.default
    for axis, m in enumerate(size):
        n = _static(x.shape[2 + axis:3 + axis], "an upsampling input")[0]
        probe = torch.arange(n, dtype=torch.float64).view(1, 1, n, 1)  # PyTorch's own source index per pixel
        theirs = op(probe, [m, 1], scales[axis], None)[0, 0, :, 0].long()
        if not torch.equal(theirs, nearest_indices(n, m, exact, False, mode)):
            raise Unsupported(f"nearest upsampling from {n} to {m}: PyTorch's float32 source indices are not exact")
    return ctx.g.resize_nearest(x, size, center_result=exact, nearest_rounding_mode=mode)


@converts(aten.upsample_nearest2d.vec)
def _upsample_nearest_vec(ctx: ConvertContext, x: Tensor, output_size: Any, scale_factors: Any) -> Tensor:
    return _nearest(ctx, x, _scales(scale_factors))


@converts(aten.upsample_nearest2d.default)
def _upsample_nearest(ctx: ConvertContext, x: Tensor, output_size: Any, scales_h: Any = None,
                      scales_w: Any = None) -> Tensor:
    return _nearest(ctx, x, [scales_h, scales_w])


@converts(aten._upsample_nearest_exact2d.vec)
def _upsample_nearest_exact_vec(ctx: ConvertContext, x: Tensor, output_size: Any, scale_factors: Any) -> Tensor:
    return _nearest(ctx, x, _scales(scale_factors), exact=True)


@converts(aten._upsample_nearest_exact2d.default)
def _upsample_nearest_exact(ctx: ConvertContext, x: Tensor, output_size: Any, scales_h: Any = None,
                            scales_w: Any = None) -> Tensor:
    return _nearest(ctx, x, [scales_h, scales_w], exact=True)


def _bilinear(ctx: ConvertContext, x: Tensor, align_corners: bool, scales: list[Any]) -> Tensor:
    _floating(x)
    size = _upsample_size(ctx, x, scales, not align_corners)  # align_corners ignores the scales
    return ctx.g.resize_bilinear(x, size, center_result=not align_corners, align_corners=bool(align_corners))


@converts(aten.upsample_bilinear2d.vec)
def _upsample_bilinear_vec(ctx: ConvertContext, x: Tensor, output_size: Any, align_corners: bool,
                           scale_factors: Any) -> Tensor:
    return _bilinear(ctx, x, align_corners, _scales(scale_factors))


@converts(aten.upsample_bilinear2d.default)
def _upsample_bilinear(ctx: ConvertContext, x: Tensor, output_size: Any, align_corners: bool, scales_h: Any = None,
                       scales_w: Any = None) -> Tensor:
    return _bilinear(ctx, x, align_corners, [scales_h, scales_w])


__all__: list[str] = []
