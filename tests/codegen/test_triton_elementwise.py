"""Generated elementwise Triton kernels (run by Triton's interpreter on the CPU) against the ops' PyTorch
lowerings: every op of the expression table alone with broadcasting and several dtypes, a few chains,
and random chains (hypothesis) against the unfused graph run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch

pytest.importorskip("triton")
# the special values (inf, NaN, 0) make NumPy warn inside the interpreter; the results are what is checked
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton.expr import EXPRESSIONS, ExprContext, NotExpressible, exact_div  # noqa: E402
from opgraph.codegen.triton.kernel import elementwise_kernel, emit_elementwise, region_of  # noqa: E402
from opgraph.core.dtype import as_dtype  # noqa: E402
from opgraph.core.types import TensorType  # noqa: E402
from opgraph.ir.graph import Tensor  # noqa: E402
from opgraph.ir.opdef import OpDef  # noqa: E402
from opgraph.ops import activation as act  # noqa: E402
from opgraph.ops import elementwise as ew  # noqa: E402
from opgraph.ops import gradient_support as gs  # noqa: E402
from opgraph.ops import norm  # noqa: E402
from opgraph.ops import unary as un  # noqa: E402

DTYPES = (og.float32, og.float16, og.bfloat16, og.int32, og.bool, og.float64, og.int8, og.uint8, og.int64)
SHAPES = {1: [(3, 4, 5)], 2: [(3, 1, 5), (4, 5)], 3: [(3, 1, 5), (4, 5), (1, 4, 1)]}
SPECIALS = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-6]


def run_fused(outputs: Sequence[Tensor], feeds: dict[Tensor, torch.Tensor], block: int = 64) -> list[torch.Tensor]:
    """Outputs through one generated kernel; inputs come from ``feeds`` or constants' payloads."""
    ops, inputs = region_of(outputs)
    kernel = elementwise_kernel(ops, inputs, outputs, block=block)
    by_id = {id(t): v for t, v in feeds.items()}
    values = [by_id.get(id(t), t.op.payload) for t in inputs]
    return kernel(*values)


def tolerance(dt: og.DType) -> dict[str, Any]:
    return {og.float32: dict(rtol=3e-5, atol=1e-6), og.float64: dict(rtol=1e-9, atol=1e-12),
            og.float16: dict(rtol=2e-3, atol=2e-3), og.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}.get(
        dt, dict(rtol=0, atol=0))


def check(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor], **tol: Any) -> None:
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
        t = tolerance(as_dtype(e.dtype)) | tol
        torch.testing.assert_close(a, e, equal_nan=True, **t)


# ---- sample values ----------------------------------------------------------------------------------------
def values(dt: og.DType, shape: tuple[int, ...], kind: str, gen: torch.Generator,
           specials: bool = True) -> torch.Tensor:
    n = 1
    for d in shape:
        n *= d
    if dt is og.bool:
        return (torch.rand(n, generator=gen) > 0.5).reshape(shape)
    if dt.is_integer:
        lo, hi = {"shift": (-2, 3 * dt.bits // 2), "base": (-4, 5), "exponent": (-2, 8)}.get(kind, (-20, 21))
        if not dt.signed:
            lo = max(lo, 0)
        v = torch.randint(lo, hi, (n,), generator=gen)
        if kind == "nonzero":
            v = torch.where(v == 0, 7, v)
        return v.to(dt.torch_dtype).reshape(shape)
    v = torch.randn(n, generator=gen, dtype=torch.float64) * 2
    if kind == "exponent":
        v = torch.where(torch.rand(n, generator=gen) > 0.5, v.round(), v)  # integral exponents of negative bases
    if specials:
        k = min(n, len(SPECIALS))
        v[:k] = torch.tensor(SPECIALS[:k], dtype=torch.float64)[torch.randperm(k, generator=gen)]
    return v.to(dt.torch_dtype).reshape(shape)


# ---- one case per op (ops with attributes: a few attribute values) ------------------------------------------
@dataclass
class Case:
    id: str
    op: OpDef
    build: Callable[..., Tensor]
    arity: int
    kinds: tuple[str, ...] = ()  # value kind per input ("" any)
    tol: dict[str, Any] | None = None


def _apply(op: OpDef) -> Callable[..., Tensor]:
    return lambda g, *xs: g._apply(op, list(xs), None, None)


_TERNARY = {ew.SELECT, ew.CLAMP}
_UNARY_MODULES = (un, act)
_KINDS: dict[OpDef, tuple[str, ...]] = {
    ew.DIVIDE: ("", "nonzero"), ew.MODULO: ("", "nonzero"), ew.FLOOR_MODULO: ("", "nonzero"),
    ew.SHIFT_LEFT: ("", "shift"), ew.SHIFT_RIGHT: ("", "shift"), ew.POWER: ("base", "exponent"),
}
_WITH_ATTRS = {
    ew.CAST: [],  # test_cast
    act.LEAKY_RELU: [("leaky_relu", lambda g, x: g.leaky_relu(x, 0.1))],
    act.ELU: [("elu", lambda g, x: g.elu(x, 1.5))],
    act.GELU: [("gelu", lambda g, x: g.gelu(x)), ("gelu_tanh", lambda g, x: g.gelu(x, approximate=True))],
    act.HARD_SIGMOID: [("hard_sigmoid", lambda g, x: g.hard_sigmoid(x))],
    act.SOFTPLUS: [("softplus", lambda g, x: g.softplus(x)),
                   ("softplus_beta", lambda g, x: g.softplus(x, beta=2.0, threshold=5.0))],
    gs.FILL_LIKE: [("fill_like", lambda g, x: g.fill_like(x, 2.5)),
                   ("fill_like_int", lambda g, x: g.fill_like(x, 3, og.int32)),
                   ("fill_like_bool", lambda g, x: g.fill_like(x, True, og.bool))],
    norm.NORMALIZE: [],  # test_normalize
}


def _cases() -> list[Case]:
    cases = []
    for op in EXPRESSIONS:
        if op in _WITH_ATTRS:
            for name, build in _WITH_ATTRS[op]:
                cases.append(Case(name, op, build, 1))
            continue
        arity = 3 if op in _TERNARY else 1 if any(op in vars(m).values() for m in _UNARY_MODULES) else 2
        cases.append(Case(op.name, op, _apply(op), arity, _KINDS.get(op, ())))
    return cases


CASES = _cases()


def _valid_dtypes(case: Case) -> list[og.DType]:
    ok = []
    for dt in DTYPES:
        g = og.Graph()
        xs = [g.placeholder(s, og.bool if case.op is ew.SELECT and i == 0 else dt)
              for i, s in enumerate(SHAPES[case.arity])]
        try:
            case.build(g, *xs)
        except og.OpgraphError:
            continue
        ok.append(dt)
    return ok


def test_every_op_of_the_table_has_a_case() -> None:
    covered = {c.op for c in CASES} | {ew.CAST, norm.NORMALIZE}
    assert set(EXPRESSIONS) <= covered


@pytest.mark.parametrize("dt", [og.float32, og.float16, og.bfloat16])
def test_tanh_takes_the_hardware_approximation_for_bfloat16_only(dt: og.DType) -> None:
    """bfloat16 rounds away the approximation's error; float16 and float32 would not (GPU check: test_region_gpu),
    and only where the kernel allows an approximation (``test_region_kernels``: where no sum cancels it)."""
    t = TensorType((8,), dt)
    text = EXPRESSIONS[un.TANH](["v"], ExprContext(None, (t,), (t,), approximate=True))
    assert text == ("og_tanh_bf16(v)" if dt is og.bfloat16 else "og_tanh(v)")
    assert EXPRESSIONS[un.TANH](["v"], ExprContext(None, (t,), (t,))) == "og_tanh(v)"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_one_op_kernel_matches_lowering(case: Case) -> None:
    dtypes = _valid_dtypes(case)
    assert dtypes, f"{case.id}: no dtype builds"
    gen = torch.Generator().manual_seed(0)
    tested = 0
    for dt in dtypes:
        g = og.Graph()
        feeds = {}
        for i, shape in enumerate(SHAPES[case.arity]):
            in_dt = og.bool if case.op is ew.SELECT and i == 0 else dt
            kind = case.kinds[i] if i < len(case.kinds) else ""
            x = g.placeholder(shape, in_dt)
            feeds[x] = values(in_dt, shape, kind, gen)
        out = case.build(g, *feeds)
        try:
            emit_elementwise(*region_of([out]), [out])
        except NotExpressible:
            continue  # a dtype the expression declines (float64 of a float32-accurate polynomial)
        check(run_fused([out], feeds), g.run(feeds, [out]))
        tested += 1
    assert tested, f"{case.id}: no dtype generated"


@pytest.mark.parametrize("src", [og.float32, og.float16, og.bfloat16, og.int32, og.bool, og.float64, og.int8])
def test_cast(src: og.DType) -> None:
    gen = torch.Generator().manual_seed(1)
    g = og.Graph()
    x = g.placeholder((3, 4), src)
    v = values(src, (3, 4), "", gen, specials=False)
    if src.is_floating:
        v = (v.double() * 10).to(src.torch_dtype)  # float -> int truncates toward zero
    dsts = [og.float32, og.float16, og.bfloat16, og.int32, og.bool, og.float64, og.int8, og.int64]
    outs = [g.cast(x, d) for d in dsts if not (src.is_floating and d is og.int8)]  # out-of-range casts differ
    ops, inputs = region_of(outs)
    got = elementwise_kernel(ops, inputs, outs, block=16)(v)
    check(got, g.run({x: v}, outs))


@pytest.mark.parametrize("dt", [og.float32, og.float16, og.bfloat16])
def test_normalize(dt: og.DType) -> None:
    gen = torch.Generator().manual_seed(2)
    g = og.Graph()
    shapes = [(3, 4, 5), (3, 4, 1), (3, 4, 1), (5,), (5,)]
    feeds = {g.placeholder(s, dt): values(dt, s, "", gen, specials=False) for s in shapes}
    xs = list(feeds)
    feeds[xs[2]] = feeds[xs[2]].abs()
    outs = [g.normalize(xs[0], xs[1], xs[2], xs[3], xs[4], epsilon=1e-3), g.normalize(xs[0], xs[1], xs[2], epsilon=0.1)]
    check(run_fused(outs, feeds), g.run(feeds, outs))


# ---- chains ----------------------------------------------------------------------------------------------
CHAINS: list[tuple[str, Callable[..., Any]]] = [
    ("exp_mul_add", lambda g, x, y: g.exp(x) * y + 1),
    ("leaky_select", lambda g, x, y: g.select(x > 0, x, 0.1 * x)),
    ("gelu_sigmoid", lambda g, x, y: g.gelu(x) * g.sigmoid(y)),
    ("two_outputs", lambda g, x, y: (g.tanh(x), g.maximum(g.tanh(x), y) - y)),
    ("int_and_bool", lambda g, x, y: g.select(g.logical_and(x > 0, y < 1),
                                               g.cast(g.cast(x * 3.0, og.int32) + 1, og.float32), y)),
]


@pytest.mark.parametrize("dt", [og.float32, og.float16, og.bfloat16])
@pytest.mark.parametrize("name,build", CHAINS, ids=[c[0] for c in CHAINS])
def test_chain(name: str, build: Callable[..., Any], dt: og.DType) -> None:
    gen = torch.Generator().manual_seed(3)
    g = og.Graph()
    x, y = g.placeholder((2, 1, 6), dt), g.placeholder((3, 1), dt)
    feeds = {x: values(dt, (2, 1, 6), "", gen, specials=False), y: values(dt, (3, 1), "", gen, specials=False)}
    out = build(g, x, y)
    outs = list(out) if isinstance(out, tuple) else [out]
    check(run_fused(outs, feeds), g.run(feeds, outs))


def test_output_smaller_than_domain_and_scalar_inputs() -> None:
    g = og.Graph()
    x, s = g.placeholder((4, 1), og.float32), g.placeholder((), og.float32)
    a = g.exp(x) * s  # (4, 1): stored once per element although the domain is (4, 5)
    b = a + g.placeholder((5,), og.float32)
    feeds = {t: torch.randn(t.shape) for t in g.placeholders}
    check(run_fused([a, b], feeds, block=8), g.run(feeds, [a, b]))


def test_kernel_source_is_cached_by_hash(tmp_path: Any) -> None:
    g = og.Graph()
    x = g.placeholder((3,), og.float32)
    y = g.exp(x)
    k1 = elementwise_kernel(*region_of([y]), [y], cache_dir=tmp_path)
    k2 = elementwise_kernel(*region_of([y]), [y], cache_dir=tmp_path)
    assert k1.source == k2.source and k1.key == k2.key
    assert k1.fn is k2.fn
    assert "tl.exp(" in k1.source
    v = torch.randn(3)
    check(k1(v), [torch.exp(v)])


def test_dynamic_dims_are_kernel_arguments() -> None:
    g = og.Graph()
    x = g.placeholder((None, 3), og.float32)
    b = g.placeholder((3,), og.float32)
    y = g.exp(x) + b
    kernel = elementwise_kernel(*region_of([y]), [y], block=16)
    assert "n0_0" in kernel.source  # the dynamic dim is an argument, not baked into the source
    for rows in (1, 5, 33):
        v, w = torch.randn(rows, 3), torch.randn(3)
        check(kernel(v, w), [torch.exp(v) + w])


def test_errors() -> None:
    g = og.Graph()
    z = g.placeholder((2,), og.complex64)
    with pytest.raises(NotExpressible, match="complex64"):
        w = g.exp(z)
        emit_elementwise(*region_of([w]), [w])
    y = g.placeholder((3,), og.float32)
    e = g.exp(y)
    k = elementwise_kernel(*region_of([e]), [e])
    with pytest.raises(og.OpgraphError, match="expected"):
        k(torch.zeros(4))
    with pytest.raises(og.OpgraphError, match="not computed"):
        emit_elementwise([e.op], [y], [y])


def test_empty_domain() -> None:
    g = og.Graph()
    x = g.placeholder((0, 3), og.float32)
    y = g.exp(x)
    (out,) = elementwise_kernel(*region_of([y]), [y])(torch.zeros(0, 3))
    assert out.shape == (0, 3)


# ---- random chains (hypothesis) against the unfused graph run --------------------------------------------
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

# bounded, continuous ops, so rounding differences between fused (float32 registers) and unfused (rounded
# to the storage dtype after each op) runs stay small
_RANDOM_UNARY: list[Callable[..., Tensor]] = [
    lambda g, x: g.tanh(x), lambda g, x: g.sigmoid(x), lambda g, x: g.sin(x), lambda g, x: g.abs(x),
    lambda g, x: g.negative(x), lambda g, x: g.relu(x), lambda g, x: g.silu(x), lambda g, x: g.softsign(x),
    lambda g, x: g.erf(x), lambda g, x: g.gelu(x), lambda g, x: g.leaky_relu(x, 0.1), lambda g, x: x * 0.5 + 1.0,
]
_RANDOM_BINARY: list[Callable[..., Tensor]] = [
    lambda g, x, y: x + y, lambda g, x, y: x - y, lambda g, x, y: x * y, lambda g, x, y: g.maximum(x, y),
    lambda g, x, y: g.minimum_with_nan_propagation(x, y), lambda g, x, y: g.select(x > y, x, y),
]
_CHAIN_TOL = {og.float32: dict(rtol=1e-4, atol=1e-5), og.float16: dict(rtol=2e-2, atol=2e-2),
              og.bfloat16: dict(rtol=1e-1, atol=1e-1)}


@st.composite
def _chains(draw: Any) -> dict[str, Any]:
    rank = draw(st.integers(0, 3))
    domain = [draw(st.integers(1, 4)) for _ in range(rank)]
    shapes = []
    for _ in range(draw(st.integers(1, 3))):
        drop = draw(st.integers(0, rank))  # leading dims left out, others kept or set to 1
        shapes.append(tuple(d if draw(st.booleans()) else 1 for d in domain[drop:]))
    steps = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99)),
                          min_size=2, max_size=6))
    return dict(shapes=shapes, steps=steps, dtype=draw(st.sampled_from([og.float32, og.float16, og.bfloat16])),
                extra=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))


@hypothesis.settings(max_examples=30, deadline=None, derandomize=True)
@hypothesis.given(_chains())
def test_random_chains_match_unfused(chain: dict[str, Any]) -> None:
    g = og.Graph()
    gen = torch.Generator().manual_seed(chain["seed"])
    dt = chain["dtype"]
    pool = [g.placeholder(s, dt) for s in chain["shapes"]]
    feeds = {x: (torch.randn(x.shape, generator=gen) * 1.5).to(dt.torch_dtype) for x in pool}
    made = []
    for binary, op, i, j in chain["steps"]:
        if binary:
            v = _RANDOM_BINARY[op % len(_RANDOM_BINARY)](g, pool[i % len(pool)], pool[j % len(pool)])
        else:
            v = _RANDOM_UNARY[op % len(_RANDOM_UNARY)](g, pool[i % len(pool)])
        pool.append(v)
        made.append(v)
    outs = [made[-1]] + ([made[0]] if chain["extra"] and len(made) > 1 else [])
    check(run_fused(outs, feeds, block=16), g.run(feeds, outs), **_CHAIN_TOL[dt])


def test_large_domains_index_in_int64() -> None:
    g = og.Graph()
    x = g.placeholder((2**16, 2**15), og.float16)
    y = g.exp(x)
    assert "program_id(0).to(tl.int64)" in emit_elementwise(*region_of([y]), [y])
    small = g.exp(g.placeholder((4,), og.float16))
    assert "program_id(0).to(tl.int64)" not in emit_elementwise(*region_of([small]), [small])


def test_float32_division_is_written_ieee_rounded() -> None:
    """Triton's ``/`` is ``div.full.f32`` on a GPU (up to 2 ulp; the interpreter divides exactly, so only the
    source can show it here, the bits are checked on CUDA in test_region_gpu.py): float32 and 16-bit quotients
    use ``tl.div_rn``, float64's ``/`` (IEEE already), and so does a literal numerator (see ``exact_div``)."""
    g = og.Graph()
    for dt, written in [(og.float32, True), (og.bfloat16, True), (og.float64, False)]:
        x, y = g.placeholder((8,), dt), g.placeholder((8,), dt)
        q = g.divide(x, y)
        assert ("tl.div_rn(" in emit_elementwise(*region_of([q]), [q])) is written, dt
    x = g.placeholder((8,), og.float32)
    mean = g.reduce_mean(x * 2.0, [0])
    assert "tl.div_rn(" in emit_elementwise(*region_of([mean]), [mean])
    assert exact_div("1.0", "v", "tl.float32") == "1.0 / v"  # a constant written into the source
