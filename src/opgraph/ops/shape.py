"""Shape and layout ops: reshape, transpose, expand_dims, squeeze, flatten (MPSGraph's flatten2D), split,
stack, concat, broadcast_to, tile, shape_of; reshape_like and split_like
(shapes read from reference tensors at run time) serve gradients with dynamic dims.

Movement ops lower to PyTorch views where PyTorch has one (reshape, permute, expand): they copy nothing.
Dynamic (``None``) dims flow through every type rule; lowerings read such dims from the runtime tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..core.dtype import int32
from ..core.errors import AttributeValueError, ShapeError
from ..core.shape import Dim, format_shape, merge_dims, normalize_axes, normalize_axis, numel
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ._rules import expect_arity, same_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp

INJECTIVE = FusionKind.INJECTIVE


# ---- helpers ---------------------------------------------------------------------------------
def _prod(dims: Sequence[Dim]) -> Dim:
    return numel(tuple(dims))


def check_ints(values: Sequence[Any], what: str, minimum: int | None = None) -> None:
    """Attribute values must be Python ints (``>= minimum``); raises ``AttributeValueError``."""
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise AttributeValueError(f"{what} must be ints, got {tuple(values)!r}")
        if minimum is not None and v < minimum:
            raise AttributeValueError(f"{what} must be >= {minimum}, got {tuple(values)!r}")


def _check_axes(axes: Sequence[int], rank: int, what: str = "axes") -> None:
    """Attributes hold normalised axes; a hand-edited or corrupt file may not."""
    check_ints(axes, what)
    if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
        raise ShapeError(f"{what} {tuple(axes)} are not distinct axes of a rank-{rank} tensor")


def is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def int_tuple(values: Any, what: str) -> tuple[int, ...]:
    """A tuple of Python ints from one int or a sequence of ints (NumPy ints too)."""
    if is_int(values):
        return (int(values),)
    try:
        out = tuple(int(v) if is_int(v) else v for v in values)
    except TypeError:
        raise AttributeValueError(f"{what} must be an int or a sequence of ints, got {values!r}") from None
    check_ints(out, what)
    return out


def _with_op(op: str, fn: Callable[[], Any]) -> Any:
    """Run a builder-side normalisation, naming the op in the error it raises."""
    try:
        return fn()
    except (ShapeError, AttributeValueError) as e:
        raise type(e)(f"{op}: {e}") from None


# ---- reshape ---------------------------------------------------------------------------------
@attrs
class ReshapeAttrs:
    shape: tuple[int, ...]  # one entry may be -1: inferred from the element count


def _reshape_rule(a: ReshapeAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    check_ints(a.shape, "shape", minimum=-1)
    if a.shape.count(-1) > 1:
        raise AttributeValueError(f"shape {a.shape} has more than one -1")
    x = ins[0].shape
    known = math.prod(d for d in a.shape if d != -1)
    n = numel(x)
    static_part = math.prod(d for d in x if d is not None)
    if -1 not in a.shape:
        if (n is not None and n != known) or (n is None and static_part and known % static_part):
            raise ShapeError(f"cannot reshape {format_shape(x)} to {format_shape(a.shape)}: "
                             f"element counts differ")
        return TensorType(a.shape, ins[0].dtype)
    if n is None:
        return TensorType(tuple(None if d == -1 else d for d in a.shape), ins[0].dtype)
    if known == 0 or n % known:
        raise ShapeError(f"cannot reshape {format_shape(x)} ({n} elements) to {format_shape(a.shape)}")
    return TensorType(tuple(n // known if d == -1 else d for d in a.shape), ins[0].dtype)


def _reshape_lower(ctx: LowerContext) -> Callable[..., Any]:
    out = ctx.out_types[0]
    shape = out.shape if out.is_static else ctx.attrs.shape
    return lambda x: x.reshape(shape)


RESHAPE = OpDef("reshape", infer=_reshape_rule, lower=_reshape_lower, attrs=ReshapeAttrs, fusion=INJECTIVE,
                doc="the same elements (row-major order) in a new shape; one dim may be -1")
Cotangents = tuple[Tensor, ...]
Grads = tuple[Tensor | None, ...]


def reshape_back(g: Any, t: Tensor, like: Tensor) -> Tensor:
    """``t`` reshaped to ``like``'s shape: a static reshape when that is known, else read at run time."""
    if None in like.shape:
        return g.reshape_like(t, like)
    return t if t.shape == like.shape else g.reshape(t, like.shape)


@defvjp(RESHAPE)
def _reshape_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    return (reshape_back(g, ct[0], op.inputs[0]),)


def _reshape_like_rule(a: None, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    x, ref = ins
    n, m = numel(x.shape), numel(ref.shape)
    if n is not None and m is not None and n != m:
        raise ShapeError(f"cannot reshape {format_shape(x.shape)} ({n} elements) to the reference's shape "
                         f"{format_shape(ref.shape)} ({m} elements)")
    return TensorType(ref.shape, x.dtype)


def _reshape_like_lower(ctx: LowerContext) -> Callable[..., Any]:
    out = ctx.out_types[0]
    if out.is_static:
        shape = out.shape
        return lambda x, ref: x.reshape(shape)
    return lambda x, ref: x.reshape(ref.shape)


RESHAPE_LIKE = OpDef("reshape_like", infer=_reshape_like_rule, lower=_reshape_like_lower, fusion=INJECTIVE,
                     doc="the first input's elements in the second input's shape (read at run time)")


@defvjp(RESHAPE_LIKE)
def _reshape_like_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    return reshape_back(g, ct[0], op.inputs[0]), None


# ---- transpose -------------------------------------------------------------------------------
@attrs
class TransposeAttrs:
    perm: tuple[int, ...]


def _transpose_rule(a: TransposeAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    x = ins[0]
    check_ints(a.perm, "perm")
    if sorted(a.perm) != list(range(x.rank)):
        raise ShapeError(f"perm {a.perm} is not a permutation of the {x.rank} axes")
    return TensorType(tuple(x.shape[p] for p in a.perm), x.dtype)


def _transpose_lower(ctx: LowerContext) -> Callable[..., Any]:
    perm = ctx.attrs.perm
    return lambda x: x.permute(perm)


TRANSPOSE = OpDef("transpose", infer=_transpose_rule, lower=_transpose_lower, attrs=TransposeAttrs,
                  fusion=INJECTIVE, doc="result axis i is input axis perm[i]")


@defvjp(TRANSPOSE)
def _transpose_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    perm = op.attrs.perm
    return (g.transpose(ct[0], sorted(range(len(perm)), key=perm.__getitem__)),)  # the inverse permutation


# ---- expand_dims / squeeze -------------------------------------------------------------------
@attrs
class AxesAttrs:
    axes: tuple[int, ...]  # sorted, non-negative


def _expand_dims_rule(a: AxesAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    rank = ins[0].rank + len(a.axes)
    _check_axes(a.axes, rank)
    dims = iter(ins[0].shape)
    return TensorType(tuple(1 if i in a.axes else next(dims) for i in range(rank)), ins[0].dtype)


def _expand_dims_lower(ctx: LowerContext) -> Callable[..., Any]:
    axes = sorted(ctx.attrs.axes)

    def fn(x: torch.Tensor) -> torch.Tensor:
        for ax in axes:
            x = x.unsqueeze(ax)
        return x

    return fn


EXPAND_DIMS = OpDef("expand_dims", infer=_expand_dims_rule, lower=_expand_dims_lower, attrs=AxesAttrs,
                    fusion=INJECTIVE, doc="insert size-1 axes at the given result positions")


def _squeeze_rule(a: AxesAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    x = ins[0]
    _check_axes(a.axes, x.rank)
    for ax in a.axes:
        if x.shape[ax] not in (1, None):
            raise ShapeError(f"cannot squeeze axis {ax} of size {x.shape[ax]}")
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in a.axes), x.dtype)


def _squeeze_lower(ctx: LowerContext) -> Callable[..., Any]:
    axes = set(ctx.attrs.axes)
    out = ctx.out_types[0]
    if out.is_static:
        return lambda x: x.reshape(out.shape)
    # reshape, not torch.squeeze: a dynamic dim that is not 1 at run time must fail, not be kept
    return lambda x: x.reshape([d for i, d in enumerate(x.shape) if i not in axes])


SQUEEZE = OpDef("squeeze", infer=_squeeze_rule, lower=_squeeze_lower, attrs=AxesAttrs, fusion=INJECTIVE,
                doc="remove size-1 axes")


@defvjp(EXPAND_DIMS)
def _expand_dims_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    return (g._apply(SQUEEZE, [ct[0]], op.attrs),)


@defvjp(SQUEEZE)
def _squeeze_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    return (g._apply(EXPAND_DIMS, [ct[0]], op.attrs),)  # the squeezed axes are positions in the input


# ---- flatten2d -------------------------------------------------------------------------------
@attrs
class FlattenAttrs:
    axis: int  # in [0, rank]


def _flatten_rule(a: FlattenAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    x = ins[0]
    check_ints((a.axis,), "axis")
    if not 0 <= a.axis <= x.rank:
        raise ShapeError(f"axis {a.axis} is out of range [0, {x.rank}]")
    return TensorType((_prod(x.shape[:a.axis]), _prod(x.shape[a.axis:])), x.dtype)


def _flatten_lower(ctx: LowerContext) -> Callable[..., Any]:
    axis = ctx.attrs.axis
    return lambda x: x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


FLATTEN2D = OpDef("flatten2d", infer=_flatten_rule, lower=_flatten_lower, attrs=FlattenAttrs, fusion=INJECTIVE,
                  doc="rank-2 result: (prod(dims[:axis]), prod(dims[axis:]))")


@defvjp(FLATTEN2D)
def _flatten_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    return (reshape_back(g, ct[0], op.inputs[0]),)


# ---- split / stack / concat ------------------------------------------------------------------
@attrs
class SplitAttrs:
    axis: int
    num_splits: int | None = None  # equal parts; the axis must divide evenly
    split_sizes: tuple[int, ...] | None = None


def _split_rule(a: SplitAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    expect_arity(ins, 1)
    x = ins[0]
    _check_axes((a.axis,), x.rank, "axis")
    d = x.shape[a.axis]
    if (a.num_splits is None) == (a.split_sizes is None):
        raise AttributeValueError("give exactly one of num_splits and split_sizes")
    if a.num_splits is not None:
        check_ints((a.num_splits,), "num_splits", minimum=1)
        if d is not None and d % a.num_splits:
            raise ShapeError(f"axis {a.axis} of size {d} does not split into {a.num_splits} equal parts")
        sizes: list[Dim] = [None if d is None else d // a.num_splits] * a.num_splits
    else:
        assert a.split_sizes is not None
        check_ints(a.split_sizes, "split_sizes", minimum=0)
        if not a.split_sizes:
            raise AttributeValueError("split_sizes is empty")
        if d is not None and sum(a.split_sizes) != d:
            raise ShapeError(f"split_sizes {a.split_sizes} sum to {sum(a.split_sizes)}, "
                             f"not to the size {d} of axis {a.axis}")
        sizes = list(a.split_sizes)
    return tuple(TensorType(x.shape[:a.axis] + (s,) + x.shape[a.axis + 1:], x.dtype) for s in sizes)


def _split_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: SplitAttrs = ctx.attrs
    one = len(ctx.out_types) == 1  # codegen binds a single output directly, not as a tuple
    if a.split_sizes is not None:
        sizes, total = list(a.split_sizes), sum(a.split_sizes)

        def by_sizes(x: torch.Tensor) -> Any:
            if x.shape[a.axis] != total:  # only reachable when compiled with a dynamic dim
                raise ValueError(f"axis {a.axis} has size {x.shape[a.axis]}, the split sizes add up to {total}")
            return x if one else torch.split(x, sizes, dim=a.axis)

        return by_sizes
    n = int(a.num_splits or 1)

    def fn(x: torch.Tensor) -> Any:
        if x.shape[a.axis] % n:  # only reachable when compiled with a dynamic dim
            raise ValueError(f"axis {a.axis} of size {x.shape[a.axis]} does not split into {n} equal parts")
        return x if one else torch.tensor_split(x, n, dim=a.axis)

    return fn


SPLIT = OpDef("split", infer=_split_rule, lower=_split_lower, attrs=SplitAttrs, fusion=INJECTIVE,
              doc="cut along an axis into equal parts or parts of given sizes (several outputs)")


@defvjp(SPLIT)
def _split_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    return (g.concat(list(ct), op.attrs.axis),)  # the engine passes zeros for unused outputs


@attrs
class AxisAttrs:
    axis: int


def _joined_dims(ins: tuple[TensorType, ...], skip: int | None) -> list[Dim]:
    """Dims shared by all inputs (``skip``: an axis that may differ); dynamic dims take static ones."""
    if not ins:
        raise ShapeError("needs at least one input")
    same_dtype(ins)
    rank = ins[0].rank
    if any(t.rank != rank for t in ins):
        raise ShapeError(f"inputs must have one rank, got ranks {[t.rank for t in ins]}")
    dims = list(ins[0].shape)
    for t in ins[1:]:
        for i, d in enumerate(t.shape):
            if i != skip:
                dims[i] = merge_dims(dims[i], d, f"inputs' sizes along axis {i}:")
    return dims


def _stack_rule(a: AxisAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    dims = _joined_dims(ins, None)
    _check_axes((a.axis,), len(dims) + 1, "axis")
    return TensorType(tuple(dims[:a.axis]) + (len(ins),) + tuple(dims[a.axis:]), ins[0].dtype)


def _concat_rule(a: AxisAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    dims = _joined_dims(ins, a.axis)
    _check_axes((a.axis,), len(dims), "axis")
    parts = [t.shape[a.axis] for t in ins]
    dims[a.axis] = None if None in parts else sum(p for p in parts if p is not None)
    return TensorType(tuple(dims), ins[0].dtype)


def _stack_lower(ctx: LowerContext) -> Callable[..., Any]:
    axis = ctx.attrs.axis
    return lambda *xs: torch.stack(xs, dim=axis)


def _concat_lower(ctx: LowerContext) -> Callable[..., Any]:
    axis = ctx.attrs.axis
    return lambda *xs: torch.cat(xs, dim=axis)


STACK = OpDef("stack", infer=_stack_rule, lower=_stack_lower, attrs=AxisAttrs, fusion=INJECTIVE,
              doc="join tensors of one shape along a new axis")
CONCAT = OpDef("concat", infer=_concat_rule, lower=_concat_lower, attrs=AxisAttrs, fusion=INJECTIVE,
               doc="join tensors along an existing axis (MPSGraph's concatTensors)")


def _split_like_rule(a: AxisAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    if len(ins) < 2:
        raise ShapeError("needs the tensor to split and at least one reference")
    x, refs = ins[0], ins[1:]
    _check_axes((a.axis,), x.rank, "axis")
    if any(r.rank != x.rank for r in refs):
        raise ShapeError(f"references must have the rank {x.rank} of the input, got ranks {[r.rank for r in refs]}")
    sizes = [r.shape[a.axis] for r in refs]
    d = x.shape[a.axis]
    if d is not None and None not in sizes and sum(s or 0 for s in sizes) != d:
        raise ShapeError(f"the references' sizes {tuple(sizes)} along axis {a.axis} do not sum to its size {d}")
    return tuple(TensorType(x.shape[:a.axis] + (s,) + x.shape[a.axis + 1:], x.dtype) for s in sizes)


def _split_like_lower(ctx: LowerContext) -> Callable[..., Any]:
    axis, one = ctx.attrs.axis, len(ctx.out_types) == 1

    def fn(x: torch.Tensor, *refs: torch.Tensor) -> Any:
        parts = torch.split(x, [r.shape[axis] for r in refs], dim=axis)
        return parts[0] if one else parts

    return fn


SPLIT_LIKE = OpDef("split_like", infer=_split_like_rule, lower=_split_like_lower, attrs=AxisAttrs,
                   fusion=INJECTIVE, doc="cut along an axis into parts as long as each reference along it")


@defvjp(STACK)
def _stack_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    axis = op.attrs.axis
    return tuple(g.squeeze(p, axis) for p in g.split(ct[0], len(op.inputs), axis=axis))


@defvjp(CONCAT)
def _concat_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    axis = op.attrs.axis
    if len(op.inputs) == 1:
        return (ct[0],)
    sizes = [t.shape[axis] for t in op.inputs]
    if None in sizes:  # offsets known only at run time
        return tuple(g.split_like(ct[0], list(op.inputs), axis))
    return tuple(g.split(ct[0], split_sizes=sizes, axis=axis))


@defvjp(SPLIT_LIKE)
def _split_like_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    return (g.concat(list(ct), op.attrs.axis),) + (None,) * (len(op.inputs) - 1)


# ---- broadcast_to / tile ---------------------------------------------------------------------
@attrs
class BroadcastAttrs:
    shape: tuple[int, ...]


def _broadcast_rule(a: BroadcastAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    x = ins[0].shape
    check_ints(a.shape, "shape", minimum=0)
    if len(x) > len(a.shape):
        raise ShapeError(f"cannot broadcast rank {len(x)} to the shorter shape {format_shape(a.shape)}")
    for d, t in zip(x, a.shape[len(a.shape) - len(x):], strict=True):
        if d not in (None, 1, t):
            raise ShapeError(f"cannot broadcast {format_shape(x)} to {format_shape(a.shape)}")
    return TensorType(a.shape, ins[0].dtype)


def _broadcast_lower(ctx: LowerContext) -> Callable[..., Any]:
    shape = ctx.attrs.shape
    return lambda x: x.expand(shape)


BROADCAST_TO = OpDef("broadcast_to", infer=_broadcast_rule, lower=_broadcast_lower, attrs=BroadcastAttrs,
                     fusion=INJECTIVE, doc="NumPy broadcast to a given shape (MPSGraph's broadcast)")


@defvjp(BROADCAST_TO)
def _broadcast_to_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    return (g.sum_to(ct[0], op.inputs[0]),)


@attrs
class TileAttrs:
    multiples: tuple[int, ...]


def _tile_rule(a: TileAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    x = ins[0]
    check_ints(a.multiples, "multiples", minimum=0)
    if len(a.multiples) != x.rank:
        raise ShapeError(f"multiples {a.multiples} must have one entry per axis (rank {x.rank})")
    return TensorType(tuple(None if d is None else d * m for d, m in zip(x.shape, a.multiples, strict=True)),
                      x.dtype)


def _tile_lower(ctx: LowerContext) -> Callable[..., Any]:
    multiples = ctx.attrs.multiples
    return lambda x: x.repeat(multiples)


TILE = OpDef("tile", infer=_tile_rule, lower=_tile_lower, attrs=TileAttrs, fusion=INJECTIVE,
             doc="repeat the whole tensor multiples[i] times along axis i")


@defvjp(TILE)
def _tile_vjp(g: Any, op: Operation, ct: Cotangents) -> Grads:
    x, mult = op.inputs[0], op.attrs.multiples
    if 0 in mult:
        return (g.zeros_like(x),)
    if all(m == 1 for m in mult):
        return (ct[0],)
    if sum(d is None for d in x.shape) <= 1:  # (m0, d0, m1, d1, ...) summed over the m axes
        split = [v for m, d in zip(mult, x.shape, strict=True) for v in (m, -1 if d is None else d)]
        return (g.reduce_sum(g.reshape(ct[0], split), axes=list(range(0, 2 * x.rank, 2))),)
    t = ct[0]  # several dynamic dims: add up the equal parts along each tiled axis
    for i, m in enumerate(mult):
        if m > 1:
            parts = g.split(t, m, axis=i)
            t = parts[0]
            for p in parts[1:]:
                t = g.add(t, p)
    return (t,)


# ---- shape_of --------------------------------------------------------------------------------
def _shape_of_rule(a: None, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    return TensorType((ins[0].rank,), int32)


def _shape_of_lower(ctx: LowerContext) -> Callable[..., Any]:
    x = ctx.in_types[0]
    if x.is_static:
        value = torch.tensor(x.shape, dtype=torch.int32, device=ctx.device).reshape(x.rank)
        return lambda _: value.clone()
    return lambda t: torch.tensor(t.shape, dtype=torch.int32, device=t.device).reshape(t.dim())


SHAPE_OF = OpDef("shape_of", infer=_shape_of_rule, lower=_shape_of_lower, fusion=FusionKind.OPAQUE,
                 differentiable=False, reads_values=False, doc="the input's shape as a 1-D int32 tensor")


# ---- builder methods -------------------------------------------------------------------------
def _one_of(op: str, axis: Any, axes: Any) -> Any:
    if axis is not None and axes is not None:
        raise AttributeValueError(f"{op}: give axis or axes, not both")
    return axes if axes is not None else axis


class ShapeBuilders(GraphCore):
    """Graph methods for reshape, reshape_like, transpose, expand_dims, squeeze, flatten, split, split_like,
    stack, concat, broadcast_to, tile and shape_of."""

    def reshape(self, x: Tensor, shape: Sequence[int] | int, *, name: str | None = None) -> Tensor:
        """``x``'s elements in row-major order with a new ``shape``; one entry may be -1 (inferred).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((None, 6), og.float32)
        >>> g.reshape(x, (-1, 2, 3)).shape
        (None, 2, 3)
        """
        shape_t = _with_op("reshape", lambda: int_tuple(shape, "shape"))
        return self._apply(RESHAPE, [self._as_tensor(x)], ReshapeAttrs(shape_t), name)

    def reshape_like(self, x: Tensor, like: Tensor, *, name: str | None = None) -> Tensor:
        """``x``'s elements in ``like``'s shape, read at run time when it has dynamic dims."""
        return self._apply(RESHAPE_LIKE, [self._as_tensor(x), like], None, name)

    def transpose(self, x: Tensor, perm: Sequence[int] | None = None, *, name: str | None = None) -> Tensor:
        """Permute axes: result axis ``i`` is ``x``'s axis ``perm[i]``; no ``perm`` reverses the axes.

        >>> import opgraph as og
        >>> g = og.Graph(); g.transpose(g.placeholder((2, 3, 4)), (2, 0, 1)).shape
        (4, 2, 3)
        """
        x = self._as_tensor(x)
        if perm is None:
            perm_t = tuple(range(x.rank))[::-1]
        else:
            perm_t = _with_op("transpose", lambda: tuple(
                normalize_axis(p, x.rank, "perm entry") for p in int_tuple(perm, "perm")))
        return self._apply(TRANSPOSE, [x], TransposeAttrs(perm_t), name)

    def expand_dims(self, x: Tensor, axis: int | Sequence[int] | None = None, *,
                    axes: Sequence[int] | None = None, name: str | None = None) -> Tensor:
        """Insert size-1 axes; ``axis``/``axes`` are positions in the result (negative from the end).

        >>> import opgraph as og
        >>> g = og.Graph(); g.expand_dims(g.placeholder((2, 3)), axes=(0, -1)).shape
        (1, 2, 3, 1)
        """
        x = self._as_tensor(x)
        chosen = _one_of("expand_dims", axis, axes)
        if chosen is None:
            raise AttributeValueError("expand_dims: give axis or axes")

        def norm() -> tuple[int, ...]:
            given = int_tuple(chosen, "axes")
            return normalize_axes(given, x.rank + len(given))

        return self._apply(EXPAND_DIMS, [x], AxesAttrs(_with_op("expand_dims", norm)), name)

    def squeeze(self, x: Tensor, axis: int | Sequence[int] | None = None, *,
                axes: Sequence[int] | None = None, name: str | None = None) -> Tensor:
        """Remove size-1 axes: the given ones, or (none given) every axis of static size 1.

        Dynamic axes are kept unless named. Squeezing an axis whose size is not 1 raises ``ShapeError``.

        >>> import opgraph as og
        >>> g = og.Graph(); g.squeeze(g.placeholder((1, 3, 1))).shape
        (3,)
        """
        x = self._as_tensor(x)
        chosen = _one_of("squeeze", axis, axes)
        if chosen is None:
            axes_t = tuple(i for i, d in enumerate(x.shape) if d == 1)
        else:
            axes_t = _with_op("squeeze", lambda: normalize_axes(int_tuple(chosen, "axes"), x.rank))
        return self._apply(SQUEEZE, [x], AxesAttrs(axes_t), name)

    def flatten(self, x: Tensor, axis: int = 1, *, name: str | None = None) -> Tensor:
        """MPSGraph's flatten2D: a rank-2 result ``(prod(shape[:axis]), prod(shape[axis:]))``.

        ``axis`` may be 0 to rank (negative counts from the end).

        >>> import opgraph as og
        >>> g = og.Graph(); g.flatten(g.placeholder((2, 3, 4))).shape
        (2, 12)
        """
        x = self._as_tensor(x)

        def norm() -> int:
            check_ints((axis,), "axis")
            if not -x.rank <= axis <= x.rank:
                raise ShapeError(f"axis {axis} is out of range [{-x.rank}, {x.rank}]")
            return axis + x.rank if axis < 0 else axis

        return self._apply(FLATTEN2D, [x], FlattenAttrs(_with_op("flatten", norm)), name)

    flatten2d = flatten

    def split(self, x: Tensor, num_splits: int | None = None, split_sizes: Sequence[int] | None = None,
              axis: int = 0, *, name: str | None = None) -> list[Tensor]:
        """Cut ``x`` along ``axis`` into ``num_splits`` equal parts or parts of ``split_sizes``.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((6, 2))
        >>> [t.shape for t in g.split(x, split_sizes=(1, 5))]
        [(1, 2), (5, 2)]
        """
        x = self._as_tensor(x)
        ax = _with_op("split", lambda: normalize_axis(axis, x.rank))
        sizes = None if split_sizes is None else _with_op("split", lambda: int_tuple(split_sizes, "split_sizes"))
        return list(self._apply_multi(SPLIT, [x], SplitAttrs(ax, num_splits, sizes), name))

    def stack(self, tensors: Sequence[Tensor], axis: int = 0, *, name: str | None = None) -> Tensor:
        """Join tensors of one shape and dtype along a new axis ``axis``.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2, 3))
        >>> g.stack([x, x, x], axis=-1).shape
        (2, 3, 3)
        """
        ts = self._tensor_list("stack", tensors)
        ax = _with_op("stack", lambda: normalize_axis(axis, ts[0].rank + 1))
        return self._apply(STACK, ts, AxisAttrs(ax), name)

    def concat(self, tensors: Sequence[Tensor], axis: int = 0, *, name: str | None = None) -> Tensor:
        """Join tensors of one rank and dtype along the existing axis ``axis`` (MPSGraph's concatTensors).

        >>> import opgraph as og
        >>> g = og.Graph(); g.concat([g.placeholder((2, 3)), g.placeholder((2, 5))], axis=1).shape
        (2, 8)
        """
        ts = self._tensor_list("concat", tensors)
        if ts[0].rank == 0:
            raise ShapeError("concat: cannot concatenate rank-0 tensors (use stack)")
        ax = _with_op("concat", lambda: normalize_axis(axis, ts[0].rank))
        return self._apply(CONCAT, ts, AxisAttrs(ax), name)

    def split_like(self, x: Tensor, likes: Sequence[Tensor], axis: int = 0, *, name: str | None = None) -> list[Tensor]:
        """Cut ``x`` along ``axis`` into parts as long as each of ``likes`` along it (read at run time)."""
        refs = self._tensor_list("split_like", likes)
        x = self._as_tensor(x)
        ax = _with_op("split_like", lambda: normalize_axis(axis, x.rank))
        return list(self._apply_multi(SPLIT_LIKE, [x, *refs], AxisAttrs(ax), name))

    def _tensor_list(self, op: str, tensors: Sequence[Any]) -> list[Tensor]:
        if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence) or not tensors:
            raise ShapeError(f"{op}: expects a non-empty list of tensors, got {tensors!r}")
        return [self._as_tensor(t) for t in tensors]

    def broadcast_to(self, x: Tensor, shape: Sequence[int], *, name: str | None = None) -> Tensor:
        """``x`` broadcast (NumPy rules) to ``shape`` (MPSGraph's broadcast).

        >>> import opgraph as og
        >>> g = og.Graph(); g.broadcast_to(g.placeholder((3, 1)), (2, 3, 4)).shape
        (2, 3, 4)
        """
        shape_t = _with_op("broadcast_to", lambda: int_tuple(shape, "shape"))
        return self._apply(BROADCAST_TO, [self._as_tensor(x)], BroadcastAttrs(shape_t), name)

    def tile(self, x: Tensor, multiples: Sequence[int], *, name: str | None = None) -> Tensor:
        """Repeat ``x`` ``multiples[i]`` times along each axis ``i``.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,), og.int32)
        >>> g.run({x: [1, 2]}, [g.tile(x, (3,))])[0].tolist()
        [1, 2, 1, 2, 1, 2]
        """
        mult = _with_op("tile", lambda: int_tuple(multiples, "multiples"))
        return self._apply(TILE, [self._as_tensor(x)], TileAttrs(mult), name)

    def shape_of(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``x``'s shape as a 1-D int32 tensor (dynamic dims are read at run time).

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((None, 3))
        >>> g.run({x: torch.zeros(5, 3)}, [g.shape_of(x)])[0].tolist()
        [5, 3]
        """
        return self._apply(SHAPE_OF, [self._as_tensor(x)], None, name)



__all__ = [
    "BROADCAST_TO", "CONCAT", "EXPAND_DIMS", "FLATTEN2D", "RESHAPE", "RESHAPE_LIKE", "SHAPE_OF",
    "SPLIT", "SPLIT_LIKE", "SQUEEZE", "STACK", "TILE", "TRANSPOSE", "ShapeBuilders",
    "check_ints", "int_tuple", "is_int", "merge_dims", "reshape_back",
]
