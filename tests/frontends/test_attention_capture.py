"""``F.scaled_dot_product_attention`` captured whole before AOTAutograd (``frontends/torch/capture.py``) as
``opgraph::attention`` (``frontends/torch/custom_ops.py``) and converted to opgraph's fused attention and its
gradient op: the custom ops against PyTorch (opcheck, finite differences in float64), the rewrite of Dynamo's
graphs, small modules and a tiny BERT through ``torch.compile(backend="opgraph")`` against eager (float32 and
bfloat16 autocast), and the kernels ``og.torch.explain`` lists (no matmul + softmax attention left)."""

from __future__ import annotations

import copy
import importlib
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import opgraph as og
from opgraph.frontends.torch import GraphReport, custom_ops, recording
from opgraph.frontends.torch import backend as backend_module
from opgraph.frontends.torch.capture import SDPA_TARGETS, capture_attention
from tests.frontends.torch_harness import compiled, fallbacks

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

ATTENTION, ATTENTION_BACKWARD = custom_ops.ATTENTION, custom_ops.ATTENTION_BACKWARD


def _rand(*shape: int, dtype: torch.dtype = torch.float64, grad: bool = True) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


# ---- the custom ops ------------------------------------------------------------------------------------------
def _cases(dtype: torch.dtype) -> dict[str, tuple[Any, ...]]:
    """(query, key, value, mask, is_causal, scale) per case; leading dims broadcast in some."""
    torch.manual_seed(0)
    q, k, v = _rand(2, 3, 5, 4, dtype=dtype), _rand(2, 3, 7, 4, dtype=dtype), _rand(2, 3, 7, 6, dtype=dtype)
    keep = torch.rand(2, 1, 5, 7) > 0.4
    keep[0, 0, 2] = False  # a query that attends to nothing: a row of zeros
    return {
        "plain": (q, k, v, None, False, None),
        "causal-scaled": (q, k, v, None, True, 0.3),
        "bool-mask": (q, k, v, keep, False, None),
        "float-mask-broadcast": (q, k, v, _rand(2, 1, 1, 7, dtype=dtype, grad=False), False, None),
        "learned-bias": (q, k, v, _rand(3, 5, 7, dtype=dtype), False, 0.5),
        "broadcast-batch": (_rand(2, 1, 5, 4, dtype=dtype), _rand(1, 3, 7, 4, dtype=dtype),
                            _rand(3, 7, 4, dtype=dtype), None, False, None),
    }


def _eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, causal: bool, scale: Any) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)


@pytest.mark.parametrize("case", list(_cases(torch.float64)))
def test_custom_op_matches_sdpa_and_finite_differences(case: str) -> None:
    q, k, v, mask, causal, scale = _cases(torch.float64)[case]
    out, lse = ATTENTION(q, k, v, mask, causal, scale)
    torch.testing.assert_close(out, _eager(q, k, v, mask, causal, scale))
    assert lse.dtype == torch.float64 and lse.shape == out.shape[:-1]
    tensors = [t for t in (q, k, v, mask) if isinstance(t, torch.Tensor) and t.requires_grad]

    def fn(*ts: torch.Tensor) -> torch.Tensor:
        args = list(ts) + [mask] * (len(ts) == 3)
        return ATTENTION(*args, causal, scale)[0]

    assert torch.autograd.gradcheck(fn, tuple(tensors))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(_cases(torch.float64)))
def test_custom_ops_opcheck(case: str, dtype: torch.dtype) -> None:
    opcheck = getattr(torch.library, "opcheck", None)
    if opcheck is None:
        pytest.skip("torch.library.opcheck needs PyTorch 2.4")
    args = _cases(dtype)[case]
    opcheck(ATTENTION, args)
    q, k, v, mask, causal, scale = (a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    out, lse = ATTENTION(q, k, v, mask, causal, scale)
    mask_grad = mask is not None and mask.is_floating_point()
    opcheck(ATTENTION_BACKWARD, (torch.randn_like(out), q, k, v, mask, out, lse, causal, scale, mask_grad))


def test_custom_op_logsumexp_convention() -> None:
    q, k, v = (torch.randn(1, 3, 4) for _ in range(3))
    keep = torch.ones(3, 3, dtype=torch.bool)
    keep[1] = False
    out, lse = ATTENTION(q, k, v, keep, False, None)
    assert lse.dtype == torch.float32 and lse[0, 1] == -math.inf and not out[0, 1].any()
    want = torch.logsumexp(q @ k.transpose(-1, -2) / 2.0, -1)
    torch.testing.assert_close(lse[0, [0, 2]], want[0, [0, 2]])
    half = ATTENTION(q.bfloat16(), k.bfloat16(), v.bfloat16(), None, False, None)
    assert (half[0].dtype, half[1].dtype) == (torch.bfloat16, torch.float32)


def test_float_mask_cast_to_query_dtype() -> None:
    """A float32 mask next to bfloat16 queries (as autocast leaves HF's masks) is cast inside the op; its
    gradient comes back in float32."""
    q, k, v = (torch.randn(2, 2, 5, 8).bfloat16().requires_grad_() for _ in range(3))
    mask = torch.randn(2, 1, 1, 5, requires_grad=True)
    out, _ = ATTENTION(q, k, v, mask, False, None)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, _eager(q, k, v, mask.bfloat16(), False, None), rtol=2e-2, atol=2e-2)
    out.float().sum().backward()
    assert mask.grad is not None and mask.grad.dtype == torch.float32 and mask.grad.shape == mask.shape


def test_autocast_casts_like_sdpa() -> None:
    q, k, v, mask = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 1, 1, 5)
    with torch.autocast("cpu", torch.bfloat16):
        out, lse = ATTENTION(q, k, v, mask, False, None)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (out.dtype, lse.dtype) == (want.dtype, torch.float32) == (torch.bfloat16, torch.float32)
    torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)
    with torch.autocast("cpu", torch.bfloat16):  # float64 is left as it is, as autocast leaves it
        assert ATTENTION(q.double(), k.double(), v.double(), None, False, None)[0].dtype == torch.float64


def test_registered_once() -> None:
    """Importing the module again (a reload, or a second copy of the package) keeps the registered ops."""
    module = importlib.reload(custom_ops)
    assert module.ATTENTION is ATTENTION and torch.ops.opgraph.attention.default is ATTENTION
    q = torch.randn(1, 2, 4)
    with torch.autocast("cpu", torch.bfloat16):
        assert torch.ops.opgraph.attention(q, q, q, None, False, None)[0].dtype == torch.bfloat16


# ---- the rewrite of Dynamo's graphs -------------------------------------------------------------------------
def _dynamo_targets(fn: Callable[..., Any], *inputs: Any) -> tuple[list[int], list[Any]]:
    """How many calls ``capture_attention`` replaced in each of Dynamo's graphs of ``fn``, and the targets left."""
    counts: list[int] = []
    targets: list[Any] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        counts.append(capture_attention(gm))
        targets.extend(n.target for n in gm.graph.nodes if n.op == "call_function")
        return gm

    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(*inputs)
    return counts, targets


def test_capture_normalises_arguments() -> None:
    q, mask = torch.randn(2, 2, 5, 8), torch.randn(2, 1, 1, 5)

    def fn(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        a = F.scaled_dot_product_attention(q, q, q, mask, 0.0, False, scale=0.3)  # positional
        b = torch._C._nn.scaled_dot_product_attention(q, q, q, attn_mask=mask, dropout_p=0, scale=1)  # keywords
        c = F.scaled_dot_product_attention(q, q, q, is_causal=True, enable_gqa=False)
        return a + b + c

    counts, targets = _dynamo_targets(fn, q, mask)
    assert counts == [3] and targets.count(ATTENTION) == 3 and not SDPA_TARGETS & set(targets)
    torch._dynamo.reset()
    got = torch.compile(fn, backend=lambda gm, xs: (capture_attention(gm), gm)[1])(q, mask)
    torch.testing.assert_close(got, fn(q, mask))


def _masked(causal: bool) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    return lambda q, m: F.scaled_dot_product_attention(q, q, q, m, 0.0, causal)


def test_capture_leaves_other_calls_alone() -> None:
    """Dropout, grouped key/value heads, and a mask with is_causal (PyTorch refuses it) stay as they were."""
    q, kv, mask = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 1, 1, 5)
    counts, targets = _dynamo_targets(lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=0.1), q)
    assert counts == [0] and ATTENTION not in targets and SDPA_TARGETS & set(targets)
    counts, _ = _dynamo_targets(lambda q, kv: F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True), q, kv)
    assert counts == [0]
    for causal, want in ((True, 0), (False, 1)):  # (Dynamo itself refuses to trace a mask with is_causal)
        gm = torch.fx.symbolic_trace(_masked(causal))
        for node, value in zip((n for n in gm.graph.nodes if n.op == "placeholder"), (q, mask), strict=False):
            node.meta["example_value"] = value
        assert capture_attention(gm) == want


def test_dropout_in_training_not_captured() -> None:
    class Drop(nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5 if self.training else 0.0)

    q = torch.randn(2, 2, 5, 8, requires_grad=True)
    counts, _ = _dynamo_targets(Drop().train(), q)
    assert counts == [0]
    with recording() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = compiled(Drop().train())(q)
        out.sum().backward()
    assert out.shape == q.shape and q.grad is not None
    assert not any(k.op.startswith("scaled_dot_product_attention") for r in reports for k in r.kernels)
    counts, _ = _dynamo_targets(Drop().eval(), q)
    assert counts == [1]


# ---- through the backend ------------------------------------------------------------------------------------
def _attention_ops(reports: Sequence[GraphReport]) -> tuple[set[str], list[str]]:
    """The kernels' ops of all graphs, and the ops computing a floating tensor shaped as attention scores
    (batch, heads, L, S): what a decomposed attention (matmul + softmax) leaves."""
    ops = {k.op for r in reports for k in r.kernels}
    scores = []
    for r in reports:
        assert r.executable is not None, r.eager_reason
        for o in r.executable.program.graph.ops:
            if any(t.dtype.is_floating and len(t.shape) == 4 and t.shape[-2:] == t.shape[-2:][::-1]
                   and t.shape[1] > 1 and t.shape[-1] == _SCORES_LENGTH for t in o.outputs):
                scores.append(o.op.name)
    return ops, scores


_SCORES_LENGTH = 9  # the key length of the inputs below (a head size differs from it)


class _Attend(nn.Module):
    """Projections and one attention call, in the form ``mode`` names."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode, self.proj = mode, nn.Linear(16, 3 * 16)
        self.bias = nn.Parameter(torch.randn(2, 9, 9) * 0.1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.proj(x).view(b, n, 3, 2, 8).permute(2, 0, 3, 1, 4)
        if self.mode == "float-mask":  # (B, 1, 1, S), as HF builds it
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        elif self.mode == "bool-mask":
            out = F.scaled_dot_product_attention(q, k, v, mask > -1.0)
        elif self.mode == "causal-scaled":
            out = F.scaled_dot_product_attention(q, k, v, None, 0.0, True, scale=0.2)
        else:  # a learned bias: its gradient too
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias)
        return out.transpose(1, 2).reshape(b, n, 16)


def _mask() -> torch.Tensor:
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[1, 6:] = False
    return torch.zeros(2, 1, 1, 9).masked_fill(~keep[:, None, None, :], torch.finfo(torch.float32).min)


def _train(model: nn.Module, inputs: Sequence[torch.Tensor], autocast: bool,
           compile_it: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], list[GraphReport]]:
    model = copy.deepcopy(model)
    with recording() as reports, warnings.catch_warnings(), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        warnings.simplefilter("ignore")
        out = (compiled(model) if compile_it else model)(*inputs)
        out = getattr(out, "logits", out)
        out.float().square().mean().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads, list(reports)


def _close(got: torch.Tensor, want: torch.Tensor, autocast: bool, what: str) -> None:
    if autocast:  # bfloat16: relative L2 error (rounding moves single elements); a gradient that is 0 in exact
        # arithmetic (the key projection's bias: softmax ignores a shift of all scores) is rounding alone
        err = (got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-6)
        assert err < 3e-2, f"{what}: relative error {err:.2e}"
    else:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{what}: {m}")


def _check_against_eager(model: nn.Module, inputs: Sequence[torch.Tensor], autocast: bool) -> list[GraphReport]:
    got, grads, reports = _train(model, inputs, autocast, True)
    want, want_grads, _ = _train(model, inputs, autocast, False)
    assert got.dtype == want.dtype
    _close(got, want, autocast, "output")
    assert grads.keys() == want_grads.keys()
    for name, g in grads.items():
        _close(g, want_grads[name], autocast, name)
    assert not fallbacks(reports), fallbacks(reports)
    return reports


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
@pytest.mark.parametrize("mode", ["float-mask", "bool-mask", "causal-scaled", "learned-bias"])
def test_module_through_backend(mode: str, autocast: bool) -> None:
    torch.manual_seed(0)
    model, x = _Attend(mode), torch.randn(2, 9, 16)
    reports = _check_against_eager(model, [x, _mask()], autocast)
    ops, scores = _attention_ops(reports)
    assert {"scaled_dot_product_attention", "scaled_dot_product_attention_gradient"} <= ops, ops
    assert "softmax" not in ops and not scores, scores


def test_autocast_dtypes_at_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under bfloat16 autocast, queries from ``nn.Linear`` (bfloat16) and a float32 mask reach the op both in
    bfloat16 (autocast's cast, as eager attention gets them); the result is bfloat16 as eager's."""
    seen: list[list[Any]] = []
    original = backend_module.compile_fx

    def spy(gm: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        seen.extend([a.meta["val"].dtype if isinstance(a, torch.fx.Node) else a for a in n.args]
                    for n in gm.graph.nodes if n.target is ATTENTION)
        return original(gm, *args, **kwargs)

    monkeypatch.setattr(backend_module, "compile_fx", spy)
    torch.manual_seed(0)
    _check_against_eager(_Attend("float-mask"), [torch.randn(2, 9, 16), _mask()], True)
    assert seen and all(s[:4] == [torch.bfloat16] * 4 for s in seen), seen


# ---- HF BERT --------------------------------------------------------------------------------------------------
def _bert() -> tuple[nn.Module, list[torch.Tensor]]:
    tf = pytest.importorskip("transformers")
    config = tf.BertConfig(vocab_size=50, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=128, max_position_embeddings=32, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = tf.BertForMaskedLM(config)
    ids = torch.randint(0, 50, (2, _SCORES_LENGTH))
    padding = torch.ones(2, _SCORES_LENGTH, dtype=torch.long)
    padding[1, 6:] = 0
    return model, [ids, padding]


class _Logits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=padding).logits


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_bert_training_through_backend(autocast: bool) -> None:
    model, inputs = _bert()
    reports = _check_against_eager(_Logits(model), inputs, autocast)
    ops, scores = _attention_ops(reports)
    assert {"scaled_dot_product_attention", "scaled_dot_product_attention_gradient"} <= ops, ops
    assert not scores, scores


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_bert_explain_lists_fused_attention(autocast: bool) -> None:
    model, inputs = _bert()
    with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        report = og.torch.explain(_Logits(model), *inputs, train=True)
    assert report.fallbacks == {} and report.graph_breaks == 0
    kinds = {r.kind: [k.op for k in r.kernels] for r in report.graphs}
    assert kinds["forward"].count("scaled_dot_product_attention") == 2, kinds["forward"]
    assert kinds["backward"].count("scaled_dot_product_attention_gradient") == 2, kinds["backward"]
    ops, scores = _attention_ops(report.graphs)
    assert "softmax" not in ops and not scores, scores


# ---- on CUDA (pytest -m gpu) --------------------------------------------------------------------------------
def _train_cuda(model: nn.Module, inputs: Sequence[torch.Tensor], autocast: bool,
                compile_it: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], list[GraphReport]]:
    model = copy.deepcopy(model).cuda()
    with recording() as reports, warnings.catch_warnings(), torch.autocast("cuda", torch.bfloat16, enabled=autocast):
        warnings.simplefilter("ignore")
        out = (compiled(model) if compile_it else model)(*[t.cuda() for t in inputs])
        out = getattr(out, "logits", out)
        out.float().square().mean().backward()
    grads = {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach().cpu(), grads, list(reports)


@pytest.mark.gpu
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
@pytest.mark.parametrize("model_name", ["float-mask", "learned-bias", "causal-scaled", "bert"])
def test_capture_on_cuda_matches_eager(model_name: str, autocast: bool) -> None:
    """The CUDA path: the fused kernels (flash / memory-efficient, their backward, the autocast kernel) under the
    captured op, outputs and gradients against eager CUDA (float32 with TF32 off)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    if model_name == "bert":
        bert, inputs = _bert()
        model: nn.Module = _Logits(bert)
    else:
        torch.manual_seed(0)
        model, inputs = _Attend(model_name), [torch.randn(2, 9, 16), _mask()]
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        got, grads, reports = _train_cuda(model, inputs, autocast, True)
        want, want_grads, _ = _train_cuda(model, inputs, autocast, False)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    _close(got, want, autocast, "output")
    for name, g in grads.items():
        _close(g, want_grads[name], autocast, name)
    ops, scores = _attention_ops(reports)
    assert {"scaled_dot_product_attention", "scaled_dot_product_attention_gradient"} <= ops, ops
    assert not scores, scores


def test_capture_can_be_switched_off() -> None:
    # options={"capture_attention": False}: Dynamo's call is left to AOTAutograd (a learned bias then takes
    # PyTorch's math attention, decomposed), and the results still match eager
    torch.manual_seed(0)
    model, x = _Attend("learned-bias"), torch.randn(2, 9, 16)
    torch._dynamo.reset()
    with recording() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(copy.deepcopy(model), backend="opgraph", options={"capture_attention": False})(x, _mask())
    ops, _ = _attention_ops(list(reports))
    assert "scaled_dot_product_attention" not in ops, ops
    torch.testing.assert_close(got, model(x, _mask()), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bad,error,words", [
    (dict(query=torch.randn(8)), og.ShapeError, "query must have rank >= 2"),
    (dict(key=torch.randn(2, 5, 7)), og.ShapeError, "head sizes differ"),
    (dict(mask=torch.ones(4, 5, dtype=torch.int64)), og.DTypeError, "mask must be bool"),
    (dict(query=torch.randn(2, 4, 8, dtype=torch.float64)), og.DTypeError, "one dtype"),
    (dict(mask=torch.ones(3, 4, 5)), og.ShapeError, "does not broadcast"),
])
def test_the_custom_op_names_itself_and_the_types_on_bad_inputs(bad: dict[str, torch.Tensor], error: type,
                                                                   words: str) -> None:
    args = dict(query=torch.randn(2, 4, 8), key=torch.randn(2, 5, 8), value=torch.randn(2, 5, 3), mask=None) | bad
    with pytest.raises(error, match=words) as info:
        torch.ops.opgraph.attention(args["query"], args["key"], args["value"], args["mask"], False, None)
    assert str(info.value).startswith("opgraph::attention(") and "float32(2, 5, 3)" in str(info.value)
