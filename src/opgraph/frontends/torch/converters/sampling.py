"""Converters of the sampling ATen ops: ``grid_sampler_2d`` (F.grid_sample) and its backward, ``col2im`` (F.fold)
and ``im2col`` (F.unfold).

grid_sample's positions come from a run-time grid, so they are computed in the graph and the pixels fetched by one
batched gather from the flattened image: an output pixel is a weighted sum of its taps (1 nearest, 4 bilinear,
16 bicubic); a tap outside the image (zero padding) reads pixel 0 with weight 0. The coordinate arithmetic follows
PyTorch's CPU kernel (GridSamplerKernel.cpp) operation for operation (unnormalising, reflecting, clipping NaN to 0,
nearest's ties to even), so that the pixels picked agree, not only the formulas. Its backward, which the default
core-ATen table keeps, scatter-adds the weighted output gradient into the image, and gives the grid the pixels times
the derivatives of the tap weights.

col2im and im2col move pixels by static index tables, built on the host; both are separable: a gather along H, then
one along W (weighted sums for col2im, as ``_window_sums``). The default core-ATen table decomposes both (into
index_put and index); these converters serve other tables and ``torch.export`` graphs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ....core.dtype import DType, int32
from ....ir.graph import Tensor
from ....ops.gather import ScatterMode
from ..registry import ConvertContext, Unsupported, converts
from .nn import _cast, _compute, _floating, _ints, _rebatch, _static, _unbatched, _window_sums

aten = torch.ops.aten

BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2
_A = -0.75  # the cubic convolution's constant (PyTorch's, as in its bicubic upsampling)

# one tap along an axis: (pixel position, weight, d weight / d grid coordinate); None weight means 1
AxisTap = tuple[Tensor, Tensor | None, Tensor | None]


# ---- coordinates (PyTorch's ComputeLocation) -------------------------------------------------------
class _Axis:
    """Grid coordinates along one image axis of ``size`` pixels turned into pixel positions, with the
    multiplier of their gradient, as PyTorch's vectorised CPU kernel computes them."""

    def __init__(self, ctx: ConvertContext, size: int, padding: int, align: bool, ct: DType) -> None:
        self.g, self.size, self.padding, self.align, self.ct = ctx.g, size, padding, align, ct
        self.scale = (size - 1) / 2 if align else size / 2
        self.low = 0.0 if align else -0.5  # reflections land in [low, low + span]
        self.twice = 2.0 * (size - 1) if align else 2.0 * size
        self.empty = align and size <= 1  # nothing to reflect in: position 0

    def unnormalize(self, c: Tensor) -> Tensor:
        u = self.g.multiply(self.g.add(c, 1.0), self.scale)
        return u if self.align else self.g.subtract(u, 0.5)

    def clip(self, u: Tensor) -> Tensor:
        """``u`` in [0, size - 1]; NaN becomes 0 (fmax)."""
        return self.g.minimum(self.g.maximum(u, 0.0), float(self.size - 1))

    def inside(self, u: Tensor) -> Tensor:
        """Strictly inside (0, size - 1): the clip passes the gradient (PyTorch counts the borders as outside)."""
        return self.g.logical_and(self.g.greater(u, 0.0), self.g.less(u, float(self.size - 1)))

    def _fold(self, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(u - low, the distance into the current double span, the distance back from its end)."""
        g = self.g
        v = u if self.low == 0.0 else g.subtract(u, self.low)
        a = g.abs(v)
        extra = g.subtract(a, g.multiply(g.truncate(g.divide(a, self.twice)), self.twice))
        return v, extra, g.subtract(self.twice, extra)

    def reflect(self, u: Tensor) -> Tensor:
        if self.empty:
            return self.g.zeros_like(u)
        _, extra, back = self._fold(u)
        return self.g.add(self.g.minimum(extra, back), self.low)

    def pad(self, u: Tensor) -> Tensor:
        """PyTorch's ``compute_coordinates``: the padding mode applied to positions already in pixels."""
        if self.padding == BORDER:
            return self.clip(u)
        if self.padding == REFLECTION:
            return self.clip(self.reflect(u))
        return u

    def position(self, c: Tensor) -> Tensor:
        return self.pad(self.unnormalize(c))

    def position_and_grad(self, c: Tensor) -> tuple[Tensor, Tensor]:
        """The position and d position / d c (PyTorch's ``apply_get_grad``)."""
        g = self.g
        u = self.unnormalize(c)
        if self.padding == ZEROS:
            return u, g.fill_like(u, self.scale)
        if self.padding == BORDER:
            return self.clip(u), g.multiply(g.cast(self.inside(u), self.ct), self.scale)
        if self.empty:
            return g.zeros_like(u), g.zeros_like(u)
        v, extra, back = self._fold(u)
        flip = g.greater(extra, back)  # past the span's middle: one more reflection
        r = g.add(g.select(flip, back, extra), self.low)
        sign = g.select(g.logical_xor(flip, g.less(v, 0.0)), g.constant(-self.scale, self.ct), self.scale)
        return self.clip(r), g.select(self.inside(r), sign, 0.0)

    def valid(self, p: Tensor) -> Tensor:
        return self.g.logical_and(self.g.greater_equal(p, 0.0), self.g.less_equal(p, float(self.size - 1)))


def _cubic(g: Any, t: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    """The four cubic convolution coefficients at fraction ``t`` and PyTorch's ``get_cubic_coefficients_grad``
    (minus their derivatives)."""

    def near(x: Tensor) -> Tensor:  # |x| <= 1
        return g.add(g.multiply(g.multiply(g.subtract(g.multiply(x, _A + 2), _A + 3), x), x), 1.0)

    def far(x: Tensor) -> Tensor:  # 1 < |x| < 2
        return g.subtract(g.multiply(g.add(g.multiply(g.subtract(g.multiply(x, _A), 5 * _A), x), 8 * _A), x), 4 * _A)

    one_minus = g.subtract(1.0, t)
    coeffs = [far(g.add(t, 1.0)), near(t), near(one_minus), far(g.subtract(2.0, t))]
    x0, x1, x3 = g.subtract(-1.0, t), g.negative(t), g.subtract(2.0, t)
    grads = [g.subtract(g.multiply(g.subtract(g.multiply(x0, -3 * _A), 10 * _A), x0), 8 * _A),
             g.multiply(g.subtract(g.multiply(x1, -3 * (_A + 2)), 2 * (_A + 3)), x1),
             g.multiply(g.subtract(g.multiply(one_minus, 3 * (_A + 2)), 2 * (_A + 3)), one_minus),
             g.add(g.multiply(g.subtract(g.multiply(x3, 3 * _A), 10 * _A), x3), 8 * _A)]
    return coeffs, grads


def _axis_taps(ax: _Axis, c: Tensor, mode: int, grads: bool) -> list[AxisTap]:
    g = ax.g
    if mode == NEAREST:
        return [(g.rint(ax.position(c)), None, None)]
    if mode == BILINEAR:
        u, mult = ax.position_and_grad(c) if grads else (ax.position(c), None)
        f = g.floor(u)
        t = g.subtract(u, f)
        return [(f, g.subtract(1.0, t), None if mult is None else g.negative(mult)), (g.add(f, 1.0), t, mult)]
    u = ax.unnormalize(c)  # bicubic: the padding moves the taps, not the fraction (no gradient through it)
    f = g.floor(u)
    coeffs, minus_d = _cubic(g, g.subtract(u, f))
    return [(ax.pad(g.add(f, float(k - 1))), coeffs[k], g.multiply(minus_d[k], -ax.scale) if grads else None)
            for k in range(4)]


# ---- grid_sampler_2d ----------------------------------------------------------------------------------
def _checked(ax: _Axis, taps: list[AxisTap]) -> list[tuple[Tensor, Tensor, Tensor | None, Tensor | None]]:
    """Each tap as (int32 position, 0 where outside the axis; whether inside; weight; d weight)."""
    out = []
    for p, w, d in taps:
        valid = ax.valid(p)
        out.append((ax.g.cast(ax.g.select(valid, p, 0.0), int32), valid, w, d))
    return out


def _times(g: Any, a: Tensor | None, b: Tensor | None) -> Tensor | None:
    return b if a is None else a if b is None else g.multiply(a, b)


class _Sampler:
    """One grid_sampler_2d call: the taps of every output pixel as a flat index into each image's H * W pixels,
    weights and (for the backward) the weights' derivatives along the grid's x and y, all (N, Ho * Wo, K)."""

    def __init__(self, ctx: ConvertContext, x: Tensor, grid: Tensor, mode: Any, padding: Any, align: Any) -> None:
        _floating(x, grid)
        if x.rank != 4 or grid.rank != 4:
            raise Unsupported(f"grid_sampler_2d of a rank-{x.rank} input with a rank-{grid.rank} grid")
        if x.dtype is not grid.dtype:
            raise Unsupported(f"grid_sampler_2d of a {x.dtype.name} input with a {grid.dtype.name} grid")
        if mode not in (BILINEAR, NEAREST, BICUBIC) or padding not in (ZEROS, BORDER, REFLECTION):
            raise Unsupported(f"grid_sampler_2d interpolation mode {mode!r}, padding mode {padding!r}")
        self.n, self.c, self.h, self.w = _static(x.shape, "grid_sampler_2d's input")
        n, self.ho, self.wo, two = _static(grid.shape, "grid_sampler_2d's grid")
        if n != self.n or two != 2:
            raise Unsupported(f"a grid of shape {grid.shape} for an input of shape {x.shape}")
        self.ctx, self.g, self.mode, self.x = ctx, ctx.g, int(mode), x
        self.ct: DType = _compute(x.dtype)
        self.p = self.ho * self.wo
        self.k = {NEAREST: 1, BILINEAR: 4, BICUBIC: 16}[self.mode]  # taps per output pixel
        self.axes = tuple(_Axis(ctx, size, int(padding), bool(align), self.ct) for size in (self.h, self.w))
        coords = self.g.reshape(_cast(ctx, grid, self.ct), (self.n, self.p, 2))
        self.gx, self.gy = (self.g.reshape(t, (self.n, self.p)) for t in self.g.split(coords, 2, axis=2))

    def taps(self, grads: bool) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """(index (N, P * K) int32, weight, d weight / d grid x, d weight / d grid y); an invalid tap (zero
        padding) reads pixel 0 of its axis with its weight multiplied by 0 (NaN stays NaN, as in PyTorch)."""
        g = self.g
        ay, ax = self.axes
        rows = _checked(ay, _axis_taps(ay, self.gy, self.mode, grads))
        cols = _checked(ax, _axis_taps(ax, self.gx, self.mode, grads))
        index, weight, d_x, d_y = [], [], [], []
        for iy, vy, wy, dy in rows:
            for ix, vx, wx, dx in cols:
                index.append(g.add(g.multiply(iy, self.w), ix))
                keep = g.cast(g.logical_and(vy, vx), self.ct)

                def masked(t: Tensor | None, keep: Tensor = keep) -> Tensor:
                    return keep if t is None else g.multiply(t, keep)

                weight.append(masked(_times(g, wy, wx)))
                if grads:
                    d_x.append(masked(_times(g, wy, dx)))
                    d_y.append(masked(_times(g, dy, wx)))
        flat = g.reshape(g.stack(index, axis=2), (self.n, self.p * self.k))
        return (flat, g.stack(weight, axis=2), g.stack(d_x, axis=2) if grads else None,
                g.stack(d_y, axis=2) if grads else None)

    def gather(self, index: Tensor) -> Tensor:
        """The taps' pixels, (N, C, P, K)."""
        image = self.g.reshape(_cast(self.ctx, self.x, self.ct), (self.n, self.c, self.h * self.w))
        picked = self.g.gather(image, index, axis=2, batch_dims=1)
        return self.g.reshape(picked, (self.n, self.c, self.p, self.k))


@converts(aten.grid_sampler_2d.default)
def _grid_sampler_2d(ctx: ConvertContext, x: Tensor, grid: Tensor, interpolation_mode: int, padding_mode: int,
                     align_corners: bool) -> Tensor:
    s = _Sampler(ctx, x, grid, interpolation_mode, padding_mode, align_corners)
    g = s.g
    index, weight, _, _ = s.taps(grads=False)
    out = g.reduce_sum(g.multiply(s.gather(index), g.expand_dims(weight, 1)), 3)
    return _cast(ctx, g.reshape(out, (s.n, s.c, s.ho, s.wo)), x.dtype)


@converts(aten.grid_sampler_2d_backward.default)
def _grid_sampler_2d_backward(ctx: ConvertContext, gy: Tensor, x: Tensor, grid: Tensor, interpolation_mode: int,
                              padding_mode: int, align_corners: bool,
                              output_mask: Sequence[bool]) -> tuple[Tensor | None, Tensor | None]:
    """(d input, d grid): the input's is each tap's weighted output gradient added into its pixel (None unless
    ``output_mask[0]``); the grid's sums output gradient * pixel * d weight over channels and taps (0 for nearest).
    ATen computes the grid's whatever the mask says, and so does this (unused, it is dead code)."""
    s = _Sampler(ctx, x, grid, interpolation_mode, padding_mode, align_corners)
    g = s.g
    _floating(gy)
    index, weight, d_x, d_y = s.taps(grads=s.mode != NEAREST)
    dy = g.reshape(_cast(ctx, gy, s.ct), (s.n, s.c, s.p, 1))
    d_input = None
    if output_mask[0]:
        size = (s.n, s.c, s.p * s.k)
        updates = g.reshape(g.multiply(dy, g.expand_dims(weight, 1)), size)
        zeros = g.broadcast_to(g.constant(0.0, s.ct), (s.n, s.c, s.h * s.w))
        summed = g.scatter_along_axis(zeros, updates, g.broadcast_to(g.expand_dims(index, 1), size), 2,
                                      ScatterMode.ADD)
        d_input = _cast(ctx, g.reshape(summed, (s.n, s.c, s.h, s.w)), x.dtype)
    if d_x is None or d_y is None:  # nearest: the output does not move with the grid
        return d_input, g.broadcast_to(g.constant(0.0, grid.dtype), (s.n, s.ho, s.wo, 2))
    per_tap = g.reduce_sum(g.multiply(s.gather(index), dy), 1)  # (N, P, K)
    d = g.stack([g.reduce_sum(g.multiply(per_tap, t), 2) for t in (d_x, d_y)], axis=2)
    return d_input, _cast(ctx, g.reshape(d, (s.n, s.ho, s.wo, 2)), grid.dtype)


# ---- col2im and im2col ---------------------------------------------------------------------------------
def _geometry(size: Sequence[int], kernel_size: Any, dilation: Any, padding: Any,
              stride: Any) -> tuple[tuple[int, ...], ...]:
    """(kernel, dilation, padding, stride, blocks) per spatial axis; blocks is the number of window positions."""
    k, d, p, s = (_ints(v, 2, what) for v, what in ((kernel_size, "kernel_size"), (dilation, "dilation"),
                                                     (padding, "padding"), (stride, "stride")))
    if min(*k, *d, *s) < 1 or min(p) < 0:
        raise Unsupported(f"kernel {k}, dilation {d}, padding {p}, stride {s}")
    blocks = tuple((size[a] + 2 * p[a] - d[a] * (k[a] - 1) - 1) // s[a] + 1 for a in range(2))
    if min(blocks) < 1:
        raise Unsupported(f"no window of kernel {k} fits {tuple(size)} with padding {p}, dilation {d}")
    return k, d, p, s, blocks


def _rows(k: int, d: int, p: int, s: int, blocks: int) -> list[int]:
    """The image row read by kernel row ``i`` at window ``b``, in (i, b) order; outside [0, size) is padding."""
    return [b * s - p + i * d for i in range(k) for b in range(blocks)]


@converts(aten.col2im.default)
def _col2im(ctx: ConvertContext, x: Tensor, output_size: Any, kernel_size: Any, dilation: Any, padding: Any,
            stride: Any) -> Tensor:
    """Each output pixel sums the column entries whose window covers it: (N, C*kh*kw, L) seen as
    (N, C, kh*Lh, kw*Lw) and summed along H, then W, by host-built tables."""
    g = ctx.g
    _floating(x)
    x, added = _unbatched(ctx, x, 3)
    n, ckk, blocks = _static(x.shape, "col2im's input")
    size = _ints(output_size, 2, "output_size")
    k, d, p, s, (bh, bw) = _geometry(size, kernel_size, dilation, padding, stride)
    if ckk % (k[0] * k[1]) or blocks != bh * bw:
        raise Unsupported(f"col2im of {x.shape} to {size} with kernel {k}: sizes do not match")
    c = ckk // (k[0] * k[1])
    t = g.reshape(_cast(ctx, x, _compute(x.dtype)), (n, c, k[0], k[1], bh, bw))
    t = g.reshape(g.transpose(t, (0, 1, 2, 4, 3, 5)), (n, c, k[0] * bh, k[1] * bw))
    for a in range(2):
        picks: list[list[tuple[int, float]]] = [[] for _ in range(size[a])]
        for j, row in enumerate(_rows(k[a], d[a], p[a], s[a], (bh, bw)[a])):
            if 0 <= row < size[a]:
                picks[row].append((j, 1.0))
        t = _window_sums(ctx, t, 2 + a, [q or [(0, 0.0)] for q in picks])  # an uncovered pixel is 0
    return _rebatch(ctx, _cast(ctx, t, x.dtype), added)


@converts(aten.im2col.default)
def _im2col(ctx: ConvertContext, x: Tensor, kernel_size: Any, dilation: Any, padding: Any, stride: Any) -> Tensor:
    """The sliding windows as columns: rows then columns of each window gathered by host-built tables (padding
    reads pixel 0 times 0), then (N, C, kh, Lh, kw, Lw) reordered to (N, C*kh*kw, Lh*Lw)."""
    g = ctx.g
    _floating(x)
    x, added = _unbatched(ctx, x, 4)
    n, c, h, w = _static(x.shape, "im2col's input")
    k, d, p, s, (bh, bw) = _geometry((h, w), kernel_size, dilation, padding, stride)
    t = x
    for a, size in enumerate((h, w)):
        rows = _rows(k[a], d[a], p[a], s[a], (bh, bw)[a])
        t = _window_sums(ctx, t, 2 + a, [[(r, 1.0)] if 0 <= r < size else [(0, 0.0)] for r in rows])
    t = g.transpose(g.reshape(t, (n, c, k[0], bh, k[1], bw)), (0, 1, 2, 4, 3, 5))
    return _rebatch(ctx, g.reshape(t, (n, c * k[0] * k[1], bh * bw)), added)


__all__: list[str] = []
