"""A generated variance (layer_norm, variance) sums x - c and (x - c)^2 at once, c the row's first element, and takes
the centred sum again where c lies far from the mean (``reductions.SHIFT_GUARD``). Rows whose first element is such
an outlier lose ~N float32 steps of the variance to cancellation without that guard; with it, every launch
configuration (in registers, walked in steps, split across programs) matches a float64 oracle as two passes do."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton.kernel import RegionKernel, region_kernel, region_of  # noqa: E402
from opgraph.codegen.triton.region import Config  # noqa: E402
from tests.codegen.test_split_rows import SPIN, _without_spin  # noqa: E402

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
    assert "if tl.max(((var" in kernel.source  # the guard is there
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


def _unguarded(kernel: RegionKernel) -> RegionKernel:
    """The kernel with its guard's branch never taken: what the shift alone gives."""
    source, guards = re.subn(r"if tl\.max\(\(\(var", "if False and tl.max(((var", kernel.source)
    assert guards == 1, kernel.source
    return dataclasses.replace(kernel, source=source, _fn=None, _launches={}, _workspaces={})


@pytest.mark.parametrize("name", ["registers", "looped"])
def test_the_shift_alone_keeps_an_offset_rows_variance(name: str) -> None:
    """Rows offset by 1e3 with a spread of 1 (the cancellation the shift is for): exact with the guard's branch cut
    out, so no test above passes only because the branch rescued a missing or wrong shift."""
    g = og.Graph()
    x = g.placeholder((ROWS, WIDTH), og.float32)
    y = g.variance(x, [1], keepdims=True)
    ops, ins = region_of([y])
    kernel = _unguarded(region_kernel(ops, ins, [y], config=CONFIGS[name]))
    xv = (np.random.default_rng(1).standard_normal((ROWS, WIDTH)) + 1e3).astype(np.float32)
    (got,) = kernel(torch.from_numpy(xv))
    np.testing.assert_allclose(got.numpy()[:, 0], xv.astype(np.float64).var(axis=1), rtol=1e-5)


@pytest.mark.parametrize("looped", [False, True])
def test_a_column_statistic_whose_first_rows_are_far_from_the_mean(looped: bool) -> None:
    """A batch norm's statistics over (N, H, W) of NHWC: columns in tiles of 8, walked in steps of 16 rows or held
    whole; one column's first row a spike, another's first 16 rows offset (the first step's mean, the looped
    tile's shift, far from the column's). Each matches float64; with the guard cut out, the looped tile's
    first-step shift still holds the spiked column (the one-element shift would not)."""
    g = og.Graph()
    x = g.placeholder((4, 8, 8, 16), og.float32)
    y = g.variance(x, [0, 1, 2], keepdims=True)
    ops, ins = region_of([y])
    config = (Config(reduction=True, xblock=8, rblock=16, looped=True, num_warps=4) if looped else
              Config(reduction=True, xblock=8, rblock=256, num_warps=4))
    kernel = region_kernel(ops, ins, [y], config=config)
    if looped:  # the first step (the shift), the sums, the guard's walk: each once
        assert kernel.source.count("for start") == 3, kernel.source
    rng = np.random.default_rng(2)
    xv = (rng.standard_normal((4, 8, 8, 16)) * 1e-2).astype(np.float32)
    xv[0, 0, 0, 3] = 1.0
    xv.reshape(256, 16)[:16, 5] += 1.0
    want = xv.astype(np.float64).reshape(256, 16).var(axis=0)
    (got,) = kernel(torch.from_numpy(xv))
    np.testing.assert_allclose(got.numpy().reshape(16), want, rtol=2e-6)
    if looped:
        (got,) = _unguarded(kernel)(torch.from_numpy(xv))
        np.testing.assert_allclose(got.numpy().reshape(16)[3], want[3], rtol=2e-6)


def test_squares_that_overflow_give_inf_and_a_nan_stays() -> None:
    """[1e30, 1, 1, 1]: the squares overflow float32, so the variance is inf (the guard's centred sum; the shifted
    sums alone gave inf - inf); a row with a NaN gives NaN."""
    g = og.Graph()
    x = g.placeholder((3, 4), og.float32)
    y = g.variance(x, [1], keepdims=True)
    ops, ins = region_of([y])
    xv = torch.tensor([[1e30, 1.0, 1.0, 1.0], [1.0, float("nan"), 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]])
    for config in (CONFIGS["registers"], CONFIGS["looped"]):
        (got,) = region_kernel(ops, ins, [y], config=dataclasses.replace(config, rblock=4))(xv)
        torch.testing.assert_close(got[:, 0], xv.var(dim=1, unbiased=False), equal_nan=True)


def test_a_persistent_layer_norm_may_write_over_its_input() -> None:
    """The shift is the row's first element, read by the row's own program before it stores: the output may still
    take the input's buffer (the planner's in-place pairs)."""
    g = og.Graph()
    x = g.placeholder((ROWS, WIDTH), og.float32)
    y = g.layer_norm(x, [1], epsilon=1e-5)
    ops, ins = region_of([y])
    for name in ("registers", "looped"):
        assert region_kernel(ops, ins, [y], config=CONFIGS[name]).inplace_ok == frozenset({(0, 0)}), name


def test_rows_of_no_elements_read_nothing() -> None:
    """A dynamic reduced dim of 0 at run time: the shift's load is masked (it read past the row: a crash of the
    interpreter), and the variance of nothing is NaN, as PyTorch's."""
    g = og.Graph()
    x = g.placeholder((3, None), og.float32)
    y = g.sqrt(g.variance(x * 2.0, [1], keepdims=True) + 1.0)
    fused = g.compile({x: x.type}, [y], device="cpu",
                      descriptor=og.CompilationDescriptor(fusion=True, triton_interpret=True))
    assert any(o.op.name == "fused_region" for o in fused.program.graph.ops)
    (got,) = fused.run([torch.ones(3, 5)])
    torch.testing.assert_close(got, torch.ones(3, 1))
    (got,) = fused.run([torch.empty(3, 0)])
    assert got.shape == (3, 1) and bool(got.isnan().all())


def test_three_variances_of_a_split_row_meet_at_six_barriers() -> None:
    """Each variance takes two of a split row's barrier groups (its sums, its guard's centred sum): three in one
    region still fit (``MAX_BARRIERS``), and match float64 (a launch per meeting, as above)."""
    g = og.Graph()
    x = g.placeholder((ROWS, WIDTH), og.float32)
    outs = [g.variance(x * float(k + 1), [1], keepdims=True) for k in range(3)]
    ops, ins = region_of(outs)
    kernel = region_kernel(ops, ins, outs, config=CONFIGS["split in registers"])
    source, spins = SPIN.subn(r"\1if False:", kernel.source)  # as _without_spin, for six barriers
    assert spins == 6, kernel.source
    kernel = dataclasses.replace(kernel, source=source, _fn=None, _launches={}, _workspaces={})
    xv = _rows()
    feed = [torch.from_numpy(xv) if t is x else t.op.payload for t in ins]  # and the multipliers, as constants
    for _ in range(6):
        results = kernel(*feed)
    for k, got in enumerate(results):
        want = ((xv.astype(np.float64) * (k + 1)).var(axis=1, keepdims=True))
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-6)


def test_a_column_tile_of_no_rows_reads_nothing() -> None:
    """A static reduced count of 0 walked in steps: the first step (the shift) is masked, not taken for a whole
    step (it read past the input: a crash of the interpreter); the variance of nothing is NaN."""
    g = og.Graph()
    x = g.placeholder((0, 16), og.float32)
    y = g.variance(x, [0], keepdims=True)
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], config=Config(reduction=True, xblock=8, rblock=16, looped=True,
                                                        num_warps=4))
    (got,) = kernel(torch.empty(0, 16))
    assert got.shape == (1, 16) and bool(got.isnan().all())
