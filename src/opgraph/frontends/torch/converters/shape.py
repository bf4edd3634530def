"""Converters of the shape, view and indexing ops left after core-ATen decomposition.

Views become opgraph's movement ops (values, not aliases: functionalisation already removed mutation through
views). Sizes must be Python ints; a symbolic size, a boolean-mask index (a data-dependent shape) or
``as_strided`` (it reads the input's storage, which a converter cannot see) raise ``Unsupported``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ....core.dtype import int64
from ....ir.graph import Tensor
from ....ops.gather import ScatterMode
from ....ops.slicing import PaddingMode
from ..registry import ConvertContext, Unsupported, converts
from .core import _identity, _permute, _view

aten = torch.ops.aten
_BIG = 2**62  # ATen's "to the end" is INT64_MAX; anything this large is past any real size


def norm_dim(d: Any, rank: int) -> int:
    """``d`` made non-negative for a rank-``rank`` tensor (a scalar accepts 0 and -1, as ATen)."""
    if isinstance(d, bool) or not isinstance(d, int):
        raise Unsupported(f"dimension {d!r} is not an int")
    r = max(rank, 1)
    if not -r <= d < r:
        raise Unsupported(f"dimension {d} is out of range for rank {rank}")
    return d % r


def ints(values: Any, what: str) -> list[int]:
    """A list of Python ints (a symbolic size raises ``Unsupported``)."""
    if isinstance(values, int) and not isinstance(values, bool):
        return [values]
    out = list(values)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in out):
        raise Unsupported(f"{what} {out!r} are not all Python ints")
    return out


def static_dim(x: Tensor, axis: int, what: str) -> int:
    d = x.shape[axis]
    if d is None:
        raise Unsupported(f"{what} needs the static size of axis {axis}")
    return d


def cast_to(ctx: ConvertContext, x: Tensor, dtype: Any) -> Tensor:
    return x if x.dtype is dtype else ctx.g.cast(x, dtype)


def _inverse(perm: Sequence[int]) -> list[int]:
    return sorted(range(len(perm)), key=perm.__getitem__)


def _transpose(ctx: ConvertContext, x: Tensor, perm: Sequence[int]) -> Tensor:
    return x if list(perm) == list(range(x.rank)) else ctx.g.transpose(x, list(perm))


# ---- slices along one axis -------------------------------------------------------------------------------
def _axis_slice(x: Tensor, axis: int, start: Any, end: Any, step: Any) -> dict[str, Any]:
    """``g.slice`` arguments taking ``start:end:step`` (Python/ATen clamping) along ``axis``, all of the others."""
    for v in (start, end, step):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise Unsupported(f"slice bound {v!r} is not an int")
    step = 1 if step is None else step
    if step <= 0:
        raise Unsupported(f"slice step {step} is not positive")
    rank, bit = x.rank, 1 << axis
    starts, ends, strides = [0] * rank, [0] * rank, [1] * rank
    smask = emask = ((1 << rank) - 1) & ~bit
    strides[axis] = step
    d = x.shape[axis]
    if d is not None:  # resolve as ATen does: wrap negatives once, clamp to [0, d], end no smaller than start
        s = 0 if start is None else min(max(start + d if start < 0 else start, 0), d)
        e = d if end is None else min(max(end + d if end < 0 else end, 0), d)
        starts[axis], ends[axis] = s, max(e, s)
    else:  # opgraph's slice wraps and clamps the same way at run time
        if start is None:
            smask |= bit
        else:
            starts[axis] = max(start, -_BIG)
        if end is None or end >= _BIG:
            emask |= bit
        else:
            ends[axis] = max(end, -_BIG)
    return {"starts": starts, "ends": ends, "strides": strides, "start_mask": smask, "end_mask": emask}


def _is_whole(x: Tensor, axis: int, a: dict[str, Any]) -> bool:
    d = x.shape[axis]
    full = a["start_mask"] == a["end_mask"] == (1 << x.rank) - 1
    return a["strides"][axis] == 1 and (full or (d is not None and a["starts"][axis] == 0 and a["ends"][axis] == d))


def slice_axis(ctx: ConvertContext, x: Tensor, axis: int, start: Any, end: Any, step: Any = 1) -> Tensor:
    a = _axis_slice(x, axis, start, end, step)
    return x if _is_whole(x, axis, a) else ctx.g.slice(x, **a)


def _select_args(x: Tensor, axis: int, index: Any) -> dict[str, Any]:
    if isinstance(index, bool) or not isinstance(index, int):
        raise Unsupported(f"index {index!r} is not an int")
    d = x.shape[axis]
    if d is not None and not -d <= index < d:
        raise Unsupported(f"index {index} is out of range for a dimension of size {d}")
    rank, bit = x.rank, 1 << axis
    starts, ends = [0] * rank, [0] * rank
    starts[axis], ends[axis] = index, index + 1
    others = ((1 << rank) - 1) & ~bit
    return {"starts": starts, "ends": ends, "strides": [1] * rank, "start_mask": others, "end_mask": others,
            "squeeze_mask": bit}


@converts(aten.slice.Tensor, aten.slice_copy.Tensor)
def _slice(ctx: ConvertContext, x: Tensor, dim: int = 0, start: Any = None, end: Any = None, step: Any = 1) -> Tensor:
    return slice_axis(ctx, x, norm_dim(dim, x.rank), start, end, step)


@converts(aten.slice_scatter.default)
def _slice_scatter(ctx: ConvertContext, x: Tensor, src: Tensor, dim: int = 0, start: Any = None, end: Any = None,
                   step: Any = 1) -> Tensor:
    axis = norm_dim(dim, x.rank)
    a = _axis_slice(x, axis, start, end, step)
    src = cast_to(ctx, src, x.dtype)
    if _is_whole(x, axis, a) and src.shape == x.shape and None not in x.shape:
        return src
    return ctx.g.slice_update(x, src, **a)


@converts(aten.select.int, aten.select_copy.int)
def _select(ctx: ConvertContext, x: Tensor, dim: int, index: Any) -> Tensor:
    if x.rank == 0:
        raise Unsupported("select of a scalar")
    return ctx.g.slice(x, **_select_args(x, norm_dim(dim, x.rank), index))


@converts(aten.select_scatter.default)
def _select_scatter(ctx: ConvertContext, x: Tensor, src: Tensor, dim: int, index: Any) -> Tensor:
    if x.rank == 0:
        raise Unsupported("select_scatter into a scalar")
    return ctx.g.slice_update(x, cast_to(ctx, src, x.dtype), **_select_args(x, norm_dim(dim, x.rank), index))


@converts(aten.select_backward.default)
def _select_backward(ctx: ConvertContext, grad: Tensor, input_sizes: Any, dim: int, index: Any) -> Tensor:
    """The gradient of ``select`` placed at ``index`` of a zero tensor of ``input_sizes``: one zero padding (the
    backend keeps this op whole only where no kernels are generated; elsewhere PyTorch's decomposition, a masked
    select, fuses). Only the selected dimension's size must be known: the others are the gradient's own, dynamic
    ones included."""
    rank = len(input_sizes)
    axis = norm_dim(dim, rank)
    (size,) = ints([input_sizes[axis]], "select_backward size of the selected dimension")
    (i,) = ints([index], "select_backward index")
    i = i + size if i < 0 else i
    others = [s for k, s in enumerate(input_sizes) if k != axis]
    if not 0 <= i < size or grad.rank != rank - 1 or any(
            isinstance(s, int) and d is not None and s != d for s, d in zip(others, grad.shape, strict=True)):
        raise Unsupported(f"select_backward at {index} of a dimension of size {size} into sizes {input_sizes} "
                          f"from a gradient of shape {grad.shape}")
    left, right = [0] * rank, [0] * rank
    left[axis], right[axis] = i, size - i - 1
    return ctx.g.pad(ctx.g.expand_dims(grad, [axis]), PaddingMode.CONSTANT, left, right, 0.0)


@converts(aten.narrow.default, aten.narrow_copy.default)
def _narrow(ctx: ConvertContext, x: Tensor, dim: int, start: Any, length: Any) -> Tensor:
    axis = norm_dim(dim, x.rank)
    (start, length) = ints([start, length], "narrow bounds")
    if start < 0:
        start += static_dim(x, axis, "narrow from a negative start")
    d = x.shape[axis]
    if length < 0 or start < 0 or (d is not None and start + length > d):
        raise Unsupported(f"narrow({start}, {length}) is out of range")
    return slice_axis(ctx, x, axis, start, start + length)


# ---- views ---------------------------------------------------------------------------------------------
converts(aten.view_copy.default)(_view)
converts(aten.permute_copy.default)(_permute)
converts(aten.alias_copy.default)(_identity)


@converts(aten.expand.default, aten.expand_copy.default)
def _expand(ctx: ConvertContext, x: Tensor, size: Any, *, implicit: bool = False) -> Tensor:
    sizes = ints(size, "expand sizes")
    lead = len(sizes) - x.rank
    if lead < 0:
        raise Unsupported(f"expand to {len(sizes)} dims of a rank-{x.rank} tensor")
    shape: list[int] = []
    for i, s in enumerate(sizes):
        if s == -1:
            d = x.shape[i - lead] if i >= lead else None
            if d is None:
                raise Unsupported("expand keeps a dynamic (or new) dimension with -1")
            s = d
        shape.append(s)
    return x if tuple(shape) == x.shape else ctx.g.broadcast_to(x, shape)


@converts(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def _unsqueeze(ctx: ConvertContext, x: Tensor, dim: int) -> Tensor:
    return ctx.g.expand_dims(x, axes=[norm_dim(dim, x.rank + 1)])


def _squeezed(ctx: ConvertContext, x: Tensor, axes: Sequence[int]) -> Tensor:
    """ATen's squeeze: only the named axes of size 1 go (a dynamic one is unknown, so Unsupported)."""
    if any(x.shape[a] is None for a in axes):
        raise Unsupported("squeeze of a dynamic dimension")
    drop = sorted({a for a in axes if x.shape[a] == 1})
    return ctx.g.squeeze(x, axes=drop) if drop else x


@converts(aten.squeeze.default, aten.squeeze_copy.default)
def _squeeze(ctx: ConvertContext, x: Tensor) -> Tensor:
    return _squeezed(ctx, x, range(x.rank))


@converts(aten.squeeze.dim, aten.squeeze_copy.dim)
def _squeeze_dim(ctx: ConvertContext, x: Tensor, dim: int) -> Tensor:
    axis = norm_dim(dim, x.rank)
    return x if x.rank == 0 else _squeezed(ctx, x, [axis])


@converts(aten.squeeze.dims, aten.squeeze_copy.dims)
def _squeeze_dims(ctx: ConvertContext, x: Tensor, dim: Any) -> Tensor:
    axes = [norm_dim(d, x.rank) for d in ints(dim, "squeeze dims")]
    return x if x.rank == 0 else _squeezed(ctx, x, axes)


@converts(aten.t.default, aten.t_copy.default)
def _t(ctx: ConvertContext, x: Tensor) -> Tensor:
    if x.rank > 2:
        raise Unsupported("t() of a tensor of rank > 2")
    return x if x.rank < 2 else ctx.g.transpose(x, [1, 0])


@converts(aten.transpose.int, aten.transpose_copy.int)
def _transpose_int(ctx: ConvertContext, x: Tensor, dim0: int, dim1: int) -> Tensor:
    a, b = norm_dim(dim0, x.rank), norm_dim(dim1, x.rank)
    if x.rank == 0 or a == b:
        return x
    perm = list(range(x.rank))
    perm[a], perm[b] = b, a
    return ctx.g.transpose(x, perm)


@converts(aten.unfold.default, aten.unfold_copy.default)
def _unfold(ctx: ConvertContext, x: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Windows of ``size`` every ``step`` along an axis: a gather with a constant (windows, size) index."""
    if x.rank == 0:
        raise Unsupported("unfold of a scalar")
    axis = norm_dim(dimension, x.rank)
    d = static_dim(x, axis, "unfold")
    size, step = ints([size, step], "unfold size and step")
    if size < 0 or step <= 0 or size > d:
        raise Unsupported(f"unfold size {size}, step {step} of a dimension of size {d}")
    n = (d - size) // step + 1
    index = torch.arange(n).unsqueeze(1) * step + torch.arange(size)
    y = ctx.g.gather(x, ctx.g.constant(index), axis=axis)  # x[:axis] + (n, size) + x[axis+1:]
    perm = [i for i in range(y.rank) if i != axis + 1] + [axis + 1]
    return _transpose(ctx, y, perm)


@converts(aten.copy.default)
def _copy(ctx: ConvertContext, x: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    """``x``'s values replaced by ``src``, broadcast to its shape and cast to its dtype."""
    if not isinstance(src, Tensor):
        raise Unsupported(f"copy from {src!r}")
    src = cast_to(ctx, src, x.dtype)
    if src.shape == x.shape and None not in x.shape:
        return src
    if None in x.shape:
        raise Unsupported("copy into a tensor with dynamic sizes")
    return ctx.g.broadcast_to(src, list(x.shape))  # type: ignore[arg-type]


@converts(aten.as_strided.default, aten.as_strided_copy.default)
def _as_strided(ctx: ConvertContext, x: Tensor, size: Any, stride: Any, storage_offset: Any = None) -> Tensor:
    raise Unsupported("as_strided reads the input's storage layout, which a converter cannot see")


# ---- joining and splitting -----------------------------------------------------------------------------
@converts(aten.cat.default)
def _cat(ctx: ConvertContext, tensors: Sequence[Any], dim: int = 0) -> Tensor:
    out = ctx.out_type
    # ATen still accepts (and skips) legacy empty 1-D tensors next to tensors of another rank
    ts = [t for t in tensors if not (out.rank != 1 and isinstance(t, Tensor) and t.shape == (0,))]
    if not ts or any(not isinstance(t, Tensor) for t in ts):
        raise Unsupported("cat of no tensors (or of non-tensors)")
    ts = [cast_to(ctx, t, out.dtype) for t in ts]  # cat promotes its inputs' dtypes
    if len(ts) == 1:
        return ts[0]
    return ctx.g.concat(ts, norm_dim(dim, out.rank))


@converts(aten.stack.default)
def _stack(ctx: ConvertContext, tensors: Sequence[Any], dim: int = 0) -> Tensor:
    out = ctx.out_type
    if not tensors or any(not isinstance(t, Tensor) for t in tensors):
        raise Unsupported("stack of no tensors (or of non-tensors)")
    return ctx.g.stack([cast_to(ctx, t, out.dtype) for t in tensors], norm_dim(dim, out.rank))


def _split_sizes(ctx: ConvertContext, x: Tensor, sizes: list[int], axis: int) -> tuple[Tensor, ...]:
    if len(sizes) == 1:
        return (x,)
    return tuple(ctx.g.split(x, split_sizes=sizes, axis=axis))


@converts(aten.split.Tensor, aten.split_copy.Tensor, aten.unsafe_split.Tensor)
def _split(ctx: ConvertContext, x: Tensor, split_size: Any, dim: int = 0) -> tuple[Tensor, ...]:
    if x.rank == 0:
        raise Unsupported("split of a scalar")
    axis = norm_dim(dim, x.rank)
    d = static_dim(x, axis, "split")
    (s,) = ints(split_size, "split size")
    if s <= 0:
        raise Unsupported(f"split size {s}")
    sizes = [s] * (d // s) + ([d % s] if d % s else [])
    return _split_sizes(ctx, x, sizes or [0], axis)


@converts(aten.split_with_sizes.default, aten.split_with_sizes_copy.default,
          aten.unsafe_split_with_sizes.default)
def _split_with_sizes(ctx: ConvertContext, x: Tensor, split_sizes: Any, dim: int = 0) -> tuple[Tensor, ...]:
    if x.rank == 0:
        raise Unsupported("split of a scalar")
    sizes = ints(split_sizes, "split sizes")
    if not sizes or min(sizes) < 0:
        raise Unsupported(f"split sizes {sizes}")
    return _split_sizes(ctx, x, sizes, norm_dim(dim, x.rank))


# ---- reordering ----------------------------------------------------------------------------------------
@converts(aten.flip.default)
def _flip(ctx: ConvertContext, x: Tensor, dims: Any) -> Tensor:
    axes = sorted({norm_dim(d, x.rank) for d in ints(dims, "flip dims")})
    return ctx.g.reverse(x, axes) if axes and x.rank else x


@converts(aten.repeat.default)
def _repeat(ctx: ConvertContext, x: Tensor, repeats: Any) -> Tensor:
    reps = ints(repeats, "repeats")
    extra = len(reps) - x.rank
    if extra < 0 or min(reps, default=0) < 0:
        raise Unsupported(f"repeats {reps} for a rank-{x.rank} tensor")
    if extra:
        x = ctx.g.expand_dims(x, axes=list(range(extra)))
    return x if all(r == 1 for r in reps) else ctx.g.tile(x, reps)


def _roll_axis(ctx: ConvertContext, x: Tensor, shift: int, axis: int) -> Tensor:
    d = static_dim(x, axis, "roll")
    s = shift % d if d else 0
    if not s:
        return x
    return ctx.g.concat([slice_axis(ctx, x, axis, d - s, d), slice_axis(ctx, x, axis, 0, d - s)], axis)


@converts(aten.roll.default)
def _roll(ctx: ConvertContext, x: Tensor, shifts: Any, dims: Any = ()) -> Tensor:
    sh, ds = ints(shifts, "roll shifts"), ints(dims, "roll dims")
    if not ds:  # roll of the flattened tensor
        if len(sh) != 1 or None in x.shape:
            raise Unsupported("roll without dims needs one shift and a static shape")
        if x.rank == 0:
            return x
        flat = _roll_axis(ctx, ctx.g.reshape(x, [-1]), sh[0], 0)
        return ctx.g.reshape(flat, list(x.shape))  # type: ignore[arg-type]
    if len(sh) != len(ds) or x.rank == 0:
        raise Unsupported("roll: shifts and dims differ in length")
    for s, d in zip(sh, ds, strict=True):
        x = _roll_axis(ctx, x, s, norm_dim(d, x.rank))
    return x


@converts(aten.constant_pad_nd.default)
def _constant_pad_nd(ctx: ConvertContext, x: Tensor, pad: Any, value: Any = 0) -> Tensor:
    """Pairs (left, right) from the last axis backwards; negative amounts crop (a slice), positive pad."""
    amounts = ints(pad, "padding")
    if len(amounts) % 2 or len(amounts) > 2 * x.rank:
        raise Unsupported(f"padding {amounts} for a rank-{x.rank} tensor")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unsupported(f"pad value {value!r}")
    dt = x.dtype
    if (dt.is_integer or dt.is_bool) and not float(value).is_integer():
        raise Unsupported(f"pad value {value} for an integer tensor")
    if dt.is_bool:
        value = float(bool(value))  # ATen converts the scalar: nonzero is True
    if not (dt.is_floating or dt.is_complex):
        info = torch.iinfo(dt.torch_dtype) if dt.is_integer else None
        if info is not None and not info.min <= value <= info.max:
            raise Unsupported(f"pad value {value} does not fit {dt.name}")
    left, right = [0] * x.rank, [0] * x.rank
    for j in range(len(amounts) // 2):
        axis = x.rank - 1 - j
        lo, hi = amounts[2 * j], amounts[2 * j + 1]
        if lo < 0 or hi < 0:
            d = static_dim(x, axis, "negative padding")
            start, end = max(-lo, 0), d - max(-hi, 0)
            if end < start:
                raise Unsupported(f"padding {amounts} crops more than the size {d}")
            x = slice_axis(ctx, x, axis, start, end)
        left[axis], right[axis] = max(lo, 0), max(hi, 0)
    if not any(left) and not any(right):
        return x
    return ctx.g.pad(x, "constant", left, right, float(value))


# ---- gather / index ------------------------------------------------------------------------------------
def _index_tensor(t: Any) -> Tensor:
    if not isinstance(t, Tensor):
        raise Unsupported(f"index {t!r} is not a tensor")
    if not t.dtype.is_integer or t.dtype.name == "uint8":
        raise Unsupported(f"a {t.dtype.name} index (a mask gives a data-dependent shape)")
    return t


@converts(aten.index_select.default)
def _index_select(ctx: ConvertContext, x: Tensor, dim: int, index: Tensor) -> Tensor:
    if x.rank == 0:
        raise Unsupported("index_select of a scalar")
    index = _index_tensor(index)
    if index.rank > 1:
        raise Unsupported("index_select with an index of rank > 1")
    if index.rank == 0:
        index = ctx.g.expand_dims(index, axes=[0])
    return ctx.g.gather(x, index, axis=norm_dim(dim, x.rank))


def _fit(ctx: ConvertContext, x: Tensor, shape: Sequence[int | None], skip: int, what: str) -> Tensor:
    """``x`` sliced down to ``shape`` along every axis but ``skip`` (ATen lets the index be smaller)."""
    for i, (have, want) in enumerate(zip(x.shape, shape, strict=True)):
        if i == skip or have == want:
            continue
        if have is None or want is None or want > have:
            raise Unsupported(f"{what}: sizes {x.shape} and {tuple(shape)} differ along axis {i}")
        x = slice_axis(ctx, x, i, 0, want)
    return x


@converts(aten.gather.default)
def _gather(ctx: ConvertContext, x: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
    index = _index_tensor(index)
    if x.rank == 0 or index.rank != x.rank:
        raise Unsupported("gather needs the input and the index of one rank >= 1")
    axis = norm_dim(dim, x.rank)
    return ctx.g.gather_along_axis(_fit(ctx, x, index.shape, axis, "gather"), index, axis)


def _scatter(ctx: ConvertContext, x: Tensor, dim: int, index: Tensor, src: Tensor, mode: ScatterMode) -> Tensor:
    index = _index_tensor(index)
    if x.rank == 0 or index.rank != x.rank or src.rank != x.rank:
        raise Unsupported("scatter needs the input, the index and the source of one rank >= 1")
    axis = norm_dim(dim, x.rank)
    src = _fit(ctx, cast_to(ctx, src, x.dtype), index.shape, -1, "scatter source")
    region = _fit(ctx, x, index.shape, axis, "scatter")
    out = ctx.g.scatter_along_axis(region, src, index, axis, mode)
    if region is x:
        return out
    whole = [i == axis or r == d for i, (r, d) in enumerate(zip(region.shape, x.shape, strict=True))]
    ends = [0 if w or r is None else r for w, r in zip(whole, region.shape, strict=True)]
    return ctx.g.slice_update(x, out, [0] * x.rank, ends, end_mask=whole)


_MODES = {"sum": ScatterMode.ADD, "prod": ScatterMode.MUL, "amax": ScatterMode.MAX, "amin": ScatterMode.MIN}


@converts(aten.scatter.src)
def _scatter_src(ctx: ConvertContext, x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    return _scatter(ctx, x, dim, index, src, ScatterMode.SET)


@converts(aten.scatter.value)
def _scatter_value(ctx: ConvertContext, x: Tensor, dim: int, index: Tensor, value: Any) -> Tensor:
    if isinstance(value, Tensor) or not isinstance(value, (bool, int, float)):
        raise Unsupported(f"scatter value {value!r}")
    if not (x.dtype.is_floating or x.dtype.is_complex) and not float(value).is_integer():
        raise Unsupported(f"scatter value {value} into an integer tensor")
    src = ctx.g.fill_like(_index_tensor(index), value, x.dtype)
    return _scatter(ctx, x, dim, index, src, ScatterMode.SET)


@converts(aten.scatter_add.default)
def _scatter_add(ctx: ConvertContext, x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    if x.dtype.is_bool:
        raise Unsupported("scatter_add into a bool tensor")
    return _scatter(ctx, x, dim, index, src, ScatterMode.ADD)


@converts(aten.scatter_reduce.two)
def _scatter_reduce(ctx: ConvertContext, x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                    include_self: bool = True) -> Tensor:
    mode = _MODES.get(reduce)
    if mode is None or not include_self or x.dtype.is_bool:
        raise Unsupported(f"scatter_reduce {reduce!r} with include_self={include_self}")
    return _scatter(ctx, x, dim, index, src, mode)


class _IndexPlan:
    """ATen advanced indexing as opgraph's gather_nd: the indexed axes ``pos`` moved to the front of ``x``,
    the index tensors broadcast to ``batch`` and stacked into index vectors. ``front`` (the layout gather_nd
    gives: batch dims, then the other axes) goes to ATen's result layout by ``perm``: adjacent indexed axes
    put the batch dims where they were; separated ones leave them in front."""

    def __init__(self, ctx: ConvertContext, x: Tensor, indices: Sequence[Any]) -> None:
        idx = list(indices)
        while idx and idx[-1] is None:
            idx.pop()
        if not idx or len(idx) > x.rank:
            raise Unsupported(f"{len(idx)} indices for a rank-{x.rank} tensor")
        self.pos = [i for i, t in enumerate(idx) if t is not None]
        tensors = [_index_tensor(idx[i]) for i in self.pos]
        batch = torch.broadcast_shapes(*[torch.Size([-1 if d is None else d for d in t.shape]) for t in tensors]) \
            if all(None not in t.shape for t in tensors) else None
        if batch is None or any(d < 0 for d in batch):
            raise Unsupported("index tensors with dynamic sizes")
        self.batch = [int(d) for d in batch]
        self.others = [i for i in range(x.rank) if i not in self.pos]
        self.x_perm = self.pos + self.others
        vectors = [ctx.g.broadcast_to(cast_to(ctx, t, int64), self.batch) if list(t.shape) != self.batch
                   else cast_to(ctx, t, int64) for t in tensors]
        self.vectors = ctx.g.stack(vectors, axis=-1)
        nb, k = len(self.batch), self.pos[0]
        adjacent = self.pos == list(range(k, k + len(self.pos)))
        lead = list(range(nb, nb + k)) if adjacent else []
        self.perm = lead + list(range(nb)) + list(range(nb + len(lead), nb + len(self.others)))


@converts(aten.index.Tensor, aten._unsafe_index.Tensor)
def _index(ctx: ConvertContext, x: Tensor, indices: Sequence[Any]) -> Tensor:
    if x.rank == 0:
        raise Unsupported("advanced indexing of a scalar")
    live = [t for t in indices if t is not None]
    if len(live) == 1:  # one index tensor: a plain gather keeps the axis order ATen gives
        (axis,) = [i for i, t in enumerate(indices) if t is not None]
        return ctx.g.gather(x, _index_tensor(live[0]), axis=axis)
    p = _IndexPlan(ctx, x, indices)
    front = ctx.g.gather_nd(_transpose(ctx, x, p.x_perm), p.vectors)
    return _transpose(ctx, front, p.perm)


@converts(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(ctx: ConvertContext, x: Tensor, indices: Sequence[Any], values: Tensor,
               accumulate: bool = False) -> Tensor:
    if x.rank == 0:
        raise Unsupported("index_put into a scalar")
    if accumulate and x.dtype.is_bool:
        raise Unsupported("accumulating index_put into a bool tensor")
    if not isinstance(values, Tensor):
        raise Unsupported(f"index_put values {values!r}")
    p = _IndexPlan(ctx, x, indices)
    xt = _transpose(ctx, x, p.x_perm)
    front_shape = p.batch + [xt.shape[i] for i in range(len(p.pos), x.rank)]
    if None in front_shape:
        raise Unsupported("index_put into a tensor with dynamic sizes")
    result_shape = [front_shape[i] for i in p.perm]
    values = cast_to(ctx, values, x.dtype)
    if values.rank > len(result_shape):
        raise Unsupported("index_put values of a higher rank than the indexed result")
    if list(values.shape) != result_shape:
        values = ctx.g.broadcast_to(values, result_shape)  # type: ignore[arg-type]
    updates = _transpose(ctx, values, _inverse(p.perm))
    mode = ScatterMode.ADD if accumulate else ScatterMode.SET
    out = ctx.g.scatter_nd(xt, updates, p.vectors, mode)
    return _transpose(ctx, out, _inverse(p.x_perm))


__all__ = ["cast_to", "ints", "norm_dim", "slice_axis", "static_dim"]


def _pad_amounts(padding: Any, dims: int, rank: int) -> tuple[list[int], list[int]]:
    """ATen's (left, right) pairs from the last axis backwards, as per-axis left and right paddings."""
    amounts = ints(padding, "padding")
    if len(amounts) != 2 * dims or rank < dims or any(a < 0 for a in amounts):
        raise Unsupported(f"padding {amounts} of a rank-{rank} tensor")
    left, right = [0] * rank, [0] * rank
    for j in range(dims):
        left[rank - 1 - j], right[rank - 1 - j] = amounts[2 * j], amounts[2 * j + 1]
    return left, right


def _edge_pad(mode: PaddingMode, dims: int) -> Any:
    """reflection_pad{1,2,3}d / replication_pad{1,2,3}d."""

    def convert(ctx: ConvertContext, x: Tensor, padding: Any) -> Tensor:
        left, right = _pad_amounts(padding, dims, x.rank)
        amounts = list(padding)
        if mode is PaddingMode.REFLECT:  # PyTorch requires padding < the size; opgraph's reflect needs it too
            for axis in range(x.rank - dims, x.rank):
                d = static_dim(x, axis, "reflection padding")
                if max(left[axis], right[axis]) >= d:
                    raise Unsupported(f"reflection padding {amounts} of a dim of size {d}")
        return ctx.g.pad(x, mode, left, right)

    return convert


def _edge_pad_backward(mode: PaddingMode, dims: int) -> Any:
    """The adjoint: each padded position's gradient added back to the element it copies (pad_gradient)."""

    def convert(ctx: ConvertContext, grad: Tensor, x: Tensor, padding: Any) -> Tensor:
        left, right = _pad_amounts(padding, dims, x.rank)
        return ctx.g.pad_gradient(grad, mode, left, right)

    return convert


for _kind, _mode in (("reflection", PaddingMode.REFLECT), ("replication", PaddingMode.CLAMP_TO_EDGE)):
    for _dims in (1, 2, 3):
        converts(getattr(aten, f"{_kind}_pad{_dims}d").default)(_edge_pad(_mode, _dims))
        converts(getattr(aten, f"{_kind}_pad{_dims}d_backward").default)(_edge_pad_backward(_mode, _dims))


def _diagonal_layout(ctx: ConvertContext, x: Tensor, offset: int, dim1: int, dim2: int
                     ) -> tuple[Tensor, list[int], list[int], int, dict[str, Any]]:
    """(x with dims dim1, dim2 moved last and flattened, the permutation, the moved shape, the flat axis, the slice
    of the flat axis that is the diagonal)."""
    if x.rank < 2:
        raise Unsupported(f"diagonal of a rank-{x.rank} tensor")
    a, b = norm_dim(dim1, x.rank), norm_dim(dim2, x.rank)
    if a == b:
        raise Unsupported("diagonal of one dim with itself")
    n, m = static_dim(x, a, "diagonal"), static_dim(x, b, "diagonal")
    perm = [*(k for k in range(x.rank) if k not in (a, b)), a, b]
    t = ctx.g.transpose(x, perm) if perm != list(range(x.rank)) else x
    lead = [-1 if d is None else d for d in t.shape[:-2]]
    if lead.count(-1) > 1:
        raise Unsupported("diagonal of a tensor with several dynamic dims")
    moved = [*lead, n, m]
    flat = ctx.g.reshape(t, [*lead, n * m])
    start = offset if offset >= 0 else -offset * m
    count = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    end = start + (count - 1) * (m + 1) + 1 if count else start
    return flat, perm, moved, len(lead), _axis_slice(flat, len(lead), start, end, m + 1)


@converts(aten.diagonal.default, aten.diagonal_copy.default)
def _diagonal(ctx: ConvertContext, x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The two dims moved last and flattened; the diagonal is then every (m + 1)-th element from the offset."""
    flat, _, _, _, cut = _diagonal_layout(ctx, x, offset, dim1, dim2)
    return ctx.g.slice(flat, **cut)


@converts(aten.diagonal_scatter.default)
def _diagonal_scatter(ctx: ConvertContext, x: Tensor, src: Tensor, offset: int = 0, dim1: int = 0,
                      dim2: int = 1) -> Tensor:
    """``x`` with its diagonal replaced by ``src`` (the backward of diagonal): the same layout, a slice update,
    and the layout undone."""
    flat, perm, moved, _, cut = _diagonal_layout(ctx, x, offset, dim1, dim2)
    updated = ctx.g.reshape(ctx.g.slice_update(flat, cast_to(ctx, src, x.dtype), **cut), moved)
    inverse = [perm.index(k) for k in range(x.rank)]
    return ctx.g.transpose(updated, inverse) if inverse != list(range(x.rank)) else updated
