"""The bookkeeping around CUDA-graph replays, on the CPU: ``CapturedRun.record`` replaced by a stand-in that
runs the function into fixed output buffers, as a replay writes the graph's own. Checked: outputs are lent (the
same buffers every replay), outputs the caller still holds make the executable capture again and copy them out
from then on, static inputs that move twice are copied from then on (a first move, as a producer captured again
moves its outputs, keeps them read in place), and replays whose copies cost more than their
launches save are declined after the capture too. The CUDA path itself: ``tests/runtime/test_cuda_graphs.py``."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch

import opgraph as og
from opgraph.runtime import executable as ex


def _unowned(t: torch.Tensor) -> torch.Tensor:
    """An alias of ``t``'s memory that does not keep its storage alive, as a CUDA graph reads its inputs."""
    raw = (ctypes.c_byte * t.untyped_storage().nbytes()).from_address(t.untyped_storage().data_ptr())
    flat = torch.from_numpy(np.ctypeslib.as_array(raw)).view(t.dtype)
    return flat.as_strided(t.shape, t.stride(), t.storage_offset())


def _record_on_cpu(fn: Any, inputs: Sequence[torch.Tensor], state: dict[str, torch.Tensor],
                   variables: Sequence[str], device: torch.device) -> tuple[Callable[[], None], list[torch.Tensor]]:
    scratch = {name: state[name].clone() for name in variables}
    outputs = [torch.empty_like(t) for t in fn(list(inputs), S=scratch)]  # the graph's pool: fresh buffers
    inputs = [_unowned(t) for t in inputs]  # the caller's memory at capture, not its tensors

    def replay() -> None:
        for buffer, value in zip(outputs, fn(list(inputs)), strict=True):
            buffer.copy_(value)

    return replay, outputs


@pytest.fixture
def cpu_graphs(monkeypatch: pytest.MonkeyPatch) -> Callable[[og.Executable], og.Executable]:
    monkeypatch.setattr(ex.CapturedRun, "record", staticmethod(_record_on_cpu))

    def arm(exe: og.Executable) -> og.Executable:
        exe.cuda_graph_status = "pending (captured on the first run)"  # as a static CUDA executable starts
        return exe

    return arm


def _exe(static: Sequence[int] = ()) -> og.Executable:
    g = og.Graph()
    x = g.placeholder((64,), og.float32, name="x")
    w = g.placeholder((64,), og.float32, name="w")
    y = x
    for _ in range(4):  # launches enough that copying 64 floats is worth a replay
        y = g.sin(y * w)
    exe = g.compile({x: x.type, w: w.type}, [y, g.reduce_sum(y, 0)], device="cpu",
                    descriptor=og.CompilationDescriptor(fusion=False))
    exe.mark_static_inputs(list(static))
    return exe


def _want(x: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    y = x
    for _ in range(4):
        y = torch.sin(y * w)
    return [y, y.sum()]


def test_outputs_are_lent_until_a_caller_keeps_one(cpu_graphs: Callable[[og.Executable], og.Executable]) -> None:
    exe = cpu_graphs(_exe())
    w = torch.randn(64)
    xs = [torch.randn(64) for _ in range(6)]
    ptrs = []
    for x in xs[:3]:
        got = exe.run([x, w])
        torch.testing.assert_close(got, _want(x, w))
        ptrs.append(got[0].data_ptr())
        del got
    assert exe.cuda_graph_status == "on" and len(set(ptrs)) == 1 and exe._recaptures == 0
    kept = exe.run([xs[3], w])[1]  # held across the next run
    later = exe.run([xs[4], w])
    torch.testing.assert_close(kept, _want(xs[3], w)[1])  # not overwritten
    torch.testing.assert_close(later, _want(xs[4], w))
    assert exe._copied_outputs == {1} and exe._recaptures == 1
    del later
    again = exe.run([xs[5], w])
    assert again[1].data_ptr() != kept.data_ptr() and exe._recaptures == 1  # the sum now copied out
    torch.testing.assert_close(kept, _want(xs[3], w)[1])


def test_moved_static_inputs_are_copied_from_then_on(cpu_graphs: Callable[[og.Executable], og.Executable]) -> None:
    exe = cpu_graphs(_exe(static=[1]))
    x, w = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(exe.run([x, w]), _want(x, w))
    assert exe._cuda_graph is not None and [i for _, i in exe._cuda_graph.copied] == [0]
    w2 = torch.randn(64)
    for _ in range(2):  # moved once: captured again, still read in place
        torch.testing.assert_close(exe.run([x, w2]), _want(x, w2))
    assert exe._recaptures == 1 and exe._static_inputs == frozenset({1})
    for _ in range(3):  # moved again: copied from then on
        w2 = torch.randn(64)
        torch.testing.assert_close(exe.run([x, w2]), _want(x, w2))
    assert exe._recaptures == 2 and exe._static_inputs == frozenset()
    assert exe._cuda_graph is not None and [i for _, i in exe._cuda_graph.copied] == [0, 1]


def test_a_producer_captured_again_moves_its_readers_inputs_once(
        cpu_graphs: Callable[[og.Executable], og.Executable]) -> None:
    # a training step: the forward's lent outputs are the backward's static inputs; the caller keeps the first
    # step's forward outputs (a loss), so the forward captures again and its outputs move, once
    forward, backward = cpu_graphs(_exe()), cpu_graphs(_exe(static=[0, 1]))
    w = torch.randn(64)
    kept = []
    for step in range(6):
        x = torch.randn(64)
        y, total = forward.run([x, w])
        got = backward.run([y, w])
        torch.testing.assert_close(got, _want(_want(x, w)[0], w))
        if step == 0:
            kept.append(total)
        del y, total, got
    assert forward._recaptures == 1 and backward._recaptures == 1
    assert backward._static_inputs == frozenset({0, 1}) and backward._cuda_graph is not None
    assert backward._cuda_graph.copied == []  # the forward's outputs are read where they are


def test_a_capture_whose_copies_grew_is_declined(cpu_graphs: Callable[[og.Executable], og.Executable],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # outputs the capture finds it must copy (here: the use count unavailable) count against the replay
    monkeypatch.setattr(ex, "_USE_COUNT", None)
    monkeypatch.setattr(ex, "COPY_BYTES_PER_US", 4.0)  # a slow copy: 260 bytes of outputs outweigh the launches
    exe = cpu_graphs(_exe(static=[0, 1]))
    x, w = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(exe.run([x, w]), _want(x, w))
    assert exe.cuda_graph_status.startswith("off: copying") and exe._cuda_graph is None
    torch.testing.assert_close(exe.run([x, w]), _want(x, w))


def test_handed_over_inputs_replay_and_are_let_go(cpu_graphs: Callable[[og.Executable], og.Executable]) -> None:
    """``run_consuming`` (the torch backend's boxed call) through capture and replays: right results, the list
    emptied every time, the static input read in place as with ``run``."""
    exe = cpu_graphs(_exe(static=[1]))
    w = torch.randn(64)
    for _ in range(4):
        x = torch.randn(64)
        args = [x, w]
        got = exe.run_consuming(args)
        assert args == []
        torch.testing.assert_close(got, _want(x, w))
        del got  # a replay's outputs are lent: held into the next run, they would be captured again
    assert exe._cuda_graph is not None and exe._recaptures == 0
