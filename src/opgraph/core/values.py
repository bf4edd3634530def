"""Concrete values: Python scalars, nested lists, NumPy arrays and torch tensors as CPU torch tensors."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .dtype import DType, from_torch
from .errors import DTypeError


def to_torch(value: Any, dtype: DType | None = None) -> torch.Tensor:
    """Convert a Python scalar, nested list, NumPy array or torch tensor to a CPU torch tensor."""
    if hasattr(value, "graph") and hasattr(value, "op"):
        raise DTypeError("expected a concrete value, got a symbolic Tensor")
    if isinstance(value, torch.Tensor):
        t = value.detach()
    elif isinstance(value, np.ndarray | np.generic):
        t = torch.from_numpy(np.ascontiguousarray(value))
    elif isinstance(value, float) or (isinstance(value, (list, tuple)) and _has_float(value)):
        # Python floats default to float32; made at float64 first, so an asked-for dtype rounds them only once
        t = torch.tensor(value, dtype=torch.float64 if dtype is not None else torch.float32)
    else:
        try:
            t = torch.tensor(value)
        except (TypeError, ValueError, RuntimeError) as e:
            raise DTypeError(f"cannot make a tensor from {type(value).__name__}: {e}") from None
    if dtype is not None:
        t = t.to(dtype.torch_dtype)
    else:
        from_torch(t.dtype)  # raises DTypeError for dtypes opgraph lacks
    return t.cpu()


def _has_float(v: Any) -> bool:
    return any(_has_float(x) if isinstance(x, (list, tuple)) else isinstance(x, float) for x in v)
