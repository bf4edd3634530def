"""Convolution biases into the convolution: ``conv2d -> add(bias placed as (C, 1, 1))`` becomes one ``conv2d_bias``.

Where no kernel generator fuses the add with what follows (the CPU), it is a pass of its own over the
convolution's output; oneDNN adds the bias inside the convolution instead. Only the plain convolution qualifies:
NCHW data, OIHW weights, static shapes, symmetric padding; the bias a rank-1 tensor of the output's channels
reshaped (``expand_dims``/``reshape``) to broadcast along dim 1, with the conv's dtype. The conv's output must
have no other reader and not be an output; the fused op takes the add's name.

>>> import opgraph as og, torch
>>> from opgraph.passes.program import Program
>>> g = og.Graph()
>>> x, w, b = g.placeholder((1, 2, 5, 5)), g.placeholder((3, 2, 3, 3)), g.placeholder((3,))
>>> y = g.add(g.conv2d(x, w, og.Conv2dDescriptor()), g.expand_dims(b, [1, 2]), name="y")
>>> [o.op.name for o in fuse_conv_biases(Program(g, [x, w, b], [y], [])).graph.ops]
['placeholder', 'placeholder', 'placeholder', 'conv2d_bias']
"""

from __future__ import annotations

from ..ir.graph import GraphCore, Operation, Tensor
from ..ops.conv import CONV2D, TensorLayout, WeightsLayout, _pads
from ..ops.conv_bias import CONV2D_BIAS, ConvBiasAttrs
from ..ops.elementwise import ADD
from ..ops.shape import EXPAND_DIMS, RESHAPE
from .dce import dead_code_elimination
from .program import Program, rewrite


def _bias_source(t: Tensor, channels: int) -> Tensor | None:
    """The rank-1 (channels,) tensor that ``t``, shaped (channels, 1, 1) or (1, channels, 1, 1), reshapes."""
    if t.shape not in ((channels, 1, 1), (1, channels, 1, 1)):
        return None
    while t.op.op in (EXPAND_DIMS, RESHAPE) and t.rank != 1:
        t = t.op.inputs[0]
    return t if t.shape == (channels,) else None


def _fusable(conv: Operation) -> tuple[int, int] | None:
    """The conv's symmetric (y, x) padding when it is the plain convolution ``conv2d_bias`` computes."""
    d = conv.attrs
    x, w = conv.inputs
    if d.data_layout is not TensorLayout.NCHW or d.weights_layout is not WeightsLayout.OIHW:
        return None
    if not (x.type.is_static and w.type.is_static):
        return None
    pads = _pads(d, x.shape[2:], w.shape[2:])  # type: ignore[arg-type]
    if any(before != after for before, after in pads):
        return None
    return pads[0][0], pads[1][0]


def fuse_conv_biases(program: Program) -> Program:
    """Replace each conv2d -> add(placed bias) pair by one ``conv2d_bias`` op."""
    readers: dict[int, list[Operation]] = {}
    for op in program.graph.ops:
        for t in op.inputs:
            readers.setdefault(id(t), []).append(op)
    outputs = {id(t) for t in program.outputs}
    plans: dict[int, tuple[Operation, Tensor, tuple[int, int]]] = {}  # id(add) -> (conv, bias, padding)
    for op in program.graph.ops:
        if op.op is not CONV2D:
            continue
        y = op.outputs[0]
        users = readers.get(id(y), [])
        padding = _fusable(op)
        if padding is None or len(users) != 1 or id(y) in outputs or users[0].op is not ADD:
            continue
        add = users[0]
        other = add.inputs[1] if add.inputs[0] is y else add.inputs[0]
        bias = _bias_source(other, y.shape[1])  # type: ignore[arg-type]
        if other is y or bias is None or bias.dtype is not y.dtype or add.outputs[0].type != y.type:
            continue
        plans[id(add)] = (op, bias, padding)
    if not plans:
        return program
    convs = {id(conv) for conv, _, _ in plans.values()}
    mapped: dict[int, list[Tensor]] = {}

    def fn(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | list[Tensor] | None:
        if id(op) in convs:
            mapped[id(op)] = ins
            return ins[:1]  # a stand-in until the add: nothing else reads the conv's output
        plan = plans.get(id(op))
        if plan is None:
            return None
        conv, bias, padding = plan
        x, w = mapped[id(conv)]
        new_bias = next(t for t, old in zip(ins, op.inputs, strict=True) if old is not conv.outputs[0])
        while new_bias.rank != 1:  # back through the reshapes, in the new graph
            new_bias = new_bias.op.inputs[0]
        d = conv.attrs
        a = ConvBiasAttrs(d.strides, padding, d.dilation_rates, d.groups, (conv.name, op.name))
        return g._add_op(CONV2D_BIAS, [x, w, new_bias], a, op.name)

    return dead_code_elimination(rewrite(program, fn))  # the bias's reshapes are left unread


__all__ = ["fuse_conv_biases"]
