"""One vendor call for what the graph spells as several ops, where no kernel generator fuses elementwise work (the
CPU): each such op is a pass of its own over memory there. The ops are ``ops/vendor_fused.py``'s.

* ``conv2d -> add(bias placed as (C, 1, 1))`` becomes ``conv2d_bias`` (oneDNN adds the bias inside the
  convolution). NCHW data and OIHW weights (any padding and shapes); the bias
  a rank-1 tensor of the output's channels reshaped (``expand_dims``/``reshape``) to broadcast along dim 1, with
  the conv's dtype. The conv's output must have no other reader and not be an output; the op takes the add's name.
* ``normalize(x, mean, var, gamma, beta)`` whose statistics and parameters are rank-1 (C,) tensors reshaped to
  broadcast along one axis of x, all in x's dtype (float32 or float64), becomes ``batch_norm_inference`` of the
  rank-1 tensors: the four reshapes go, and PyTorch's inference batch norm makes one pass over x.
* ``max_pool{2,4}d_return_indices`` whose indices nothing reads (inference: PyTorch's decompositions turn every
  max pooling into the one with indices) becomes ``max_pool{2,4}d`` with the same descriptor: the same values,
  without computing and writing the indices.
* ``select(less_equal(x, t), 0, g)`` with a scalar constant ``t`` and ``0`` (ReLU's gradient as PyTorch's
  decompositions spell it) becomes ``threshold_gradient``: PyTorch's ``threshold_backward``, one pass.
* ``conv2d_data_gradient`` and ``conv2d_weights_gradient`` of one incoming gradient and descriptor (NCHW, OIHW,
  static shapes), the data gradient's weights and the weights gradient's source being the convolution's, become
  one ``conv2d_gradients`` (oneDNN's backward computes both in one call), placed where the first of the two was;
  a ``reduce_sum`` of that gradient over (N, H, W) (the bias gradient) joins them as a third output.

>>> import opgraph as og, torch
>>> from opgraph.passes.program import Program
>>> g = og.Graph()
>>> x, w, b = g.placeholder((1, 2, 5, 5)), g.placeholder((3, 2, 3, 3)), g.placeholder((3,))
>>> y = g.add(g.conv2d(x, w, og.Conv2dDescriptor()), g.expand_dims(b, [1, 2]), name="y")
>>> [o.op.name for o in fuse_vendor_calls(Program(g, [x, w, b], [y], [])).graph.ops]
['placeholder', 'placeholder', 'placeholder', 'conv2d_bias']
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.sources import CONSTANT
from ..ops.conv import CONV2D, TensorLayout, WeightsLayout
from ..ops.conv_grad import CONV2D_DATA_GRADIENT, CONV2D_WEIGHTS_GRADIENT
from ..ops.elementwise import ADD, LESS_EQUAL, SELECT
from ..ops.norm import NORMALIZE, channel_axis
from ..ops.pooling import MAX_POOL2D, MAX_POOL4D
from ..ops.pooling_indices import MAX_POOL2D_RETURN_INDICES, MAX_POOL4D_RETURN_INDICES
from ..ops.reduce import REDUCE_SUM
from ..ops.shape import EXPAND_DIMS, RESHAPE
from ..ops.vendor_fused import (
    BATCH_NORM_INFERENCE,
    CONV2D_BIAS,
    CONV2D_GRADIENTS,
    THRESHOLD_GRADIENT,
    BatchNormInferenceAttrs,
    ConvBiasAttrs,
    ConvGradientsAttrs,
    ThresholdGradientAttrs,
)
from .dce import dead_code_elimination
from .program import Program, copy_op, readers, rewrite


def _rank1_source(t: Tensor, channels: int | None) -> Tensor | None:
    """The rank-1 (channels,) tensor that ``t`` reshapes (through ``expand_dims``/``reshape``), if it does."""
    while t.op.op in (EXPAND_DIMS, RESHAPE) and t.rank != 1:
        t = t.op.inputs[0]
    return t if t.rank == 1 and channels is not None and t.shape == (channels,) else None


def _in_new_graph(t: Tensor) -> Tensor:
    """The rank-1 tensor a copied chain of reshapes starts from, in the rewritten graph."""
    while t.rank != 1:
        t = t.op.inputs[0]
    return t


def _conv_bias_plans(program: Program) -> dict[int, Operation]:
    """id(add) -> its conv, for each NCHW/OIHW conv -> add(placed bias) pair."""
    read_by, outputs = readers(program), {id(t) for t in program.outputs}
    plans = {}
    for op in program.graph.ops:
        if op.op is not CONV2D:
            continue
        y = op.outputs[0]
        users = read_by.get(id(y), [])
        d = op.attrs
        if d.data_layout is not TensorLayout.NCHW or d.weights_layout is not WeightsLayout.OIHW \
                or len(users) != 1 or id(y) in outputs or users[0].op is not ADD:
            continue
        add = users[0]
        other = add.inputs[1] if add.inputs[0] is y else add.inputs[0]
        if other is y or other.shape not in ((y.shape[1], 1, 1), (1, y.shape[1], 1, 1)):
            continue
        bias = _rank1_source(other, y.shape[1])
        if bias is None or bias.dtype is not y.dtype or add.outputs[0].type != y.type:
            continue
        plans[id(add)] = op
    return plans


def _batch_norm_axis(op: Operation) -> int | None:
    """The channel axis of a ``normalize`` whose other inputs are all reshaped rank-1 (C,) tensors in x's dtype."""
    if op.op is not NORMALIZE or op.inputs[0].dtype.torch_dtype not in (torch.float32, torch.float64):
        return None
    x = op.inputs[0]
    axis = channel_axis([t.type for t in op.inputs])
    if axis is None or any(_rank1_source(t, x.shape[axis]) is None for t in op.inputs[1:]):
        return None
    return axis


_WITHOUT_INDICES = {MAX_POOL2D_RETURN_INDICES: MAX_POOL2D, MAX_POOL4D_RETURN_INDICES: MAX_POOL4D}


def _pools_without_indices(program: Program) -> set[int]:
    """ids of the max poolings with indices whose indices nothing reads."""
    read_by, outputs = readers(program), {id(t) for t in program.outputs}
    return {id(op) for op in program.graph.ops if op.op in _WITHOUT_INDICES
            and not read_by.get(id(op.outputs[1])) and id(op.outputs[1]) not in outputs}


def _scalar_constant(t: Tensor) -> float | None:
    """The value of a constant holding one number, else None."""
    payload = t.op.payload if t.op.op is CONSTANT else None
    if not isinstance(payload, torch.Tensor) or payload.numel() != 1 or not payload.is_floating_point():
        return None
    return float(payload.reshape(()).item())


def _threshold_plans(program: Program) -> dict[int, tuple[Tensor, float]]:
    """id(select) -> (x, threshold) for each ``select(less_equal(x, t), 0, g)`` whose mask only it reads, with x, g
    and the result of one type."""
    read_by, outputs = readers(program), {id(t) for t in program.outputs}
    plans = {}
    for op in program.graph.ops:
        if op.op is not SELECT:
            continue
        mask, zero, g = op.inputs
        if mask.op.op is not LESS_EQUAL or len(read_by.get(id(mask), [])) != 1 or id(mask) in outputs:
            continue
        x, t = mask.op.inputs
        threshold = _scalar_constant(t) if t.rank == 0 else None
        fill = _scalar_constant(zero)
        # +0.0 only: threshold_backward writes +0.0, and a -0.0 fill would differ in the sign of zero
        if threshold is None or fill != 0.0 or math.copysign(1.0, fill) < 0 or \
                not x.type == g.type == op.outputs[0].type:
            continue
        plans[id(op)] = (x, threshold)
    return plans


GradientGroup = tuple[Operation, Operation, "Operation | None"]  # data, weights and bias gradients


def _gradient_pairs(program: Program) -> dict[int, GradientGroup]:
    """id(the earliest op) -> (data gradient, weights gradient, bias gradient or None) of one incoming gradient and
    descriptor, whose other inputs (the source and the weights) exist before the earliest op. A bias gradient is a
    ``reduce_sum`` of that incoming gradient over (N, H, W), as the torch frontend writes ``convolution_backward``'s."""
    position = {id(op): i for i, op in enumerate(program.graph.ops)}
    read_by, outputs = readers(program), {id(t) for t in program.outputs}
    by_gradient: dict[int, list[Operation]] = {}
    bias_sums: dict[int, list[Operation]] = {}
    for op in program.graph.ops:
        live = read_by.get(id(op.outputs[0])) or id(op.outputs[0]) in outputs if op.outputs else False
        if op.op is REDUCE_SUM and live and op.inputs[0].rank == 4 and op.attrs.axes == (0, 2, 3) \
                and not op.attrs.keepdims:
            bias_sums.setdefault(id(op.inputs[0]), []).append(op)
        if op.op not in (CONV2D_DATA_GRADIENT, CONV2D_WEIGHTS_GRADIENT):
            continue
        d = op.attrs.descriptor
        torch_layouts = d.data_layout is TensorLayout.NCHW and d.weights_layout is WeightsLayout.OIHW
        if live and len(op.inputs) == 2 and torch_layouts:  # a dead one is not computed
            by_gradient.setdefault(id(op.inputs[0]), []).append(op)
    pairs: dict[int, GradientGroup] = {}
    for grad, ops in by_gradient.items():
        weights = [op for op in ops if op.op is CONV2D_WEIGHTS_GRADIENT]
        sums = bias_sums.get(grad, [])
        for data in (op for op in ops if op.op is CONV2D_DATA_GRADIENT):
            for wg in weights:
                bias = sums[0] if sums else None
                first = min((data, wg, *((bias,) if bias else ())), key=lambda op: position[id(op)])
                before = all(position.get(id(t.op), -1) < position[id(first)] for t in (*data.inputs, *wg.inputs))
                if data.attrs.descriptor == wg.attrs.descriptor and data.inputs[1].type == wg.outputs[0].type \
                        and wg.inputs[1].type == data.outputs[0].type and before:
                    pairs[id(first)] = (data, wg, bias)
                    weights.remove(wg)
                    if bias is not None:
                        sums.remove(bias)
                    break
    return pairs


def fuse_vendor_calls(program: Program) -> Program:
    """Replace conv2d -> add(placed bias) pairs by ``conv2d_bias``, per-channel ``normalize`` ops by
    ``batch_norm_inference``, max poolings whose indices go unread by poolings without them, ReLU's masked
    gradients by ``threshold_gradient`` and a convolution's two gradients by ``conv2d_gradients``; the reshapes and
    masks left unread go."""
    conv_plans = _conv_bias_plans(program)
    norm_axes = {id(op): axis for op in program.graph.ops if (axis := _batch_norm_axis(op)) is not None}
    pools = _pools_without_indices(program)
    thresholds = _threshold_plans(program)
    pairs = _gradient_pairs(program)
    if not conv_plans and not norm_axes and not pools and not thresholds and not pairs:
        return program
    new_of: dict[int, Tensor] = {}  # id(old tensor) -> its value in the new graph (placeholders are ops too)
    later: dict[int, Tensor] = {}  # id(the later op of a gradient pair) -> its output, made with the earlier one
    convs = {id(conv) for conv in conv_plans.values()}
    mapped: dict[int, list[Tensor]] = {}

    def fn(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | Sequence[Tensor | None] | None:
        result = rewritten(op, ins, g)
        if result is None:
            result = copy_op(g, op, ins)
        outs = result.outputs if isinstance(result, Operation) else result
        new_of.update((id(old), new) for old, new in zip(op.outputs, outs, strict=True) if new is not None)
        return result

    def rewritten(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | Sequence[Tensor | None] | None:
        if id(op) in later:
            return [later.pop(id(op))]
        if id(op) in pairs:
            group = [o for o in pairs[id(op)] if o is not None]
            d = group[0].attrs.descriptor
            fields = {f.name: getattr(d, f.name) for f in dataclasses.fields(d)}
            grad, x, w = (new_of[id(t)] for t in (group[0].inputs[0], group[1].inputs[1], group[0].inputs[1]))
            both = ConvGradientsAttrs(**fields, bias=len(group) == 3, names=tuple(o.name for o in group))
            made = g._add_op(CONV2D_GRADIENTS, [grad, x, w], both, op.name).outputs
            later.update((id(o), t) for o, t in zip(group, made, strict=True) if o is not op)
            return [made[group.index(op)]]
        if id(op) in thresholds:
            x, threshold = thresholds[id(op)]
            names = (op.inputs[0].op.name, op.name)
            return g._add_op(THRESHOLD_GRADIENT, [ins[2], new_of[id(x)]], ThresholdGradientAttrs(threshold, names),
                             op.name)
        if id(op) in pools:
            return [g._add_op(_WITHOUT_INDICES[op.op], ins, op.attrs, op.name).outputs[0], None]
        if id(op) in convs:
            mapped[id(op)] = ins
            return ins[:1]  # a stand-in until the add: nothing else reads the conv's output
        if id(op) in norm_axes:
            a = op.attrs
            bn = BatchNormInferenceAttrs(norm_axes[id(op)], float(a.epsilon), a.has_gamma, a.has_beta, (op.name,))
            return g._add_op(BATCH_NORM_INFERENCE, [ins[0], *(_in_new_graph(t) for t in ins[1:])], bn, op.name)
        conv = conv_plans.get(id(op))
        if conv is None:
            return None
        x, w = mapped[id(conv)]
        bias = _in_new_graph(next(t for t, old in zip(ins, op.inputs, strict=True) if old is not conv.outputs[0]))
        fields = {f.name: getattr(conv.attrs, f.name) for f in dataclasses.fields(conv.attrs)}
        attrs = ConvBiasAttrs(**fields, names=(conv.name, op.name))
        return g._add_op(CONV2D_BIAS, [x, w, bias], attrs, op.name)

    return dead_code_elimination(rewrite(program, fn))  # reshapes of biases and statistics, masks: left unread


__all__ = ["fuse_vendor_calls"]
