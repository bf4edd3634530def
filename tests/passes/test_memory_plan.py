"""Memory planning: liveness, aliasing through views, in-place updates (planned and generated), peak bytes."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch

import opgraph as og
from opgraph.ir import opdef
from opgraph.ir.graph import Operation
from opgraph.ir.opdef import LowerContext, OpDef
from opgraph.passes import MemoryPlan, Program, plan_memory
from opgraph.passes.memory_plan import Role

CPU = og.device("cpu")
F32 = 4


def _always(op: Operation, i: int, j: int) -> bool:
    return True


def _plan(g: og.Graph, inputs: list[og.Tensor], outputs: list[og.Tensor],
          ok: Callable[[Operation, int, int], bool] | None = _always) -> MemoryPlan:
    return plan_memory(Program(g, inputs, outputs, []), ok)


def _index(g: og.Graph, t: og.Tensor) -> int:
    return next(k for k, op in enumerate(g.ops) if op is t.op)


# ---- a tests-only kernel that may write into its input ------------------------------------------------
@dataclass
class Fakes:
    axpy: OpDef  # axpy(x, y) = 2x + y; may write into x or y
    twin: OpDef  # twin(x) = (x + 1, 2x); may write either output into x
    calls: list[tuple[int | None, ...]]  # per call: the data_ptr of each given out buffer (None: allocated)


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fakes]:
    # a private registry copy: the fake ops must not outlive the test (tests/ops checks every registered op)
    monkeypatch.setattr(opdef, "_REGISTRY", dict(opdef._REGISTRY))
    calls: list[tuple[int | None, ...]] = []

    def store(out: tuple[torch.Tensor | None, ...], values: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        calls.append(tuple(None if o is None else o.data_ptr() for o in out))
        # like a generated kernel, write the output in row-major order (view(-1) fails on a strided buffer)
        return tuple(v if o is None else o.view(-1).copy_(v.reshape(-1)).view(o.shape)
                     for o, v in zip(out, values, strict=True))

    def lower_axpy(ctx: LowerContext) -> Callable[..., Any]:
        def axpy(x: torch.Tensor, y: torch.Tensor, *, out: tuple[torch.Tensor | None, ...] = (None,)) -> Any:
            return store(out, (2 * x + y,))[0]

        axpy.inplace_ok = frozenset({(0, 0), (1, 0)})  # type: ignore[attr-defined]
        return axpy

    def lower_twin(ctx: LowerContext) -> Callable[..., Any]:
        def twin(x: torch.Tensor, *, out: tuple[torch.Tensor | None, ...] = (None, None)) -> Any:
            return store(out, (x + 1, 2 * x))

        twin.inplace_ok = frozenset({(0, 0), (0, 1)})  # type: ignore[attr-defined]
        return twin

    axpy = OpDef("test_memory_plan_axpy", infer=lambda a, ins: ins[0], lower=lower_axpy, differentiable=False)
    twin = OpDef("test_memory_plan_twin", infer=lambda a, ins: (ins[0], ins[0]), lower=lower_twin,
                 differentiable=False)
    yield Fakes(axpy, twin, calls)


def _run_all_ways(g: og.Graph, x: og.Tensor, outs: list[og.Tensor], value: torch.Tensor) -> tuple[Any, list[Any]]:
    exe = g.compile({x: x.type}, outs, device=CPU)
    ref = g.compile({x: x.type}, outs, device=CPU, descriptor=og.CompilationDescriptor(optimization_level=0))
    assert "out=" not in ref.source  # level 0 writes nothing in place
    fed = value.clone()
    got = exe.run([fed])
    assert torch.equal(fed, value)  # the caller's tensor is never written
    for a, b in zip(got, ref.run([value]), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    return exe, got


# ---- liveness and aliasing -----------------------------------------------------------------------------
def test_live_intervals_and_sizes() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    a = g.exp(x, name="a")
    b = g.exp(a, name="b")
    c = g.add(a, b, name="c")
    g.sin(a, name="unused")
    plan = _plan(g, [x], [c], None)
    got = {v.name: (v.nbytes, v.start, v.end, v.role) for v in plan.values}
    assert got == {"x": (128, 0, 1, Role.EXTERNAL), "a": (128, 1, 4, Role.BUFFER), "b": (128, 2, 3, Role.BUFFER),
                   "c": (128, 3, 5, Role.BUFFER), "unused": (128, 4, 4, Role.BUFFER)}
    assert plan.inplace == {}


def test_dynamic_dims_count_as_one() -> None:
    g = og.Graph()
    x = g.placeholder((None, 8), og.float16, name="x")
    y = g.exp(g.exp(x), name="y")
    plan = _plan(g, [x], [y])
    assert [v.nbytes for v in plan.values] == [16, 16, 16]
    assert plan.inplace == {}  # a dynamic shape is never written in place


def test_chain_is_written_in_place_when_allowed() -> None:
    g = og.Graph()
    x = g.placeholder((256,), og.float32)
    y = x
    for _ in range(5):
        y = g.exp(y)
    plan = _plan(g, [x], [y])
    # the first exp reads the caller's tensor; each later one overwrites its dead input
    assert plan.inplace == {k: {0: 0} for k in range(2, 6)}
    assert (plan.planned_peak_bytes, plan.unplanned_peak_bytes) == (1024, 5 * 1024)
    assert [v.role for v in plan.values[2:]] == [Role.INPLACE] * 4
    assert plan.values[-1].alias_of == (plan.values[1].name,)
    no = _plan(g, [x], [y], None)
    assert no.inplace == {} and (no.planned_peak_bytes, no.reused_buffers) == (2048, 3)
    assert no.planned_peak_bytes < no.unplanned_peak_bytes


@pytest.mark.parametrize("view", ["reshape", "transpose", "slice", "expand_dims", "broadcast_to"])
def test_a_live_view_keeps_its_base_alive_and_blocks_in_place(view: str) -> None:
    g = og.Graph()
    x = g.placeholder((4, 4), og.float32, name="x")
    a = g.exp(x, name="a")
    make = {"reshape": lambda: g.reshape(a, (16,)), "transpose": lambda: g.transpose(a, (1, 0)),
            "slice": lambda: g.slice(a, [1, 0], [3, 4]), "expand_dims": lambda: g.expand_dims(a, 0),
            "broadcast_to": lambda: g.broadcast_to(a, (2, 4, 4))}
    v = make[view]()
    b = g.exp(a, name="b")  # a's last direct use: it would be overwritten if the view were ignored
    c = g.add(g.reduce_sum(v, name="s"), b, name="c")
    plan = _plan(g, [x], [c])
    k_b = _index(g, b)
    assert k_b not in plan.inplace
    info = {i.name: i for i in plan.values}
    assert info[v.name].role is Role.VIEW and info[v.name].alias_of == ("a",) and info[v.name].nbytes
    # control: without the view, b overwrites a
    g2 = og.Graph()
    x2 = g2.placeholder((4, 4), og.float32, name="x")
    b2 = g2.exp(g2.exp(x2, name="a"), name="b")
    assert _index(g2, b2) in _plan(g2, [x2], [g2.add(g2.reduce_sum(b2), b2)]).inplace


def test_a_view_of_a_dead_buffer_is_not_a_target_but_its_reader_may_be() -> None:
    g = og.Graph()
    x = g.placeholder((4, 4), og.float32, name="x")
    a = g.exp(x, name="a")
    t = g.transpose(a, (1, 0), name="t")
    b = g.exp(t, name="b")  # t is a (transposed) view: writing b through it would be wrong
    c = g.exp(b, name="c")
    plan = _plan(g, [x], [c])
    assert plan.inplace == {_index(g, c): {0: 0}}
    info = {i.name: i for i in plan.values}
    assert info["a"].end == 2 and info["t"].end == 3  # the base's buffer lives to t's last use
    # a at 0 (live until b has run), b beside it, c written into b
    assert (info["a"].offset, info["b"].offset, plan.planned_peak_bytes) == (0, 64, 128)


def test_no_in_place_into_sources_or_program_outputs() -> None:
    g = og.Graph()
    x = g.placeholder((8,), og.float32, name="x")
    w = g.variable(torch.ones(8), name="w")
    r = g.read(w, name="r")
    c = g.constant(torch.arange(8.0), name="c")
    outs = [g.exp(x, name="ex"), g.exp(w, name="ew"), g.exp(r, name="er"), g.exp(c, name="ec")]
    kept = g.exp(outs[0], name="kept")  # a program output: must survive the next op
    after = g.exp(kept, name="after")
    plan = _plan(g, [x], [*outs, kept, after])
    assert plan.inplace == {}
    assert {v.name for v in plan.values if v.role is Role.EXTERNAL} == {"x", "w", "r", "c"}
    # control: the same graph where kept is not an output
    assert _index(g, after) in _plan(g, [x], [*outs, after]).inplace


def test_same_buffer_at_two_positions_needs_both_allowed() -> None:
    g = og.Graph()
    x = g.placeholder((8,), og.float32)
    a = g.exp(x)
    y = g.add(a, a)
    k = _index(g, y)
    assert _plan(g, [x], [y], lambda op, i, j: (i, j) == (0, 0)).inplace == {}
    assert _plan(g, [x], [y]).inplace == {k: {0: 0}}


def test_type_must_match_for_in_place() -> None:
    g = og.Graph()
    x = g.placeholder((4, 1), og.float32)
    a = g.exp(x)
    y = g.add(a, g.placeholder((4, 3), og.float32))  # broadcast: a is smaller than the result
    p = g.greater(y, 0.0)  # a bool result cannot be written into a float32 buffer
    assert _plan(g, [x], [p]).inplace == {}


def test_unknown_op_aliases_its_inputs_and_costs_its_bytes() -> None:
    g = og.Graph()
    x = g.placeholder((8,), og.float32, name="x")
    a = g.exp(x, name="a")
    r = g.reverse(a, [], name="r")  # reverse with no axes returns its input itself
    b = g.exp(a, name="b")
    c = g.add(r, b, name="c")
    plan = _plan(g, [x], [c])
    assert _index(g, b) not in plan.inplace  # r may be a itself
    info = {i.name: i for i in plan.values}
    assert info["r"].role is Role.BUFFER and info["r"].alias_of == ("a",)
    assert plan.inplace == {_index(g, c): {0: 1}}  # c overwrites b, never r (which may be a)
    assert plan.planned_peak_bytes == 3 * 32


# ---- generated code ------------------------------------------------------------------------------------
def test_in_place_realised_in_generated_source(fakes: Fakes) -> None:
    g = og.Graph()
    x = g.placeholder((256,), og.float32, name="x")
    a = g.exp(x, name="a")
    b = g._apply(fakes.axpy, [a, x], name="b")  # into a
    c = g._apply(fakes.axpy, [b, x], name="c")  # into b (= a's buffer)
    value = torch.linspace(-1, 1, 256)
    exe, (got,) = _run_all_ways(g, x, [c], value)
    assert len(re.findall(r"(v\d+) = k\d+\(\1, x0, out=\(\1 if \1.is_contiguous\(\) else None,\)\)",
                          exe.source)) == 2, exe.source
    torch.testing.assert_close(got, 2 * (2 * value.exp() + value) + value)
    fakes.calls.clear()
    (again,) = exe.run([value])
    assert fakes.calls[0] == fakes.calls[1] != (None,)  # both calls wrote into the same buffer
    assert fakes.calls[1][0] == again.data_ptr()
    s = exe.memory_stats()
    assert (s.planned_peak_bytes, s.unplanned_peak_bytes, s.inplace_updates, s.reused_buffers) == (1024, 3072, 2, 0)


def test_no_out_for_placeholders_views_and_outputs(fakes: Fakes) -> None:
    g = og.Graph()
    x = g.placeholder((4, 4), og.float32, name="x")
    a = g.exp(x, name="a")
    t = g.transpose(a, (1, 0), name="t")
    b = g._apply(fakes.axpy, [a, x], name="b")  # a is still read through t afterwards
    d = g._apply(fakes.axpy, [x, x], name="d")  # the caller's tensor
    e = g._apply(fakes.axpy, [t, b], name="e")  # t is a transposed view of a; b is returned
    f = g._apply(fakes.axpy, [d, x], name="f")  # d is returned
    value = torch.randn(4, 4)
    exe, got = _run_all_ways(g, x, [e, f, d, b], value)
    assert "out=" not in exe.source
    ex = value.exp()
    torch.testing.assert_close(got[0], 2 * ex.T + 2 * ex + value)
    torch.testing.assert_close(got[1], 2 * (3 * value) + value)
    torch.testing.assert_close(got[3], 2 * ex + value)
    assert exe.memory_stats().inplace_updates == 0


def test_e_is_written_into_b_once_the_view_is_gone(fakes: Fakes) -> None:
    g = og.Graph()
    x = g.placeholder((4, 4), og.float32, name="x")
    a = g.exp(x, name="a")
    t = g.transpose(a, (1, 0), name="t")
    s = g.reduce_sum(t, 0, name="s")  # last use of the view
    b = g._apply(fakes.axpy, [a, x], name="b")  # now a's buffer is free: b overwrites it
    e = g.add(b, s, name="e")
    exe, (got,) = _run_all_ways(g, x, [e], torch.randn(4, 4))
    assert exe.source.count("out=(") == 1
    s_stats = exe.memory_stats()
    # a (64) and s (16) live together, b is written into a, then e (64)
    assert (s_stats.planned_peak_bytes, s_stats.unplanned_peak_bytes, s_stats.inplace_updates) == (144, 272, 1)


def test_multi_output_in_place_and_name_reuse(fakes: Fakes) -> None:
    g = og.Graph()
    x = g.placeholder((256,), og.float32, name="x")
    a = g.exp(x, name="a")
    p, q = g._apply_multi(fakes.twin, [a], name="pq")
    y = g.multiply(p, q, name="y")
    r, s = g._apply_multi(fakes.twin, [g.sin(y, name="z")], name="rs")  # r is never read
    out = g.add(s, x, name="out")
    value = torch.linspace(-2, 2, 256)
    exe, (got,) = _run_all_ways(g, x, [out], value)
    given = r"out=\(\1 if \1.is_contiguous\(\) else None, None\)\)"
    assert re.search(r"(v\d+), v\d+ = k\d+\(\1, " + given, exe.source), exe.source  # p into a
    assert re.search(r"_, v\d+ = k\d+\((v\d+), " + given, exe.source), exe.source  # r (unread) into z
    ea = value.exp()
    torch.testing.assert_close(got, 2 * ((ea + 1) * (2 * ea)).sin() + value)
    st = exe.memory_stats()
    # a at 0, p into a, q at 1K, y at 2K; z reuses a's freed block, r into z, s at 1K, out at 0 again
    assert (st.planned_peak_bytes, st.unplanned_peak_bytes, st.inplace_updates, st.reused_buffers) == (
        3 * 1024, 8 * 1024, 2, 3)


def test_a_strided_buffer_is_not_given(fakes: Fakes) -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32, name="x")
    t = g.transpose(x, (1, 0), name="t")
    a = g.exp(t, name="a")  # torch keeps t's strides: a is not contiguous
    b = g._apply(fakes.axpy, [a, t], name="b")  # planned into a, but not given at run time
    value = torch.randn(4, 8)
    exe, (got,) = _run_all_ways(g, x, [b], value)
    assert exe.source.count("out=(") == 1
    torch.testing.assert_close(got, 2 * value.T.exp() + value.T)
    fakes.calls.clear()
    exe.run([value])
    assert fakes.calls == [(None,)]


def test_torch_kernels_get_no_out() -> None:
    g = og.Graph()
    x = g.placeholder((64,), og.float32)
    y = g.exp(g.exp(g.exp(x)))
    exe = g.compile({x: x.type}, [y], device=CPU)
    assert "out=" not in exe.source
    assert exe._generated.plan is not None and exe._generated.plan.inplace == {}


# ---- memory_stats by hand ------------------------------------------------------------------------------
def test_memory_stats_reuse_of_freed_memory() -> None:
    g = og.Graph()
    x = g.placeholder((256,), og.float32)
    a = g.exp(x)  # 1024 at 0
    s = g.reduce_sum(a, 0)  # 4 at 1024; a is freed after it
    b = g.sin(x)  # 1024 into a's freed block
    c = b + s  # 1024 on top: 2052
    st = g.compile({x: x.type}, [c], device=CPU).memory_stats()
    assert (st.planned_peak_bytes, st.unplanned_peak_bytes, st.inplace_updates, st.reused_buffers) == (2052, 3076, 0, 1)


def test_memory_stats_views_cost_nothing_but_keep_their_base() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32)
    a = g.exp(x)  # 128
    t = g.transpose(a, (1, 0))  # a view: 0, keeps a alive
    b = g.exp(t)  # 128 beside a
    st = g.compile({x: x.type}, [b], device=CPU).memory_stats()
    assert (st.planned_peak_bytes, st.unplanned_peak_bytes, st.reused_buffers) == (256, 384, 0)


def test_memory_stats_of_a_view_output_of_an_input() -> None:
    g = og.Graph()
    x = g.placeholder((4, 8), og.float32)
    st = g.compile({x: x.type}, [g.reshape(x, (32,))], device=CPU).memory_stats()
    assert (st.planned_peak_bytes, st.unplanned_peak_bytes) == (0, 128)
