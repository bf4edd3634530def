"""The table from ATen ops to opgraph ops.

A converter is registered for an ATen op (an ``OpOverload`` such as ``torch.ops.aten.add.Tensor``, or a whole
``OpOverloadPacket`` such as ``torch.ops.aten.add``) and is called with the node's arguments, tensors already
translated to ``og.Tensor`` (other values as they are: Python scalars, lists, dtypes ...)::

    @converts(torch.ops.aten.relu.default)
    def _relu(ctx, x):
        return ctx.g.relu(x)

It returns an ``og.Tensor`` (or a tuple of them, for an op with several outputs), or raises ``Unsupported``
with the reason when it cannot express this call: the node then runs as the ATen op itself inside the
executable (a *fallback*, counted and reported).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ...core.dtype import DType, from_torch
from ...core.types import TensorType
from ...graph import Graph

Converter = Callable[..., Any]
CONVERTERS: dict[Any, Converter] = {}


class Unsupported(Exception):
    """A converter cannot express this call (the node falls back to the ATen op)."""


@dataclass(frozen=True)
class SymSize:
    """A size PyTorch traced symbolically (``mark_dynamic``, ``dynamic=True``): known only when the graph runs.
    Converters see it in size lists; ``sizes_with_one_unknown`` turns a list with one of them into ``-1``."""

    expr: str
    position: int | None = None  # the FX input it is, when it is one (a graph may return it as is)
    sym: Any = field(default=None, compare=False)  # the sympy expression, for sizes_from_references


def _factors(size: Any, refs: dict[Any, tuple[Any, int]]) -> tuple[int, list[tuple[Any, int]]]:
    """A symbolic size as (integer factor, input dims whose product it is); Unsupported for anything else."""
    import sympy

    expr = getattr(size, "sym", None)
    if expr is None:
        raise Unsupported(f"size {size!r} has no expression")
    coeff, rest = sympy.sympify(expr).as_coeff_Mul()
    if not (coeff.is_Integer and int(coeff) > 0):
        raise Unsupported(f"size {expr} is not a positive multiple of input sizes")
    used = []
    for f in sympy.Mul.make_args(rest):
        base, power = f.as_base_exp()
        if base not in refs or not power.is_Integer or int(power) < 1:
            raise Unsupported(f"size {expr} is not a product of input sizes")
        used += [refs[base]] * int(power)
    return int(coeff), used


def sizes_with_one_unknown(sizes: Any) -> list[int]:
    """A size list for a reshape: its one symbolic entry (or ``-1``) becomes ``-1``; more than one unknown is
    ``Unsupported`` (opgraph's reshape infers one dim)."""
    out = [-1 if isinstance(d, SymSize) else d for d in sizes]
    if not all(isinstance(d, int) for d in out) or out.count(-1) > 1:
        raise Unsupported("a size list with more than one size known only at run time")
    return out


def converts(*targets: Any) -> Callable[[Converter], Converter]:
    """Register a converter for ATen ops (overloads or packets)."""

    def register(fn: Converter) -> Converter:
        for t in targets:
            CONVERTERS[t] = fn
        return fn

    return register


def lookup(target: Any) -> Converter | None:
    """The converter of an ATen overload (or of its packet)."""
    fn = CONVERTERS.get(target)
    if fn is None and isinstance(target, torch._ops.OpOverload):
        fn = CONVERTERS.get(target.overloadpacket)
    return fn


@dataclass
class ConvertContext:
    """What a converter sees besides its arguments: the graph being built, the node's recorded types, and where
    each run-time size symbol can be read (a dim of an input tensor)."""

    g: Graph
    out_types: list[TensorType | None] = field(default_factory=list)  # from the node's FakeTensor values
    size_refs: dict[Any, tuple[Any, int]] = field(default_factory=dict)  # sympy symbol -> (og.Tensor, axis)
    vendor_ops: bool = False  # where no kernels are generated: one vendor op may replace an elementwise spelling

    def reshape(self, x: Any, sizes: Sequence[Any]) -> Any:
        """``x`` reshaped to ATen ``sizes`` (ints and SymSizes): a plain reshape when at most one size is known
        only at run time, else ``reshape_dims`` reading each symbolic size from the input dims it is made of."""
        try:
            return self.g.reshape(x, sizes_with_one_unknown(sizes))
        except Unsupported:
            pass
        refs: list[Any] = []
        dims: list[Any] = []
        for d in sizes:
            if isinstance(d, int):
                dims.append(d)
                continue
            factor, used = _factors(d, self.size_refs)
            spec = []
            for tensor, axis in used:
                if not any(r is tensor for r in refs):
                    refs.append(tensor)
                spec.append((next(i for i, r in enumerate(refs) if r is tensor), axis))
            dims.append((factor, tuple(spec)))
        return self.g.reshape_dims(x, refs, dims)

    def scalar(self, size: SymSize, dtype: DType) -> Any:
        """A number PyTorch traced symbolically (a SymInt or SymFloat made of input sizes, such as batch norm's
        ``1 / (N * H * W)``) as a 0-d tensor of ``dtype``, computed at run time from the input dims it is made
        of: numbers, sizes, products, sums, integer powers and true division; ``Unsupported`` for anything else."""
        import sympy
        import torch.utils._sympy.functions as torch_sympy

        g = self.g
        divisions = tuple(getattr(torch_sympy, n) for n in ("FloatTrueDiv", "IntTrueDiv") if hasattr(torch_sympy, n))
        to_float = getattr(torch_sympy, "ToFloat", None)

        def value(e: Any) -> Any:
            if e.is_Number:
                if not (e.is_Integer or e.is_Rational or e.is_Float):
                    raise Unsupported(f"symbolic number {e}")
                return g.constant(float(e), dtype)
            if e.is_Symbol:
                if e not in self.size_refs:
                    raise Unsupported(f"size {e} is not a dim of an input")
                tensor, axis = self.size_refs[e]
                return g.cast(g.gather(g.shape_of(tensor), g.constant([axis])), dtype)
            if e.is_Mul or e.is_Add:
                parts = [value(a) for a in e.args]
                combine = g.multiply if e.is_Mul else g.add
                out = parts[0]
                for p in parts[1:]:
                    out = combine(out, p)
                return out
            if e.is_Pow and e.exp.is_Integer:
                base, n = value(e.base), int(e.exp)
                out = base
                for _ in range(abs(n) - 1):
                    out = g.multiply(out, base)
                return g.divide(g.constant(1.0, dtype), out) if n < 0 else out if n else g.constant(1.0, dtype)
            if isinstance(e, divisions) and len(e.args) == 2:  # torch's own sympy functions
                return g.divide(value(e.args[0]), value(e.args[1]))
            if to_float is not None and isinstance(e, to_float):
                return value(e.args[0])
            raise Unsupported(f"symbolic expression {e} ({type(e).__name__})")

        expr = getattr(size, "sym", None)
        if expr is None:
            raise Unsupported(f"size {size!r} has no expression")
        return g.reshape(value(sympy.sympify(expr)), ())

    @property
    def out_type(self) -> TensorType:
        t = self.out_types[0] if self.out_types else None
        if t is None:
            raise Unsupported("the node has no recorded tensor type")
        return t

    def dtype(self, torch_dtype: torch.dtype | None, default: DType | None = None) -> DType:
        if torch_dtype is None:
            if default is None:
                raise Unsupported("no dtype")
            return default
        return from_torch(torch_dtype)


def type_of(value: Any) -> TensorType | None:
    """The opgraph type of a (fake) tensor in a node's ``meta['val']``; symbolic sizes become dynamic dims."""
    if not isinstance(value, torch.Tensor):
        return None
    try:
        dt = from_torch(value.dtype)
    except Exception:
        return None
    shape = tuple(int(d) if isinstance(d, int) else None for d in value.shape)
    return TensorType(shape, dt)


def decompositions(*keep: Any) -> dict[Any, Callable[..., Any]]:
    """PyTorch's core ATen decompositions, less the activations opgraph has as ops of its own (the table splits
    SiLU, Mish and Softplus into two or more elementwise ops: unfused, as many passes over memory) and ``keep``.

    >>> table = decompositions()
    >>> torch.ops.aten.silu.default in table, torch.ops.aten.silu_backward.default in table
    (False, True)
    """
    from torch._decomp import core_aten_decompositions

    aten = torch.ops.aten
    table = core_aten_decompositions()
    for op in (aten.silu.default, aten.mish.default, aten.softplus.default, *keep):
        table.pop(op, None)
    return table
