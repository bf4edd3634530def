"""Property tests of stitching: random graphs of elementwise, broadcast, view and reduction ops, compiled with
fusion (kernels run by Triton's interpreter) and without, give the same results.

A graph is drawn as a base shape (rank 1..3, dims 1..5), a dtype (float32, float16, bfloat16) and a list of
steps, each an op kind and a seed for its details (which earlier value it reads, its axes, its other
operand ...), so hypothesis shrinks failures to short graphs. Fused 16-bit chains keep float32 between the
ops of a region while the unfused run rounds after each op: the comparison is normalised by the result's
magnitude, with a tolerance per dtype (float32 tight, 16-bit a few units of their precision).
"""

from __future__ import annotations

import ast
import random
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import torch

pytest.importorskip("triton")
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton import configs as configs_module  # noqa: E402
from opgraph.ir.graph import Tensor  # noqa: E402

FUSED = og.CompilationDescriptor(fusion=True, triton_interpret=True, verify_each_pass=True)
PLAIN = og.CompilationDescriptor(fusion=False)
DTYPES = (og.float32, og.float16, og.bfloat16)
# max |fused - unfused| / (1 + max |unfused|); the largest seen over 7000 random graphs: 3e-7, 1.6e-3, 1e-2
TOLERANCE = {og.float32: 1e-5, og.float16: 5e-3, og.bfloat16: 3e-2}
# bounded, continuous ops: rounding differences between the fused and unfused runs stay small
UNARY: list[Callable[[og.Graph, Tensor], Tensor]] = [
    lambda g, x: g.tanh(x), lambda g, x: g.sigmoid(x), lambda g, x: g.sin(x), lambda g, x: g.abs(x),
    lambda g, x: g.negative(x), lambda g, x: g.relu(x), lambda g, x: g.silu(x), lambda g, x: g.softsign(x),
    lambda g, x: x * 0.5 + 1.0, lambda g, x: g.gelu(x),
]
BINARY: list[Callable[[og.Graph, Tensor, Tensor], Tensor]] = [
    lambda g, x, y: x + y, lambda g, x, y: x - y, lambda g, x, y: x * y, lambda g, x, y: g.maximum(x, y),
    lambda g, x, y: g.minimum(x, y),
]
KINDS = ("unary", "unary", "unary", "binary", "binary", "binary",  # elementwise ops weigh more: they fuse
         "transpose", "reshape", "slice", "reverse", "expand_dims", "squeeze", "broadcast_to",
         "reduce_sum", "reduce_mean", "reduce_max", "softmax", "log_softmax", "layer_norm")


@st.composite
def graphs(draw: Any) -> dict[str, Any]:
    rank = draw(st.integers(1, 3))
    return dict(shape=tuple(draw(st.integers(1, 5)) for _ in range(rank)),
                dtype=draw(st.sampled_from(DTYPES)),
                steps=draw(st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2**16)), min_size=2, max_size=7)),
                extra=draw(st.integers(-1, 6)),  # a second output: an earlier value, when in range
                seed=draw(st.integers(0, 2**16)))


def _step(g: og.Graph, kind: str, rnd: random.Random, t: Tensor, pool: list[Tensor], feeds: list[Tensor],
          dt: og.DType) -> Tensor | None:
    s, n = list(t.shape), t.rank
    if kind == "unary":
        return rnd.choice(UNARY)(g, t)
    if kind == "binary":  # with an earlier value that broadcasts into t, or a new input that does
        fits = [u for u in pool
                if u.rank <= n and all(a in (1, b) for a, b in zip(u.shape, s[n - u.rank:], strict=True))]
        if fits and rnd.random() < 0.5:
            u = rnd.choice(fits)
        else:
            u = g.placeholder(tuple(d if rnd.random() < 0.6 else 1 for d in s[rnd.randint(0, n):]), dt)
            feeds.append(u)
        op = rnd.choice(BINARY)
        return op(g, t, u) if rnd.random() < 0.5 else op(g, u, t)
    if n == 0:  # the rest need an axis
        return None
    if kind == "transpose":
        perm = list(range(n))
        rnd.shuffle(perm)
        return g.transpose(t, perm) if n > 1 else None
    if kind == "reshape":
        options = [list(reversed(s)), [int(torch.tensor(s).prod())]]
        if n < 3:
            options.append(s + [1])
            options += [s[:k] + [2, s[k] // 2] + s[k + 1:] for k in range(n) if s[k] % 2 == 0 and s[k] > 2]
        if n > 1:
            options.append([s[0] * s[1], *s[2:]])
        return g.reshape(t, rnd.choice(options))
    if kind == "slice":  # a stride of +-1 or +-2 from a random start to the end (never empty)
        strides = [rnd.choice([1, 2, -1, -2]) for _ in s]
        return g.slice(t, [rnd.randint(0, d - 1) for d in s], [0] * n, strides, end_mask=(1 << n) - 1)
    if kind == "reverse":
        return g.reverse(t, sorted(rnd.sample(range(n), rnd.randint(1, n))))
    if kind == "expand_dims":
        return g.expand_dims(t, rnd.randint(0, n)) if n < 3 else None
    if kind == "squeeze":
        ones = [k for k, d in enumerate(s) if d == 1]
        return g.squeeze(t, rnd.choice(ones)) if ones else None
    if kind == "broadcast_to":
        target = [d if d != 1 else rnd.randint(1, 4) for d in s]
        if n < 3 and rnd.random() < 0.5:
            target = [rnd.randint(2, 3), *target]
        return g.broadcast_to(t, target)
    axes = sorted(rnd.sample(range(n), rnd.randint(1, n)))
    if kind in ("reduce_sum", "reduce_mean", "reduce_max"):
        return getattr(g, kind)(t, axes, rnd.random() < 0.5)
    if kind in ("softmax", "log_softmax"):
        return getattr(g, kind)(t, rnd.randrange(n))
    assert kind == "layer_norm"
    return g.layer_norm(t, axes, epsilon=0.5)  # a large epsilon: rows of near-equal values stay well conditioned


def build(spec: dict[str, Any]) -> tuple[og.Graph, list[Tensor], list[Tensor]]:
    g = og.Graph()
    dt = spec["dtype"]
    x = g.placeholder(spec["shape"], dt, name="x")
    pool, feeds = [x], [x]
    for kind, seed in spec["steps"]:
        rnd = random.Random(seed)
        t = pool[-1] if rnd.random() < 0.85 else rnd.choice(pool)
        v = _step(g, kind, rnd, t, pool, feeds, dt)
        if v is not None:
            pool.append(v)
    outs = [pool[-1]]
    extra = spec["extra"]
    if 0 <= extra < len(pool) - 2:
        outs.append(pool[extra + 1])
    return g, feeds, outs


# views of contiguous values: free at run time (the keep-dims pass adds squeezes after fused epilogues)
VIEWS = frozenset({"squeeze", "expand_dims", "reshape"})


def _working(exe: og.Executable) -> int:
    """The ops of ``exe``'s program that do work (views aside)."""
    return sum(o.op.name not in VIEWS for o in exe.program.graph.ops)


def check(spec: dict[str, Any]) -> int | None:
    """Compile ``spec``'s graph fused and unfused, run both, compare; the number of fused regions, or None
    for a graph not to judge (see the two ``return None``)."""
    g, feeds, outs = build(spec)
    dt = spec["dtype"]
    gen = torch.Generator().manual_seed(spec["seed"])
    values = [torch.randn(t.shape, generator=gen).to(dt.torch_dtype) for t in feeds]
    types = {t: t.type for t in feeds}
    fused = g.compile(types, outs, device="cpu", descriptor=FUSED)
    plain = g.compile(types, outs, device="cpu", descriptor=PLAIN)
    regions = sum(o.op.name == "fused_region" for o in fused.program.graph.ops)
    assert _working(fused) <= _working(plain)
    want = plain.run(values)
    if not all(bool(torch.isfinite(w).all()) for w in want):
        return None  # a 16-bit overflow in the unfused run (the fused one keeps float32 inside)
    got = fused.run(values)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        if b.numel():
            err = (a.double() - b.double()).abs().max() / (1 + b.double().abs().max())
            assert bool(torch.isfinite(a).all()) and float(err) <= TOLERANCE[dt], (float(err), str(g))
    return regions


def _judge(spec: dict[str, Any]) -> None:
    regions = check(spec)
    hypothesis.assume(regions is not None)
    hypothesis.event(f"{min(regions or 0, 3)} fused regions")


@hypothesis.settings(max_examples=400, deadline=None, derandomize=True)
@hypothesis.given(graphs())
def test_random_graphs_fused_match_unfused(spec: dict[str, Any]) -> None:
    _judge(spec)


@hypothesis.settings(max_examples=150, deadline=None, derandomize=True)
@hypothesis.given(graphs())
def test_random_graphs_with_looped_reductions(spec: dict[str, Any]) -> None:
    """Every reduction row longer than one element takes the looped kernel (statistics loops, a final loop)."""
    with mock.patch.object(configs_module, "PERSISTENT_MAX", 1):
        _judge(spec)


def check_gradients(spec: dict[str, Any]) -> int | None:
    """Gradients of a weighted sum of ``spec``'s outputs with respect to its inputs (float32; autodiff first, then
    fusion), fused and unfused; the number of fused regions, or None for a graph not to judge."""
    spec = dict(spec, dtype=og.float32)
    g, feeds, outs = build(spec)
    gen = torch.Generator().manual_seed(spec["seed"])
    loss = None
    for o in outs:  # weights of the outputs' shapes: every element's gradient differs
        term = g.reduce_sum(o * g.constant(torch.randn(o.shape, generator=gen)))
        loss = term if loss is None else loss + term
    assert loss is not None
    found = g.gradients(loss, feeds)
    grads = [found[t] for t in feeds]
    values = [torch.randn(t.shape, generator=gen) for t in feeds]
    types = {t: t.type for t in feeds}
    fused = g.compile(types, grads, device="cpu", descriptor=FUSED)
    plain = g.compile(types, grads, device="cpu", descriptor=PLAIN)
    want = plain.run(values)
    if not all(bool(torch.isfinite(w).all()) for w in want):
        return None
    got = fused.run(values)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        if b.numel():
            err = (a.double() - b.double()).abs().max() / (1 + b.double().abs().max())
            assert bool(torch.isfinite(a).all()) and float(err) <= 1e-4, (float(err), str(g))
    return sum(o.op.name == "fused_region" for o in fused.program.graph.ops)


@hypothesis.settings(max_examples=120, deadline=None, derandomize=True)
@hypothesis.given(graphs())
def test_random_graphs_gradients_fused_match_unfused(spec: dict[str, Any]) -> None:
    """Gradient graphs fuse too: autodiff runs first, then fusion, and the gradients agree."""
    regions = check_gradients(spec)
    hypothesis.assume(regions is not None)
    hypothesis.event(f"{min(regions or 0, 3)} fused regions")


def test_a_region_that_later_reads_another_makes_its_earlier_values_wait_for_it() -> None:
    """Found by the property above with random seeds: a layer norm's gradient over non-trailing axes. One region
    took in an op reading a second region after a value of the first had been recorded as depending on the first
    alone; the second region then joined an op reading that value, and each region waited for the other."""
    spec = dict(shape=(4, 4, 1), dtype=og.float32, steps=[("transpose", 2), ("layer_norm", 177)], extra=0, seed=0)
    regions = check_gradients(spec)
    assert regions is not None and regions >= 2


SPECS = [  # the generator builds graphs that do fuse (so the properties above are not vacuous)
    dict(shape=(3, 4), dtype=og.float32, steps=[("unary", 10), ("unary", 11)], extra=-1, seed=0),
    dict(shape=(3, 4), dtype=og.float16, steps=[("binary", 10), ("softmax", 11), ("unary", 12)], extra=-1, seed=1),
    dict(shape=(2, 3, 4), dtype=og.bfloat16, steps=[("transpose", 10), ("layer_norm", 11), ("unary", 12)], extra=0,
         seed=2),
    dict(shape=(4, 5), dtype=og.float32, steps=[("unary", 10), ("reduce_sum", 11), ("unary", 12)], extra=-1, seed=3),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: "-".join(k for k, _ in s["steps"]))
def test_generated_graphs_fuse(spec: dict[str, Any]) -> None:
    regions = check(spec)
    assert regions is not None and regions >= 1


def test_patched_persistent_max_makes_looped_kernels() -> None:
    # what test_random_graphs_with_looped_reductions relies on: the patch reaches the code generator
    g = og.Graph()
    x = g.placeholder((3, 5), og.float32)
    y = g.softmax(x * 2.0, -1)
    with mock.patch.object(configs_module, "PERSISTENT_MAX", 1):
        exe = g.compile({x: x.type}, [y], device="cpu", descriptor=og.CompilationDescriptor(triton_interpret=True))
        (kernel,) = [k for k in exe.kernels() if k.op == "fused_region"]
    assert "for start" in (kernel.source or ""), kernel.source


def test_looped_kernels_never_reuse_a_loop_variable() -> None:
    # a loop variable once was "r" + counter + "0" ("r20"), which a later fresh "r20" inside the next loop could
    # take: Triton's compiler (not its interpreter) rejects that as a loop-carried type change. Prologues of every
    # length move the counter past each loop variable's name.
    two_loops = 0
    for length in range(1, 30):
        g = og.Graph()
        x = g.placeholder((2, 3, 4, 5), og.float32)
        y = x
        for k in range(length):
            y = g.sin(y) + float(k)
        sums = [g.reduce_sum(y, [0, 2, 3]), g.reduce_max(y * x, [0, 2, 3])]  # a loop each over (N, H, W)
        with mock.patch.object(configs_module, "PERSISTENT_MAX", 1):
            exe = g.compile({x: x.type}, sums, device="cpu", descriptor=og.CompilationDescriptor(triton_interpret=True))
            sources = [k.source or "" for k in exe.kernels() if k.op == "fused_region"]
        for source in sources:
            tree = ast.parse(source)
            loops = [n.target.id for n in ast.walk(tree) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)]
            assigned = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
                        if isinstance(t, ast.Name)}
            assert not set(loops) & assigned, (length, source)
        two_loops += any(source.count("for ") >= 2 for source in sources)
    assert two_loops >= 20  # most lengths fit one kernel with a loop per reduction


def test_independent_sums_share_one_pass_over_the_rows() -> None:
    # a batch norm's two sums (and its backward's): one loop reads x once; a sum of the first's statistics cannot
    g = og.Graph()
    x = g.placeholder((6, 3, 4, 5), og.float32)
    d = x - 2.0
    sums = [g.reduce_sum(d, [0, 2, 3]), g.reduce_mean(d * d, [0, 2, 3])]
    with mock.patch.object(configs_module, "PERSISTENT_MAX", 1):
        exe = g.compile({x: x.type}, sums, device="cpu", descriptor=og.CompilationDescriptor(triton_interpret=True))
    (source,) = [k.source or "" for k in exe.kernels() if k.op == "fused_region"]
    assert source.count("for ") == 1 and source.count("tl.load(in0") == 1, source
    xv = torch.randn(6, 3, 4, 5, generator=torch.Generator().manual_seed(0))
    got = exe.run([xv])
    torch.testing.assert_close(got[0], (xv - 2.0).sum((0, 2, 3)))
    torch.testing.assert_close(got[1], ((xv - 2.0) ** 2).mean((0, 2, 3)))
