"""Index arithmetic for generated kernels, and the index rule of every injective op.

A kernel computes a value *at an index*: one Triton expression per dimension (source text). Sizes are
source text too: a literal for a static dim, a kernel argument for a dynamic one, so a kernel does not
depend on the sizes it runs at. ``INDEX_RULES[op](op, index, sizes)`` maps the index of an injective op's
output to the index of its data input (the op moves elements, it computes nothing), so a region of
reshapes, transposes, broadcasts and slices costs no memory traffic of its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from ...ir.graph import Operation, Tensor
from ...ir.opdef import OpDef
from ...ops import gradient_support as gs
from ...ops import reshape_dims as rd
from ...ops import resize as rs
from ...ops import shape as sh
from ...ops import slicing as sl
from .expr import NotExpressible

Index = tuple[str, ...]
Sizes = Callable[[Tensor, int], str]  # (value, dim) -> its size as source text
_ATOM = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$|^-?\d+$")


def _wrap(e: str) -> str:
    return e if _ATOM.match(e) or (e.startswith("(") and e.endswith(")") and _balanced(e[1:-1])) else f"({e})"


def _balanced(e: str) -> bool:
    depth = 0
    for c in e:
        depth += (c == "(") - (c == ")")
        if depth < 0:
            return False
    return depth == 0


def is_int(e: str) -> bool:
    return bool(re.fullmatch(r"-?\d+", e))


def add(a: str, b: str) -> str:
    if is_int(a) and is_int(b):
        return str(int(a) + int(b))
    if a == "0":
        return b
    if b == "0":
        return a
    return f"{a} + {b}"


def mul(a: str, b: str) -> str:
    if is_int(a) and is_int(b):
        return str(int(a) * int(b))
    if a == "0" or b == "0":
        return "0"
    if a == "1":
        return b
    if b == "1":
        return a
    return f"{_wrap(a)} * {_wrap(b)}"


def floordiv(a: str, b: str) -> str:
    if b == "1" or a == "0":
        return a
    if is_int(a) and is_int(b):
        return str(int(a) // int(b))
    return f"{_wrap(a)} // {_wrap(b)}"


def mod(a: str, b: str) -> str:
    if b == "1" or a == "0":
        return "0"
    if is_int(a) and is_int(b):
        return str(int(a) % int(b))
    return f"{_wrap(a)} % {_wrap(b)}"


def product(sizes: Sequence[str]) -> str:
    out = "1"
    for s in sizes:
        out = mul(out, s)
    return out


def linearize(index: Sequence[str], sizes: Sequence[str]) -> str:
    """The row-major flat position of ``index`` in a tensor of ``sizes``."""
    flat = "0"
    for i, s in zip(index, sizes, strict=True):
        flat = add(mul(flat, s), i)
    return flat


def delinearize(flat: str, sizes: Sequence[str], bounded: bool = True) -> Index:
    """The per-dim index of row-major position ``flat``; ``bounded``: flat < the product (no outer mod)."""
    out = []
    for k, s in enumerate(sizes):
        e = floordiv(flat, product(sizes[k + 1:]))
        out.append(e if (k == 0 and bounded) else mod(e, s))
    return tuple(out)


def broadcast_index(index: Index, out_sizes: Sequence[str], in_sizes: Sequence[str], dynamic_ones: bool = True
                    ) -> Index:
    """The index of an input broadcast (right-aligned, NumPy rules) to an output of ``out_sizes``. A dynamic input
    dim may be 1 at run time while the output's is not (opgraph's broadcasting allows it), so its index is 0
    then: ``tl.where(size == 1, 0, i)`` (``dynamic_ones=False``: the input's dims are known to be the output's,
    as a reduction's kept dims are its domain's)."""
    lead = len(out_sizes) - len(in_sizes)

    def one(k: int, s: str) -> str:
        i = index[lead + k]
        if s == "1":
            return "0"
        if not dynamic_ones or is_int(s) or s == out_sizes[lead + k] or i == "0":
            return i
        return f"tl.where({s} == 1, 0, {i})"

    return tuple(one(k, s) for k, s in enumerate(in_sizes))


# ---- reshape: dims grouped into runs of equal element count, so most reshapes need no div/mod ----------
def _groups(a: Sequence[int], b: Sequence[int]) -> list[tuple[int, int, int, int]] | None:
    """Runs [ia, ja) of ``a`` and [ib, jb) of ``b`` with equal products, in order (size-1 dims are runs
    of their own where possible); None when the counts differ."""
    runs = []
    i = j = 0
    while i < len(a) or j < len(b):
        if i < len(a) and j < len(b) and a[i] == b[j]:
            runs.append((i, i + 1, j, j + 1))
            i, j = i + 1, j + 1
            continue
        if i < len(a) and a[i] == 1:
            runs.append((i, i + 1, j, j))
            i += 1
            continue
        if j < len(b) and b[j] == 1:
            runs.append((i, i, j, j + 1))
            j += 1
            continue
        i0, j0 = i, j
        pa, pb = (a[i] if i < len(a) else 1), (b[j] if j < len(b) else 1)
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                if i >= len(a):
                    return None
                pa, i = pa * a[i], i + 1
            else:
                if j >= len(b):
                    return None
                pb, j = pb * b[j], j + 1
        runs.append((i0, i, j0, j))
    return runs


def reshape_index(index: Index, out: Tensor, inp: Tensor, sizes: Sizes) -> Index:
    out_sizes = [sizes(out, k) for k in range(out.rank)]
    in_sizes = [sizes(inp, k) for k in range(inp.rank)]
    if out.type.is_static and inp.type.is_static:
        runs = _groups([int(s) for s in in_sizes], [int(s) for s in out_sizes])
        if runs is not None:
            result: list[str] = []
            for ia, ja, ib, jb in runs:
                flat = linearize(index[ib:jb], out_sizes[ib:jb])
                result.extend(delinearize(flat, in_sizes[ia:ja]))
            return tuple(result)
    return delinearize(linearize(index, out_sizes), in_sizes)


# ---- the rules -----------------------------------------------------------------------------------------
IndexRule = Callable[[Operation, Index, Sizes], Index]


def _reshape(op: Operation, index: Index, sizes: Sizes) -> Index:
    return reshape_index(index, op.outputs[0], op.inputs[0], sizes)


def _transpose(op: Operation, index: Index, sizes: Sizes) -> Index:
    perm = op.attrs.perm
    out = [""] * len(perm)
    for i, p in enumerate(perm):
        out[p] = index[i]
    return tuple(out)


def _expand_dims(op: Operation, index: Index, sizes: Sizes) -> Index:
    return tuple(e for i, e in enumerate(index) if i not in op.attrs.axes)


def _squeeze(op: Operation, index: Index, sizes: Sizes) -> Index:
    it = iter(index)
    return tuple("0" if i in op.attrs.axes else next(it) for i in range(op.inputs[0].rank))


def _broadcast(op: Operation, index: Index, sizes: Sizes) -> Index:
    x, y = op.inputs[0], op.outputs[0]
    return broadcast_index(index, [sizes(y, k) for k in range(y.rank)], [sizes(x, k) for k in range(x.rank)])


def _reverse(op: Operation, index: Index, sizes: Sizes) -> Index:
    x = op.inputs[0]
    return tuple(f"{_wrap(sizes(x, k))} - 1 - {_wrap(e)}" if k in op.attrs.axes else e for k, e in enumerate(index))


def _slice(op: Operation, index: Index, sizes: Sizes) -> Index:
    x = op.inputs[0]
    if not x.type.is_static:
        raise NotExpressible("a slice of a dynamically shaped value is not generated")
    out: list[str] = []
    it = iter(index)
    for k, d in enumerate(x.shape):
        ax = sl._resolve_axis(int(d or 0), op.attrs, k)
        if ax.squeeze:
            out.append(str(ax.begin))
        else:
            out.append(add(str(ax.begin), mul(next(it), str(ax.stride))))
    return tuple(out)


def _resize_nearest(op: Operation, index: Index, sizes: Sizes) -> Index:
    """Upsampling by a whole factor ``k`` per spatial dim, where the op's rounding picks source ``d // k`` for
    output ``d`` (PyTorch's "nearest", MPSGraph's default half-pixel rounding): anything else is not generated."""
    a = op.attrs
    x, y = op.inputs[0], op.outputs[0]
    out = list(index)
    for ax in rs.spatial_axes(a.data_layout):
        n_in, n_out = x.shape[ax], y.shape[ax]
        if n_in is None or n_out is None or n_out % n_in:
            raise NotExpressible(f"resize_nearest of %{x.name} {x.shape} to {y.shape} is not a whole upsampling")
        k = n_out // n_in
        picked = rs.nearest_indices(n_in, n_out, a.center_result, a.align_corners, a.nearest_rounding_mode)
        if picked.tolist() != [d // k for d in range(n_out)]:
            raise NotExpressible(f"resize_nearest of %{x.name}: its rounding does not pick d // {k}")
        out[ax] = floordiv(index[ax], str(k))
    return tuple(out)


INDEX_RULES: dict[OpDef, IndexRule] = {
    sh.RESHAPE: _reshape, sh.RESHAPE_LIKE: _reshape, sh.FLATTEN2D: _reshape, rd.RESHAPE_DIMS: _reshape,
    sh.TRANSPOSE: _transpose,
    sh.EXPAND_DIMS: _expand_dims, sh.SQUEEZE: _squeeze, sh.BROADCAST_TO: _broadcast, gs.BROADCAST_LIKE: _broadcast,
    sl.REVERSE: _reverse, sl.SLICE: _slice, rs.RESIZE_NEAREST: _resize_nearest,
}


# injective ops that keep the row-major order of elements: an element's flat position is the same on both sides
FLAT_PRESERVING = frozenset({sh.RESHAPE, sh.RESHAPE_LIKE, sh.FLATTEN2D, rd.RESHAPE_DIMS, sh.EXPAND_DIMS, sh.SQUEEZE})


def static_numel(shape: Sequence[Any]) -> int | None:
    return None if any(d is None for d in shape) else math.prod(shape)
