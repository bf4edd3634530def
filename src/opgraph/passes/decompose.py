"""Decompositions for fusion: reductions the region generator has no recipe for, rewritten into ops it has.

Runs at the start of region formation (``fuse_regions``), so only when fusion is on, after autodiff. An op is
decomposed only where the generator cannot write it as is (``can_fuse`` refuses it) and the shapes the
decomposition needs are static; otherwise it is left for its own lowering.

* ``group_norm(x (N, C, *spatial))``: ``x`` seen as ``(N, G, C/G, S)`` (``S`` the spatial size) is a
  ``layer_norm`` over its last two axes; the affine parameters, reshaped to ``(G, C/G, 1)``, broadcast into that
  domain, so normalisation and affine are one region, and the reshapes at both ends are views. Elementwise ops
  that follow it one by one (SiLU, a per-channel scale and shift, a residual add) are computed in that layout
  too, their other operands reshaped to it, so they join the region; the last one's result is reshaped back.
* ``softmax_cross_entropy(logits, labels)``: ``-sum(w * log_softmax(logits))`` over the class axis, with
  ``w`` the (smoothed) one-hot of class-index labels, written ``select(coordinate == label, ...)``, or the
  (smoothed) probability labels; one region over the logits' shape, then the batch ``reduce_mean``/``reduce_sum``.
* ``scatter_along_axis(data, updates, indices)`` setting or adding one update per fibre (the index axis of size 1,
  as autograd writes a one-hot gradient: nll_loss's), where indices go unchecked (``CompilationDescriptor(
  check_indices=False)``, the torch backend's default): ``select(coordinate == index, update, data)`` (``data +
  select(...)`` to add), elementwise, so it joins the region that reads it instead of a fill, a copy and a scatter
  over the whole tensor.
* ``max_pool2d_gradient`` of windows that tile the image, from window offsets (``LOCAL_FLATTEN_2D``, as
  ``passes.pool_indices`` and the torch backend's training steps keep them): ``select(upsampled offsets ==
  offset of the element, upsampled gradient, 0)``, so it joins the region of the ReLU's gradient after it. Where
  only transposes to NHWC read it (as the layout pass leaves a CNN's pools), it is computed in NHWC and
  ``fold_views`` cancels the transposes between it and that region.
* ``batch_norm_training(x)`` (where ``batch_norm`` asks for it: ``CompilationDescriptor.batch_norm_regions``
  chooses between this and the vendor kernel): two sums of ``x`` shifted by its first element per channel (one
  reduction region, a column reduction for NHWC), then the normalisation, which joins the elementwise ops after
  it (the ReLU).

16-bit inputs compute in float32 and round once at the end, as the ops' own lowerings do. A region grows from
the producers of an op (``passes.fuse``), so a value that no op of the region produces (the class coordinates,
16-bit labels before their cast) is *tied* to the region with ``broadcast_like(value, region value)``, an index
rule that moves nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..core.dtype import int64
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.opdef import FusionKind, OpDef
from ..ops import elementwise as ew
from ..ops import nn, norm, reduce, shape, slicing, unary
from ..ops._padding import TensorLayout
from ..ops.batch_norm import BATCH_NORM_TRAINING, BatchNormTrainingAttrs
from ..ops.batch_norm_grad import stat_dtype
from ..ops.gather import SCATTER_ALONG_AXIS, ScatterAttrs, ScatterMode
from ..ops.gradient_support import FILL_LIKE
from ..ops.losses import SOFTMAX_CROSS_ENTROPY, LossReduction, SoftmaxCrossEntropyAttrs
from ..ops.pooling import Pooling2dDescriptor, PoolingReturnIndicesMode
from ..ops.pooling_indices import MAX_POOL2D_GRADIENT
from ..ops.resize import RESIZE_NEAREST, ResizeNearestAttrs, ResizeNearestRoundingMode
from .builder import OpBuilder
from .dce import dead_code_elimination
from .layout import TO_NCHW, TO_NHWC
from .program import Program, rewrite
from .views import fold_views


@dataclass
class Uses:
    """What a decomposition may ask of the program around the op: who reads each value and which values are
    results; and what it asks back (``fold_views``: it left transposes for ``fold_views`` to cancel)."""

    readers: dict[int, list[Operation]]
    outputs: set[int]
    fold_views: bool = False


Decomposition = Callable[[OpBuilder, Operation, list[Tensor], Uses], "list[Tensor] | None"]


# ---- group_norm ----------------------------------------------------------------------------------------
def _group_norm_grouped(b: OpBuilder, op: Operation, ins: list[Tensor]) -> Tensor | None:
    """group_norm's result in the grouped layout ``(N, G, C/G[, S])``, or None where it does not apply."""
    a: norm.GroupNormAttrs = op.attrs
    x, *params = ins
    if not _group_norm_applies(op):
        return None
    c, tail = _channels_and_tail(x.shape)
    groups = a.num_groups
    per = c // groups
    ct = stat_dtype(x.dtype)
    # reshaped before the cast: a region's values all fit its domain, the reduction's input (N, G, C/G[, S])
    grouped = b.cast(b.reshape(x, (x.shape[0], groups, per, *tail), part="grouped"), ct)
    y = b.op(norm.LAYER_NORM, [grouped], norm.LayerNormAttrs(tuple(range(2, grouped.rank)), a.epsilon),
             part="normalised")
    flags = iter(params)
    for present, combine, what in ((a.has_gamma, ew.MULTIPLY, "gamma"), (a.has_beta, ew.ADD, "beta")):
        if present:
            p = next(flags)  # (), (1,) broadcast as they are; (C,) becomes (G, C/G[, 1]) against (N, G, C/G[, S])
            placed = b.reshape(p, (groups, per, *(1 for _ in tail)), part=what) if p.shape == (c,) and c != 1 else p
            y = b.op(combine, [y, b.cast(placed, ct)])
    return b.cast(y, x.dtype)


def _group_norm_applies(op: Operation) -> bool:
    """The reshapes need the channel and spatial sizes (the batch may be dynamic) and the parameters' sizes."""
    x, *params = op.inputs
    return None not in x.shape[1:] and 0 not in x.shape and x.dtype.is_floating and \
        not any(None in p.shape for p in params)


def _group_norm(b: OpBuilder, op: Operation, ins: list[Tensor], uses: Uses) -> list[Tensor] | None:
    y = _group_norm_grouped(b, op, ins)
    return None if y is None else [b.reshape(y, ins[0].shape, last=True)]


def _channels_and_tail(shape: Sequence[int | None]) -> tuple[int, tuple[int, ...]]:
    """The channel count and the grouped layout's trailing spatial dim (none without spatial dims)."""
    c, *spatial = (int(d or 0) for d in shape[1:])
    return c, ((math.prod(spatial),) if spatial else ())


# ---- elementwise ops after group_norm: computed in the grouped layout, so they join its region -------------
_COMMUTATIVE = (ew.ADD, ew.MULTIPLY)  # maximum/minimum are not: their ties give x (the sign of a zero)


@dataclass(frozen=True)
class _Epilogue:
    source: Tensor  # the value of the old graph it reads in the grouped layout
    x: TensorType  # group_norm's input
    groups: int
    last: bool  # the end of the chain: its result is reshaped back


def _placement(u: TensorType, x: TensorType, groups: int) -> tuple[int | None, ...] | str | None:
    """How another operand of an elementwise op of x's shape enters the grouped layout: ``"as is"`` (a 0-d
    value), ``"like"`` (x's shape: ``reshape_like`` the grouped value), the shape to reshape it to (it
    broadcasts over channels or spatial dims), or None (it cannot)."""
    if u.rank == 0:
        return "as is"
    if u.shape == x.shape and x.shape[0] is not None:
        return "like"
    if u.rank > x.rank:
        return None
    s = (1,) * (x.rank - u.rank) + u.shape
    c, tail = _channels_and_tail(x.shape)
    if (s[0] != 1 and (s[0] is None or s[0] != x.shape[0])) or s[1] not in (1, c):
        return None
    if all(d == 1 for d in s[2:]):
        tail = tuple(1 for _ in tail)
    elif s[2:] != x.shape[2:]:
        return None
    return (s[0], *((groups, c // groups) if s[1] != 1 else (1, 1)), *tail)


def _epilogue_chain(op: Operation, readers: dict[int, list[Operation]], outputs: set[int],
                    claimed: set[int]) -> dict[int, _Epilogue]:
    """The elementwise ops that follow group_norm ``op`` one by one (each value read by the next only), each
    with operands that fit the grouped layout, keyed by ``id(op)``; none that another chain ``claimed`` (an op
    reading two group_norms joins the first one's chain and reads the other in its own layout)."""
    x, groups = op.inputs[0].type, op.attrs.num_groups
    chain: list[tuple[Operation, Tensor]] = []
    t = op.outputs[0]
    while id(t) not in outputs:
        found = {id(r): r for r in readers.get(id(t), [])}
        if len(found) != 1:
            break
        (f,) = found.values()
        if id(f) in claimed or f.op.fusion is not FusionKind.ELEMENTWISE or len(f.outputs) != 1 \
                or f.outputs[0].shape != x.shape:
            break
        first = next(k for k, u in enumerate(f.inputs) if u is t)
        places = [_placement(u.type, x, groups) for u in f.inputs if u is not t]
        reordered = any(isinstance(p, tuple) for p in places[:first])  # a reshaped operand before t: see below
        if None in places or (reordered and f.op not in _COMMUTATIVE) or (reordered and len(f.inputs) != 2):
            break
        chain.append((f, t))
        t = f.outputs[0]
    return {id(f): _Epilogue(src, x, groups, k == len(chain) - 1) for k, (f, src) in enumerate(chain)}


def _in_grouped_layout(b: OpBuilder, op: Operation, ins: list[Tensor], e: _Epilogue) -> Tensor:
    ref = next(u for old, u in zip(op.inputs, ins, strict=True) if old is e.source)
    args: list[Tensor] = []
    swap = False
    for old, u in zip(op.inputs, ins, strict=True):
        place = "as is" if old is e.source else _placement(u.type, e.x, e.groups)
        if place == "like":  # reads u in ref's region (its first input has none there)
            u = b.op(shape.RESHAPE_LIKE, [u, ref])
        elif isinstance(place, tuple):
            u = b.reshape(u, place)
            swap = swap or not args  # a region grows from an op's first joinable input: ref's region first
        args.append(u)
    if swap:  # a commutative binary op (``_epilogue_chain``)
        args.reverse()
    if not e.last:
        return b.op(op.op, args, op.attrs, last=True)
    return b.reshape(b.op(op.op, args, op.attrs, part="grouped"), e.x.shape, last=True)


# ---- softmax_cross_entropy -----------------------------------------------------------------------------
def _cross_entropy(b: OpBuilder, op: Operation, ins: list[Tensor], uses: Uses) -> list[Tensor] | None:
    a: SoftmaxCrossEntropyAttrs = op.attrs
    logits, labels = ins
    ax, classes = a.axis, logits.shape[a.axis]
    if classes is None or 0 in logits.shape or not logits.dtype.is_floating:
        return None
    ct = stat_dtype(logits.dtype)
    ls = float(a.label_smoothing)
    lsm = b.op(nn.LOG_SOFTMAX, [b.cast(logits, ct)], nn.SoftmaxAttrs(ax))
    if labels.dtype.is_floating:  # -sum(t' * lsm), t' = t (1 - ls) + ls / C, as F.cross_entropy smooths
        t = b.cast(b.tie(labels, lsm), ct) if labels.dtype is not ct else labels
        term = b.op(ew.MULTIPLY, [lsm, t])
        if ls:
            term = b.op(ew.ADD, [b.op(ew.MULTIPLY, [term, b.scalar(1.0 - ls, ct)]),
                                 b.op(ew.MULTIPLY, [lsm, b.scalar(ls / classes, ct)])])
    else:  # the label's log-probability (a select, so another class' -inf logit does not make 0 * -inf)
        dt = labels.dtype if classes - 1 <= torch.iinfo(labels.dtype.torch_dtype).max else int64
        view = [1] * logits.rank
        view[ax] = classes
        coord = b.tie(b.constant(torch.arange(classes, dtype=dt.torch_dtype).reshape(view), "classes"), lsm)
        label = b.cast(b.op(shape.EXPAND_DIMS, [labels], shape.AxesAttrs((ax,)), part="label"), dt)
        hit = b.op(ew.EQUAL, [coord, label])
        if ls:
            weight = b.op(ew.SELECT, [hit, b.scalar(1.0 - ls + ls / classes, ct), b.scalar(ls / classes, ct)])
            term = b.op(ew.MULTIPLY, [lsm, weight])
        else:
            term = b.op(ew.SELECT, [hit, lsm, b.scalar(0.0, ct)])
    # kept as (..., 1, ...): it broadcasts into the region's domain, so it is computed in the region
    loss = b.op(unary.NEGATIVE, [b.op(reduce.REDUCE_SUM, [term], reduce.ReduceAttrs((ax,), keepdims=True))])
    if a.reduction is LossReduction.NONE:
        return [b.op(shape.SQUEEZE, [b.cast(loss, logits.dtype)], shape.AxesAttrs((ax,)), last=True)]
    batch = reduce.REDUCE_MEAN if a.reduction is LossReduction.MEAN else reduce.REDUCE_SUM
    total = b.op(batch, [loss], reduce.ReduceAttrs(tuple(range(logits.rank))), last=logits.dtype is ct)
    return [b.cast(total, logits.dtype, last=True)]


# ---- scatter_along_axis ---------------------------------------------------------------------------------
def _one_per_fibre(op: Operation) -> bool:
    a: ScatterAttrs = op.attrs
    data, updates, indices = op.inputs
    axis = a.axis % data.rank
    return (a.mode in (ScatterMode.SET, ScatterMode.ADD) and data.shape[axis] is not None
            and indices.shape[axis] == 1 and updates.shape[axis] == 1 and 0 not in data.shape)


def _scatter(b: OpBuilder, op: Operation, ins: list[Tensor], uses: Uses) -> list[Tensor] | None:
    """One update per fibre: where the coordinate along the axis equals the fibre's index (negative indices
    wrapped, as the op's lowering does), the update (or data + update), else the data. Data filled with one value
    (autograd's zeros) becomes that value, so no kernel writes it."""
    a: ScatterAttrs = op.attrs
    data, updates, indices = ins
    axis = a.axis % data.rank
    size = data.shape[axis]
    assert size is not None  # _one_per_fibre
    fill = data.op.attrs.value if data.op.op is FILL_LIKE else None
    # the coordinates broadcast into the data's shape, read through the tensor a fill took its shape from: a tie to
    # the fill would keep it (a region of its own, written to memory)
    anchor = data.op.inputs[0] if fill is not None else data
    dt = indices.dtype if size <= torch.iinfo(indices.dtype.torch_dtype).max else int64  # coordinates fit
    indices = b.cast(indices, dt)
    view = [1] * data.rank
    view[axis] = size
    coord = b.tie(b.constant(torch.arange(size, dtype=dt.torch_dtype).reshape(view), "coordinate"), anchor)
    hit = b.op(ew.EQUAL, [coord, indices], part="hit")
    if dt.signed:  # a negative index counts from the end: compared with the coordinate less the size (per element,
        # from the one tied coordinate: a wrap of the small index tensor, or a second tie, would be a region of its own)
        back = b.op(ew.SUBTRACT, [coord, b.scalar(size, dt)], part="from_end")
        hit = b.op(ew.LOGICAL_OR, [hit, b.op(ew.EQUAL, [back, indices], part="hit_from_end")], part="hit_either")
    if fill is not None and (a.mode is ScatterMode.SET or fill == 0):
        return [b.op(ew.SELECT, [hit, updates, b.scalar(fill, data.dtype)], last=True)]
    if a.mode is ScatterMode.SET:
        return [b.op(ew.SELECT, [hit, updates, data], last=True)]
    added = b.op(ew.SELECT, [hit, updates, b.scalar(0, data.dtype)], part="update")
    return [b.op(ew.ADD, [data, added], last=True)]


# ---- max_pool2d_gradient --------------------------------------------------------------------------------
def _read_as_nhwc(t: Tensor, readers: dict[int, list[Operation]], outputs: set[int]) -> bool:
    """Every reader of ``t`` transposes it to NHWC (the layout pass's way back from an NCHW op)."""
    found = readers.get(id(t), [])
    return bool(found) and id(t) not in outputs and all(
        o.op is shape.TRANSPOSE and tuple(o.attrs.perm) == TO_NHWC for o in found)


def _max_pool_gradient(b: OpBuilder, op: Operation, ins: list[Tensor], uses: Uses) -> list[Tensor] | None:
    """Windows that tile the image (stride = window, no padding, dilation or remainder), indices their offsets in
    the window (``passes.pool_indices``): each element gets its window's gradient where the window's offset names
    it, ``select(upsampled offsets == (h % kh) * kw + w % kw, upsampled gradient, 0)``. Elementwise on whole
    upsamplings (index rules), it joins the region of the ReLU's gradient and the bias sums after it, instead of
    a kernel that writes the gradient for that region to read back.

    Where only transposes to NHWC read the result (as the layout pass leaves a CNN's pools): the same in NHWC, the
    offsets (and an NCHW incoming gradient) read through transposes, the result transposed back to NCHW, and
    ``uses.fold_views`` set, so that transpose folds into its readers' and the ReLU mask and the bias sum make one
    NHWC region with it, the sum a column reduction (an NCHW result would be read against its order)."""
    d = op.attrs.descriptor
    grad, idx = ins[:2]
    y = op.outputs[0]
    if not (isinstance(d, Pooling2dDescriptor) and not d.data_layout.channels_last
            and d.return_indices_mode is PoolingReturnIndicesMode.LOCAL_FLATTEN_2D and y.type.is_static
            and grad.type.is_static and grad.rank == 4 and idx.dtype.is_integer):
        return None
    kh, kw = d.kernel_height, d.kernel_width
    pads = (d.padding_left, d.padding_right, d.padding_top, d.padding_bottom)
    height, width = int(y.shape[2] or 0), int(y.shape[3] or 0)
    if (d.stride_in_y, d.stride_in_x) != (kh, kw) or (d.dilation_rate_in_y, d.dilation_rate_in_x) != (1, 1) \
            or any(pads) or (grad.shape[2], grad.shape[3]) != (height // kh, width // kw) \
            or (height % kh, width % kw) != (0, 0):
        return None
    nhwc = _read_as_nhwc(y, uses.readers, uses.outputs)
    from_nhwc = grad.op.op is shape.TRANSPOSE and tuple(grad.op.attrs.perm) == TO_NCHW  # the layout pass's view
    layout = TensorLayout.NHWC if nhwc else TensorLayout.NCHW
    up = ResizeNearestAttrs((height, width), center_result=False, data_layout=layout,
                            nearest_rounding_mode=ResizeNearestRoundingMode.FLOOR)  # source d // k
    dt = idx.dtype.torch_dtype
    at_h, at_w = ((1, height, 1, 1), (1, 1, width, 1)) if nhwc else ((1, 1, height, 1), (1, 1, 1, width))
    rows = b.constant((torch.arange(height) % kh * kw).to(dt).reshape(at_h), "window_row")
    cols = b.constant((torch.arange(width) % kw).to(dt).reshape(at_w), "window_column")
    offset = b.op(ew.ADD, [rows, cols], part="offset")
    if nhwc:  # an NCHW incoming gradient is read through a transpose (1 / (kh * kw) of the elements)
        grad = grad.op.inputs[0] if from_nhwc else b.op(shape.TRANSPOSE, [grad], shape.TransposeAttrs(TO_NHWC),
                                                            part="gradient_nhwc")
        idx = b.op(shape.TRANSPOSE, [idx], shape.TransposeAttrs(TO_NHWC), part="indices_nhwc")
    hit = b.op(ew.EQUAL, [b.op(RESIZE_NEAREST, [idx], up, part="indices"), offset], part="hit")
    spread = b.op(RESIZE_NEAREST, [grad], up, part="gradient")
    if not nhwc:
        return [b.op(ew.SELECT, [hit, spread, b.scalar(0, grad.dtype)], last=True)]
    out = b.op(ew.SELECT, [hit, spread, b.scalar(0, grad.dtype)], part="nhwc")
    uses.fold_views = True
    return [b.op(shape.TRANSPOSE, [out], shape.TransposeAttrs(TO_NCHW), last=True)]


# ---- batch_norm_training -----------------------------------------------------------------------------
def _batch_norm(b: OpBuilder, op: Operation, ins: list[Tensor], uses: Uses) -> list[Tensor] | None:
    """(y, mean, biased variance) from two sums over every axis but the channel's, of ``x`` shifted by its first
    element per channel (the shifted-data variance: a sum of squares about a sample, not about 0, cancels only
    as much as the channel's spread; plain sums split across programs where a running variance cannot). The
    sums are one column or row reduction region; the normalisation joins the elementwise ops after it."""
    a: BatchNormTrainingAttrs = op.attrs
    x, *params = ins
    if not x.type.is_static or 0 in x.shape or not x.dtype.is_floating:
        return None
    sizes = tuple(d or 0 for d in x.shape)  # static: every d an int
    rank = len(sizes)
    axis = a.axis % rank
    axes = tuple(k for k in range(rank) if k != axis)
    n = math.prod(sizes[k] for k in axes)
    ct = stat_dtype(x.dtype)
    per_channel = tuple(sizes[axis] if k == axis else 1 for k in range(rank))
    xc = b.cast(x, ct)
    # the shift is sliced before the cast: a slice of the cast kept the full-size float32 copy of x alive (a
    # kernel of its own under autocast, outside both regions)
    first = b.cast(b.op(slicing.SLICE, [x], slicing.SliceAttrs((0,) * rank, per_channel, (1,) * rank), part="shift"),
                   ct)
    d = b.op(ew.SUBTRACT, [xc, first], part="shifted")
    kept = reduce.ReduceAttrs(axes, keepdims=True)
    s1 = b.op(reduce.REDUCE_SUM, [d], kept, part="sum")
    s2 = b.op(reduce.REDUCE_SUM, [b.op(ew.MULTIPLY, [d, d])], kept, part="sum_of_squares")
    mean_d = b.op(ew.MULTIPLY, [s1, b.scalar(1.0 / n, ct)])
    spread = b.op(ew.SUBTRACT, [b.op(ew.MULTIPLY, [s2, b.scalar(1.0 / n, ct)]), b.op(ew.MULTIPLY, [mean_d, mean_d])])
    var = b.op(ew.MAXIMUM, [spread, b.scalar(0.0, ct)], part="variance")  # rounding may take it below 0
    mean = b.op(ew.ADD, [first, mean_d], part="mean")
    scale = b.op(unary.RSQRT, [b.op(ew.ADD, [var, b.scalar(a.epsilon, ct)])], part="rstd")
    flags = iter(params)
    gamma = next(flags) if a.has_gamma else None
    beta = next(flags) if a.has_beta else None
    if gamma is not None:
        scale = b.op(ew.MULTIPLY, [scale, b.reshape(b.cast(gamma, ct), per_channel, part="gamma")])
    y = b.op(ew.MULTIPLY, [b.op(ew.SUBTRACT, [xc, mean]), scale])
    if beta is not None:
        y = b.op(ew.ADD, [y, b.reshape(b.cast(beta, ct), per_channel, part="beta")])
    c = (sizes[axis],)
    return [b.cast(y, x.dtype, last=True), b.reshape(mean, c, part="batch_mean"),
            b.reshape(var, c, part="batch_variance")]


BatchNormChoice = bool | Callable[[Operation], bool]  # which batch_norm_training ops to decompose


DECOMPOSITIONS: dict[OpDef, Decomposition] = {
    norm.GROUP_NORM: _group_norm,
    SOFTMAX_CROSS_ENTROPY: _cross_entropy,
    BATCH_NORM_TRAINING: _batch_norm,
    SCATTER_ALONG_AXIS: _scatter,
    MAX_POOL2D_GRADIENT: _max_pool_gradient,
}


def decompose_for_fusion(program: Program, can_fuse: Callable[[Operation], bool] | None = None,
                         batch_norm: BatchNormChoice = False, unchecked_indices: bool = False) -> Program:
    """``program`` with each op of ``DECOMPOSITIONS`` that ``can_fuse`` refuses (all, without it) rewritten into
    ops the region generator writes; ops whose shapes do not allow it are kept. The program itself when
    nothing is decomposed. ``batch_norm``: ``batch_norm_training`` too, all (``True``) or those it accepts (a
    predicate); the others keep their vendor kernel. ``unchecked_indices``: scatters with one update per fibre
    too (the select they become checks no index).

    >>> import opgraph as og
    >>> from opgraph.passes.program import Program
    >>> g = og.Graph(); x = g.placeholder((2, 4, 3), og.float32, name="x")
    >>> y = g.group_norm(x, 2, name="gn")
    >>> out = decompose_for_fusion(Program(g, [x], [y], []))
    >>> [o.op.name for o in out.graph.ops]
    ['placeholder', 'reshape', 'layer_norm', 'reshape']
    >>> out.outputs[0].name
    'gn'
    """
    def wanted(o: Operation) -> bool:
        if o.op is BATCH_NORM_TRAINING:
            return batch_norm(o) if callable(batch_norm) else batch_norm
        if o.op is SCATTER_ALONG_AXIS:
            return unchecked_indices and _one_per_fibre(o)
        return o.op in DECOMPOSITIONS

    chosen = [o for o in program.graph.ops if wanted(o) and (can_fuse is None or not can_fuse(o))]
    if not chosen:
        return program
    ids = {id(o) for o in chosen}
    taken = {o.name for o in program.graph.ops}
    readers: dict[int, list[Operation]] = {}
    for o in program.graph.ops:
        for t in o.inputs:
            readers.setdefault(id(t), []).append(o)
    outputs = {id(t) for t in program.outputs}
    epilogues: dict[int, _Epilogue] = {}
    heads: set[int] = set()  # group_norm ops whose result stays in the grouped layout for the ops after it
    for o in chosen:
        applies = o.op is norm.GROUP_NORM and _group_norm_applies(o)
        chain = _epilogue_chain(o, readers, outputs, set(epilogues)) if applies else {}
        epilogues.update(chain)
        if chain:
            heads.add(id(o))
    grouped: set[int] = set()  # old values whose new value is in the grouped layout
    uses = Uses(readers, outputs)

    def fn(op: Operation, ins: list[Tensor], g: GraphCore) -> list[Tensor] | None:
        b = OpBuilder(g, op.name, taken)
        e = epilogues.get(id(op))
        if e is not None and id(e.source) in grouped:
            grouped.add(id(op.outputs[0]))
            return [_in_grouped_layout(b, op, ins, e)]
        if id(op) in heads:
            y = _group_norm_grouped(b, op, ins)
            if y is None:
                return None
            grouped.add(id(op.outputs[0]))
            return [y]
        if id(op) not in ids:
            return None
        return DECOMPOSITIONS[op.op](b, op, ins, uses)

    # a decomposition may leave a producer unread (the fill a one-update scatter took its value from)
    out = dead_code_elimination(rewrite(program, fn))
    return fold_views(out) if uses.fold_views else out


__all__ = ["DECOMPOSITIONS", "decompose_for_fusion"]
