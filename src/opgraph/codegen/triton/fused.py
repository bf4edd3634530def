"""The lowering of ``fused_region`` (a codegen facet of the op, keyed by the op object): the region's steps
are rebuilt as a small graph and emitted as one Triton kernel (``kernel.region_kernel``); and the predicates
region formation asks the code generator (``can_fuse``, ``reduced_axes``, ``can_emit``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...core.errors import GraphError, OpgraphError
from ...core.types import TensorType
from ...ir.graph import Operation, Tensor
from ...ir.opdef import FusionKind, LowerContext
from ...passes.fuse import FUSED_REGION, region_graph
from ..progress import kernel_started
from ._text import inlinable_scalar
from .expr import EXPRESSIONS, NotExpressible
from .indexing import INDEX_RULES
from .kernel import DynamicBroadcast, region_kernel
from .reductions import REDUCTIONS
from .region import RegionEmitter

if TYPE_CHECKING:
    from ...runtime.executable import Executable

_WRITABLE: dict[Any, bool] = {}  # can_fuse's answers by the op's structure: a model repeats its layers' ops


def can_fuse(op: Operation) -> bool:
    """An op the generator can write: elementwise with an expression, injective with an index rule, or a
    reduction with a recipe, at dtypes the generator handles. Whether its kernel can be written depends on the
    op's definition, attributes and types (and which inputs are the same value) and on the launch configuration
    the emitter picks, so the answer is kept by those."""
    kind = op.op.fusion
    if any(d == 0 for t in (*op.inputs, *op.outputs) for d in t.shape):
        return False  # empty values: no work for a kernel to do
    if kind is FusionKind.ELEMENTWISE:
        if op.op not in EXPRESSIONS:
            return False
    elif kind is FusionKind.INJECTIVE:
        if op.op not in INDEX_RULES:
            return False
    elif kind is not FusionKind.REDUCTION or op.op not in REDUCTIONS:
        return False
    ins = list({id(t): t for t in op.inputs if op.op.reads_values or kind is not FusionKind.ELEMENTWISE}.values())
    try:
        em = RegionEmitter([op], ins, list(op.outputs))
    except (NotExpressible, GraphError):
        return False
    first = {id(t): k for k, t in reversed(list(enumerate(op.inputs)))}
    key = (op.op, op.attrs, tuple((t.type, first[id(t)]) for t in op.inputs), tuple(t.type for t in op.outputs),
           em.config)
    try:
        known = _WRITABLE.get(key)
    except TypeError:  # attributes that do not hash
        return _emits(em)
    if known is None:
        known = _WRITABLE[key] = _emits(em)
    return known


def reduced_axes(op: Operation) -> tuple[int, ...]:
    return REDUCTIONS[op.op].axes(op)


def can_emit(ops: Sequence[Operation], inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> bool:
    try:
        return _emits(RegionEmitter(ops, inputs, outputs))
    except (NotExpressible, GraphError):
        return False


def _emits(em: RegionEmitter) -> bool:
    try:
        em.source()
    except (NotExpressible, GraphError):
        return False
    return True


def _lower_fused(ctx: LowerContext) -> Callable[..., Any]:
    ops, inputs, outputs = region_graph(ctx.attrs, ctx.in_types)
    scalars = {i: v for i, (value, t) in enumerate(zip(ctx.constants, ctx.in_types, strict=False))
               if (v := inlinable_scalar(value, t.dtype)) is not None}
    kernel = region_kernel(ops, inputs, outputs, scalars=scalars)
    device = ctx.device
    name = kernel.ops[0] + (f" +{len(kernel.ops) - 1} ops" if len(kernel.ops) > 1 else "")
    fresh = [True]  # the first launch compiles (and tunes): reported to an executable's first run

    unfused: list[Callable[..., list[Any]]] = []  # made on first need
    # run-time shapes whose dynamic dims broadcast where the kernel took them to match (``DynamicBroadcast``): the
    # region's steps compiled for those static shapes (fused as static shapes allow: one kernel or several; each
    # compiles on its shapes' first run), for the first SPECIALIZED_MAX such shapes of a region; for others, or
    # where they cannot be compiled (None), the steps one by one
    specialized: dict[tuple[tuple[int, ...], ...], Executable | None] = {}

    def launch(xs: tuple[Any, ...], out: Any) -> list[Any]:
        if fresh[0]:
            fresh[0] = False
            kernel_started(name)
        try:
            return kernel(*xs, out=out, device=device)
        except DynamicBroadcast:
            shapes = tuple(tuple(int(d) for d in x.shape) for x in xs)
            if shapes not in specialized and len(specialized) < SPECIALIZED_MAX:  # failures count: tried once
                specialized[shapes] = _static_program(ctx, shapes)
            static = specialized.get(shapes)
            if static is not None:  # the planner owns a fused op's results: none may be an input's memory
                fed = [x for x, c in zip(xs, _constants(ctx), strict=True) if c is None]
                return _own_memory(static.run(fed), xs)
            if not unfused:
                unfused.append(_unfused(ops, inputs, outputs, device, ctx.options))
            return unfused[0](*xs)

    if len(outputs) == 1:
        def one(*xs: Any, out: Any = None) -> Any:
            return launch(xs, out)[0]

        fn: Any = one
    else:
        def several(*xs: Any, out: Any = None) -> Any:
            return tuple(launch(xs, out))

        fn = several
    fn.source = kernel.source
    fn.inplace_ok = kernel.inplace_ok
    fn.kernel = kernel
    fn.specialized = specialized
    return fn


SPECIALIZED_MAX = 8  # programs a region compiles for run-time shapes its dynamic kernel refuses


def _static_program(ctx: LowerContext, shapes: tuple[tuple[int, ...], ...]) -> Executable | None:
    """The region's steps as an executable for inputs of these static ``shapes`` (compiled as the region was, but
    with no CUDA graph of its own): fusion groups them as the static shapes allow, so a row that broadcasts against
    a longer operand is a reduction's kernel and an epilogue's. The region's constant inputs are constants there
    (scalars inlined, folded), so it is fed the others only. None where the shapes do not fit together (the steps
    one by one then raise what an unfused run does)."""
    import dataclasses

    from ...graph import Graph
    from ...runtime.compile import CompilationDescriptor

    static = tuple(TensorType(shape, t.dtype) for shape, t in zip(shapes, ctx.in_types, strict=True))
    descriptor = ctx.options if isinstance(ctx.options, CompilationDescriptor) else CompilationDescriptor()
    g = Graph()
    try:
        sources = [g.constant(c) if c is not None else None for c in _constants(ctx)]
        _, inputs, outputs = region_graph(ctx.attrs, static, g, named=True, sources=sources)
        # the outer executable's input positions mean nothing here
        descriptor = dataclasses.replace(descriptor, cuda_graphs=False, channels_last_inputs=())
        feeds = [t for t, c in zip(inputs, sources, strict=True) if c is None]
        return g.compile({t: t.type for t in feeds}, outputs, device=ctx.device, descriptor=descriptor)
    except OpgraphError:
        return None


def _constants(ctx: LowerContext) -> tuple[Any, ...]:
    """The value of each region input that is a constant, else None (None everywhere where none were given)."""
    return ctx.constants or (None,) * len(ctx.in_types)


def _own_memory(outs: Sequence[Any], xs: Sequence[Any]) -> list[Any]:
    """``outs``, each in memory of its own: a result that is (a view of) an input, or shares an earlier result's
    memory, is copied (the planner may write a fused op's results in place, or over their memory after their last
    use)."""
    taken = {x.untyped_storage().data_ptr() for x in xs}
    owned = []
    for v in outs:
        at = v.untyped_storage().data_ptr()
        owned.append(v.clone() if at in taken else v)
        taken.add(at)
    return owned


def _unfused(ops: Sequence[Operation], inputs: Sequence[Tensor], outputs: Sequence[Tensor], device: Any,
             options: Any) -> Callable[..., list[Any]]:
    """The region's steps run one after another by their own lowerings (what an unfused executable runs); every op
    the generator writes has one. A result that is a view of an input is copied: a fused op's results are its own
    memory to the planner."""
    fns = [(op, op.op.lower(LowerContext(op.attrs, tuple(t.type for t in op.inputs),  # type: ignore[misc]
                                         tuple(t.type for t in op.outputs), device, options))) for op in ops]

    def run(*xs: Any) -> list[Any]:
        env = {id(t): x for t, x in zip(inputs, xs, strict=True)}
        for op, fn in fns:
            env[id(op.outputs[0])] = fn(*(env[id(t)] for t in op.inputs))  # a region's ops have one output each
        return _own_memory([env[id(t)] for t in outputs], xs)

    return run


FUSED_REGION.lower = _lower_fused
