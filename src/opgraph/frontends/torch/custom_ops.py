"""PyTorch custom ops of opgraph: ``torch.ops.opgraph.attention`` and ``torch.ops.opgraph.attention_backward``.

``F.scaled_dot_product_attention`` decomposes itself while AOTAutograd traces it, into whichever kernel PyTorch
would pick for the traced (fake) inputs; with a float mask under ``torch.compile`` that is often the math
formulation (matmuls, softmax, ``_safe_softmax``'s ``eq``/``logical_not``/``any``). The backend therefore
rewrites Dynamo's calls of it into ``opgraph::attention`` (``capture.py``) before AOTAutograd runs, so that
attention reaches the converters whole, forward and backward; the converters build opgraph's fused
``scaled_dot_product_attention`` and its gradient op from them.

``opgraph::attention(query, key, value, attn_mask, is_causal, scale) -> (out, logsumexp)`` computes
``F.scaled_dot_product_attention`` without dropout (leading dims broadcast as there) and the logsumexp of each
query's scaled, masked scores: float32 (float64 for float64 inputs), -inf for a query that keeps no key (its
output row is 0). The logsumexp is not differentiable (as PyTorch's kernels'). The mask is bool (True: attend)
or float (added to the scores); a float mask is cast to the query's dtype inside the op (so a float32 mask
next to bfloat16 queries works, as PyTorch's math attention takes it). ``is_causal`` is the top-left triangle.

Under ``torch.autocast`` the op casts as PyTorch's autocast casts ``scaled_dot_product_attention`` (it is on
the lower-precision list): floating inputs other than float64, the mask included, to the autocast dtype.

``opgraph::attention_backward(grad_out, query, key, value, attn_mask, out, logsumexp, is_causal, scale,
mask_grad) -> (dquery, dkey, dvalue, dmask)``: ``dmask`` (in the mask's dtype, summed to its shape) when
``mask_grad`` and the mask is float, else an empty tensor. The autograd formula asks for it only when the mask
requires grad. It has no gradient itself (no double backward).

Both run ``opgraph.ops._attention_kernels`` (PyTorch's fused kernels where they take the inputs, else the math)
on any device. They are registered once, when this module is first imported; a second copy of the module
(the package imported under another name) reuses the registered ops.

This module has no ``from __future__ import annotations``: ``torch.library.custom_op`` reads the schema from
the annotations, which older PyTorch versions cannot evaluate from strings.
"""

from typing import Any, Optional

import torch

from ...core.dtype import from_torch
from ...core.errors import OpgraphError
from ...core.types import TensorType
from ...ops import attention
from ...ops._attention_kernels import attention_backward as _attention_backward
from ...ops._attention_kernels import attention_forward as _attention_forward

Tensor = torch.Tensor
# the schema's optional types, spelt as every supported PyTorch version's schema inference reads them
MaybeTensor = Optional[Tensor]  # noqa: UP045
MaybeFloat = Optional[float]  # noqa: UP045
NAMESPACE = "opgraph"
_AUTOCAST_DEVICES = ("cpu", "cuda", "mps", "xpu")


def lse_dtype(dtype: torch.dtype) -> torch.dtype:
    """The logsumexp's dtype (``ops.attention.lse_dtype``'s rule) for a torch dtype."""
    return attention.lse_dtype(from_torch(dtype)).torch_dtype


def op_mask(query: Tensor, mask: MaybeTensor) -> MaybeTensor:
    """The mask as the kernels take it: bool as it is, float cast to the query's dtype."""
    if mask is None or mask.dtype == torch.bool or mask.dtype == query.dtype:
        return mask
    return mask.to(query.dtype)


def _check(query: Tensor, key: Tensor, value: Tensor, mask: MaybeTensor) -> list[int]:
    """The leading (batch) dims of the result; bad inputs raise the fused op's own errors (``og.ShapeError``,
    ``og.DTypeError``) naming this op and the input types."""
    def typed(t: Tensor, dtype: torch.dtype) -> TensorType:
        return TensorType(tuple(d if isinstance(d, int) else None for d in t.shape), from_torch(dtype))

    types = [typed(t, t.dtype) for t in (query, key, value)]
    if mask is not None:  # a float mask is cast to the query's dtype (op_mask)
        types.append(typed(mask, query.dtype if mask.dtype.is_floating_point else mask.dtype))
    try:
        attention.attention_types(types[0], types[1], types[2], types[3] if mask is not None else None)
    except OpgraphError as e:
        raise type(e)(f"opgraph::attention({', '.join(str(t) for t in types)}): {e}") from None
    return list(torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2]))


# ---- the forward -------------------------------------------------------------------------------------------
def _attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: MaybeTensor,
               is_causal: bool, scale: MaybeFloat) -> tuple[Tensor, Tensor]:
    _check(query, key, value, attn_mask)
    out, lse = _attention_forward(query, key, value, op_mask(query, attn_mask), is_causal, scale,
                                  lse_dtype(query.dtype))
    # fresh, contiguous outputs, as the fake implementation describes them (the fused kernels return views)
    return out.contiguous(), lse.contiguous()


def _attention_fake(query: Tensor, key: Tensor, value: Tensor, attn_mask: MaybeTensor,
                    is_causal: bool, scale: MaybeFloat) -> tuple[Tensor, Tensor]:
    batch = _check(query, key, value, attn_mask)
    length = query.shape[-2]
    out = query.new_empty((*batch, length, value.shape[-1]))
    return out, query.new_empty((*batch, length), dtype=lse_dtype(query.dtype))


# ---- the backward ------------------------------------------------------------------------------------------
def _attention_bwd(grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor,
                   attn_mask: MaybeTensor, out: Tensor, logsumexp: Tensor, is_causal: bool,
                   scale: MaybeFloat, mask_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    _check(query, key, value, attn_mask)
    mask = op_mask(query, attn_mask)
    wanted = bool(mask_grad) and mask is not None and mask.dtype != torch.bool
    grads = _attention_backward(grad_out, query, key, value, mask, out, logsumexp, is_causal, scale, wanted)
    dq, dk, dv = grads[0].contiguous(), grads[1].contiguous(), grads[2].contiguous()
    if wanted and attn_mask is not None:
        return dq, dk, dv, grads[3].to(attn_mask.dtype).contiguous()
    return dq, dk, dv, query.new_empty((0,))


def _attention_bwd_fake(grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor,
                        attn_mask: MaybeTensor, out: Tensor, logsumexp: Tensor,
                        is_causal: bool, scale: MaybeFloat,
                        mask_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    _check(query, key, value, attn_mask)
    wanted = bool(mask_grad) and attn_mask is not None and attn_mask.dtype != torch.bool
    dmask = attn_mask.new_empty(attn_mask.shape) if wanted and attn_mask is not None else query.new_empty((0,))
    return query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape), dmask


# ---- autograd ----------------------------------------------------------------------------------------------
def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    query, key, value, mask, is_causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(query, key, value, mask, out, lse)
    ctx.is_causal, ctx.scale = is_causal, scale
    ctx.float_mask = mask is not None and mask.dtype != torch.bool
    ctx.mark_non_differentiable(lse)


def _backward(ctx: Any, grad_out: Tensor, grad_lse: Any) -> tuple[Tensor | None, ...]:
    query, key, value, mask, out, lse = ctx.saved_tensors
    mask_grad = bool(ctx.float_mask and ctx.needs_input_grad[3])
    dq, dk, dv, dmask = torch.ops.opgraph.attention_backward(grad_out, query, key, value, mask, out, lse,
                                                             ctx.is_causal, ctx.scale, mask_grad)
    return dq, dk, dv, dmask if mask_grad else None, None, None


# ---- autocast ----------------------------------------------------------------------------------------------
def _autocast_kernel(device_type: str) -> Any:
    """The op under autocast on ``device_type``: floating inputs other than float64 on that device cast to the
    autocast dtype (what autocast does to ``scaled_dot_product_attention``), then the op without autocast."""
    key = getattr(torch._C.DispatchKey, _autocast_key(device_type))

    def cast(t: Any, dtype: torch.dtype) -> Any:
        eligible = isinstance(t, Tensor) and t.is_floating_point() and t.dtype != torch.float64 \
            and t.device.type == device_type
        return t.to(dtype) if eligible else t

    def kernel(query: Tensor, key_: Tensor, value: Tensor, attn_mask: MaybeTensor,
               is_causal: bool, scale: MaybeFloat) -> tuple[Tensor, Tensor]:
        dtype = torch.get_autocast_dtype(device_type)
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
            return torch.ops.opgraph.attention.default(cast(query, dtype), cast(key_, dtype), cast(value, dtype),
                                                       cast(attn_mask, dtype), is_causal, scale)

    return kernel


def _autocast_key(device_type: str) -> str:
    """The dispatch key of autocast on ``device_type`` ("AutocastCUDA"); spelled out where torch lacks the
    private helper that names it."""
    name = getattr(torch._C, "_dispatch_key_for_device", None)
    return "Autocast" + (name(device_type) if name is not None else device_type.upper())


def _autocast_available(device_type: str) -> bool:
    try:
        return bool(torch._C._is_autocast_available(device_type))
    except (AttributeError, RuntimeError):
        return False


# ---- registration ------------------------------------------------------------------------------------------
def _registered(name: str) -> bool:
    try:
        getattr(getattr(torch.ops, NAMESPACE), name)
    except (AttributeError, RuntimeError):
        return False
    return True


def define_with_backward(name: str, forward: Any, forward_fake: Any, backward: Any, backward_fake: Any,
                         autograd: Any, setup_context: Any) -> bool:
    """``opgraph::{name}`` and ``opgraph::{name}_backward`` (implementations and fake ones), the first
    differentiable through ``autograd``; False where another copy of the module (or a reload) defined them."""
    if _registered(name) and _registered(f"{name}_backward"):
        return False
    op = torch.library.custom_op(f"{NAMESPACE}::{name}", forward, mutates_args=())
    op.register_fake(forward_fake)
    grad = torch.library.custom_op(f"{NAMESPACE}::{name}_backward", backward, mutates_args=())
    grad.register_fake(backward_fake)
    op.register_autograd(autograd, setup_context=setup_context)
    return True


def _register() -> None:
    if not define_with_backward("attention", _attention, _attention_fake, _attention_bwd, _attention_bwd_fake,
                                _backward, _setup_context):
        return
    for device_type in _AUTOCAST_DEVICES:
        if _autocast_available(device_type):  # torch.library keeps these registrations alive
            try:
                torch.library.impl(f"{NAMESPACE}::attention", _autocast_key(device_type),
                                   _autocast_kernel(device_type))
            except (AttributeError, RuntimeError):  # a torch without that key: inputs then keep their dtypes
                continue


_register()
ATTENTION = torch.ops.opgraph.attention.default
ATTENTION_BACKWARD = torch.ops.opgraph.attention_backward.default

__all__ = ["ATTENTION", "ATTENTION_BACKWARD", "define_with_backward", "lse_dtype", "op_mask"]
