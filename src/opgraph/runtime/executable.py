"""``Executable``: a compiled graph bound to a device (MPSGraph's ``MPSGraphExecutable``)."""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..codegen.progress import first_run
from ..core.dtype import from_torch
from ..core.errors import ExecutionError, FeedError, OpgraphError
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.printer import excerpt, format_ops
from ..ir.sources import ASSIGN, CONSTANT, PLACEHOLDER, READ, VARIABLE
from ..passes import PassRecord, Program
from ..passes.fuse import FUSED_REGION
from .compile import CompilationDescriptor, optimize, select_and_specialize
from .device import Device


class Executable:
    """Compiled targets of a graph for given feed types on one device.

    >>> import opgraph as og
    >>> g = og.Graph(); x = g.placeholder((3,), og.float32)
    >>> exe = g.compile({x: og.TensorType((3,), og.float32)}, [g.exp(x) + 1.0], device=og.device("cpu"))
    >>> [t.tolist() for t in exe.run([[0.0, 0.0, 0.0]])]
    [[2.0, 2.0, 2.0]]
    """

    def __init__(self, graph: GraphCore, feeds: dict[Tensor, TensorType], targets: Sequence[Tensor],
                 target_ops: Sequence[Operation], device: Device, descriptor: CompilationDescriptor) -> None:
        from ..codegen.python import generate

        self.graph = graph
        self.feed_tensors: list[Tensor] = list(feeds)
        self.target_tensors: list[Tensor] = list(targets)
        self.target_operations: list[Operation] = list(target_ops)
        self.input_types: list[TensorType] = [feeds[t] for t in self.feed_tensors]
        self.device = device
        self.descriptor = descriptor
        program = select_and_specialize(graph, feeds, targets, target_ops)
        self.output_types_: list[TensorType] = [t.type for t in program.outputs]
        self.program: Program
        self.pass_log: list[PassRecord]
        self.program, self.pass_log = optimize(program, descriptor, device.kind)
        self._state = graph._state.setdefault(str(device), {})
        for op in self.program.graph.ops:
            if op.op is VARIABLE and op.name not in self._state:
                self._state[op.name] = op.payload.to(device.torch).clone()  # type: ignore[union-attr]
        self._generated = generate(self.program, device.torch, self._state, descriptor)
        self._fn = self._generated.fn
        if device.kind == "cuda":
            from ..codegen.triton import precompile  # the kernels compile while the caller goes on

            with contextlib.suppress(Exception):  # workers importing while the caller goes on (where they are on)
                precompile.start_workers()
            for fn in self._generated.kernels.values() if precompile.enabled() else ():
                if getattr(fn, "kernel", None) is not None:
                    with contextlib.suppress(Exception):  # best effort: a kernel left out compiles at its launch
                        precompile.precompile(fn.kernel, device.torch)
        self._first_run = True
        self._cuda_graph: CapturedRun | None = None
        self._static_inputs: frozenset[int] = frozenset()
        self._recaptures = 0
        self._moves: dict[int, int] = {}  # static input -> captures it has moved from
        self._copied_outputs: set[int] = set()  # outputs a replay copies out (found still held by a later run)
        self._copy_bound = False  # capture declined: replays would copy more than launches save
        self._trial: list[float] | None = None  # while deciding: seconds of a timed replay, then op by op
        self.cuda_graph_status = "off"
        if device.is_cuda and descriptor.cuda_graphs:
            static = all(t.is_static for t in self.input_types) and all(t.is_static for t in self.output_types_)
            self.cuda_graph_status = "pending (captured on the first run)" if static else "off: dynamic shapes"
        self._checks = [(ty.dtype.torch_dtype, ty.shape) for ty in self.input_types]
        self._torch_device = device.torch
        # fast path: exact static sizes, compared as torch.Size (None: a dynamic dim, take the slow path)
        self._fast = [(dt, torch.Size(shape) if all(d is not None for d in shape) else None)  # type: ignore[arg-type]
                      for dt, shape in self._checks]
        # ... and the CUDA device as ``Tensor.get_device()`` gives it (no torch.device built per input); -1: the
        # CPU (checked with ``is_cpu``: meta tensors also give -1); None: MPS, the checked path
        self._device_index = {"cuda": device.index, "cpu": -1}.get(device.kind)

    @property
    def cuda_graph_status(self) -> str:
        """Whether runs replay a CUDA graph: "on", "pending (...)" (captured on the next run) or "off: why"."""
        return self._cuda_graph_status

    @cuda_graph_status.setter
    def cuda_graph_status(self, value: str) -> None:
        self._cuda_graph_status = value
        self._capture_pending = value.startswith("pending")  # read by every run: a flag, not a string match

    # ---- running ---------------------------------------------------------------------------
    def _prepare(self, inputs: Sequence[Any]) -> Sequence[torch.Tensor]:
        index = self._device_index
        if len(inputs) == len(self._fast) and index is not None:
            for v, (dt, size) in zip(inputs, self._fast):  # noqa: B905 (lengths checked; hot path)
                if (type(v) is not torch.Tensor and type(v) is not _PARAMETER) or v.dtype is not dt \
                        or v.shape != size or (v.get_device() != index if index >= 0 else not v.is_cpu):
                    break
            else:
                return inputs
        return self._prepare_checked(inputs)

    def _prepare_checked(self, inputs: Sequence[Any]) -> list[torch.Tensor]:
        if len(inputs) != len(self._checks):
            raise FeedError(f"executable takes {len(self._checks)} inputs "
                            f"({', '.join('%' + t.name for t in self.feed_tensors)}), got {len(inputs)}")
        out = []
        for k, (value, (dt, shape)) in enumerate(zip(inputs, self._checks, strict=True)):
            if not isinstance(value, torch.Tensor):
                value = _to_torch(value, self.input_types[k], self.feed_tensors[k])
            if value.dtype != dt or value.dim() != len(shape) or any(
                    d is not None and d != s for d, s in zip(shape, value.shape, strict=True)):
                raise FeedError(f"input {k} (%{self.feed_tensors[k].name}): expected {self.input_types[k]}, "
                                f"got {_describe(value)}")
            if value.device.type == "meta":
                raise FeedError(f"input {k} (%{self.feed_tensors[k].name}) is a meta tensor: it has no values")
            if value.device != self._torch_device:  # async only host-to-device; a host copy must be complete
                value = value.to(self._torch_device, non_blocking=self._torch_device.type != "cpu")
            out.append(value)
        return out

    def run(self, inputs: Sequence[Any] = ()) -> list[torch.Tensor]:
        """Run on ``inputs`` (torch tensors or NumPy arrays, in feed order); returns the targets."""
        return self._run(inputs, False)

    __call__ = run

    def run_consuming(self, inputs: list[Any]) -> list[torch.Tensor]:
        """``run``, handing ``inputs`` over: the list is emptied, and each input is freed after its last use
        when nothing else holds it (PyTorch's boxed calling convention; the torch backend runs this way).

        >>> import opgraph as og, torch
        >>> g = og.Graph(); x = g.placeholder((2,), og.float32)
        >>> exe = g.compile({x: x.type}, [g.exp(x)], device="cpu")
        >>> xs = [torch.zeros(2)]
        >>> exe.run_consuming(xs), xs
        ([tensor([1., 1.])], [])
        """
        if not isinstance(inputs, list):
            raise FeedError(f"run_consuming takes a list of inputs (it empties it), got {type(inputs).__name__}; "
                            f"run takes any sequence")
        return self._run(inputs, True)

    def _run(self, inputs: Sequence[Any], consume: bool) -> list[torch.Tensor]:
        if self._first_run:  # generated kernels compile (and tune) as they first launch: shown when it is long
            self._first_run = False
            generated = sum(o.op is FUSED_REGION for o in self.program.graph.ops)
            with first_run(generated):
                return self._run(inputs, consume)
        args = self._prepare(inputs)
        try:
            graph = self._cuda_graph
            if self._capture_pending:  # the capture's own run is a plain replay (no timed trial)
                self._try_capture(args)
                graph = self._cuda_graph
            elif graph is not None and self._trial is not None:
                return self._timed_trial(args)
            if graph is None:
                if not consume:  # the generated run empties the list it gets
                    return self._fn(list(args))
                if args is not inputs:  # converted copies: the caller's list goes too
                    inputs.clear()  # type: ignore[attr-defined]
                return self._fn(args)
            out = graph.replay(args)
            return out if out is not None else self._recapture(args)
        except OpgraphError:
            raise
        except Exception as e:  # a kernel failed: name the op it ran for
            raise self._execution_error(e) from e
        finally:
            if consume:
                inputs.clear()  # type: ignore[attr-defined]  # a list: run_consuming checks

    def mark_static_inputs(self, indices: Sequence[int]) -> None:
        """Declare the inputs at ``indices`` (feed order) to be the same tensors on every run, such as a model's
        parameters and buffers (their values may change in place): a CUDA-graph capture reads them where they
        are instead of copying them into its own buffers on every replay. A run that passes another tensor
        there (other storage or strides) is captured again; an input that moves a second time is copied from
        then on; after three captures more the executable runs op by op.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((4,), og.float32); w = g.placeholder((4,), og.float32)
        >>> exe = g.compile({x: x.type, w: w.type}, [x * w], device="cpu")
        >>> exe.mark_static_inputs([1])  # on a CPU device nothing is captured: no effect
        """
        bad = [i for i in indices if not 0 <= int(i) < len(self.feed_tensors)]
        if bad:
            raise FeedError(f"mark_static_inputs: indices {bad} out of range for {len(self.feed_tensors)} inputs")
        self._static_inputs = frozenset(int(i) for i in indices)
        if self._cuda_graph is not None or self._copy_bound:  # decide again with these inputs not copied
            self._cuda_graph = None
            self.cuda_graph_status = "pending (captured on the next run)"

    def _recapture(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """A static input moved or the caller holds outputs of the last replay: capture again, with the outputs
        held and the inputs that moved before copied from now on (or give up graphs after three captures more)."""
        assert self._cuda_graph is not None
        moved = [i for i, ptr, stride in self._cuda_graph.static if args[i].data_ptr() != ptr or
                 args[i].stride() != stride]
        for i in moved:
            self._moves[i] = self._moves.get(i, 0) + 1
        # a first move keeps the input static: a producer that captured again (a forward whose loss the caller
        # kept) moves all its outputs once, and a backward reading them should not copy them from then on
        self._static_inputs = self._static_inputs - {i for i in moved if self._moves[i] > 1}
        self._cuda_graph = None
        self._recaptures += 1
        if self._recaptures > 3:
            self.cuda_graph_status = ("off: captured more than three times again (static inputs moved or outputs "
                                      "of the last replay were still held)")
        else:
            self._try_capture(args)
        if self._cuda_graph is not None:
            out = self._cuda_graph.replay(args)
            assert out is not None  # just captured from these very args
            return out
        return self._fn(list(args))

    def _timed_trial(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Replays copy the inputs not read in place and the outputs held by callers; when that is a fair share
        of what they save, time one replay and one op-by-op run (the next two runs) and keep the faster way."""
        assert self._cuda_graph is not None and self._trial is not None
        torch.cuda.synchronize(self._torch_device)
        start = time.perf_counter()
        out = self._cuda_graph.replay(args) if not self._trial else self._fn(list(args))
        torch.cuda.synchronize(self._torch_device)
        self._trial.append(time.perf_counter() - start)
        if out is None:  # a static input moved or an output is still held: capture (and try) again
            return self._recapture(args)
        if len(self._trial) == 2:
            replay, plain = self._trial
            self._trial = None
            if replay >= plain:
                self._cuda_graph = None  # frees the graph's memory pool
                self.cuda_graph_status = (f"off: a replay ({replay * 1e3:.2f} ms, copies included) was not faster "
                                          f"than running op by op ({plain * 1e3:.2f} ms)")
        return out

    def _copied_bytes(self, args: Sequence[torch.Tensor]) -> int:
        """Bytes a replay copies: the inputs not read in place and the outputs copied out."""
        return sum(a.numel() * a.element_size() for i, a in enumerate(args) if i not in self._static_inputs) + sum(
            math.prod(int(d or 0) for d in self.output_types_[k].shape) * int(self.output_types_[k].dtype.itemsize)
            for k in self._copied_outputs)

    def _decline_copies(self, copied: int, launches: int) -> bool:
        """Replays would copy more than their launches save: run op by op (says why)."""
        self._copy_bound = launches > 0 and copied / COPY_BYTES_PER_US > launches * LAUNCH_US
        if launches == 0 or self._copy_bound:
            self._cuda_graph = None
            self.cuda_graph_status = (f"off: copying {copied / 2**20:.0f} MiB of inputs and outputs per replay "
                                      f"would cost more than {launches} kernel launches save")
            return True
        return False

    def _try_capture(self, args: Sequence[torch.Tensor]) -> None:
        variables = [op.name for op in self.program.graph.ops if op.op is VARIABLE]
        launches = len(self.kernels())
        if self._decline_copies(self._copied_bytes(args), launches):
            return
        try:
            self._cuda_graph = CapturedRun(self._fn, args, self._state, variables, self._torch_device,
                                           self._static_inputs, self._copied_outputs)
        except Exception as e:  # e.g. an op that synchronises with the host: run op by op instead
            torch.cuda.synchronize(self._torch_device)
            self.cuda_graph_status = f"off: capture failed ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
            return
        copied = self._copied_bytes(args)  # the capture may add outputs it copies (those aliasing variables)
        if self._decline_copies(copied, launches):
            return
        # cheap copies: keep the graph; else measure (a device-bound run gains nothing from replays)
        self._trial = [] if copied / COPY_BYTES_PER_US > TRIAL_SHARE * launches * LAUNCH_US else None
        self.cuda_graph_status = "on"

    def _execution_error(self, e: BaseException) -> ExecutionError:
        op = None
        tb = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self._generated.filename:
                op = self._generated.line_ops.get(tb.tb_lineno)
            tb = tb.tb_next
        if op is None:
            return ExecutionError(f"executable failed: {type(e).__name__}: {e}")
        shown = ", ".join(str(t.type) for t in op.inputs)
        return ExecutionError(f"{op.op.name}({shown}) failed at run time in op %{op.name}: "
                              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}\n"
                              f"  inputs:\n{excerpt(op.inputs)}")

    # ---- types and specialisation ----------------------------------------------------------
    def output_types(self, input_types: Sequence[TensorType] | None = None) -> list[TensorType]:
        """Target types for ``input_types`` (MPSGraph's ``getOutputTypes``); the compiled ones if None."""
        if input_types is None:
            return list(self.output_types_)
        feeds = self._typed_feeds(input_types)
        return [t.type for t in select_and_specialize(self.graph, feeds, self.target_tensors,
                                                      self.target_operations).outputs]

    def specialize(self, input_types: Sequence[TensorType], device: Device | None = None) -> Executable:
        """A new executable compiled for narrower ``input_types`` (e.g. dynamic dims made static)."""
        return Executable(self.graph, self._typed_feeds(input_types), self.target_tensors,
                          self.target_operations, device or self.device, self.descriptor)

    def _typed_feeds(self, input_types: Sequence[TensorType]) -> dict[Tensor, TensorType]:
        if len(input_types) != len(self.feed_tensors):
            raise FeedError(f"expected {len(self.feed_tensors)} input types, got {len(input_types)}")
        for t, old, new in zip(self.feed_tensors, self.input_types, input_types, strict=True):
            if not old.accepts(new):
                raise FeedError(f"input %{t.name}: {new} does not fit the compiled type {old}")
        return dict(zip(self.feed_tensors, input_types, strict=True))

    # ---- introspection ---------------------------------------------------------------------
    @property
    def source(self) -> str:
        """The generated Python function."""
        return self._generated.source

    def kernels(self) -> list[KernelInfo]:
        """The kernels a run launches, in order: each with ``.ops`` (graph op names inside it),
        ``.source`` (generated source; ``None`` for a vendor/PyTorch kernel) and ``.tuned`` (the launch
        configuration the tuner chose per input shapes, ``TunedLaunch``: printed as ``"[(256, 262144)]: split 16,
        16384 a program, 4 warps, as clusters"``); a fused kernel of dynamic shapes also lists, as ``.specialized``,
        the programs compiled so far for run-time shapes it refused (``SpecializedProgram``). Sources and state
        accesses launch nothing and are not listed.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((2,), og.float32, name="x")
        >>> exe = g.compile({x: x.type}, [g.exp(x, name="e")], device="cpu")
        >>> [(k.op, k.ops, k.source) for k in exe.kernels()]
        [('exp', ['e'], None)]
        """
        quiet = {PLACEHOLDER, CONSTANT, VARIABLE, READ, ASSIGN}
        out = []
        for o in self.program.graph.ops:
            if o.op in quiet:
                continue
            if o.op is FUSED_REGION:  # a fused op lists the graph ops inside it
                names = [s.name for s in o.attrs.steps]
            elif isinstance(getattr(o.attrs, "names", None), tuple):
                names = list(o.attrs.names)
            else:
                names = [o.name]
            launcher = self._generated.kernels.get(o.id)  # a generated region's: its RegionKernel as ``.kernel``
            region = getattr(launcher, "kernel", None)
            chosen = region.tuned_configs() if region is not None else {}
            tuned = tuple(TunedLaunch(shapes, config.describe(), config.num_warps, config.split)
                          for shapes, config in chosen.items())
            programs = getattr(launcher, "specialized", None) or {}
            specialized = tuple(SpecializedProgram(shapes, exe.kernels() if exe is not None else None)
                                for shapes, exe in programs.items())
            out.append(KernelInfo(o.op.name, names, getattr(launcher, "source", None), tuned, specialized))
        return out

    def memory_stats(self) -> MemoryStats:
        """Bytes of the intermediate values of one run, from the compiled program's types and its memory
        plan (``opgraph.passes.plan_memory``): the planned peak places every buffer the run allocates in
        one arena, reusing the memory of buffers after the last use of every value that may alias them;
        views (reshape, transpose, ...) and outputs written in place into a dead input cost nothing. The
        unplanned peak allocates every value of every op and frees nothing. Inputs, constants and
        variables are not counted; dynamic dims count as 1.

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((256,), og.float32)
        >>> y = g.exp(g.exp(g.exp(x)))
        >>> s = g.compile({x: x.type}, [y], device="cpu").memory_stats()
        >>> s.planned_peak_bytes, s.unplanned_peak_bytes, s.inplace_updates, s.reused_buffers
        (2048, 3072, 0, 1)
        """
        plan = self._generated.plan
        assert plan is not None  # generate() always plans
        return MemoryStats(planned_peak_bytes=plan.planned_peak_bytes, unplanned_peak_bytes=plan.unplanned_peak_bytes,
                           inplace_updates=plan.inplace_updates, reused_buffers=plan.reused_buffers)

    def summary(self) -> str:
        ops = self.program.graph.ops
        counts: dict[str, int] = {}
        for o in ops:
            counts[o.op.name] = counts.get(o.op.name, 0) + 1
        top = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        ins = ", ".join(f"%{t.name}: {ty}" for t, ty in zip(self.feed_tensors, self.input_types, strict=True))
        outs = ", ".join(str(t) for t in self.output_types_)
        return (f"Executable on {self.device}: {len(ops)} ops ({top})\n  inputs: {ins or '-'}\n"
                f"  outputs: {outs or '-'}")

    def __str__(self) -> str:
        return self.summary() + "\n" + format_ops(self.program.graph.ops)

    def __repr__(self) -> str:
        return f"<Executable on {self.device}: {len(self.program.graph)} ops>"


def _to_torch(value: Any, expected: TensorType, feed: Tensor) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        try:
            return torch.from_numpy(value)
        except TypeError:
            raise FeedError(f"input %{feed.name}: NumPy dtype {value.dtype} is not supported") from None
    if isinstance(value, (list, tuple, int, float, bool, np.generic)):
        return torch.tensor(value, dtype=expected.dtype.torch_dtype)
    raise FeedError(f"input %{feed.name}: expected a torch.Tensor or numpy.ndarray, got {type(value).__name__}")


def _describe(value: torch.Tensor) -> str:
    try:
        return str(TensorType(tuple(value.shape), from_torch(value.dtype)))
    except OpgraphError:
        return f"{value.dtype}{tuple(value.shape)}"


@dataclass(frozen=True)
class MemoryStats:
    """``exe.memory_stats()``: peak bytes of intermediates with the memory plan and without any reuse;
    how many outputs are written in place into a dead input, how many buffers reuse freed memory."""

    planned_peak_bytes: int
    unplanned_peak_bytes: int
    inplace_updates: int = 0
    reused_buffers: int = 0


@dataclass(frozen=True)
class TunedLaunch:
    """The launch configuration a generated kernel's tuner chose for one set of input ``shapes``: ``config`` says
    it in words (``"split 16, 16384 a program, 4 warps, as clusters"``), ``num_warps`` and ``split`` (programs
    sharing a row; 1: none) as values; ``str()`` gives ``"[(256, 262144)]: split 16, ..."``."""

    shapes: tuple[tuple[int, ...], ...]
    config: str
    num_warps: int
    split: int = 1

    def __str__(self) -> str:
        return f"{list(self.shapes)}: {self.config}"


@dataclass(frozen=True)
class KernelInfo:
    """One kernel of an executable: the op it implements, the graph ops inside it, its generated source, and for a
    tuned one the launch configuration chosen for each input shapes launched so far (on CUDA)."""

    op: str
    ops: list[str]
    source: str | None
    tuned: tuple[TunedLaunch, ...] = ()
    specialized: tuple[SpecializedProgram, ...] = ()  # a fused kernel's programs for shapes it refused


@dataclass(frozen=True)
class SpecializedProgram:
    """What a fused region runs for run-time input ``shapes`` its kernel refused (dynamic dims that broadcast
    where the kernel took them to match): its steps compiled for those static shapes, whose ``kernels`` these are
    (``None``: they did not compile, and the steps run one by one)."""

    shapes: tuple[tuple[int, ...], ...]
    kernels: list[KernelInfo] | None


_PARAMETER = torch.nn.Parameter  # parameters passed as inputs (the PyTorch backend) take the fast path too
LAUNCH_US = 4.0  # host time a kernel launch costs without a CUDA graph (measured: ~5 us on an H200 host)
COPY_BYTES_PER_US = 2.0e6  # device copy bandwidth, conservatively (read + write)
TRIAL_SHARE = 0.1  # replays whose copies cost more than this share of the launches they save are timed first


class CapturedRun:
    """A generated function captured into a CUDA graph. Inputs are copied into static buffers, except ``static``
    ones (parameters), read where they were at capture: a replay checks that the caller passes the same data
    pointer and strides there (``replay`` returns None otherwise), so it reads exactly the memory of the tensor
    the caller passed.

    Outputs are lent, not copied: a replay returns aliases of the graph's own output buffers, which the next
    replay overwrites. So a replay first checks (storage use counts) that no alias of the last outputs is still
    held; where one is, ``replay`` adds those outputs to ``copied_outputs`` and returns None: the executable
    captures again (the held buffers stay with the caller) and copies them out from then on (a loss kept across
    steps, gradients accumulated in place; not the activations a backward graph reads and frees). Outputs that
    alias a static input are lent unchecked (replays never write them); those that alias a variable are copied."""

    def __init__(self, fn: Any, args: Sequence[torch.Tensor], state: dict[str, torch.Tensor],
                 variables: Sequence[str], device: torch.device, static: frozenset[int] = frozenset(),
                 copied_outputs: set[int] | None = None) -> None:
        inputs = [a if i in static else a.clone() for i, a in enumerate(args)]
        # static inputs are not held after the capture: the replay reads whatever tensor the caller passes at
        # the same pointer and strides (holding them would keep a forward's lent activations held)
        self.static = [(i, a.data_ptr(), a.stride()) for i, a in enumerate(args) if i in static]
        self.copied = [(b, i) for i, b in enumerate(inputs) if i not in static]
        self._replay, self.outputs = self.record(fn, inputs, state, variables, device)  # the graph lives in _replay
        del inputs
        self.copied_outputs = copied_outputs if copied_outputs is not None else set()  # shared across captures
        external = {a.untyped_storage().data_ptr() for i, a in enumerate(args) if i in static}
        variable = {state[name].untyped_storage().data_ptr() for name in variables}
        # per storage the graph writes: its use count while only this object holds it, the outputs in it
        self._storages: list[torch.UntypedStorage] = []
        self._checks: list[tuple[int, int, list[int]]] = []
        by_ptr: dict[int, list[int]] = {}
        for k, t in enumerate(self.outputs):
            ptr = t.untyped_storage().data_ptr()
            if ptr in variable or _USE_COUNT is None:
                self.copied_outputs.add(k)
            elif ptr not in external:
                by_ptr.setdefault(ptr, []).append(k)
        for ks in by_ptr.values():
            storage = self.outputs[ks[0]].untyped_storage()
            self._storages.append(storage)  # held (counted in the baseline): its cdata stays valid
            self._checks.append((storage._cdata, _use_count(storage._cdata), ks))

    def replay(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
        for i, ptr, stride in self.static:
            a = args[i]
            if a.data_ptr() != ptr or a.stride() != stride:
                return None
        if any(_use_count(cdata) > base for cdata, base, _ in self._checks):
            # replaying would overwrite outputs the caller still holds
            for cdata, base, ks in self._checks:
                if _use_count(cdata) > base:
                    self.copied_outputs.update(ks)
            return None
        for buffer, i in self.copied:
            buffer.copy_(args[i], non_blocking=True)
        self._replay()
        copied = self.copied_outputs
        return [t.clone() if k in copied else t.detach() for k, t in enumerate(self.outputs)]


    @staticmethod
    def record(fn: Any, inputs: Sequence[torch.Tensor], state: dict[str, torch.Tensor], variables: Sequence[str],
               device: torch.device) -> tuple[Any, list[torch.Tensor]]:
        """Capture ``fn(list(inputs))`` into a CUDA graph: (replay it, its output buffers). Tests replace this to check
        the bookkeeping around it on the CPU."""
        # warm up (library handles, autotuning) on a side stream, against copies of the state: a warm-up
        # must not apply the run's assigns
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            scratch = {name: state[name].clone() for name in variables}
            fn(list(inputs), S=scratch)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                outputs = fn(list(inputs))  # recorded, not run: the first replay runs it
        except BaseException:
            _end_generator_capture(device)
            raise
        return graph.replay, outputs


def _end_generator_capture(device: torch.device) -> None:
    """A capture that fails (an op synchronising with the host) ends without the default generator's capture
    epilogue, leaving it "capturing": every later CUDA random op would raise ("Offset increment outside graph
    capture"). An empty capture runs the prologue and epilogue again on the same generator state (a fresh state
    would leave graphs captured before advancing the old one)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    with torch.cuda.device(index), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "The CUDA Graph is empty": nothing was meant to be recorded
        try:
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                pass
        except RuntimeError:  # cleanup on the way to the original error, which the caller reports
            pass


_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)  # None: outputs are always copied


def _use_count(cdata: int) -> int:
    assert _USE_COUNT is not None
    return int(_USE_COUNT(cdata))
