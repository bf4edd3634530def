# mypy: allow-untyped-defs
"""``@triton.jit`` helpers that generated kernels import: math that ``tl`` lacks.

Under Triton's interpreter (``TRITON_INTERPRET=1``, where libdevice is unavailable) they are written with
the primitives ``tl`` has (exp, log, sqrt, floor, erf ...), with formulas chosen for accuracy near zero
(Kahan's expm1/log1p) and at the ends of the range. Compiled for a GPU, the transcendental ones are
libdevice's and bfloat16 rounding is the conversion instruction (the sources stay the same).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

_PI = 3.141592653589793
_LN2 = 0.6931471805599453


if os.environ.get("TRITON_INTERPRET") == "1":
    @triton.jit
    def og_to_bf16(x):
        # float32 -> bfloat16 rounding to nearest even by hand: Triton's interpreter truncates instead
        u = x.to(tl.uint32, bitcast=True)
        u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
        r = tl.where(x != x, x, u.to(tl.float32, bitcast=True))
        return r.to(tl.bfloat16)
else:
    @triton.jit
    def og_to_bf16(x):
        # on a GPU the conversion instruction rounds to nearest even itself (and costs one instruction)
        return x.to(tl.bfloat16)


@triton.jit
def og_signbit(x):
    # true for negative numbers and -0.0 (1 / -0.0 == -inf); false for NaN
    return (x < 0) | ((x == 0) & ((1.0 / x) < 0))


@triton.jit
def og_trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def og_rint(x):
    # round half to even; x - floor(x) is exact, so ties are found exactly
    f = tl.floor(x)
    d = x - f
    even = tl.floor(f * 0.5) * 2.0 == f
    return tl.where(d > 0.5, f + 1.0, tl.where(d < 0.5, f, tl.where(even, f, f + 1.0)))


@triton.jit
def og_round_half_away(x):
    t = og_trunc(x)
    s = tl.where(x < 0, -1.0, 1.0)
    return tl.where(tl.abs(x - t) >= 0.5, t + s, t)


@triton.jit
def og_expm1(x):
    # Kahan: (u - 1) * x / log(u) cancels the rounding error of u = exp(x)
    u = tl.exp(x)
    um1 = u - 1.0
    r = um1 * (x / tl.log(u))
    r = tl.where(um1 == -1.0, -1.0, r)
    return tl.where(u == 1.0, x, tl.where(u == float("inf"), u, r))


@triton.jit
def og_log1p(x):
    u = x + 1.0
    r = tl.log(u) * (x / (u - 1.0))
    return tl.where(u == 1.0, x, tl.where(u == float("inf"), u, r))


@triton.jit
def og_tanh(x):
    e = og_expm1(-2.0 * tl.abs(x))
    t = -e / (e + 2.0)
    return tl.where(x < 0, -t, t)


@triton.jit
def og_sinh(x):
    ax = tl.abs(x)
    e = og_expm1(ax)
    small = 0.5 * (e + e / (e + 1.0))
    h = tl.exp(ax - _LN2)  # exp(|x|) / 2 without overflowing early
    r = tl.where(ax < 1.0, small, h - 0.25 / h)
    return tl.where(x < 0, -r, r)


@triton.jit
def og_cosh(x):
    h = tl.exp(tl.abs(x) - _LN2)
    return h + 0.25 / h


@triton.jit
def og_atan(x):
    # Cephes atanf: reduce |x| to [0, tan(pi/8)], then an odd polynomial (float32 accuracy)
    ax = tl.abs(x)
    big = ax > 2.414213562373095
    mid = ax > 0.4142135623730950
    y0 = tl.where(big, _PI / 2, tl.where(mid, _PI / 4, 0.0))
    t = tl.where(big, -1.0 / ax, tl.where(mid, (ax - 1.0) / (ax + 1.0), ax))
    z = t * t
    p = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t
    r = y0 + p
    return tl.where(x < 0, -r, r)


@triton.jit
def og_atan2(y, x):
    a = og_atan(y / x)
    ys = og_signbit(y)
    r = tl.where(x < 0, tl.where(ys, a - _PI, a + _PI), a)
    r = tl.where((x == 0) & (y != 0), tl.where(ys, -_PI / 2, _PI / 2), r)
    r = tl.where(y == 0, tl.where(og_signbit(x), tl.where(ys, -_PI, _PI), y), r)
    both_inf = (tl.abs(x) == float("inf")) & (tl.abs(y) == float("inf"))
    q = tl.where(x > 0, _PI / 4, 3 * _PI / 4)
    r = tl.where(both_inf, tl.where(ys, -q, q), r)
    return tl.where((x != x) | (y != y), x + y, r)


@triton.jit
def og_asin(x):
    return og_atan(x / tl.sqrt((1.0 - x) * (1.0 + x)))


@triton.jit
def og_acos(x):
    return 2.0 * og_atan(tl.sqrt((1.0 - x) / (1.0 + x)))


@triton.jit
def og_asinh(x):
    ax = tl.abs(x)
    x2 = ax * ax
    r = og_log1p(ax + x2 / (1.0 + tl.sqrt(1.0 + x2)))
    r = tl.where(ax > 1e10, tl.log(ax) + _LN2, r)
    return tl.where(x < 0, -r, r)


@triton.jit
def og_acosh(x):
    t = x - 1.0
    r = og_log1p(t + tl.sqrt(t * (t + 2.0)))
    return tl.where(x > 1e10, tl.log(x) + _LN2, r)


@triton.jit
def og_atanh(x):
    ax = tl.abs(x)
    r = 0.5 * og_log1p(2.0 * ax / (1.0 - ax))
    return tl.where(x < 0, -r, r)


@triton.jit
def og_powf(x, y):
    ax = tl.abs(x)
    r = tl.exp2(y * tl.log2(ax))
    integral = tl.floor(y) == y
    odd = integral & (tl.floor(y * 0.5) * 2.0 != y)
    r = tl.where(og_signbit(x) & odd, -r, r)
    r = tl.where((x < 0) & (integral == 0) & (ax != float("inf")), float("nan"), r)  # fractional power of x < 0
    r = tl.where((ax == 1.0) & (tl.abs(y) == float("inf")), 1.0, r)
    return tl.where((y == 0) | (x == 1.0), 1.0, r)


@triton.jit
def og_powi(x, y, NBITS: tl.constexpr):
    # negative exponents as torch: 1, +-1 or 0
    neg = tl.where(x == 1, 1, tl.where(x == -1, tl.where((y & 1) != 0, -1, 1), 0))
    return tl.where(y < 0, neg, og_powu(x, y, NBITS))


@triton.jit
def og_powu(x, y, NBITS: tl.constexpr):
    # square and multiply over the exponent's bits
    r = x * 0 + 1
    b = x
    e = y
    for _ in tl.static_range(NBITS):
        r = tl.where((e & 1) != 0, r * b, r)
        b = b * b
        e = e >> 1
    return r


@triton.jit
def og_popcount(v):
    # SWAR on an int64 whose high bits were masked off by the caller (bit 63 stays clear)
    v = v - ((v >> 1) & 0x5555555555555555)
    v = (v & 0x3333333333333333) + ((v >> 2) & 0x3333333333333333)
    v = (v + (v >> 4)) & 0x0F0F0F0F0F0F0F0F
    return ((v * 0x0101010101010101) >> 56) & 0xFF


@triton.jit
def og_mul(a, b):
    # the combine function of product reductions (tl.reduce)
    return a * b


if os.environ.get("TRITON_INTERPRET") != "1":  # compiled for a GPU: libdevice's versions (accurate, and cheaper)
    from triton.language.extra import libdevice

    for _name in ("tanh", "expm1", "log1p", "sinh", "cosh", "atan", "atan2", "asin", "acos", "asinh", "acosh",
                  "atanh"):
        globals()[f"og_{_name}"] = getattr(libdevice, _name)

    @triton.jit
    def og_tanh_bf16(x):
        # tanh.approx.f32 (sm_75+; bfloat16 kernels need sm_80): one special-function instruction, relative error
        # 2^-11, under bfloat16's rounding error (2^-9 to 2^-8). libdevice's tanh made the bfloat16 chains
        # math-bound (RESULTS.md, eighteenth session).
        return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True,
                                         pack=1)

    @triton.jit
    def og_cluster_sync(token):
        # every program of the thread-block cluster arrives (releasing its writes) and waits (acquiring theirs);
        # ``token`` comes back through the asm, so loads addressed with it stay after the barrier
        return tl.inline_asm_elementwise("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;\n\t"
                                         "mov.u32 $0, $1;", "=r,r", [token], dtype=tl.int32, is_pure=False, pack=1)
else:
    og_tanh_bf16 = og_tanh  # the interpreter runs no PTX: the exact formula

    @triton.jit
    def og_cluster_sync(token):
        # the interpreter runs one program at a time: no cluster to wait for (tests launch again per barrier)
        return token
