"""Ops: matmul, hamming_distance, inverse."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.dtype import DType, as_dtype, int32, promote_types
from ..core.errors import DTypeError, ShapeError
from ..core.shape import Shape, broadcast_shapes, format_shape
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ._rules import expect_arity, expect_dtype, same_dtype
from .elementwise import CAST, CastAttrs
from .registry import FusionKind, LowerContext, OpDef, attrs, defvjp

OPAQUE = FusionKind.OPAQUE


def _inner_match(k1: int | None, k2: int | None, a: Shape, b: Shape) -> None:
    if k1 is not None and k2 is not None and k1 != k2:
        raise ShapeError(f"inner dimensions {k1} and {k2} do not match "
                         f"(shapes {format_shape(a)} and {format_shape(b)})")


# ---- matmul --------------------------------------------------------------------------------------
def _matmul_rule(a: None, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    dt = same_dtype(ins)
    for t in ins:
        expect_dtype(t, numeric=True)
    x, y = ins
    if x.rank == 0 or y.rank == 0:
        raise ShapeError("operands must have rank >= 1 (use multiply for scalars)")
    xs = x.shape if x.rank >= 2 else (1,) + x.shape  # a 1-D operand is a row (left) or a column (right)
    ys = y.shape if y.rank >= 2 else y.shape + (1,)
    _inner_match(xs[-1], ys[-2], x.shape, y.shape)
    batch = broadcast_shapes(xs[:-2], ys[:-2])
    rows = xs[-2:-1] if x.rank >= 2 else ()
    cols = ys[-1:] if y.rank >= 2 else ()
    return TensorType(batch + rows + cols, dt)


def _int_matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Exact integer matmul where the device's BLAS has none (CUDA): broadcast multiply and sum."""
    xv = x if x.dim() >= 2 else x.unsqueeze(0)
    yv = y if y.dim() >= 2 else y.unsqueeze(-1)
    out = (xv.unsqueeze(-1) * yv.unsqueeze(-3)).sum(-2, dtype=x.dtype)
    if x.dim() == 1:
        out = out.squeeze(-2)
    if y.dim() == 1:
        out = out.squeeze(-1)
    return out


def _matmul_lower(ctx: LowerContext) -> Callable[..., Any]:
    if ctx.in_types[0].dtype.is_integer and ctx.device.type != "cpu":
        return _int_matmul
    return torch.matmul


MATMUL = OpDef("matmul", infer=_matmul_rule, lower=_matmul_lower, fusion=OPAQUE,
               doc="matrix product with batch broadcasting; 1-D operands as in numpy.matmul")
Grads = tuple[Tensor | None, ...]


def swap_last(g: Any, t: Tensor) -> Tensor:
    """``t`` with its last two axes swapped (no conjugation: rules transpose, as the elementwise ones do)."""
    return g.transpose(t, [*range(t.rank - 2), t.rank - 1, t.rank - 2])


@defvjp(MATMUL)
def _matmul_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> Grads:
    x, y = op.inputs
    # 1-D operands as matrices: x a row, y a column; their axes put back into the cotangent
    x2 = g.expand_dims(x, 0) if x.rank == 1 else x
    y2 = g.expand_dims(y, 1) if y.rank == 1 else y
    c = ct[0]
    if y.rank == 1:
        c = g.expand_dims(c, c.rank)
    if x.rank == 1:
        c = g.expand_dims(c, c.rank - 1)
    dx = g.sum_to(g.matmul(c, swap_last(g, y2)), x2)  # sum_to undoes the batch broadcasting
    dy = g.sum_to(g.matmul(swap_last(g, x2), c), y2)
    return (g.squeeze(dx, 0) if x.rank == 1 else dx), (g.squeeze(dy, 1) if y.rank == 1 else dy)


# ---- hamming_distance ----------------------------------------------------------------------------
@attrs
class HammingDistanceAttrs:
    result_dtype: DType = int32


def _hamming_rule(a: HammingDistanceAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 2)
    same_dtype(ins)
    for t in ins:
        expect_dtype(t, integer=True)
    if not a.result_dtype.is_integer or a.result_dtype.packed:
        raise DTypeError(f"result_dtype must be an integer dtype, got {a.result_dtype.name}")
    p, s = ins
    if p.rank < 2 or s.rank < 2:
        raise ShapeError(f"expects tensors of rank >= 2 ([..., M, K] and [..., N, K]), got ranks {p.rank} and {s.rank}")
    _inner_match(p.shape[-1], s.shape[-1], p.shape, s.shape)
    return TensorType(broadcast_shapes(p.shape[:-2], s.shape[:-2]) + (p.shape[-2], s.shape[-2]), a.result_dtype)


_POPCOUNT = torch.tensor([bin(i).count("1") for i in range(256)], dtype=torch.int32)


def _hamming_lower(ctx: LowerContext) -> Callable[..., Any]:
    table = _POPCOUNT.to(ctx.device)
    out_dt = ctx.attrs.result_dtype.torch_dtype

    def hamming_distance(p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        diff = torch.bitwise_xor(p.unsqueeze(-2), s.unsqueeze(-3)).contiguous()  # [..., M, N, K]
        nbytes = diff.view(torch.uint8).int()  # [..., M, N, K * itemsize]
        return table[nbytes].sum(-1).to(out_dt)

    return hamming_distance


HAMMING_DISTANCE = OpDef("hamming_distance", infer=_hamming_rule, lower=_hamming_lower, attrs=HammingDistanceAttrs,
                         fusion=OPAQUE, differentiable=False,
                         doc="popcount(xor) summed over the last dim for every pair of rows: [..., M, K] x "
                             "[..., N, K] -> [..., M, N]")


# ---- inverse -------------------------------------------------------------------------------------
def _inverse_rule(a: None, ins: tuple[TensorType, ...]) -> TensorType:
    expect_arity(ins, 1)
    (x,) = ins
    expect_dtype(x, floating=True)
    if x.rank < 2:
        raise ShapeError(f"expects a tensor of rank >= 2 (a batch of square matrices), got rank {x.rank}")
    m, n = x.shape[-2:]
    if m is not None and n is not None and m != n:
        raise ShapeError(f"expects square matrices, got {m}x{n}")
    return x


def _inverse_lower(ctx: LowerContext) -> Callable[..., Any]:
    dt = ctx.in_types[0].dtype.torch_dtype
    if dt in (torch.float16, torch.bfloat16):  # no half-precision LU in PyTorch: solve in float32
        return lambda x: torch.linalg.inv(x.float()).to(dt)
    return torch.linalg.inv


INVERSE = OpDef("inverse", infer=_inverse_rule, lower=_inverse_lower, fusion=OPAQUE,
                doc="inverse of each square matrix; a singular matrix raises og.ExecutionError at run time")


@defvjp(INVERSE)
def _inverse_vjp(g: Any, op: Operation, ct: tuple[Tensor, ...]) -> Grads:
    inv_t = swap_last(g, op.outputs[0])  # d(A^-1) = -A^-1 dA A^-1, so the adjoint is -A^-T ct A^-T
    return (g.negative(g.matmul(g.matmul(inv_t, ct[0]), inv_t)),)


# ---- builder methods -----------------------------------------------------------------------------
class LinalgBuilders(GraphCore):
    """Graph methods for matmul, hamming_distance, inverse."""

    def _promoted_pair(self, a: Any, b: Any) -> tuple[Tensor, Tensor]:
        x, y = self._as_tensor(a), self._as_tensor(b)
        dt = promote_types(x.dtype, y.dtype)
        return tuple(t if t.dtype is dt else self._apply(CAST, [t], CastAttrs(dt)) for t in (x, y))  # type: ignore[return-value]

    def matmul(self, a: Any, b: Any, *, name: str | None = None) -> Tensor:
        """Matrix product with broadcast batch dims; 1-D operands as in ``numpy.matmul``; dtypes promote.

        >>> import opgraph as og
        >>> g = og.Graph(); a = g.constant([[1.0, 2.0], [3.0, 4.0]])
        >>> g.run({}, [g.matmul(a, g.constant([1.0, 1.0]))])[0].tolist()
        [3.0, 7.0]
        """
        x, y = self._promoted_pair(a, b)
        return self._apply(MATMUL, [x, y], None, name)

    def hamming_distance(self, primary: Tensor, secondary: Tensor, result_dtype: object = int32, *,
                         name: str | None = None) -> Tensor:
        """Bit differences between the packed integer rows of ``primary [..., M, K]`` and
        ``secondary [..., N, K]``: ``out[..., m, n] = sum_k popcount(primary[..., m, k] ^ secondary[..., n, k])``.

        MPSGraph allows uint32/uint16 results; opgraph takes any integer ``result_dtype`` (default int32).

        >>> import opgraph as og
        >>> g = og.Graph(); p = g.constant([[0b1011]]); s = g.constant([[0b0001], [0b1011]])
        >>> g.run({}, [g.hamming_distance(p, s)])[0].tolist()
        [[2, 0]]
        """
        x, y = self._as_tensor(primary), self._as_tensor(secondary)
        return self._apply(HAMMING_DISTANCE, [x, y], HammingDistanceAttrs(as_dtype(result_dtype)), name)

    def inverse(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Inverse of each square matrix in ``x [..., N, N]``; a singular matrix raises
        ``og.ExecutionError`` when the graph runs (MPSGraph leaves the result undefined)."""
        return self._apply(INVERSE, [self._as_tensor(x)], None, name)


__all__ = ["HAMMING_DISTANCE", "INVERSE", "MATMUL", "LinalgBuilders"]
