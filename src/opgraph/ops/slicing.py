"""Ops: slice, slice_update, reverse, pad (and pad_gradient, its adjoint), and ``Tensor[...]`` indexing
built from them.

``slice`` has MPSGraph's (and TensorFlow's strided-slice) semantics: per axis a start, an end and a
non-zero stride; negative indices count from the end; out-of-range bounds are clamped; bit ``i`` of
``start_mask``/``end_mask`` ignores the start/end of axis ``i`` (take everything from the beginning /
to the end in the stride's direction) and bit ``i`` of ``squeeze_mask`` takes the single element at
``start`` and drops the axis.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core.errors import AttributeValueError, DTypeError, GraphError, ShapeError
from ..core.shape import Dim, Shape, format_shape, normalize_axes
from ..core.types import TensorType
from ..ir.attrs import serializable
from ..ir.graph import GraphCore, Operation, Tensor
from ..kernels import pad as pad_kernel
from ._rules import expect_arity, expect_dtype, expect_value_fits
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp
from .shape import EXPAND_DIMS, AxesAttrs, Cotangents, Grads, check_ints, int_tuple, is_int

INJECTIVE = FusionKind.INJECTIVE


# ---- slice -----------------------------------------------------------------------------------
@attrs
class SliceAttrs:
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    strides: tuple[int, ...]
    start_mask: int = 0
    end_mask: int = 0
    squeeze_mask: int = 0


@dataclass(frozen=True)
class _Axis:
    """One axis of a resolved slice: ``count`` elements from ``begin`` by ``stride``, or one index."""

    begin: int
    count: int
    stride: int
    squeeze: bool


def _resolve_axis(d: int, a: SliceAttrs, i: int) -> _Axis:
    start, end, stride = a.starts[i], a.ends[i], a.strides[i]
    sm, em = bool(a.start_mask >> i & 1), bool(a.end_mask >> i & 1)
    if a.squeeze_mask >> i & 1:
        index = 0 if sm else (start + d if start < 0 else start)
        if not 0 <= index < d:
            raise ShapeError(f"index {start} is out of range for axis {i} of size {d}")
        return _Axis(index, 1, 1, True)
    if stride > 0:
        b = 0 if sm else min(max(start + d if start < 0 else start, 0), d)
        e = d if em else min(max(end + d if end < 0 else end, 0), d)
        return _Axis(b, max(0, -(-(e - b) // stride)), stride, False)
    b = d - 1 if sm else min(max(start + d if start < 0 else start, -1), d - 1)
    e = -1 if em else min(max(end + d if end < 0 else end, -1), d - 1)
    return _Axis(b, max(0, -(-(b - e) // -stride)), stride, False)


def _check_slice_attrs(a: SliceAttrs, rank: int) -> None:
    for what in ("starts", "ends", "strides"):
        v = getattr(a, what)
        check_ints(v, what)
        if len(v) != rank:
            raise ShapeError(f"{what} has {len(v)} entries for a rank-{rank} tensor")
    if 0 in a.strides:
        raise AttributeValueError(f"strides {a.strides} contain 0")
    for what in ("start_mask", "end_mask", "squeeze_mask"):
        m = getattr(a, what)
        check_ints((m,), what, minimum=0)
        if m >> rank:
            raise AttributeValueError(f"{what} {m:#b} has bits beyond the {rank} axes")


def _slice_shape(a: SliceAttrs, shape: Shape) -> Shape:
    out: list[Dim] = []
    for i, d in enumerate(shape):
        if a.squeeze_mask >> i & 1:
            if d is not None:
                _resolve_axis(d, a, i)  # range check
            continue
        out.append(None if d is None else _resolve_axis(d, a, i).count)
    return tuple(out)


def _slice_rule(a: SliceAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    _check_slice_attrs(a, ins[0].rank)
    return TensorType(_slice_shape(a, ins[0].shape), ins[0].dtype)


def _plan(a: SliceAttrs, shape: Sequence[int]) -> tuple[tuple[Any, ...], list[int]]:
    """A basic-indexing key equal to the slice with every stride made positive, and the result axes
    to flip afterwards (a negative-stride run read in increasing order is the same run reversed)."""
    key: list[Any] = []
    flips: list[int] = []
    for i, d in enumerate(shape):
        ax = _resolve_axis(int(d), a, i)
        if ax.squeeze:
            key.append(ax.begin)
            continue
        if ax.stride < 0 and ax.count:
            low = ax.begin + (ax.count - 1) * ax.stride
            key.append(slice(low, ax.begin + 1, -ax.stride))
            flips.append(len(key) - 1 - sum(isinstance(k, int) for k in key))
        else:
            key.append(slice(ax.begin, ax.begin + ax.count * ax.stride, ax.stride) if ax.count else slice(0, 0))
    return tuple(key), flips


def _planner(ctx: LowerContext, a: SliceAttrs) -> Callable[[torch.Size], tuple[tuple[Any, ...], list[int]]]:
    x = ctx.in_types[0]
    if x.is_static:
        fixed = _plan(a, [int(d) for d in x.shape if d is not None])
        return lambda _: fixed
    return lambda shape: _plan(a, shape)


def _slice_lower(ctx: LowerContext) -> Callable[..., Any]:
    plan = _planner(ctx, ctx.attrs)

    def fn(x: torch.Tensor) -> torch.Tensor:
        key, flips = plan(x.shape)
        y = x[key]
        return y.flip(flips) if flips else y

    return fn


SLICE = OpDef("slice", infer=_slice_rule, lower=_slice_lower, attrs=SliceAttrs, fusion=INJECTIVE,
              doc="strided slice with start/end/squeeze bit masks (MPSGraph's sliceTensor)")


def _slice_update_rule(a: SliceAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    data, update = ins
    if update.dtype is not data.dtype:
        raise DTypeError(f"update dtype {update.dtype.name} differs from data dtype {data.dtype.name}")
    _check_slice_attrs(a, data.rank)
    region = _slice_shape(a, data.shape)
    if update.rank > len(region) or any(
            u not in (None, 1) and r is not None and u != r
            for u, r in zip(update.shape, region[len(region) - update.rank:], strict=True)):
        raise ShapeError(f"update of shape {format_shape(update.shape)} does not broadcast to the "
                         f"sliced region {format_shape(region)}")
    return data


def _slice_update_lower(ctx: LowerContext) -> Callable[..., Any]:
    plan = _planner(ctx, ctx.attrs)
    rank_u = ctx.in_types[1].rank

    def fn(data: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        key, flips = plan(data.shape)
        out = data.clone()
        region_rank = len(key) - sum(isinstance(k, int) for k in key)
        uflips = [f - (region_rank - rank_u) for f in flips if f >= region_rank - rank_u]
        out[key] = update.flip(uflips) if uflips else update
        return out

    return fn


SLICE_UPDATE = OpDef("slice_update", infer=_slice_update_rule, lower=_slice_update_lower, attrs=SliceAttrs,
                     fusion=INJECTIVE, doc="a copy of data with a strided slice replaced by update "
                                           "(MPSGraph's sliceUpdateDataTensor)")


@defvjp(SLICE)
def _slice_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    return (g._apply(SLICE_UPDATE, [g.zeros_like(op.inputs[0]), ct[0]], op.attrs),)


@defvjp(SLICE_UPDATE)
def _slice_update_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    zero = g._as_tensor(0, like=ct[0].dtype)  # the overwritten region passes nothing back to data
    return (g._apply(SLICE_UPDATE, [ct[0], zero], op.attrs),
            g.sum_to(g._apply(SLICE, [ct[0]], op.attrs), op.inputs[1]))


# ---- reverse ---------------------------------------------------------------------------------
@attrs
class ReverseAttrs:
    axes: tuple[int, ...]


def _reverse_rule(a: ReverseAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    rank = ins[0].rank
    check_ints(a.axes, "axes")
    if any(not 0 <= ax < rank for ax in a.axes) or len(set(a.axes)) != len(a.axes):
        raise ShapeError(f"axes {a.axes} are not distinct axes of a rank-{rank} tensor")
    return ins[0]


def _reverse_lower(ctx: LowerContext) -> Callable[..., Any]:
    axes = list(ctx.attrs.axes)
    return (lambda x: x.flip(axes)) if axes else (lambda x: x)


REVERSE = OpDef("reverse", infer=_reverse_rule, lower=_reverse_lower, attrs=ReverseAttrs, fusion=INJECTIVE,
                doc="reverse the order of elements along the given axes")


@defvjp(REVERSE)
def _reverse_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    return (g._apply(REVERSE, [ct[0]], op.attrs),)


# ---- pad -------------------------------------------------------------------------------------
@serializable
class PaddingMode(enum.Enum):
    """How ``pad`` fills (MPSGraph's ``MPSGraphPaddingMode``; raw values as there). For ``[a, b, c]``
    padded by 2 on each side: CONSTANT ``v v a b c v v``, ZERO ``0 0 a b c 0 0``, REFLECT
    ``c b a b c b a``, SYMMETRIC ``b a a b c c b``, CLAMP_TO_EDGE ``a a a b c c c``, PERIODIC
    ``b c a b c a b`` (NumPy's constant, reflect, symmetric, edge and wrap)."""

    CONSTANT = 0
    REFLECT = 1
    SYMMETRIC = 2
    CLAMP_TO_EDGE = 3
    ZERO = 4
    PERIODIC = 5


@attrs
class PadAttrs:
    mode: PaddingMode
    left: tuple[int, ...]
    right: tuple[int, ...]
    constant_value: float = 0.0


def _check_pad_attrs(a: PadAttrs, x: TensorType) -> None:
    if not isinstance(a.mode, PaddingMode):
        raise AttributeValueError(f"mode must be an og.PaddingMode, got {a.mode!r}")
    if isinstance(a.constant_value, bool) or not isinstance(a.constant_value, (int, float)):
        raise AttributeValueError(f"constant_value must be a float, got {a.constant_value!r}")
    for what in ("left", "right"):
        v = getattr(a, what)
        check_ints(v, f"{what} padding", minimum=0)
        if len(v) != x.rank:
            raise ShapeError(f"{what} padding has {len(v)} entries for a rank-{x.rank} tensor")


def _pad_rule(a: PadAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    x = ins[0]
    _check_pad_attrs(a, x)
    if not x.dtype.is_floating and not x.dtype.is_complex and not math.isfinite(a.constant_value):
        raise AttributeValueError(f"constant_value {a.constant_value} does not fit dtype {x.dtype.name}")
    if a.mode is PaddingMode.CONSTANT:
        expect_value_fits(a.constant_value, x.dtype, "constant_value")
    gathers = a.mode not in (PaddingMode.CONSTANT, PaddingMode.ZERO)
    out: list[Dim] = []
    for i, d in enumerate(x.shape):
        if gathers and d == 0 and a.left[i] + a.right[i]:
            raise ShapeError(f"{a.mode.name} padding of the empty axis {i}: there is nothing to copy")
        out.append(None if d is None else d + a.left[i] + a.right[i])
    return TensorType(tuple(out), x.dtype)


def pad_indices(mode: PaddingMode, d: int, left: int, right: int, device: torch.device) -> torch.Tensor:
    """Source index of every padded position along one axis of size ``d`` (any padding size)."""
    i = torch.arange(-left, d + right, device=device)
    if mode is PaddingMode.CLAMP_TO_EDGE:
        return i.clamp(0, d - 1)
    if mode is PaddingMode.PERIODIC:
        return i.remainder(d)
    if mode is PaddingMode.SYMMETRIC:
        j = i.remainder(2 * d)
        return torch.where(j >= d, 2 * d - 1 - j, j)
    if d == 1:  # REFLECT of one element repeats it (as NumPy)
        return torch.zeros_like(i)
    j = i.remainder(2 * d - 2)
    return torch.where(j >= d, 2 * d - 2 - j, j)


def _pad_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: PadAttrs = ctx.attrs
    axes = [i for i in range(len(a.left)) if a.left[i] or a.right[i]]
    if a.mode in (PaddingMode.CONSTANT, PaddingMode.ZERO):
        value = 0.0 if a.mode is PaddingMode.ZERO else a.constant_value
        dtype = ctx.out_types[0].dtype
        fill: Any = bool(value) if dtype.is_bool else int(value) if dtype.is_integer else value

        last_only = axes == [len(a.left) - 1] and dtype.is_floating
        interpret = bool(getattr(ctx.options, "triton_interpret", False))

        def constant(x: torch.Tensor) -> torch.Tensor:
            if not axes:
                return x
            if last_only and pad_kernel.use_kernel(x, a.left[-1], a.right[-1], fill, interpret):
                return pad_kernel.pad_last_axis(x, a.left[-1], a.right[-1], fill)
            shape = [d + a.left[i] + a.right[i] for i, d in enumerate(x.shape)]
            out = torch.empty(shape, dtype=x.dtype, device=x.device)
            out[tuple(slice(a.left[i], a.left[i] + d) for i, d in enumerate(x.shape))] = x
            for i in axes:  # only the borders are filled, not the whole tensor before the copy
                edge: list[slice] = [slice(None)] * out.dim()
                for part in (slice(0, a.left[i]), slice(a.left[i] + x.shape[i], None)):
                    edge[i] = part
                    out[tuple(edge)] = fill
            return out

        return constant
    # index gathering along each padded axis: any rank, any dtype, any padding size
    static = {i: pad_indices(a.mode, d, a.left[i], a.right[i], ctx.device)
              for i, d in enumerate(ctx.in_types[0].shape) if i in axes and d}

    def gather(x: torch.Tensor) -> torch.Tensor:
        for i in axes:
            idx = static.get(i)
            if idx is None:
                if x.shape[i] == 0:
                    raise ValueError(f"cannot {a.mode.name}-pad the empty axis {i}")
                idx = pad_indices(a.mode, x.shape[i], a.left[i], a.right[i], x.device)
            x = x.index_select(i, idx)
        return x

    return gather


PAD = OpDef("pad", infer=_pad_rule, lower=_pad_lower, attrs=PadAttrs, fusion=INJECTIVE,
            doc="pad each axis on the left and right (MPSGraph's padTensor)")
_CONSTANT_MODES = (PaddingMode.CONSTANT, PaddingMode.ZERO)


def _pad_gradient_rule(a: PadAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    x = ins[0]
    _check_pad_attrs(a, x)
    expect_dtype(x, numeric=True)
    out: list[Dim] = []
    for i, d in enumerate(x.shape):
        size = None if d is None else d - a.left[i] - a.right[i]
        if size is not None and (size < 0 or (size == 0 and a.mode not in _CONSTANT_MODES and d)):
            raise ShapeError(f"axis {i} of size {d} is too small for padding {a.left[i]} + {a.right[i]}")
        out.append(size)
    return TensorType(tuple(out), x.dtype)


def _pad_gradient_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: PadAttrs = ctx.attrs
    axes = [i for i in range(len(a.left)) if a.left[i] or a.right[i]]
    constant = a.mode in _CONSTANT_MODES
    static = {i: pad_indices(a.mode, d - a.left[i] - a.right[i], a.left[i], a.right[i], ctx.device)
              for i, d in enumerate(ctx.in_types[0].shape) if i in axes and d and not constant}

    def fn(t: torch.Tensor) -> torch.Tensor:
        for i in axes:
            d = t.shape[i] - a.left[i] - a.right[i]
            if d < 0 or (d == 0 and not constant):
                raise ValueError(f"axis {i} of size {t.shape[i]} is too small for padding {a.left[i]} + {a.right[i]}")
            if constant:
                t = t.narrow(i, a.left[i], d)
                continue
            idx = static.get(i)
            if idx is None:
                idx = pad_indices(a.mode, d, a.left[i], a.right[i], t.device)
            shape = list(t.shape)
            shape[i] = d
            t = torch.zeros(shape, dtype=t.dtype, device=t.device).index_add_(i, idx, t)
        return t

    return fn


PAD_GRADIENT = OpDef("pad_gradient", infer=_pad_gradient_rule, lower=_pad_gradient_lower, attrs=PadAttrs,
                     fusion=FusionKind.OPAQUE, doc="adjoint of pad: each padded position's value added back "
                                                   "to the source element it copies (MPSGraph's padGradient)")


@defvjp(PAD)
def _pad_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    a: PadAttrs = op.attrs
    if not any(a.left + a.right):
        return (ct[0],)
    if a.mode in _CONSTANT_MODES:  # the middle: slice from left to -right (works for dynamic dims)
        end_mask = sum(1 << i for i, r in enumerate(a.right) if r == 0)
        return (g.slice(ct[0], a.left, [-r for r in a.right], end_mask=end_mask),)
    return (g._apply(PAD_GRADIENT, [ct[0]], a),)


@defvjp(PAD_GRADIENT)
def _pad_gradient_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    a: PadAttrs = op.attrs
    mode = PaddingMode.ZERO if a.mode in _CONSTANT_MODES else a.mode
    return (g._apply(PAD, [ct[0]], PadAttrs(mode, a.left, a.right)),)


def as_padding_mode(value: object) -> PaddingMode:
    """An ``og.PaddingMode`` from itself, its name (``"reflect"``, ``"clamp_to_edge"``) or its value."""
    if isinstance(value, PaddingMode):
        return value
    if isinstance(value, str) and value.upper() in PaddingMode.__members__:
        return PaddingMode[value.upper()]
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return PaddingMode(value)
        except ValueError:
            pass
    raise AttributeValueError(f"pad: unknown padding mode {value!r}; expects og.PaddingMode or one of "
                              f"{[m.lower() for m in PaddingMode.__members__]}")


# ---- builder methods -------------------------------------------------------------------------
def _mask(bits: Any, rank: int, what: str) -> int:
    """A bit mask from an int, or from a per-axis sequence of flags."""
    if isinstance(bits, (int, np.integer)) and not isinstance(bits, bool):
        return int(bits)
    flags = list(bits)
    if len(flags) > rank:
        raise ShapeError(f"{what} has {len(flags)} entries for a rank-{rank} tensor")
    return sum(1 << i for i, f in enumerate(flags) if f)


class SlicingBuilders(GraphCore):
    """Graph methods for slice, slice_update, reverse, pad, pad_gradient and Tensor[...] indexing."""

    def _slice_attrs(self, op: str, x: Tensor, starts: Any, ends: Any, strides: Any, start_mask: Any,
                     end_mask: Any, squeeze_mask: Any) -> SliceAttrs:
        try:
            s, e = int_tuple(starts, "starts"), int_tuple(ends, "ends")
            st = (1,) * len(s) if strides is None else int_tuple(strides, "strides")
            return SliceAttrs(s, e, st, _mask(start_mask, x.rank, "start_mask"),
                              _mask(end_mask, x.rank, "end_mask"), _mask(squeeze_mask, x.rank, "squeeze_mask"))
        except (ShapeError, AttributeValueError) as err:
            raise type(err)(f"{op}: {err}") from None

    def slice(self, x: Tensor, starts: Sequence[int], ends: Sequence[int], strides: Sequence[int] | None = None,
              start_mask: int | Sequence[bool] = 0, end_mask: int | Sequence[bool] = 0,
              squeeze_mask: int | Sequence[bool] = 0, *, name: str | None = None) -> Tensor:
        """Strided slice with one start, end and stride per axis (see the module docstring for masks).

        Masks are ints (bit ``i`` for axis ``i``) or per-axis sequences of flags.

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((6,), og.int64)
        >>> g.run({x: torch.arange(6)}, [g.slice(x, [-1], [0], [-2])])[0].tolist()
        [5, 3, 1]
        """
        x = self._as_tensor(x)
        a = self._slice_attrs("slice", x, starts, ends, strides, start_mask, end_mask, squeeze_mask)
        return self._apply(SLICE, [x], a, name)

    def slice_update(self, data: Tensor, update: Any, starts: Sequence[int], ends: Sequence[int],
                     strides: Sequence[int] | None = None, start_mask: int | Sequence[bool] = 0,
                     end_mask: int | Sequence[bool] = 0, squeeze_mask: int | Sequence[bool] = 0, *,
                     name: str | None = None) -> Tensor:
        """A copy of ``data`` whose slice (as :meth:`slice`) is replaced by ``update`` (broadcast to it).

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((5,), og.int64)
        >>> g.run({x: torch.zeros(5, dtype=torch.int64)}, [g.slice_update(x, 7, [1], [5], [2])])[0].tolist()
        [0, 7, 0, 7, 0]
        """
        data = self._as_tensor(data)
        u = self._as_tensor(update, like=data.dtype)
        a = self._slice_attrs("slice_update", data, starts, ends, strides, start_mask, end_mask, squeeze_mask)
        return self._apply(SLICE_UPDATE, [data, u], a, name)

    def reverse(self, x: Tensor, axes: int | Sequence[int] | None = None, *, name: str | None = None) -> Tensor:
        """Reverse the order of elements along ``axes`` (all axes when None).

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((2, 2), og.int64)
        >>> g.run({x: torch.tensor([[1, 2], [3, 4]])}, [g.reverse(x, axes=1)])[0].tolist()
        [[2, 1], [4, 3]]
        """
        x = self._as_tensor(x)
        try:
            norm = normalize_axes(None if axes is None else int_tuple(axes, "axes"), x.rank)
        except (ShapeError, AttributeValueError) as err:
            raise type(err)(f"reverse: {err}") from None
        return self._apply(REVERSE, [x], ReverseAttrs(norm), name)

    def pad(self, x: Tensor, padding_mode: object, left_padding: Sequence[int], right_padding: Sequence[int],
            constant_value: float = 0.0, *, name: str | None = None) -> Tensor:
        """Pad every axis ``i`` by ``left_padding[i]`` before and ``right_padding[i]`` after.

        ``padding_mode`` is an ``og.PaddingMode`` or its name; any padding size works in every mode
        (reflect/symmetric/periodic repeat as NumPy's ``np.pad``).

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((3,), og.int64)
        >>> g.run({x: torch.tensor([1, 2, 3])}, [g.pad(x, "reflect", [2], [1])])[0].tolist()
        [3, 2, 1, 2, 3, 2]
        """
        x = self._as_tensor(x)
        mode = as_padding_mode(padding_mode)
        try:
            left, right = int_tuple(left_padding, "left_padding"), int_tuple(right_padding, "right_padding")
        except AttributeValueError as err:
            raise AttributeValueError(f"pad: {err}") from None
        if isinstance(constant_value, bool) or not isinstance(constant_value, (int, float, np.number)):
            raise AttributeValueError(f"pad: constant_value must be a real number, got {constant_value!r}")
        return self._apply(PAD, [x], PadAttrs(mode, left, right, float(constant_value)), name)

    def pad_gradient(self, gradient: Tensor, padding_mode: object, left_padding: Sequence[int],
                     right_padding: Sequence[int], *, name: str | None = None) -> Tensor:
        """The adjoint of :meth:`pad`: ``gradient`` (shaped like the padded result) folded back onto the
        source shape, every padded position added to the element it copies (MPSGraph's padGradient,
        without the source tensor: its shape follows from the paddings).

        >>> import opgraph as og, torch
        >>> g = og.Graph(); t = g.placeholder((6,), og.float32)
        >>> g.run({t: torch.ones(6)}, [g.pad_gradient(t, "reflect", [2], [1])])[0].tolist()
        [1.0, 3.0, 2.0]
        """
        mode = as_padding_mode(padding_mode)
        try:
            left, right = int_tuple(left_padding, "left_padding"), int_tuple(right_padding, "right_padding")
        except AttributeValueError as err:
            raise AttributeValueError(f"pad_gradient: {err}") from None
        return self._apply(PAD_GRADIENT, [self._as_tensor(gradient)], PadAttrs(mode, left, right), name)

    def getitem(self, x: Tensor, key: Any, *, name: str | None = None) -> Tensor:
        """``x[key]``: Python basic indexing with ints, slices (any step), ``...`` and ``None``.

        Built from :meth:`slice` and :meth:`expand_dims`; tensors, lists and bools as indices are not
        basic indexing (use ``gather``).

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((3, 4), og.int64)
        >>> g.run({x: torch.arange(12).reshape(3, 4)}, [x[1:, ::-2]])[0].tolist()
        [[7, 5], [11, 9]]
        """
        x = self._as_tensor(x)
        items = key if isinstance(key, tuple) else (key,)
        for k in items:
            if isinstance(k, Tensor):
                raise GraphError(f"x[...]: indexing with the tensor %{k.name} is not supported; use gather")
            if isinstance(k, (bool, np.bool_)) or not (k is None or k is Ellipsis or isinstance(
                    k, (int, np.integer, slice))):
                raise GraphError(f"x[...]: index {k!r} of type {type(k).__name__} is not supported "
                                 f"(ints, slices, ..., None; use gather for index arrays)")
        if sum(k is Ellipsis for k in items) > 1:
            raise ShapeError("x[...]: an index can only have a single ellipsis ('...')")
        used = sum(k is not None and k is not Ellipsis for k in items)
        if used > x.rank:
            raise ShapeError(f"x[...]: too many indices for a rank-{x.rank} tensor: {used} were given")
        if Ellipsis not in items:
            items = items + (Ellipsis,)
        full = slice(None)
        expanded: list[Any] = []
        for k in items:
            expanded.extend([full] * (x.rank - used) if k is Ellipsis else [k])
        starts, ends, strides = [], [], []
        smask = emask = qmask = 0
        new_axes: list[int] = []
        out_pos = 0
        axis = 0
        for k in expanded:
            if k is None:
                new_axes.append(out_pos)
                out_pos += 1
                continue
            if isinstance(k, slice):
                if any(v is not None and not is_int(v) for v in (k.start, k.stop, k.step)):
                    raise GraphError(f"x[...]: slice bounds must be ints or None, got {k!r}")
                step = 1 if k.step is None else int(k.step)
                if step == 0:
                    raise AttributeValueError("x[...]: slice step cannot be zero")
                starts.append(0 if k.start is None else int(k.start))
                ends.append(0 if k.stop is None else int(k.stop))
                strides.append(step)
                smask |= (k.start is None) << axis
                emask |= (k.stop is None) << axis
                out_pos += 1
            else:
                starts.append(int(k))
                ends.append(int(k) + 1)
                strides.append(1)
                qmask |= 1 << axis
            axis += 1
        y = x
        if qmask or any(s != 1 for s in strides) or (smask & emask) != (1 << x.rank) - 1:
            y = self._apply(SLICE, [x], SliceAttrs(tuple(starts), tuple(ends), tuple(strides), smask, emask, qmask),
                            None if new_axes else name)
        if new_axes:
            y = self._apply_expand_dims(y, tuple(new_axes), name)
        return y

    def _apply_expand_dims(self, x: Tensor, axes: tuple[int, ...], name: str | None) -> Tensor:
        return self._apply(EXPAND_DIMS, [x], AxesAttrs(axes), name)


__all__ = ["PAD", "PAD_GRADIENT", "REVERSE", "SLICE", "SLICE_UPDATE", "PadAttrs", "PaddingMode", "SliceAttrs",
           "SlicingBuilders", "as_padding_mode", "pad_indices"]
