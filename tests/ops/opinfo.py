"""OpInfo-style records: one per op (or small op group) drive every generic op test.

A record says how to build the op in a graph from placeholders, which sample inputs to feed, the
independent oracle (NumPy/SciPy, or torch.nn.functional where the semantics are PyTorch's), the
tolerances, and inputs that must raise an ``og.OpgraphError``. ``test_ops.py`` runs them all.
Family modules ``records_*.py`` in this folder each export ``RECORDS``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ir.opdef import OpDef

Value = np.ndarray | torch.Tensor


@dataclass
class Sample:
    """Inputs fed as placeholders, keyword arguments for ``build``/``oracle``, and a label."""

    inputs: Sequence[Value]
    kwargs: dict[str, Any] = field(default_factory=dict)
    desc: str = ""


@dataclass
class ErrorCase:
    """``build(g)`` must raise ``error`` (an OpgraphError subclass) with ``match`` in the message."""

    build: Callable[[og.Graph], Any]
    error: type[og.OpgraphError] = og.OpgraphError
    match: str | None = None
    desc: str = ""


# default tolerances (rtol, atol) per dtype; integers and bools compare exactly
TOLERANCES: dict[Any, tuple[float, float]] = {
    torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1e-2), torch.float32: (2e-5, 1e-5),
    torch.float64: (1e-10, 1e-12), torch.complex64: (2e-5, 1e-5), torch.complex128: (1e-10, 1e-12),
}


@dataclass
class OpInfo:
    """One record. ``build(g, *placeholders, **kwargs)`` returns a Tensor or a list of Tensors;
    ``oracle(*numpy_inputs, **kwargs)`` returns the expected array(s)."""

    name: str
    ops: tuple[OpDef, ...]
    build: Callable[..., Any]
    samples: Callable[[np.random.Generator], Iterable[Sample]]
    oracle: Callable[..., Any]
    errors: Sequence[ErrorCase] = ()
    tol: dict[Any, tuple[float, float]] = field(default_factory=dict)
    gpu_tol: dict[Any, tuple[float, float]] = field(default_factory=dict)  # e.g. cuDNN's TF32 convolutions
    dynamic: bool = True  # also build with all dims dynamic and check the same results
    roundtrip: bool = True
    grad: bool = True  # check gradients against finite differences (differentiable ops only)
    grad_samples: Callable[[np.random.Generator], Iterable[Sample]] | None = None  # away from kinks and ties

    def tolerance(self, dtype: torch.dtype, gpu: bool = False) -> tuple[float, float]:
        if gpu and dtype in self.gpu_tol:
            return self.gpu_tol[dtype]
        return self.tol.get(dtype, TOLERANCES.get(dtype, (0.0, 0.0)))


def to_numpy(v: Value) -> np.ndarray:
    if isinstance(v, torch.Tensor):
        if v.dtype == torch.bfloat16:
            v = v.float()
        return v.detach().cpu().numpy()
    return np.asarray(v)


def all_records() -> list[OpInfo]:
    import tests.ops as pkg

    records: list[OpInfo] = []
    for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if m.name.startswith("records_"):
            records.extend(importlib.import_module(f"tests.ops.{m.name}").RECORDS)
    return records


# ---- helpers for writing records ----------------------------------------------------------------
def rand(rng: np.random.Generator, shape: Sequence[int], dtype: Any = np.float32, low: float = -2.0,
         high: float = 2.0) -> Value:
    """Random values of ``dtype`` (a NumPy dtype, or torch.bfloat16) in [low, high)."""
    if dtype is torch.bfloat16:
        return torch.from_numpy(rng.uniform(low, high, shape).astype(np.float32)).to(torch.bfloat16)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(int(low), int(high), shape, endpoint=False).astype(dt)
    if dt.kind == "c":
        return (rng.uniform(low, high, shape) + 1j * rng.uniform(low, high, shape)).astype(dt)
    return rng.uniform(low, high, shape).astype(dt)


def placeholder_like(g: og.Graph, v: Value, dynamic: bool = False, name: str | None = None) -> og.Tensor:
    t = v if isinstance(v, torch.Tensor) else torch.from_numpy(np.asarray(v))
    shape = tuple(None for _ in t.shape) if dynamic else tuple(t.shape)
    return g.placeholder(shape, og.TensorType.of(t).dtype, name=name)
