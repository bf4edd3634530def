"""Second derivatives (gradients of gradients) and forward mode (``jvp``) through the elementwise rules.

Closed forms in NumPy for a few ops; Hessian-vector products of many elementwise ops against central
finite differences of the first gradient; ``g.jvp`` of a composite against finite differences; and the
conventions (ties, kinks, NaNs, zero divisors) that finite differences cannot see.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import opgraph as og

Build = Callable[[og.Graph, og.Tensor, og.Tensor], og.Tensor]


def _rng(key: str) -> np.random.Generator:
    """A generator per test (and parameter), so values do not depend on which tests run."""
    return np.random.default_rng(zlib.crc32(key.encode()))


def _t(v: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(v, dtype=np.float64))


def _run(g: og.Graph, feeds: dict[og.Tensor, Any], outs: list[og.Tensor]) -> list[np.ndarray]:
    return [r.numpy() for r in g.run({k: _t(v) for k, v in feeds.items()}, outs)]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


# ---- second derivatives of unary ops against closed forms ------------------------------------------
UNARY: dict[str, tuple[Callable[..., Any], Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "exp": (lambda g, x: g.exp(x), np.exp, np.exp),
    "sin": (lambda g, x: g.sin(x), np.cos, lambda x: -np.sin(x)),
    "tanh": (lambda g, x: g.tanh(x), lambda x: 1 - np.tanh(x) ** 2,
             lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
    "sigmoid": (lambda g, x: g.sigmoid(x), lambda x: _sigmoid(x) * (1 - _sigmoid(x)),
                lambda x: _sigmoid(x) * (1 - _sigmoid(x)) * (1 - 2 * _sigmoid(x))),
    "log": (lambda g, x: g.log(x), lambda x: 1 / x, lambda x: -1 / x**2),
    "sqrt": (lambda g, x: g.sqrt(x), lambda x: 0.5 / np.sqrt(x), lambda x: -0.25 * x**-1.5),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_second_derivative_of_unary(name: str) -> None:
    build, d1, d2 = UNARY[name]
    g = og.Graph()
    x = g.placeholder((7,), og.float64)
    dx = g.gradients(g.reduce_sum(build(g, x)), [x])[x]
    ddx = g.gradients(g.reduce_sum(dx), [x])[x]  # elementwise: the diagonal of the Hessian
    xv = _rng(name).uniform(0.2, 2.5, 7)
    got1, got2 = _run(g, {x: xv}, [dx, ddx])
    np.testing.assert_allclose(got1, d1(xv), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got2, d2(xv), rtol=1e-12, atol=1e-12)


def test_third_derivative_of_exp() -> None:
    g = og.Graph()
    x = g.placeholder((4,), og.float64)
    d = g.exp(x)
    for _ in range(3):
        d = g.gradients(g.reduce_sum(d), [x])[x]
    xv = _rng("exp3").uniform(-2, 2, 4)
    np.testing.assert_allclose(_run(g, {x: xv}, [d])[0], np.exp(xv), rtol=1e-12)


def test_second_derivatives_of_multiply() -> None:
    # L = sum(x * x * y): dL/dx = 2xy, dL/dy = x^2; d/dx sum(2xy) = 2y, d/dy sum(2xy) = 2x, d/dx sum(x^2) = 2x
    g = og.Graph()
    x, y = g.placeholder((2, 3), og.float64), g.placeholder((3,), og.float64)  # y broadcasts
    grads = g.gradients(g.reduce_sum(x * x * y), [x, y])
    gx, gy = grads[x], grads[y]
    second = g.gradients(g.reduce_sum(gx), [x, y])
    gyx = g.gradients(g.reduce_sum(gy), [x])[x]
    rng = _rng("multiply")
    xv, yv = rng.uniform(-2, 2, (2, 3)), rng.uniform(-2, 2, 3)
    got = _run(g, {x: xv, y: yv}, [gx, gy, second[x], second[y], gyx])
    np.testing.assert_allclose(got[0], 2 * xv * yv, rtol=1e-12)
    np.testing.assert_allclose(got[1], (xv * xv).sum(0), rtol=1e-12)
    np.testing.assert_allclose(got[2], np.broadcast_to(2 * yv, (2, 3)), rtol=1e-12)
    np.testing.assert_allclose(got[3], (2 * xv).sum(0), rtol=1e-12)
    np.testing.assert_allclose(got[4], 2 * xv, rtol=1e-12)


def test_second_derivatives_of_power() -> None:
    g = og.Graph()
    x, y = g.placeholder((5,), og.float64), g.placeholder((5,), og.float64)
    first = g.gradients(g.reduce_sum(x**y), [x, y])
    dxx, dxy = (g.gradients(g.reduce_sum(first[x]), [x, y])[t] for t in (x, y))
    dyy = g.gradients(g.reduce_sum(first[y]), [y])[y]
    rng = _rng("power")
    xv, yv = rng.uniform(0.3, 3, 5), rng.uniform(-2, 3, 5)
    got = _run(g, {x: xv, y: yv}, [first[x], first[y], dxx, dxy, dyy])
    log = np.log(xv)
    np.testing.assert_allclose(got[0], yv * xv ** (yv - 1), rtol=1e-12)
    np.testing.assert_allclose(got[1], xv**yv * log, rtol=1e-12)
    np.testing.assert_allclose(got[2], yv * (yv - 1) * xv ** (yv - 2), rtol=1e-12)
    np.testing.assert_allclose(got[3], xv ** (yv - 1) * (1 + yv * log), rtol=1e-12)
    np.testing.assert_allclose(got[4], xv**yv * log**2, rtol=1e-12)


# ---- Hessian-vector products against finite differences of the gradient ------------------------------
# (build, x range, y range): every op's rule is differentiated once more; domains stay off kinks
def _away(low: float, high: float, *kinks: float) -> tuple[float, float, tuple[float, ...]]:
    return low, high, kinks


HVP: dict[str, tuple[Build, tuple[float, float, tuple[float, ...]], tuple[float, float, tuple[float, ...]]]] = {
    "exp2-log2-log10": (lambda g, x, y: g.exp2(x) * g.log2(y) + g.log10(y * x * x), _away(0.2, 2), _away(0.5, 3)),
    "rsqrt-reciprocal-square": (lambda g, x, y: g.rsqrt(x) * g.reciprocal(y) + g.square(x * y), _away(0.2, 2),
                                _away(0.5, 3)),
    "trig": (lambda g, x, y: g.cos(x) * g.tan(y) + g.sin(x * y), _away(-2, 2), _away(-1.2, 1.2)),
    "inverse-trig": (lambda g, x, y: g.asin(x) * g.acos(y) + g.atan(x * y), _away(-0.9, 0.9), _away(-0.9, 0.9)),
    "hyperbolic": (lambda g, x, y: g.sinh(x) * g.cosh(y) + g.tanh(x * y), _away(-2, 2), _away(-2, 2)),
    "inverse-hyperbolic": (lambda g, x, y: g.asinh(x) * g.acosh(y) + g.atanh(x * 0.3), _away(-2, 2), _away(1.2, 3)),
    "erf-abs-sign": (lambda g, x, y: g.erf(x * y) * g.abs(x) + g.sign(y) * x, _away(-2, 2, 0.0), _away(-2, 2, 0.0)),
    "divide-power": (lambda g, x, y: g.divide(x, y) + g.power(y, x) + g.division_no_nan(y, x), _away(-2, 2, 0.0),
                     _away(0.5, 2)),
    "atan2": (lambda g, x, y: g.atan2(x, y) * x, _away(-2, 2), _away(-2, 2, 0.0)),
    "max-min": (lambda g, x, y: g.maximum(x * x, y) * g.minimum_with_nan_propagation(x, y * y), _away(-2, 2),
                _away(-2, 2)),
    "modulo": (lambda g, x, y: g.modulo(x * x, y) * g.floor_modulo(x, y), _away(-3, 3), _away(0.7, 2)),
    "select-clamp": (lambda g, x, y: g.select(x > 0, x * y, y * y) + g.clamp(x * y, -1.0, 1.0) * x,
                     _away(-2, 2, 0.0), _away(-2, 2)),
    "relu-family": (lambda g, x, y: g.relu(x) * y + g.relu6(x * y) * x + g.leaky_relu(x, 0.1) * g.elu(y, 0.7),
                    _away(-3, 3, 0.0), _away(-3, 3, 0.0)),
    "gelu": (lambda g, x, y: g.gelu(x * y) + g.gelu(x, approximate=True) * y, _away(-3, 3), _away(-3, 3)),
    "smooth-activations": (lambda g, x, y: g.silu(x) * g.sigmoid(y) + g.softplus(x * y, 2.0) + g.mish(x)
                           + g.softsign(y) * x, _away(-3, 3, 0.0), _away(-3, 3, 0.0)),
    "hard_sigmoid": (lambda g, x, y: g.hard_sigmoid(x) * y * y, _away(-4, 4), _away(-2, 2)),
}


def _sample(rng: np.random.Generator, low: float, high: float, kinks: tuple[float, ...],
            shape: tuple[int, ...]) -> np.ndarray:
    v = rng.uniform(low, high, shape)
    for k in kinks:
        v = np.where(np.abs(v - k) < 0.1, k + 0.2, v)
    return v


@pytest.mark.parametrize("name", list(HVP))
def test_hessian_vector_product_matches_finite_differences(name: str) -> None:
    build, xdom, ydom = HVP[name]
    g = og.Graph()
    x, y = g.placeholder((6,), og.float64), g.placeholder((6,), og.float64)
    vx, vy = g.placeholder((6,), og.float64), g.placeholder((6,), og.float64)
    first = g.gradients(g.reduce_sum(build(g, x, y)), [x, y])
    inner = g.reduce_sum(first[x] * vx) + g.reduce_sum(first[y] * vy)
    hvp = g.gradients(inner, [x, y])
    rng = _rng(name)
    xv, yv = _sample(rng, *xdom, (6,)), _sample(rng, *ydom, (6,))
    dx, dy = rng.uniform(-1, 1, 6), rng.uniform(-1, 1, 6)
    got = _run(g, {x: xv, y: yv, vx: dx, vy: dy}, [hvp[x], hvp[y]])
    eps = 1e-5
    up = _run(g, {x: xv + eps * dx, y: yv + eps * dy}, [first[x], first[y]])
    down = _run(g, {x: xv - eps * dx, y: yv - eps * dy}, [first[x], first[y]])
    for k in range(2):
        np.testing.assert_allclose(got[k], (up[k] - down[k]) / (2 * eps), rtol=1e-5, atol=1e-6, err_msg=name)


# ---- forward mode ------------------------------------------------------------------------------------
def test_jvp_of_composite_matches_finite_differences() -> None:
    g = og.Graph()
    x, w = g.placeholder((3, 4), og.float64), g.placeholder((4,), og.float64)
    tx, tw = g.placeholder((3, 4), og.float64), g.placeholder((4,), og.float64)
    h = g.tanh(x * w + g.sin(x)) * g.sigmoid(w)
    out1 = g.gelu(h) + g.exp(g.clamp(h, -0.5, 0.5)) * g.power(g.softplus(x), w)
    out2 = g.maximum(x, w) / (1.0 + x * x)
    jx = g.jvp([out1, out2], [x, w], [tx, tw])
    rng = _rng("jvp")
    xv, wv = rng.uniform(-2, 2, (3, 4)), rng.uniform(-1.5, 1.5, 4)
    txv, twv = rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, 4)
    got = _run(g, {x: xv, w: wv, tx: txv, tw: twv}, jx)
    eps = 1e-6
    up = _run(g, {x: xv + eps * txv, w: wv + eps * twv}, [out1, out2])
    down = _run(g, {x: xv - eps * txv, w: wv - eps * twv}, [out1, out2])
    for k in range(2):
        np.testing.assert_allclose(got[k], (up[k] - down[k]) / (2 * eps), rtol=1e-6, atol=1e-8)


def test_jvp_of_gradient_is_hessian_vector_product() -> None:
    # forward over reverse: jvp of dL/dx = H t; for L = sum(exp(x) * sin(x)), H is diagonal
    g = og.Graph()
    x, t = g.placeholder((5,), og.float64), g.placeholder((5,), og.float64)
    dx = g.gradients(g.reduce_sum(g.exp(x) * g.sin(x)), [x])[x]
    (hv,) = g.jvp([dx], [x], [t])
    rng = _rng("jvp-hvp")
    xv, tv = rng.uniform(-2, 2, 5), rng.uniform(-1, 1, 5)
    np.testing.assert_allclose(_run(g, {x: xv, t: tv}, [hv])[0], 2 * np.exp(xv) * np.cos(xv) * tv, rtol=1e-12)


# ---- conventions where finite differences say nothing --------------------------------------------------
def _grads(build: Build, xv: Any, yv: Any) -> list[np.ndarray]:
    g = og.Graph()
    x, y = g.placeholder((len(xv),), og.float64), g.placeholder((len(yv),), og.float64)
    grads = g.gradients(g.reduce_sum(build(g, x, y)), [x, y])
    return _run(g, {x: xv, y: yv}, [grads[x], grads[y]])


def test_maximum_minimum_ties_and_nans() -> None:
    nan = np.nan
    x, y = [1.0, nan, 2.0, nan], [1.0, 3.0, nan, nan]
    gx, gy = _grads(lambda g, a, b: g.maximum(a, b), x, y)  # NaN is ignored: its partner gets the gradient
    assert gx.tolist()[:3] == [1.0, 0.0, 1.0] and gy.tolist()[:3] == [0.0, 1.0, 0.0]
    gx, gy = _grads(lambda g, a, b: g.minimum_with_nan_propagation(a, b), x, y)  # NaN wins: it gets it
    assert gx.tolist()[:3] == [1.0, 1.0, 0.0] and gy.tolist()[:3] == [0.0, 0.0, 1.0]


def test_power_at_nonpositive_base() -> None:
    # d/dx = y x^(y-1) (0 where y == 0); d/dy taken as 0 where x <= 0 (x^y has no real derivative in y there)
    gx, gy = _grads(lambda g, a, b: g.power(a, b), [-2.0, 0.0, 0.0, 3.0], [3.0, 2.0, 0.0, 0.0])
    np.testing.assert_allclose(gx, [12.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(gy, [0.0, 0.0, 0.0, np.log(3.0)])


def test_kinks_and_zero_divisors() -> None:
    z = [0.0, 0.0]
    assert _grads(lambda g, a, b: g.relu(a) + g.abs(b), z, z)[0].tolist() == [0.0, 0.0]
    assert _grads(lambda g, a, b: g.relu(a) + g.abs(b), z, z)[1].tolist() == [0.0, 0.0]
    assert _grads(lambda g, a, b: g.leaky_relu(a, 0.1) + g.sign(b), z, z)[0].tolist() == [1.0, 1.0]
    gx, gy = _grads(lambda g, a, b: g.division_no_nan(a, b), [3.0, 3.0], [0.0, 2.0])
    assert gx.tolist() == [0.0, 0.5] and gy.tolist() == [0.0, -0.75]
    # clamp(x, lo, hi): ties go to x; crossed bounds (lo > hi) give hi everything
    gx, glo = _grads(lambda g, a, b: g.clamp(a, b, 1.0), [0.5, 1.0, -1.0, 0.0], [0.5, 0.0, 0.0, 2.0])
    assert gx.tolist() == [1.0, 1.0, 0.0, 0.0] and glo.tolist() == [0.0, 0.0, 1.0, 0.0]


def test_a_gradient_through_a_non_differentiable_float_op_raises() -> None:
    import pytest

    g = og.Graph()
    w = g.variable(torch.ones(3), name="w")
    from opgraph.frontends.torch.fallback import TORCH_FALLBACK, FallbackAttrs

    out = g._add_op(TORCH_FALLBACK, [g.multiply(w, 2.0)],
                    FallbackAttrs("aten::tanh.default", '[[{"in": 0}], {}]', ((3,),), (og.float32,))).outputs[0]
    with pytest.raises(og.GraphError, match="torch_fallback is not differentiable"):
        g.gradients(g.reduce_sum(out), [w])
