"""Generated kernels: a source cache and a launcher (the sources come from ``region.RegionEmitter``).

``region_kernel(ops, inputs, outputs)`` returns a ``RegionKernel`` that allocates the outputs (or writes
into given buffers), resolves dynamic sizes from the input shapes (once per distinct shapes) and launches.
Sources are cached by their SHA-256: Triton needs a real file for ``@triton.jit`` (it reads the
function's source), so each source is written once under the cache directory and imported from there.
Triton is imported only when a kernel is loaded.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import math
import os
import re
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...core.device_timing import TUNE_HEAD_START_CYCLES, TUNE_LAUNCHES, device_ms
from ...core.errors import ExecutionError, GraphError
from ...core.types import TensorType
from ...ir.graph import Operation, Tensor, infer_types
from ...ir.opdef import FusionKind
from ...ops import gradient_support as gs
from ...ops import norm
from . import precompile, tuning_records
from ._text import MAX_BARRIERS, WS_PARTS, generated
from .expr import NotExpressible
from .region import Config, RegionEmitter, candidate_configs

DEFAULT_BLOCK = 1024
TUNE_MIN_ELEMENTS = 1 << 20  # smaller kernels keep the heuristic configuration
SLOW_CANDIDATE = 2.0  # a candidate whose one launch takes this many times the best's per launch is not timed further
SLOW_CANDIDATE_MIN_MS = 0.05  # ... and at least this long: below it one launch's timing is too coarse to judge by
# the user set Triton's FMA-contraction default (read once: _arguments runs at every launch)
_USER_FP_FUSION_DEFAULT = "TRITON_DEFAULT_FP_FUSION" in os.environ
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"  # kernels run in Triton's interpreter (no launch metadata)


def emit_elementwise(ops: Sequence[Operation], inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> str:
    """The source of one Triton kernel computing ``outputs`` from ``inputs`` through ``ops`` (elementwise,
    injective and reduction ops in a topological order; every other value they read must be in ``inputs``)."""
    return RegionEmitter(ops, inputs, outputs).source()


# ---- the source cache -------------------------------------------------------------------------------------
_LOADED: dict[str, Any] = {}
_LOCK = threading.Lock()
_KERNEL_DEF = re.compile(r"^@triton\.jit\ndef (\w+)\(", re.MULTILINE)


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


def kernel_file(source: str, cache_dir: Path | None = None) -> tuple[Path, str, str]:
    """The file ``source`` is stored in (written once, atomically), the name it is imported under (by this process
    and by compile workers) and the name of its ``@triton.jit`` function."""
    folder = cache_dir or default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    key = source_key(source)
    path = folder / f"og_ew_{key}.py"
    if not path.exists() or path.read_text() != source:
        tmp = folder / f".og_ew_{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(source)
        os.replace(tmp, path)  # atomic: concurrent writers race to the same content
    return path, f"opgraph_triton_og_ew_{key}", _KERNEL_DEF.search(source).group(1)  # type: ignore[union-attr]


def load_kernel(source: str, cache_dir: Path | None = None) -> Any:
    """The ``@triton.jit`` function (named ``KERNEL_NAME...``) defined by ``source``, loaded once per source."""
    key = source_key(source)
    with _LOCK:
        fn = _LOADED.get(key)
        if fn is not None:
            return fn
        path, name, function = kernel_file(source, cache_dir)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        fn = _LOADED[key] = getattr(module, function)
        return fn


# ---- the launcher ------------------------------------------------------------------------------------------
class DynamicBroadcast(ExecutionError):
    """A dynamic dim of a region's value, taken to be the domain's when the kernel was written, differs from it at
    run time (a 1 that broadcasts, as NumPy allows): the kernel would compute the wrong elements, so the region runs
    unfused instead (``fused._lower_fused``)."""


@dataclass(frozen=True)
class _Launch:
    grid: tuple[int, ...]
    ints: tuple[int, ...]
    out_shapes: tuple[tuple[int, ...], ...]


@dataclass
class RegionKernel:
    """A generated kernel: ``kernel(*inputs, out=None)`` allocates the outputs (or writes into the given
    buffers) on the inputs' device and launches it. Inputs may be strided; outputs are contiguous."""

    source: str  # the variant for contiguous inputs
    ops: tuple[str, ...]  # the names of the graph ops inside
    in_types: tuple[TensorType, ...]
    out_types: tuple[TensorType, ...]
    config: Config
    symbols: tuple[tuple[int, int], ...]  # per size argument: (value number, dim)
    strides: tuple[tuple[int, int], ...]  # per stride argument: (input, dim)
    domain: tuple[int, tuple[int, ...]]  # (value number, dims whose product is the grid's extent)
    steps: tuple[tuple[Any, Any, tuple[int, ...]], ...]  # (op def, attrs, value numbers read): shape inference
    value_types: tuple[TensorType, ...]  # inputs, then each step's output
    out_numbers: tuple[int, ...]  # the value number of each output
    inplace_ok: frozenset[tuple[int, int]] = frozenset()
    cache_dir: Path | None = None
    strided: Any = None  # (inner dim) -> RegionKernel: the variant reading inputs at their strides, made on first need
    alternatives: Any = None  # () -> list[RegionKernel]: other launch configurations, timed on first CUDA launch
    _fn: Any = field(default=None, repr=False)
    _launches: dict[Any, _Launch] = field(default_factory=dict, repr=False)
    _refused: dict[Any, str] = field(default_factory=dict, repr=False)  # shapes the kernel cannot take: why
    aligned: tuple[int, ...] = ()  # inputs read at the domain's own index: stored in the domain's memory order
    _strided: dict[int | None, RegionKernel] = field(default_factory=dict, repr=False)  # per inner dim
    _tuned: dict[Any, RegionKernel] = field(default_factory=dict, repr=False)
    _workspaces: dict[Any, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False)

    def _tune(self, inputs: Sequence[torch.Tensor]) -> RegionKernel:
        """The fastest of this kernel and its alternatives on these inputs (device time between CUDA events of a
        few launches each, queued behind a spinning kernel; a candidate whose first launch takes ``SLOW_CANDIDATE``
        times the fastest's per launch is left at that; outputs go to fresh buffers, so a caller's ``out=``
        buffer is never written twice). Candidates still compiling long after the default are not waited for
        (``compile_in_threads``). The choice is recorded on disk (``tuning_records``), unless such a candidate was
        passed over (a later process, finding its compile in Triton's cache, times it): a later process that finds
        the record launches that configuration without compiling and timing the others."""
        if max((math.prod(x.shape) for x in inputs), default=0) < TUNE_MIN_ELEMENTS:
            return self
        candidates = [self, *self.alternatives()]
        if hasattr(self.alternatives, "cache_clear"):  # the losers (and their split workspaces) are not kept
            self.alternatives.cache_clear()
        key, remembered = self.recorded_choice(candidates, inputs)
        for k in candidates:  # a decision of an earlier process
            if k.config == remembered:
                return k
        timed: list[tuple[float, int, RegionKernel]] = []  # (ms per launch, order, kernel)
        outcomes: list[dict[str, Any]] = []  # per candidate, for the tuning log: its time, or why it has none
        late = {id(k) for k in compile_in_threads(candidates, inputs)}
        dev = inputs[0].device
        fastest = math.inf  # ms per launch
        with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():
            for k in candidates:
                if id(k) in late:  # still in ptxas long after the default compiled: not waited for
                    outcomes.append({"error": "compile too slow"})
                    continue
                try:
                    k(*inputs)
                    # one launch first: a candidate far slower than the best so far (a split too fine or too coarse
                    # for these rows: milliseconds where the best takes microseconds) skips its full timing
                    if fastest < math.inf:
                        once = _single_launch_ms(k, inputs)
                        if once > max(SLOW_CANDIDATE * fastest, SLOW_CANDIDATE_MIN_MS):
                            outcomes.append({"one_launch_ms": once})
                            continue
                    ms = _device_ms(k, inputs) / TUNE_LAUNCHES
                    timed.append((ms, len(timed), k))
                    outcomes.append({"ms": ms})
                    fastest = min(fastest, ms)
                except Exception as e:  # a configuration that does not compile (resources) is skipped
                    outcomes.append({"error": type(e).__name__})
                    continue
        if tuning_records.log_path() is not None:
            fastest_kernel = min(timed)[2] if timed else None
            winner = next((i for i, k in enumerate(candidates) if k is fastest_kernel), None)
            tuning_records.log(self.key, [step[0].name for step in self.steps],
                               [step[0].name for step in self.steps if step[0].fusion is FusionKind.REDUCTION],
                               [k.config for k in candidates], inputs, outcomes, winner)
        if not timed:
            return self
        best = min(timed)[2]
        if key is not None and not late:
            tuning_records.store(key, best.config, self.cache_dir or default_cache_dir())
        return best

    def tuned_configs(self) -> dict[tuple[tuple[int, ...], ...], Config]:
        """The launch configuration the tuner chose for each input shapes launched so far (``exe.kernels()``)."""
        return {shapes: best.config for shapes, best in self._tuned.items()}

    def recorded_choice(self, candidates: Sequence[RegionKernel], inputs: Sequence[Any]) -> tuple[str | None,
                                                                                                   Config | None]:
        """The tuning-record key of choosing among ``candidates`` for ``inputs`` (tensors, or stand-ins with their
        shapes and strides) and the configuration an earlier process recorded under it; (None, None) with the
        records off. The candidates are part of the key: a configuration added since is timed, not passed over."""
        if not tuning_records.enabled():
            return None, None
        key = tuning_records.record_key(self.key, repr([k.config for k in candidates]), inputs)
        return key, tuning_records.lookup(key, self.cache_dir or default_cache_dir())

    def _inner_axis(self, inputs: Sequence[torch.Tensor]) -> int | None:
        """The domain dim that most bytes of the inputs read at the domain's index store contiguously (the
        channels of channels-last tensors read as NCHW), or None: the last, as for contiguous inputs."""
        votes: dict[int | None, int] = {}
        for i in self.aligned:
            x = inputs[i]
            dims = [k for k in range(x.dim()) if x.shape[k] > 1]
            inner = min(dims, key=x.stride, default=None)
            key = None if inner is None or inner == x.dim() - 1 or x.stride(inner) != 1 else inner
            votes[key] = votes.get(key, 0) + x.numel() * x.element_size()
        return max(votes, key=lambda k: (votes[k], k is None)) if votes else None

    def workspace_sizes(self, rows: int) -> tuple[int, int]:
        """Elements of a split reduction's float32 partials and int32 barrier counters for ``rows`` rows."""
        per = WS_PARTS * max(MAX_BARRIERS, self.config.xblock)  # row groups, or a column tile's partials
        return rows * per * self.config.split, rows * (MAX_BARRIERS + 1)

    def _workspace(self, rows: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Partials and barrier counters of a split reduction: allocated once per device and row count (the
        kernel leaves its counters at zero), so a CUDA-graph replay finds them where the capture did."""
        key = (str(device), rows)
        found = self._workspaces.get(key)
        if found is None:
            partials, counters = self.workspace_sizes(rows)
            found = (torch.empty(partials, dtype=torch.float32, device=device),
                     torch.zeros(counters, dtype=torch.int32, device=device))
            self._workspaces[key] = found
        return found

    @property
    def key(self) -> str:
        return source_key(self.source)

    @property
    def fn(self) -> Any:
        if self._fn is None:
            self._fn = load_kernel(self.source, self.cache_dir)
        return self._fn

    def _launch(self, shapes: tuple[tuple[int, ...], ...]) -> _Launch:
        launch = self._launches.get(shapes)
        if launch is not None:
            return launch
        refused = self._refused.get(shapes)
        if refused is not None:  # the region runs unfused at these shapes: said at once, not worked out again
            raise DynamicBroadcast(refused)
        for i, (s, t) in enumerate(zip(shapes, self.in_types, strict=True)):
            if len(s) != t.rank or any(d is not None and d != v for d, v in zip(t.shape, s, strict=True)):
                raise ExecutionError(f"input {i}: expected {t}, got shape {s}")
        values: list[tuple[int, ...]] = list(shapes)
        if any(not t.is_static for t in (*self.in_types, *self.out_types)) or self.symbols:
            for op, attrs, reads in self.steps:  # concrete shapes of every value of the region
                ins = tuple(TensorType(values[k], self.value_types[k].dtype) for k in reads)
                values.append(tuple(int(d) for d in infer_types(op, attrs, ins)[0].shape))  # type: ignore[arg-type]
            try:
                self._check_dynamic_dims(values)
            except DynamicBroadcast as e:
                self._refused[shapes] = str(e)
                raise
        else:
            values.extend(tuple(int(d or 0) for d in t.shape) for t in self.value_types[len(shapes):])
        ints = tuple(values[v][k] for v, k in self.symbols)
        number, dims = self.domain
        extent = math.prod(values[number][k] for k in dims)
        per = self.config.xblock if self.config.reduction else self.config.block
        out_shapes = tuple(values[v] for v in self.out_numbers)
        tiles = -(-extent // per)
        if self.config.programs and not self.config.looped and self.config.split == 1:
            tiles = min(tiles, self.config.programs)
        launch = _Launch((tiles * self.config.split,) if extent else (0,), ints, out_shapes)
        self._launches[shapes] = launch
        return launch

    def _check_dynamic_dims(self, values: Sequence[tuple[int, ...]]) -> None:
        """Raise ``DynamicBroadcast`` where run-time sizes break what the kernel was written for, which took the
        dynamic dims of its values to match (right-aligned): an output stored at the domain's index must have the
        domain's dynamic dims (one of size 1 would be stored past its end, a larger one cut short), and so must
        every reduction's input. In a reduction's region the emitter also indexes each computed operand of an
        elementwise op at that op's own index (``RegionEmitter._elementwise``), so their dynamic dims must agree
        too; and a norm's gamma and beta must have the normalised dims. Other inputs of size 1 broadcast in the
        kernel itself (their index is 0 where their size is 1)."""
        number, _ = self.domain
        domain = values[number]
        first = len(self.in_types)

        def agree(k: int, target: tuple[int, ...]) -> bool:
            lead = len(target) - len(values[k])
            return all(d is not None or (lead + j >= 0 and size == target[lead + j])
                       for j, (d, size) in enumerate(zip(self.value_types[k].shape, values[k], strict=True)))

        def reduction(k: int) -> bool:
            return k >= first and self.steps[k - first][0].fusion is FusionKind.REDUCTION

        # a sum_to's result takes its shape from its reference, not from the input it reduces
        bad = [k for k in self.out_numbers if (not reduction(k) or self.steps[k - first][0] is gs.SUM_TO)
               and not agree(k, domain)]
        for n, (op, attrs, reads) in enumerate(self.steps):
            if op.fusion is FusionKind.REDUCTION:
                bad += [k for k in reads[:1] if not agree(k, domain)]
            if op in (norm.LAYER_NORM, norm.RMS_NORM):  # gamma and beta are read along the row, as they are
                normalised = tuple(domain[a % len(domain)] for a in attrs.axes)
                bad += [k for k in reads[1:] if not agree(k, normalised)]
            elif op.fusion is FusionKind.ELEMENTWISE and self.config.reduction:
                bad += [k for k in reads if k >= first and not agree(k, values[first + n])]
        if bad:
            k = bad[0]
            raise DynamicBroadcast(f"fused region ({', '.join(self.ops)}): a value of type {self.value_types[k]} has "
                                   f"shape {values[k]} at run time, against the kernel's domain {domain}")

    def _may_write(self, j: int, given: torch.Tensor, inputs: Sequence[torch.Tensor]) -> bool:
        """Output ``j`` may go into ``given``: every input in its memory is one this configuration reads only where
        it writes output ``j`` (the planner chose the pair for the default configuration; tuning may pick
        another)."""
        return all((i, j) in self.inplace_ok for i, x in enumerate(inputs) if _shares(x, given))

    def __call__(self, *inputs: torch.Tensor, out: Sequence[torch.Tensor | None] | None = None,
                 device: torch.device | None = None) -> list[torch.Tensor]:
        if len(inputs) != len(self.in_types):
            raise ExecutionError(f"the kernel takes {len(self.in_types)} inputs, got {len(inputs)}")
        for i, (x, t) in enumerate(zip(inputs, self.in_types, strict=True)):
            if x.dtype != t.dtype.torch_dtype:
                raise ExecutionError(f"input {i}: expected {t}, got shape {tuple(x.shape)} and {x.dtype}")
        if self.symbols or not all(t.is_static for t in self.in_types):  # before tuning: DynamicBroadcast
            self._launch(tuple(tuple(x.shape) for x in inputs))
        if self.strided is not None and not all(x.is_contiguous() for x in inputs):
            inner = self._inner_axis(inputs)
            variant = self._strided.get(inner)
            if variant is None:
                variant = self._strided[inner] = self.strided(inner)
            return variant(*inputs, out=out, device=device)
        if self.alternatives is not None and inputs and inputs[0].is_cuda:
            shapes = tuple(tuple(x.shape) for x in inputs)
            best = self._tuned.get(shapes)
            if best is None and not torch.cuda.is_current_stream_capturing():
                self._tuned[shapes] = self  # while timing, this kernel launches as itself
                best = self._tuned[shapes] = self._tune(inputs)
            if best is not None and best is not self:
                return best(*inputs, out=out, device=device)
        launch = self._launch(tuple(tuple(x.shape) for x in inputs))
        dev = device or (inputs[0].device if inputs else torch.device("cpu"))
        outs = []
        for j, (shape, t) in enumerate(zip(launch.out_shapes, self.out_types, strict=True)):
            given = out[j] if out is not None else None
            if given is not None and not self._may_write(j, given, inputs):
                given = None  # a tuned or strided variant reads that input elsewhere: a buffer of its own
            if given is not None and (tuple(given.shape) != shape or not given.is_contiguous()):
                raise ExecutionError(f"out buffer {j}: expected a contiguous tensor of shape {shape}, got shape "
                                     f"{tuple(given.shape)} with strides {given.stride()}")
            outs.append(given if given is not None else torch.empty(shape, dtype=t.dtype.torch_dtype, device=dev))
        if launch.grid[0]:
            args, options = self._arguments(launch, inputs, outs, dev)
            if precompile._PENDING:  # compiling in the background: wait for it rather than compile it again
                precompile.wait_for(self.key, self.config)
            if self.config.cluster and dev.type == "cuda" and not _INTERPRET:  # one program a CTA, in clusters
                if torch.cuda.get_device_capability(dev) < (9, 0):
                    raise NotExpressible("thread-block clusters need sm_90 or newer")
                # at every launch: a compile thread finishing late may have put an unpatched kernel in the cache
                cluster_launch(self.fn.warmup(*args, grid=launch.grid, **options), self.config.split)
                self.fn[(launch.grid[0] // self.config.split,)](*args, **options)
            else:
                self.fn[launch.grid](*args, **options)
        return outs

    def _arguments(self, launch: _Launch, inputs: Sequence[Any], outs: Sequence[Any], dev: torch.device,
                   workspace: Sequence[Any] | None = None) -> tuple[list[Any], dict[str, Any]]:
        """The Triton function's arguments and launch options for ``launch`` (not for an empty grid); a split
        reduction's ``workspace`` is this kernel's own unless given (stand-ins, to compile without memory)."""
        strides = [0 if inputs[i].shape[k] == 1 else inputs[i].stride(k) for i, k in self.strides]
        cfg = self.config
        blocks = dict(XBLOCK=cfg.xblock, RBLOCK=cfg.rblock) if cfg.reduction else dict(BLOCK=cfg.block)
        extra: Sequence[Any] = ()
        if cfg.split > 1:
            extra = workspace if workspace is not None else self._workspace(launch.grid[0] // cfg.split, dev)
        options: dict[str, Any] = dict(num_warps=cfg.num_warps, **blocks)
        if dev.type == "cuda" and (cfg.split > 1 or not _USER_FP_FUSION_DEFAULT):
            # no FMA contraction where split programs meet: with it, float32 batch norms with split column sums gave
            # ResNet-50/MobileNetV2 gradients 9-22x eager's error, without 1.0-1.5x (RESULTS.md, eleventh session);
            # elsewhere on, said outright unless the user set Triton's default (which 3.10 turns off)
            options["enable_fp_fusion"] = cfg.split == 1
        if dev.type == "cuda" and cfg.maxnreg and torch.version.hip is None:  # ptxas's cap: NVIDIA only
            options["maxnreg"] = cfg.maxnreg
        return [*inputs, *outs, *extra, *launch.ints, *strides], options


def cluster_launch(compiled: Any, size: int) -> None:
    """Make ``compiled`` (a Triton kernel compiled for one CTA a program) launch as thread-block clusters of ``size``
    programs: Triton's launcher (3.5-3.9) reads the cluster size from the packed metadata's ``num_ctas``, multiplies
    the grid by it and sets the cluster attribute (``size`` 16 as non-portable). Idempotent; raises
    ``NotExpressible`` where the metadata has another layout. The caller checks the GPU has clusters (sm_90)."""
    packed = tuple(compiled.packed_metadata)
    if len(packed) == 3:  # (num_warps, num_ctas, shared)
        compiled.packed_metadata = (packed[0], size, packed[2])
    elif len(packed) == 6:  # (num_warps, num_ctas, shared, cluster x, y, z): earlier 3.x
        compiled.packed_metadata = (packed[0], size, packed[2], size, 1, 1)
    else:
        raise NotExpressible(f"this Triton's launch metadata {packed!r} has no known cluster size")


def compile_threads() -> int:
    """Threads that compile kernels ahead of their launches (``precompile``; on CUDA with
    ``OPGRAPH_COMPILE_PROCESSES=1`` each drives a worker process): ``OPGRAPH_COMPILE_THREADS`` (0 or 1 compiles
    a tuner's candidates on their first launches, one after another). By default the CPU count, at most 16."""
    value = os.environ.get("OPGRAPH_COMPILE_THREADS", "")
    if value.isdigit():
        return max(1, int(value))
    return max(1, min(16, os.cpu_count() or 1))


def compile_in_threads(kernels: Sequence[RegionKernel], inputs: Sequence[torch.Tensor]) -> list[RegionKernel]:
    """Compile ``kernels`` (a tuner's candidates, its default first) for ``inputs`` ahead of their launches in the
    ``compile_threads()`` compile threads (``precompile``), and return when they are compiled or too slow to wait
    for (``precompile.compile_ahead``'s patience): those still compiling, never the default. With one thread,
    nothing is compiled ahead. A configuration that fails here is left to its launch, which the tuner skips."""
    if min(compile_threads(), len(kernels)) <= 1:
        return []
    return [kernels[n] for n in precompile.compile_ahead(kernels, inputs, patience=True) if n > 0]


def _device_ms(k: RegionKernel, inputs: Sequence[torch.Tensor]) -> float:
    """Device time of ``TUNE_LAUNCHES`` launches of ``k`` queued behind a spinning kernel (``core.device_timing``)."""
    return device_ms(lambda: k(*inputs))


def _single_launch_ms(k: RegionKernel, inputs: Sequence[torch.Tensor]) -> float:
    """Device time of one launch of ``k``, queued behind a spin a fifth as long as ``_device_ms``'s (one launch to
    queue, not five; a host that outlasts it doubles it as there)."""
    return device_ms(lambda: k(*inputs), launches=1, head_start_cycles=TUNE_HEAD_START_CYCLES // TUNE_LAUNCHES)


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _aligned_inputs(ops: Sequence[Operation], inputs: Sequence[Tensor], domain: Tensor) -> tuple[int, ...]:
    """Inputs read at the domain's own index: reached from the reductions' inputs and the domain-shaped outputs
    through elementwise ops alone (a transpose or reshape on the way maps their dims to others; a batch norm's
    shift, a slice of x's first element, is another read of x beside the aligned one)."""
    made = {id(op.outputs[0]): op for op in ops}
    starts = [op.inputs[0] for op in ops if op.op.fusion is FusionKind.REDUCTION]
    stack = starts + [op.outputs[0] for op in ops if op.outputs[0].type.shape == domain.type.shape]
    seen: set[int] = set()
    while stack:
        t = stack.pop()
        if id(t) in seen or t.type.shape != domain.type.shape:
            continue
        seen.add(id(t))
        op = made.get(id(t))
        if op is not None and op.op.fusion is FusionKind.ELEMENTWISE:
            stack.extend(op.inputs)
    return tuple(i for i, t in enumerate(inputs) if id(t) in seen)


def region_kernel(ops: Sequence[Operation], inputs: Sequence[Tensor], outputs: Sequence[Tensor], *,
                  config: Config | None = None, cache_dir: Path | None = None, strided: bool = False,
                  scalars: Mapping[int, float | int | bool] | None = None,
                  inner_axis: int | None = None) -> RegionKernel:
    """Emit the kernel of a region (loaded on its first launch). The kernel reads contiguous inputs; given a
    non-contiguous one it switches to a variant reading inputs at their strides (no copies). ``scalars``: the
    values of one-element constant inputs, written into the source (the kernel still takes them as arguments).
    ``inner_axis``: the domain dim stored contiguously (strided variants; configurations are chosen for it)."""
    em = RegionEmitter(ops, inputs, outputs, config, strided=strided, scalars=scalars, inner_axis=inner_axis)
    candidates = candidate_configs(em) if config is None else [em.config]
    for k, chosen in enumerate(candidates):  # the first that can be written (a split the region refuses is not)
        try:
            em = (RegionEmitter(ops, inputs, outputs, chosen, strided=strided, scalars=scalars, inner_axis=inner_axis)
                  if k else em)
            source = em.source()
            break
        except NotExpressible:
            if k + 1 == len(candidates):
                raise
    number = {id(t): k for k, t in enumerate(em.values)}
    kernel = RegionKernel(
        source, tuple(op.name for op in ops), tuple(t.type for t in inputs), tuple(t.type for t in outputs),
        em.config, tuple(em.symbols[n] for n in sorted(em.symbols)), tuple(em.strides[n] for n in sorted(em.strides)),
        (number[id(em.domain)], em.xaxes if em.config.reduction else tuple(range(em.domain.rank))),
        tuple((op.op, op.attrs, tuple(number[id(t)] for t in op.inputs)) for op in ops),
        tuple(t.type for t in em.values), tuple(number[id(t)] for t in outputs), em.inplace_ok(), cache_dir)
    if not strided:
        # a given configuration keeps its meaning (a split row stays one): only the heuristic follows the layout
        kernel.strided = lambda inner=None: region_kernel(ops, inputs, outputs, config=config, cache_dir=cache_dir,
                                                          strided=True, scalars=scalars, inner_axis=inner)
        if em.reductions and config is None:  # flat kernels and given configurations ignore the memory order
            kernel.aligned = _aligned_inputs(ops, inputs, em.domain)
    others = candidates[k + 1:] if config is None else []
    if others:  # the strided variant is tuned too: its default can be one program walking every row
        def alternatives() -> list[RegionKernel]:
            out = []
            for c in others:
                try:
                    out.append(region_kernel(ops, inputs, outputs, config=c, cache_dir=cache_dir, strided=strided,
                                             scalars=scalars, inner_axis=inner_axis))
                except NotExpressible:  # e.g. a split column reduction whose stored values use its statistics
                    continue
            return out

        # emitted once for the tuner and the background compiles; the tuner drops them once it has chosen
        kernel.alternatives = functools.cache(alternatives)
    return kernel


def elementwise_kernel(ops: Sequence[Operation], inputs: Sequence[Tensor], outputs: Sequence[Tensor], *,
                       block: int = DEFAULT_BLOCK, cache_dir: Path | None = None) -> RegionKernel:
    """``region_kernel`` with the flat block size given (a power of two) for regions without reductions."""
    if block <= 0 or block & (block - 1) or block > 2**20:
        raise GraphError(f"block must be a power of two up to 2**20, got {block}")
    em = RegionEmitter(ops, inputs, outputs)
    config = em.config if em.config.reduction else Config(reduction=False, block=block)
    return region_kernel(ops, inputs, outputs, config=config, cache_dir=cache_dir)


def region_of(outputs: Sequence[Tensor]) -> tuple[list[Operation], list[Tensor]]:
    """The generated ops that compute ``outputs`` (in graph order), stopping at values made by other ops,
    which become the inputs (in first-use order). A helper for tests and tools."""
    seen: dict[int, Operation] = {}
    stack = [t.op for t in outputs]
    while stack:
        op = stack.pop()
        if id(op) in seen or not generated(op):
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
