"""Matmul epilogues: matmul -> add(1-D bias) [-> relu | gelu] becomes one ``matmul_epilogue`` op.

The GEMM stays with the vendor library; the bias (and the activation where cuBLASLt computes exactly
opgraph's function) rides in its epilogue instead of a second kernel that rereads the product. It matches
``og.nn.Linear``'s ``x @ transpose(w) + b`` (the transpose is a view that ``addmm`` reads as is). Values
inside the chain must have no other reader and not be outputs; the fused op stands where the chain's
last op stood and takes its name. ``CompilationDescriptor(matmul_epilogues=False)`` turns the pass off (benchmarks).

On CUDA a product keeps its bias (and activation) out of the GEMM where the epilogue is timed slower than the
plain GEMM and a separate add (``ops.epilogue.lt_bias_costs_more``, once per shape at compile time): cuBLASLt's
heuristics pick slower float32 kernels for some shapes, such as a transformer's FFN down-projection (H200: 2.2x at
197x3072->768, 1.35x at 1576x3072->768; ``benchmarks/epilogue.py``, RESULTS.md). The bias add then joins the
region after it (a residual add, a norm, the relu), or is one elementwise kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.dtype import FLOAT_DTYPES
from ..core.shape import numel
from ..ir.graph import GraphCore, Operation, Tensor
from ..ops.activation import GELU, RELU, GeluApproximation
from ..ops.elementwise import ADD
from ..ops.epilogue import MATMUL_EPILOGUE, EpilogueActivation, MatmulEpilogueAttrs, lt_bias_costs_more
from ..ops.linalg import MATMUL
from ..ops.shape import RESHAPE
from .builder import fresh_name
from .program import Program, rewrite


@dataclass
class _Chain:
    ops: list[Operation]  # matmul, [reshape,] add, and the activation if any
    bias_index: int  # which input of the add is the bias
    activation: EpilogueActivation
    view: Operation | None = None  # a reshape of the product's leading dims before the add (done after the op)


def _activation_of(op: Operation) -> EpilogueActivation | None:
    if op.op is RELU:
        return EpilogueActivation.RELU
    if op.op is GELU and op.attrs.approximate is GeluApproximation.TANH:
        return EpilogueActivation.GELU_TANH
    # erf gelu stays a separate op: cuBLASLt's GELU epilogue is the tanh form, and addmm + a gelu kernel (which
    # may fuse with what follows) beat addmm + gelu inside one op (benchmarks/epilogue.py, H200, RESULTS.md)
    return None


PROBE_BYTES = 1 << 28  # operands of a GEMM larger than this keep the epilogue untimed (8192x3072->768: 3% slower)


def _slow_lt_bias(chain: _Chain, device_kind: str) -> bool:
    """The chain's epilogue costs more in cuBLASLt than apart (module docstring): timed on CUDA for static shapes."""
    x, w = chain.ops[0].inputs
    m, (k, n) = numel(x.shape[:-1]), w.shape
    if device_kind != "cuda" or m is None or k is None or n is None or not m * k * n:
        return False
    if (m * k + k * n + m * n) * x.dtype.itemsize > PROBE_BYTES:
        return False  # not timed: the probe's operands would take that much memory; the gap measured shrank with size
    relu = chain.activation is EpilogueActivation.RELU
    return lt_bias_costs_more(m, k, n, x.dtype.torch_dtype, relu)


def _chains(program: Program, device_kind: str) -> list[_Chain]:
    readers: dict[int, list[Operation]] = {}
    for op in program.graph.ops:
        for t in op.inputs:
            readers.setdefault(id(t), []).append(op)
    outputs = {id(t) for t in program.outputs}

    def only_reader(t: Tensor) -> Operation | None:
        r = readers.get(id(t), [])
        return r[0] if len(r) == 1 and id(t) not in outputs else None

    chains = []
    for op in program.graph.ops:
        if op.op is not MATMUL:
            continue
        x, w = op.inputs
        y = op.outputs[0]
        if x.rank < 2 or w.rank != 2 or y.dtype not in FLOAT_DTYPES:
            continue
        n = y.shape[-1]
        add = only_reader(y)
        view = None
        if add is not None and add.op is RESHAPE and n is not None and add.outputs[0].shape[-1] == n:
            # rows regrouped, each kept whole (nn.MultiheadAttention's in-projection of a (L, N, E) view): the
            # bias still adds along the last dim, so the op adds it and the reshape follows
            view, add = add, only_reader(add.outputs[0])
        summed = view.outputs[0] if view is not None else y
        if add is None or add.op is not ADD or add.inputs[0] is add.inputs[1]:
            continue
        k = 1 if add.inputs[0] is summed else 0
        bias = add.inputs[k]
        if n is None or bias.shape != (n,) or bias.dtype is not y.dtype or add.outputs[0].type != summed.type:
            continue  # the bias must broadcast over the last dim only, without promotion
        chain = _Chain([op, add] if view is None else [op, view, add], k, EpilogueActivation.NONE, view)
        nxt = only_reader(add.outputs[0])
        act = _activation_of(nxt) if nxt is not None else None
        if nxt is not None and act is not None:
            chain.ops.append(nxt)
            chain.activation = act
        if not _slow_lt_bias(chain, device_kind):
            chains.append(chain)
    return chains


def fuse_matmul_epilogues(program: Program, device_kind: str = "cpu") -> Program:
    """Replace each matmul -> bias add [-> relu/gelu] chain by one ``matmul_epilogue`` op (on CUDA, not those
    whose epilogue is timed slower than the ops apart)."""
    chain_of = {id(o): c for c in _chains(program, device_kind) for o in c.ops}
    if not chain_of:
        return program
    taken = {o.name for o in program.graph.ops}
    mapped: dict[int, list[Tensor]] = {}  # id(old op) -> its inputs in the new graph

    def fn(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | Sequence[Tensor] | None:
        c = chain_of.get(id(op))
        if c is None:
            return None
        mapped[id(op)] = ins
        if op is not c.ops[-1]:
            return ins[:1]  # a stand-in until the chain's last op: nothing outside the chain reads it
        x, w = mapped[id(c.ops[0])]
        bias = mapped[id(c.ops[2 if c.view is not None else 1])][c.bias_index]
        a = MatmulEpilogueAttrs(c.activation, True, tuple(o.name for o in c.ops if o is not c.view))
        if c.view is None:
            return g._add_op(MATMUL_EPILOGUE, [x, w, bias], a, op.name)
        product = g._add_op(MATMUL_EPILOGUE, [x, w, bias], a, fresh_name(f"{op.name}.product", taken, g))
        return g._add_op(RESHAPE, product.outputs, c.view.attrs, op.name)

    return rewrite(program, fn)


__all__ = ["fuse_matmul_epilogues"]
