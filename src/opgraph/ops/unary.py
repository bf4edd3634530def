"""Elementwise ops with one input: math functions, rounding, predicates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.dtype import DType
from ..core.types import TensorType
from ..ir.graph import GraphCore, Tensor
from ._rules import expect_arity, expect_dtype
from .registry import FusionKind, OpDef, direct


def unary_rule(*, result: DType | None = None, floating: bool = False, integer: bool = False,
               boolean: bool = False, numeric: bool = False) -> Callable[[Any, tuple[TensorType, ...]], TensorType]:
    def rule(a: Any, ins: tuple[TensorType, ...]) -> TensorType:
        expect_arity(ins, 1)
        expect_dtype(ins[0], floating=floating, integer=integer, boolean=boolean, numeric=numeric)
        return TensorType(ins[0].shape, result or ins[0].dtype)

    return rule


def unary(name: str, fn: Callable[..., Any], doc: str = "", **kinds: Any) -> OpDef:
    return OpDef(name, infer=unary_rule(**kinds), lower=direct(fn), fusion=FusionKind.ELEMENTWISE, doc=doc,
                 differentiable=kinds.get("result") is None and not kinds.get("integer", False) and not kinds.get("boolean", False))


NEGATIVE = unary("negative", torch.neg, "-x", numeric=True)
EXP = unary("exp", torch.exp, "e ** x", floating=True)


class UnaryBuilders(GraphCore):
    """Graph methods for elementwise ops with one input."""

    def _unary(self, op: OpDef, x: Any, name: str | None) -> Tensor:
        return self._apply(op, [self._as_tensor(x)], None, name)

    def negative(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``-x``."""
        return self._unary(NEGATIVE, x, name)

    def exp(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """``e ** x`` (floating dtypes)."""
        return self._unary(EXP, x, name)
