"""``passes.keepdims``: reductions without ``keepdims`` and their elementwise epilogues, put in keep-dims form so
they fuse into one kernel; fused runs (Triton's interpreter) against NumPy, and region formation's text."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton.fused import can_fuse, reduced_axes  # noqa: E402
from opgraph.ir.graph import Tensor  # noqa: E402
from opgraph.passes.keepdims import keep_reduced_dims  # noqa: E402
from opgraph.passes.program import Program  # noqa: E402

from ..codegen.test_region_formation import fuse, golden, text  # noqa: E402

FUSED = og.CompilationDescriptor(fusion=True, triton_interpret=True, verify_each_pass=True)


def test_a_row_max_and_its_epilogue_become_one_region_with_a_squeeze_after_it() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8, 16), og.float32, name="x")
    b = g.placeholder((8,), og.float32, name="b")
    y = g.tanh(g.reduce_max(x, axes=(2,), name="m") * b, name="y")
    assert text(fuse(g, [x, b], [y])) == golden("""
        %x: float32(4, 8, 16) = placeholder()
        %b: float32(8,) = placeholder()
        %fused_region_2: float32(4, 8, 1) = fused_region(%x, %b) [reduce_max expand_dims multiply tanh -> 3]
        %y.squeeze: float32(4, 8) = squeeze(%fused_region_2) {axes=(2,)}""")


def _program(g: og.Graph, ins: list[Tensor], outs: list[Tensor]) -> Program:
    return Program(g, ins, outs, [])


def test_reductions_over_leading_axes_or_keeping_their_dims_are_left_as_they_are() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    column = g.reduce_sum(x, axes=(0,)) * 2.0  # (8,) broadcasts into (4, 8) as it is
    kept = g.reduce_sum(x, axes=(1,), keepdims=True) * 2.0
    alone = g.reduce_sum(x, axes=(1,))  # no elementwise reader of its shape
    program = _program(g, [x], [column, kept, alone])
    assert keep_reduced_dims(program, can_fuse, reduced_axes) is program


def _both(build: Callable[[og.Graph, Tensor], list[Tensor]], shape: tuple[int, ...],
          oracle: Callable[[np.ndarray], list[np.ndarray]], dynamic: bool = False) -> og.Executable:
    g = og.Graph()
    x = g.placeholder(tuple(None if dynamic and k == 0 else d for k, d in enumerate(shape)), og.float32, name="x")
    outs = build(g, x)
    exe = g.compile({x: og.TensorType(shape, og.float32)} if not dynamic else {x: x.type}, outs, device="cpu",
                    descriptor=FUSED)
    value = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = exe.run([torch.from_numpy(value)])
    for a, want in zip(got, oracle(value.astype(np.float64)), strict=True):
        assert tuple(a.shape) == want.shape
        np.testing.assert_allclose(a.double().numpy(), want, rtol=2e-5, atol=2e-5)
    return exe


def _regions(exe: og.Executable) -> list[list[str]]:
    return [[s.op for s in o.attrs.steps] for o in exe.program.graph.ops if o.op.name == "fused_region"]


CASES: dict[str, tuple[tuple[int, ...], Callable[[og.Graph, Tensor], list[Tensor]],
                       Callable[[np.ndarray], list[np.ndarray]]]] = {
    "sum-suffix-scalar": ((6, 40), lambda g, x: [g.reduce_sum(g.exp(x), axes=(1,)) * 0.5 + 1.0],
                          lambda v: [np.exp(v).sum(1) * 0.5 + 1.0]),
    "mean-two-suffix-axes-vector": ((3, 5, 7, 9), lambda g, x: [g.sigmoid(g.reduce_mean(x, axes=(2, 3)) -
                                                                           g.constant(torch.arange(5.0)))],
                                    lambda v: [1 / (1 + np.exp(-(v.mean((2, 3)) - np.arange(5.0))))]),
    "max-middle-axis": ((4, 6, 8), lambda g, x: [g.maximum(g.reduce_max(x, axes=(1,)), g.constant(torch.ones(8)))],
                        lambda v: [np.maximum(v.max(1), 1.0)]),
    "min-middle-axes-full-operand": ((2, 3, 4, 5), lambda g, x: [g.reduce_min(x, axes=(1, 2)) *
                                                                 g.constant(torch.full((2, 5), 3.0))],
                                     lambda v: [v.min((1, 2)) * 3.0]),
    "chain-with-two-readers": ((5, 32), lambda g, x: (lambda s: [g.tanh(s) * s, g.relu(s)])(
        g.reduce_sum(x, axes=(1,))), lambda v: [np.tanh(v.sum(1)) * v.sum(1), np.maximum(v.sum(1), 0.0)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_epilogues_fuse_and_match_numpy(case: str) -> None:
    shape, build, oracle = CASES[case]
    exe = _both(build, shape, oracle)
    regions = _regions(exe)
    assert len(regions) == 1, regions  # the reduction and every op after it in one kernel
    assert [o.op.name for o in exe.program.graph.ops if o.op.name not in ("placeholder", "constant")].count(
        "fused_region") == 1


def test_a_reader_that_cannot_fuse_reads_the_squeezed_value() -> None:
    w = torch.randn(8, 3, dtype=torch.float64)

    def build(g: og.Graph, x: Tensor) -> list[Tensor]:
        s = g.reduce_sum(g.exp(x), axes=(2,))  # (4, 8)
        return [g.matmul(s, g.constant(w.float())), s * 2.0]

    exe = _both(build, (4, 8, 16), lambda v: [np.exp(v).sum(2) @ w.numpy(), np.exp(v).sum(2) * 2.0])
    assert _regions(exe) == [["exp", "reduce_sum", "multiply"]]


def test_a_dynamic_batch_stays_dynamic() -> None:
    exe = _both(lambda g, x: [g.log(g.reduce_sum(g.exp(x), axes=(1,)))], (7, 33),
                lambda v: [np.log(np.exp(v).sum(1))], dynamic=True)
    assert len(_regions(exe)) == 1
    value = torch.randn(3, 33)
    (got,) = exe.run([value])
    torch.testing.assert_close(got, torch.logsumexp(value, 1), rtol=1e-5, atol=1e-5)


def test_gradients_through_a_fused_epilogue_match_finite_differences() -> None:
    g = og.Graph()
    x = g.placeholder((3, 10), og.float64, name="x")
    loss = g.reduce_sum(g.tanh(g.reduce_mean(g.exp(x), axes=(1,))) * g.constant(torch.arange(1.0, 4.0,
                                                                                               dtype=torch.float64)))
    dx = g.gradients(loss, [x])[x]
    exe = g.compile({x: x.type}, [dx], device="cpu", descriptor=FUSED)
    value = torch.randn(3, 10, dtype=torch.float64)
    (got,) = exe.run([value])

    def f(v: torch.Tensor) -> float:
        return float((torch.tanh(v.exp().mean(1)) * torch.arange(1.0, 4.0, dtype=torch.float64)).sum())

    fd = torch.zeros_like(value)
    for i in range(3):
        for j in range(10):
            e = torch.zeros_like(value)
            e[i, j] = 1e-6
            fd[i, j] = (f(value + e) - f(value - e)) / 2e-6
    torch.testing.assert_close(got, fd, rtol=1e-6, atol=1e-8)


def test_a_softmax_written_by_hand_without_keepdims_is_one_kernel() -> None:
    """``expand_dims`` of the squeezed max and sum undoes the squeeze: it reads the keep-dims values instead."""
    def build(g: og.Graph, x: Tensor) -> list[Tensor]:
        m = g.expand_dims(g.reduce_max(x, axes=(1,)), (1,))
        e = g.exp(x - m)
        return [e / g.expand_dims(g.reduce_sum(e, axes=(1,)), (1,))]

    def oracle(v: np.ndarray) -> list[np.ndarray]:
        e = np.exp(v - v.max(1, keepdims=True))
        return [e / e.sum(1, keepdims=True)]

    exe = _both(build, (5, 24), oracle)
    assert len(_regions(exe)) == 1


def test_a_chain_that_a_fusable_op_reads_squeezed_is_left_as_it_is() -> None:
    """A second reduction reads the row sums' epilogue as squeezed: a squeeze would stand between them, so the
    chain keeps its shape (the pass returns the program unchanged)."""
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    t = g.tanh(g.reduce_sum(x, axes=(1,)))
    y = g.reduce_sum(t, axes=(0,))
    program = _program(g, [x], [y])
    assert keep_reduced_dims(program, can_fuse, reduced_axes) is program


def test_a_chain_that_goes_on_from_a_result_of_the_program_is_left_as_it_is() -> None:
    """The squeeze of a result the chain goes on from would read the region halfway, and region formation seals a
    region read from outside: the rest of the chain could no longer join it (found by the second review)."""
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    t = g.tanh(g.reduce_sum(x, axes=(1,)))
    y = t * 2.0
    program = _program(g, [x], [t, y])
    assert keep_reduced_dims(program, can_fuse, reduced_axes) is program
    alone = _program(g, [x], [y])
    assert keep_reduced_dims(alone, can_fuse, reduced_axes) is not alone  # y the only result: the chain is taken
