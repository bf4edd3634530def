"""``TensorType``: a shape (dims may be dynamic) and a dtype."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from .dtype import DType, as_dtype, from_torch
from .errors import FeedError
from .shape import Shape, as_shape, format_shape, is_static


@dataclass(frozen=True)
class TensorType:
    """The type of a tensor: ``og.TensorType((None, 784), og.float32)``; ``None`` dims are dynamic."""

    shape: Shape
    dtype: DType

    def __init__(self, shape: Iterable[int | None] | int, dtype: object) -> None:
        object.__setattr__(self, "shape", as_shape(shape))
        object.__setattr__(self, "dtype", as_dtype(dtype))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return is_static(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.name}{format_shape(self.shape)}"

    def __repr__(self) -> str:
        return f"TensorType({self.shape!r}, {self.dtype!r})"

    def accepts(self, other: TensorType) -> bool:
        """True when a value of type ``other`` may be fed where this type is declared."""
        if self.dtype is not other.dtype or self.rank != other.rank:
            return False
        return all(a is None or a == b for a, b in zip(self.shape, other.shape, strict=True))

    @staticmethod
    def of(value: torch.Tensor | np.ndarray) -> TensorType:
        """The type of a concrete torch tensor or NumPy array."""
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        if not isinstance(value, torch.Tensor):
            raise FeedError(f"expected a torch.Tensor or numpy.ndarray, got {type(value).__name__}")
        return TensorType(tuple(value.shape), from_torch(value.dtype))
