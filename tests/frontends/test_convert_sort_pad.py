"""Converters for sort, topk, var.dim and the reflection/replication pads, against eager PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.frontends.torch_harness import check_inference, check_training

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_sort_and_topk() -> None:
    x = torch.randn(4, 9)
    x[1, 3] = float("nan")

    def f(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        v, i = torch.sort(t, dim=1, descending=True)
        a, b = torch.sort(t, dim=0)
        top_v, top_i = torch.topk(t, 3, dim=1)
        low_v, low_i = torch.topk(t, 2, dim=0, largest=False)
        return v, i, a, b, top_v, top_i, low_v, low_i

    check_inference(f, x)


def test_variance_with_unbiased_flag() -> None:
    check_inference(lambda t: (torch.var(t, 1, unbiased=True), torch.var(t, 0, unbiased=False, keepdim=True)),
                    torch.randn(5, 6))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_edge_pads_inference_and_training(mode: str) -> None:
    x1, x2, x3 = torch.randn(2, 3, 7), torch.randn(2, 3, 6, 5), torch.randn(1, 2, 4, 5, 6)
    check_inference(lambda a, b, c: (F.pad(a, (2, 1), mode=mode), F.pad(b, (1, 2, 3, 0), mode=mode),
                                     F.pad(c, (1, 1, 2, 0, 0, 3), mode=mode)), x1, x2, x3)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1), torch.nn.ReflectionPad2d(2) if mode == "reflect"
                                else torch.nn.ReplicationPad2d(2), torch.nn.Conv2d(3, 2, 3))
    check_training(model, x2, rtol=1e-4, atol=1e-5)


def test_one_dimensional_average_pools() -> None:
    """avg_pool1d and adaptive_avg_pool1d reach the backend as themselves (no decomposition): traced with make_fx,
    compiled by compile_fx, against the ATen ops."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from opgraph.frontends.torch import TorchOptions, compile_fx, recording

    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.ops.aten.avg_pool1d(x, [3], [2], [1], False, True), torch.ops.aten.adaptive_avg_pool1d(x, [4]),
                torch.ops.aten.avg_pool1d(x, [2]))

    x = torch.randn(2, 3, 8)
    gm = make_fx(f)(x)
    with recording() as reports:
        run = compile_fx(gm, [x], TorchOptions(warn_fallbacks=False))
    got = run([x])
    for a, b in zip(got, f(x), strict=True):
        torch.testing.assert_close(a, b)
    assert reports[0].fallbacks == {}


def test_diagonal() -> None:
    x = torch.randn(3, 4, 5)
    check_inference(lambda t: (torch.diagonal(t, 0, 1, 2), torch.diagonal(t, 1, 1, 2), torch.diagonal(t, -2, 2, 0),
                               torch.diagonal(t, 0, 0, 1), torch.diagonal(t, 7, 1, 2)), x)
    check_training(torch.nn.Sequential(torch.nn.Linear(5, 5), _Diagonal()), torch.randn(2, 5, 5))


class _Diagonal(torch.nn.Module):
    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return torch.diagonal(t, 0, -2, -1) * 2.0
