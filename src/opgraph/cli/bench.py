"""``opgraph bench``: training throughput, inference latency and first-compile time of well-known models with
eager PyTorch, ``torch.compile`` (Inductor) and ``torch.compile(backend="opgraph")``, all measured in one run."""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import importlib
import json
import math
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from unittest import mock

import torch
from torch import nn

from ._bench_models import (
    INFERENCE,
    MODELS,
    TRAINING,
    Model,
    WithLoss,
    first_line,
    library_missing,
    logits_of,
    make_data,
    pick_models,
    without_dropout,
)
from ._progress import Progress
from ._table import format_table

BACKENDS = ("eager", "inductor", "opgraph")
SECTIONS = ("training", "cpu-gpu", "inference", "compile")
DTYPES = ("float32", "bfloat16")
CPU_GPU_BATCH = 8  # the CPU-vs-GPU comparison: the training models at a batch a CPU trains in seconds
LR, MOMENTUM = 0.01, 0.9

DESCRIPTION = """\
Benchmark PyTorch models (random weights, synthetic data, nothing downloaded) with three backends measured
in the same run: eager PyTorch, torch.compile (Inductor, its default backend) and
torch.compile(backend="opgraph"). Sections (--only):
  training   samples/s of an SGD training step (forward, cross-entropy loss, backward, SGD with momentum)
             of ResNet-50 (batch 128, 224x224), BERT-base (masked LM, batch 64 x 128 tokens) and VGG16
             (batch 64), in float32 and in bfloat16 autocast
  cpu-gpu    the same models at batch 8 in float32 on the CPU and on the GPU (eager and opgraph;
             only when a GPU is present)
  inference  latency in ms at batch 1 and 8 under torch.inference_mode() of VGG16, ResNet-18,
             ResNet-50, AlexNet, ViT-B/16, EfficientNet-B0, EfficientNet-B4 and ConvMixer-768/32
  compile    seconds until the first call (training step or inference, compiling included) returns,
             from the cells above; alone, it runs only the first calls (float32 training, batch-1 inference)
Each cell: warm-up runs, then the median of --iters timed runs, the device synchronised around each.
The first result of Inductor and opgraph is checked against eager PyTorch's (inference: the output;
training: the loss and all gradients of the first step; relative L2 error against a tolerance loose
for bfloat16, widened to 3x eager's own error against a float32 run without TF32, since deep random-weight
models amplify rounding); a mismatch is flagged with '!', a failure is reported in its cell and the run goes on.
Training results are also compared with eager in float64: a mismatch no farther from float64 than 3x eager's own
distance is marked '=' instead (as right as eager, only rounded differently).
Dropout is off (p = 0) in training so that the results can be compared.
Models come from torchvision, transformers and timm; a row whose library is missing says so. --quick
uses small sizes (64x64 images, training batch 8; BERT with 2 layers of width 128, 4 x 32 tokens) and,
for missing libraries, small stand-ins written with torch.nn (tiny_*, 32x32 images), so that a CPU
finishes in minutes. ATen ops the opgraph backend has no converter for run as themselves inside
its executables (og.torch.explain(model, x) lists them)."""

EXAMPLE = """\
example:
  opgraph bench                                # on og.device(); on a GPU expect many minutes of compiling
  opgraph bench --quick --json bench.json --plot bench.png
  opgraph bench --only inference --models resnet50,vit_b_16 --iters 20
  opgraph bench --quick --device cpu --threads 1 --models tiny_cnn --backends eager,opgraph
  opgraph bench --only training --models resnet50 --option channels_last=true"""


def backend_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` as an opgraph backend option, checked against ``TorchOptions``."""
    from ..frontends.torch.backend import TorchOptions

    key, sep, raw = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    words: dict[str, Any] = {"true": True, "false": False, "none": None}
    value: Any = words.get(raw.lower(), raw)
    if isinstance(value, str):
        try:
            value = float(raw) if "." in raw else int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{key}: expected true, false, none or a number, got {raw!r}") from None
    try:
        TorchOptions.of({key: value})
    except Exception as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return key, value


def register(sub: Any) -> None:
    from .demo import _non_negative, _positive, _positive_float

    models = "\n".join(f"  {m.name:<16} {m.title} ({m.library})" for m in MODELS.values())
    p = sub.add_parser("bench", help="time models with eager PyTorch, torch.compile (Inductor) and opgraph",
                       description=DESCRIPTION, epilog=f"{EXAMPLE}\n\nmodels (--models):\n{models}",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: og.device())")
    p.add_argument("--quick", action="store_true",
                   help="small sizes, and torch-only stand-ins where a model's library is missing")
    p.add_argument("--only", type=_names(SECTIONS), default=list(SECTIONS), metavar="SECTIONS",
                   help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})")
    p.add_argument("--models", type=_names(tuple(MODELS)), default=None, metavar="NAMES",
                   help="comma-separated models to run (default all; the list is below)")
    p.add_argument("--backends", type=_names(BACKENDS), default=list(BACKENDS), metavar="NAMES",
                   help="backends to time: eager (always: the baseline), inductor, opgraph (default all)")
    p.add_argument("--batches", type=_batches, default=[1, 8], metavar="SIZES",
                   help="inference batch sizes (default 1,8)")
    p.add_argument("--dtypes", type=_names(DTYPES), default=list(DTYPES), metavar="DTYPES",
                   help="training precisions: float32, bfloat16 (autocast) or both (default)")
    p.add_argument("--iters", type=_positive, default=None, help="timed runs per cell (default 10; 3 with --quick)")
    p.add_argument("--warmup", type=_non_negative, default=None,
                   help="untimed runs after the first (default 3; 1 with --quick)")
    p.add_argument("--max-seconds", type=_positive_float, default=30.0,
                   help="stop a cell's timing after this long, at least one run (default 30)")
    p.add_argument("--threads", type=_positive, default=None, help="CPU threads for PyTorch (default: its own)")
    p.add_argument("--cold-cache", action="store_true",
                   help="give Inductor an empty cache, and opgraph an empty Triton cache and no tuning records, so "
                        "that compile times do not profit from earlier runs")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="write all results as JSON (rewritten after each model: \"complete\" is false until the end)")
    p.add_argument("--plot", default=None, metavar="PATH", help="write a PNG bar chart of the speed-ups vs eager")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--option", type=backend_option, action="append", default=[], metavar="KEY=VALUE",
                   help="an opgraph backend option (a field of og.torch.TorchOptions; values true, false, none or "
                        "numbers), e.g. channels_last=true; repeatable")
    p.set_defaults(run=run)


def _names(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(s: str) -> list[str]:
        names = [n.strip() for n in s.split(",") if n.strip()]
        unknown = [n for n in names if n not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown) or 'empty list'}; "
                                             f"choose from {', '.join(allowed)}")
        return names
    return parse


def _batches(s: str) -> list[int]:
    try:
        sizes = [int(n) for n in s.split(",") if n.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be >= 1, got {s!r}")
    return sizes


# ---- results -----------------------------------------------------------------------------------
@dataclass
class Cell:
    """One backend's measurement of a row: seconds per timed run, the first call, the check against eager."""

    backend: str
    times_s: list[float] = field(default_factory=list)
    first_call_s: float | None = None
    rel_err: float | None = None  # relative L2 error against eager PyTorch's first result
    tolerance: float | None = None
    exact_err: float | None = None  # training: relative L2 error against eager in float64, the oracle
    error: str | None = None
    aten_ops: int | None = None  # opgraph: ATen ops in the graphs it compiled
    fallback_ops: int | None = None  # opgraph: of those, the ones that ran as themselves (no converter yet)
    op_by_op: list[str] = field(default_factory=list)  # opgraph on CUDA: why graphs did not replay a CUDA graph

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.times_s) if self.times_s and self.error is None else None

    @property
    def matches(self) -> bool | None:
        return None if self.rel_err is None or self.tolerance is None else self.rel_err <= self.tolerance


@dataclass
class Row:
    section: str  # "training", "cpu-gpu" or "inference"
    model: str
    title: str
    library: str
    device: str
    dtype: str
    batch: int
    input: str
    stands_for: list[str] = field(default_factory=list)
    skipped: str | None = None
    cells: list[Cell] = field(default_factory=list)
    rounding: float = 0.0  # eager's own error from rounding alone: at this precision against a more precise run
    eager_exact_err: float | None = None  # training: eager's own relative L2 error against eager in float64

    def cell(self, backend: str) -> Cell | None:
        return next((c for c in self.cells if c.backend == backend), None)

    def speedup(self, backend: str) -> float | None:
        """Eager's median time over ``backend``'s."""
        c, b = self.cell(backend), self.cell("eager")
        t, t0 = (c.median_s if c else None), (b.median_s if b else None)
        return t0 / t if t and t0 else None


def row_json(row: Row) -> dict[str, Any]:
    out = asdict(row)
    for c, d in zip(row.cells, out["cells"], strict=True):
        med = c.median_s
        d["median_ms"] = None if med is None else med * 1e3
        d["samples_per_s"] = None if med is None else row.batch / med
        d["speedup_vs_eager"] = row.speedup(c.backend)
        d["matches_eager"] = c.matches
    return out


def _error(e: BaseException) -> str:
    inner = getattr(e, "inner_exception", None)  # Dynamo's BackendCompilerFailed wraps the backend's error
    if isinstance(inner, BaseException):
        return f"{type(e).__name__}: {type(inner).__name__}: {first_line(inner)}"
    return f"{type(e).__name__}: {first_line(e)}"


def rel_err(got: Sequence[torch.Tensor], ref: Sequence[torch.Tensor]) -> float:
    """The largest relative L2 error of ``got`` against ``ref``, pair by pair (inf when shapes differ)."""
    worst = 0.0
    for a, b in zip(got, ref, strict=True):
        if a.shape != b.shape:
            return math.inf
        a64, b64 = a.double(), b.double()
        err = float((a64 - b64).norm() / b64.norm().clamp_min(1e-12))
        worst = max(worst, err if err == err else math.inf)  # NaN: no match
        if not math.isfinite(worst):
            return math.inf
    return worst


ROUNDING_FACTOR = 3.0
EXACT_FACTOR = 3.0  # a result no farther from float64 than this times eager's own distance is as right as eager's
MAX_TOLERANCE = 0.3  # beyond this a check cannot tell a wrong result from rounding: the row says so


def tolerance(dtype: str, dev: Any) -> float:
    """Loose bounds: bfloat16 keeps 8 bits of mantissa, GPUs run float32 convolutions in TF32 by default."""
    if dtype == "bfloat16":
        return 0.1
    return 1e-3 if dev.kind == "cpu" else 1e-2


# ---- measuring ---------------------------------------------------------------------------------
class Bench:
    """Runs the cells of a benchmark; ``first_call_only`` skips the timed runs (the compile section alone)."""

    def __init__(self, args: argparse.Namespace, dev: Any, progress: Progress) -> None:
        self.backends = ["eager", *(b for b in BACKENDS[1:] if b in args.backends)]
        self.quick: bool = args.quick
        self.only: list[str] | None = args.models
        self.iters: int = args.iters if args.iters is not None else (3 if args.quick else 10)
        self.warmup: int = args.warmup if args.warmup is not None else (1 if args.quick else 3)
        self.max_seconds: float = args.max_seconds
        self.cold_cache: bool = args.cold_cache
        self.dev = dev
        self.progress = progress
        self.first_call_only = False
        self.options: dict[str, Any] = {"warn_fallbacks": False, **dict(args.option)}
        self.checkpoint: Callable[[Sequence[Row]], None] | None = None  # called with a section's rows so far

    # -- one cell
    @contextlib.contextmanager
    def _cell_context(self, backend: str, cell: Cell) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")  # the opgraph backend names its fallbacks; counted below instead
            if backend == "inductor" and self.cold_cache:
                from torch._inductor import utils as inductor_utils

                fresh = getattr(inductor_utils, "fresh_cache", None) or inductor_utils.fresh_inductor_cache
                stack.enter_context(fresh())
            if backend == "opgraph" and self.cold_cache:  # as Inductor's fresh cache: nothing of earlier runs
                folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="opgraph-cold-"))
                stack.enter_context(mock.patch.dict(os.environ, {"TRITON_CACHE_DIR": folder,
                                                                 "OPGRAPH_TUNING_RECORDS": "0"}))
            if backend == "opgraph":
                from opgraph.frontends.torch import recording

                reports = stack.enter_context(recording())
                stack.callback(lambda: self._count_fallbacks(cell, reports))
            yield

    @staticmethod
    def _count_fallbacks(cell: Cell, reports: list[Any]) -> None:
        cell.aten_ops = sum(r.aten_nodes for r in reports)
        cell.fallback_ops = sum(sum(r.fallbacks.values()) + (r.aten_nodes if r.executable is None else 0)
                                for r in reports)
        cell.op_by_op = [f"{r.kind} graph {r.executable.cuda_graph_status}" for r in reports
                         if r.executable is not None and r.executable.device.is_cuda
                         and r.executable.cuda_graph_status != "on"]

    def _compile(self, module: nn.Module, backend: str) -> Callable[..., Any]:
        if backend == "eager":
            return module
        torch._dynamo.reset()
        if backend == "inductor":
            return torch.compile(module)
        return torch.compile(module, backend="opgraph", options=self.options)

    def _timed(self, fn: Callable[[], Any], dev: Any) -> list[float]:
        if self.first_call_only:
            return []
        for _ in range(self.warmup):
            fn()
        times: list[float] = []
        deadline = time.perf_counter() + self.max_seconds
        for i in range(self.iters):
            dev.synchronize()
            t0 = time.perf_counter()
            fn()
            dev.synchronize()
            times.append(time.perf_counter() - t0)
            self.progress.update(i + 1, self.iters)
            if time.perf_counter() > deadline:
                break
        return times

    def _run_cell(self, row: Row, backend: str, body: Callable[[Cell], tuple[torch.Tensor, ...]],
                  reference: tuple[torch.Tensor, ...] | None, dev: Any,
                  exact: tuple[torch.Tensor, ...] | None = None) -> tuple[torch.Tensor, ...] | None:
        """Run ``body`` for ``backend``, catching its failure into the cell; check its result against eager's (and
        against ``exact``, eager in float64, where given)."""
        cell = Cell(backend)
        row.cells.append(cell)
        label = f"{row.section} {row.model} {row.dtype} batch {row.batch} on {row.device}: {backend}"
        got = None
        try:
            with self.progress.step(label), self._cell_context(backend, cell):
                got = body(cell)
        except Exception as e:  # any failure is the cell's result, not the run's end
            cell.error = _error(e)
            cell.times_s = []
        finally:
            torch._dynamo.reset()
            gc.collect()
            if dev.is_cuda:
                torch.cuda.empty_cache()
        if got is not None and reference is not None and backend != "eager":
            # deep random-weight models amplify rounding: a backend may differ from eager as much as eager
            # differs from itself at a higher precision
            cell.rel_err = rel_err(got, reference)
            widened = min(ROUNDING_FACTOR * row.rounding, MAX_TOLERANCE) if math.isfinite(row.rounding) else 0.0
            cell.tolerance = max(tolerance(row.dtype, dev), widened)
        if got is not None and exact is not None:
            cell.exact_err = rel_err(got, exact)
        return got

    def _first(self, fn: Callable[[], Any], dev: Any, cell: Cell) -> Any:
        dev.synchronize()
        t0 = time.perf_counter()
        out = fn()
        dev.synchronize()
        cell.first_call_s = time.perf_counter() - t0
        return out

    # -- rows
    def training_row(self, m: Model, model0: nn.Module, row: Row, backends: Sequence[str], dev: Any,
                     size: int) -> None:
        """Time an SGD step of ``model0``'s copies on ``dev`` with each backend."""
        x, y = make_data(m, row.batch, size, dev.torch)
        reference = exact = None
        for backend in backends:
            def body(cell: Cell, backend: str = backend) -> tuple[torch.Tensor, ...]:
                model = copy.deepcopy(model0).to(dev.torch).train()
                fn = self._compile(WithLoss(model), backend)
                opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

                def forward_backward() -> torch.Tensor:
                    with torch.autocast(dev.torch.type, dtype=torch.bfloat16, enabled=row.dtype == "bfloat16"):
                        loss = fn(x, y)
                    loss.backward()
                    return loss

                def step() -> None:
                    opt.zero_grad(set_to_none=True)
                    forward_backward()
                    opt.step()

                loss = self._first(forward_backward, dev, cell)
                grads = [p.grad.reshape(-1).float() for p in model.parameters() if p.grad is not None]
                result = (loss.detach().float().clone(), torch.cat(grads) if grads else torch.zeros(0))
                opt.step()
                cell.times_s = self._timed(step, dev)
                return result

            got = self._run_cell(row, backend, body, reference, dev, exact)
            if backend == "eager":
                reference = got
                if got is not None and len(backends) > 1:
                    try:
                        row.rounding = self._rounding(m, model0, row, x, y, got)
                        exact = self._float64_step(model0, x, y)
                        row.eager_exact_err = rel_err(got, exact)
                    except Exception:  # e.g. out of memory at float32 or float64: what was measured stays
                        if row.eager_exact_err is None:  # no float64 check without eager's own distance
                            exact = None
                    finally:
                        gc.collect()
                        if dev.is_cuda:
                            torch.cuda.empty_cache()

    def _rounding(self, m: Model, model0: nn.Module, row: Row, x: torch.Tensor, y: torch.Tensor,
                  eager: tuple[torch.Tensor, ...]) -> float:
        """Eager's first-step error at the row's precision (TF32 convolutions, bfloat16 autocast) against eager
        in float32 with TF32 off: the scale of differences that rounding alone makes."""
        model = copy.deepcopy(model0).to(x.device).train()
        saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            loss = WithLoss(model)(x, y)
            loss.backward()
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
        grads = [p.grad.reshape(-1).float() for p in model.parameters() if p.grad is not None]
        precise = (loss.detach().float(), torch.cat(grads) if grads else torch.zeros(0))
        del model
        return rel_err(eager, precise)

    @staticmethod
    def _float64_step(model0: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The first step's loss and gradients of eager PyTorch in float64 (no autocast, no TF32): the oracle that
        tells a backend's result farther from eager than rounding explains from one as right as eager's."""
        model = copy.deepcopy(model0).to(x.device).double().train()
        loss = WithLoss(model)(x.double() if x.is_floating_point() else x, y)
        loss.backward()
        grads = [p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]
        return loss.detach(), torch.cat(grads) if grads else torch.zeros(0, dtype=torch.float64)

    def inference_row(self, m: Model, model: nn.Module, row: Row, size: int) -> None:
        x, _ = make_data(m, row.batch, size, self.dev.torch)
        reference = None
        for backend in self.backends:
            def body(cell: Cell, backend: str = backend) -> tuple[torch.Tensor, ...]:
                fn = self._compile(model, backend)
                with torch.inference_mode():
                    out = self._first(lambda: fn(x), self.dev, cell)
                    result = (logits_of(out).float().clone(),)  # CUDA-graph replays may overwrite outputs
                    cell.times_s = self._timed(lambda: fn(x), self.dev)
                return result

            got = self._run_cell(row, backend, body, reference, self.dev)
            if backend == "eager":
                reference = got

    # -- sections
    def _rows(self, section: str, names: Sequence[str], configs: Sequence[tuple[str, int | None, Any]],
              run: Callable[[Model, nn.Module, Row, int], None]) -> list[Row]:
        """For each picked model build it once, then a row per ``(dtype, batch or None: training's, device)``."""
        rows: list[Row] = []
        for pick in pick_models(names, self.quick, self.only):
            m = pick.model
            if m is None:
                rows.append(Row(section, pick.name, pick.title, "", "", "", 0, "", skipped=pick.skipped))
                continue
            real = m.library != "torch"
            size, train_batch = m.sizes(self.quick and real)
            new = [Row(section, m.name, pick.title, m.library, str(dev), dtype, batch or train_batch,
                       m.input_text(size), pick.stands_for) for dtype, batch, dev in configs]
            rows += new
            try:
                with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
                    torch.manual_seed(0)  # the same weights in every run
                    warnings.simplefilter("ignore")
                    model = m.build(self.quick and real)
            except Exception as e:
                for r in new:
                    r.skipped = f"error building it: {_error(e)}"
                continue
            for r in new:
                run(m, model, r, size)
            del model
            gc.collect()
            if self.checkpoint is not None:  # what is measured survives a run stopped before its end
                self.checkpoint(rows)
        return rows

    def training(self, dtypes: Sequence[str]) -> list[Row]:
        def run(m: Model, model: nn.Module, row: Row, size: int) -> None:
            self.training_row(m, without_dropout(model).to(self.dev.torch), row, self.backends, self.dev, size)
        return self._rows("training", TRAINING, [(d, None, self.dev) for d in dtypes], run)

    def cpu_gpu(self, devices: Sequence[Any]) -> list[Row]:
        """The training models in float32 at a small batch on each of ``devices``, eager and opgraph."""
        def run(m: Model, model: nn.Module, row: Row, size: int) -> None:
            dev = next(d for d in devices if str(d) == row.device)
            self.training_row(m, without_dropout(model), row, [b for b in self.backends if b != "inductor"], dev, size)
        return self._rows("cpu-gpu", TRAINING, [("float32", CPU_GPU_BATCH, d) for d in devices], run)

    def inference(self, batches: Sequence[int]) -> list[Row]:
        def run(m: Model, model: nn.Module, row: Row, size: int) -> None:
            self.inference_row(m, model.to(self.dev.torch).eval(), row, size)
        return self._rows("inference", INFERENCE, [("float32", b, self.dev) for b in batches], run)


# ---- reporting ---------------------------------------------------------------------------------
def _value_text(row: Row, cell: Cell | None, per_second: bool, notes: list[str], speedup: float | None) -> str:
    """samples/s (or ms) with ``speedup`` in parentheses; ``error [n]`` or a ``! [n]`` mismatch flag, explained
    in footnote n (appended to ``notes``)."""
    def note(text: str) -> str:
        notes.append(f"[{len(notes) + 1}] {row.title} {row.dtype} batch {row.batch} on {row.device}, "
                     f"{cell.backend if cell else ''}: {text}")
        return f"[{len(notes)}]"

    if cell is not None and cell.error is not None:
        return "error " + note(cell.error)
    med = cell.median_s if cell is not None else None
    if cell is None or med is None:
        return "-"
    text = (f"{row.batch / med:.1f}" if per_second else f"{med * 1e3:.2f}") + (f" ({speedup:.2f}x)" if speedup else "")
    if cell.op_by_op:  # the timing is of launches one by one, not of replays: say why
        text += " ~ " + note(f"{len(cell.op_by_op)} graph(s) ran op by op: " + "; ".join(cell.op_by_op))
    err, eager_err = cell.exact_err, row.eager_exact_err
    exact = "" if err is None or eager_err is None else f"; from float64 {err:.3g}, eager {eager_err:.3g}"
    as_right = err is not None and eager_err is not None and math.isfinite(err) and err <= EXACT_FACTOR * eager_err
    if cell.matches is False and as_right:
        text += " = " + note(f"differs from eager by {cell.rel_err:.3g} (> {cell.tolerance:g}) but is as close to "
                             f"eager in float64 as eager is{exact}")
    elif cell.matches is False:
        text += " ! " + note(f"differs from eager: relative error {cell.rel_err:.3g} > {cell.tolerance:g}{exact}")
    elif cell.matches and ROUNDING_FACTOR * row.rounding > MAX_TOLERANCE:
        text += " ? " + note(f"matches within {cell.tolerance:g}, but rounding alone moves eager's own result by "
                             f"{row.rounding:.3g}: a weak check{exact}")
    return text


def results_table(rows: Sequence[Row], backends: Sequence[str], per_second: bool, vs_cpu: bool = False) -> str:
    """A section's table: the backends' samples/s (or ms), in parentheses the speed-up vs eager (``vs_cpu``: vs
    eager on the CPU), footnotes for errors and mismatches, and how many ATen ops opgraph ran as themselves."""
    notes: list[str] = []
    multi_device = len({r.device for r in rows if not r.skipped}) > 1
    headers = ["model", *(["device"] if multi_device else []), "dtype", "batch", "input", *backends]
    body = []
    for r in rows:
        lead = [r.title, *([r.device or "-"] if multi_device else [])]
        if r.skipped:
            body.append([*lead, "-", "-", "-", r.skipped, *(["-"] * (len(backends) - 1))])
            continue
        base = r.cell("eager")
        if vs_cpu:
            base = next((x.cell("eager") for x in rows if x.model == r.model and x.device == "cpu"), None)
        values = []
        for b in backends:
            c = r.cell(b)
            t, t0 = (c.median_s if c is not None else None), (base.median_s if base is not None else None)
            values.append(_value_text(r, c, per_second, notes, t0 / t if t and t0 and c is not base else None))
        body.append([*lead, r.dtype, str(r.batch), r.input, *values])
    align = "<" * (len(headers) - len(backends) - 2) + ">>" + ">" * len(backends)
    cells = [c for r in rows for c in r.cells if c.backend == "opgraph" and c.aten_ops]
    if cells:
        notes.append(f"opgraph: {sum(c.fallback_ops or 0 for c in cells)} of {sum(c.aten_ops or 0 for c in cells)} "
                     "ATen ops in its graphs ran as themselves (no converter yet); og.torch.explain lists them")
    return "\n".join([format_table(headers, body, align=align), *notes])


def compile_rows(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The first-call seconds of every measured row, per backend."""
    return [{"model": r.model, "title": r.title, "section": r.section, "device": r.device,
             "workload": f"train {r.dtype} batch {r.batch}" if r.section != "inference" else f"infer batch {r.batch}",
             "first_call_s": {c.backend: (None if c.error else c.first_call_s) for c in r.cells},
             "errors": {c.backend: c.error for c in r.cells if c.error}} for r in rows if not r.skipped]


def compile_table(entries: Sequence[dict[str, Any]], backends: Sequence[str]) -> str:
    body = []
    for e in entries:
        times = {b: e["first_call_s"].get(b) for b in backends}
        values = ["error" if b in e["errors"] else "-" if t is None else f"{t:.3f}" for b, t in times.items()]
        body.append([e["title"], f"{e['workload']} on {e['device']}", *values])
    headers = ["model", "workload", *("eager (no compiling)" if b == "eager" else b for b in backends)]
    return format_table(headers, body, align="<<" + ">" * len(backends))


def plot(rows: Sequence[Row], compiles: Sequence[dict[str, Any]], backends: Sequence[str], path: str,
         dev: Any) -> None:
    """A bar chart of the speed-ups vs eager (or, with no timed rows, of the first-call seconds)."""
    from ._plot import BLUE, ORANGE, Bars, bar_chart, write_png

    colors = {"eager": (150, 150, 150), "inductor": BLUE, "opgraph": ORANGE}
    timed = [r for r in rows if r.section in ("training", "inference") and (e := r.cell("eager")) and e.median_s]
    if timed:
        cats = [f"{r.title.split(' (for')[0]} {'train ' + _short(r.dtype) if r.section == 'training' else 'infer'} "
                f"b{r.batch}" for r in timed]
        bars = [Bars(b, [_nan(r.speedup(b)) for r in timed], colors[b]) for b in backends if b != "eager"]
        img = bar_chart(cats, bars or [Bars("eager", [1.0] * len(timed), colors["eager"])], width=900,
                        title=f"speed-up vs eager PyTorch on {dev}", value_label="time of eager / time of backend",
                        reference=1.0, reference_label="eager = 1", value_format="{:.2f}x")
    else:
        cats = [f"{e['title'].split(' (for')[0]} {e['workload']}" for e in compiles] or ["no results"]
        bars = [Bars(b, [_nan(e["first_call_s"].get(b)) for e in compiles] or [math.nan], colors[b]) for b in backends]
        img = bar_chart(cats, bars, width=900, title=f"first call on {dev}", value_label="seconds",
                        value_format="{:.2f}s")
    write_png(path, img)


def _short(dtype: str) -> str:
    return {"float32": "fp32", "bfloat16": "bf16"}.get(dtype, dtype)


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return [_jsonable(x) for x in v] if isinstance(v, (list, tuple)) else v


# ---- the command -------------------------------------------------------------------------------
def environment(dev: Any) -> dict[str, Any]:
    import opgraph as og

    from .info import cpu_name

    libs = {lib: None if library_missing(lib) else str(getattr(importlib.import_module(lib), "__version__", "?"))
            for lib in ("torchvision", "timm", "transformers")}
    name = torch.cuda.get_device_name(dev.torch) if dev.is_cuda else cpu_name() if dev.kind == "cpu" else dev.kind
    return {"opgraph": og.__version__, "torch": torch.__version__, "python": platform.python_version(),
            "device": str(dev), "device_name": name, "cpu": cpu_name(), "cpu_threads": torch.get_num_threads(),
            "libraries": libs, "missing": {lib: library_missing(lib) for lib, v in libs.items() if v is None}}


def run(args: argparse.Namespace) -> int:
    import opgraph as og

    dev = og.device(args.device)
    for path in (args.json, args.plot):  # fail now rather than after the measurements
        if path:
            try:
                open(path, "ab").close()
            except OSError as e:
                raise og.OpgraphError(f"cannot write {path}: {e.strerror}") from None
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    bench = Bench(args, dev, Progress(enabled=not args.quiet))
    env = environment(dev)
    libs = ", ".join(env["missing"].get(k) or f"{k} {v}" for k, v in env["libraries"].items())
    print(f"opgraph bench on {dev} ({env['device_name']}, {env['cpu_threads']} CPU threads); "
          f"torch {env['torch']}, opgraph {env['opgraph']}; {libs}")
    print(f"{'quick sizes; ' if args.quick else ''}{bench.warmup} warm-up and the median of {bench.iters} timed "
          f"runs per cell (at most {args.max_seconds:g} s), the device synchronised around each")
    sections, backends = args.only, bench.backends
    results: dict[str, list[Row]] = {"training": [], "cpu-gpu": [], "inference": []}

    def write_json(current: Sequence[Row] = (), compiles: list[dict[str, Any]] | None = None) -> None:
        rows = {k: list(rs) for k, rs in results.items()}
        for r in current:
            if not any(r is kept for kept in rows[r.section]):
                rows[r.section].append(r)
        report = {"environment": env, "argv": {k: v for k, v in vars(args).items() if k != "run"},
                  "sections": sections, "backends": backends, "iters": bench.iters, "warmup": bench.warmup,
                  "complete": compiles is not None,
                  **{k.replace("-", "_"): [row_json(r) for r in rs] for k, rs in rows.items()},
                  "compile": compiles or []}
        partial = f"{args.json}.partial"
        with open(partial, "w") as f:
            json.dump(_jsonable(report), f, indent=2)
        os.replace(partial, args.json)  # a reader never sees half a file

    if args.json:
        bench.checkpoint = write_json
    in_parentheses = "in parentheses the speed-up vs eager"
    if "training" in sections:
        results["training"] = bench.training(args.dtypes)
        _print_section(f"training throughput on {dev} (samples/s, higher is better; {in_parentheses})",
                       results_table(results["training"], backends, True))
    if "cpu-gpu" in sections and dev.kind == "cpu":
        _print_section("CPU vs GPU", "skipped: no GPU here (the comparison needs one)")
    elif "cpu-gpu" in sections:
        results["cpu-gpu"] = bench.cpu_gpu([og.device("cpu"), dev])
        _print_section(f"training throughput, CPU vs {dev}, float32 (samples/s; {in_parentheses} on the CPU)",
                       results_table(results["cpu-gpu"], [b for b in backends if b != "inductor"], True, True))
    if "inference" in sections:
        results["inference"] = bench.inference(args.batches)
        _print_section(f"inference latency on {dev} (ms, lower is better; {in_parentheses})",
                       results_table(results["inference"], backends, False))
    measured = [r for rs in results.values() for r in rs]
    if "compile" in sections and not results["training"] and not results["inference"]:
        bench.first_call_only = True  # the compile section alone: first calls of the training step and inference
        measured += bench.training(args.dtypes[:1]) + bench.inference(args.batches[:1])
    compiles = compile_rows(measured)
    if "compile" in sections:
        cache = ("empty caches: Inductor's, and Triton's without tuning records for opgraph" if args.cold_cache
                 else "on-disk caches and opgraph's tuning records as they were")
        _print_section(f"first call on {dev} (seconds until the first training step or inference returns, "
                       f"compiling included; {cache})", compile_table(compiles, backends))
    if args.json:
        write_json(compiles=compiles if "compile" in sections else [])
        print(f"\nresults written to {args.json}")
    if args.plot:
        plot(measured, compiles, backends, args.plot, dev)
        print(f"plot saved to {args.plot}")
    return 0


def _print_section(title: str, body: str) -> None:
    print(f"\n{title}:\n{body}", flush=True)
