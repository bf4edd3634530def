"""Records for max pooling with indices: max_pool{2,4}d_return_indices in every
``og.PoolingReturnIndicesMode``, max_pool{2,4}d_gradient from those indices, max_pool{2,4}d_gather.

The oracle is a NumPy loop written from the definitions: a 2-D descriptor is a window over the 4
stored dims ((1, 1, kH, kW) over NCHW, (1, kH, kW, 1) over NHWC); the maximum is the first one in
window order among the source elements (-inf and index -1 when there are none); a global index
flattens the maximum's coordinates over the N innermost dims, a local one its window offset.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

import opgraph as og
from opgraph.ops import pooling_indices as pi
from opgraph.ops.conv import TensorLayout
from opgraph.ops.pooling import Pooling2dDescriptor, Pooling4dDescriptor

from .opinfo import ErrorCase, OpInfo, Sample, rand
from .records_conv import pad_pair
from .records_pooling import POOL2D_CASES, POOL4D_CASES, _out_size

M = og.PoolingReturnIndicesMode
P2, P4 = Pooling2dDescriptor, Pooling4dDescriptor
MODES = [m for m in M if m is not M.NONE]


# ---- oracle ------------------------------------------------------------------------------------
def _window(desc: Any) -> tuple[list[int], list[int], list[int], list[tuple[int, int]]]:
    """kernel, strides, dilations, explicit padding over the 4 innermost stored dims."""
    if isinstance(desc, Pooling4dDescriptor):
        v = desc.padding_values
        return (list(desc.kernel_sizes), list(desc.strides), list(desc.dilation_rates),
                [(v[2 * i], v[2 * i + 1]) for i in range(4)])
    k = [desc.kernel_height, desc.kernel_width]
    s = [desc.stride_in_y, desc.stride_in_x]
    r = [desc.dilation_rate_in_y, desc.dilation_rate_in_x]
    p = [(desc.padding_top, desc.padding_bottom), (desc.padding_left, desc.padding_right)]
    if desc.data_layout is TensorLayout.NHWC:
        return [1, *k, 1], [1, *s, 1], [1, *r, 1], [(0, 0), *p, (0, 0)]
    return [1, 1, *k], [1, 1, *s], [1, 1, *r], [(0, 0), (0, 0), *p]


def _geometry(desc: Any, sizes: tuple[int, ...]) -> tuple[Any, ...]:
    k, s, r, explicit = _window(desc)
    pads = [pad_pair(desc.padding_style, sizes[i], k[i], s[i], r[i], explicit[i]) for i in range(4)]
    outs = [_out_size(sizes[i], k[i], s[i], r[i], *pads[i], desc.ceil_mode) for i in range(4)]
    return k, s, r, pads, outs


def _flatten(values: list[int], extents: list[int]) -> int:
    out = 0
    for v, e in zip(values, extents, strict=True):
        out = out * e + v
    return out


def max_indices_oracle(x: Any, desc: Any) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x.float() if isinstance(x, torch.Tensor) else x, np.float64)
    sizes = x.shape[-4:]
    k, s, r, pads, outs = _geometry(desc, sizes)
    mode = desc.return_indices_mode
    n = (mode.value - 1) % 4 + 1
    local = mode.value > 4
    lead = x.shape[:-4]
    vals = np.full(lead + tuple(outs), -np.inf)
    idx = np.full(lead + tuple(outs), -1, np.int64)
    for b in np.ndindex(*lead):
        for o in np.ndindex(*outs):
            best, where = -np.inf, None
            for j in np.ndindex(*k):
                pos = [o[i] * s[i] - pads[i][0] + j[i] * r[i] for i in range(4)]
                if not all(0 <= pos[i] < sizes[i] for i in range(4)):
                    continue
                v = x[(*b, *pos)]
                if where is None or v > best:
                    best, where = v, (pos, j)
            vals[(*b, *o)] = best
            if where is not None:
                pos, j = where
                idx[(*b, *o)] = (_flatten(list(j[4 - n:]), k[4 - n:]) if local
                                 else _flatten(pos[4 - n:], list(sizes[4 - n:])))
    return vals, idx.astype(_NUMPY_INDEX[desc.return_indices_data_type])


_NUMPY_INDEX = {og.int64: np.int64, og.int32: np.int32, og.int16: np.int16, og.int8: np.int8}


def _locate(desc: Any, sizes: tuple[int, ...], o: tuple[int, ...], index: int) -> tuple[int, ...] | None:
    """The source position an index names in output position ``o`` (4 innermost dims), or None."""
    if index < 0:
        return None
    k, s, r, pads, _ = _geometry(desc, sizes)
    mode = desc.return_indices_mode
    n = (mode.value - 1) % 4 + 1
    pos = [o[i] * s[i] - pads[i][0] for i in range(4)]
    extents = k[4 - n:] if mode.value > 4 else list(sizes[4 - n:])
    if index >= math.prod(extents):
        return None
    parts = np.unravel_index(index, extents)
    for i, p in zip(range(4 - n, 4), parts, strict=True):
        pos[i] = pos[i] + int(p) * r[i] if mode.value > 4 else int(p)
    return tuple(pos) if all(0 <= pos[i] < sizes[i] for i in range(4)) else None


def scatter_oracle(gy: Any, indices: Any, *ref: Any, output_shape: tuple[int, ...], desc: Any) -> np.ndarray:
    gy = np.asarray(gy.float() if isinstance(gy, torch.Tensor) else gy, np.float64)
    dx = np.zeros(output_shape)
    sizes = tuple(output_shape[-4:])
    for full in np.ndindex(*gy.shape):
        pos = _locate(desc, sizes, full[-4:], int(indices[full]))
        if pos is not None:
            dx[(*full[:-4], *pos)] += gy[full]
    return dx


def gather_oracle(src: Any, indices: Any, desc: Any) -> np.ndarray:
    src = np.asarray(src.float() if isinstance(src, torch.Tensor) else src, np.float64)
    out = np.zeros(indices.shape)
    for full in np.ndindex(*indices.shape):
        pos = _locate(desc, src.shape[-4:], full[-4:], int(indices[full]))
        out[full] = 0.0 if pos is None else src[(*full[:-4], *pos)]
    return out


# ---- samples -----------------------------------------------------------------------------------
def _with(d: Any, mode: M, dtype: Any = og.int32) -> Any:
    return dataclasses.replace(d, return_indices_mode=mode, return_indices_data_type=dtype)


def _extra2d() -> list[tuple[str, Any, tuple[int, ...], Any]]:
    return [
        # windows entirely in the padding: value -inf, index -1
        ("f64-pad-beyond-window", P2(2, 2, 2, 2, padding_left=3, padding_top=2), (1, 2, 4, 5), np.float64),
        ("f32-kernel-1-row", P2(3, 1, stride_in_x=2, padding_left=1, padding_right=1), (2, 2, 3, 7), np.float32),
        # padding past half the kernel but within the dilated window: PyTorch refuses it, the generic path computes
        ("f64-dilated-pad-past-half-kernel", P2(2, 2, 2, 2, dilation_rate_in_x=3, dilation_rate_in_y=3, padding_left=2,
                                                padding_right=2, padding_top=2, padding_bottom=2), (1, 2, 7, 7),
         np.float64),
    ]


def _cases(two_d: bool) -> list[tuple[str, Any, tuple[int, ...], Any]]:
    return [*POOL2D_CASES, *_extra2d()] if two_d else list(POOL4D_CASES)


def _locating(d: Any) -> list[M]:
    k = _window(d)[0]
    return [m for m in MODES if all(v == 1 for v in k[:4 - ((m.value - 1) % 4 + 1)])]


def _ri_samples(two_d: bool) -> Any:
    def samples(rng: np.random.Generator) -> list[Sample]:
        out = []
        for n, (label, d, shape, dt) in enumerate(_cases(two_d)):
            modes = MODES if n < 2 else [MODES[n % 8], MODES[(n + 3) % 8]]
            for m in modes:
                idt = og.int64 if n % 2 else og.int32
                out.append(Sample([rand(rng, shape, dt)], {"desc": _with(d, m, idt)}, f"{label}-{m.name.lower()}"))
        for which in (0, 1):  # the first case fits PyTorch's kernel (2-D), the second does not
            d0, shape0 = _cases(two_d)[which][1:3]
            ties = rng.integers(-2, 3, shape0).astype(np.float32)  # many ties: the first maximum wins
            out.append(Sample([ties], {"desc": _with(d0, M.LOCAL_FLATTEN_4D)}, f"ties-first-wins-{which}"))
            neg = np.full(shape0, -np.inf, np.float32)  # all -inf: padding never wins over a source element
            out.append(Sample([neg], {"desc": _with(d0, M.GLOBAL_FLATTEN_4D)}, f"all-neg-inf-{which}"))
        if two_d:  # window offsets in 8 and 16 bits (what passes.pool_indices and the torch backend keep)
            d0, shape0, dt0 = _cases(True)[0][1:4]
            for idt in (og.int8, og.int16):
                out.append(Sample([rand(rng, shape0, dt0)], {"desc": _with(d0, M.LOCAL_FLATTEN_2D, idt)},
                                  f"window-offsets-{idt.name}"))
        return out

    return samples


def _scatter_samples(two_d: bool, gather: bool) -> Any:
    """(incoming gradient or source, indices[, shape reference]): indices made by the oracle."""

    def samples(rng: np.random.Generator) -> list[Sample]:
        out = []
        for n, (label, d, shape, dt) in enumerate(_cases(two_d)):
            modes = _locating(d)
            for m in modes if n < 2 else modes[n % len(modes):][:1]:
                dm = _with(d, m, og.int64 if n % 2 else og.int32)
                x = rand(rng, shape, dt)
                idx = max_indices_oracle(x, dm)[1]
                first = rand(rng, shape, dt) if gather else rand(rng, idx.shape, dt)
                ins = [first, idx]
                kw: dict[str, Any] = {"desc": dm}
                if not gather:
                    kw["output_shape"] = tuple(shape)
                    if n % 3 == 2:
                        ins.append(np.zeros(shape, np.float32))
                out.append(Sample(ins, kw, f"{label}-{m.name.lower()}" + ("-by-reference" if len(ins) > 2 else "")))
        if two_d:  # 8-bit window offsets, as the torch backend's training steps save them
            d0, shape0, dt0 = _cases(True)[0][1:4]
            dm = _with(d0, M.LOCAL_FLATTEN_2D, og.int8)
            x = rand(rng, shape0, dt0)
            idx = max_indices_oracle(x, dm)[1]
            first = rand(rng, shape0, dt0) if gather else rand(rng, idx.shape, dt0)
            kw = {"desc": dm} if gather else {"desc": dm, "output_shape": tuple(shape0)}
            out.append(Sample([first, idx], kw, "window-offsets-int8"))
        return out

    return samples


# ---- errors ------------------------------------------------------------------------------------
def _ph(g: og.Graph, shape: tuple[int, ...], dtype: Any = og.float32) -> og.Tensor:
    return g.placeholder(shape, dtype)


D2 = P2(2, 2, 2, 2, return_indices_mode=M.GLOBAL_FLATTEN_2D)
D4 = P4((1, 1, 2, 2), 2, return_indices_mode=M.LOCAL_FLATTEN_2D)
RI_ERRORS = [
    ErrorCase(lambda g: g.max_pool2d_return_indices(_ph(g, (1, 1, 4, 4)), P2(2, 2)), og.AttributeValueError,
              "NONE", "mode-none"),
    ErrorCase(lambda g: g.max_pool2d_return_indices(_ph(g, (1, 1, 4, 4), og.int32), D2), og.DTypeError, "int32",
              "int-source"),
    ErrorCase(lambda g: P2(2, 2, return_indices_data_type=og.float32), og.AttributeValueError,
              "return_indices_data_type", "float-index-dtype"),
    ErrorCase(lambda g: P2(2, 2, return_indices_mode=M.GLOBAL_FLATTEN_2D, return_indices_data_type=og.int8),
              og.AttributeValueError, "LOCAL_FLATTEN", "int8-global-index"),  # it would overflow silently
    ErrorCase(lambda g: P2(12, 12, return_indices_mode=M.LOCAL_FLATTEN_2D, return_indices_data_type=og.int8),
              og.AttributeValueError, "cannot hold the 144 offsets", "int8-offsets-of-a-big-window"),
    ErrorCase(lambda g: P4((1, 1, 2, 2), return_indices_mode=2), og.AttributeValueError,  # type: ignore[arg-type]
              "return_indices_mode", "int-mode"),
    ErrorCase(lambda g: g.max_pool2d_return_indices(_ph(g, (1, 1, 4, 4)), D4), og.AttributeValueError,
              "Pooling2dDescriptor", "wrong-descriptor"),
]
RI4_ERRORS = [
    ErrorCase(lambda g: g.max_pool4d_return_indices(_ph(g, (4, 4, 4)), D4), og.ShapeError, "rank >= 4", "rank"),
]
GRAD_ERRORS = [
    ErrorCase(lambda g: g.max_pool2d_gradient(_ph(g, (1, 1, 2, 2)), _ph(g, (1, 1, 2, 2), og.int32), (1, 1, 4, 4),
                                              P2(2, 2, 2, 2)), og.AttributeValueError, "NONE", "mode-none"),
    ErrorCase(lambda g: g.max_pool2d_gradient(_ph(g, (1, 1, 2, 2)), _ph(g, (1, 1, 2, 2), og.int32), (1, 1, 4, 4),
                                              _with(P2(2, 2, 2, 2), M.GLOBAL_FLATTEN_1D)),
              og.AttributeValueError, "cannot locate", "mode-too-narrow"),
    ErrorCase(lambda g: g.max_pool2d_gradient(_ph(g, (1, 1, 2, 2)), _ph(g, (1, 1, 2, 2)), (1, 1, 4, 4), D2),
              og.DTypeError, "integer", "float-indices"),
    ErrorCase(lambda g: g.max_pool2d_gradient(_ph(g, (1, 1, 2, 3)), _ph(g, (1, 1, 2, 3), og.int32), (1, 1, 4, 4),
                                              D2), og.ShapeError, "incoming gradient", "gradient-shape"),
    ErrorCase(lambda g: g.max_pool2d_gradient(_ph(g, (1, 1, 2, 2)), _ph(g, (1, 1, 2, 1), og.int32), (1, 1, 4, 4),
                                              D2), og.ShapeError, "indices", "indices-shape"),
    ErrorCase(lambda g: g.max_pool2d_gradient(_ph(g, (1, 1, 2, 2)), _ph(g, (1, 1, 2, 2), og.int32), (1, 4, 4),
                                              D2), og.ShapeError, "rank 4", "output_shape-rank"),
]
GATHER_ERRORS = [
    ErrorCase(lambda g: g.max_pool2d_gather(_ph(g, (1, 1, 4, 4)), _ph(g, (1, 1, 3, 2), og.int32), D2),
              og.ShapeError, "indices", "indices-shape"),
    ErrorCase(lambda g: g.max_pool4d_gather(_ph(g, (1, 1, 4, 4)), _ph(g, (1, 1, 2, 2), og.int32),
                                            _with(P4((1, 2, 2, 2), 2), M.LOCAL_FLATTEN_2D)),
              og.AttributeValueError, "cannot locate", "mode-too-narrow"),
]


def _ri_build(method: str) -> Any:
    return lambda g, x, desc: list(getattr(g, method)(x, desc))


def _scatter_build(method: str) -> Any:
    def build(g: og.Graph, gy: og.Tensor, idx: og.Tensor, *ref: og.Tensor, output_shape: tuple[int, ...],
              desc: Any) -> og.Tensor:
        return getattr(g, method)(gy, idx, ref[0] if ref else output_shape, desc)  # type: ignore[no-any-return]

    return build


RECORDS = [
    OpInfo("max_pool2d_return_indices", (pi.MAX_POOL2D_RETURN_INDICES,), _ri_build("max_pool2d_return_indices"),
           _ri_samples(True), max_indices_oracle, errors=RI_ERRORS, tol={torch.float16: (4e-3, 4e-3)}),
    OpInfo("max_pool4d_return_indices", (pi.MAX_POOL4D_RETURN_INDICES,), _ri_build("max_pool4d_return_indices"),
           _ri_samples(False), max_indices_oracle, errors=RI4_ERRORS, tol={torch.float16: (4e-3, 4e-3)}),
    OpInfo("max_pool2d_gradient", (pi.MAX_POOL2D_GRADIENT,), _scatter_build("max_pool2d_gradient"),
           _scatter_samples(True, False), scatter_oracle, errors=GRAD_ERRORS, tol={torch.float16: (4e-3, 4e-3)}),
    OpInfo("max_pool4d_gradient", (pi.MAX_POOL4D_GRADIENT,), _scatter_build("max_pool4d_gradient"),
           _scatter_samples(False, False), scatter_oracle, tol={torch.float16: (4e-3, 4e-3)}),
    OpInfo("max_pool2d_gather", (pi.MAX_POOL2D_GATHER,), lambda g, x, i, desc: g.max_pool2d_gather(x, i, desc),
           _scatter_samples(True, True), gather_oracle, errors=GATHER_ERRORS),
    OpInfo("max_pool4d_gather", (pi.MAX_POOL4D_GATHER,), lambda g, x, i, desc: g.max_pool4d_gather(x, i, desc),
           _scatter_samples(False, True), gather_oracle),
]
