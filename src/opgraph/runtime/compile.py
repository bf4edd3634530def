"""Compilation: select the ops a run needs, specialise types, run the passes, generate the function."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.errors import AttributeValueError, DeviceError, FeedError, GraphError
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor, infer_types
from ..ir.sources import PLACEHOLDER, PlaceholderAttrs
from ..passes import (
    DROP,
    Pass,
    PassRecord,
    Program,
    common_subexpression_elimination,
    constant_folding,
    dead_code_elimination,
    fold_views,
    pads_to_concat,
    rewrite,
    run_pipeline,
    transpose_products,
)
from ..passes.decompose import BatchNormChoice


@dataclass(frozen=True)
class CompilationDescriptor:
    """How to compile (MPSGraph's ``MPSGraphCompilationDescriptor``).

    ``optimization_level``: 0 runs the graph as built; 1 (default) adds dead-code elimination,
    common-subexpression elimination and constant folding.
    ``verify_each_pass``: run the IR verifier after every pass (tests turn this on).
    ``constant_fold_limit``: the largest result, in elements, that folding may produce.
    ``check_indices``: gather/scatter ops raise ``og.ExecutionError`` on an out-of-range index. On a
    GPU the check costs one host synchronisation per such op; ``False`` skips it (an out-of-range
    index is then undefined behaviour, as in MPSGraph).
    ``cuda_graphs``: on CUDA, an executable whose input types are all static captures its whole run into
    a CUDA graph on the first run and replays it afterwards (variables are updated in place, so replays
    see each other's assigns). A replay copies the inputs into the graph's buffers (except those declared
    with ``exe.mark_static_inputs``, read in place) and returns the graph's own output buffers; a run while
    the caller still holds outputs of the last replay (replaying would overwrite them) captures again and
    copies those outputs out from then on. Where the copies cost more than the launches a replay saves it
    runs op by op, and where they are a fair share of it the next two runs time a replay against an
    op-by-op run and keep the faster. An executable that cannot be captured
    (an op that synchronises with the host, such as checked gather indices fed at run time) runs op by op;
    ``exe.cuda_graph_status`` says which and why.
    ``fusion``: matmul bias/activation epilogues go into the vendor GEMM, and regions of elementwise,
    injective and reduction ops become one generated Triton kernel each: on CUDA, and on the CPU only with
    ``triton_interpret=True`` (Triton's interpreter runs the kernels: slow, for checking them without a
    GPU). On by default. ``matmul_epilogues=False`` keeps bias and activation out of the GEMM (then they
    fuse into a region like any elementwise op).
    ``channels_last``: 2-D convolutions and the ops between them compute on NHWC tensors (``passes.layout``;
    cuDNN's fast kernels are NHWC). ``True``: on every device; ``None`` (default): on CUDA (a ResNet-50 training
    step on an H200 is 1.14x / 1.24x faster than in NCHW, float32 / bfloat16); ``False``: never.
    ``channels_last_inputs``: positions of the executable's inputs (in feed order) stored channels-last, as
    ``torch.channels_last`` stores an NCHW tensor (the torch backend fills it in from its example inputs). With
    the layout pass on, they are read through NHWC views, in graphs without convolutions too, so batch norms,
    reductions and elementwise ops on them walk memory in order and their results come back channels-last.
    ``batch_norm_regions``: with fusion, ``batch_norm_training`` is computed in generated kernels (its statistics
    as one reduction region, the normalisation with the elementwise ops after it, as a ReLU) instead of the
    vendor's batch-norm kernel (cuDNN) and a kernel per op after it. ``True``: every batch norm; ``None``
    (default): on CUDA, those of 16- and 32-bit inputs (ResNet-50 training steps on an H200: bfloat16 autocast
    26.65 against 30.01 ms, seventh session; float32 34.92 against 38.89 ms, eleventh, once split statistics
    kernels were compiled without FMA contraction; ``benchmarks/RESULTS.md``); ``False``: none.
    ``pad_matmuls``: GEMMs whose leading dimensions are not multiples of 16 bytes (a language model's vocabulary)
    run on zero-padded operands (``passes.pad_matmul``). ``None`` (default): on CUDA, the large ones that a probe
    times faster padded (BERT-base's and GPT-2's output layers in bfloat16 and float32 on an H200, 1.6-7.5x
    faster: RESULTS.md, sixteenth and seventeenth sessions);
    ``True``: every eligible one, on any device; ``False``: none (nor at ``optimization_level=0``).
    ``profile_ops``: each op's call runs inside a ``torch.profiler.record_function`` named ``"<op> %<name>"``, so
    a profile shows which graph op launched each PyTorch op and kernel (``benchmarks/profile_backend.py
    --aten-ops``). A few microseconds per op on the host; off by default.
    """

    optimization_level: int = 1
    verify_each_pass: bool = False
    constant_fold_limit: int = 1 << 16
    check_indices: bool = True
    cuda_graphs: bool = True
    fusion: bool = True
    triton_interpret: bool = False
    matmul_epilogues: bool = True
    channels_last: bool | None = None
    channels_last_inputs: tuple[int, ...] = ()
    batch_norm_regions: bool | None = None
    pad_matmuls: bool | None = None
    profile_ops: bool = False

    def __post_init__(self) -> None:
        if self.optimization_level not in (0, 1):
            raise AttributeValueError(f"CompilationDescriptor: optimization_level must be 0 or 1, "
                                      f"got {self.optimization_level!r}")
        for name in ("channels_last", "batch_norm_regions", "pad_matmuls"):  # True, False or None (the default)
            if type(getattr(self, name)) not in (bool, type(None)):
                raise AttributeValueError(f"CompilationDescriptor: {name} must be True, False or None, got "
                                          f"{getattr(self, name)!r}")
        if self.constant_fold_limit < 0:
            raise AttributeValueError("CompilationDescriptor: constant_fold_limit must be >= 0")
        if not isinstance(self.channels_last_inputs, tuple) or not all(
                type(k) is int and k >= 0 for k in self.channels_last_inputs):
            raise AttributeValueError(f"CompilationDescriptor: channels_last_inputs must be a tuple of input "
                                      f"positions (ints >= 0), got {self.channels_last_inputs!r}")

    def passes(self) -> list[Pass]:
        if self.optimization_level == 0:
            return [Pass("dead_code_elimination", dead_code_elimination)]
        return [
            Pass("dead_code_elimination", dead_code_elimination),
            Pass("common_subexpression_elimination", common_subexpression_elimination),
            Pass("constant_folding", lambda p: constant_folding(p, self.constant_fold_limit)),
            Pass("fold_views", fold_views),
            Pass("transpose_products", transpose_products),
            Pass("pads_to_concat", pads_to_concat),
            Pass("common_subexpression_elimination", common_subexpression_elimination),
            Pass("dead_code_elimination", dead_code_elimination),
        ]


def check_roots(graph: GraphCore, feeds: Mapping[Tensor, TensorType], targets: Sequence[Tensor],
                target_ops: Sequence[Operation]) -> None:
    for t in feeds:
        if not isinstance(t, Tensor) or t.graph is not graph:
            raise FeedError(f"feed key {t!r} is not a tensor of this graph")
        if t.op.op is not PLACEHOLDER:
            raise FeedError(f"feed key %{t.name} is a {t.op.op.name} output; only placeholders are fed")
    for t in targets:
        if not isinstance(t, Tensor) or t.graph is not graph:
            raise GraphError(f"target {t!r} is not a tensor of this graph")
    for o in target_ops:
        if not isinstance(o, Operation) or o.graph is not graph:
            raise GraphError(f"target op {o!r} is not an operation of this graph")


def select_and_specialize(graph: GraphCore, feeds: Mapping[Tensor, TensorType], targets: Sequence[Tensor],
                          target_ops: Sequence[Operation]) -> Program:
    """The ops the targets need, with placeholders given the fed types and all types re-inferred."""
    check_roots(graph, feeds, targets, target_ops)
    needed: set[int] = {id(t.op) for t in targets} | {id(o) for o in target_ops} | {id(t.op) for t in feeds}
    for op in reversed(graph.ops):
        if id(op) in needed:
            needed.update(id(t.op) for t in op.inputs)
    fed = {id(t.op): ty for t, ty in feeds.items()}
    for op in graph.ops:
        if id(op) in needed and op.op is PLACEHOLDER and id(op) not in fed:
            raise FeedError(f"placeholder %{op.name}: {op.outputs[0].type} is needed by the targets but not fed")

    def specialize(op: Operation, ins: list[Tensor], g: GraphCore) -> Operation | object | None:
        if id(op) not in needed:
            return DROP
        if op.op is PLACEHOLDER:
            declared, given = op.outputs[0].type, fed[id(op)]
            if not declared.accepts(given):
                raise FeedError(f"feed for placeholder %{op.name}: expected {declared}, got {given}")
            return g._add_op(PLACEHOLDER, [], PlaceholderAttrs(given.shape, given.dtype), op.name)
        if op.payload is not None:
            return None
        types = infer_types(op.op, op.attrs, tuple(t.type for t in ins))
        return g._add_op(op.op, ins, op.attrs, op.name, None, types)

    roots = Program(graph, [t for t in feeds], list(targets), list(target_ops))
    return rewrite(roots, specialize)  # type: ignore[arg-type]


def batch_norm_regions(descriptor: CompilationDescriptor, device_kind: str) -> BatchNormChoice:
    """Which ``batch_norm_training`` ops region formation decomposes into generated kernels (see the
    descriptor's ``batch_norm_regions``).

    >>> choice = batch_norm_regions(CompilationDescriptor(), "cuda")
    >>> import opgraph as og
    >>> g = og.Graph()
    >>> x = g.placeholder((8, 4, 5, 5), og.bfloat16)
    >>> y, _, _ = g.batch_norm_training(x, axis=1)
    >>> choice(y.op), batch_norm_regions(CompilationDescriptor(), "cpu")
    (True, False)
    """
    if descriptor.batch_norm_regions is not None:
        return descriptor.batch_norm_regions
    if device_kind != "cuda":
        return False
    return lambda op: op.inputs[0].dtype.bits <= 32  # float64 keeps the vendor kernel (no float64 split sums)


def _check_interpreter_possible() -> None:
    """Triton decides at import whether its own library functions (tl.sum, tl.max ...) are interpreted: once
    imported for a GPU (torch.compile imports it), kernels cannot switch to the interpreter in this process."""
    triton = sys.modules.get("triton")
    if triton is None:
        return
    library_fn = getattr(getattr(triton, "language", None), "sum", None)
    if library_fn is not None and type(library_fn).__name__ != "InterpretedFunction":
        raise DeviceError("CompilationDescriptor(triton_interpret=True): Triton was imported before the "
                          "interpreter was asked for (torch.compile imports it), so its library functions are "
                          "compiled for a GPU; set TRITON_INTERPRET=1 in the environment before starting Python")


def optimize(program: Program, descriptor: CompilationDescriptor,
             device_kind: str = "cpu") -> tuple[Program, list[PassRecord]]:
    log: list[PassRecord] = []
    if descriptor.verify_each_pass:
        program.graph.verify()
    beyond = [k for k in descriptor.channels_last_inputs if k >= len(program.inputs)]
    if beyond:
        raise AttributeValueError(f"CompilationDescriptor: channels_last_inputs {beyond} name no input (the "
                                  f"executable has {len(program.inputs)})")
    passes = descriptor.passes()
    fusing = descriptor.fusion and (device_kind == "cuda" or descriptor.triton_interpret)
    if descriptor.optimization_level >= 1 and (descriptor.channels_last or
                                               (descriptor.channels_last is None and device_kind == "cuda")):
        from ..passes.layout import channels_last

        stored = descriptor.channels_last_inputs
        passes.append(Pass("channels_last", lambda p: channels_last(p, stored)))
    if fusing and descriptor.optimization_level >= 1:  # where the max-pool kernels run (after layout: NCHW only)
        from ..passes.pool_indices import compact_pool_indices

        passes.append(Pass("compact_pool_indices", compact_pool_indices))
    if descriptor.fusion and descriptor.matmul_epilogues and descriptor.optimization_level >= 1:
        from ..passes.epilogue import fuse_matmul_epilogues  # also on the CPU: addmm adds the bias

        passes.append(Pass("fuse_matmul_epilogues",  # before region formation
                           lambda p: fuse_matmul_epilogues(p, device_kind)))
    if descriptor.optimization_level >= 1 and descriptor.pad_matmuls is not False and (
            descriptor.pad_matmuls or device_kind == "cuda"):
        from ..passes.pad_matmul import pad_matmuls  # after the epilogues: a bias is padded with its product

        forced = (lambda *_: True) if descriptor.pad_matmuls else None
        passes.append(Pass("pad_matmuls", lambda p: pad_matmuls(p, device_kind, forced)))
    if descriptor.fusion and descriptor.optimization_level >= 1 and not fusing:
        from ..passes.vendor_fused import fuse_vendor_calls  # where regions form, those ops join them instead

        passes.append(Pass("fuse_vendor_calls", fuse_vendor_calls))
    if fusing:
        if descriptor.triton_interpret:  # Triton reads this when a kernel is loaded
            _check_interpreter_possible()
            os.environ["TRITON_INTERPRET"] = "1"
        from ..codegen.triton.fused import can_emit, can_fuse, reduced_axes
        from ..passes.fuse import fuse_regions

        batch_norm = batch_norm_regions(descriptor, device_kind)
        unchecked = not descriptor.check_indices
        passes.append(Pass("fuse_regions", lambda p: fuse_regions(p, can_fuse, reduced_axes, can_emit,
                                                                  batch_norm=batch_norm, unchecked_indices=unchecked)))
    program = run_pipeline(program, passes, descriptor.verify_each_pass, log)
    return program, log
