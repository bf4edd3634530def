"""Channels-last layout: 2-D convolution graphs computed on NHWC tensors.

cuDNN's fastest convolutions (tensor cores, bfloat16 and TF32) read and write NHWC; given NCHW tensors they
transpose around every call (``nchwToNhwcKernel``), and per-channel work (batch-norm statistics, a bias or
scale per channel) becomes a strided reduction. This pass rewrites each NCHW ``conv2d`` (and depthwise, and
their gradients) to its NHWC form with transposes around it, then carries the transposes along in the same
walk: an elementwise op, a reduction, a batch norm, a concatenation, slice or pad, or another transpose reading
a transposed value works on the untransposed one instead and leaves the transpose after it, so the transposes
before the next convolution cancel. What remains are transposes where the graph leaves the NHWC world (a
flatten before a classifier, a graph output): a view there (``permute``), or read in place by a fused region.

Graph inputs of rank 4 read by these ops, or by carried ops connected to them, are *seeded* (seen as NHWC
through a transpose, a view): a backward graph reads the activations its forward saved, which the forward
returned as NHWC-stored views, so they stay NHWC. An input on a branch that meets no convolution is left as it
is (read in NHWC order, NCHW storage would be read across). Pooling ops keep their NCHW form (their indices
name positions in it) and PyTorch's kernels keep the memory format they are given, so their results are
seeded the same way when they read an NHWC-stored value (the NCHW view of one). Where a seed cannot be
carried, the op reads the original tensor: the pass never copies a tensor to change its layout, except for the
convolutions themselves: the NHWC lowering gives cuDNN a channels-last tensor, copying one stored NCHW (a
graph's images, in the forward and again for the weight gradient).

Inputs known to be stored channels-last (``CompilationDescriptor.channels_last_inputs``; the torch backend
names the inputs whose example tensors are) are seeded too, in graphs without convolutions as well: a batch
norm or a reduction of such an input then reads its storage in order, and the results leave as channels-last
views, as eager PyTorch returns them.

Runs where ``CompilationDescriptor(channels_last=...)`` asks (``None``, the default: on CUDA).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.opdef import FusionKind, OpDef
from ..ir.sources import CONSTANT, PLACEHOLDER
from ..ops import batch_norm, batch_norm_grad, conv, conv_grad, pooling, pooling_grad, pooling_indices, shape, slicing
from ..ops import gradient_support as gs
from ..ops._padding import TensorLayout
from ..ops.reduce import ReduceAttrs
from ..ops.state import VARIABLE
from .builder import fresh_name
from .dce import dead_code_elimination
from .program import Program, copy_op, rewrite

TO_NCHW = (0, 3, 1, 2)  # transpose(nhwc, TO_NCHW) is the NCHW tensor: its axis i is the NHWC axis TO_NCHW[i]
TO_NHWC = (0, 2, 3, 1)
Perm = tuple[int, ...]

_CONVS = {conv.CONV2D, conv.DEPTHWISE_CONV2D}
_DATA_GRADS = {conv_grad.CONV2D_DATA_GRADIENT, conv_grad.DEPTHWISE_CONV2D_DATA_GRADIENT}
_WEIGHT_GRADS = {conv_grad.CONV2D_WEIGHTS_GRADIENT, conv_grad.DEPTHWISE_CONV2D_WEIGHTS_GRADIENT}
CONVOLUTIONS_2D = frozenset(_CONVS | _DATA_GRADS | _WEIGHT_GRADS)  # the ops whose layout the pass changes
# ops kept in NCHW whose kernels keep a channels-last input's memory format: their results are seeded
_POOLS = {pooling.MAX_POOL2D, pooling.AVG_POOL2D, pooling.L2_NORM_POOL2D, pooling_grad.AVG_POOL2D_GRADIENT,
          pooling_grad.L2_NORM_POOL2D_GRADIENT, pooling_indices.MAX_POOL2D_RETURN_INDICES,
          pooling_indices.MAX_POOL2D_GRADIENT}
_BATCH_NORMS = {batch_norm.BATCH_NORM_TRAINING, batch_norm_grad.BATCH_NORM_TRAINING_GRADIENT}
_LEAVES = {PLACEHOLDER, CONSTANT}  # immutable: a view of one made later reads the same values
_PER_AXIS = {shape.CONCAT, slicing.SLICE, slicing.PAD}  # carried with their per-axis attributes permuted
MAX_RECOMPUTED_DEPTH = 3  # elementwise ops computed again under a transpose, per operand chain


def inverse(perm: Sequence[int]) -> Perm:
    return tuple(sorted(range(len(perm)), key=perm.__getitem__))


def _reads_variable(t: Tensor) -> bool:
    """``t`` is a variable or a view of one: a view of it made here could be read after an ``assign``, which
    snapshots only reads of the variable itself."""
    while t.op.op is not VARIABLE:
        if t.op.op.fusion is not FusionKind.INJECTIVE or not t.op.inputs:
            return False
        t = t.op.inputs[0]
    return True


def _is_nchw_conv(op: Operation) -> bool:
    """A static 2-D convolution (or gradient) in NCHW with no shape-reference inputs."""
    if op.op not in CONVOLUTIONS_2D or len(op.inputs) != 2:
        return False
    d = op.attrs if op.op in _CONVS else op.attrs.descriptor
    return d.data_layout is TensorLayout.NCHW and all(t.type.is_static for t in (*op.inputs, *op.outputs))


def _data_ports(op: Operation) -> range:
    """The inputs of ``op`` that hold activations (not convolution weights, not per-channel statistics)."""
    if op.op in _CONVS or op.op in _DATA_GRADS:
        return range(1)
    if op.op in _WEIGHT_GRADS:
        return range(2)
    if op.op in _BATCH_NORMS:
        return range(1 if op.op is batch_norm.BATCH_NORM_TRAINING else 2)
    if op.op in _POOLS or op.op.fusion is FusionKind.ELEMENTWISE:
        return range(len(op.inputs))
    return range(0)


def _layout_op(op: Operation) -> bool:
    """An op whose data inputs and outputs the pass puts in NHWC (or, for pooling, keeps channels-last)."""
    return _is_nchw_conv(op) or op.op in _POOLS or op.op in _BATCH_NORMS


def _carried(op: Operation) -> bool:
    """An op a pending transpose can pass."""
    return op.op.fusion is FusionKind.ELEMENTWISE or op.op is shape.TRANSPOSE or op.op in _PER_AXIS or (
        isinstance(op.attrs, ReduceAttrs) and op.op.fusion is FusionKind.REDUCTION)


def _seeded_inputs(ops: Sequence[Operation]) -> set[int]:
    """Graph inputs of rank 4 worth seeing NHWC: read by a layout op, or by carried ops connected to one (a
    backward graph's saved activations, read by the ReLU mask and the batch-norm gradient). An input on a
    branch that meets no convolution stays as it is: read in NHWC order it would be read across its storage."""
    consumers: dict[int, list[Operation]] = {}
    for op in ops:
        for t in op.inputs:
            consumers.setdefault(id(t), []).append(op)
    linked: set[int] = set()  # ops connected to a layout op through carried ops, either way
    stack = [op for op in ops if _layout_op(op)]
    while stack:
        op = stack.pop()
        if id(op) in linked:
            continue
        linked.add(id(op))
        near = [t.op for t in op.inputs] + [c for t in op.outputs for c in consumers.get(id(t), [])]
        stack.extend(o for o in near if id(o) not in linked and _carried(o) and o.outputs[0].rank == 4)
    seeded: set[int] = set()
    for op in ops:
        if id(op) in linked:
            for i in _data_ports(op):
                t = op.inputs[i]
                if t.op.op is PLACEHOLDER and t.rank == 4 and t.type.is_static:
                    seeded.add(id(t))
    return seeded


def channels_last(program: Program, stored_nhwc: Sequence[int] = ()) -> Program:
    """``program`` with its NCHW 2-D convolutions on NHWC tensors, and the ops reading its inputs at the
    positions ``stored_nhwc`` (stored channels-last) on their NHWC views; unchanged when it has neither."""
    ops = program.graph.ops
    convolutions = any(_is_nchw_conv(op) for op in ops)
    weights = {id(op.inputs[1]) for op in ops if op.op in _CONVS | _DATA_GRADS and len(op.inputs) > 1}
    stored = {id(t) for k, t in enumerate(program.inputs) if k in stored_nhwc and t.op.op is PLACEHOLDER
              and t.rank == 4 and t.type.is_static and id(t) not in weights}  # weights: the vendor call's own
    if not convolutions and not stored:
        return program
    w = _Walk(program, (_seeded_inputs(ops) if convolutions else set()) | stored)
    out = rewrite(program, w.visit)
    back = w.origin  # seeded values: the graph's own inputs and outputs stay the untransposed tensors
    return dead_code_elimination(Program(out.graph, [back.get(id(t), t) for t in out.inputs],
                                         [back.get(id(t), t) for t in out.outputs], out.effects))


class _Walk:
    """The rewrite: ``pending`` maps a transpose this pass made to (its input, its perm); ``origin`` maps a
    seeded value (a transpose of a transpose) to the tensor it stands for; ``seeded``: the graph inputs to seed
    (ids of the old graph's tensors)."""

    def __init__(self, program: Program, seeded: set[int]) -> None:
        self.taken = {o.name for o in program.graph.ops}
        self.seeded = seeded
        self.pending: dict[int, tuple[Tensor, Perm]] = {}
        self.origin: dict[int, Tensor] = {}
        self.unders: dict[tuple[int, Perm], Tensor | None] = {}  # made once per value and perm
        self.transposes: dict[tuple[int, Perm], Tensor] = {}
        self.g = GraphCore()  # replaced by the graph ``rewrite`` builds, on the first visit

    # ---- building -----------------------------------------------------------------------------
    def _add(self, op: OpDef, ins: Sequence[Tensor], attrs: object, name: str) -> Operation:
        return self.g._add_op(op, ins, attrs, fresh_name(name, self.taken, self.g))

    def transpose(self, t: Tensor, perm: Perm, name: str) -> Tensor:
        """``t`` transposed, marked pending (carried along by the ops after it); a transpose of a pending
        transpose composes with it."""
        if id(t) in self.pending:
            t, inner = self.pending[id(t)]
            perm = tuple(inner[p] for p in perm)
        if perm == tuple(range(len(perm))):
            return t
        key = (id(t), perm)
        if key in self.transposes:  # one per value and perm (a value read by two convolutions)
            return self.transposes[key]
        out = self._add(shape.TRANSPOSE, [t], shape.TransposeAttrs(perm), name).outputs[0]
        self.pending[id(out)] = (t, perm)
        if not _reads_variable(t):  # a variable's view is made where it is read (an assign may come between)
            self.transposes[key] = out
        return out

    def seed(self, t: Tensor, name: str) -> Tensor:
        """``t`` (NCHW, stored channels-last or not) seen as the NHWC value under a pending transpose."""
        nhwc = self._add(shape.TRANSPOSE, [t], shape.TransposeAttrs(TO_NHWC), f"{name}.nhwc").outputs[0]
        out = self._add(shape.TRANSPOSE, [nhwc], shape.TransposeAttrs(TO_NCHW), f"{name}.nchw").outputs[0]
        self.pending[id(out)] = (nhwc, TO_NCHW)
        self.origin[id(out)] = t
        return out

    def nhwc(self, t: Tensor, name: str) -> Tensor:
        """The NHWC value of the NCHW tensor ``t`` (the input of its pending transpose, or a transpose)."""
        src, perm = self.pending.get(id(t), (None, None))
        if src is not None and perm == TO_NCHW:
            return src
        return self.transpose(self.origin.get(id(t), t), TO_NHWC, name)

    def _copy(self, op: Operation, ins: Sequence[Tensor]) -> Operation:
        """``op`` on its inputs as they are: seeded values read as the tensors they stand for."""
        return copy_op(self.g, op, [self.origin.get(id(t), t) for t in ins])

    # ---- the walk -----------------------------------------------------------------------------
    def visit(self, op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | list[Tensor]:
        self.g = g  # the graph ``rewrite`` builds
        if op.op is PLACEHOLDER and id(op.outputs[0]) in self.seeded:
            return [self.seed(self._copy(op, ins).outputs[0], op.name)]
        if _is_nchw_conv(op):
            return self._conv(op, ins)
        if op.op in _POOLS and all(t.type.is_static for t in op.outputs) and any(
                self.pending.get(id(t), (t, ()))[1] == TO_NCHW for t in ins):  # it reads NHWC storage
            made = self._copy(op, ins)
            return [self.seed(t, f"{op.name}.{k}") if t.rank == 4 else t for k, t in enumerate(made.outputs)]
        carried = self._carry(op, ins)
        return carried if carried is not None else self._copy(op, ins)

    def _conv(self, op: Operation, ins: list[Tensor]) -> list[Tensor]:
        if op.op in _CONVS:
            attrs = dataclasses.replace(op.attrs, data_layout=TensorLayout.NHWC)
            y = self.g._add_op(op.op, [self.nhwc(ins[0], f"{op.name}.x"), ins[1]], attrs, op.name).outputs[0]
            return [self.transpose(y, TO_NCHW, f"{op.name}.nchw")]
        d = dataclasses.replace(op.attrs.descriptor, data_layout=TensorLayout.NHWC)
        if op.op in _DATA_GRADS:
            size = op.attrs.output_shape
            attrs = conv_grad.ConvGradientAttrs(d, None if size is None else tuple(size[p] for p in TO_NHWC))
            dx = self.g._add_op(op.op, [self.nhwc(ins[0], f"{op.name}.dy"), ins[1]], attrs, op.name).outputs[0]
            return [self.transpose(dx, TO_NCHW, f"{op.name}.nchw")]
        attrs = conv_grad.ConvGradientAttrs(d, op.attrs.output_shape)
        data = [self.nhwc(ins[0], f"{op.name}.dy"), self.nhwc(ins[1], f"{op.name}.x")]
        return list(self.g._add_op(op.op, data, attrs, op.name).outputs)

    def _carry(self, op: Operation, ins: list[Tensor]) -> list[Tensor] | None:
        """``op`` applied before the pending transpose of an input, when it can be (else None)."""
        moved = [self.pending[id(t)] for t in ins if id(t) in self.pending]
        if not moved:
            return None
        perm = moved[0][1]
        if op.op is shape.TRANSPOSE:
            return [self.transpose(ins[0], op.attrs.perm, op.name)]  # composed: a cancelled pair disappears
        if op.op.fusion is FusionKind.ELEMENTWISE and len(op.outputs) == 1 and op.outputs[0].rank == len(perm):
            under = [self._under(t, perm, f"{op.name}.in{k}") for k, t in enumerate(ins)]
            if any(u is None for u in under):
                return None
            y = self.g._add_op(op.op, under, op.attrs, op.name).outputs[0]  # type: ignore[arg-type]
            return [self.transpose(y, perm, f"{op.name}.nchw")]
        if isinstance(op.attrs, ReduceAttrs) and len(ins) == 1 and op.op.fusion is FusionKind.REDUCTION:
            return [self._reduce(op, ins[0], perm)]
        if op.op in _PER_AXIS and op.outputs[0].rank == len(perm):
            return self._per_axis(op, ins, perm)
        if op.op in _BATCH_NORMS:
            return self._batch_norm(op, ins, perm)
        return None

    def _under(self, t: Tensor, perm: Perm, name: str, depth: int = 0) -> Tensor | None:
        """A value ``u`` with ``transpose(u, perm)`` equal to ``t`` (broadcasting as ``t`` does), without a copy
        of anything large: the input of ``t``'s pending transpose, a scalar, a reshape of a value with one
        non-unit dim, a broadcast of such, a view of a graph leaf, or a few elementwise ops on those (computed
        again, in a fused region). None when only a copy would do."""
        if id(t) in self.pending:
            src, p = self.pending[id(t)]
            return src if p == perm else None
        if t.rank == 0:
            return t
        key = (id(t), perm)
        if key not in self.unders:
            self.unders[key] = self._build_under(t, perm, name, depth)
        return self.unders[key]

    def _build_under(self, t: Tensor, perm: Perm, name: str, depth: int) -> Tensor | None:
        if t.rank > len(perm) or not t.type.is_static or _reads_variable(t):
            return None
        full = (1,) * (len(perm) - t.rank) + tuple(int(d) for d in t.shape)  # type: ignore[arg-type]
        back = inverse(perm)
        target = tuple(full[b] for b in back)
        order = [b for b in back if full[b] != 1]
        if order == sorted(order):  # the non-unit dims keep their order: a reshape (a view)
            return self._add(shape.RESHAPE, [t], shape.ReshapeAttrs(target), name).outputs[0]
        producer = t.op
        if producer.op is shape.BROADCAST_TO:
            inner = self._under(producer.inputs[0], perm, f"{name}.b")
            if inner is None:
                return None
            return self._add(shape.BROADCAST_TO, [inner], shape.BroadcastAttrs(target), name).outputs[0]
        if producer.op is gs.BROADCAST_LIKE:  # a value broadcast into another's shape (autodiff's seeds)
            value, anchor = (self._under(u, perm, f"{name}.{k}", depth + 1) for k, u in enumerate(producer.inputs))
            if value is None or anchor is None:
                return None
            return self._add(gs.BROADCAST_LIKE, [value, anchor], producer.attrs, name).outputs[0]
        if producer.op in _LEAVES:
            if t.rank < len(perm):
                t = self._add(shape.RESHAPE, [t], shape.ReshapeAttrs(full), f"{name}.r").outputs[0]
            return self._add(shape.TRANSPOSE, [t], shape.TransposeAttrs(back), name).outputs[0]
        if producer.op.fusion is FusionKind.ELEMENTWISE and len(producer.outputs) == 1 and t.rank == len(perm) \
                and depth < MAX_RECOMPUTED_DEPTH:
            ins = [self._under(u, perm, f"{name}.{k}", depth + 1) for k, u in enumerate(producer.inputs)]
            if all(u is not None for u in ins):
                return self._add(producer.op, ins, producer.attrs, name).outputs[0]  # type: ignore[arg-type]
        return None

    def _per_axis(self, op: Operation, ins: list[Tensor], perm: Perm) -> list[Tensor] | None:
        """Concatenation (DenseNet, U-Net skips), slicing and padding, their per-axis attributes permuted."""
        a = op.attrs
        if op.op is shape.CONCAT:
            under = [self._under(t, perm, f"{op.name}.in{k}") for k, t in enumerate(ins)]
            if any(u is None for u in under):
                return None
            attrs: object = shape.AxisAttrs(perm[a.axis % len(perm)])
        else:
            if id(ins[0]) not in self.pending:
                return None
            under = [self.pending[id(ins[0])][0]]

            def moved(values: Sequence[int]) -> tuple[int, ...]:  # the value for axis i goes to axis perm[i]
                out = [0] * len(perm)
                for i, v in enumerate(values):
                    out[perm[i]] = v
                return tuple(out)

            def moved_bits(mask: int) -> int:
                return sum(1 << perm[i] for i in range(len(perm)) if mask >> i & 1)

            if op.op is slicing.PAD and len(a.left) == len(a.right) == len(perm):
                attrs = dataclasses.replace(a, left=moved(a.left), right=moved(a.right))
            elif op.op is slicing.SLICE and a.squeeze_mask == 0 and len(a.starts) == len(perm):
                attrs = dataclasses.replace(a, starts=moved(a.starts), ends=moved(a.ends), strides=moved(a.strides),
                                            start_mask=moved_bits(a.start_mask), end_mask=moved_bits(a.end_mask))
            else:
                return None
        y = self.g._add_op(op.op, under, attrs, op.name).outputs[0]  # type: ignore[arg-type]
        return [self.transpose(y, perm, f"{op.name}.nchw")]

    def _reduce(self, op: Operation, t: Tensor, perm: Perm) -> Tensor:
        src, _ = self.pending[id(t)]
        a: ReduceAttrs = op.attrs
        axes = tuple(sorted(perm[i] for i in a.axes))
        y = self.g._add_op(op.op, [src], dataclasses.replace(a, axes=axes), op.name).outputs[0]
        if a.keepdims:
            return self.transpose(y, perm, f"{op.name}.nchw")
        kept = [perm[i] for i in range(len(perm)) if i not in a.axes]
        rest = tuple(sorted(kept).index(v) for v in kept)  # the result's axes among the source's kept axes
        return self.transpose(y, rest, f"{op.name}.t")

    def _batch_norm(self, op: Operation, ins: list[Tensor], perm: Perm) -> list[Tensor] | None:
        data = list(_data_ports(op))
        if len(perm) != 4 or any(self.pending.get(id(ins[i]), (None, None))[1] != perm for i in data):
            return None
        under = [self.pending[id(t)][0] if i in data else t for i, t in enumerate(ins)]
        attrs = dataclasses.replace(op.attrs, axis=perm[op.attrs.axis])
        made = self.g._add_op(op.op, under, attrs, op.name).outputs
        return [self.transpose(made[0], perm, f"{op.name}.nchw"), *made[1:]]
