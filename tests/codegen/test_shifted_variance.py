"""A generated variance (layer_norm, variance) sums x - c and (x - c)^2 at once, c the row's first element, and takes
the centred sum again where c lies far from the mean (``reductions.SHIFT_GUARD``). Rows whose first element is such
an outlier lose ~N float32 steps of the variance to cancellation without that guard; with it, every launch
configuration (in registers, walked in steps, split across programs) matches a float64 oracle as two passes do."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton.kernel import region_kernel, region_of  # noqa: E402
from opgraph.codegen.triton.region import Config  # noqa: E402
from tests.codegen.test_split_rows import _without_spin  # noqa: E402

ROWS, WIDTH = 3, 2048
CONFIGS = {
    "registers": Config(reduction=True, xblock=1, rblock=WIDTH, num_warps=4),
    "registers, 2 rows a program": Config(reduction=True, xblock=2, rblock=WIDTH, num_warps=4),
    "looped": Config(reduction=True, xblock=1, rblock=256, looped=True, num_warps=4),
    "split in registers": Config(reduction=True, xblock=1, rblock=WIDTH // 4, num_warps=4, split=4),
    "split, looped": Config(reduction=True, xblock=1, rblock=128, looped=True, num_warps=4, split=4),
}


def _rows() -> np.ndarray:
    """Row 0: a spike first (shift 1, mean ~1/N, spread ~1/sqrt(N)); row 1: ordinary; row 2: the spike elsewhere
    (its shift is ordinary)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, WIDTH)).astype(np.float32) * np.float32(1e-2)
    x[0, 0] = 1.0
    x[2, 5] = 1.0
    return x


def _oracle(kind: str, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    var = x64.var(axis=1, keepdims=True)
    if kind == "variance":
        return var
    return (x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(var + 1e-5)


@pytest.mark.parametrize("kind", ["layer_norm", "variance"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_row_whose_first_element_is_far_from_its_mean_keeps_its_variance(kind: str, name: str) -> None:
    g = og.Graph()
    x = g.placeholder((ROWS, WIDTH), og.float32)
    y = g.layer_norm(x, [1], epsilon=1e-5) if kind == "layer_norm" else g.variance(x, [1], keepdims=True)
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], config=CONFIGS[name])
    assert "if tl.max((m1" in kernel.source  # the guard is there
    xv = _rows()
    if CONFIGS[name].split > 1:  # the interpreter runs one program at a time (test_split_rows.py): a launch a
        kernel = _without_spin(kernel)  # meeting, each reading the partials its predecessor's parts all wrote
        for _ in range(2):
            kernel(torch.from_numpy(xv))
    (got,) = kernel(torch.from_numpy(xv))
    want = _oracle(kind, xv)
    err = np.abs(got.numpy().astype(np.float64) - want).max(axis=1) / np.abs(want).max(axis=1)
    # unguarded, row 0 was off by ~3e-4 (N float32 steps of E[(x - c)^2] ~ 1): 2e-6 is a few steps of the result
    assert (err < 2e-6).all(), err


def test_the_shift_does_not_matter_to_ordinary_rows() -> None:
    """Rows offset by 1e3 with a spread of 1 (the cancellation the shift exists for): exact without the guard's
    second pass, which only rows like row 0 above take."""
    g = og.Graph()
    x = g.placeholder((ROWS, WIDTH), og.float32)
    y = g.variance(x, [1], keepdims=True)
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], config=CONFIGS["looped"])
    xv = (np.random.default_rng(1).standard_normal((ROWS, WIDTH)) + 1e3).astype(np.float32)
    (got,) = kernel(torch.from_numpy(xv))
    np.testing.assert_allclose(got.numpy()[:, 0], xv.astype(np.float64).var(axis=1), rtol=1e-5)
