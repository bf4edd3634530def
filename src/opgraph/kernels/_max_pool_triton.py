"""The Triton kernels of ``opgraph.kernels.max_pool`` (imported on first use: Triton is an optional dependency).

Both walk a tile of BLOCK_P positions (n, h, w flattened) x BLOCK_C channels; offsets are 32-bit (the caller keeps
tensors under 2**31 elements). An index is PyTorch's ``h * W + w``, or with ``LOCAL`` the maximum's offset in its
window, ``i * KW + j`` (small enough for 8 bits: an eighth of the bytes to store and read back).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _tile(P, C, H, W, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """This program's positions (n, h, w) of an (N, H, W) grid and its channels, and which of them exist."""
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    inside = (p < P)[:, None] & (c < C)[None, :]
    return p // (W * H), (p // W) % H, p % W, c, inside


@triton.jit
def max_pool2d_forward(x_ptr, y_ptr, i_ptr, P, C, H, W, OH, OW,
                       sxn, sxc, sxh, sxw, syn, syc, syh, syw,
                       KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                       PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                       WIDE: tl.constexpr, LOCAL: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    n, oh, ow, c, inside = _tile(P, C, OH, OW, BLOCK_P, BLOCK_C)
    hs = oh * SH - PH
    ws = ow * SW - PW
    # PyTorch's argmax starts at the window's first element inside the image (kept by a window of -inf)
    h0 = tl.where(hs < 0, hs + ((DH - 1 - hs) // DH) * DH, hs)
    w0 = tl.where(ws < 0, ws + ((DW - 1 - ws) // DW) * DW, ws)
    # compared in float32 (float64 for float64): exact for every stored dtype
    best = tl.full((BLOCK_P, BLOCK_C), float("-inf"), tl.float64 if WIDE else tl.float32)
    if LOCAL:
        where = tl.broadcast_to((((h0 - hs) // DH) * KW + (w0 - ws) // DW)[:, None], (BLOCK_P, BLOCK_C))
    else:
        where = tl.broadcast_to((h0 * W + w0)[:, None], (BLOCK_P, BLOCK_C))
    base = (n * sxn)[:, None] + (c * sxc)[None, :]
    for kh in tl.static_range(KH):
        ih = hs + kh * DH
        for kw in tl.static_range(KW):
            iw = ws + kw * DW
            ok = ((ih >= 0) & (ih < H) & (iw >= 0) & (iw < W))[:, None] & inside
            v = tl.load(x_ptr + base + (ih * sxh + iw * sxw)[:, None], mask=ok, other=float("-inf")).to(best.dtype)
            take = ok & ((v > best) | (v != v))  # the first maximum; a NaN, and then each later NaN
            best = tl.where(take, v, best)
            if LOCAL:  # noqa: SIM108 (a constexpr branch: one compiled away)
                where = tl.where(take, kh * KW + kw, where)
            else:
                where = tl.where(take, (ih * W + iw)[:, None], where)
    out = (n * syn + oh * syh + ow * syw)[:, None] + (c * syc)[None, :]
    tl.store(y_ptr + out, best.to(y_ptr.dtype.element_ty), mask=inside)
    tl.store(i_ptr + out, where.to(i_ptr.dtype.element_ty), mask=inside)


@triton.jit
def max_pool2d_backward(g_ptr, i_ptr, dx_ptr, P, C, H, W, OH, OW,
                        sgn, sgc, sgh, sgw, sin, sic, sih, siw, sdn, sdc, sdh, sdw,
                        KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                        PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                        RH: tl.constexpr, RW: tl.constexpr, WIDE: tl.constexpr, LOCAL: tl.constexpr,
                        BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    n, h, w, c, inside = _tile(P, C, H, W, BLOCK_P, BLOCK_C)
    # the windows covering (h, w): output rows first_h .. last_h (at most RH of them), PyTorch's p_start / p_end
    span_h, span_w = (KH - 1) * DH + 1, (KW - 1) * DW + 1
    first_h = tl.where(h + PH < span_h, 0, (h + PH - span_h) // SH + 1)
    first_w = tl.where(w + PW < span_w, 0, (w + PW - span_w) // SW + 1)
    last_h = tl.minimum((h + PH) // SH + 1, OH)
    last_w = tl.minimum((w + PW) // SW + 1, OW)
    me = (h * W + w)[:, None]
    acc = tl.zeros((BLOCK_P, BLOCK_C), tl.float64 if WIDE else tl.float32)  # float64 sums in float64
    for a in tl.static_range(RH):
        oh = first_h + a
        for b in tl.static_range(RW):
            ow = first_w + b
            ok = ((oh < last_h) & (ow < last_w))[:, None] & inside
            if LOCAL:  # this element's offset in the window of (oh, ow); none off the dilated grid
                dh_, dw_ = h - (oh * SH - PH), w - (ow * SW - PW)
                me = tl.where((dh_ % DH == 0) & (dw_ % DW == 0), (dh_ // DH) * KW + dw_ // DW, -2)[:, None]
            idx = tl.load(i_ptr + (n * sin + oh * sih + ow * siw)[:, None] + (c * sic)[None, :], mask=ok, other=-1)
            # loaded under the window mask (vector loads), kept where the index names this element
            g = tl.load(g_ptr + (n * sgn + oh * sgh + ow * sgw)[:, None] + (c * sgc)[None, :], mask=ok, other=0.0)
            acc += tl.where(ok & (idx == me), g.to(acc.dtype), 0.0)
    out = (n * sdn + h * sdh + w * sdw)[:, None] + (c * sdc)[None, :]
    tl.store(dx_ptr + out, acc.to(dx_ptr.dtype.element_ty), mask=inside)
