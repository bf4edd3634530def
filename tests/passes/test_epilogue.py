"""The matmul-epilogue pass: where it fires, where it must not, and numerics against the unfused graph."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import pytest
import torch

import opgraph as og

FUSED = og.CompilationDescriptor(fusion=True, verify_each_pass=True)
PLAIN = og.CompilationDescriptor(optimization_level=0)


def _ops(exe: og.Executable) -> list[str]:
    return [o.op.name for o in exe.program.graph.ops if o.op.name not in ("placeholder", "variable", "constant")]


def _compile(build: Callable[[og.Graph, og.Tensor], Any], x_shape: tuple[int, ...] = (4, 3),
             dtype: og.DType = og.float32,
             descriptor: og.CompilationDescriptor = FUSED) -> tuple[og.Executable, og.Executable]:
    g = og.Graph()
    x = g.placeholder(x_shape, dtype, name="x")
    out = build(g, x)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return (g.compile({x: x.type}, outs, device="cpu", descriptor=descriptor),
            g.compile({x: x.type}, outs, device="cpu", descriptor=PLAIN))


def _linear(g: og.Graph, x: og.Tensor, n: int = 5, dtype: og.DType = og.float32) -> og.Tensor:
    fc = og.nn.Linear(g, x.shape[-1], n, dtype=dtype, name="fc", generator=torch.Generator().manual_seed(0))
    return fc(x)


def _check_same(fused: og.Executable, plain: og.Executable, x: torch.Tensor, exact: bool = False) -> None:
    for a, b in zip(fused.run([x]), plain.run([x]), strict=True):
        if exact:
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
        else:
            torch.testing.assert_close(a, b, equal_nan=True)


@pytest.mark.parametrize("dtype", [og.float32, og.float64])
@pytest.mark.parametrize("act", ["none", "relu", "gelu", "gelu_tanh"])
def test_linear_chain_becomes_one_op_and_matches_unfused(dtype: og.DType, act: str) -> None:
    def build(g: og.Graph, x: og.Tensor) -> og.Tensor:
        y = _linear(g, x, dtype=dtype)
        if act == "relu":
            return g.relu(y, name="out")
        if act == "gelu":
            return g.gelu(y, name="out")
        if act == "gelu_tanh":
            return g.gelu(y, approximate=True, name="out")
        return y

    fused, plain = _compile(build, (6, 3), dtype)
    absorbed = act not in ("none", "gelu")  # erf gelu stays its own op (measured faster that way)
    assert _ops(fused) == ["transpose", "matmul_epilogue"] + ([] if absorbed or act == "none" else [act])
    (op,) = [o for o in fused.program.graph.ops if o.op.name == "matmul_epilogue"]
    assert op.attrs.activation.value == (act if absorbed else "none") and op.attrs.has_bias
    assert len(op.attrs.names) == (3 if absorbed else 2)
    if absorbed:
        assert op.name == "out" and op.attrs.names[-1] == "out"  # the chain's last name survives
    x = torch.randn(6, 3, dtype=dtype.torch_dtype) * 3
    x[2, 1] = float("nan")  # NaN rows stay NaN, as unfused
    _check_same(fused, plain, x)


def test_bias_on_the_left_and_batched_input() -> None:
    def build(g: og.Graph, x: og.Tensor) -> og.Tensor:
        w = g.constant(torch.randn(4, 5))
        b = g.constant(torch.randn(5))
        return g.relu(b + g.matmul(x, w))

    fused, plain = _compile(build, (2, 3, 4))
    assert _ops(fused) == ["matmul_epilogue"]
    _check_same(fused, plain, torch.randn(2, 3, 4))


def test_gradients_keep_the_activation_separate() -> None:
    """After autodiff the relu's input is read by its gradient too: matmul + bias fuse, relu stays."""
    g = og.Graph()
    x = g.placeholder((4, 3), og.float64, name="x")
    fc = og.nn.Linear(g, 3, 5, dtype=og.float64, name="fc", generator=torch.Generator().manual_seed(0))
    loss = g.reduce_sum(g.relu(fc(x)))
    grads = g.gradients(loss, [x, fc.weight])
    targets = [loss, grads[x], grads[fc.weight]]
    fused = g.compile({x: x.type}, targets, device="cpu", descriptor=FUSED)
    plain = g.compile({x: x.type}, targets, device="cpu", descriptor=PLAIN)
    assert "matmul_epilogue" in _ops(fused) and "relu" in _ops(fused)
    (op,) = [o for o in fused.program.graph.ops if o.op.name == "matmul_epilogue"]
    assert op.attrs.activation.value == "none"
    _check_same(fused, plain, torch.randn(4, 3, dtype=torch.float64))


@pytest.mark.parametrize("bias_left", [False, True])
def test_a_reshape_of_the_rows_between_product_and_bias_is_done_after_the_op(bias_left: bool) -> None:
    # nn.MultiheadAttention's in-projection: (L*N, E) @ w, viewed (L, N, 3E), then the bias
    def build(g: og.Graph, x: og.Tensor) -> og.Tensor:
        w, b = g.constant(torch.randn(4, 6)), g.constant(torch.randn(6))
        y = g.reshape(g.matmul(x, w), (3, 2, 6))
        return g.relu(b + y if bias_left else y + b)

    fused, plain = _compile(build, (6, 4))
    assert _ops(fused) == ["matmul_epilogue", "reshape"], fused.program.graph
    assert fused.program.graph.ops[-1].outputs[0].shape == (3, 2, 6)
    _check_same(fused, plain, torch.randn(6, 4))


def test_not_through_a_reshape_that_splits_the_product_rows() -> None:
    # (6, 6) viewed (6, 2, 3): the bias of length 3 would add along half-rows, not the product's columns
    _no_epilogue(lambda g, x: g.reshape(g.matmul(x, g.constant(torch.randn(4, 6))), (6, 2, 3))
                 + g.constant(torch.randn(3)), (6, 4))


def _no_epilogue(build: Callable[[og.Graph, og.Tensor], Any], x_shape: tuple[int, ...] = (4, 3),
                 dtype: og.DType = og.float32) -> og.Executable:
    fused, plain = _compile(build, x_shape, dtype)
    assert "matmul_epilogue" not in _ops(fused), fused.program.graph
    return fused


def test_not_when_the_product_has_another_reader() -> None:
    def build(g: og.Graph, x: og.Tensor) -> list[og.Tensor]:
        y = g.matmul(x, g.constant(torch.randn(3, 5)))
        return [g.relu(y + g.constant(torch.randn(5))), g.exp(y)]

    _no_epilogue(build)


def test_not_when_the_product_is_an_output() -> None:
    def build(g: og.Graph, x: og.Tensor) -> list[og.Tensor]:
        y = g.matmul(x, g.constant(torch.randn(3, 5)))
        return [y + g.constant(torch.randn(5)), y]

    _no_epilogue(build)


def test_activation_with_another_reader_stays_out() -> None:
    def build(g: og.Graph, x: og.Tensor) -> list[og.Tensor]:
        z = _linear(g, x)
        return [g.relu(z), g.negative(z)]

    fused, plain = _compile(build)
    assert _ops(fused) == ["transpose", "matmul_epilogue", "relu", "negative"]
    _check_same(fused, plain, torch.randn(4, 3))


@pytest.mark.parametrize("bias_shape", [(4, 5), (4, 1), (1,), (1, 5), ()])
def test_not_when_the_bias_is_not_1d_along_the_last_dim(bias_shape: tuple[int, ...]) -> None:
    def build(g: og.Graph, x: og.Tensor) -> og.Tensor:
        return g.relu(g.matmul(x, g.constant(torch.randn(3, 5))) + g.constant(torch.randn(bias_shape)))

    _no_epilogue(build)


def test_not_for_integers_promotion_or_batched_weights() -> None:
    _no_epilogue(lambda g, x: g.matmul(x, g.constant(torch.ones(3, 5, dtype=torch.int32)))
                 + g.constant(torch.ones(5, dtype=torch.int32)), dtype=og.int32)
    _no_epilogue(lambda g, x: g.matmul(x, g.constant(torch.randn(3, 5))) + g.constant(torch.randn(5).double()))
    _no_epilogue(lambda g, x: g.matmul(x, g.constant(torch.randn(2, 3, 5))) + g.constant(torch.randn(5)))
    _no_epilogue(lambda g, x: g.matmul(x, g.constant(torch.randn(3))) + g.constant(torch.randn(4)))


def test_only_with_fusion_on_and_not_when_switched_off() -> None:
    build = lambda g, x: g.relu(_linear(g, x))
    for desc in (og.CompilationDescriptor(fusion=False), og.CompilationDescriptor(optimization_level=0),
                 og.CompilationDescriptor(matmul_epilogues=False)):
        fused, _ = _compile(build, descriptor=desc)
        assert _ops(fused) == ["transpose", "matmul", "add", "relu"]
    fused, _ = _compile(build, descriptor=og.CompilationDescriptor())
    assert "matmul_epilogue" in _ops(fused)  # on by default


def test_half_precision_close_to_unfused() -> None:
    for dtype in (og.float16, og.bfloat16):
        fused, plain = _compile(lambda g, x, dt=dtype: g.gelu(_linear(g, x, 8, dt)), (5, 16), dtype)
        assert "matmul_epilogue" in _ops(fused)
        x = torch.randn(5, 16, dtype=dtype.torch_dtype)
        torch.testing.assert_close(fused.run([x])[0].float(), plain.run([x])[0].float(), rtol=2e-2, atol=2e-2)


def test_runs_before_elementwise_fusion() -> None:
    if importlib.util.find_spec("triton") is None:  # not imported here: Triton must first load interpreted
        pytest.skip("needs triton")
    desc = og.CompilationDescriptor(fusion=True, triton_interpret=True, verify_each_pass=True)

    def build(g: og.Graph, x: og.Tensor) -> og.Tensor:
        return g.sigmoid(_linear(g, x)) * 2.0

    fused, plain = _compile(build, descriptor=desc)
    ops = _ops(fused)  # the sigmoid and the multiply: one generated kernel after the epilogue op
    assert ops[:2] == ["transpose", "matmul_epilogue"] and len(ops) == 3 and ops[2].startswith("fused_"), ops
    _check_same(fused, plain, torch.randn(4, 3))


@pytest.mark.parametrize("slower", [True, False])
@pytest.mark.parametrize("dtype", [og.float32, og.bfloat16])
def test_on_cuda_a_bias_stays_apart_where_the_epilogue_is_timed_slower(
        dtype: og.DType, slower: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from opgraph.passes import epilogue
    from opgraph.passes.program import Program

    asked: list[tuple[Any, ...]] = []

    def probe(*key: Any) -> bool:
        asked.append(key)
        return slower

    monkeypatch.setattr(epilogue, "lt_bias_costs_more", probe)
    g = og.Graph()
    x = g.placeholder((2, 6, 12), dtype, name="x")
    y = g.relu(_linear(g, x, 4, dtype))
    for kind in ("cuda", "cpu"):
        ops = [o.op.name for o in epilogue.fuse_matmul_epilogues(Program(g, [x], [y], []), kind).graph.ops]
        fused = not (kind == "cuda" and slower)
        assert ("matmul_epilogue" in ops) is fused and ("matmul" in ops) is not fused, (kind, ops)
    assert asked == [(12, 12, 4, dtype.torch_dtype, True)]  # asked on CUDA only, for (M, K, N) and the relu


@pytest.mark.parametrize("rows", [None, 1 << 20], ids=["dynamic", "too-large-to-time"])
def test_shapes_not_timed_keep_the_epilogue(rows: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    from opgraph.passes import epilogue
    from opgraph.passes.program import Program

    monkeypatch.setattr(epilogue, "lt_bias_costs_more", lambda *key: pytest.fail(f"timed {key}"))
    g = og.Graph()
    x = g.placeholder((rows, 64), og.float32, name="x")  # 2**20 x 64 float32: 256 MiB, past PROBE_BYTES
    y = _linear(g, x, 4)
    ops = [o.op.name for o in epilogue.fuse_matmul_epilogues(Program(g, [x], [y], []), "cuda").graph.ops]
    assert "matmul_epilogue" in ops


@pytest.mark.gpu
def test_the_bias_epilogue_probe_times_once_per_shape() -> None:
    from opgraph.ops.epilogue import lt_bias_costs_more

    lt_bias_costs_more.cache_clear()  # type: ignore[attr-defined]
    first = lt_bias_costs_more(197, 3072, 768, torch.float32)
    assert isinstance(first, bool) and lt_bias_costs_more(197, 3072, 768, torch.float32) is first
    assert isinstance(lt_bias_costs_more(64, 256, 128, torch.bfloat16, True), bool)
    assert lt_bias_costs_more.cache_info().hits == 1  # type: ignore[attr-defined]
