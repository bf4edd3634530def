"""Products padded to aligned sizes: a GEMM whose operands or result have a leading dimension that is not a
multiple of 16 bytes is computed on zero-padded operands and its result sliced back.

cuBLAS reads and writes a matrix with 16-byte vector accesses only where its leading dimension allows them; else
it falls back to kernels that move 2 or 4 bytes at a time. A language model's vocabulary (BERT's 30522, GPT-2's
50257) makes all three GEMMs of its output layer such products: on an H200, BERT-base's bfloat16 training step
spent 4.8 ms in them (``cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_*_align2``) where Inductor, which
pads them (its ``pad_mm``), spent about 2 ms (RESULTS.md, sixteenth session).

Which sizes matter follows the layouts (row-major tensors; an operand made by a transpose of its last two axes
is read as the transposed view it is): the result's rows are N long; ``x`` is read along K, or along M where it
is a transpose; ``w`` along N, or along K where it is a transpose. A size that needs padding is padded with
zeros on both operands that have it (zeros along K add nothing to the sums); a padded M or N is sliced off the
result, a view that the regions reading it read in place. An operand made by a transpose is padded before the
transpose, so a gradient that two products read, once transposed (a weight gradient's ``transpose(g) @ x`` and
the input gradient's ``g @ w``), is padded once.

``CompilationDescriptor(pad_matmuls=None)`` (the default) pads on CUDA the products that are large enough
(``MIN_FLOPS``) and that a probe times faster padded, copies included (``padded_gemm_is_faster``, once per shape
and layout at compile time); ``True`` pads every eligible product on any device (tests, A/B runs); ``False``
none. Eligible: float16, bfloat16 or float32 ``matmul`` or ``matmul_epilogue`` with a 2-D ``w`` (``x`` of
rank >= 2; a transposed ``x`` only at rank 2) and static shapes.

>>> import opgraph as og
>>> from opgraph.passes.program import Program
>>> g = og.Graph()
>>> a, b = g.placeholder((8, 64), og.bfloat16), g.placeholder((64, 30522), og.bfloat16)
>>> y = g.matmul(a, b, name="y")
>>> out = pad_matmuls(Program(g, [a, b], [y], []), decide=lambda *_: True)
>>> [(o.op.name, o.outputs[0].shape) for o in out.graph.ops if o.op.name != "placeholder"]
[('pad', (64, 30528)), ('matmul', (8, 30528)), ('slice', (8, 30522))]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.device_timing import device_ms, device_probe
from ..core.dtype import bfloat16, float16, float32
from ..core.shape import numel
from ..ir.graph import GraphCore, Operation, Tensor
from ..ops.epilogue import MATMUL_EPILOGUE
from ..ops.linalg import MATMUL
from ..ops.shape import TRANSPOSE, TransposeAttrs
from ..ops.slicing import PAD, SLICE, PadAttrs, PaddingMode, SliceAttrs
from .builder import fresh_name
from .dce import dead_code_elimination
from .program import Program, rewrite
from .transpose_product import swaps_last_two

ALIGN_BYTES = 16  # cuBLAS's widest vector access
MIN_FLOPS = 1 << 33  # smaller products keep their sizes: the pad kernels' launches would outweigh the gain
PROBE_BYTES = 1 << 33  # operands, copies and results of a timed probe; larger products are not padded


@dataclass(frozen=True)
class Padding:
    """Zeros added at the end of M, K and N of one product, and whether ``x`` / ``w`` are transposes."""

    m: int
    k: int
    n: int
    x_transposed: bool
    w_transposed: bool


Decide = Callable[[int, int, int, torch.dtype, Padding], bool]


def padding_for(op: Operation) -> tuple[int, int, int, Padding] | None:
    """(M, K, N, the padding) of an eligible product whose layouts leave a leading dimension misaligned; None
    otherwise (the module docstring says which)."""
    if op.op not in (MATMUL, MATMUL_EPILOGUE):
        return None
    x, w = op.inputs[0], op.inputs[1]
    if x.dtype not in (float16, bfloat16, float32) or x.rank < 2 or w.rank != 2:
        return None
    m, k, n = numel(x.shape[:-1]), x.shape[-1], w.shape[1]
    if m is None or k is None or n is None or w.shape[0] != k:
        return None
    align = int(ALIGN_BYTES // x.dtype.itemsize)
    x_t, w_t = x.rank == 2 and swaps_last_two(x.op), swaps_last_two(w.op)

    def pad(size: int, read_along: bool) -> int:
        return -size % align if read_along else 0

    p = Padding(pad(m, x_t), pad(k, not x_t or w_t), pad(n, True), x_t, w_t)
    return (m, k, n, p) if p.m or p.k or p.n else None


@device_probe
def padded_gemm_is_faster(m: int, k: int, n: int, dtype: torch.dtype, p: Padding, device: int = 0,
                          tf32: bool = False) -> bool:
    """Whether ``(m, k) @ (k, n)`` in the layouts ``p`` names takes at least 10% less time on CUDA device ``device``
    (with TF32 products allowed or not: float32 kernels differ) with its operands zero-padded by ``p`` (each pad
    copy counted) than as it is; timed once per question, as the kernel tuner times (``core.device_timing``). Not
    timed while a CUDA graph is being captured: no padding then, nor where the probe fails (its tensors do not fit
    in the device's free memory, or cuBLAS cannot allocate its workspace)."""
    try:
        with torch.cuda.device(device):
            faster = _time_padding(m, k, n, dtype, p, tf32)
    except (torch.cuda.OutOfMemoryError, RuntimeError):
        faster = None
    if faster is None:  # outside the handler, so that the failed probe's tensors are freed first
        torch.cuda.empty_cache()
    return bool(faster)


def _time_padding(m: int, k: int, n: int, dtype: torch.dtype, p: Padding, tf32: bool) -> bool:
    gen = torch.Generator(device="cuda").manual_seed(0)

    def matrix(rows: int, cols: int, transposed: bool) -> torch.Tensor:
        shape = (cols, rows) if transposed else (rows, cols)
        t = torch.randn(shape, device="cuda", dtype=dtype, generator=gen)
        return t.t() if transposed else t

    def padded(t: torch.Tensor, rows: int, cols: int, transposed: bool) -> torch.Tensor:
        if not (rows or cols):  # as the pass: an operand without padding is read as it is, not copied
            return t
        if transposed:  # padded before the transpose, as the pass does
            return F.pad(t.t(), (0, rows, 0, cols)).t()
        return F.pad(t, (0, cols, 0, rows))

    x, w = matrix(m, k, p.x_transposed), matrix(k, n, p.w_transposed)
    plain = lambda: torch.mm(x, w)  # noqa: E731
    pads = lambda: torch.mm(padded(x, p.m, p.k, p.x_transposed), padded(w, p.k, p.n, p.w_transposed))  # noqa: E731
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        plain(), pads()  # cuBLAS picks and loads its kernels
        times = {f: sorted(device_ms(f) for _ in range(3))[1] for f in (plain, pads)}  # the median of three
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return times[pads] < 0.9 * times[plain]


def _probe_fits(m: int, k: int, n: int, itemsize: int) -> bool:
    return 2 * (m * k + k * n + m * n) * itemsize <= PROBE_BYTES


def timed_decision(device_kind: str) -> Decide:
    """The default decision (``pad_matmuls=None``): large products on CUDA that the probe times faster padded."""
    def decide(m: int, k: int, n: int, dtype: torch.dtype, p: Padding) -> bool:
        if device_kind != "cuda" or 2 * m * k * n < MIN_FLOPS or not _probe_fits(m, k, n, dtype.itemsize):
            return False
        tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
        return padded_gemm_is_faster(m, k, n, dtype, p, torch.cuda.current_device(), tf32)

    return decide


def pad_matmuls(program: Program, device_kind: str = "cpu", decide: Decide | None = None) -> Program:
    """Every product of ``program`` that ``decide`` (default ``timed_decision(device_kind)``) pads, padded."""
    decide = decide or timed_decision(device_kind)
    chosen: dict[int, Padding] = {}
    for op in program.graph.ops:
        found = padding_for(op)
        if found is not None and decide(*found[:3], op.inputs[0].dtype.torch_dtype, found[3]):
            chosen[id(op)] = found[3]
    if not chosen:
        return program
    taken = {o.name for o in program.graph.ops}
    made: dict[tuple[int, tuple[int, ...]], Tensor] = {}  # (id(tensor), padding after each axis) -> padded

    def padded(g: GraphCore, t: Tensor, after: tuple[int, ...], base: str) -> Tensor:
        if not any(after):
            return t
        key = (id(t), after)
        if key not in made:
            if t.rank == 2 and swaps_last_two(t.op):  # pad the transpose's source: the pad is shared, a view kept
                source = padded(g, t.op.inputs[0], after[::-1], base)
                name = fresh_name(f"{base}.transpose", taken, g)
                made[key] = g._add_op(TRANSPOSE, [source], TransposeAttrs((1, 0)), name).outputs[0]
            else:
                attrs = PadAttrs(PaddingMode.ZERO, (0,) * t.rank, after)
                made[key] = g._add_op(PAD, [t], attrs, fresh_name(f"{base}.pad", taken, g)).outputs[0]
        return made[key]

    def replace(op: Operation, ins: list[Tensor], g: GraphCore) -> list[Tensor] | None:
        p = chosen.get(id(op))
        if p is None:
            return None
        x, w, *bias = ins
        x_after = (0,) * (x.rank - 2) + (p.m, p.k)
        ins = [padded(g, x, x_after, op.name), padded(g, w, (p.k, p.n), op.name)]
        ins += [padded(g, b, (p.n,), op.name) for b in bias]
        if not (p.m or p.n):  # the product has its own shape: it keeps the op's name
            return list(g._add_op(op.op, ins, op.attrs, op.name).outputs)
        product = g._add_op(op.op, ins, op.attrs, fresh_name(f"{op.name}.padded", taken, g)).outputs[0]
        shape = op.outputs[0].shape
        ends = tuple(int(d) for d in shape)  # type: ignore[arg-type]
        attrs = SliceAttrs((0,) * len(ends), ends, (1,) * len(ends))
        return list(g._add_op(SLICE, [product], attrs, op.name).outputs)

    return dead_code_elimination(rewrite(program, replace))


__all__ = ["ALIGN_BYTES", "MIN_FLOPS", "Padding", "pad_matmuls", "padded_gemm_is_faster", "padding_for",
           "timed_decision"]
