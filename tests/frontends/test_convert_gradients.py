"""The gradient converters (``converters/gradients.py``; GELU's in elementwise.py, the embedding's in nn.py) against
PyTorch's ATen ops, on both paths: one vendor op each where no kernels are generated (the CPU with fusion on), the
elementwise spelling otherwise (here: fusion off); and a language-model step through ``torch.compile`` whose
backward uses the vendor ops and matches eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from opgraph.frontends.torch import TorchOptions, recording
from opgraph.frontends.torch.backend import compile_fx

from .torch_harness import compiled, fallbacks

aten = torch.ops.aten


def _check(fn: Callable[..., Any], inputs: list[Any], vendor: bool, op_name: str, tol: float = 1e-6) -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(fn)(*inputs)
    with recording() as reports:
        run = compile_fx(gm, inputs, TorchOptions(warn_fallbacks=False, fusion=vendor))
    assert not fallbacks(reports)
    names = [k.op for r in reports for k in r.kernels]
    assert (op_name in names) is vendor, names
    torch.testing.assert_close(run(list(inputs))[0], fn(*inputs), rtol=tol, atol=tol)


@pytest.mark.parametrize("vendor", [True, False], ids=["vendor", "spelled"])
@pytest.mark.parametrize("case", ["mean", "sum", "none", "weighted-mean-ignore", "one-sample", "float64"])
def test_nll_loss_backward(case: str, vendor: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    dtype = torch.float64 if case == "float64" else torch.float32
    reduction = {"sum": 2, "none": 0}.get(case, 1)
    n, c = 6, 5
    x = torch.randn(n, c, generator=gen, dtype=dtype).log_softmax(1)
    target = torch.randint(0, c, (n,), generator=gen)
    weight = torch.rand(c, generator=gen, dtype=dtype) + 0.5 if case.startswith("weighted") else None
    ignore = 2 if case.endswith("ignore") else -100
    if case == "one-sample":
        x, target = x[0], target[0]
    gy = torch.randn(n, generator=gen, dtype=dtype) if case == "none" else torch.tensor(0.7, dtype=dtype)
    total = torch.tensor(3.5, dtype=dtype)

    def fn(gy: torch.Tensor, x: torch.Tensor, target: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
        return aten.nll_loss_backward(gy, x, target, weight, reduction, ignore, total)

    _check(fn, [gy, x, target, total], vendor, "nll_loss_gradient")


@pytest.mark.parametrize("vendor", [True, False], ids=["vendor", "spelled"])
@pytest.mark.parametrize("dim", [1, 0])
def test_log_softmax_backward_data(dim: int, vendor: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    y = torch.randn(4, 7, generator=gen).log_softmax(dim)
    gy = torch.randn(4, 7, generator=gen)

    def fn(gy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return aten._log_softmax_backward_data(gy, y, dim, torch.float32)

    _check(fn, [gy, y], vendor, "log_softmax_gradient", tol=1e-5)


def _language_model_step(options: dict[str, Any] | None = None) -> list[str]:
    """An embedding + linear language model's cross-entropy step, compiled, against eager's gradients (one ignored
    label, one of the last class); the ops of the backward's kernels."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50))
    tokens, labels = torch.randint(0, 50, (3, 8)), torch.randint(0, 50, (3, 8))
    labels[0, 0], labels[1, 2] = -100, 49

    def loss(tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())

    def step(fn: Callable[..., torch.Tensor]) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        fn(tokens, labels).backward()
        return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    want = step(loss)
    with recording() as reports:
        got = step(compiled(loss, options))
    assert want.keys() == got.keys() and len(want) == 3
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6)
    return [k.op for r in reports if r.kind == "backward" for k in r.kernels]


def test_a_language_model_step_uses_the_vendor_loss_gradients_and_matches_eager() -> None:
    backward = _language_model_step()
    assert {"log_softmax_gradient", "nll_loss_gradient", "embedding_gradient"} <= set(backward), backward


def test_a_language_model_step_in_generated_kernels_writes_no_one_hot_gradient() -> None:
    # where kernels are generated (here Triton's interpreter), nll_loss's gradient (a zero tensor with one value a
    # row scattered in) becomes a select in log_softmax's gradient region: no scatter, no fill of the logits' size
    backward = _language_model_step({"triton_interpret": True})
    assert "fused_region" in backward and not {"scatter_along_axis", "fill_like"} & set(backward), backward


@pytest.mark.parametrize("vendor", [True, False], ids=["vendor", "spelled"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward(approximate: str, vendor: bool) -> None:
    gen = torch.Generator().manual_seed(2)
    gy, x = torch.randn(3, 9, generator=gen), torch.randn(3, 9, generator=gen) * 3

    def fn(gy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return aten.gelu_backward(gy, x, approximate=approximate)

    _check(fn, [gy, x], vendor, "gelu_gradient", tol=1e-5)


@pytest.mark.parametrize("vendor", [True, False], ids=["vendor", "spelled"])
@pytest.mark.parametrize("case", ["plain", "padding-scaled"])
def test_embedding_dense_backward(case: str, vendor: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    gy, indices = torch.randn(4, 5, 3, generator=gen), torch.randint(0, 6, (4, 5), generator=gen)
    padding, scaled = (2, True) if case == "padding-scaled" else (-1, False)

    def fn(gy: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return aten.embedding_dense_backward(gy, indices, 6, padding, scaled)

    _check(fn, [gy, indices], vendor, "embedding_gradient", tol=1e-5)
