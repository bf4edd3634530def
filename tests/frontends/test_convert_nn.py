"""Converters of the neural-network ATen ops (converters/nn.py), op by op and in whole small models, against
eager PyTorch: results, gradients, BatchNorm buffers and one SGD step, with no fallback of this family's ops.

Ops that the default core-ATen decomposition removes (softmax/layer-norm/batch-norm backward, embedding backward,
upsampling, the CPU flash-attention forward) are checked on ATen graphs traced without decomposition.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import opgraph as og
from opgraph.frontends.torch import CONVERTERS, TorchOptions, compile_fx, recording
from opgraph.frontends.torch.fallback import qualified_name
from tests.frontends.torch_harness import check_aten, check_inference, check_training, fallbacks, fell_back

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

aten = torch.ops.aten
DTYPES = [torch.float32, torch.float64]

# ATen ops of other converter families (elementwise, shape, reduce, losses' decompositions) that the models below
# contain. Until those converters exist they may fall back; none of them is an op of this family (checked below).
OUTSIDE = frozenset({
    "aten::_to_copy.default", "aten::any.dim", "aten::arange.start_step", "aten::bitwise_and.Tensor",
    "aten::bitwise_not.default", "aten::clamp.default", "aten::div.Scalar", "aten::div.Tensor", "aten::eq.Scalar",
    "aten::erf.default", "aten::exp.default", "aten::full.default", "aten::full_like.default", "aten::ge.Scalar",
    "aten::gelu.default", "aten::index_put.default", "aten::le.Scalar", "aten::logical_and.default",
    "aten::logical_not.default", "aten::lt.Scalar", "aten::ne.Scalar", "aten::neg.default",
    "aten::scalar_tensor.default", "aten::where.self", "aten::gather.default", "aten::scatter.value",
})


def _this_family() -> set[str]:
    return {qualified_name(op) for op, fn in CONVERTERS.items()
            if fn.__module__.endswith("converters.nn") and isinstance(op, torch._ops.OpOverload)}


def test_the_allowed_outside_ops_are_not_this_family() -> None:
    mine = _this_family()
    assert {"aten::convolution.default", "aten::max_pool2d_with_indices.default",
            "aten::_native_batch_norm_legit_functional.default", "aten::native_layer_norm.default"} <= mine
    assert not OUTSIDE & mine


def _seeded(make: Callable[[], nn.Module], dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(0)
    return make().to(dtype)


# ---- convolution ---------------------------------------------------------------------------------------------
CONV2D = {
    "strided-dilated-groups": lambda: nn.Conv2d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2),
    "rectangular-no-bias": lambda: nn.Conv2d(4, 3, (3, 1), stride=(1, 2), padding=(1, 0), bias=False),
    "depthwise": lambda: nn.Conv2d(4, 8, 3, padding=1, groups=4),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CONV2D))
def test_conv2d(name: str, dtype: torch.dtype) -> None:
    x = torch.randn(2, 4, 7, 8, dtype=dtype)
    check_inference(_seeded(CONV2D[name], dtype), x)
    check_training(_seeded(CONV2D[name], dtype), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_backward_to_the_input_and_without_bias(dtype: torch.dtype) -> None:
    # the second convolution's backward needs its input's gradient (output_mask[0]); the first has no bias
    def make() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.Conv2d(4, 2, 2, stride=2, padding=1))

    check_training(_seeded(make, dtype), torch.randn(2, 3, 9, 9, dtype=dtype))


CONV_OTHER = {
    "conv1d": (lambda: nn.Conv1d(3, 4, 3, stride=2, padding=1, dilation=2), (2, 3, 9)),
    "conv3d": (lambda: nn.Conv3d(2, 4, 3, stride=(1, 2, 1), padding=1, groups=2), (1, 2, 4, 5, 5)),
    "transposed2d": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
                     (2, 4, 5, 4)),
    "transposed2d-dilated": (lambda: nn.ConvTranspose2d(3, 2, 2, stride=3, dilation=2, bias=False), (1, 3, 3, 3)),
    "transposed1d": (lambda: nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1), (2, 3, 5)),
    "transposed3d": (lambda: nn.ConvTranspose3d(2, 4, 3, stride=2, padding=1, groups=2), (1, 2, 3, 3, 3)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CONV_OTHER))
def test_conv_1d_3d_and_transposed(name: str, dtype: torch.dtype) -> None:
    make, shape = CONV_OTHER[name]
    x = torch.randn(*shape, dtype=dtype)
    check_inference(_seeded(make, dtype), x)
    pointwise = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[len(shape) - 3]  # before it: the gradient of its input is needed
    check_training(_seeded(lambda: nn.Sequential(pointwise(shape[1], shape[1], 1), make()), dtype), x)


# ---- pooling -------------------------------------------------------------------------------------------------
def _after_conv(pool: nn.Module) -> Callable[[], nn.Module]:
    return lambda: nn.Sequential(nn.Conv2d(3, 3, 1), pool)  # a parameter before the pool: its backward runs


MAX_POOLS = {
    "k2": lambda: nn.MaxPool2d(2),
    "k3-s2-p1-ceil": lambda: nn.MaxPool2d(3, 2, 1, ceil_mode=True),
    "dilated": lambda: nn.MaxPool2d((2, 3), stride=(1, 2), padding=1, dilation=2),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MAX_POOLS))
def test_max_pool2d(name: str, dtype: torch.dtype) -> None:
    x = torch.randn(2, 3, 9, 10, dtype=dtype)
    pool = MAX_POOLS[name]()
    check_inference(lambda t: F.max_pool2d(t, pool.kernel_size, pool.stride, pool.padding, pool.dilation,
                                           pool.ceil_mode, return_indices=True), x)  # PyTorch's flat int64 indices
    check_training(_seeded(_after_conv(MAX_POOLS[name]()), dtype), x)


def test_max_pool2d_of_an_unbatched_input_and_ties() -> None:
    x = torch.tensor([[[1.0, 3.0, 3.0, 0.0], [3.0, 2.0, 0.0, 3.0]]])  # (C, H, W); the first maximum wins
    reports = check_inference(lambda t: F.max_pool2d(t, 2, return_indices=True), x)
    assert reports[0].executable is not None


AVG_POOLS = {
    "k2": lambda: nn.AvgPool2d(2),
    "k3-s2-p1-ceil-exclude-pad": lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
    "k3-s2-p1-include-pad": lambda: nn.AvgPool2d(3, 2, 1),
    "divisor-override": lambda: nn.AvgPool2d((2, 3), stride=(2, 1), padding=(1, 1), divisor_override=5),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(AVG_POOLS))
def test_avg_pool2d(name: str, dtype: torch.dtype) -> None:
    x = torch.randn(2, 3, 9, 10, dtype=dtype)
    check_inference(AVG_POOLS[name](), x)
    check_training(_seeded(_after_conv(AVG_POOLS[name]()), dtype), x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", [1, (2, 5), (4, 1)])
def test_adaptive_pools(size: Any, dtype: torch.dtype) -> None:
    x = torch.randn(2, 3, 8, 10, dtype=dtype)
    # a global average is a mean (reduce family) whose backward decomposes into elementwise ops
    check_training(_seeded(_after_conv(nn.AdaptiveAvgPool2d(size)), dtype), x)
    check_inference(lambda t: F.adaptive_max_pool2d(t, size, return_indices=True), x)
    check_training(_seeded(_after_conv(nn.AdaptiveMaxPool2d(size)), dtype), x)


POOLS_3D: dict[str, Callable[[], nn.Module]] = {
    "max-k2": lambda: nn.MaxPool3d(2),
    "max-k3-s2-p1-ceil-dilated": lambda: nn.MaxPool3d(3, (2, 1, 2), 1, dilation=(1, 2, 1), ceil_mode=True),
    "avg-k3-s2-p1-ceil-exclude-pad": lambda: nn.AvgPool3d(3, 2, 1, ceil_mode=True, count_include_pad=False),
    "avg-divisor-override": lambda: nn.AvgPool3d(2, divisor_override=3),
    "adaptive-avg": lambda: nn.AdaptiveAvgPool3d((2, 3, 1)),
    "adaptive-max": lambda: nn.AdaptiveMaxPool3d((1, 3, 2)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(POOLS_3D))
def test_pool3d(name: str, dtype: torch.dtype) -> None:
    x = torch.randn(2, 2, 4, 6, 6, dtype=dtype)
    check_training(_seeded(lambda: nn.Sequential(nn.Conv3d(2, 2, 1), POOLS_3D[name]()), dtype), x)
    if name.startswith(("max", "adaptive-max")):  # PyTorch's int64 indices d * H * W + h * W + w
        pool = POOLS_3D[name]()
        pool.return_indices = True
        check_inference(pool, x[0])  # unbatched


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", [(3, 4), (7, 7), (5, 2)])
def test_uneven_adaptive_avg_pool(size: tuple[int, int], dtype: torch.dtype) -> None:
    # windows of different sizes (7 -> 3: 3, 3, 3 overlapping; 1 -> 7 in VGG/AlexNet at small images)
    for shape in [(2, 3, 7, 10), (2, 3, 1, 1)]:
        x = torch.randn(*shape, dtype=dtype)
        check_inference(nn.AdaptiveAvgPool2d(size), x)
        check_training(_seeded(_after_conv(nn.AdaptiveAvgPool2d(size)), dtype), x)
    check_training(_seeded(lambda: nn.Sequential(nn.Conv1d(3, 3, 1), nn.AdaptiveAvgPool1d(4)), dtype),
                   torch.randn(2, 3, 9, dtype=dtype))
    check_training(_seeded(lambda: nn.Sequential(nn.Conv3d(3, 3, 1), nn.AdaptiveAvgPool3d((2, 3, 4))), dtype),
                   torch.randn(2, 3, 3, 5, 7, dtype=dtype))


def test_adaptive_pool_to_an_empty_size_falls_back() -> None:
    x = torch.randn(1, 2, 5, 5)
    out, reports = fell_back(lambda t: F.adaptive_avg_pool2d(t, (0, 3)), x)
    assert out.shape == (1, 2, 0, 3)
    assert "an empty size" in reports[0].reasons["aten::_adaptive_avg_pool2d.default"]


def test_eval_batch_norm_returns_the_running_statistics_where_cuda_traces_them() -> None:
    # CUDA traces (C,) saved statistics for eval batch norm (the CPU traces empty ones), and its ATen backward
    # reads them: they must be the running mean and 1 / sqrt(running var + eps)
    from opgraph.core.types import TensorType
    from opgraph.frontends.torch.registry import ConvertContext, lookup

    g = og.Graph()
    x, rm, rv = g.placeholder((2, 3, 4), og.float32), g.placeholder((3,), og.float32), g.placeholder((3,), og.float32)
    c = TensorType((3,), og.float32)
    ctx = ConvertContext(g, [x.type, c, c])
    y, mean, invstd = lookup(aten._native_batch_norm_legit_no_training.default)(ctx, x, None, None, rm, rv, 0.1, 1e-5)
    xs, ms, vs = torch.randn(2, 3, 4), torch.randn(3), torch.rand(3) + 0.5
    got = g.run({x: xs, rm: ms, rv: vs}, [y, mean, invstd])
    torch.testing.assert_close(got[0], F.batch_norm(xs, ms, vs, eps=1e-5))
    torch.testing.assert_close(got[1], ms)
    torch.testing.assert_close(got[2], torch.rsqrt(vs + 1e-5))


def test_uneven_adaptive_max_pool_falls_back_with_the_reason() -> None:
    x = torch.randn(1, 2, 7, 7)
    out, reports = fell_back(lambda t: F.adaptive_max_pool2d(t, 3), x)
    torch.testing.assert_close(out, F.adaptive_max_pool2d(x, 3))
    assert fallbacks(reports) == {"aten::adaptive_max_pool2d.default": 1}
    assert "windows of different sizes" in reports[0].reasons["aten::adaptive_max_pool2d.default"]


# ---- batch normalisation -------------------------------------------------------------------------------------
BATCH_NORMS = {
    "2d": (lambda: nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4, momentum=0.3)), (4, 3, 3, 5)),
    "1d-no-affine": (lambda: nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5, affine=False)), (6, 3)),
    "no-running-stats": (lambda: nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4, track_running_stats=False)),
                         (2, 3, 4, 4)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(BATCH_NORMS))
def test_batch_norm_training(name: str, dtype: torch.dtype) -> None:
    make, shape = BATCH_NORMS[name]
    model = _seeded(make, dtype)
    check_training(model, torch.randn(*shape, dtype=dtype) * 3 + 1)  # buffers: the running mean and unbiased var
    check_training(model, torch.randn(*shape, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_eval(dtype: torch.dtype) -> None:
    model = _seeded(BATCH_NORMS["2d"][0], dtype)
    bn = model[1]
    assert isinstance(bn, nn.BatchNorm2d)
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
    model.eval()
    x = torch.randn(2, 3, 3, 5, dtype=dtype)
    check_inference(model, x)
    check_training(model, x)  # eval-mode batch norm inside a training graph


@pytest.mark.parametrize("train", [True, False])
def test_native_batch_norm_backward(train: bool) -> None:
    x = torch.randn(4, 3, 2, 5, dtype=torch.float64)
    gy, w = torch.randn_like(x), torch.randn(3, dtype=torch.float64)
    rm, rv = torch.randn(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64) + 0.5

    def fn(gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rm: torch.Tensor, rv: torch.Tensor) -> Any:
        _, mean, invstd = aten.native_batch_norm(x, w, None, None, None, True, 0.1, 1e-5)
        return aten.native_batch_norm_backward(gy, x, w, rm, rv, mean, invstd, train, 1e-5, [True, True, True])

    check_aten(fn, gy, x, w, rm, rv, op=aten.native_batch_norm_backward.default)


# ---- layer and group normalisation ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(affine: bool, dtype: torch.dtype) -> None:
    x = torch.randn(3, 4, 5, dtype=dtype)
    for shape in ([5], [4, 5]):
        check_inference(_seeded(lambda s=shape: nn.LayerNorm(s, elementwise_affine=affine), dtype), x)
        model = _seeded(lambda s=shape: nn.Sequential(nn.Linear(5, 5), nn.LayerNorm(s, elementwise_affine=affine)),
                        dtype)
        check_training(model, x)


def test_native_layer_norm_statistics_and_backward() -> None:
    x = torch.randn(2, 3, 4) * 2 + 1
    gy, w, b = torch.randn_like(x), torch.randn(3, 4), torch.randn(3, 4)
    check_aten(lambda x, w, b: aten.native_layer_norm(x, [3, 4], w, b, 1e-5), x, w, b,
               op=aten.native_layer_norm.default, rtol=1e-4, atol=1e-5)

    def fn(gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
        _, mean, rstd = aten.native_layer_norm(x, [3, 4], w, b, 1e-5)
        return aten.native_layer_norm_backward(gy, x, [3, 4], mean, rstd, w, b, [True, True, True])

    check_aten(fn, gy, x, w, b, op=aten.native_layer_norm_backward.default, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_group_norm(dtype: torch.dtype) -> None:
    x = torch.randn(3, 6, 2, 3, dtype=dtype)
    check_inference(_seeded(lambda: nn.GroupNorm(3, 6), dtype), x)
    check_training(_seeded(lambda: nn.Sequential(nn.Conv2d(6, 6, 1), nn.GroupNorm(2, 6)), dtype), x)
    check_aten(lambda x: aten.native_group_norm(x, None, None, 3, 6, 6, 3, 1e-5), x, op=aten.native_group_norm.default)


# ---- softmax -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax(log: bool, dtype: torch.dtype) -> None:
    x = torch.randn(3, 4, 5, dtype=dtype) * 3
    layer = nn.LogSoftmax if log else nn.Softmax
    for dim in (1, -1):
        check_inference(layer(dim), x)
        check_training(_seeded(lambda d=dim: nn.Sequential(nn.Linear(5, 5), layer(d)), dtype), x)
    y = torch.log_softmax(x, 0) if log else torch.softmax(x, 0)
    backward = aten._log_softmax_backward_data.default if log else aten._softmax_backward_data.default
    check_aten(lambda gy, y: backward(gy, y, 0, dtype), torch.randn_like(x), y, op=backward)


# ---- embedding -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding(dtype: torch.dtype) -> None:
    idx = torch.tensor([[1, 2, 3], [2, 6, 1]])
    check_inference(_seeded(lambda: nn.Embedding(7, 4, padding_idx=2), dtype), idx)
    check_training(_seeded(lambda: nn.Embedding(7, 4, padding_idx=2), dtype), idx)
    gy = torch.randn(2, 3, 4, dtype=dtype)
    for padding_idx, by_freq in ((2, False), (-1, True), (1, True)):
        check_aten(lambda g, i, p=padding_idx, f=by_freq: aten.embedding_dense_backward(g, i, 7, p, f), gy, idx,
                   op=aten.embedding_dense_backward.default)


# ---- dropout -------------------------------------------------------------------------------------------------
def test_dropout_in_eval_disappears_and_random_dropout_falls_back() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5))
    x = torch.randn(16, 4)
    check_inference(model.eval(), x)
    model.train()
    out, reports = fell_back(model, x)
    assert fallbacks(reports) == {"aten::native_dropout.default": 1}
    assert "random" in next(r for r in reports if r.fallbacks).reasons["aten::native_dropout.default"]
    full = model[0](x) * 2.0
    assert torch.all((out == 0) | torch.isclose(out, full)) and (out == 0).any()


def test_native_dropout_without_randomness() -> None:
    x = torch.randn(3, 4)
    for p, train in ((0.5, False), (0.0, True), (1.0, True)):
        check_aten(lambda t, p=p, train=train: aten.native_dropout(t, p, train), x, op=aten.native_dropout.default)


# ---- upsampling ----------------------------------------------------------------------------------------------
# (the .vec overloads are composite: traced, they become these)
UPSAMPLES: dict[str, tuple[Callable[[torch.Tensor], Any], Any]] = {
    "nearest-scale": (lambda x: aten.upsample_nearest2d(x, [6, 15], 2.0, 3.0), aten.upsample_nearest2d.default),
    "nearest-size": (lambda x: aten.upsample_nearest2d(x, [7, 4]), aten.upsample_nearest2d.default),
    "nearest-exact": (lambda x: aten._upsample_nearest_exact2d(x, [7, 4]), aten._upsample_nearest_exact2d.default),
    "bilinear-half-pixel": (lambda x: aten.upsample_bilinear2d(x, [7, 9], False), aten.upsample_bilinear2d.default),
    "bilinear-align-corners": (lambda x: aten.upsample_bilinear2d(x, [7, 9], True), aten.upsample_bilinear2d.default),
    "bilinear-scale": (lambda x: aten.upsample_bilinear2d(x, [6, 10], False, 2.0, 2.0),
                       aten.upsample_bilinear2d.default),
}


@pytest.mark.parametrize("name", list(UPSAMPLES))
def test_upsample(name: str) -> None:
    fn, op = UPSAMPLES[name]
    check_aten(fn, torch.randn(2, 3, 3, 5, dtype=torch.float64), op=op)


@pytest.mark.parametrize("size, scale", [((7, 7), 1.5), ((5, 82), None)])
def test_nearest_upsampling_that_pytorch_computes_inexactly_falls_back(size: tuple[int, int], scale: Any) -> None:
    # PyTorch reads pixel floor(d / 1.5), not floor(d * 5 / 7); from 2 to 82 its float32 d * (2 / 82) rounds down
    x = torch.randn(1, 1, 5, 2)
    fn = lambda t: aten.upsample_nearest2d(t, size, scale, scale)
    gm = make_fx(fn)(x)
    with recording() as reports:
        run = compile_fx(gm, [x], TorchOptions(warn_fallbacks=False))
    torch.testing.assert_close(run([x])[0], fn(x))
    assert fallbacks(reports) == {"aten::upsample_nearest2d.default": 1}
    assert "not exact" in reports[0].reasons["aten::upsample_nearest2d.default"]


# ---- attention -----------------------------------------------------------------------------------------------
def _flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
           scale: float | None) -> Any:
    return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=mask, scale=scale)


ATTENTION = {"plain": (None, False, None), "causal-scaled": (None, True, 0.3), "float-mask": ("mask", False, None),
             "masked-row-causal": ("masked-row", True, 0.5)}


@pytest.mark.parametrize("name", list(ATTENTION))
def test_cpu_flash_attention_forward_and_backward(name: str) -> None:
    kind, causal, scale = ATTENTION[name]
    torch.manual_seed(0)
    q, k, v, go = (torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(4))
    mask = torch.randn(5, 5, dtype=torch.float64)
    if kind == "masked-row":
        mask[2] = -math.inf  # a query that sees nothing: output, logsumexp and gradients 0
    m = mask if kind else None

    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        return _flash(q, k, v, m, causal, scale)

    def backward(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        out, lse = _flash(q, k, v, m, causal, scale)
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(go, q, k, v, out, lse, 0.0, causal,
                                                                         attn_mask=m, scale=scale)

    check_aten(forward, q, k, v, op=aten._scaled_dot_product_flash_attention_for_cpu.default)
    check_aten(backward, go, q, k, v, op=aten._scaled_dot_product_flash_attention_for_cpu_backward.default)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scaled_dot_product_attention_training(dtype: torch.dtype) -> None:
    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(8, 24)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    check_training(_seeded(Attention, dtype), torch.randn(2, 5, 8, dtype=dtype))


@pytest.mark.parametrize("vendor", [True, False], ids=["vendor", "spelled"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_inference_fast_path(norm_first: bool, activation: str, vendor: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """One ATen op: on the CPU PyTorch's fused call (transformer_encoder_layer), spelled with opgraph's ops where
    kernels are generated (here: fusion off)."""
    model = _seeded(lambda: nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, activation=activation,
                                                       batch_first=True, norm_first=norm_first)).eval()
    op = aten._transformer_encoder_layer_fwd.default  # nn.TransformerEncoderLayer's fast path: one ATen op
    calls = []
    converter = CONVERTERS[op]
    monkeypatch.setitem(CONVERTERS, op, lambda *args, **kwargs: calls.append(1) or converter(*args, **kwargs))
    with torch.no_grad():
        reports = check_inference(model, torch.randn(2, 5, 16), rtol=1e-4, atol=1e-5, options={"fusion": vendor})
    assert calls == [1]
    kernels = [k.op for r in reports for k in r.kernels]
    assert ("transformer_encoder_layer" in kernels) is vendor, kernels


def test_16_bit_models_keep_pytorchs_statistics_dtypes() -> None:
    # batch norm's saved and running statistics stay float32 for bfloat16 inputs, as PyTorch traces them
    def make() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.MaxPool2d(2), nn.AvgPool2d(2),
                             nn.Flatten(), nn.LayerNorm(16), nn.Softmax(-1))

    x = torch.randn(2, 3, 8, 8, dtype=torch.bfloat16)
    check_training(_seeded(make, torch.bfloat16), x, rtol=2e-2, atol=2e-2)
    check_inference(_seeded(make, torch.bfloat16).eval(), x, rtol=2e-2, atol=2e-2)


# ---- whole models --------------------------------------------------------------------------------------------
def _lenet(p: float) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(6, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AvgPool2d(2, ceil_mode=True),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(p), nn.Linear(8, 10))


@pytest.mark.parametrize("dtype", DTYPES)
def test_lenet(dtype: torch.dtype) -> None:
    x = torch.randn(4, 3, 12, 12, dtype=dtype)
    check_training(_seeded(lambda: _lenet(0.0), dtype), x)  # dropout 0: no randomness to compare
    check_inference(_seeded(lambda: _lenet(0.5), dtype).eval(), x)


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.down(x))


def _resnet() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                         _Block(8, 8, 1), _Block(8, 16, 2), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(),
                         nn.Linear(16, 5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_resnet_blocks(dtype: torch.dtype) -> None:
    x = torch.randn(4, 3, 12, 12, dtype=dtype)
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {}
    model = _seeded(_resnet, dtype)
    check_training(model, x, **tol)
    check_inference(model.eval(), x, **tol)


def test_transformer_encoder_layer() -> None:
    model = _seeded(lambda: nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True))
    x = torch.randn(2, 5, 16)
    check_training(model, x, rtol=1e-4, atol=1e-5)
    check_inference(model.eval(), x, rtol=1e-4, atol=1e-5)


class _LanguageModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.norm, self.head = nn.Embedding(20, 16, padding_idx=0), nn.LayerNorm(16), nn.Linear(16, 20)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.norm(self.embed(ids)))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=3)


def test_language_model_head_with_cross_entropy() -> None:
    torch.manual_seed(0)
    ids, targets = torch.randint(0, 20, (2, 6)), torch.randint(0, 20, (2, 6))
    ids[0, 0], targets[0, 1] = 0, 3  # a padding token and an ignored target
    check_training(_seeded(_LanguageModel), ids, targets, loss=lambda out: out)
    check_inference(_seeded(_LanguageModel).eval(), ids, targets)


def _transformers() -> Any:
    return pytest.importorskip("transformers")


def test_bert_tiny_inference() -> None:
    tf = _transformers()
    config = tf.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=16, attn_implementation="eager")
    model = _seeded(lambda: tf.BertModel(config)).eval()
    ids = torch.randint(0, 50, (2, 7))
    check_inference(lambda t: model(t).last_hidden_state, ids, rtol=1e-4, atol=1e-5)


def test_gpt2_tiny_inference() -> None:
    tf = _transformers()
    config = tf.GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=2, n_positions=16,
                           attn_implementation="eager")
    model = _seeded(lambda: tf.GPT2LMHeadModel(config)).eval()
    ids = torch.randint(0, 50, (2, 7))
    check_inference(lambda t: model(t).logits, ids, rtol=1e-4, atol=1e-5)


def test_bert_and_gpt2_tiny_training() -> None:
    tf = _transformers()
    bert = tf.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0, attn_implementation="eager")
    gpt2 = tf.GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=2, n_positions=16, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    ids = torch.randint(0, 50, (2, 7))
    check_training(_seeded(lambda: tf.BertModel(bert)), ids, rtol=1e-4, atol=1e-5,
                   loss=lambda out: out.last_hidden_state.square().mean())
    check_training(_seeded(lambda: tf.GPT2LMHeadModel(gpt2)), ids, rtol=1e-4, atol=1e-5,
                   loss=lambda out: out.logits.square().mean())
