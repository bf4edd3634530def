"""Where a bfloat16 ``tanh`` takes the hardware approximation (relative error 2^-11): only where that error stays
small and relative up to the kernel's stores. A difference or a sum that may cancel downstream (``1 + tanh`` of
GELU's tanh form, ``1 - t * t`` of the gradients of tanh, GELU and Mish, ``exp(t) - 2``), an exponential of a large
argument or a cast to an integer would make it a large error of the result, so those kernels keep libdevice's tanh.
The generated sources are checked (the GPU test checks the values)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.autodiff.vjp import vjp  # noqa: E402
from opgraph.codegen.triton.kernel import region_kernel, region_of  # noqa: E402


def _source(build: Callable[[og.Graph, og.Tensor, og.Tensor], og.Tensor], dt: og.DType = og.bfloat16) -> str:
    g = og.Graph()
    x, y = g.placeholder((1024,), dt), g.placeholder((1024,), dt)
    out = build(g, x, y)
    ops, ins = region_of([out])
    source = region_kernel(ops, ins, [out]).source
    assert source is not None
    return source


def _gradient(forward: Callable[[og.Graph, og.Tensor], og.Tensor]) -> Callable[..., og.Tensor]:
    def build(g: og.Graph, x: og.Tensor, ct: og.Tensor) -> og.Tensor:
        (dx,) = vjp(g, [forward(g, x)], [ct], [x])
        return dx
    return build


APPROXIMATED = {
    # fusion.py's chain of eight: tanh scaled, then exponentiated (a positive result, relative error)
    "chain_8": lambda g, x, y: g.sigmoid(g.maximum(g.exp(g.tanh(x * 0.5 + y) * 1.5), y)) + 0.25,
    "stored": lambda g, x, y: g.tanh(x * 2.0),
    "scaled_and_picked": lambda g, x, y: g.maximum(g.tanh(x + y) * y, y * 0.5),
    "positive_sum": lambda g, x, y: g.exp(g.tanh(x) * 2.0) + 1.0,  # terms >= 0: nothing cancels
}
EXACT = {
    "one_plus_tanh": lambda g, x, y: 0.5 * x * (1.0 + g.tanh(0.79788456 * (x + 0.044715 * x * x * x))),
    "tanh_gradient": _gradient(lambda g, x: g.tanh(x * 1.0)),
    "gelu_tanh_gradient": _gradient(lambda g, x: g.gelu(x, True)),
    "mish_gradient": _gradient(lambda g, x: g.mish(x)),
    "row_of_tanh_summed": lambda g, x, y: g.reduce_sum(g.tanh(g.reshape(x + y, (32, 32))), [1]),
    # found by the review: differences after an exponential, magnified arguments, a cast to an integer
    "exp_minus_two": lambda g, x, y: g.exp(g.tanh(x)) - 2.0,
    "difference_of_exps": lambda g, x, y: g.exp(g.tanh(x)) - g.exp(g.tanh(y)),
    "difference_of_sigmoids": lambda g, x, y: g.sigmoid(g.tanh(x)) - g.sigmoid(g.tanh(y)),
    "exp_of_thirty_tanh": lambda g, x, y: g.exp(g.tanh(x) * 30.0),
    "soft_capped_gate": lambda g, x, y: g.sigmoid(g.tanh(x * (1 / 30)) * 30.0),
    "quantised": lambda g, x, y: g.cast(g.tanh(x) * 127.0, og.int8),
}


@pytest.mark.parametrize("name", sorted(APPROXIMATED))
def test_tanh_is_approximated_where_its_error_stays_relative(name: str) -> None:
    assert "og_tanh_bf16(" in _source(APPROXIMATED[name])
    assert "og_tanh_bf16(" not in _source(APPROXIMATED[name], og.float32)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_tanh_stays_exact_where_a_sum_would_cancel_its_error(name: str) -> None:
    source = _source(EXACT[name])
    assert "og_tanh_bf16(" not in source and "og_tanh(" in source
