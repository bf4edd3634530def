"""``scaled_dot_product_attention`` and its gradient op beyond the generic record tests: a matrix of masks,
causality, scales and broadcasting against the NumPy float64 oracle; PyTorch's conventions for queries that
attend to nothing; gradients (first and second order, forward mode) against finite differences and
``torch.autograd``; which kernels run; errors. The ``gpu`` tests check the CUDA lowering (PyTorch's flash
and memory-efficient kernels) against the same oracles."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import opgraph as og
from opgraph.ops import _attention_kernels as kernels
from opgraph.ops.attention import SCALED_DOT_PRODUCT_ATTENTION
from opgraph.ops.attention_grad import SCALED_DOT_PRODUCT_ATTENTION_GRADIENT

from .opinfo import OpInfo, Sample
from .records_attention import np_attention, np_attention_gradient
from .test_grads import check_gradients

BF16 = torch.bfloat16
TOL = {torch.float64: (1e-10, 1e-12), torch.float32: (2e-5, 2e-5), BF16: (2e-2, 2e-2), torch.float16: (4e-3, 4e-3)}


def _inputs(dtype: torch.dtype, q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...],
            seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in (q, k, v)]


def _mask(kind: str | None, shape: tuple[int, ...], dtype: torch.dtype, seed: int = 1) -> torch.Tensor | None:
    gen = torch.Generator().manual_seed(seed)
    if kind is None:
        return None
    if kind == "bool":
        m = torch.rand(shape, generator=gen) < 0.7
        m[..., 0] = True  # every query keeps a key
        return m
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


def _run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
         device: str = "cpu", **kw: Any) -> list[torch.Tensor]:
    g = og.Graph()
    phs = [g.placeholder(t.shape, og.TensorType.of(t).dtype) for t in (q, k, v)]
    m = None if mask is None else g.placeholder(mask.shape, og.TensorType.of(mask).dtype)
    out, lse = g.scaled_dot_product_attention_with_logsumexp(*phs, m, **kw)
    feeds = dict(zip(phs, (q, k, v), strict=True))
    if m is not None:
        feeds[m] = mask
    return [t.cpu() for t in g.run({p: t.to(device) for p, t in feeds.items()}, [out, lse], device=device)]


def _check(got: torch.Tensor, want: np.ndarray, dtype: torch.dtype, scale: float = 1.0) -> None:
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got.double().numpy(), want, rtol=rtol * scale, atol=atol * scale)


# (query, key, value[, mask shape], kwargs): masks broadcast; causal top-left with fewer, as many, more queries
CASES: dict[str, tuple[Any, ...]] = {
    "plain": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8), None, None, {}),
    "scale": ((2, 5, 8), (2, 7, 8), (2, 7, 6), None, None, {"scale": 0.2}),
    "bool-mask": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8), "bool", (5, 7), {}),
    "bool-mask-per-head": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8), "bool", (3, 5, 7), {}),
    "additive-mask": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8), "float", (2, 3, 5, 7), {"scale": 0.5}),
    "additive-mask-key-only": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8), "float", (2, 1, 1, 7), {}),
    "causal-square": ((2, 3, 6, 8), (2, 3, 6, 8), (2, 3, 6, 8), None, None, {"causal": True}),
    "causal-fewer-queries": ((2, 4, 8), (2, 9, 8), (2, 9, 8), None, None, {"causal": True}),
    "causal-more-queries": ((2, 9, 8), (2, 4, 8), (2, 4, 8), None, None, {"causal": True, "scale": 0.3}),
    "broadcast-batch": ((2, 3, 5, 8), (1, 3, 7, 8), (2, 1, 7, 8), None, None, {}),
    "broadcast-query": ((5, 8), (2, 3, 7, 8), (2, 3, 7, 8), None, None, {}),
    "rank5": ((2, 2, 2, 5, 8), (2, 1, 2, 7, 8), (1, 2, 2, 7, 8), "bool", (5, 7), {}),
    "rank5-key-mask": ((2, 2, 2, 5, 8), (2, 2, 2, 7, 8), (2, 2, 2, 7, 8), "float", (7,), {}),
    "rank5-scalar-mask": ((2, 2, 2, 5, 8), (2, 2, 2, 7, 8), (2, 2, 2, 7, 8), "float", (), {}),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, BF16], ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_forward_matches_the_definition(case: str, dtype: torch.dtype) -> None:
    qs, ks, vs, kind, mshape, kw = CASES[case]
    q, k, v = _inputs(dtype, qs, ks, vs)
    mask = _mask(kind, mshape, dtype) if kind else None
    out, lse = _run(q, k, v, mask, **kw)
    want_out, want_lse = np_attention(q, k, v, *([mask] if mask is not None else []), **kw)
    assert out.dtype == dtype and lse.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    _check(out, want_out, dtype)
    _check(lse, want_lse, torch.float32 if dtype == BF16 else dtype)


def test_matches_pytorch_attention() -> None:
    q, k, v = _inputs(torch.float32, (2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8))
    mask = _mask("bool", (5, 7), torch.float32)
    got = _run(q, k, v, mask, scale=0.4)[0]
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.4))
    got = _run(q, k, v, causal=True)[0]
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_a_query_that_attends_to_nothing(kind: str) -> None:
    q, k, v = _inputs(torch.float32, (2, 4, 8), (2, 6, 8), (2, 6, 8))
    if kind == "bool":
        mask: torch.Tensor = torch.ones(4, 6, dtype=torch.bool)
        mask[1] = False
    else:
        mask = torch.zeros(4, 6)
        mask[1] = -math.inf
    out, lse = _run(q, k, v, mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, want)
    assert (out[:, 1] == 0).all() and (lse[:, 1] == -math.inf).all() and torch.isfinite(lse[:, [0, 2, 3]]).all()
    # its gradients are 0 too, not NaN
    grads = _grads(q.double(), k.double(), v.double(), mask.double() if kind == "float" else mask)
    assert all(torch.isfinite(t).all() for t in grads) and (grads[0][:, 1] == 0).all()


def test_rows_with_nothing_kept_are_zeroed_in_the_kernels_layout() -> None:
    """The efficient kernel's output is (batch, length, heads, head) in memory; the mend of rows with no key kept
    keeps that layout (a contiguous clone made the heads' merge after it copy again) and names no new memory."""
    out = torch.randn(2, 5, 3, 4).transpose(1, 2)  # (batch, heads, length, head) over BMHK memory
    lse = torch.randn(2, 3, 5)
    kept = torch.ones(2, 1, 5, dtype=torch.bool)
    kept[1, 0, 2] = False
    want = torch.where(kept[..., None], out, 0.0)
    got, got_lse = kernels._finish(out, lse, kept)
    assert got.stride() == out.stride() and got.data_ptr() == out.data_ptr()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert (got_lse[1, :, 2] == -math.inf).all() and torch.isfinite(got_lse[0]).all()


def test_math_and_fused_lowerings_agree_on_the_cpu() -> None:
    q, k, v = _inputs(torch.float64, (2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8))
    mask = _mask("float", (3, 5, 7), torch.float64)
    mask[0, 2] = -math.inf  # type: ignore[index]
    fused = kernels._cpu_forward(q, k, v, mask, False, 0.3)
    assert fused is not None  # the CPU flash kernel takes these
    out, lse = kernels._finish(*fused, kernels.kept_rows(mask))
    m_out, m_lse = kernels.math_forward(q, k, v, mask, False, 0.3, torch.float64)
    torch.testing.assert_close(out, m_out)
    torch.testing.assert_close(lse, m_lse)
    go = torch.randn_like(out)
    dq = kernels._cpu_backward(go, q, k, v, mask, out, lse, False, 0.3)
    assert dq is not None
    for a, b in zip(dq, kernels.math_backward(go, q, k, v, mask, out, lse, False, 0.3, False), strict=True):
        torch.testing.assert_close(a, b)


def test_the_cpu_kernel_refuses_what_it_cannot_take() -> None:
    q, k, v = _inputs(torch.float32, (2, 4, 8), (2, 6, 8), (2, 6, 5))
    assert kernels._cpu_forward(q, k, v, None, False, 0.3) is None  # value head size differs
    assert kernels._cpu_forward(q, k[:, :0], v[:, :0, :8], None, False, 0.3) is None  # no keys (it divides by 0)


# ---- gradients -----------------------------------------------------------------------------------
def _grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
           **kw: Any) -> list[torch.Tensor]:
    g = og.Graph()
    phs = [g.placeholder(t.shape, og.TensorType.of(t).dtype) for t in (q, k, v)]
    m = None if mask is None else g.placeholder(mask.shape, og.TensorType.of(mask).dtype)
    y = g.scaled_dot_product_attention(*phs, m, **kw)
    w = g.constant(torch.linspace(-1, 1, math.prod(d or 1 for d in y.shape), dtype=torch.float64).reshape(y.shape))
    wrt = phs + ([m] if m is not None and m.dtype.is_floating else [])
    grads = g.gradients(g.reduce_sum(y * w), wrt)
    feeds = dict(zip(phs, (q, k, v), strict=True))
    if m is not None:
        feeds[m] = mask
    return g.run(feeds, [grads[t] for t in wrt])


def _record() -> OpInfo:
    def build(g: og.Graph, q: og.Tensor, k: og.Tensor, v: og.Tensor, *mask: og.Tensor, **kw: Any) -> og.Tensor:
        return g.scaled_dot_product_attention(q, k, v, mask[0] if mask else None, **kw)

    return OpInfo("sdpa", (SCALED_DOT_PRODUCT_ATTENTION,), build, lambda rng: [], np_attention)


@pytest.mark.parametrize("case", list(CASES))
def test_gradients_match_finite_differences(case: str) -> None:
    qs, ks, vs, kind, mshape, kw = CASES[case]
    ins = _inputs(torch.float64, qs, ks, vs, seed=3)
    if kind:
        ins.append(_mask(kind, mshape, torch.float64))  # type: ignore[arg-type]
    check_gradients(_record(), Sample(ins, kw, case), np.random.default_rng(4))


def test_gradients_match_pytorch_autograd() -> None:
    q, k, v = _inputs(torch.float64, (2, 3, 5, 8), (1, 3, 7, 8), (2, 3, 7, 6))
    mask = _mask("float", (3, 1, 7), torch.float64)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, mask)]  # type: ignore[union-attr]
    y = F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3], scale=0.7)
    (y * torch.linspace(-1, 1, y.numel(), dtype=torch.float64).reshape(y.shape)).sum().backward()
    for got, leaf in zip(_grads(q, k, v, mask, scale=0.7), leaves, strict=True):
        torch.testing.assert_close(got, leaf.grad)


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
               causal: bool) -> torch.Tensor:
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("case", ["plain", "causal", "float-mask", "bool-mask"])
def test_second_order_and_forward_mode(case: str) -> None:
    q, k, v = _inputs(torch.float64, (2, 4, 3), (1, 5, 3), (2, 5, 2), seed=5)
    mask = _mask({"float-mask": "float", "bool-mask": "bool"}.get(case), (4, 5), torch.float64)
    causal = case == "causal"
    g = og.Graph()
    phs = [g.placeholder(t.shape, og.float64) for t in (q, k, v)]
    m = None if mask is None else g.placeholder(mask.shape, og.TensorType.of(mask).dtype)
    wrt = phs + ([m] if m is not None and m.dtype.is_floating else [])
    y = g.scaled_dot_product_attention(*phs, m, causal=causal)
    go = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    first = g.gradients(g.reduce_sum(g.sin(y) * g.constant(go)), wrt)
    dirs = [torch.randn(t.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7 + i))
            for i, t in enumerate(wrt)]
    second = g.gradients(sum((g.reduce_sum(first[t] * g.constant(d)) for t, d in zip(wrt, dirs, strict=True)),
                             start=g.constant(0.0, og.float64)), wrt)
    (tangent,) = g.jvp([y], wrt, [g.constant(d) for d in dirs])
    feeds = {**dict(zip(phs, (q, k, v), strict=True)), **({m: mask} if m is not None else {})}
    got = g.run(feeds, [second[t] for t in wrt] + [tangent])

    leaves = [t.clone().requires_grad_() for t in [q, k, v] + ([mask] if len(wrt) == 4 else [])]  # type: ignore[list-item]
    fwd = lambda *xs: _reference(xs[0], xs[1], xs[2], xs[3] if len(xs) == 4 else mask, causal)  # noqa: E731
    g1 = torch.autograd.grad((torch.sin(fwd(*leaves)) * go).sum(), leaves, create_graph=True)
    g2 = torch.autograd.grad(sum((a * d).sum() for a, d in zip(g1, dirs, strict=True)), leaves)
    _, jvp = torch.autograd.functional.jvp(fwd, tuple(t.detach() for t in leaves), tuple(dirs))
    for a, b in zip(got, [*g2, jvp], strict=True):
        torch.testing.assert_close(a, b)


def _gradient_ops(g: og.Graph) -> list[og.Operation]:
    return [o for o in g.ops if o.op is SCALED_DOT_PRODUCT_ATTENTION_GRADIENT]


def test_a_mask_gradient_is_built_only_where_it_can_be_needed() -> None:
    g = og.Graph()
    q, k, v = (g.placeholder((2, 4, 8), og.float64) for _ in range(3))
    fed = g.placeholder((4, 4), og.float64)
    dq = g.gradients(g.reduce_sum(g.scaled_dot_product_attention(q, k, v, fed)), [q])[q]
    # the mask's gradient is a second op, which compiling drops when nothing reads it
    assert [o.attrs.mask_gradient for o in _gradient_ops(g)] == [False, True]
    exe = g.compile({t: t.type for t in (q, k, v, fed)}, [dq], device=og.device("cpu"))
    assert [kernel.op for kernel in exe.kernels()].count("scaled_dot_product_attention_gradient") == 1
    g = og.Graph()
    q, k, v = (g.placeholder((2, 4, 8), og.float64) for _ in range(3))
    bias = g.variable(torch.zeros(4, 4, dtype=torch.float64))
    g.gradients(g.reduce_sum(g.scaled_dot_product_attention(q, k, v, bias * 2.0)), [q, bias])
    assert [o.attrs.mask_gradient for o in _gradient_ops(g)] == [True]  # a learned bias: one op for all
    g = og.Graph()
    q, k, v = (g.placeholder((2, 4, 8), og.float64) for _ in range(3))
    g.gradients(g.reduce_sum(g.scaled_dot_product_attention(q, k, v, g.placeholder((4, 4), og.bool_))), [q])
    assert [o.attrs.mask_gradient for o in _gradient_ops(g)] == [False]


def test_gradient_op_with_the_mask_gradient() -> None:
    q, k, v = _inputs(torch.float64, (2, 4, 8), (2, 6, 8), (2, 6, 8))
    mask = _mask("float", (1, 6), torch.float64)
    out, lse = _run(q, k, v, mask, scale=0.5)
    go = torch.randn_like(out)
    g = og.Graph()
    phs = [g.placeholder(t.shape, og.float64) for t in (go, q, k, v, mask, out, lse)]  # type: ignore[union-attr]
    grads = g.scaled_dot_product_attention_gradient(*phs[:4], phs[5], phs[6], phs[4], 0.5, mask_gradient=True)
    got = g.run(dict(zip(phs, (go, q, k, v, mask, out, lse), strict=True)), list(grads))
    want = np_attention_gradient(go, q, k, v, mask, out, lse, scale=0.5, mask_gradient=True)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-10, atol=1e-12)
    assert got[3].shape == (1, 6)


# ---- errors --------------------------------------------------------------------------------------
ERRORS: dict[str, tuple[Any, type[og.OpgraphError], str]] = {
    "mask-and-causal": (lambda g, q, k, v: g.scaled_dot_product_attention(q, k, v, g.placeholder((4, 6), og.bool_),
                                                                           causal=True),
                        og.AttributeValueError, "mutually exclusive"),
    "head-sizes": (lambda g, q, k, v: g.scaled_dot_product_attention(q, g.placeholder((2, 6, 5)), v), og.ShapeError,
                   "head sizes differ: 8 and 5"),
    "integer-inputs": (lambda g, q, k, v: g.scaled_dot_product_attention(*(g.cast(t, og.int32) for t in (q, k, v))),
                       og.DTypeError, "query dtype int32"),
    "bool-inputs": (lambda g, q, k, v: g.scaled_dot_product_attention(q, k, g.cast(v, og.bool_)), og.DTypeError,
                    "value dtype bool"),
    "rank-1": (lambda g, q, k, v: g.scaled_dot_product_attention(g.placeholder((8,)), k, v), og.ShapeError,
               "rank >= 2"),
    "gradient-of-mismatched-output": (
        lambda g, q, k, v: g.scaled_dot_product_attention_gradient(q, q, k, v, q, g.placeholder((2, 4), og.float64)),
        og.DTypeError, "logsumexp must have dtype float32"),
    "scale-not-a-number": (lambda g, q, k, v: g.scaled_dot_product_attention(q, k, v, scale="0.5"),
                           og.AttributeValueError, "^scaled_dot_product_attention: scale must be a number"),
    "gradient-scale-not-a-number": (
        lambda g, q, k, v: g.scaled_dot_product_attention_gradient(q, q, k, v, q, g.placeholder((2, 4)), scale=True),
        og.AttributeValueError, "^scaled_dot_product_attention_gradient: scale must be a number"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_bad_inputs_raise_errors_naming_the_op(case: str) -> None:
    build, error, match = ERRORS[case]
    g = og.Graph()
    q, k, v = g.placeholder((2, 4, 8)), g.placeholder((2, 6, 8)), g.placeholder((2, 6, 8))
    with pytest.raises(error, match=match) as info:
        build(g, q, k, v)
    assert isinstance(info.value, og.OpgraphError) and "scaled_dot_product_attention" in str(info.value)


# ---- CUDA ----------------------------------------------------------------------------------------
GPU_TOL = {torch.float32: (2e-3, 2e-3), torch.float16: (4e-3, 4e-3), BF16: (3e-2, 3e-2)}
GPU_CASES: dict[str, tuple[Any, ...]] = {
    **CASES,
    "long": ((2, 4, 200, 64), (2, 4, 200, 64), (2, 4, 200, 64), None, None, {}),
    "long-causal": ((1, 2, 130, 64), (1, 2, 130, 64), (1, 2, 130, 64), None, None, {"causal": True}),
    "long-mask": ((1, 2, 70, 64), (1, 2, 90, 64), (1, 2, 90, 64), "float", (1, 1, 70, 90), {}),
    "odd-head": ((2, 2, 33, 20), (2, 2, 17, 20), (2, 2, 17, 12), None, None, {}),
    "masked-row": ((2, 2, 5, 16), (2, 2, 7, 16), (2, 2, 7, 16), "empty-row", (5, 7), {}),
}


def _gpu_mask(kind: str | None, shape: tuple[int, ...] | None, dtype: torch.dtype) -> torch.Tensor | None:
    if kind != "empty-row":
        return _mask(kind, shape, dtype) if kind and shape else None
    m = torch.ones(shape or (), dtype=torch.bool)
    m[1] = False
    return m


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, BF16, torch.float64], ids=str)
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_cuda_forward_and_backward(case: str, dtype: torch.dtype) -> None:
    qs, ks, vs, kind, mshape, kw = GPU_CASES[case]
    q, k, v = _inputs(dtype, qs, ks, vs)
    mask = _gpu_mask(kind, mshape, dtype)
    mk = [mask] if mask is not None else []
    out, lse = _run(q, k, v, mask, device="cuda", **kw)
    want_out, want_lse = np_attention(q, k, v, *mk, **kw)
    rtol, atol = GPU_TOL.get(dtype, TOL[dtype])
    np.testing.assert_allclose(out.double().numpy(), want_out, rtol=rtol, atol=atol)
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse.double().numpy()[finite], want_lse[finite], rtol=2e-3, atol=2e-3)
    assert (lse.numpy()[~finite] == -np.inf).all()

    go = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9)).to(dtype)
    g = og.Graph()
    phs = [g.placeholder(t.shape, og.TensorType.of(t).dtype) for t in (go, q, k, v, *mk, out, lse)]
    m = phs[4] if mask is not None else None
    grads = g.scaled_dot_product_attention_gradient(*phs[:4], phs[-2], phs[-1], m, **kw,
                                                    mask_gradient=mask is not None and mask.dtype != torch.bool)
    feeds = [t.cuda() for t in (go, q, k, v, *mk, out, lse)]
    got = [t.cpu() for t in g.run(dict(zip(phs, feeds, strict=True)), list(grads), device="cuda")]
    want = np_attention_gradient(go, q, k, v, *mk, out, lse, mask_gradient=len(grads) == 4, **kw)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == dtype
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a.double().numpy(), b, rtol=rtol, atol=atol * scale * 2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, BF16, torch.float32], ids=str)
@pytest.mark.parametrize("masked", [False, True])
def test_cuda_uses_the_fused_kernels(dtype: torch.dtype, masked: bool) -> None:
    q, k, v = (t.cuda() for t in _inputs(dtype, (2, 4, 128, 64), (2, 4, 96, 64), (2, 4, 96, 64)))
    mask = _mask("float", (128, 96), dtype).cuda() if masked else None  # type: ignore[union-attr]
    fused = kernels._cuda_forward(q, k, v, mask, False, 0.125)
    assert fused is not None, "no fused kernel took the inputs"
    out, lse = fused
    go = torch.randn_like(out)
    assert kernels._cuda_backward(go, q, k, v, mask, out, lse, False, 0.125, masked) is not None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, BF16], ids=str)
def test_cuda_training_gradients_match_the_cpu(dtype: torch.dtype) -> None:
    q, k, v = _inputs(dtype, (2, 4, 64, 32), (2, 4, 80, 32), (2, 4, 80, 32))
    results = []
    for device in ("cpu", "cuda"):
        g = og.Graph()
        phs = [g.placeholder(t.shape, og.TensorType.of(t).dtype) for t in (q, k, v)]
        y = g.scaled_dot_product_attention(*phs, causal=True)
        loss = g.reduce_sum(g.cast(y, og.float32) * g.cast(y, og.float32))
        grads = g.gradients(loss, phs)
        feeds = {p: t.to(device) for p, t in zip(phs, (q, k, v), strict=True)}
        results.append([t.cpu().float() for t in g.run(feeds, [y, *(grads[p] for p in phs)], device=device)])
    rtol, atol = GPU_TOL[dtype]
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(b, a, rtol=rtol * 2, atol=atol * 4)
