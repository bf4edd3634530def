"""Op: ``matmul_epilogue``, ``act(x @ w + bias)`` as one vendor call (cuBLASLt's bias/activation epilogues).

Made by the compiler (``passes/epilogue.py``) from matmul -> add(bias) -> relu/gelu; autodiff runs before
that pass, so the op has no gradient rule. The activation is computed by the activation op's own lowering
unless ``torch._addmm_activation`` computes exactly the same function on the device (see ``_lower``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..core.device_timing import device_ms, device_probe
from ..core.dtype import FLOAT_DTYPES
from ..core.errors import AttributeValueError, ShapeError
from ..core.types import TensorType
from ..ir.attrs import serializable
from ._rules import expect_arity, expect_bool, expect_dtype, same_dtype
from .activation import GELU, GeluApproximation, GeluAttrs
from .registry import FusionKind, LowerContext, OpDef, attrs


@serializable
class EpilogueActivation(enum.Enum):
    """The activation after the bias: none, relu, gelu (erf) or gelu with the tanh approximation."""

    NONE = "none"
    RELU = "relu"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"


@attrs
class MatmulEpilogueAttrs:
    activation: EpilogueActivation = EpilogueActivation.NONE
    has_bias: bool = True
    names: tuple[str, ...] = ()  # the graph ops it replaced (introspection only)


def _rule(a: MatmulEpilogueAttrs, ins: tuple[TensorType, ...]) -> TensorType:
    if not isinstance(a.activation, EpilogueActivation):
        raise AttributeValueError(f"activation must be an EpilogueActivation, got {a.activation!r}")
    expect_bool(a.has_bias, "has_bias")
    if not isinstance(a.names, tuple) or not all(isinstance(n, str) for n in a.names):
        raise AttributeValueError(f"names must be a tuple of str, got {a.names!r}")
    expect_arity(ins, 3 if a.has_bias else 2)
    dt = same_dtype(ins)
    for t in ins:
        expect_dtype(t, FLOAT_DTYPES)
    x, w = ins[0], ins[1]
    if x.rank < 2 or w.rank != 2:
        raise ShapeError(f"expects x of rank >= 2 and a 2-D w, got ranks {x.rank} and {w.rank}")
    k1, k2, n = x.shape[-1], w.shape[0], w.shape[1]
    if k1 is not None and k2 is not None and k1 != k2:
        raise ShapeError(f"inner dimensions {k1} and {k2} do not match")
    if a.has_bias:
        b = ins[2]
        if b.rank != 1 or (b.shape[0] is not None and n is not None and b.shape[0] != n):
            raise ShapeError(f"bias must be 1-D of length {n} (the last dim of the product), got {b.shape}")
    return TensorType(x.shape[:-1] + (n,), dt)


@device_probe
def _lt_relu_keeps_nan(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the cuBLASLt relu epilogue keeps NaN as ``torch.relu`` does (probed once per device and dtype; not
    while a CUDA graph is being captured, where the answer is no: the relu then runs apart)."""
    x = torch.zeros(16, 16, device=device, dtype=dtype)
    x[0, 0] = float("nan")
    y = torch._addmm_activation(torch.zeros(16, device=device, dtype=dtype), x, torch.ones_like(x))
    return bool(torch.isnan(y[0]).all())


@device_probe
def lt_bias_costs_more(m: int, k: int, n: int, dtype: torch.dtype, relu: bool = False) -> bool:
    """Whether ``addmm`` (cuBLASLt's bias epilogue; ``_addmm_activation`` with ``relu``, its RELU_BIAS one) takes
    at least 10% longer on the current CUDA device than the plain GEMM and a separate bias add (and relu), for
    ``(m, k) @ (k, n)`` with the weight read transposed as ``nn.Linear`` stores it; timed once per shape, as the
    kernel tuner times (``core.device_timing``). Its float32 heuristics pick a slower kernel for some shapes (an
    H200 at 197x3072->768: 0.094 ms against 0.043 ms apart; RESULTS.md, thirteenth session). Not timed while a
    CUDA graph is being captured: the epilogue stays."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
    w = torch.randn(n, k, device="cuda", dtype=dtype, generator=gen).t()
    b = torch.randn(n, device="cuda", dtype=dtype, generator=gen)
    if relu:
        fused, apart = (lambda: torch._addmm_activation(b, x, w)), (lambda: torch.mm(x, w).add_(b).relu_())
    else:
        fused, apart = (lambda: torch.addmm(b, x, w)), (lambda: torch.mm(x, w).add_(b))
    fused(), apart()  # cuBLAS picks and loads its kernels
    times = {f: sorted(device_ms(f) for _ in range(3))[1] for f in (fused, apart)}  # the median of three
    return times[apart] < 0.9 * times[fused]


def _activation(a: EpilogueActivation, ctx: LowerContext) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The activation op's own lowering, so the semantics (NaN, +inf) are exactly the unfused ones."""
    if a is EpilogueActivation.NONE:
        return None
    if a is EpilogueActivation.RELU:
        return torch.relu_  # on the fresh product: no second buffer
    approx = GeluApproximation.TANH if a is EpilogueActivation.GELU_TANH else GeluApproximation.NONE
    out = ctx.out_types[0]
    return GELU.lower(LowerContext(GeluAttrs(approx), (out,), (out,), ctx.device, ctx.options))  # type: ignore[misc]


def _lower(ctx: LowerContext) -> Callable[..., Any]:
    a = ctx.attrs
    act = _activation(a.activation, ctx)
    dt = ctx.in_types[0].dtype.torch_dtype
    fused = getattr(torch, "_addmm_activation", None)
    # on CUDA, _addmm_activation runs cuBLASLt's RELU_BIAS / GELU_BIAS epilogues; its gelu is the tanh
    # form there (the erf form on the CPU, where it is only addmm + an in-place activation anyway)
    if (ctx.device.type == "cuda" and a.has_bias and fused is not None
            and dt in (torch.float16, torch.bfloat16, torch.float32)
            and (a.activation is EpilogueActivation.GELU_TANH
                 or (a.activation is EpilogueActivation.RELU and _lt_relu_keeps_nan(ctx.device, dt)))):
        use_gelu = a.activation is EpilogueActivation.GELU_TANH
        core: Callable[..., torch.Tensor] = lambda x, w, b: fused(b, x, w, use_gelu=use_gelu)
    elif a.has_bias and ctx.in_types[0].rank > 2:
        # linear flattens x's leading dims into one addmm itself: one call instead of three on the host
        return (lambda x, w, b: F.linear(x, w.t(), b)) if act is None else (
            lambda x, w, b: act(F.linear(x, w.t(), b)))
    elif a.has_bias:
        core = (lambda x, w, b: torch.addmm(b, x, w)) if act is None else (
            lambda x, w, b: act(torch.addmm(b, x, w)))
    else:
        core = torch.mm if act is None else (lambda x, w: act(torch.mm(x, w)))
    if ctx.in_types[0].rank == 2:
        return core
    return lambda x, *rest: core(x.flatten(0, -2), *rest).unflatten(0, x.shape[:-1])


MATMUL_EPILOGUE = OpDef("matmul_epilogue", infer=_rule, lower=_lower, attrs=MatmulEpilogueAttrs,
                        fusion=FusionKind.OPAQUE, differentiable=False,
                        doc="act(x @ w + bias) for x [..., K], w [K, N], bias [N]: one vendor GEMM with "
                            "its bias/activation epilogue (made by the compiler)")

__all__ = ["MATMUL_EPILOGUE", "EpilogueActivation", "MatmulEpilogueAttrs"]
