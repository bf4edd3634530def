"""One Triton kernel for a DAG of elementwise ops: source emission, a source cache, and a launcher.

``emit_elementwise(ops, inputs, outputs)`` writes the kernel source: each program handles ``BLOCK``
consecutive elements of the *domain* (the broadcast of every op's output shape), turns the flat index
into per-dimension indices, loads each input at its own offset (stride 0 along the dims it is
broadcast over), evaluates the ops' expressions in registers (``expr``) and stores each output once
(lanes at a broadcast position other than 0 are masked off). Shapes are static and baked into the
source; inputs are read as contiguous.

``elementwise_kernel(...)`` returns an ``ElementwiseKernel`` that allocates the outputs and launches.
Sources are cached by their SHA-256: Triton needs a real file for ``@triton.jit`` (it reads the
function's source), so each source is written once under the cache directory and imported from there.
Triton is imported only when a kernel is loaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...core.errors import ExecutionError, GraphError
from ...core.shape import broadcast_shapes
from ...core.types import TensorType
from ...ir.graph import Operation, Tensor
from ...ir.opdef import FusionKind
from .expr import ExprContext, NotExpressible, compute_type, expression, storage_type, to_storage

HELPERS = ("og_to_bf16", "og_signbit", "og_trunc", "og_rint", "og_round_half_away", "og_expm1", "og_log1p", "og_tanh",
           "og_sinh", "og_cosh", "og_atan", "og_atan2", "og_asin", "og_acos", "og_asinh", "og_acosh", "og_atanh",
           "og_powf", "og_powi", "og_powu", "og_popcount")
KERNEL_NAME = "fused_elementwise"
DEFAULT_BLOCK = 1024


def _contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return strides[::-1]


def _static(t: Tensor, what: str) -> tuple[int, ...]:
    if not t.type.is_static:
        raise NotExpressible(f"{what} %{t.name} has dynamic dims {t.shape}; only static shapes are generated")
    return tuple(d for d in t.shape if d is not None)


class _Indexer:
    """Per-dimension indices of the flat domain index ``offs``, emitted once each on first use."""

    def __init__(self, domain: tuple[int, ...], lines: list[str]) -> None:
        self.domain = domain
        self.lines = lines
        self.inner = [math.prod(domain[k + 1:]) for k in range(len(domain))]
        self.done: set[int] = set()

    def index(self, k: int) -> str:
        if k not in self.done:
            self.done.add(k)
            e = "offs" if self.inner[k] == 1 else f"(offs // {self.inner[k]})"
            if k > 0:  # offs < numel already bounds the outermost index
                e = f"{e} % {self.domain[k]}"
            self.lines.append(f"    i{k} = {e}")
        return f"i{k}"

    def offset(self, shape: tuple[int, ...]) -> tuple[str, list[str]]:
        """The element offset of a contiguous tensor of ``shape`` broadcast to the domain, and the
        conditions ``index == 0`` along the dims it is broadcast over (for stores)."""
        if shape == self.domain:
            return "offs", []
        lead = len(self.domain) - len(shape)
        strides = _contiguous_strides(shape)
        terms, zero = [], []
        for k, size in enumerate(self.domain):
            own = shape[k - lead] if k >= lead else 1
            if own == size and size != 1:
                s = strides[k - lead]
                terms.append(self.index(k) if s == 1 else f"{self.index(k)} * {s}")
            elif size != 1:
                zero.append(f"({self.index(k)} == 0)")
        return (" + ".join(terms) if terms else "offs * 0"), zero


def emit_elementwise(ops: Sequence[Operation], inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> str:
    """The source of one Triton kernel computing ``outputs`` from ``inputs`` through ``ops``
    (elementwise ops in a topological order; every other value they read must be in ``inputs``).

    The kernel's arguments are the input pointers, then the output pointers, then ``BLOCK``.
    """
    if not outputs:
        raise GraphError("an elementwise kernel needs at least one output")
    names: dict[int, str] = {}
    for i, t in enumerate(inputs):
        if id(t) in names:
            raise GraphError(f"input %{t.name} is listed twice")
        _static(t, "input")
        names[id(t)] = f"x{i}"
    reads: set[int] = set()  # inputs whose values are read (fill_like reads only its input's shape)
    for op in ops:
        if op.op.fusion is not FusionKind.ELEMENTWISE:
            raise GraphError(f"op %{op.name} ({op.op.name}) is not elementwise")
        if len(op.outputs) != 1:
            raise GraphError(f"op %{op.name} has {len(op.outputs)} outputs")
        for t in op.inputs:
            if id(t) not in names:
                raise GraphError(f"op %{op.name} reads %{t.name}, which is neither an input nor computed earlier")
            if op.op.reads_values:
                reads.add(id(t))
        names[id(op.outputs[0])] = f"v{len(names)}"
    computed = {id(op.outputs[0]) for op in ops}
    for t in outputs:
        if id(t) not in computed:
            raise GraphError(f"output %{t.name} is not computed by the ops of the kernel")

    domain = tuple(broadcast_shapes(*(_static(op.outputs[0], "value") for op in ops)))
    assert all(d is not None for d in domain)
    numel = math.prod(domain)  # type: ignore[arg-type]
    wide = numel >= 2**31 - 2**20  # int64 indices where pid * BLOCK could pass int32 (blocks up to 2**20)
    params = [f"in{i}" for i in range(len(inputs))] + [f"out{j}" for j in range(len(outputs))]
    body: list[str] = [
        "    pid = tl.program_id(0)",
        f"    offs = {'pid.to(tl.int64)' if wide else 'pid'} * BLOCK + tl.arange(0, BLOCK)",
        f"    mask = offs < {numel}",
    ]
    index = _Indexer(domain, body)  # type: ignore[arg-type]
    for i, t in enumerate(inputs):
        if id(t) not in reads:
            continue
        off, _ = index.offset(_static(t, "input"))
        load = f"tl.load(in{i} + {off}, mask=mask)"
        reg = compute_type(t.dtype)
        if reg != storage_type(t.dtype):
            load = f"{load}.to({reg})"
        body.append(f"    x{i} = {load}")
    for op in ops:
        ctx = ExprContext(op.attrs, tuple(t.type for t in op.inputs), tuple(t.type for t in op.outputs))
        e = expression(op.op, [names[id(t)] for t in op.inputs], ctx)
        body.append(f"    {names[id(op.outputs[0])]} = ({e}).to({compute_type(op.outputs[0].dtype)})")
    for j, t in enumerate(outputs):
        off, zero = index.offset(_static(t, "output"))
        value = to_storage(names[id(t)], t.dtype, t.dtype)
        m = " & ".join(["mask", *zero])
        body.append(f"    tl.store(out{j} + {off}, {value}, mask={m})")
    header = [
        "# generated by opgraph.codegen.triton.kernel: " + ", ".join(op.op.name for op in ops),
        "import triton",
        "import triton.language as tl",
        "",
        f"from opgraph.codegen.triton.prelude import {', '.join(HELPERS)}  # noqa: F401",
        "",
        "",
        "@triton.jit",
        f"def {KERNEL_NAME}({', '.join([*params, 'BLOCK: tl.constexpr'])}):",
    ]
    return "\n".join(header + body) + "\n"


# ---- the source cache -------------------------------------------------------------------------------------
_LOADED: dict[str, Any] = {}
_LOCK = threading.Lock()


def default_cache_dir() -> Path:
    """``~/.cache/opgraph/triton``, or a folder in the temporary directory where home is not writable."""
    path = Path.home() / ".cache" / "opgraph" / "triton"
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    path = Path(tempfile.gettempdir()) / "opgraph-triton"
    path.mkdir(parents=True, exist_ok=True)
    return path


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:24]


def load_kernel(source: str, cache_dir: Path | None = None) -> Any:
    """The ``@triton.jit`` function ``KERNEL_NAME`` defined by ``source``, loaded once per source."""
    key = source_key(source)
    with _LOCK:
        fn = _LOADED.get(key)
        if fn is not None:
            return fn
        folder = cache_dir or default_cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"og_ew_{key}.py"
        if not path.exists() or path.read_text() != source:
            tmp = folder / f".og_ew_{key}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(source)
            os.replace(tmp, path)  # atomic: concurrent writers race to the same content
        name = f"opgraph_triton_og_ew_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        fn = getattr(module, KERNEL_NAME)
        _LOADED[key] = fn
        return fn


# ---- the launcher ------------------------------------------------------------------------------------------
@dataclass
class ElementwiseKernel:
    """A loaded kernel: ``kernel(*inputs)`` allocates the outputs on the inputs' device and launches it."""

    source: str
    ops: tuple[str, ...]  # the names of the graph ops inside
    in_types: tuple[TensorType, ...]
    out_types: tuple[TensorType, ...]
    numel: int
    block: int = DEFAULT_BLOCK
    cache_dir: Path | None = None
    _fn: Any = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return source_key(self.source)

    @property
    def fn(self) -> Any:
        if self._fn is None:
            self._fn = load_kernel(self.source, self.cache_dir)
        return self._fn

    def __call__(self, *inputs: torch.Tensor, device: torch.device | None = None) -> list[torch.Tensor]:
        if len(inputs) != len(self.in_types):
            raise ExecutionError(f"the kernel takes {len(self.in_types)} inputs, got {len(inputs)}")
        xs = []
        for i, (x, t) in enumerate(zip(inputs, self.in_types, strict=True)):
            if tuple(x.shape) != t.shape or x.dtype != t.dtype.torch_dtype:
                raise ExecutionError(f"input {i}: expected {t}, got shape {tuple(x.shape)} and {x.dtype}")
            xs.append(x.contiguous())
        dev = device or (xs[0].device if xs else torch.device("cpu"))
        outs = [torch.empty(t.shape, dtype=t.dtype.torch_dtype, device=dev) for t in self.out_types]  # type: ignore[arg-type]
        if self.numel:
            self.fn[(-(-self.numel // self.block),)](*xs, *outs, BLOCK=self.block)
        return outs


def elementwise_kernel(ops: Sequence[Operation], inputs: Sequence[Tensor], outputs: Sequence[Tensor], *,
                       block: int = DEFAULT_BLOCK, cache_dir: Path | None = None) -> ElementwiseKernel:
    """Emit (and on first launch load) the kernel of ``emit_elementwise``; ``block`` is a power of two."""
    if block <= 0 or block & (block - 1) or block > 2**20:
        raise GraphError(f"block must be a power of two up to 2**20, got {block}")
    source = emit_elementwise(ops, inputs, outputs)
    domain = broadcast_shapes(*(op.outputs[0].shape for op in ops))
    return ElementwiseKernel(source, tuple(op.name for op in ops), tuple(t.type for t in inputs),
                             tuple(t.type for t in outputs), math.prod(d or 0 for d in domain), block, cache_dir)


def region_of(outputs: Sequence[Tensor]) -> tuple[list[Operation], list[Tensor]]:
    """The elementwise ops that compute ``outputs`` (in graph order), stopping at values made by other ops,
    which become the inputs (in first-use order). A helper for tests and tools until region formation lands."""
    seen: dict[int, Operation] = {}
    stack = [t.op for t in outputs]
    while stack:
        op = stack.pop()
        if id(op) in seen or op.op.fusion is not FusionKind.ELEMENTWISE:
            continue
        seen[id(op)] = op
        stack.extend(t.op for t in op.inputs)
    ops = sorted(seen.values(), key=lambda o: o.id)
    inputs: list[Tensor] = []
    for op in ops:
        for t in op.inputs:
            if id(t.op) not in seen and all(t is not u for u in inputs):
                inputs.append(t)
    return ops, inputs
