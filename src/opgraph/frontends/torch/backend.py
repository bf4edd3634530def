"""``torch.compile(model, backend="opgraph")``: Dynamo's graphs, through AOTAutograd (forward and backward
graphs, functionalised and decomposed to core ATen), translated to opgraph graphs and compiled into executables.

Registered as the ``opgraph`` backend through the ``torch_dynamo_backends`` entry point, so no import is needed.
Options (``torch.compile(..., options={...})``) are the fields of ``TorchOptions``; the ones they share with
``og.CompilationDescriptor`` are passed on. ATen ops without a converter run as themselves inside the executable
and are named once per graph in a warning (``warn_fallbacks=False`` silences it; ``og.torch.explain`` lists them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from ...core.errors import AttributeValueError
from ...ir.graph import Tensor
from ...runtime.compile import CompilationDescriptor
from ...runtime.device import device as og_device
from . import converters as _converters  # noqa: F401  (registers the converters)
from .capture import capture_attention, capture_max_pool
from .registry import SymSize, decompositions
from .translation import NotTranslatable, Translation, translate


@dataclass(frozen=True)
class TorchOptions:
    """Options of the ``opgraph`` backend (``torch.compile(model, backend="opgraph", options={...})``)."""

    fusion: bool = True
    cuda_graphs: bool = True
    check_indices: bool = False  # PyTorch itself does not check gather indices on the GPU either
    matmul_epilogues: bool = True
    triton_interpret: bool = False
    optimization_level: int = 1
    warn_fallbacks: bool = True
    capture_attention: bool = True  # F.scaled_dot_product_attention as opgraph's fused attention op, whole
    capture_max_pool: bool = True  # training: F.max_pool2d saves 8-bit window offsets where kernels run (CUDA)
    channels_last: bool | None = None  # convolution graphs on NHWC tensors (None: on CUDA; see the descriptor)
    batch_norm_regions: bool | None = None  # batch norm in generated kernels, not cuDNN's (None: up to 32-bit on CUDA)
    pad_matmuls: bool | None = None  # misaligned GEMMs on padded operands (None: on CUDA where timed faster)
    profile_ops: bool = False  # each graph op's calls inside a profiler range named after it (see the descriptor)

    @staticmethod
    def of(options: Any) -> TorchOptions:
        if options is None:
            return TorchOptions()
        if isinstance(options, TorchOptions):
            return options
        if not isinstance(options, dict):
            raise AttributeValueError(f"opgraph backend: options must be a dict or TorchOptions, got "
                                      f"{type(options).__name__}")
        known = {f.name for f in dataclasses.fields(TorchOptions)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise AttributeValueError(f"opgraph backend: unknown options {unknown}; known: {sorted(known)}")
        return TorchOptions(**options)

    def descriptor(self) -> CompilationDescriptor:
        return CompilationDescriptor(optimization_level=self.optimization_level, check_indices=self.check_indices,
                                     cuda_graphs=self.cuda_graphs, fusion=self.fusion,
                                     triton_interpret=self.triton_interpret, matmul_epilogues=self.matmul_epilogues,
                                     channels_last=self.channels_last, batch_norm_regions=self.batch_norm_regions,
                                     pad_matmuls=self.pad_matmuls, profile_ops=self.profile_ops)


@dataclass
class GraphReport:
    """What the backend did with one FX graph (``og.torch.explain`` collects these)."""

    kind: str  # "forward", "backward" or "inference"
    aten_nodes: int
    fallbacks: dict[str, int]
    reasons: dict[str, str]
    executable: Any = None  # the og.Executable (None when the graph ran eagerly)
    eager_reason: str = ""  # why the graph was not translated
    kernels: list[Any] = field(default_factory=list)


REPORTS: list[GraphReport] | None = None  # set by recording() while it runs


@contextlib.contextmanager
def recording() -> Iterator[list[GraphReport]]:
    """Collect a ``GraphReport`` for every graph the backend compiles inside the ``with`` block."""
    global REPORTS
    saved, REPORTS = REPORTS, []
    try:
        yield REPORTS
    finally:
        REPORTS = saved


def _device_of(example_inputs: Sequence[Any]) -> torch.device:
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


def compile_fx(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: TorchOptions,
               kind: str = "inference") -> Callable[..., Any]:
    """A boxed callable computing ``gm`` with an opgraph executable (or ``gm`` itself, with a warning, when the
    graph cannot be translated)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # AOTAutograd may call compilers under its fake mode; opgraph makes real constants
        return _compile_fx(gm, example_inputs, options, kind)


def _compile_fx(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: TorchOptions,
                kind: str) -> Callable[..., Any]:
    nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    where = _device_of(example_inputs)
    try:
        tr = translate(gm, vendor_ops=_vendor_ops(options, where))
    except NotTranslatable as e:
        warnings.warn(f"opgraph: a {kind} graph runs eagerly: {e}", stacklevel=2)
        if REPORTS is not None:
            REPORTS.append(GraphReport(kind, nodes, {}, {}, None, str(e)))
        return _boxed_eager(gm)
    dev = og_device(str(where))
    targets = [t for t in tr.outputs if isinstance(t, Tensor)]
    descriptor = options.descriptor()
    stored = _channels_last_inputs([example_inputs[i] for i in tr.tensor_inputs])
    if stored:
        descriptor = dataclasses.replace(descriptor, channels_last_inputs=stored)
    exe = tr.graph.compile({t: t.type for t in tr.inputs}, targets, device=dev, descriptor=descriptor)
    if tr.fallbacks and options.warn_fallbacks:
        listed = ", ".join(f"{name} x{n} ({tr.reasons[name]})" for name, n in tr.fallbacks.most_common())
        warnings.warn(f"opgraph: {sum(tr.fallbacks.values())} of {nodes} ATen ops in a {kind} graph run as "
                      f"themselves (no opgraph equivalent): {listed}", stacklevel=2)
    if kind != "backward":  # parameters and buffers: CUDA-graph replays read them in place
        static = _static_input_indices()
        exe.mark_static_inputs([k for k, i in enumerate(tr.tensor_inputs) if i in static])
    else:  # activations saved by a replayed forward stay in its buffers: read in place until one moves
        exe.mark_static_inputs(range(len(tr.tensor_inputs)))
    if REPORTS is not None:
        REPORTS.append(GraphReport(kind, nodes, dict(tr.fallbacks), dict(tr.reasons), exe, "", exe.kernels()))
    return _boxed(exe, tr, _dense_outputs(tr, kind))


def _vendor_ops(options: TorchOptions, where: torch.device) -> bool:
    """No generated kernels on ``where`` (the CPU): converters may keep an ATen op whole (one vendor call) where
    they would spell it with elementwise ops that only fuse on a GPU. Not where channels-last is asked for: the
    vendor ops are NCHW calls, which the layout pass cannot move to NHWC."""
    return options.fusion and options.optimization_level >= 1 and not options.triton_interpret \
        and where.type != "cuda" and options.channels_last is not True


def _pool_kernels(options: TorchOptions, where: torch.device) -> bool:
    """The max-pool kernels, which read and write window offsets, may run (``kernels.max_pool.use_kernels``):
    elsewhere offsets would be converted from and to PyTorch's index around its kernels."""
    return options.fusion and options.optimization_level >= 1 and (where.type == "cuda" or options.triton_interpret)


def _channels_last_inputs(values: Sequence[Any]) -> tuple[int, ...]:
    """Positions of the static 4-d example tensors stored channels-last and not also contiguous: a hint for the
    layout pass (a call whose tensors are stored otherwise gets the same values, read across memory)."""
    return tuple(k for k, v in enumerate(values) if isinstance(v, torch.Tensor) and v.dim() == 4
                 and all(isinstance(d, int) for d in v.shape)
                 and v.is_contiguous(memory_format=torch.channels_last) and not v.is_contiguous())


def _dense_outputs(tr: Translation, kind: str) -> set[int]:
    """Outputs the caller sees (a forward's saved activations are not: only its backward reads them) that eager
    returns contiguous: returned contiguous too, whatever layout opgraph computed them in (channels-last
    convolutions give NHWC-stored views), so ``.view`` and the graphs after a graph break work as in eager."""
    visible = len(tr.outputs)
    if kind == "forward":
        metadata = getattr(torch._guards.TracingContext.try_get(), "fw_metadata", None)
        visible = getattr(metadata, "num_forward_returns", visible)
    return {i for i, val in enumerate(tr.output_values[:visible])
            if isinstance(val, torch.Tensor) and val.dim() >= 2 and val.is_contiguous()}


def _static_input_indices() -> set[int]:
    """The forward graph's inputs that AOTAutograd knows to be parameters or buffers (the same tensors on every
    call), as it tells Inductor's CUDA graphs; empty where it does not say."""
    context = torch._guards.TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None)
    return set(getattr(metadata, "static_input_indices", None) or ())


def _boxed(exe: Any, tr: Translation, dense: Container[int] = frozenset()) -> Callable[..., Any]:
    where = [(i, i in dense) for i, t in enumerate(tr.outputs) if isinstance(t, Tensor)]
    sizes = [(i, t.position) for i, t in enumerate(tr.outputs)  # size inputs returned as they are
             if isinstance(t, SymSize) and t.position is not None]
    computed = [(i, tr.size_reader(t)) for i, t in enumerate(tr.outputs)  # sizes computed from the input dims
                if isinstance(t, SymSize) and t.position is None]
    n = len(tr.outputs)
    tensors = tr.tensor_inputs

    def run(args: list[Any]) -> list[Any]:
        out: list[Any] = [None] * n
        for i, k in sizes:
            out[i] = args[k]
        for i, read in computed:
            out[i] = read(args) if read is not None else None
        if len(tensors) != len(args):
            args[:] = [args[i] for i in tensors]
        # boxed: the list is handed over, so each input (a backward's saved activation) goes after its last use
        values = exe.run_consuming(args)
        for (i, contiguous), v in zip(where, values, strict=True):
            out[i] = v.contiguous() if contiguous else v
        return out

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _boxed_eager(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    def run(args: list[Any]) -> Any:
        out = gm(*args)
        args.clear()
        return out

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def opgraph_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Any = None) -> Any:
    """The Dynamo backend: forward (and, when training, backward) graphs compiled by opgraph."""
    from torch._dynamo.backends.common import aot_autograd

    opts = TorchOptions.of(options)
    training = torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)

    def forward(g: torch.fx.GraphModule, xs: Sequence[Any]) -> Callable[..., Any]:
        return compile_fx(g, xs, opts, "forward" if training else "inference")

    def backward(g: torch.fx.GraphModule, xs: Sequence[Any]) -> Callable[..., Any]:
        return compile_fx(g, xs, opts, "backward")

    if opts.capture_attention:  # F.scaled_dot_product_attention whole, not as the kernel AOTAutograd would pick
        capture_attention(gm)
    if training and opts.capture_max_pool and _pool_kernels(opts, _device_of(example_inputs)):
        capture_max_pool(gm)  # (inference has no saved indices; passes/pool_indices.py compacts unread ones)
    # the CPU's fused attention kernel is converted to opgraph's attention op, not decomposed to its math; where
    # no kernels are generated, the backward of batch and layer norms, select, log_softmax, nll_loss, GELU and
    # embedding reach their converters whole (one call each, where the table's spellings are a pass per elementwise
    # op or a masked select)
    whole = [torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default]
    if _vendor_ops(opts, _device_of(example_inputs)):
        whole += [torch.ops.aten.native_batch_norm_backward.default, torch.ops.aten.native_layer_norm_backward.default,
                  torch.ops.aten.select_backward.default, torch.ops.aten._log_softmax_backward_data.default,
                  torch.ops.aten.nll_loss_backward.default, torch.ops.aten.gelu_backward.default,
                  torch.ops.aten.embedding_dense_backward.default]
    table = decompositions(*whole)
    compiler = aot_autograd(fw_compiler=forward, bw_compiler=backward, inference_compiler=forward,
                            decompositions=table)
    return compiler(gm, example_inputs)


__all__ = ["GraphReport", "TorchOptions", "compile_fx", "opgraph_backend", "recording"]
