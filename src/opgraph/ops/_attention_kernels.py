"""The torch side of the attention ops (``ops/attention.py``, ``ops/attention_grad.py``).

Inputs are brought to the ``(batch, heads, length, head size)`` form PyTorch's fused kernels take (leading
dims broadcast and merged, head sizes padded to a multiple of 8 on CUDA), a kernel is chosen by PyTorch's
own checks (``torch.backends.cuda.can_use_{flash,efficient}_attention``), and the math formulation runs
wherever no kernel takes the inputs or one refuses them:

* CUDA: flash attention (``_scaled_dot_product_flash_attention`` and its backward) for float16/bfloat16
  without a mask and with top-left causality (no causal mask, or as many queries as keys: the flash kernel
  aligns its causal mask bottom-right); else memory-efficient attention
  (``_scaled_dot_product_efficient_attention`` and its backward; the mask as an additive bias, which also
  gives the mask's gradient); float64 takes the math.
* CPU: ``_scaled_dot_product_flash_attention_for_cpu`` and its backward when the value and key head sizes
  agree and no size is 0 (the kernel divides by them); the mask's gradient takes the math.

The math computes in float32 for 16-bit inputs. Logsumexp convention: -inf for a query that keeps no key
(its output row is 0, as ``F.scaled_dot_product_attention`` gives); a backward turns -inf into +inf before
use, so ``exp(score - logsumexp)`` is 0 on that row rather than NaN. The backward is the explicit function
of its inputs (``D = rowsum(grad_out * out)``, ``P = exp(S - logsumexp)``) that the kernels compute.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
import torch.nn.functional as F

aten = torch.ops.aten
INF = math.inf
_BIAS_ALIGN = 16  # elements: the memory-efficient kernel reads its bias in rows aligned to this
_LSE_BLOCK = 32  # queries: its backward reads logsumexp in blocks of this many (the forward pads to it)
_HEAD_ALIGN = 8  # head sizes the CUDA kernels take (PyTorch's own attention pads to this too)
_CPU_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_CUDA_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

Grads = tuple[torch.Tensor, ...]


# ---- shapes --------------------------------------------------------------------------------------
def compute_dtype(dt: torch.dtype) -> torch.dtype:
    return torch.float32 if dt in (torch.float16, torch.bfloat16) else dt


def resolved_scale(scale: float | None, head: int) -> float:
    return scale if scale is not None else 1.0 / math.sqrt(head) if head else 1.0


def batch_shape(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    a, b, c = q.shape[:-2], k.shape[:-2], v.shape[:-2]
    if a == b == c:  # the usual case; torch.broadcast_shapes goes through torch._refs (benchmarks/cpu_calls.py)
        return tuple(a)
    return tuple(torch.broadcast_shapes(a, b, c))


def _as4d(t: torch.Tensor, batch: Sequence[int]) -> torch.Tensor:
    """``t`` broadcast over ``batch`` and viewed (copied only for more than 2 leading dims) as 4-D."""
    t = t.expand(*batch, *t.shape[-2:])
    if len(batch) <= 2:
        return t[(None,) * (2 - len(batch))]
    return t.reshape(-1, batch[-1], *t.shape[-2:])


def _mask4d(m: torch.Tensor, batch: Sequence[int]) -> torch.Tensor:
    """A mask (fitting into ``(*batch, L, S)``) as 4-D, size-1 dims left for the kernels to broadcast."""
    if m.dim() < 2:  # a 0-d or (S,) mask: one row for every query
        m = m.reshape((1,) * (2 - m.dim()) + tuple(m.shape))
    if len(batch) <= 2:
        return m[(None,) * (4 - m.dim())]
    return _as4d(m, batch)


def sum_to(t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """``t`` summed over the dims broadcasting from ``shape`` added or stretched."""
    lead = t.dim() - len(shape)
    if lead:
        t = t.sum(dim=tuple(range(lead)))
    dims = tuple(i for i, n in enumerate(shape) if n == 1 and t.shape[i] != 1)
    return t.sum(dim=dims, keepdim=True) if dims else t


def _safe_lse(lse: torch.Tensor) -> torch.Tensor:
    return lse.masked_fill(lse == -INF, INF)


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A mask as the bias the kernels add: a boolean one is 0 where kept, -inf elsewhere."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, -INF)
    return mask if mask.dtype == dtype else mask.to(dtype)


def kept_rows(mask: torch.Tensor | None) -> torch.Tensor | None:
    """Where a query keeps some key (over the mask's own leading dims); None: every query does."""
    if mask is None:
        return None
    return (mask if mask.dtype == torch.bool else mask != -INF).any(-1)


def _finish(out: torch.Tensor, lse: torch.Tensor, kept: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """A fused kernel's rows with no key kept made the convention's (output 0, logsumexp -inf). The output is
    the kernel's own, so it is masked in place: ``masked_fill`` would clone it to contiguous memory, leaving the
    efficient kernel's (batch, length, heads, head) layout that the heads' merge after it reads as a view."""
    if kept is not None:
        out = out.masked_fill_(~kept[..., None], 0.0)
        lse = lse.masked_fill(~kept, -INF)
    return out, lse


# ---- the math ------------------------------------------------------------------------------------
def scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, causal: bool, scale: float,
           ct: torch.dtype) -> torch.Tensor:
    """``q k^T * scale`` in ``ct`` with the mask applied (bool: -inf where False; float: added) or the
    top-left causal one (query i keeps keys j <= i)."""
    s = torch.matmul(q.to(ct), k.to(ct).transpose(-1, -2)).mul_(scale)
    if causal:
        rows, cols = s.shape[-2:]
        s = s.masked_fill(~torch.ones(rows, cols, dtype=torch.bool, device=s.device).tril(), -INF)
    if mask is not None:
        s = s.masked_fill(~mask, -INF) if mask.dtype == torch.bool else s + mask.to(ct)
    return s


def math_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                 scale: float, lse_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    ct = compute_dtype(q.dtype)
    s = scores(q, k, mask, causal, scale, ct)
    lse = torch.logsumexp(s, -1)  # -inf where nothing is kept
    out = torch.matmul(torch.exp(s - _safe_lse(lse)[..., None]), v.to(ct))
    batch, length = batch_shape(q, k, v), q.shape[-2]
    if tuple(lse.shape[:-1]) != batch:  # v alone may widen the batch
        lse = lse.expand(*batch, length).contiguous()
    return out.to(q.dtype), lse.to(lse_dtype)


def math_backward(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                  out: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float, mask_grad: bool) -> Grads:
    ct = compute_dtype(q.dtype)
    s = scores(q, k, mask, causal, scale, ct)
    p = torch.exp(s - _safe_lse(lse.to(ct))[..., None])
    g = go.to(ct)
    d = (g * out.to(ct)).sum(-1, keepdim=True)
    dv = torch.matmul(p.transpose(-1, -2), g)
    ds = p * (torch.matmul(g, v.to(ct).transpose(-1, -2)) - d)
    dq = torch.matmul(ds, k.to(ct)).mul_(scale)
    dk = torch.matmul(ds.transpose(-1, -2), q.to(ct)).mul_(scale)
    grads = [sum_to(x, t.shape).to(t.dtype) for x, t in ((dq, q), (dk, k), (dv, v))]
    if mask_grad and mask is not None:
        grads.append(sum_to(ds, mask.shape).to(mask.dtype))
    return tuple(grads)


# ---- CPU -----------------------------------------------------------------------------------------
def _cpu_takes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    sizes = (*batch_shape(q, k, v), *q.shape[-2:], *k.shape[-2:], v.shape[-1])
    return q.dtype in _CPU_DTYPES and q.shape[-1] == v.shape[-1] and all(sizes)


def _cpu_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                 scale: float) -> tuple[torch.Tensor, torch.Tensor] | None:
    if not _cpu_takes(q, k, v):
        return None
    batch = batch_shape(q, k, v)
    bias = None if mask is None else _mask4d(additive(mask, q.dtype), batch)
    fused = _refused_is_none(lambda: aten._scaled_dot_product_flash_attention_for_cpu(
        _as4d(q, batch), _as4d(k, batch), _as4d(v, batch), 0.0, causal, attn_mask=bias, scale=scale))
    if fused is None:
        return None
    out, lse = fused
    return out.reshape(*batch, *out.shape[-2:]), lse.reshape(*batch, lse.shape[-1])


def _cpu_backward(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                  out: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float) -> Grads | None:
    if not _cpu_takes(q, k, v):
        return None
    batch = batch_shape(q, k, v)
    bias = None if mask is None else _mask4d(additive(mask, q.dtype), batch)
    lse4 = _as4d(_safe_lse(lse)[..., None], batch)[..., 0]
    grads = _refused_is_none(lambda: aten._scaled_dot_product_flash_attention_for_cpu_backward(
        _as4d(go, batch), _as4d(q, batch), _as4d(k, batch), _as4d(v, batch), _as4d(out, batch), lse4, 0.0,
        causal, attn_mask=bias, scale=scale))
    if grads is None:
        return None
    return tuple(sum_to(d.reshape(*batch, *d.shape[-2:]), t.shape) for d, t in zip(grads, (q, k, v), strict=True))


# ---- CUDA ----------------------------------------------------------------------------------------
def _sdpa_params(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                 causal: bool) -> object:
    return torch.backends.cuda.SDPAParams(q, k, v, bias, 0.0, causal, False)


def _can_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> bool:
    same_length = q.shape[-2] == k.shape[-2]
    if q.dtype not in (torch.float16, torch.bfloat16) or (causal and not same_length):
        return False
    return bool(torch.backends.cuda.can_use_flash_attention(_sdpa_params(q, k, v, None, causal)))  # type: ignore[arg-type]


def _can_efficient(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                   causal: bool) -> bool:
    params = _sdpa_params(q, k, v, bias, causal)
    return bool(torch.backends.cuda.can_use_efficient_attention(params))  # type: ignore[arg-type]


def _dense_head(t: torch.Tensor) -> torch.Tensor:
    """``t`` with a unit-stride, 8-aligned head dim, zero-padded (scores and outputs unchanged)."""
    pad = -t.shape[-1] % _HEAD_ALIGN
    if pad:
        return F.pad(t, (0, pad))
    return t if t.stride(-1) == 1 else t.contiguous()


def _aligned_bias(mask: torch.Tensor, dtype: torch.dtype, batch: Sequence[int], length: int,
                  keys: int) -> torch.Tensor:
    """The additive bias as 4-D ``(batch, heads, length, keys)``, its rows unit-stride and aligned in memory
    as the kernel reads them (a padded copy where they are not)."""
    b = _mask4d(additive(mask, dtype), batch)
    b = b.expand(*b.shape[:-1], keys)
    if b.stride(-1) != 1 or any(s % _BIAS_ALIGN for s in b.stride()[:-1]):
        b = F.pad(b, (0, -keys % _BIAS_ALIGN))[..., :keys]
    return b.expand(*_as4d_batch(batch), length, keys)


def _as4d_batch(batch: Sequence[int]) -> tuple[int, ...]:
    if len(batch) <= 2:
        return (1,) * (2 - len(batch)) + tuple(batch)
    return (math.prod(batch[:-1]), batch[-1])


class _Prepared:
    """The 4-D, head-aligned operands of one CUDA call, and what undoes it."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.batch = batch_shape(q, k, v)
        self.q, self.k, self.v = (_dense_head(_as4d(t, self.batch)) for t in (q, k, v))
        self.length, self.keys, self.head, self.vhead = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
        sizes = (*self.batch, self.length, self.keys, self.head, self.vhead)
        self.ok = q.dtype in _CUDA_DTYPES and all(sizes)

    def like_v(self, t: torch.Tensor) -> torch.Tensor:  # grad_out and out
        return _dense_head(_as4d(t, self.batch))

    def unbatch(self, t: torch.Tensor, last: int | None) -> torch.Tensor:
        t = t[..., :last] if last is not None else t
        return t.reshape(*self.batch, *t.shape[2:])


def _cuda_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                  scale: float) -> tuple[torch.Tensor, torch.Tensor] | None:
    p = _Prepared(q, k, v)
    if not p.ok:
        return None
    fused = None
    if mask is None and _can_flash(p.q, p.k, p.v, causal):
        fused = _refused_is_none(lambda: aten._scaled_dot_product_flash_attention(
            p.q, p.k, p.v, 0.0, causal, False, scale=scale)[:2])
    if fused is None:
        bias = None if mask is None else _aligned_bias(mask, q.dtype, p.batch, p.length, p.keys)
        if _can_efficient(p.q, p.k, p.v, bias, causal):
            fused = _refused_is_none(lambda: aten._scaled_dot_product_efficient_attention(
                p.q, p.k, p.v, bias, True, 0.0, causal, scale=scale)[:2])
    if fused is None:
        return None
    out, lse = fused
    # the efficient kernel pads logsumexp along the queries in some PyTorch versions
    return p.unbatch(out, p.vhead), p.unbatch(lse[..., :p.length], None).contiguous()


def _cuda_backward(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                   out: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float, mask_grad: bool) -> Grads | None:
    p = _Prepared(q, k, v)
    if not p.ok:
        return None
    g4, o4 = p.like_v(go), p.like_v(out)
    lse4 = _as4d(_safe_lse(lse.float())[..., None], p.batch)[..., 0].contiguous()
    grads: Sequence[torch.Tensor | None] | None = None
    if mask is None and _can_flash(p.q, p.k, p.v, causal):
        # dropout is 0: the random-number state is never read, only passed in the forward's form
        seed, offset = (torch.empty(s, dtype=torch.uint64, device=q.device) for s in ((2,), ()))
        grads = _refused_is_none(lambda: aten._scaled_dot_product_flash_attention_backward(
            g4, p.q, p.k, p.v, o4, lse4, None, None, p.length, p.keys, 0.0, causal, seed, offset, scale=scale))
    if grads is None:
        bias = None if mask is None else _aligned_bias(mask, q.dtype, p.batch, p.length, p.keys)
        if _can_efficient(p.q, p.k, p.v, bias, causal):
            lse_blocks = F.pad(lse4, (0, -p.length % _LSE_BLOCK), value=INF)  # as the forward writes it
            seed, offset = torch.empty((), dtype=torch.int64), torch.empty((), dtype=torch.int64)
            # its 16-bit kernels read the output with the forward's strides: (batch, length, heads, head) dense
            o_bmhk = o4.transpose(1, 2).contiguous().transpose(1, 2)
            grads = _refused_is_none(lambda: aten._scaled_dot_product_efficient_attention_backward(
                g4, p.q, p.k, p.v, bias, o_bmhk, lse_blocks, seed, offset, 0.0, [True, True, True, mask_grad],
                causal, scale=scale))
    if grads is None or any(d is None for d in grads[:3]) or (mask_grad and grads[3] is None):
        return None
    result = [sum_to(p.unbatch(d, n), t.shape) for d, t, n in
              zip(grads[:3], (q, k, v), (p.head, p.head, p.vhead), strict=True) if d is not None]
    if mask_grad and mask is not None and grads[3] is not None:
        result.append(sum_to(p.unbatch(grads[3], None), mask.shape).to(mask.dtype))
    return tuple(result)


T = TypeVar("T")


def _refused_is_none(call: Callable[[], T]) -> T | None:
    """``call()``, or None when PyTorch's kernel refuses the inputs (its checks raise before any launch). Device
    errors, out-of-memory and anything raised while a CUDA graph is captured propagate: a fallback recorded into
    a graph, or one taken after the device failed, would hide the failure."""
    try:
        return call()
    except torch.OutOfMemoryError:
        raise
    except RuntimeError as e:
        if isinstance(e, _DEVICE_ERRORS) or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
            raise
        return None


_DEVICE_ERRORS: tuple[type[BaseException], ...] = tuple(
    t for t in (getattr(torch, "AcceleratorError", None),) if isinstance(t, type))


# ---- dispatch ------------------------------------------------------------------------------------
def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                      scale: float | None, lse_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, logsumexp) of one call; see the module docstring for the kernels and the conventions."""
    sc = resolved_scale(scale, q.shape[-1])
    fused = None
    if q.device.type == "cuda":
        fused = _cuda_forward(q, k, v, mask, causal, sc)
    elif q.device.type == "cpu":
        fused = _cpu_forward(q, k, v, mask, causal, sc)
    if fused is None:
        return math_forward(q, k, v, mask, causal, sc, lse_dtype)
    out, lse = _finish(*fused, kept_rows(mask))
    return out, lse.to(lse_dtype)


def attention_backward(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       mask: torch.Tensor | None, out: torch.Tensor, lse: torch.Tensor, causal: bool,
                       scale: float | None, mask_grad: bool) -> Grads:
    """(dq, dk, dv[, dmask]) of one call, shaped and typed as the inputs."""
    sc = resolved_scale(scale, q.shape[-1])
    fused: Grads | None = None
    if q.device.type == "cuda":
        fused = _cuda_backward(go, q, k, v, mask, out, lse, causal, sc, mask_grad)
    elif q.device.type == "cpu" and not mask_grad:
        fused = _cpu_backward(go, q, k, v, mask, out, lse, causal, sc)
    if fused is None:
        return math_backward(go, q, k, v, mask, out, lse, causal, sc, mask_grad)
    return fused


__all__ = ["additive", "attention_backward", "attention_forward", "batch_shape", "compute_dtype", "kept_rows",
           "math_backward", "math_forward", "resolved_scale", "scores", "sum_to"]
