"""Run-time behaviour of the gather/scatter and linalg ops that OpInfo records cannot express:
out-of-range indices and singular matrices raise ``og.ExecutionError``; SET with duplicates; dynamic index depth."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import opgraph as og
from opgraph.ops.gather import ScatterMode

CPU = og.device("cpu")

Build = Callable[[og.Graph, og.Tensor, og.Tensor], og.Tensor]

# (name, x shape, indices shape, build); every case gets one bad index written into its indices
CASES: list[tuple[str, tuple[int, ...], tuple[int, ...], Build]] = [
    ("gather", (4, 3), (2,), lambda g, x, i: g.gather(x, i, 0)),
    ("gather-batch", (2, 4, 3), (2, 2), lambda g, x, i: g.gather(x, i, 1, batch_dims=1)),
    ("gather_nd", (4, 4), (2, 2), lambda g, x, i: g.gather_nd(x, i)),
    ("gather_along_axis", (4, 3), (2, 3), lambda g, x, i: g.gather_along_axis(x, i, 0)),
    ("scatter", (4, 3), (2,), lambda g, x, i: g.scatter(x, g.constant(np.ones((2, 3), np.float32)), i, 0)),
    ("scatter_nd", (4, 3), (2, 1), lambda g, x, i: g.scatter_nd(x, g.constant(np.ones((2, 3), np.float32)), i,
                                                                ScatterMode.MAX)),
    ("scatter_along_axis", (4, 3), (2, 3), lambda g, x, i: g.scatter_along_axis(
        x, g.constant(np.ones((2, 3), np.float32)), i, 0, ScatterMode.SET)),
]


@pytest.mark.parametrize("bad", [4, -5, 100])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_out_of_range_index_raises(case: tuple[str, tuple[int, ...], tuple[int, ...], Build], bad: int) -> None:
    _, xs, is_, build = case
    g = og.Graph()
    x = g.placeholder(xs, og.float32)
    i = g.placeholder(is_, og.int32)
    y = build(g, x, i)
    idx = np.zeros(is_, np.int32)
    idx.flat[-1] = bad  # out of range for the 4-long dims indexed in every case
    with pytest.raises(og.ExecutionError, match="out of range"):
        g.run({x: np.zeros(xs, np.float32), i: idx}, [y], device=CPU)
    idx.flat[-1] = -4  # the most negative in-range index wraps instead
    g.run({x: np.zeros(xs, np.float32), i: idx}, [y], device=CPU)


def test_singular_inverse_raises() -> None:
    g = og.Graph()
    x = g.placeholder((2, 3, 3), og.float64)
    y = g.inverse(x)
    batch = np.stack([np.eye(3), np.ones((3, 3))])
    with pytest.raises(og.ExecutionError, match="inverse"):
        g.run({x: batch}, [y], device=CPU)


def test_scatter_set_duplicates_one_update_wins() -> None:
    g = og.Graph()
    d = g.placeholder((3,), og.float32)
    y = g.scatter(d, g.constant([5.0, 7.0, 9.0]), g.constant([1, 1, -2]), 0, ScatterMode.SET)
    (out,) = g.run({d: np.zeros(3, np.float32)}, [y], device=CPU)
    assert out[0] == 0 and out[2] == 0 and out[1].item() in (5.0, 7.0, 9.0)


def test_gather_nd_dynamic_dims_with_static_depth() -> None:
    g = og.Graph()
    x = g.placeholder((None, None, 3), og.float32)
    i = g.placeholder((None, 2), og.int64)
    y = g.gather_nd(x, i)
    assert y.shape == (None, 3)
    xv = torch.arange(24, dtype=torch.float32).reshape(2, 4, 3)
    (out,) = g.run({x: xv, i: torch.tensor([[1, 2], [0, -1]])}, [y], device=CPU)
    torch.testing.assert_close(out, torch.stack([xv[1, 2], xv[0, 3]]))


def test_scatter_nd_dynamic_dims_infer_depth_from_ranks() -> None:
    g = og.Graph()
    d = g.placeholder((None, None), og.int32)
    u = g.placeholder((None,), og.int32)
    i = g.placeholder((None, None), og.int32)
    y = g.scatter_nd(d, u, i, ScatterMode.ADD)
    assert y.shape == (None, None)
    (out,) = g.run({d: np.zeros((2, 3), np.int32), u: np.array([1, 2, 3], np.int32),
                    i: np.array([[0, 0], [1, 2], [0, 0]], np.int32)}, [y], device=CPU)
    assert out.tolist() == [[4, 0, 0], [0, 0, 2]]


def test_mode_serialises(tmp_path: Any) -> None:
    g = og.Graph()
    d = g.placeholder((4,), og.float32, name="d")
    g.scatter_along_axis(d, g.constant([2.0]), g.constant([3]), 0, ScatterMode.DIV, name="y")
    g.save(tmp_path / "g")
    g2 = og.Graph.load(tmp_path / "g")
    assert g2.tensor("y").op.attrs.mode is ScatterMode.DIV


def test_index_checks_can_be_turned_off() -> None:
    g = og.Graph()
    x = g.placeholder((4,), og.float32)
    i = g.placeholder((2,), og.int64)
    y = g.gather(x, i)
    checked = g.compile({x: x.type, i: i.type}, [y], device="cpu")
    fast = g.compile({x: x.type, i: i.type}, [y], device="cpu",
                     descriptor=og.CompilationDescriptor(check_indices=False))
    values = [torch.arange(4.0), torch.tensor([3, -1])]
    assert checked.run(values)[0].tolist() == fast.run(values)[0].tolist() == [3.0, 3.0]
    with pytest.raises(og.ExecutionError, match="out of range"):
        checked.run([torch.arange(4.0), torch.tensor([4, 0])])


def test_constant_indices_in_range_are_checked_once_at_compile_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # a run-time check costs a host synchronisation on a GPU (and prevents CUDA-graph capture)
    import opgraph.ops.gather as gather_ops

    seen: list[bool] = []
    real = gather_ops._checked
    monkeypatch.setattr(gather_ops, "_checked", lambda idx, size, what, check=True: (
        seen.append(check), real(idx, size, what, check))[1])
    g = og.Graph()
    x = g.placeholder((4, 3), og.float32)
    i = g.placeholder((2,), og.int32)
    ok, bad = g.gather(x, g.constant([3, -4]), axis=0), g.gather(x, g.constant([4]), axis=0)
    xs = torch.arange(12.0).reshape(4, 3)
    assert g.run({x: xs}, [ok])[0].tolist() == [[9.0, 10.0, 11.0], [0.0, 1.0, 2.0]] and seen == [False]
    assert g.run({x: xs, i: torch.tensor([1, 0], dtype=torch.int32)}, [g.gather(x, i, axis=0)])[0][0, 0] == 3.0
    assert seen[-1] is True  # fed indices: checked at run time
    with pytest.raises(og.OpgraphError, match="out of range"):
        g.run({x: xs}, [bad])
