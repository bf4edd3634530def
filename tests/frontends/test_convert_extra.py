"""Converters of converters/extra.py (masked_scatter, _embedding_bag and its backward, atan2.out, group-norm backward)
against eager PyTorch: every result of the op, including embedding_bag's offset2bag, bag_size and max_indices, and
whole models through ``torch.compile(backend="opgraph")`` with no fallback.

The group-norm backward is decomposed by the default core-ATen table, so its training test uses a backend whose table
keeps it (the op must reach the converter).
"""

from __future__ import annotations

import copy
import itertools
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from opgraph.frontends.torch import CONVERTERS, GraphReport, TorchOptions, compile_fx, recording
from tests.frontends.torch_harness import check_aten, check_inference, check_training, compiled, fallbacks, fell_back

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

aten = torch.ops.aten
nan, inf = float("nan"), float("inf")


def _reasons(reports: list[GraphReport]) -> dict[str, str]:
    return {k: v for r in reports for k, v in r.reasons.items()}


def test_the_converters_are_registered() -> None:
    ops = {aten.masked_scatter.default, aten.masked_scatter_backward.default, aten.atan2.out,
           aten._embedding_bag.default, aten._embedding_bag_forward_only.default, aten._embedding_bag_backward.default,
           aten._embedding_bag_dense_backward.default, aten._embedding_bag_per_sample_weights_backward.default,
           aten.native_group_norm_backward.default}
    assert all(CONVERTERS[op].__module__.endswith("converters.extra") for op in ops)


# ---- masked_scatter ------------------------------------------------------------------------------------------
MS_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool,
             torch.complex64]


def _values(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(*shape) * 10
    return x > 0 if dtype is torch.bool else x.to(dtype)


@pytest.mark.parametrize("dtype", MS_DTYPES)
@pytest.mark.parametrize("mask_shape", [(3, 4), (1, 4), (3, 1), (4,)])
def test_masked_scatter(mask_shape: tuple[int, ...], dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x, mask, source = _values((3, 4), dtype), torch.rand(*mask_shape) > 0.4, _values((4, 5), dtype)
    check_aten(lambda x, m, s: aten.masked_scatter(x, m, s), x, mask, source, op=aten.masked_scatter.default)


def test_masked_scatter_broadcasts_self_and_takes_source_in_row_major_order() -> None:
    x, mask = torch.randn(3, 1), torch.tensor([[[True, False, True, True]], [[False, True, False, False]]])
    source = torch.arange(30.0).reshape(5, 6)  # (2, 3, 4) result: positions take 0, 1, 2, ... in order
    check_aten(lambda x, m, s: aten.masked_scatter(x, m, s), x, mask.expand(2, 3, 4).clone(), source,
               op=aten.masked_scatter.default)
    check_aten(lambda x, m, s: aten.masked_scatter(x, m, s), x, mask, source, op=aten.masked_scatter.default)


def test_masked_scatter_with_no_true_mask_value() -> None:
    x, mask = torch.randn(2, 3), torch.zeros(2, 3, dtype=torch.bool)
    check_aten(lambda x, m, s: aten.masked_scatter(x, m, s), x, mask, torch.randn(4), op=aten.masked_scatter.default)


class _Scatter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.x, self.source = nn.Parameter(torch.randn(3, 4)), nn.Parameter(torch.randn(14))

    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        return self.x.masked_scatter(mask, self.source * 2.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_scatter_inference_and_training(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    mask = torch.rand(1, 4) > 0.5
    check_inference(lambda x, m, s: x.masked_scatter(m, s), torch.randn(3, 4, dtype=dtype), mask,
                    torch.randn(12, dtype=dtype))
    check_training(_Scatter().to(dtype), torch.rand(3, 4) > 0.5)  # the source's gradient: masked_scatter_backward


def test_masked_scatter_backward() -> None:
    grad, mask = torch.randn(2, 3, 4), torch.rand(3, 1) > 0.3
    check_aten(lambda g, m: aten.masked_scatter_backward(g, m, [5, 6]), grad, mask,
               op=aten.masked_scatter_backward.default)


# ---- atan2.out -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.float32, torch.float64),
                                    (torch.float64, torch.float64), (torch.int64, torch.float32)])
def test_atan2_out_returns_the_result(dtypes: tuple[torch.dtype, torch.dtype]) -> None:
    inputs, out = dtypes
    x, y = (torch.randn(3, 4) * 5).to(inputs), (torch.randn(4) * 5).to(inputs)
    check_aten(lambda x, y, o: torch.atan2(x, y, out=o), x, y, torch.empty(3, 4, dtype=out), op=aten.atan2.out)


# ---- embedding bag: forward ----------------------------------------------------------------------------------
INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 4])
OFFSETS = torch.tensor([0, 0, 4, 4, 10])  # empty bags first, in the middle and (without include_last_offset) last
BAG_OPS = [aten._embedding_bag.default, aten._embedding_bag_forward_only.default]


def _bag(op: Any, mode: int, include_last: bool, padding_idx: int) -> Callable[..., Any]:
    return lambda w, i, o, p=None: op(w, i, o, False, mode, False, p, include_last, padding_idx)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", BAG_OPS, ids=["grad", "forward_only"])
@pytest.mark.parametrize("mode, include_last, padding_idx", list(itertools.product([0, 1, 2], [False, True], [-1, 4])))
def test_embedding_bag_all_results(mode: int, include_last: bool, padding_idx: int, op: Any,
                                   dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    w = torch.randn(10, 3, dtype=dtype)
    check_aten(_bag(op, mode, include_last, padding_idx), w, INDICES, OFFSETS, op=op)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("include_last, padding_idx", list(itertools.product([False, True], [-1, 4])))
def test_embedding_bag_per_sample_weights(include_last: bool, padding_idx: int, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    w, psw = torch.randn(10, 3, dtype=dtype), torch.randn(10, dtype=dtype)
    for op in BAG_OPS:
        check_aten(_bag(op, 0, include_last, padding_idx), w, INDICES, OFFSETS, psw, op=op)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_embedding_bag_16_bit(mode: int, dtype: torch.dtype) -> None:  # sums accumulate in float32, as ATen
    torch.manual_seed(0)
    w = torch.randn(10, 3).to(dtype)
    for padding_idx in (-1, 4):
        check_aten(_bag(aten._embedding_bag.default, mode, False, padding_idx), w, INDICES, OFFSETS,
                   op=aten._embedding_bag.default, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("padding_idx", [-1, 0, 2])
def test_embedding_bag_max_ties_nan_and_signed_zeros(padding_idx: int) -> None:
    # ATen keeps the first of equal maxima, a NaN only when it comes first, and -0.0 before 0.0; bag 2 is empty and,
    # with padding_idx 0 or 2, others hold padding only in part
    w = torch.tensor([[1.0, 2.0, nan], [1.0, nan, 0.0], [3.0, 2.0, -inf], [nan, 5.0, -inf], [-0.0, 0.0, 1.0]],
                     dtype=torch.float64)
    idx, off = torch.tensor([1, 0, 2, 4, 3, 0, 1, 2, 2, 4]), torch.tensor([0, 3, 5, 5, 9])
    check_aten(_bag(aten._embedding_bag.default, 2, False, padding_idx), w, idx, off, op=aten._embedding_bag.default)


def test_embedding_bag_of_padding_only_and_int32_indices() -> None:
    w, idx, off = torch.randn(6, 2, dtype=torch.float64), torch.tensor([3, 3, 1, 3, 5]), torch.tensor([0, 2, 3])
    for mode, (it, ot) in itertools.product([0, 1, 2], [(torch.int32, torch.int32), (torch.int32, torch.int64)]):
        check_aten(_bag(aten._embedding_bag.default, mode, True, 3), w, idx.to(it), off.to(ot),
                   op=aten._embedding_bag.default)


# ---- embedding bag: models and backward ----------------------------------------------------------------------
class _Bags(nn.Module):
    def __init__(self, mode: str, padding_idx: int | None, include_last: bool, weighted: bool) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 3, mode=mode, padding_idx=padding_idx, include_last_offset=include_last)
        self.psw = nn.Parameter(torch.rand(10) + 0.5) if weighted else None

    def forward(self, idx: torch.Tensor, off: torch.Tensor) -> torch.Tensor:
        return self.bag(idx, off, per_sample_weights=self.psw)


BAG_MODELS = [(m, p, last, psw) for m, p, last, psw in itertools.product(["sum", "mean", "max"], [None, 4],
                                                                         [False, True], [False, True])
              if not psw or m == "sum"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode, padding_idx, include_last, weighted", BAG_MODELS)
def test_embedding_bag_model(mode: str, padding_idx: int | None, include_last: bool, weighted: bool,
                             dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = _Bags(mode, padding_idx, include_last, weighted).to(dtype)
    check_inference(model, INDICES, OFFSETS)
    check_training(model, INDICES, OFFSETS)  # _embedding_bag_backward (+ the per-sample-weights backward)


def test_embedding_bag_bfloat16_training() -> None:
    # PyTorch's meta function traces a full offset2bag where bfloat16's CPU kernel leaves it empty: the converter
    # gives the traced one, which the backward reads
    torch.manual_seed(0)
    model = _Bags("sum", None, False, False).to(torch.bfloat16)
    check_training(model, INDICES, OFFSETS, rtol=2e-2, atol=2e-2)


def _bag_results(w: torch.Tensor, mode: int, psw: torch.Tensor | None = None, padding_idx: int = -1) -> Any:
    return aten._embedding_bag(w, INDICES, OFFSETS, False, mode, False, psw, False, padding_idx)


@pytest.mark.parametrize("mode, padding_idx", list(itertools.product([0, 1, 2], [-1, 4])))
def test_embedding_bag_backward_ops(mode: int, padding_idx: int) -> None:
    torch.manual_seed(0)
    w, gy = torch.randn(10, 3), torch.randn(5, 3)

    def backward(gy: torch.Tensor, w: torch.Tensor) -> Any:  # float32 sum without padding: offset2bag is empty
        _, o2b, size, imax = _bag_results(w, mode, padding_idx=padding_idx)
        return aten._embedding_bag_backward(gy, INDICES, OFFSETS, o2b, size, imax, 10, False, mode, False, None,
                                            padding_idx)

    check_aten(backward, gy, w, op=aten._embedding_bag_backward.default)

    def dense(gy: torch.Tensor, w: torch.Tensor) -> Any:
        _, o2b, size, imax = _bag_results(w.double(), mode, padding_idx=padding_idx)
        return aten._embedding_bag_dense_backward(gy, INDICES, o2b, size, imax, 10, False, mode, None, padding_idx)

    check_aten(dense, gy, w, op=aten._embedding_bag_dense_backward.default)


@pytest.mark.parametrize("padding_idx", [-1, 4])
def test_embedding_bag_per_sample_weights_backward(padding_idx: int) -> None:
    torch.manual_seed(0)
    w, gy, psw = torch.randn(10, 3), torch.randn(5, 3), torch.randn(10)

    def backward(gy: torch.Tensor, w: torch.Tensor, psw: torch.Tensor) -> Any:
        _, o2b, _, _ = _bag_results(w, 0, psw, padding_idx)
        return aten._embedding_bag_per_sample_weights_backward(gy, w, INDICES, OFFSETS, o2b, 0, padding_idx)

    check_aten(backward, gy, w, psw, op=aten._embedding_bag_per_sample_weights_backward.default)


def test_embedding_bag_scale_grad_by_freq_falls_back_with_the_reason() -> None:
    torch.manual_seed(0)
    model = nn.EmbeddingBag(10, 3, scale_grad_by_freq=True).double()
    ref = copy.deepcopy(model)
    with recording() as reports, warnings.catch_warnings():  # the backward graph compiles in backward()
        warnings.simplefilter("ignore")
        compiled(model)(INDICES, OFFSETS).sum().backward()
    ref(INDICES, OFFSETS).sum().backward()
    assert model.weight.grad is not None
    torch.testing.assert_close(model.weight.grad, ref.weight.grad)
    assert fallbacks(reports) == {"aten::_embedding_bag_backward.default": 1}
    assert "count of another index" in _reasons(reports)["aten::_embedding_bag_backward.default"]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_forward_only_embedding_bag_whose_meta_shapes_differ_falls_back(mode: str) -> None:
    # with include_last_offset, PyTorch's meta function sizes bag_size or max_indices by the offsets, its CPU kernel
    # by the bags
    w = torch.randn(10, 3)
    fn = lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, include_last_offset=True)
    out, reports = fell_back(fn, w, INDICES, OFFSETS)
    torch.testing.assert_close(out, fn(w, INDICES, OFFSETS))
    assert fallbacks(reports) == {"aten::_embedding_bag_forward_only.default": 1}
    assert "meta function" in _reasons(reports)["aten::_embedding_bag_forward_only.default"]


# ---- group norm backward -------------------------------------------------------------------------------------
MASKS = [[True, True, True], [True, False, False], [False, True, True], [False, False, True]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask", MASKS, ids=["all", "input", "affine", "bias"])
@pytest.mark.parametrize("shape, groups", [((3, 6, 2, 3), 3), ((2, 4, 5), 2), ((2, 6), 2)])
def test_native_group_norm_backward(shape: tuple[int, ...], groups: int, mask: list[bool], dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=dtype) * 2 + 1
    gy, w, b = torch.randn_like(x), torch.randn(shape[1], dtype=dtype), torch.randn(shape[1], dtype=dtype)
    n, c, hxw = shape[0], shape[1], x[0, 0].numel()

    def fn(gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
        _, mean, rstd = aten.native_group_norm(x, w, b, n, c, hxw, groups, 1e-5)
        return aten.native_group_norm_backward(gy, x, mean, rstd, w, n, c, hxw, groups, mask)

    check_aten(fn, gy, x, w, b, op=aten.native_group_norm_backward.default, rtol=1e-4, atol=1e-5)


def test_native_group_norm_backward_without_weight() -> None:
    x = torch.randn(2, 6, 4, dtype=torch.float64)

    def fn(gy: torch.Tensor, x: torch.Tensor) -> Any:
        _, mean, rstd = aten.native_group_norm(x, None, None, 2, 6, 4, 3, 1e-5)
        return aten.native_group_norm_backward(gy, x, mean, rstd, None, 2, 6, 4, 3, [True, False, False])

    check_aten(fn, torch.randn_like(x), x, op=aten.native_group_norm_backward.default)


def _keeping_group_norm_backward(seen: set[Any]) -> Any:
    """A Dynamo backend like opgraph's whose decomposition table keeps native_group_norm_backward."""
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd

    table = core_aten_decompositions()
    table.pop(aten.native_group_norm_backward.default)
    opts = TorchOptions(warn_fallbacks=False)

    def backward(gm: torch.fx.GraphModule, xs: Any) -> Any:
        seen.update(n.target for n in gm.graph.nodes)
        return compile_fx(gm, xs, opts, "backward")

    return aot_autograd(fw_compiler=lambda gm, xs: compile_fx(gm, xs, opts, "forward"), bw_compiler=backward,
                        decompositions=table)


GROUP_NORMS = {  # output_mask: the input's gradient only where a layer comes before; weight and bias when affine
    "affine": lambda: nn.GroupNorm(2, 6),
    "no-affine-after-conv": lambda: nn.Sequential(nn.Conv2d(6, 6, 1), nn.GroupNorm(3, 6, affine=False)),
    "affine-after-conv": lambda: nn.Sequential(nn.Conv2d(6, 6, 1), nn.GroupNorm(6, 6)),
}


@pytest.mark.parametrize("name", list(GROUP_NORMS))
def test_group_norm_training_reaches_the_backward_converter(name: str) -> None:
    torch.manual_seed(0)
    model = GROUP_NORMS[name]().double()
    ref, mine = copy.deepcopy(model), copy.deepcopy(model)
    x = torch.randn(3, 6, 2, 3, dtype=torch.float64)
    seen: set[Any] = set()
    torch._dynamo.reset()
    with recording() as reports:
        fast = torch.compile(mine, backend=_keeping_group_norm_backward(seen))
        fast(x).square().mean().backward()
    ref(x).square().mean().backward()
    assert aten.native_group_norm_backward.default in seen
    assert not fallbacks(reports), fallbacks(reports)
    for p, q in zip(mine.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
