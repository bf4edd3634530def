"""Converters of the sampling ops (converters/sampling.py) against eager PyTorch: grid_sampler_2d in every
interpolation x padding mode x align_corners, its backward (in training and as an ATen op), and col2im / im2col
(F.fold / F.unfold), which the default core-ATen table decomposes, on ATen graphs traced without decomposition.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from opgraph.frontends.torch import CONVERTERS, GraphReport, TorchOptions, compile_fx, recording
from opgraph.frontends.torch.fallback import qualified_name
from tests.frontends import torch_harness as harness
from tests.frontends.torch_harness import check_inference, check_training, compiled, fallbacks

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

aten = torch.ops.aten
DTYPES = [torch.float32, torch.float64]
MODES = ["bilinear", "nearest", "bicubic"]
PADDINGS = ["zeros", "border", "reflection"]
CODE = {"bilinear": 0, "nearest": 1, "bicubic": 2, "zeros": 0, "border": 1, "reflection": 2}


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return {"rtol": 1e-5, "atol": 2e-5} if dtype == torch.float32 else {"rtol": 1e-7, "atol": 1e-10}


def check_aten(fn: Callable[..., Any], *inputs: Any, op: Any, rtol: float = 1e-7, atol: float = 1e-10,
               oracle: Callable[..., Any] | None = None) -> None:
    """The harness's check with tight tolerances and an optional ``oracle`` (default ``fn``) run eagerly."""
    harness.check_aten(fn, *inputs, op=op, rtol=rtol, atol=atol, want=(oracle or fn)(*inputs))


def _grid(n: int, h: int, w: int, dtype: torch.dtype, reach: float = 1.7) -> torch.Tensor:
    """A random grid in [-reach, reach]: past [-1, 1] on both sides, so that every padding mode matters."""
    return (torch.rand(n, h, w, 2, dtype=dtype) * 2 - 1) * reach


def test_the_converters_are_registered() -> None:
    mine = {qualified_name(op) for op, fn in CONVERTERS.items() if fn.__module__.endswith("converters.sampling")}
    assert mine == {"aten::grid_sampler_2d.default", "aten::grid_sampler_2d_backward.default",
                    "aten::col2im.default", "aten::im2col.default"}


# ---- grid_sample ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
def test_grid_sample(mode: str, padding: str, align: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x, grid = torch.randn(2, 3, 5, 7, dtype=dtype), _grid(2, 4, 6, dtype)
    check_inference(lambda a, b: F.grid_sample(a, b, mode, padding, align), x, grid, **_tol(dtype))


@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_far_outside_one_pixel_and_non_finite_positions(align: bool) -> None:
    """Reflections over many spans, a 1-pixel axis (nothing to reflect in), NaN and infinite coordinates."""
    torch.manual_seed(0)
    x = torch.randn(1, 2, 1, 6, dtype=torch.float64)
    grid = _grid(1, 3, 8, torch.float64, reach=9.0)
    grid[0, 0, :4, 0] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e6])
    for mode, padding in itertools.product(MODES, PADDINGS):
        check_aten(lambda a, b, m=mode, p=padding: F.grid_sample(a, b, m, p, align), x, grid,
                   op=aten.grid_sampler_2d.default)


def test_nearest_rounds_half_to_even() -> None:
    # align_corners: pixel = (g + 1) * (size - 1) / 2; size 5: g = -0.25, 0.25, 0.75 land on 1.5, 2.5, 3.5
    x = torch.arange(25, dtype=torch.float32).reshape(1, 1, 5, 5)
    ties = torch.tensor([-0.75, -0.25, 0.25, 0.75])
    grid = torch.stack(torch.meshgrid(ties, ties, indexing="xy"), -1)[None]
    check_aten(lambda a, b: F.grid_sample(a, b, "nearest", "zeros", True), x, grid, op=aten.grid_sampler_2d.default,
               rtol=0, atol=0)
    # half-pixel centres: pixel = (g + 1) * size / 2 - 0.5; size 4: g = -0.5, 0, 0.5 land on 0.5, 1.5, 2.5
    x = torch.arange(16, dtype=torch.float32).reshape(1, 1, 4, 4)
    ties = torch.tensor([-0.5, 0.0, 0.5])
    grid = torch.stack(torch.meshgrid(ties, ties, indexing="xy"), -1)[None]
    check_aten(lambda a, b: F.grid_sample(a, b, "nearest", "border", False), x, grid, op=aten.grid_sampler_2d.default,
               rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_grid_sample_16_bit(dtype: torch.dtype) -> None:
    """16-bit images are sampled in float32 and rounded once: float32 PyTorch is the oracle (its 16-bit CPU kernel
    rounds positions to 16 bits on the way and can pick another pixel)."""
    torch.manual_seed(0)
    x, grid = torch.randn(2, 3, 5, 6, dtype=dtype), _grid(2, 4, 4, dtype)
    for mode in MODES:
        fn = lambda a, b, m=mode: F.grid_sample(a, b, m, "reflection", False)
        check_aten(fn, x, grid, op=aten.grid_sampler_2d.default, rtol=0, atol=0,
                   oracle=lambda a, b, f=fn: f(a.float(), b.float()).to(dtype))


@pytest.mark.parametrize("mask", [(True, True), (True, False), (False, True)])
def test_grid_sampler_backward_op(mask: tuple[bool, bool]) -> None:
    """The backward ATen op in every mode, float64: (d input, d grid); d input is None outside ``mask[0]``."""
    torch.manual_seed(0)
    x, grid = torch.randn(2, 3, 5, 6, dtype=torch.float64), _grid(2, 4, 3, torch.float64)
    gy = torch.randn(2, 3, 4, 3, dtype=torch.float64)
    for mode, padding, align in itertools.product(MODES, PADDINGS, (False, True)):
        def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, m: int = CODE[mode], p: int = CODE[padding],
               al: bool = align) -> list[torch.Tensor]:
            d_input, d_grid = aten.grid_sampler_2d_backward(a, b, c, m, p, al, list(mask))
            return [d_input, d_grid] if mask[0] else [d_grid]

        check_aten(fn, gy, x, grid, op=aten.grid_sampler_2d_backward.default)


class Warp(nn.Module):
    """A convolution's features sampled at a learnt offset from a fixed grid: both grid_sample inputs need a
    gradient (``image=False``: the raw input is sampled, only the grid does)."""

    def __init__(self, mode: str, padding: str, align: bool, image: bool = True) -> None:
        super().__init__()
        self.args, self.image = (mode, padding, align), image
        self.conv = nn.Conv2d(3, 4, 1)
        self.offset = nn.Parameter(torch.randn(1, 5, 7, 2) * 0.2)
        self.register_buffer("base", _grid(2, 5, 7, torch.float32, reach=1.3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mode, padding, align = self.args
        features = self.conv(x) if self.image else x
        return F.grid_sample(features, self.base + self.offset, mode, padding, align)


def _warp(*args: Any, **kwargs: Any) -> nn.Module:
    torch.manual_seed(0)
    return Warp(*args, **kwargs).double()


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
def test_grid_sample_training(mode: str, padding: str, align: bool) -> None:
    x = torch.randn(2, 3, 6, 8, dtype=torch.float64)
    check_training(_warp(mode, padding, align), x, rtol=1e-7, atol=1e-10)


def test_grid_sample_training_of_the_grid_alone_and_the_image_alone() -> None:
    x = torch.randn(2, 3, 6, 8, dtype=torch.float64)
    check_training(_warp("bilinear", "reflection", False, image=False), x, rtol=1e-7, atol=1e-10)
    model = _warp("bicubic", "border", True)
    model.offset.requires_grad_(False)
    check_training(model, x, rtol=1e-7, atol=1e-10)


# ---- col2im / im2col (F.fold / F.unfold) ---------------------------------------------------------------------
GEOMETRIES = {  # (output size, kernel, dilation, padding, stride)
    "plain": ((5, 6), (2, 3), 1, 0, 1),
    "padded-strided": ((5, 6), (2, 3), 1, 1, 2),
    "dilated": ((7, 8), (3, 2), (2, 1), (1, 0), (1, 3)),
    "stride-past-kernel": ((6, 7), 1, 1, 0, 3),  # pixels no window covers: 0 in fold
    "overlapping": ((6, 5), 3, 1, 2, 1),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_col2im_and_im2col(name: str, dtype: torch.dtype) -> None:
    size, kernel, dilation, padding, stride = GEOMETRIES[name]
    torch.manual_seed(0)
    x = torch.randn(2, 3, *size, dtype=dtype)
    cols = F.unfold(x, kernel, dilation, padding, stride)
    tol = _tol(dtype)
    fold = lambda c: aten.col2im(c, size, kernel, dilation, padding, stride)
    unfold = lambda t: aten.im2col(t, kernel, dilation, padding, stride)
    check_aten(fold, cols, op=aten.col2im.default, **tol)
    check_aten(fold, cols[1], op=aten.col2im.default, **tol)  # unbatched (C * kh * kw, L)
    check_aten(unfold, x, op=aten.im2col.default, **tol)
    check_aten(unfold, x[0], op=aten.im2col.default, **tol)
    check_aten(lambda t: F.fold(F.unfold(t, kernel, dilation, padding, stride), size, kernel, dilation, padding,
                                stride), x, op=aten.col2im.default, **tol)


def test_col2im_16_bit_sums_in_float32() -> None:
    cols = torch.randn(1, 2 * 9, 16, dtype=torch.bfloat16)
    fn = lambda c: aten.col2im(c, [6, 6], [3, 3], [1, 1], [0, 0], [1, 1])
    check_aten(fn, cols, op=aten.col2im.default, oracle=lambda c: fn(c.float()).to(c.dtype), rtol=1e-2, atol=1e-2)


# ---- fallbacks -----------------------------------------------------------------------------------------------
def _translate(fn: Callable[..., Any], *inputs: Any) -> tuple[list[Any], list[GraphReport]]:
    gm = make_fx(fn)(*inputs)
    with recording() as reports:
        run = compile_fx(gm, inputs, TorchOptions(warn_fallbacks=False))
    return run(list(inputs)), reports


def test_complex_fold_falls_back_with_the_reason() -> None:
    cols = torch.randn(1, 4, 4, dtype=torch.complex64)
    fn = lambda c: aten.col2im(c, [3, 3], [2, 2], [1, 1], [0, 0], [1, 1])
    out, reports = _translate(fn, cols)
    torch.testing.assert_close(out[0], fn(cols))
    assert fallbacks(reports) == {"aten::col2im.default": 1}
    assert "complex64" in reports[0].reasons["aten::col2im.default"]


def test_dynamic_batch_grid_sample_falls_back_with_the_reason() -> None:
    x, grid = torch.randn(3, 2, 4, 5), _grid(3, 2, 3, torch.float32)
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(grid, 0)
    fn = lambda a, b: F.grid_sample(a, b, "bilinear", "zeros", False)
    with recording() as reports, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        out = compiled(fn)(x, grid)
    torch.testing.assert_close(out, fn(x, grid))
    assert fallbacks(reports) == {"aten::grid_sampler_2d.default": 1}
    assert "dynamic sizes" in next(r for r in reports if r.fallbacks).reasons["aten::grid_sampler_2d.default"]
