"""Ops: gather, gather_nd, gather_along_axis, scatter, scatter_nd, scatter_along_axis, one_hot,
coordinate_along_axis, band_part.

Semantics are MPSGraph's, which follow TensorFlow's ``gather``/``gather_nd``/``tensor_scatter_nd_*``
(with ``batch_dims``) and PyTorch's ``gather``/``scatter_reduce`` for the ``*_along_axis`` forms.

Indices: any integer dtype. A negative index ``i`` in ``[-dim, 0)`` wraps to ``i + dim`` (as MPSGraph
does for gather; opgraph does it for every op here). An index outside ``[-dim, dim)`` raises
``og.ExecutionError`` at run time (MPSGraph instead zero-fills or skips such elements; opgraph checks
explicitly, at the cost of one host sync per op, so that a bad index never reads or writes garbage).
Scatter builders default to ``ScatterMode.ADD`` (MPSGraph's first mode; its mode-less scatterND sums).

Gradients: a gather's is a scatter-add into zeros (none to indices). A scatter's, per mode, with ``u`` the
updates landing on a position: SET gives data the cotangent zeroed where written and each update the
cotangent at its position (with duplicate indices every duplicate gets it: the winner is unspecified); ADD
and SUB pass it to data and (negated for SUB) to the updates; MUL gives data ``ct * prod(u)`` and an update
``ct * data * prod(other u)`` (exact with zero updates); DIV gives data ``ct / prod(u)`` and an update
``-ct * out / u``; MIN and MAX give the cotangent to the data element or updates equal to the result,
split equally among ties (as PyTorch's ``scatter_reduce``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..core.dtype import DType, as_dtype, float32, int32
from ..core.errors import AttributeValueError, DTypeError, GraphError, ShapeError
from ..core.shape import Shape, as_shape, format_shape, merge_dims, merge_shapes, normalize_axis
from ..core.types import TensorType
from ..ir.attrs import serializable
from ..ir.graph import GraphCore, Operation, Tensor
from ._rules import check_axis, expect_arity, expect_dtype, expect_value_fits, same_dtype
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp

INJECTIVE = FusionKind.INJECTIVE
OPAQUE = FusionKind.OPAQUE


@serializable
class ScatterMode(enum.Enum):
    """How a scatter combines an update with the value already at its destination (MPSGraphScatterMode).

    ``SET`` with duplicate indices: one of the updates wins (which one is unspecified). The other modes
    combine every update (``DIV`` divides by each; integers truncate toward zero).
    """

    SET = "set"
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MIN = "min"
    MAX = "max"


# ---- shared helpers ------------------------------------------------------------------------------
def _expect_indices(t: TensorType) -> None:
    expect_dtype(t, integer=True, what="indices")


def _checks_indices(ctx: LowerContext, position: int | None = None, source: int = 0, axis: int = 0) -> bool:
    """``CompilationDescriptor.check_indices`` (on unless the executable's descriptor turns it off), except
    for constant indices (input ``position``) already in range of input ``source``'s static ``axis``: those
    are checked here, once, and cost no host synchronisation per run."""
    if not getattr(ctx.options, "check_indices", True):
        return False
    if position is None or position >= len(ctx.constants):
        return True
    idx, size = ctx.constants[position], ctx.in_types[source].shape[axis]
    if idx is None or size is None:
        return True
    return bool(idx.numel()) and not bool(((idx >= -size) & (idx < size)).all())


def _checked(idx: torch.Tensor, size: int | torch.Tensor, what: str, check: bool = True) -> torch.Tensor:
    """``idx`` as int64 with negative entries wrapped; raises ``IndexError`` for any entry out of range
    when ``check`` (one host synchronisation per op on a GPU: ``check_indices=False`` skips it)."""
    idx = idx.long()
    if idx.numel() == 0:
        return idx
    if not check:
        return torch.where(idx < 0, idx + size, idx)
    bad = (idx < -size) | (idx >= size)
    if bool(bad.any()):  # one host sync: correctness over speed for a bad index
        raise IndexError(f"{what}: index {int(idx[bad][0])} is out of range for dimension size(s) "
                         f"{size.tolist() if isinstance(size, torch.Tensor) else size}")
    return torch.where(idx < 0, idx + size, idx)


def _prod(dims: Sequence[int]) -> int:
    return math.prod(dims)


def _expect_mode(mode: object) -> ScatterMode:
    if not isinstance(mode, ScatterMode):
        raise AttributeValueError(f"mode must be an og.ScatterMode ({', '.join(m.name for m in ScatterMode)}), "
                                  f"got {mode!r}")
    return mode


def _scatter_dtypes(mode: ScatterMode, data: TensorType, updates: TensorType, indices: TensorType) -> None:
    same_dtype((data, updates), "data and updates")
    _expect_indices(indices)
    _expect_mode(mode)
    if mode is ScatterMode.SET:
        expect_dtype(data, numeric=True, boolean=True, what="data")
    else:
        expect_dtype(data, numeric=True, what=f"data (mode {mode.name})")


def _scatter_into(data: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor,
                  mode: ScatterMode) -> torch.Tensor:
    """A new tensor: ``data`` with ``src`` combined in at ``index`` along ``dim`` (index shape == src shape)."""
    if mode is ScatterMode.SET:
        return data.scatter(dim, index, src)
    if mode is ScatterMode.ADD:
        return data.scatter_add(dim, index, src)
    if mode is ScatterMode.SUB:  # subtract the summed updates; also right for unsigned wrap-around
        return data - torch.zeros_like(data).scatter_add(dim, index, src)
    if mode is ScatterMode.MUL:
        return data.scatter_reduce(dim, index, src, "prod", include_self=True)
    if mode is ScatterMode.DIV:  # d / u1 / u2 == d / (u1 * u2), also for truncating integer division
        denom = torch.ones_like(data).scatter_reduce(dim, index, src, "prod", include_self=True)
        if data.dtype.is_floating_point or data.dtype.is_complex:
            return data / denom
        return torch.div(data, denom, rounding_mode="trunc")
    return data.scatter_reduce(dim, index, src, "amin" if mode is ScatterMode.MIN else "amax", include_self=True)


# ---- gather --------------------------------------------------------------------------------------
@attrs
class GatherAttrs:
    axis: int
    batch_dims: int = 0


def _gather_rule(a: GatherAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    x, idx = ins
    _expect_indices(idx)
    if x.rank == 0:
        raise ShapeError("cannot gather from a scalar")
    check_axis(a.axis, x.rank)
    b = a.batch_dims
    if not 0 <= b <= min(a.axis, idx.rank):
        raise ShapeError(f"batch_dims {b} must be in [0, min(axis={a.axis}, indices rank={idx.rank})]")
    batch = merge_shapes(x.shape[:b], idx.shape[:b], "batch dimensions of x and indices differ")
    return TensorType(batch + x.shape[b:a.axis] + idx.shape[b:] + x.shape[a.axis + 1:], x.dtype)


def _gather_lower(ctx: LowerContext) -> Callable[..., Any]:
    axis, b = ctx.attrs.axis, ctx.attrs.batch_dims
    check = _checks_indices(ctx, 1, 0, axis)

    def gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        n = x.shape[axis]
        idx = _checked(idx, n, "gather", check)
        out_shape = x.shape[:axis] + idx.shape[b:] + x.shape[axis + 1:]
        if b == 0:
            return torch.index_select(x, axis, idx.reshape(-1)).reshape(out_shape)
        nb, outer, inner = _prod(x.shape[:b]), _prod(x.shape[b:axis]), _prod(x.shape[axis + 1:])
        ni = _prod(idx.shape[b:])
        x4 = x.reshape(nb, outer, n, inner)
        i4 = idx.reshape(nb, 1, ni, 1).expand(nb, outer, ni, inner)
        return torch.gather(x4, 2, i4).reshape(out_shape)

    return gather


GATHER = OpDef("gather", infer=_gather_rule, lower=_gather_lower, attrs=GatherAttrs, fusion=INJECTIVE,
               doc="slices of x along axis picked by indices (TF gather with batch_dims)")


@attrs
class GatherNDAttrs:
    batch_dims: int = 0


def _nd_batch(b: int, x: TensorType, idx: TensorType) -> None:
    if b < 0:
        raise ShapeError(f"batch_dims {b} must be >= 0")
    if idx.rank < b + 1:
        raise ShapeError(f"indices need rank >= batch_dims + 1 = {b + 1}, got {idx.rank}")
    if x.rank < b:
        raise ShapeError(f"rank {x.rank} is smaller than batch_dims {b}")


def _gather_nd_rule(a: GatherNDAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    x, idx = ins
    _expect_indices(idx)
    b = a.batch_dims
    _nd_batch(b, x, idx)
    k = idx.shape[-1]
    if k is None:
        raise ShapeError("the last dimension of indices (the index depth) must be static")
    if k > x.rank - b:
        raise ShapeError(f"index depth {k} exceeds the {x.rank - b} non-batch dimensions of x")
    batch = merge_shapes(x.shape[:b], idx.shape[:b], "batch dimensions of x and indices differ")
    return TensorType(batch + idx.shape[b:-1] + x.shape[b + k:], x.dtype)


def _nd_linear(idx: torch.Tensor, sizes: Sequence[int], what: str, check: bool) -> torch.Tensor:
    """Row-major linear offsets of the index vectors in ``idx[..., K]`` into dims ``sizes``. Sizes and strides
    stay Python ints: a tensor made from them would be a host-to-device copy, which a CUDA-graph capture refuses."""
    idx = idx.long()
    lin = idx.new_zeros(idx.shape[:-1])
    for k, size in enumerate(sizes):
        lin = lin + _checked(idx[..., k], size, what, check) * _prod(sizes[k + 1:])
    return lin


def _gather_nd_lower(ctx: LowerContext) -> Callable[..., Any]:
    b, check = ctx.attrs.batch_dims, _checks_indices(ctx)

    def gather_nd(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        k = idx.shape[-1]
        sizes, rest, q = x.shape[b:b + k], x.shape[b + k:], idx.shape[b:-1]
        nb, nq, nr = _prod(x.shape[:b]), _prod(q), _prod(rest)
        lin = _nd_linear(idx, sizes, "gather_nd", check).reshape(nb, nq, 1).expand(nb, nq, nr)
        out = torch.gather(x.reshape(nb, _prod(sizes), nr), 1, lin)
        return out.reshape(x.shape[:b] + q + rest)

    return gather_nd


GATHER_ND = OpDef("gather_nd", infer=_gather_nd_rule, lower=_gather_nd_lower, attrs=GatherNDAttrs,
                  fusion=INJECTIVE, doc="slices of x picked by index vectors (TF gather_nd with batch_dims)")


@attrs
class GatherAlongAxisAttrs:
    axis: int


def _same_but_axis(a: TensorType, b: TensorType, axis: int, what: str) -> Shape:
    """``b``'s shape, after checking it equals ``a``'s except at ``axis``."""
    if a.rank != b.rank:
        raise ShapeError(f"{what}: ranks {a.rank} and {b.rank} differ")
    return tuple(d if i == axis else merge_dims(c, d, f"{what} (dimension {i})")
                 for i, (c, d) in enumerate(zip(a.shape, b.shape, strict=True)))


def _gather_along_axis_rule(a: GatherAlongAxisAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    x, idx = ins
    _expect_indices(idx)
    check_axis(a.axis, x.rank)
    return TensorType(_same_but_axis(x, idx, a.axis, "x and indices must match except at axis"), x.dtype)


def _gather_along_axis_lower(ctx: LowerContext) -> Callable[..., Any]:
    axis = ctx.attrs.axis
    check = _checks_indices(ctx, 1, 0, axis)
    return lambda x, idx: torch.gather(x, axis, _checked(idx, x.shape[axis], "gather_along_axis", check))


GATHER_ALONG_AXIS = OpDef("gather_along_axis", infer=_gather_along_axis_rule, lower=_gather_along_axis_lower,
                          attrs=GatherAlongAxisAttrs, fusion=INJECTIVE,
                          doc="out[..., i, ...] = x[..., indices[..., i, ...], ...] along axis (torch.gather)")


# ---- scatter -------------------------------------------------------------------------------------
@attrs
class ScatterAttrs:
    axis: int
    mode: ScatterMode = ScatterMode.ADD


def _scatter_rule(a: ScatterAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 3)
    data, upd, idx = ins
    _scatter_dtypes(a.mode, data, upd, idx)
    check_axis(a.axis, data.rank)
    if idx.rank != 1:
        raise ShapeError(f"indices must have rank 1, got rank {idx.rank}")
    _same_but_axis(data, upd, a.axis, "data and updates must match except at axis")
    merge_dims(upd.shape[a.axis], idx.shape[0], "updates along axis and the number of indices differ")
    return data


def _scatter_lower(ctx: LowerContext) -> Callable[..., Any]:
    axis, mode = ctx.attrs.axis, ctx.attrs.mode
    check = _checks_indices(ctx, 2, 0, axis)

    def scatter(data: torch.Tensor, upd: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        idx = _checked(idx, data.shape[axis], "scatter", check)
        view = [1] * data.dim()
        view[axis] = -1
        return _scatter_into(data, axis, idx.reshape(view).expand(upd.shape), upd, mode)

    return scatter


SCATTER = OpDef("scatter", infer=_scatter_rule, lower=_scatter_lower, attrs=ScatterAttrs, fusion=OPAQUE,
                doc="data with updates[..., j, ...] combined into slice indices[j] along axis (scatterWithData)")


@attrs
class ScatterNDAttrs:
    mode: ScatterMode = ScatterMode.ADD
    batch_dims: int = 0


def _scatter_nd_rule(a: ScatterNDAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 3)
    data, upd, idx = ins
    _scatter_dtypes(a.mode, data, upd, idx)
    b = a.batch_dims
    _nd_batch(b, data, idx)
    q = idx.rank - b - 1
    k = data.rank - (upd.rank - q)  # the index depth follows from the ranks; check it against indices
    if upd.rank < b + q or not 0 <= k <= data.rank - b or idx.shape[-1] not in (None, k):
        raise ShapeError(f"updates must have shape batch + indices.shape[batch_dims:-1] + "
                         f"data.shape[batch_dims + index depth:], got updates {format_shape(upd.shape)}, "
                         f"data {format_shape(data.shape)}, indices {format_shape(idx.shape)}")
    merge_shapes(data.shape[:b], idx.shape[:b], "batch dimensions of data and indices differ")
    merge_shapes(upd.shape[:b], idx.shape[:b], "batch dimensions of updates and indices differ")
    merge_shapes(upd.shape[b:b + q], idx.shape[b:-1], "updates and indices dimensions differ")
    merge_shapes(upd.shape[b + q:], data.shape[b + k:], "updates and the indexed slices of data differ")
    return data


def _scatter_nd_lower(ctx: LowerContext) -> Callable[..., Any]:
    mode, b, check = ctx.attrs.mode, ctx.attrs.batch_dims, _checks_indices(ctx)

    def scatter_nd(data: torch.Tensor, upd: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        k = idx.shape[-1]
        sizes, rest = data.shape[b:b + k], data.shape[b + k:]
        nb, nq, nr = _prod(data.shape[:b]), _prod(idx.shape[b:-1]), _prod(rest)
        lin = _nd_linear(idx, sizes, "scatter_nd", check).reshape(nb, nq, 1).expand(nb, nq, nr)
        out = _scatter_into(data.reshape(nb, _prod(sizes), nr), 1, lin, upd.reshape(nb, nq, nr), mode)
        return out.reshape(data.shape)

    return scatter_nd


SCATTER_ND = OpDef("scatter_nd", infer=_scatter_nd_rule, lower=_scatter_nd_lower, attrs=ScatterNDAttrs,
                   fusion=OPAQUE, doc="data with update slices combined in at index vectors (TF tensor_scatter_nd_*)")


def _scatter_along_axis_rule(a: ScatterAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 3)
    data, upd, idx = ins
    _scatter_dtypes(a.mode, data, upd, idx)
    check_axis(a.axis, data.rank)
    merge_shapes(upd.shape, idx.shape, "updates and indices shapes differ")
    _same_but_axis(data, upd, a.axis, "data and updates must match except at axis")
    return data


def _scatter_along_axis_lower(ctx: LowerContext) -> Callable[..., Any]:
    axis, mode = ctx.attrs.axis, ctx.attrs.mode
    check = _checks_indices(ctx, 2, 0, axis)
    return lambda data, upd, idx: _scatter_into(
        data, axis, _checked(idx, data.shape[axis], "scatter_along_axis", check), upd, mode)


SCATTER_ALONG_AXIS = OpDef("scatter_along_axis", infer=_scatter_along_axis_rule, lower=_scatter_along_axis_lower,
                           attrs=ScatterAttrs, fusion=OPAQUE,
                           doc="data[..., indices[..., i, ...], ...] (mode)= updates[..., i, ...] along axis "
                               "(torch.scatter_reduce)")


# ---- gradients (see the module docstring) ----------------------------------------------------------
Grads = tuple[Tensor | None, ...]


@defvjp(GATHER)
def _gather_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> Grads:
    x, idx = op.inputs
    a, b = op.attrs.axis, op.attrs.batch_dims
    vectors = g.expand_dims(idx, idx.rank)  # index vectors of depth 1 for scatter_nd
    if a == b:
        return g.scatter_nd(g.zeros_like(x), ct[0], vectors, ScatterMode.ADD, b), None
    # scatter_nd indexes the axis right after the batch dims: move the gathered axis (and the index dims) there
    q, r = idx.rank - b, x.rank
    perm_x = [*range(b), a, *range(b, a), *range(a + 1, r)]
    perm_ct = [*range(b), *range(a, a + q), *range(b, a), *range(a + q, r - 1 + q)]
    moved = g.scatter_nd(g.transpose(g.zeros_like(x), perm_x), g.transpose(ct[0], perm_ct), vectors,
                         ScatterMode.ADD, b)
    return g.transpose(moved, sorted(range(r), key=perm_x.__getitem__)), None


@defvjp(GATHER_ND)
def _gather_nd_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> Grads:
    x, idx = op.inputs
    return g.scatter_nd(g.zeros_like(x), ct[0], idx, ScatterMode.ADD, op.attrs.batch_dims), None


@defvjp(GATHER_ALONG_AXIS)
def _gather_along_axis_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> Grads:
    x, idx = op.inputs
    return g.scatter_along_axis(g.zeros_like(x), ct[0], idx, op.attrs.axis, ScatterMode.ADD), None


def _scatter_grads(g: Any, op: Operation, c: Tensor, put: Callable[[Tensor, Tensor, ScatterMode], Tensor],
                   take: Callable[[Tensor], Tensor]) -> Grads:
    """``put(data, updates, mode)`` scatters with the op's indices; ``take(t)`` reads ``t`` (data-shaped)
    at the updates' positions."""
    data, upd = op.inputs[0], op.inputs[1]
    mode, out, dt = op.attrs.mode, op.outputs[0], c.dtype
    if mode is ScatterMode.SET:
        return put(c, g.zeros_like(upd), ScatterMode.SET), take(c), None
    if mode in (ScatterMode.ADD, ScatterMode.SUB):
        return c, take(c) if mode is ScatterMode.ADD else g.negative(take(c)), None
    if mode in (ScatterMode.MIN, ScatterMode.MAX):
        hit_data = g.cast(g.equal(data, out), dt)
        hit_upd = g.cast(g.equal(upd, take(out)), dt)
        share = g.divide(c, g.add(hit_data, put(g.zeros_like(data), hit_upd, ScatterMode.ADD)))
        return g.multiply(share, hit_data), g.multiply(take(share), hit_upd), None
    if mode is ScatterMode.DIV:
        d_upd = g.negative(g.divide(take(g.multiply(c, out)), upd))
        return g.divide(c, put(g.ones_like(data), upd, ScatterMode.MUL)), d_upd, None
    # MUL: d out / d u_j = data * (product of the other updates), without dividing by a zero u_j
    d_data = g.multiply(c, put(g.ones_like(data), upd, ScatterMode.MUL))
    is_zero = g.cast(g.equal(upd, 0), dt)
    safe = g.add(upd, is_zero)  # zero updates replaced by ones
    zeros = put(g.zeros_like(data), is_zero, ScatterMode.ADD)  # zero updates per position
    at = take(g.multiply(g.multiply(c, data), put(g.ones_like(data), safe, ScatterMode.MUL)))
    others = g.add(g.divide(g.multiply(g.subtract(1, is_zero), take(g.cast(g.equal(zeros, 0), dt))), safe),
                   g.multiply(is_zero, take(g.cast(g.equal(zeros, 1), dt))))
    return d_data, g.multiply(at, others), None


@defvjp(SCATTER)
def _scatter_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> Grads:
    idx, axis = op.inputs[2], op.attrs.axis
    return _scatter_grads(g, op, ct[0], lambda d, u, m: g.scatter(d, u, idx, axis, m),
                          lambda t: g.gather(t, idx, axis))


@defvjp(SCATTER_ND)
def _scatter_nd_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> Grads:
    data, upd, idx = op.inputs
    b = op.attrs.batch_dims
    vectors = idx
    if idx.shape[-1] is None:  # gather_nd needs a static index depth; it follows from the ranks
        k = data.rank - upd.rank + idx.rank - b - 1
        if k == 0:
            raise GraphError("gradients: scatter_nd with a dynamic index depth of 0 has no gradient rule; "
                             "give the indices a static last dimension")
        vectors = g.stack([g.squeeze(p, -1) for p in g.split(idx, k, axis=-1)], -1)
    return _scatter_grads(g, op, ct[0], lambda d, u, m: g.scatter_nd(d, u, idx, m, b),
                          lambda t: g.gather_nd(t, vectors, b))


@defvjp(SCATTER_ALONG_AXIS)
def _scatter_along_axis_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> Grads:
    idx, axis = op.inputs[2], op.attrs.axis
    return _scatter_grads(g, op, ct[0], lambda d, u, m: g.scatter_along_axis(d, u, idx, axis, m),
                          lambda t: g.gather_along_axis(t, idx, axis))


# ---- one_hot, coordinate_along_axis, band_part ----------------------------------------------------
@attrs
class OneHotAttrs:
    depth: int
    axis: int
    on_value: bool | int | float = 1
    off_value: bool | int | float = 0
    dtype: DType = float32


def _one_hot_rule(a: OneHotAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    (idx,) = ins
    _expect_indices(idx)
    if isinstance(a.depth, bool) or not isinstance(a.depth, int) or a.depth < 0:
        raise AttributeValueError(f"depth must be an int >= 0, got {a.depth!r}")
    check_axis(a.axis, idx.rank + 1)
    if a.dtype.packed or a.dtype.is_complex:
        raise DTypeError(f"dtype {a.dtype.name} is not supported (expects bool, integer or floating)")
    expect_value_fits(a.on_value, a.dtype, "on_value")
    expect_value_fits(a.off_value, a.dtype, "off_value")
    return TensorType(idx.shape[:a.axis] + (a.depth,) + idx.shape[a.axis:], a.dtype)


def _one_hot_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: OneHotAttrs = ctx.attrs
    dt = a.dtype.torch_dtype
    on = torch.tensor(a.on_value, dtype=dt, device=ctx.device)
    off = torch.tensor(a.off_value, dtype=dt, device=ctx.device)
    view = [1] * (ctx.in_types[0].rank + 1)
    view[a.axis] = a.depth
    depth = torch.arange(a.depth, device=ctx.device).reshape(view)
    # indices outside [0, depth) match nothing: an all-off_value fibre (TF one_hot)
    return lambda idx: torch.where(idx.long().unsqueeze(a.axis) == depth, on, off)


ONE_HOT = OpDef("one_hot", infer=_one_hot_rule, lower=_one_hot_lower, attrs=OneHotAttrs, fusion=INJECTIVE,
                differentiable=False, doc="on_value where the new axis' coordinate equals the index, else off_value")


@attrs
class CoordinateAttrs:
    axis: int
    shape: tuple[int, ...]
    dtype: DType = int32


def _coordinate_rule(a: CoordinateAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 0)
    if any(d is None for d in a.shape):
        raise ShapeError(f"shape must be static, got {format_shape(a.shape)}")
    check_axis(a.axis, len(a.shape))
    t = TensorType(a.shape, a.dtype)
    expect_dtype(t, numeric=True, what="result")
    return t


def _coordinate_lower(ctx: LowerContext) -> Callable[..., Any]:
    a: CoordinateAttrs = ctx.attrs
    view = [1] * len(a.shape)
    view[a.axis] = a.shape[a.axis]
    dt, dev = a.dtype.torch_dtype, ctx.device
    return lambda: torch.arange(a.shape[a.axis], dtype=dt, device=dev).reshape(view).expand(a.shape).contiguous()


COORDINATE_ALONG_AXIS = OpDef("coordinate_along_axis", infer=_coordinate_rule, lower=_coordinate_lower,
                              attrs=CoordinateAttrs, fusion=INJECTIVE, differentiable=False,
                              doc="a tensor of the given shape holding each element's coordinate along axis")


@attrs
class BandPartAttrs:
    num_lower: int
    num_upper: int


def _band_part_rule(a: BandPartAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    (x,) = ins
    if x.rank < 2:
        raise ShapeError(f"expects a tensor of rank >= 2 (a batch of matrices), got rank {x.rank}")
    for v in (a.num_lower, a.num_upper):
        if isinstance(v, bool) or not isinstance(v, int):
            raise AttributeValueError(f"num_lower and num_upper must be ints, got {v!r}")
    expect_dtype(x, numeric=True, boolean=True)
    return x


def _band_part_lower(ctx: LowerContext) -> Callable[..., Any]:
    lo, up = ctx.attrs.num_lower, ctx.attrs.num_upper

    def band_part(x: torch.Tensor) -> torch.Tensor:
        out = x.tril(up) if up >= 0 else x  # tril(k) keeps j - i <= k
        out = out.triu(-lo) if lo >= 0 else out  # triu(-k) keeps i - j <= k
        return out.clone() if out is x else out

    return band_part


BAND_PART = OpDef("band_part", infer=_band_part_rule, lower=_band_part_lower, attrs=BandPartAttrs,
                  fusion=INJECTIVE, doc="keep a diagonal band of each matrix, zero the rest (TF matrix_band_part)")


@defvjp(BAND_PART)
def _band_part_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> Grads:
    return (g._apply(BAND_PART, [ct[0]], op.attrs),)


# ---- builder methods -----------------------------------------------------------------------------
def _batch_dims(b: int, rank: int) -> int:
    if isinstance(b, bool) or not isinstance(b, int):
        raise AttributeValueError(f"batch_dims must be an int, got {b!r}")
    return b + rank if b < 0 else b


class GatherBuilders(GraphCore):
    """Graph methods for gather, scatter, one_hot, coordinate_along_axis, band_part."""

    def gather(self, x: Tensor, indices: Any, axis: int = 0, batch_dims: int = 0, *,
               name: str | None = None) -> Tensor:
        """Slices of ``x`` along ``axis`` at ``indices`` (TF ``gather``; negative indices wrap).

        Result shape ``x.shape[:axis] + indices.shape[batch_dims:] + x.shape[axis + 1:]``; the first
        ``batch_dims`` dims of ``x`` and ``indices`` are batch dims (``batch_dims <= axis``).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((3,), og.float32)
        >>> g.run({x: [10.0, 20.0, 30.0]}, [g.gather(x, g.constant([2, -3]))])[0].tolist()
        [30.0, 10.0]
        """
        idx = self._as_tensor(indices)
        ax = normalize_axis(axis, x.rank)
        return self._apply(GATHER, [x, idx], GatherAttrs(ax, _batch_dims(batch_dims, idx.rank)), name)

    def gather_nd(self, x: Tensor, indices: Any, batch_dims: int = 0, *, name: str | None = None) -> Tensor:
        """Slices of ``x`` at the index vectors in ``indices[..., K]`` (TF ``gather_nd``; negative indices wrap).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.constant([[1, 2], [3, 4]])
        >>> g.run({}, [g.gather_nd(x, g.constant([[1, 0], [0, 1]]))])[0].tolist()
        [3, 2]
        """
        idx = self._as_tensor(indices)
        return self._apply(GATHER_ND, [x, idx], GatherNDAttrs(_batch_dims(batch_dims, idx.rank)), name)

    def gather_along_axis(self, x: Tensor, indices: Any, axis: int, *, name: str | None = None) -> Tensor:
        """``out[..., i, ...] = x[..., indices[..., i, ...], ...]`` along ``axis`` (``torch.gather``)."""
        return self._apply(GATHER_ALONG_AXIS, [x, self._as_tensor(indices)],
                           GatherAlongAxisAttrs(normalize_axis(axis, x.rank)), name)

    def scatter(self, data: Tensor, updates: Tensor, indices: Any, axis: int = 0,
                mode: ScatterMode = ScatterMode.ADD, *, name: str | None = None) -> Tensor:
        """``data`` with ``updates[..., j, ...]`` combined by ``mode`` into slice ``indices[j]`` along ``axis``.

        ``indices`` is 1-D (MPSGraph ``scatterWithData``). With ``ScatterMode.SET`` and duplicate
        indices one of the updates wins.

        >>> import opgraph as og
        >>> g = og.Graph(); d = g.constant([0, 0, 0])
        >>> g.run({}, [g.scatter(d, g.constant([5, 7]), g.constant([2, 2]))])[0].tolist()
        [0, 0, 12]
        """
        return self._apply(SCATTER, [data, updates, self._as_tensor(indices)],
                           ScatterAttrs(normalize_axis(axis, data.rank), _expect_mode(mode)), name)

    def scatter_nd(self, data: Tensor, updates: Tensor, indices: Any, mode: ScatterMode = ScatterMode.ADD,
                   batch_dims: int = 0, *, name: str | None = None) -> Tensor:
        """``data`` with update slices combined by ``mode`` at the index vectors ``indices[..., K]``
        (TF ``tensor_scatter_nd_*``; MPSGraph ``scatterNDWithData``)."""
        idx = self._as_tensor(indices)
        return self._apply(SCATTER_ND, [data, updates, idx],
                           ScatterNDAttrs(_expect_mode(mode), _batch_dims(batch_dims, idx.rank)), name)

    def scatter_along_axis(self, data: Tensor, updates: Tensor, indices: Any, axis: int,
                           mode: ScatterMode = ScatterMode.ADD, *, name: str | None = None) -> Tensor:
        """``data[..., indices[..., i, ...], ...]`` combined with ``updates[..., i, ...]`` by ``mode`` along
        ``axis`` (``torch.scatter_reduce`` with ``include_self=True``)."""
        return self._apply(SCATTER_ALONG_AXIS, [data, updates, self._as_tensor(indices)],
                           ScatterAttrs(normalize_axis(axis, data.rank), _expect_mode(mode)), name)

    def one_hot(self, indices: Tensor, depth: int, axis: int = -1, on_value: bool | int | float = 1,
                off_value: bool | int | float = 0, dtype: object = float32, *, name: str | None = None) -> Tensor:
        """A new axis of size ``depth``: ``on_value`` where its coordinate equals the index, else
        ``off_value``; indices outside ``[0, depth)`` give all ``off_value`` (TF ``one_hot``).

        >>> import opgraph as og
        >>> g = og.Graph(); i = g.constant([0, 2])
        >>> g.run({}, [g.one_hot(i, 3, dtype=og.int32)])[0].tolist()
        [[1, 0, 0], [0, 0, 1]]
        """
        dt = as_dtype(dtype)
        indices = self._as_tensor(indices)
        try:
            expect_value_fits(on_value, dt, "on_value")
            expect_value_fits(off_value, dt, "off_value")
        except AttributeValueError as e:
            raise AttributeValueError(f"one_hot: {e}") from None

        def conv(v: Any) -> bool | int | float:  # exact: checked above
            return bool(v) if dt.is_bool else int(v) if dt.is_integer else float(v)

        return self._apply(ONE_HOT, [indices], OneHotAttrs(depth, normalize_axis(axis, indices.rank + 1),
                                                           conv(on_value), conv(off_value), dt), name)

    def coordinate_along_axis(self, axis: int, shape: Sequence[int], dtype: object = int32, *,
                              name: str | None = None) -> Tensor:
        """A tensor of ``shape`` whose value is each element's coordinate along ``axis`` (MPSGraph ``coordinate``).

        >>> import opgraph as og
        >>> g = og.Graph()
        >>> g.run({}, [g.coordinate_along_axis(1, (2, 3))])[0].tolist()
        [[0, 1, 2], [0, 1, 2]]
        """
        shp = as_shape(shape)
        dims = [d for d in shp if d is not None]
        if len(dims) != len(shp):
            raise ShapeError(f"coordinate_along_axis: shape must be static, got {format_shape(shp)}")
        a = CoordinateAttrs(normalize_axis(axis, len(dims)), tuple(dims), as_dtype(dtype))
        return self._apply(COORDINATE_ALONG_AXIS, [], a, name)

    def band_part(self, x: Tensor, num_lower: int, num_upper: int, *, name: str | None = None) -> Tensor:
        """Keep ``num_lower`` sub- and ``num_upper`` super-diagonals of each matrix (negative: keep all).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.constant([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
        >>> g.run({}, [g.band_part(x, 0, -1)])[0].tolist()
        [[1, 2, 3], [0, 5, 6], [0, 0, 9]]
        """
        return self._apply(BAND_PART, [x], BandPartAttrs(num_lower, num_upper), name)


__all__ = ["BAND_PART", "COORDINATE_ALONG_AXIS", "GATHER", "GATHER_ALONG_AXIS", "GATHER_ND", "ONE_HOT", "SCATTER",
           "SCATTER_ALONG_AXIS", "SCATTER_ND", "GatherBuilders", "ScatterMode"]
