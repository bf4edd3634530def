"""The single PyTorch calls behind opgraph's CPU vendor ops and host-side shortcuts, timed one by one (median us of
``--iters`` calls after a warm-up, one thread): a masked select (``torch.where``, the spelling PyTorch's
decompositions give ReLU's and select's gradients) against ``threshold_backward``, a zero padding and a copy of the
same tensor, ``torch.broadcast_shapes`` against comparing three shapes (attention's batch shape), and GELU alone and
with the maximum opgraph's CPU lowering reads to mend PyTorch's NaN at +inf; then, on a
``--matrix`` (BERT's word-embedding table by default), an add of row-major operands against one read transposed, and
a broadcast zero cloned against a zero fill.

    python benchmarks/cpu_calls.py
    python benchmarks/cpu_calls.py --shape 8,16,32,32 --iters 500
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from opgraph.cli._table import format_table


def median_us(fn: Callable[[], Any], iters: int, warmup: int = 20) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def cases(shape: tuple[int, ...]) -> dict[str, Callable[[], Any]]:
    gen = torch.Generator().manual_seed(0)
    x, g = torch.randn(*shape, generator=gen), torch.randn(*shape, generator=gen)
    mask, zero = x <= 0, torch.zeros(())
    head = torch.randn(*shape[1:], generator=gen)
    size = torch.Size(shape[:2])
    return {
        "copy (clone)": lambda: g.clone(),
        "torch.where(x <= 0, 0, g)": lambda: torch.where(mask, zero, g),
        "threshold_backward(g, x, 0)": lambda: torch.ops.aten.threshold_backward(g, x, 0.0),
        "select's gradient as F.pad": lambda: F.pad(head.unsqueeze(0), (0, 0) * (len(shape) - 1) + (1, shape[0] - 2)),
        "torch.broadcast_shapes(3 shapes)": lambda: torch.broadcast_shapes(size, size, size),
        "3 shapes compared": lambda: size == size == size,
        "F.gelu(x)": lambda: F.gelu(x),
        "F.gelu(x) and x.amax().item() (opgraph's +inf check)": lambda: (F.gelu(x), x.amax().item()),
    }


def matrix_cases(rows: int, cols: int) -> dict[str, Callable[[], Any]]:
    """An add of two (rows, cols) matrices, row-major, and with one read through a transpose (a product computed
    in the other layout), and a zero fill of that size as the broadcast zero copied or filled."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(rows, cols, generator=gen), torch.randn(rows, cols, generator=gen)
    at = torch.randn(cols, rows, generator=gen).t()
    zero = torch.zeros(()).expand(rows, cols)
    return {
        f"add ({rows}, {cols}) row-major": lambda: a + b,
        f"add ({rows}, {cols}), one operand transposed": lambda: at + b,
        f"clone of a broadcast zero ({rows}, {cols})": lambda: zero.clone(),
        f"zeros ({rows}, {cols})": lambda: torch.zeros(rows, cols),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="8,16,32,32", help="comma-separated tensor shape")
    p.add_argument("--matrix", default="30522,128", help="rows,cols of the matrix cases (BERT's word embeddings)")
    p.add_argument("--iters", type=int, default=300, help="timed calls of each")
    p.add_argument("--threads", type=int, default=1, help="CPU threads for PyTorch")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    shape = tuple(int(d) for d in args.shape.split(","))
    if len(shape) < 2 or shape[0] < 2:
        p.error("--shape needs at least two dims and a first dim of at least 2")
    height, width = (int(d) for d in args.matrix.split(","))
    times = {name: median_us(fn, args.iters) for name, fn in cases(shape).items()}
    calls = max(10, args.iters // 30)
    matrix = {name: median_us(fn, calls, warmup=3) for name, fn in matrix_cases(height, width).items()}
    copy = times["copy (clone)"]
    rows = [[name, f"{us:.1f}", f"{us / copy:.2f}" if "shape" not in name else ""] for name, us in times.items()]
    print(f"tensor {shape} float32, {args.threads} thread(s), median of {args.iters} calls")
    print(format_table(["call", "us", "of a copy"], rows))
    first = next(iter(matrix.values()))
    print(f"\nmatrix cases, median of {calls} calls")
    print(format_table(["call", "us", "of the row-major add"],
                       [[name, f"{us:.1f}", f"{us / first:.2f}"] for name, us in matrix.items()]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
