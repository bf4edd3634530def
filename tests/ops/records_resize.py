"""Records for resize (nearest and bilinear).

The oracle is a plain loop over output pixels implementing TensorFlow 2's coordinate transforms
(align-corners, half-pixel, asymmetric) and rounding rules in float64. Where the semantics coincide
with ``torch.nn.functional.interpolate`` (bilinear with half-pixel or align-corners; nearest floor
asymmetric = "nearest"; nearest round-half-up half-pixel = "nearest-exact") the oracle also checks
itself against PyTorch, so the two references vouch for each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import opgraph as og
from opgraph.ops import resize as rs
from opgraph.ops._padding import TensorLayout
from opgraph.ops.resize import ResizeMode
from opgraph.ops.resize import ResizeNearestRoundingMode as RM

from .opinfo import ErrorCase, OpInfo, Sample, rand

BF16 = torch.bfloat16


def _round_to_odd(s: float) -> int:
    low = math.floor(s)
    if s - low == 0.5:
        return low if low % 2 else low + 1
    return math.floor(s + 0.5)


ROUNDING: dict[RM, Callable[[float], int]] = {
    RM.FLOOR: math.floor,
    RM.CEIL: math.ceil,
    RM.ROUND_PREFER_CEIL: lambda s: math.floor(s + 0.5),
    RM.ROUND_PREFER_FLOOR: lambda s: math.ceil(s - 0.5),
    RM.ROUND_TO_EVEN: round,  # Python rounds half to even
    RM.ROUND_TO_ODD: _round_to_odd,
}


def source_coord(d: int, n_in: int, n_out: int, center_result: bool, align_corners: bool) -> float:
    if align_corners:
        return d * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    if center_result:
        return (d + 0.5) * n_in / n_out - 0.5
    return d * n_in / n_out


def np_resize(x: np.ndarray, size: tuple[int, int], mode: ResizeMode, center_result: bool = True,
              align_corners: bool = False, data_layout: TensorLayout = TensorLayout.NCHW,
              nearest_rounding_mode: RM = RM.ROUND_PREFER_CEIL) -> np.ndarray:
    h_ax, w_ax = data_layout.name.index("H"), data_layout.name.index("W")
    floating = x.dtype.kind == "f"
    img = np.moveaxis(x.astype(np.float64) if floating else x, (h_ax, w_ax), (-2, -1))
    (n_h, n_w), (m_h, m_w) = img.shape[-2:], size
    out = np.zeros(img.shape[:-2] + (m_h, m_w), img.dtype)
    coords_h = [source_coord(i, n_h, m_h, center_result, align_corners) for i in range(m_h)]
    coords_w = [source_coord(j, n_w, m_w, center_result, align_corners) for j in range(m_w)]
    for i, sy in enumerate(coords_h):
        for j, sx in enumerate(coords_w):
            if mode is ResizeMode.NEAREST:
                rnd = ROUNDING[nearest_rounding_mode]
                yi, xi = min(max(rnd(sy), 0), n_h - 1), min(max(rnd(sx), 0), n_w - 1)
                out[..., i, j] = img[..., yi, xi]
                continue
            # TensorFlow's bilinear: clamp the two taps into the image, lerp by the fractional part
            y0, x0 = max(math.floor(sy), 0), max(math.floor(sx), 0)
            y1, x1 = min(math.ceil(sy), n_h - 1), min(math.ceil(sx), n_w - 1)
            ly, lx = sy - math.floor(sy), sx - math.floor(sx)
            top = img[..., y0, x0] + (img[..., y0, x1] - img[..., y0, x0]) * lx
            bottom = img[..., y1, x0] + (img[..., y1, x1] - img[..., y1, x0]) * lx
            out[..., i, j] = top + (bottom - top) * ly
    _check_against_torch(img, out, size, mode, center_result, align_corners, nearest_rounding_mode)
    return np.moveaxis(out, (-2, -1), (h_ax, w_ax))


def _check_against_torch(img: np.ndarray, want: np.ndarray, size: tuple[int, int], mode: ResizeMode,
                         center_result: bool, align_corners: bool, rounding: RM) -> None:
    if img.dtype != np.float64 or img.size == 0:
        return
    t = torch.from_numpy(img).reshape((-1,) + img.shape[-3:])  # interpolate wants (N, C, H, W)
    if mode is ResizeMode.BILINEAR and (center_result or align_corners):
        ref = F.interpolate(t, size=size, mode="bilinear", align_corners=align_corners)
    elif mode is ResizeMode.NEAREST and not align_corners and not center_result and rounding is RM.FLOOR:
        ref = F.interpolate(t, size=size, mode="nearest")
    elif mode is ResizeMode.NEAREST and not align_corners and center_result and rounding is RM.ROUND_PREFER_CEIL:
        ref = F.interpolate(t, size=size, mode="nearest-exact")
    else:
        return
    np.testing.assert_allclose(want, ref.numpy().reshape(want.shape), rtol=1e-6, atol=1e-6,
                               err_msg="oracle disagrees with F.interpolate")


# ---- samples ---------------------------------------------------------------------------------
def _kw(size: tuple[int, int], mode: ResizeMode, center: bool = True, align: bool = False,
        layout: TensorLayout = TensorLayout.NCHW, rounding: RM | None = None) -> dict[str, Any]:
    kw: dict[str, Any] = {"size": size, "mode": mode, "center_result": center, "align_corners": align,
                          "data_layout": layout}
    if rounding is not None:
        kw["nearest_rounding_mode"] = rounding
    return kw


def _bilinear_samples(rng: np.random.Generator) -> list[Sample]:
    B, L = ResizeMode.BILINEAR, TensorLayout
    return [
        Sample([rand(rng, (2, 3, 4, 5))], _kw((7, 9), B), "f32-half-pixel-up"),
        Sample([rand(rng, (1, 2, 6, 8))], _kw((3, 5), B), "f32-half-pixel-down"),
        Sample([rand(rng, (2, 2, 4, 5), np.float64)], _kw((7, 3), B, center=False, align=True), "f64-align"),
        Sample([rand(rng, (1, 2, 4, 5), np.float64)], _kw((1, 1), B, center=False, align=True), "f64-align-to-1"),
        Sample([rand(rng, (1, 2, 4, 5), np.float64)], _kw((6, 7), B, center=True, align=True), "align-beats-center"),
        Sample([rand(rng, (1, 2, 3, 4))], _kw((7, 6), B, center=False), "f32-asymmetric-up"),
        Sample([rand(rng, (2, 1, 7, 6), np.float64)], _kw((3, 4), B, center=False), "f64-asymmetric-down"),
        Sample([rand(rng, (2, 4, 5, 3), np.float16)], _kw((8, 6), B, layout=L.NHWC), "f16-nhwc-half-pixel"),
        Sample([rand(rng, (1, 3, 4, 5), BF16)], _kw((2, 7), B, center=False, align=True), "bf16-align"),
        Sample([rand(rng, (2, 4, 5, 3))], _kw((6, 2), B, center=False, layout=L.NHWC), "f32-nhwc-asymmetric"),
        Sample([rand(rng, (1, 6, 4, 3), BF16)], _kw((3, 5), B, center=False), "bf16-asymmetric"),
        Sample([rand(rng, (2, 3, 5, 3), np.float16)], _kw((4, 4), B, center=False, layout=L.NHWC), "f16-nhwc-asym"),
        Sample([rand(rng, (0, 2, 3, 3))], _kw((5, 4), B), "empty-batch"),
        Sample([rand(rng, (1, 1, 4, 4))], _kw((4, 4), B, center=False), "same-size"),
    ]


def _nearest_samples(rng: np.random.Generator) -> list[Sample]:
    N, L = ResizeMode.NEAREST, TensorLayout
    out = []
    # H 4 -> 2 (half-pixel ties at 0.5, 2.5), 4 -> 3 (align-corners tie at 1.5), W 3 -> 6 (asymmetric ties)
    for rounding in RM:
        for center, align, size in ((True, False, (2, 6)), (False, False, (2, 6)), (False, True, (3, 6))):
            label = "align" if align else "half-pixel" if center else "asymmetric"
            out.append(Sample([rand(rng, (1, 2, 4, 3))], _kw(size, N, center, align, rounding=rounding),
                              f"{rounding.name.lower()}-{label}"))
    out += [
        Sample([rand(rng, (2, 3, 5, 4), np.float64)], _kw((9, 3), N, rounding=RM.ROUND_PREFER_CEIL), "f64-up-down"),
        Sample([rand(rng, (2, 5, 4, 3), np.float16)], _kw((3, 7), N, layout=L.NHWC), "f16-nhwc"),
        Sample([rand(rng, (1, 3, 4, 5), BF16)], _kw((8, 2), N, center=False, rounding=RM.FLOOR), "bf16-floor"),
        Sample([rand(rng, (2, 3, 4, 4), np.int32, -50, 50)], _kw((8, 8), N, center=False, rounding=RM.FLOOR), "i32"),
        Sample([rand(rng, (1, 4, 5, 2), np.bool_)], _kw((3, 9), N, layout=L.NHWC), "bool-nhwc"),
        Sample([rand(rng, (1, 2, 3, 3), np.float64)], _kw((7, 5), N, center=False, align=True,
                                                          rounding=RM.ROUND_TO_ODD, layout=L.NHWC), "f64-nhwc-align"),
        Sample([rand(rng, (0, 2, 3, 3))], _kw((5, 4), N), "empty-batch"),
    ]
    return out


# ---- gradients -------------------------------------------------------------------------------
def np_resize_grad(gy: np.ndarray, x: np.ndarray, size: tuple[int, int], mode: ResizeMode, center_result: bool = True,
                   align_corners: bool = False, data_layout: TensorLayout = TensorLayout.NCHW,
                   nearest_rounding_mode: RM = RM.ROUND_PREFER_CEIL) -> np.ndarray:
    """d sum(resize(x) * gy) / dx: each output pixel's gradient sent back to the pixels it read."""
    h_ax, w_ax = data_layout.name.index("H"), data_layout.name.index("W")
    g = np.moveaxis(gy.astype(np.float64), (h_ax, w_ax), (-2, -1))
    n_h, n_w = x.shape[h_ax], x.shape[w_ax]
    dx = np.zeros(g.shape[:-2] + (n_h, n_w))
    for i in range(size[0]):
        sy = source_coord(i, n_h, size[0], center_result, align_corners)
        for j in range(size[1]):
            sx = source_coord(j, n_w, size[1], center_result, align_corners)
            if mode is ResizeMode.NEAREST:
                rnd = ROUNDING[nearest_rounding_mode]
                dx[..., min(max(rnd(sy), 0), n_h - 1), min(max(rnd(sx), 0), n_w - 1)] += g[..., i, j]
                continue
            y0, x0 = max(math.floor(sy), 0), max(math.floor(sx), 0)
            y1, x1 = min(math.ceil(sy), n_h - 1), min(math.ceil(sx), n_w - 1)
            ly, lx = sy - math.floor(sy), sx - math.floor(sx)
            for yy, wy in ((y0, 1 - ly), (y1, ly)):
                for xx, wx in ((x0, 1 - lx), (x1, lx)):
                    dx[..., yy, xx] += g[..., i, j] * wy * wx
    return np.moveaxis(dx, (-2, -1), (h_ax, w_ax))


def _gradient_samples(forward: Callable[[np.random.Generator], list[Sample]]) -> Callable[..., list[Sample]]:
    """(incoming gradient, input) for each floating forward sample."""

    def samples(rng: np.random.Generator) -> list[Sample]:
        out = []
        for s in forward(rng):
            x = s.inputs[0]
            dt = x.dtype if isinstance(x, torch.Tensor) else np.asarray(x).dtype
            if not (dt == BF16 or np.dtype(dt).kind == "f"):
                continue
            shape = list(x.shape)
            layout = s.kwargs["data_layout"]
            shape[layout.name.index("H")], shape[layout.name.index("W")] = s.kwargs["size"]
            out.append(Sample([rand(rng, tuple(shape), dt), x], s.kwargs, s.desc))
        return out

    return samples


def _gradient_build(method: str) -> Callable[..., og.Tensor]:
    def build(g: og.Graph, gy: og.Tensor, x: og.Tensor, size: Any, mode: Any, **kw: Any) -> og.Tensor:
        return getattr(g, method)(gy, x, size=size, **kw)  # type: ignore[no-any-return]

    return build


def _gradient_oracle(gy: np.ndarray, x: np.ndarray, **kw: Any) -> np.ndarray:
    return np_resize_grad(np.asarray(gy, np.float64), np.asarray(x), **kw)


# ---- error cases -----------------------------------------------------------------------------
def _img(g: og.Graph, shape: tuple[int | None, ...] = (1, 2, 4, 4), dtype: og.DType = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


B, N = ResizeMode.BILINEAR, ResizeMode.NEAREST
ERRORS_BILINEAR = [
    ErrorCase(lambda g: g.resize(_img(g), (0, 3), B), og.AttributeValueError, "size", "zero-size"),
    ErrorCase(lambda g: g.resize(_img(g), (2, 3, 4), B), og.AttributeValueError, "size", "three-sizes"),
    ErrorCase(lambda g: g.resize(_img(g), (2.5, 3), B), og.AttributeValueError, "size", "float-size"),
    ErrorCase(lambda g: g.resize(_img(g), 4, B), og.AttributeValueError, "size", "int-size"),
    ErrorCase(lambda g: g.resize(_img(g), (2, 2), "bilinear"), og.AttributeValueError, "ResizeMode", "str-mode"),
    ErrorCase(lambda g: g.resize(_img(g), (2, 2), B, data_layout="NCHW"), og.AttributeValueError, "data_layout",
              "str-layout"),
    ErrorCase(lambda g: g.resize(_img(g), (2, 2), B, align_corners=1), og.AttributeValueError, "align_corners",
              "int-flag"),
    ErrorCase(lambda g: g.resize(_img(g, (2, 4, 4)), (2, 2), B), og.ShapeError, "rank 4", "rank3-nchw"),
    ErrorCase(lambda g: g.resize(_img(g, (1, 2, 3, 4, 4)), (2, 2), B, data_layout=TensorLayout.NCDHW),
              og.AttributeValueError, "data_layout", "3d-layout"),
    ErrorCase(lambda g: g.resize(_img(g, (1, 2, 0, 4)), (2, 2), B), og.ShapeError, "empty H", "empty-spatial"),
    ErrorCase(lambda g: g.resize(_img(g, dtype=og.int32), (2, 2), B), og.DTypeError, "int32", "int"),
    ErrorCase(lambda g: g.resize(_img(g, dtype=og.complex64), (2, 2), B), og.DTypeError, "complex64", "complex"),
]
ERRORS_NEAREST = [
    ErrorCase(lambda g: g.resize(_img(g), (3, -1), N), og.AttributeValueError, "size", "negative-size"),
    ErrorCase(lambda g: g.resize(_img(g), (2, 2), N, nearest_rounding_mode="floor"), og.AttributeValueError,
              "nearest_rounding_mode", "str-rounding"),
    ErrorCase(lambda g: g.resize_nearest(_img(g), (2, 2), data_layout=ResizeMode.NEAREST), og.AttributeValueError,
              "data_layout", "wrong-enum"),
    ErrorCase(lambda g: g.resize_nearest(_img(g, (1, 3, 0, 4)), (2, 2), data_layout=TensorLayout.NHWC),
              og.ShapeError, "empty W", "empty-spatial"),
    ErrorCase(lambda g: g.resize_nearest(_img(g, dtype=og.int4), (2, 2)), og.DTypeError, "int4", "packed"),
]

ERRORS_GRADIENT = [
    ErrorCase(lambda g: g.resize_bilinear_gradient(_img(g, (1, 2, 3, 3)), _img(g, (1, 3, 4, 4))), og.ShapeError,
              "incoming gradient", "gradient-shape"),
    ErrorCase(lambda g: g.resize_bilinear_gradient(_img(g, (1, 2, None, 3)), _img(g)), og.ShapeError, "pass size",
              "dynamic-size"),
    ErrorCase(lambda g: g.resize_nearest_gradient(_img(g, (1, 2, 3, 3), og.int32), _img(g)), og.DTypeError, "int32",
              "int-gradient"),
    ErrorCase(lambda g: g.resize_nearest_gradient(_img(g, (2, 3, 3)), _img(g)), og.ShapeError, "rank 4",
              "gradient-rank"),
]

RECORDS = [
    OpInfo("resize_bilinear", (rs.RESIZE_BILINEAR,), lambda g, x, **kw: g.resize(x, **kw), _bilinear_samples,
           np_resize, errors=ERRORS_BILINEAR),
    OpInfo("resize_nearest", (rs.RESIZE_NEAREST,), lambda g, x, **kw: g.resize(x, **kw), _nearest_samples,
           np_resize, errors=ERRORS_NEAREST),
    OpInfo("resize_bilinear_gradient", (rs.RESIZE_BILINEAR_GRADIENT,), _gradient_build("resize_bilinear_gradient"),
           _gradient_samples(_bilinear_samples), _gradient_oracle, errors=ERRORS_GRADIENT),
    OpInfo("resize_nearest_gradient", (rs.RESIZE_NEAREST_GRADIENT,), _gradient_build("resize_nearest_gradient"),
           _gradient_samples(_nearest_samples), _gradient_oracle),
]
