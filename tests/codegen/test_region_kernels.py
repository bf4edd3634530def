"""Region kernels with reductions (``region_kernel(*region_of(outs), outs, config=...)``), run by Triton's
interpreter on the CPU, against the unfused graph run (the ops' PyTorch lowerings) and NumPy.

Every reduction recipe runs under a persistent configuration (the default for these small shapes: a row is
held in registers) and a looped one (``LOOPED``: two rows a program, four reduced elements a step, so
every row takes several loop steps). Then prologues and epilogues, injective ops inside a region, dynamic
dims, strided inputs, ``out=`` and ``inplace_ok``, NaN semantics, and integer and bool reductions.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("triton")
# masked-off lanes and the special values make NumPy warn inside the interpreter; results are what is checked
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


import opgraph as og  # noqa: E402
from opgraph.codegen.triton.kernel import RegionKernel, region_kernel, region_of  # noqa: E402
from opgraph.codegen.triton.region import Config  # noqa: E402
from opgraph.core.dtype import as_dtype  # noqa: E402
from opgraph.ir.graph import Tensor  # noqa: E402
from opgraph.ir.opdef import FusionKind  # noqa: E402

LOOPED = Config(reduction=True, xblock=2, rblock=4, looped=True)
CONFIGS = {"persistent": None, "looped": LOOPED}  # None: the default configuration, persistent at these sizes
FLOATS = (og.float32, og.float16, og.bfloat16, og.float64)
NAN, INF = float("nan"), float("inf")


# ---- helpers ---------------------------------------------------------------------------------------------
def tolerance(dt: og.DType) -> dict[str, float]:
    return {og.float32: dict(rtol=3e-5, atol=3e-6), og.float64: dict(rtol=1e-9, atol=1e-12),
            og.float16: dict(rtol=2e-3, atol=2e-3), og.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}.get(
        dt, dict(rtol=0, atol=0))


def check(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor], **tol: Any) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
        torch.testing.assert_close(a, e, equal_nan=True, **(tolerance(as_dtype(e.dtype)) | tol))


def kernel_for(outs: Sequence[Tensor], config: Config | None = None) -> tuple[RegionKernel, list[Tensor]]:
    ops, inputs = region_of(outs)
    kernel = region_kernel(ops, inputs, list(outs), config=config)
    static = all(t.type.is_static for t in inputs)
    if config is None and kernel.config.reduction and static:
        assert not kernel.config.looped  # the "persistent" case really is one
    if config is LOOPED:
        assert "for " in kernel.source and "RBLOCK" in kernel.source
    return kernel, inputs


def args(inputs: Sequence[Tensor], feeds: dict[Tensor, torch.Tensor]) -> list[torch.Tensor]:
    """The kernel's arguments: fed values, and constants' payloads."""
    by_id = {id(t): v for t, v in feeds.items()}
    return [by_id.get(id(t), t.op.payload) for t in inputs]


def run_region(outs: Sequence[Tensor], feeds: dict[Tensor, torch.Tensor], config: Config | None = None,
               ) -> list[torch.Tensor]:
    kernel, inputs = kernel_for(outs, config)
    return kernel(*args(inputs, feeds))


def compare(g: og.Graph, outs: Sequence[Tensor], feeds: dict[Tensor, torch.Tensor], config: Config | None = None,
            **tol: Any) -> None:
    check(run_region(outs, feeds, config), g.run(feeds, list(outs)), **tol)


def randn(shape: Sequence[int], dt: og.DType, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(tuple(shape), generator=gen, dtype=torch.float64) * scale).to(dt.torch_dtype)


def outs_of(result: Tensor | Sequence[Tensor]) -> list[Tensor]:
    return [result] if isinstance(result, Tensor) else list(result)


# ---- every reduction recipe, over last / first / middle / several axes, both configurations ----------------
SHAPE = (3, 4, 5)
Build = Callable[[og.Graph, Tensor, tuple[int, ...], bool], Tensor]


def _param(g: og.Graph, x: Tensor, axes: tuple[int, ...], shift: float) -> Tensor:
    """A constant gamma (shift 0.5) or beta (shift -0.5) over the normalised dims."""
    shape = [int(x.shape[a] or 1) for a in axes]
    gen = torch.Generator().manual_seed(sum(shape))
    return g.constant((torch.rand(shape, generator=gen) + shift).to(x.dtype.torch_dtype))


# (recipe, build, kind): "axes" takes any axes and keepdims, "axis" one axis (softmax), "norm" axes only
RECIPES: list[tuple[str, Build, str]] = [
    ("reduce_sum", lambda g, x, ax, kd: g.reduce_sum(x, ax, kd), "axes"),
    ("reduce_mean", lambda g, x, ax, kd: g.reduce_mean(x, ax, kd), "axes"),
    ("reduce_prod", lambda g, x, ax, kd: g.reduce_prod(x, ax, kd), "axes"),
    ("reduce_max", lambda g, x, ax, kd: g.reduce_max(x, ax, kd), "axes"),
    ("reduce_min", lambda g, x, ax, kd: g.reduce_min(x, ax, kd), "axes"),
    ("reduce_max_nan", lambda g, x, ax, kd: g.reduce_max_with_nan_propagation(x, ax, kd), "axes"),
    ("reduce_min_nan", lambda g, x, ax, kd: g.reduce_min_with_nan_propagation(x, ax, kd), "axes"),
    ("variance", lambda g, x, ax, kd: g.variance(x, ax, kd), "axes"),
    ("sum_to", lambda g, x, ax, kd: g.sum_to(x, g.placeholder(tuple(1 if k in ax else d for k, d in enumerate(x.shape)),
                                                             x.dtype)), "axes"),
    ("softmax", lambda g, x, ax, kd: g.softmax(x, ax[0]), "axis"),
    ("log_softmax", lambda g, x, ax, kd: g.log_softmax(x, ax[0]), "axis"),
    ("layer_norm", lambda g, x, ax, kd: g.layer_norm(x, ax, epsilon=1e-3), "norm"),
    ("rms_norm", lambda g, x, ax, kd: g.rms_norm(x, ax, epsilon=1e-3), "norm"),
    ("layer_norm_affine", lambda g, x, ax, kd: g.layer_norm(x, ax, _param(g, x, ax, 0.5), _param(g, x, ax, -0.5)),
     "norm"),
    ("rms_norm_affine", lambda g, x, ax, kd: g.rms_norm(x, ax, _param(g, x, ax, 0.5)), "norm"),
]
# float32: last, first (columns), middle, split and all axes; the other dtypes: the last axis and a split pattern
AXES_F32 = [((2,), False), ((0,), True), ((1,), False), ((0, 2), True), ((0, 1, 2), False)]
AXES_OTHER = [((2,), True), ((0, 2), False)]


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("name,build,kind", RECIPES, ids=[r[0] for r in RECIPES])
def test_reduction_recipe(name: str, build: Build, kind: str, config: Config | None, dt: og.DType) -> None:
    gen = torch.Generator().manual_seed(len(name) * 7 + FLOATS.index(dt))
    cases = AXES_F32 if dt is og.float32 else AXES_OTHER
    tested = set()
    for axes, keepdims in cases:
        if kind == "axis" and len(axes) > 1:
            continue
        if kind != "axes":
            keepdims = False
        if (axes, keepdims) in tested:
            continue
        tested.add((axes, keepdims))
        g = og.Graph()
        x = g.placeholder(SHAPE, dt, name="x")
        y = build(g, x, axes, keepdims)
        if name == "reduce_prod":  # magnitudes near 1 keep the product of up to 60 elements in range
            v = (torch.rand(SHAPE, generator=gen, dtype=torch.float64) * 0.6 + 0.7)
            v = (v * torch.where(torch.rand(SHAPE, generator=gen) < 0.3, -1.0, 1.0)).to(dt.torch_dtype)
        else:
            v = randn(SHAPE, dt, gen)
        feeds = {x: v}
        for t in g.placeholders:  # sum_to's shape reference: any value of its shape
            feeds.setdefault(t, torch.zeros(t.shape, dtype=dt.torch_dtype))
        got = run_region([y], feeds, config)
        want = g.run(feeds, [y])
        assert got[0].shape == want[0].shape
        if kind == "axes" and name != "sum_to":
            assert got[0].ndim == (3 if keepdims else 3 - len(axes))
        extra = dict(rtol=1e-4, atol=1e-5) if (name == "reduce_prod" and dt is og.float32) else {}
        check(got, want, **extra)
    assert tested


def test_recipes_cover_every_generated_reduction() -> None:
    from opgraph.codegen.triton.reductions import REDUCTIONS

    names = {op.name for op in REDUCTIONS}
    covered = {"reduce_sum", "reduce_mean", "reduce_prod", "reduce_max", "reduce_min",
               "reduce_max_with_nan_propagation", "reduce_min_with_nan_propagation", "variance", "sum_to",
               "softmax", "log_softmax", "layer_norm", "rms_norm",
               "reduce_and", "reduce_or"}  # these two: test_bool_reductions
    assert names <= covered, names - covered


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_reductions_against_numpy(config: Config | None) -> None:
    """The unfused run is not the only oracle: sums, means, variances and norms straight from NumPy."""
    gen = torch.Generator().manual_seed(7)
    g = og.Graph()
    x = g.placeholder((4, 6), og.float32)
    gamma, beta = g.placeholder((6,), og.float32), g.placeholder((6,), og.float32)
    outs = [g.reduce_sum(x, 1), g.reduce_mean(x, 0), g.variance(x, 1, True), g.log_softmax(x, 1),
            g.layer_norm(x, 1, gamma, beta, epsilon=1e-5), g.rms_norm(x, 1, gamma, epsilon=1e-6)]
    v, gm, bt = randn((4, 6), og.float32, gen, 3.0), torch.rand(6, generator=gen) + 0.5, randn((6,), og.float32, gen)
    feeds = {x: v, gamma: gm, beta: bt}
    results = []
    for out in outs:  # one kernel each (their domains differ)
        results += run_region([out], feeds, config)
    a, w, b = v.double().numpy(), gm.double().numpy(), bt.double().numpy()
    mean, var = a.mean(1, keepdims=True), a.var(1, keepdims=True)
    lse = np.log(np.exp(a).sum(1, keepdims=True))
    expected = [a.sum(1), a.mean(0), var, a - lse, (a - mean) / np.sqrt(var + 1e-5) * w + b,
                a / np.sqrt((a * a).mean(1, keepdims=True) + 1e-6) * w]
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_allclose(got.double().numpy(), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_variance_of_rows_with_a_large_offset(config: Config | None) -> None:
    """1e4 + N(0, 1): E[x^2] - E[x]^2 in float32 would lose every digit; the kernel must keep them."""
    gen = torch.Generator().manual_seed(3)
    g = og.Graph()
    x = g.placeholder((3, 40), og.float32)
    outs = [g.variance(x * 1.0, 1), g.layer_norm(x * 1.0, 1)]
    v = (1e4 + torch.randn(3, 40, generator=gen, dtype=torch.float64)).float()
    var, ln = run_region(outs, {x: v}, config)
    a = v.double()
    np.testing.assert_allclose(var.numpy(), a.var(1, correction=0).numpy(), rtol=1e-2)
    np.testing.assert_allclose(ln.numpy(), torch.nn.functional.layer_norm(a, (40,)).numpy(), atol=2e-2)


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_log_softmax_of_rows_with_a_large_offset(config: Config | None) -> None:
    """Rows offset by 1e4 and by -1e30: log_softmax is (x - max) - log(sum), as unfused; max + log(sum) first rounds
    log(sum) away (1e-4 off at 1e4; at -1e30 every result 0)."""
    gen = torch.Generator().manual_seed(5)
    g = og.Graph()
    x = g.placeholder((3, 40), og.float32)
    v = torch.randn(3, 40, generator=gen, dtype=torch.float64)
    v[0] += 1e4
    v[1] -= 1e30
    (got,) = run_region([g.log_softmax(x * 1.0, 1)], {x: v.float()}, config)
    want = torch.log_softmax(v.float().double(), 1)
    np.testing.assert_allclose(got.double().numpy(), want.numpy(), rtol=1e-6, atol=2e-6)


# ---- prologues and epilogues ---------------------------------------------------------------------------
CHAINS: list[tuple[str, Callable[..., Any], list[tuple[int, ...]]]] = [
    ("layer_norm_prologue_epilogue",
     lambda g, x, b, w: g.relu(g.layer_norm(x * 2.0 + b, -1, w, b, epsilon=1e-3)), [(4, 6), (6,), (6,)]),
    ("softmax_then_multiply", lambda g, x, y: g.softmax(x) * y, [(4, 6), (4, 6)]),
    ("center_rows", lambda g, x: x - g.reduce_mean(x, -1, keepdims=True), [(4, 6)]),
    ("center_columns", lambda g, x: x - g.reduce_mean(x, 0, keepdims=True), [(4, 6)]),
    ("center_rows_expand_dims", lambda g, x: x - g.expand_dims(g.reduce_mean(x, -1), -1), [(4, 6)]),
    ("column_max_epilogue", lambda g, x: g.reduce_max(g.exp(x), 0) * 3.0 + 1.0, [(5, 4)]),
    ("log_softmax_exp", lambda g, x, b: g.exp(g.log_softmax(x + b)), [(4, 6), (6,)]),
    ("rms_norm_residual", lambda g, x, s, w: g.rms_norm(x * s, -1, w) + x, [(4, 6), (4, 1), (6,)]),
    ("softmax_of_layer_norm", lambda g, x: g.softmax(g.layer_norm(x, -1)), [(4, 6)]),
    ("sum_of_softmax_times_x", lambda g, x: g.reduce_sum(g.softmax(x) * x, -1), [(4, 6)]),
    ("row_and_full_outputs", lambda g, x: (g.variance(x, -1, True), g.reduce_mean(x, -1, True), g.tanh(x) * 2.0),
     [(4, 6)]),
    ("middle_axis_softmax", lambda g, x, b: g.softmax(x * 2.0 + b, 1), [(3, 5, 4), (5, 1)]),
    ("several_axes_layer_norm", lambda g, x, b: g.layer_norm(x + b, (1, 2)) * 0.5, [(3, 5, 4), (4,)]),
    ("sum_to_rows", lambda g, x, y, b: g.sum_to(g.exp(x) * y, b), [(2, 4, 6), (4, 6), (4, 1)]),
    ("sum_to_columns", lambda g, x, y, b: g.sum_to(g.exp(x) * y, b), [(2, 4, 6), (4, 6), (6,)]),
    ("reduction_of_a_broadcast", lambda g, x, b: g.reduce_sum(g.broadcast_to(b, [3, 4, 5]) * x, 1),
     [(3, 4, 5), (4, 1)]),
    ("count_positives", lambda g, x: g.reduce_sum(g.cast(x > 0.0, og.int32), -1), [(4, 6)]),
    ("scalar_result", lambda g, x: g.reduce_sum(x * x), [(5, 4)]),
]


@pytest.mark.parametrize("dt", [og.float32, og.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("name,build,shapes", CHAINS, ids=[c[0] for c in CHAINS])
def test_prologue_epilogue_chain(name: str, build: Callable[..., Any], shapes: list[tuple[int, ...]],
                                 config: Config | None, dt: og.DType) -> None:
    gen = torch.Generator().manual_seed(11)
    g = og.Graph()
    xs = [g.placeholder(s, dt) for s in shapes]
    feeds = {x: randn(x.shape, dt, gen) for x in xs}
    outs = outs_of(build(g, *xs))
    ops, _ = region_of(outs)
    assert sum(o.op.fusion is FusionKind.REDUCTION for o in ops) >= 1
    # 16-bit: the kernel keeps float32 between ops, the unfused run rounds after each op
    compare(g, outs, feeds, config, **({} if dt is og.float32 else dict(rtol=5e-2, atol=5e-2)))


# ---- injective ops inside a region ----------------------------------------------------------------------
INJECTIVE: list[tuple[str, Callable[..., Any], list[tuple[int, ...]]]] = [
    ("transpose_then_softmax", lambda g, x: g.softmax(g.transpose(x, [1, 0])), [(4, 6)]),
    ("transpose3d_then_softmax", lambda g, x: g.softmax(g.transpose(x, [2, 0, 1]), 1), [(3, 4, 5)]),
    ("reshape_between_elementwise", lambda g, x: g.tanh(g.reshape(g.exp(x) * 0.5, [6, 4])) + 1.0, [(4, 6)]),
    ("reshape_regroup_then_sum", lambda g, x: g.reduce_sum(g.reshape(g.exp(x), [2, 12]), -1), [(4, 6)]),
    ("reshape_split_then_softmax", lambda g, x: g.softmax(g.reshape(x * 2.0, [4, 2, 3]), 1), [(4, 6)]),
    ("slice_steps_then_softmax", lambda g, x: g.softmax(g.slice(x * 2.0, [0, 1], [4, 6], [2, 2])), [(4, 6)]),
    ("slice_negative_steps_then_sum", lambda g, x: g.reduce_sum(g.slice(x + 1.0, [-1, -1], [-5, -7], [-1, -2]), -1),
     [(4, 6)]),
    ("reverse_then_softmax", lambda g, x: g.softmax(g.reverse(x + 1.0, 1)), [(4, 6)]),
    ("softmax_then_reverse_along_the_row", lambda g, x: g.reverse(g.softmax(x), 1) * 2.0, [(4, 6)]),
    ("expand_squeeze", lambda g, x: g.squeeze(g.expand_dims(g.exp(x), 1), 1) * 2.0, [(4, 6)]),
    ("broadcast_to_then_softmax", lambda g, x, b: g.softmax(g.broadcast_to(b, [4, 6]) + x), [(4, 6), (6,)]),
    ("broadcast_to_then_column_max", lambda g, x, b: g.reduce_max(g.broadcast_to(g.exp(b), [4, 6]) * x, 0),
     [(4, 6), (4, 1)]),
]


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("name,build,shapes", INJECTIVE, ids=[c[0] for c in INJECTIVE])
def test_injective_ops_in_region(name: str, build: Callable[..., Any], shapes: list[tuple[int, ...]],
                                 config: Config | None) -> None:
    gen = torch.Generator().manual_seed(5)
    g = og.Graph()
    xs = [g.placeholder(s, og.float32) for s in shapes]
    feeds = {x: randn(x.shape, og.float32, gen) for x in xs}
    outs = outs_of(build(g, *xs))
    ops, _ = region_of(outs)
    assert any(o.op.fusion is FusionKind.INJECTIVE for o in ops)  # the view is inside the kernel, not before it
    compare(g, outs, feeds, config if any(o.op.fusion is FusionKind.REDUCTION for o in ops) else None)


def test_a_reduction_read_at_another_row_is_refused() -> None:
    """Row statistics exist only for the program's own rows: reading them elsewhere is NotExpressible (region
    formation then leaves the region unfused), never a wrong number."""
    from opgraph.codegen.triton.expr import NotExpressible

    g = og.Graph()
    x = g.placeholder((4, 6), og.float32)
    flipped = g.reverse(g.softmax(x), 0) * 2.0  # row 3's softmax is needed at row 0
    with pytest.raises(NotExpressible, match="another row"):
        kernel_for([flipped])
    s = g.reduce_sum(x, -1, keepdims=True)
    with pytest.raises(NotExpressible, match="another row"):
        kernel_for([x * g.reverse(s, 0)])
    kernel_for([x * g.reverse(s, 1)])  # reversing the reduced (size-1) axis reads the own row: fine


# ---- dynamic dims: one kernel source, several sizes -----------------------------------------------------
DYNAMIC: list[tuple[str, Callable[..., Any], tuple[int | None, ...], list[tuple[int, ...]]]] = [
    ("softmax_rows", lambda g, x: g.softmax(x * 2.0), (None, 6), [(1, 6), (5, 6), (9, 6)]),
    ("softmax_columns", lambda g, x: g.softmax(x * 2.0), (4, None), [(4, 1), (4, 5), (4, 13)]),
    ("layer_norm_both", lambda g, x: g.layer_norm(x + 1.0, -1), (None, None), [(1, 1), (3, 5), (7, 13)]),
    ("column_sum", lambda g, x: g.reduce_sum(g.exp(x), 0), (None, 3), [(1, 3), (5, 3), (9, 3)]),
    ("middle_mean", lambda g, x: g.reduce_mean(g.exp(x), 1, True), (2, None, 3), [(2, 1, 3), (2, 5, 3), (2, 9, 3)]),
    ("center", lambda g, x: x - g.reduce_mean(x, -1, True), (None, None), [(2, 3), (5, 9)]),
    ("transpose", lambda g, x: g.softmax(g.transpose(x, [1, 0])), (None, 4), [(2, 4), (5, 4)]),
    ("reshape_flatten", lambda g, x: g.tanh(g.reshape(g.exp(x), [-1])), (None, 4), [(2, 4), (5, 4)]),
    ("reshape_regroup_sum", lambda g, x: g.reduce_sum(g.reshape(g.exp(x), [-1, 2]), -1), (None, 4), [(2, 4), (5, 4)]),
    ("reverse", lambda g, x: g.softmax(g.reverse(x, 1) * 2.0), (3, None), [(3, 2), (3, 5)]),
    ("expand_squeeze", lambda g, x: g.squeeze(g.expand_dims(g.exp(x), 0), 0) * 2.0, (None, 4), [(2, 4), (5, 4)]),
    ("rank1_all", lambda g, x: g.reduce_sum(x * 2.0), (None,), [(1,), (7,), (0,)]),
]


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("name,build,shape,sizes", DYNAMIC, ids=[c[0] for c in DYNAMIC])
def test_dynamic_dims_one_source_several_sizes(name: str, build: Callable[..., Any], shape: tuple[int | None, ...],
                                                sizes: list[tuple[int, ...]], config: Config | None) -> None:
    gen = torch.Generator().manual_seed(13)
    g = og.Graph()
    x = g.placeholder(shape, og.float32)
    outs = outs_of(build(g, x))
    kernel, inputs = kernel_for(outs, config)
    source = kernel.source
    dynamic = [k for k, d in enumerate(shape) if d is None]
    assert any(f"n0_{k}" in source for k in dynamic)  # a dynamic size is an argument, not a literal
    for size in sizes:
        v = randn(size, og.float32, gen)
        check(kernel(*args(inputs, {x: v})), g.run({x: v}, outs))
    assert kernel.source == source


def test_mean_over_several_axes_with_a_dynamic_dim() -> None:
    g = og.Graph()
    x = g.placeholder((None, 4), og.float32)
    y = g.reduce_mean(g.exp(x), (0, 1))
    kernel, _ = kernel_for([y])
    v = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    check(kernel(v), [torch.exp(v).mean()])


# ---- strided (non-contiguous) inputs ---------------------------------------------------------------------
View = Callable[[torch.Generator], torch.Tensor]
STRIDED: list[tuple[str, Callable[..., Any], list[tuple[int, ...]], list[View]]] = [
    ("transposed_softmax", lambda g, x: g.softmax(x * 2.0), [(4, 6)],
     [lambda gen: torch.randn(6, 4, generator=gen).t()]),
    ("transposed_layer_norm", lambda g, x, b: g.layer_norm(x + b, -1), [(4, 6), (6,)],
     [lambda gen: torch.randn(6, 4, generator=gen).t(), lambda gen: torch.randn(6, generator=gen)]),
    ("transposed_column_sum", lambda g, x: g.reduce_sum(g.exp(x), 0), [(4, 6)],
     [lambda gen: torch.randn(6, 4, generator=gen).t()]),
    ("stepped_slice_max", lambda g, x: g.reduce_max(g.exp(x), -1), [(4, 3)],
     [lambda gen: torch.randn(4, 8, generator=gen)[:, 1:7:2]]),
    ("expanded_softmax", lambda g, x: g.softmax(x * 2.0), [(4, 6)],
     [lambda gen: torch.randn(1, 6, generator=gen).expand(4, 6)]),
    ("permuted_variance", lambda g, x: g.variance(x * 2.0, (0, 2)), [(3, 4, 5)],
     [lambda gen: torch.randn(5, 3, 4, generator=gen).permute(1, 2, 0)]),
    ("transposed_elementwise", lambda g, x: g.tanh(x) * 2.0, [(4, 6)],
     [lambda gen: torch.randn(6, 4, generator=gen).t()]),
]


def _float32_region(build: Callable[..., Any], shapes: list[tuple[int, ...]],
                    config: Config | None) -> tuple[og.Graph, list[Any], list[Any], Any, list[Any]]:
    """``build`` on float32 placeholders of ``shapes``, and its region's kernel (``config`` for reductions)."""
    g = og.Graph()
    xs = [g.placeholder(s, og.float32) for s in shapes]
    outs = outs_of(build(g, *xs))
    ops, _ = region_of(outs)
    kernel, inputs = kernel_for(outs, config if any(o.op.fusion is FusionKind.REDUCTION for o in ops) else None)
    return g, xs, outs, kernel, inputs


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("name,build,shapes,views", STRIDED, ids=[c[0] for c in STRIDED])
def test_strided_inputs_match_contiguous(name: str, build: Callable[..., Any], shapes: list[tuple[int, ...]],
                                         views: list[View], config: Config | None) -> None:
    gen = torch.Generator().manual_seed(17)
    g, xs, outs, kernel, inputs = _float32_region(build, shapes, config)
    values = [view(gen) for view in views]
    assert [tuple(v.shape) for v in values] == shapes and any(not v.is_contiguous() for v in values)
    assert "st0_" not in kernel.source and "st0_" in kernel.strided().source  # the variant reads at strides
    got = kernel(*args(inputs, dict(zip(xs, values, strict=True))))
    want = g.run({x: v.contiguous() for x, v in zip(xs, values, strict=True)}, outs)
    check(got, want)
    # the contiguous variant still serves contiguous inputs
    check(kernel(*args(inputs, {x: v.contiguous() for x, v in zip(xs, values, strict=True)})), want)


def test_strided_input_with_dynamic_dims() -> None:
    g = og.Graph()
    x = g.placeholder((None, 6), og.float32)
    y = g.softmax(x * 2.0)
    kernel, inputs = kernel_for([y])
    for rows in (2, 5):
        v = torch.randn(6, rows, generator=torch.Generator().manual_seed(rows)).t()
        check(kernel(*args(inputs, {x: v})), [torch.softmax(v * 2.0, -1)])


# ---- out= and in-place outputs ----------------------------------------------------------------------------
INPLACE: list[tuple[str, Callable[..., Any], list[tuple[int, ...]], set[tuple[int, int]]]] = [
    ("elementwise", lambda g, x, b: g.tanh(x * 2.0 + b), [(4, 6), (6,)], {(0, 0)}),
    ("softmax", lambda g, x: g.softmax(x), [(4, 6)], {(0, 0)}),
    ("softmax_times_y", lambda g, x, y: g.softmax(x) * y, [(4, 6), (4, 6)], {(0, 0), (1, 0)}),
    ("center_columns", lambda g, x: x - g.reduce_mean(x, 0, True), [(4, 6)], {(0, 0)}),
    ("two_outputs", lambda g, x: (g.exp(x), g.tanh(x)), [(4, 4)], {(0, 0), (0, 1)}),
    ("transpose_reads_elsewhere", lambda g, x: x + g.transpose(x, [1, 0]), [(4, 4)], set()),
    ("reverse_reads_elsewhere", lambda g, x: g.reverse(x, 0) * 2.0 + 1.0, [(4, 4)], set()),
    ("row_output", lambda g, y, s: g.reduce_sum(y * s, -1, True), [(4, 6), (4, 1)], {(1, 0)}),
    # u + 1 is stored by the programs of row 0 while every program still reads u (a batch norm's mean)
    ("broadcast_output", lambda g, u, x: (u + 1.0, x - (u + 1.0)), [(1, 24), (512, 24)], {(3, 1)}),
    # a residual sum and the softmax of it: looped, both are stored by the final walk
    ("prologue_output", lambda g, x, r: (x + r, g.softmax(x + r)), [(4, 6), (4, 6)],
     {(0, 0), (1, 0), (0, 1), (1, 1)}),
    # a sum and its centred sum of squares: looped, the sum is stored by the first walk (the only full output),
    # and the second walk (about the mean) reads x and r again, so the sum may not go into them
    ("early_output", lambda g, x, r: (x + r, g.reduce_sum(g.square(x + r - g.reduce_mean(x + r, -1, True)), -1)),
     [(4, 6), (4, 6)], {(0, 0), (1, 0)}),
    # x * 2 beside a row sum plus the row's first element of x (read elsewhere: never in place; looped, that
    # read comes after the first walk stored x * 2)
    ("early_then_row_read", lambda g, x: (x * 2.0, g.reduce_sum(x, -1, True) + g.slice(x, [0, 0], [4, 1], [1, 1])),
     [(4, 6)], set()),
    # looped, the masked gradient is stored by the only walk, which alone reads y and gy (inputs 0 and 3; the
    # constants 1, 2 between): in place is fine
    ("early_column_sums", lambda g, y, gy: (g.select(g.less_equal(y, 0.0), 0.0, gy),
                                            g.reduce_sum(g.select(g.less_equal(y, 0.0), 0.0, gy), 0)),
     [(9, 6), (9, 6)], {(0, 0), (3, 0)}),
]


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("name,build,shapes,pairs", INPLACE, ids=[c[0] for c in INPLACE])
def test_out_buffers_and_inplace_ok(name: str, build: Callable[..., Any], shapes: list[tuple[int, ...]],
                                    pairs: set[tuple[int, int]], config: Config | None) -> None:
    gen = torch.Generator().manual_seed(19)
    g, xs, outs, kernel, inputs = _float32_region(build, shapes, config)
    values = {x: torch.randn(x.shape, generator=gen) for x in xs}
    want = g.run(values, outs)
    # inputs are numbered in first-use order; the expected pairs are written for the placeholders' order
    assert [id(t) for t in inputs if t in values] == [id(x) for x in xs]
    if config is not None and config.looped:  # row outputs precede the final loop; the sum, the second walk
        pairs = {(i, j) for i, j in pairs if name not in ("row_output", "early_output")}
    assert set(kernel.inplace_ok) == pairs
    # out=: the given buffers are written and returned
    buffers = [torch.full(w.shape, 7.0) for w in want]
    got = kernel(*args(inputs, values), out=buffers)
    assert all(a is b for a, b in zip(got, buffers, strict=True))
    check(buffers, want)
    # each allowed pair: output j written into input i's buffer gives every output right
    for i, j in sorted(kernel.inplace_ok):
        ins = [v.clone() for v in args(inputs, values)]
        out: list[torch.Tensor | None] = [None] * len(outs)
        out[j] = ins[i]
        got = kernel(*ins, out=out)
        assert got[j] is ins[i]
        check(got, want)


def test_an_out_buffer_the_configuration_cannot_write_in_place_is_not_used() -> None:
    # the planner pairs outputs with inputs for the default configuration; a tuned one (looped: the row output is
    # stored before the final loop re-reads s) gets the same out= and must not write into s
    g = og.Graph()
    y, s = g.placeholder((4, 6), og.float32), g.placeholder((4, 1), og.float32)
    p = y * s
    kernel, inputs = kernel_for([g.reduce_sum(p, -1, keepdims=True), p], LOOPED)
    gen = torch.Generator().manual_seed(1)
    yv, sv = torch.randn(4, 6, generator=gen), torch.randn(4, 1, generator=gen)
    want = [(yv * sv).sum(-1, keepdim=True), yv * sv]
    ins = [v.clone() for v in args(inputs, {y: yv, s: sv})]
    got = kernel(*ins, out=[ins[1], None])
    assert got[0] is not ins[1]
    check(got, want)


def test_inplace_row_output_of_a_looped_kernel() -> None:
    g = og.Graph()
    y, s = g.placeholder((4, 6), og.float32), g.placeholder((4, 1), og.float32)
    p = y * s
    outs = [g.reduce_sum(p, -1, keepdims=True), p]  # (4, 1) like s, and (4, 6) that reads s again
    kernel, inputs = kernel_for(outs, LOOPED)
    assert (1, 0) not in kernel.inplace_ok  # the row output is stored before the final loop re-reads s
    gen = torch.Generator().manual_seed(0)
    yv, sv = torch.randn(4, 6, generator=gen), torch.randn(4, 1, generator=gen)
    want = [(yv * sv).sum(-1, keepdim=True), yv * sv]
    check(kernel(yv, sv), want)


def test_full_outputs_without_statistics_are_stored_by_the_first_walk() -> None:
    """A looped kernel whose full outputs need no statistics (a ReLU-masked gradient beside its column sums)
    stores them in the loop that reads their inputs for the statistics, not in a walk after it that would read
    those inputs again. Where a final walk is needed anyway (a norm), every full output is stored there."""
    g = og.Graph()
    y, gy, x = (g.placeholder((12, 3), og.float32) for _ in range(3))
    dy = g.select(g.less_equal(y, 0.0), 0.0, gy)
    outs = [dy, g.reduce_sum(dy, 0), g.reduce_sum(dy * x, 0)]  # column sums: reduced along the first axis
    kernel, inputs = kernel_for(outs, LOOPED)
    assert kernel.source.count("for ") == 1, kernel.source  # one walk over the rows: stores and sums together
    gen = torch.Generator().manual_seed(3)
    vals = {t: torch.randn(12, 3, generator=gen) for t in (y, gy, x)}
    check(kernel(*args(inputs, vals)), g.run(vals, outs))
    h = g.placeholder((4, 9), og.float32) + g.placeholder((4, 9), og.float32)
    kernel, _ = kernel_for([h, g.layer_norm(h, [1])], LOOPED)  # the norm needs a final walk: h is stored there
    loops = re.split(r"\n    for ", kernel.source)  # walks of the kernel's top level (not the variance guard's)
    assert len(loops) == 3 and "tl.store(out0" in loops[2] and "tl.store(out0" not in loops[1], kernel.source


def test_what_a_loop_reads_but_does_not_vary_is_read_before_it() -> None:
    """Column sums of (x - m) * (x - m) with m per column: m is loaded once, before the walk, not at every step
    (whether Triton would hoist the load out of a loop that also stores is not left to it)."""
    g = og.Graph()
    x, m = g.placeholder((12, 3), og.float32), g.placeholder((1, 3), og.float32)
    d = x - m
    outs = [d, g.reduce_sum(d * d, 0)]
    kernel, inputs = kernel_for(outs, LOOPED)
    before, loop = kernel.source.split("    for ", 1)
    assert "tl.load(in1" in before and "tl.load(in1" not in loop, kernel.source
    gen = torch.Generator().manual_seed(5)
    vals = {x: torch.randn(12, 3, generator=gen), m: torch.randn(1, 3, generator=gen)}
    check(kernel(*args(inputs, vals)), g.run(vals, outs))


def test_split_rows_store_nothing_in_place_that_other_parts_read() -> None:
    """Split rows walked in steps: x + r is stored by each part's walk, before the parts meet, while every part
    reads the row's first elements of x and r (the variance's shift): neither buffer may take it."""
    g = og.Graph()
    x, r = g.placeholder((4, 64), og.float32), g.placeholder((4, 64), og.float32)
    h = x + r
    kernel, _ = kernel_for([h, g.variance(h, [1])], Config(reduction=True, xblock=1, rblock=8, looped=True, split=4))
    assert "atomic_add" in kernel.source and kernel.inplace_ok == frozenset(), kernel.inplace_ok


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_row_outputs_are_stored_as_one_dimensional_rows(config: Config | None) -> None:
    # Triton 3.6 (sm_90) failed to compile a batch norm's statistics stored as [XBLOCK, 1] tiles next to their
    # use after the reduction ("operand #0 does not dominate this use"); 1-D rows compiled, and still must compute
    g = og.Graph()
    x = g.placeholder((5, 7), og.float32)
    var = g.maximum(g.reduce_mean(x * x, -1, True) - g.square(g.reduce_mean(x, -1, True)), 0.0)
    outs = [var, g.rsqrt(var + 1e-5)]  # the stored variance is also read after the reduction
    kernel, inputs = kernel_for(outs, config)
    stores = [line for line in kernel.source.splitlines() if "tl.store(out" in line]
    assert len(stores) == 2 and all("tl.reshape(" in line and "[XBLOCK]" in line for line in stores), stores
    xv = torch.randn(5, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    want_var = xv.var(-1, unbiased=False, keepdim=True)
    check(kernel(*args(inputs, {x: xv.float()})), [want_var.float(), (want_var + 1e-5).rsqrt().float()])


# ---- NaN semantics ------------------------------------------------------------------------------------------
SPECIAL = torch.tensor([[1.0, NAN, 3.0, -2.0, 0.5, 1.0, 2.0],
                        [NAN] * 7,
                        [-INF] * 7,
                        [INF, NAN, -1.0, 2.0, 0.0, 3.0, 4.0],
                        [0.0, -0.0, 1.0, NAN, -5.0, -INF, 1e4],
                        [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0]], dtype=torch.float64)
# (name, builder, NumPy reference): reduce_max/min ignore NaN unless a whole slice is NaN (np.nanmax), the
# _with_nan_propagation forms give NaN when any element is (np.max)
EXTREMA = [
    ("reduce_max", lambda g, x, a: g.reduce_max(x, a), np.nanmax),
    ("reduce_min", lambda g, x, a: g.reduce_min(x, a), np.nanmin),
    ("reduce_max_with_nan_propagation", lambda g, x, a: g.reduce_max_with_nan_propagation(x, a), np.max),
    ("reduce_min_with_nan_propagation", lambda g, x, a: g.reduce_min_with_nan_propagation(x, a), np.min),
]


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("name,build,ref", EXTREMA, ids=[e[0] for e in EXTREMA])
def test_nan_semantics_of_extrema(name: str, build: Callable[..., Any], ref: Callable[..., Any],
                                  config: Config | None, dt: og.DType) -> None:
    v = SPECIAL.to(dt.torch_dtype)
    for axis in (1, 0):
        g = og.Graph()
        x = g.placeholder(tuple(v.shape), dt)
        y = build(g, x, axis)
        (got,) = run_region([y], {x: v}, config)
        with warnings.catch_warnings():  # np.nanmax warns on an all-NaN slice
            warnings.simplefilter("ignore", RuntimeWarning)
            want = ref(v.double().numpy(), axis=axis)  # exact: an extremum is one of the (representable) inputs
        np.testing.assert_array_equal(got.double().numpy(), want)
        check([got], g.run({x: v}, [y]))


def test_extremum_of_an_empty_slice_is_the_identity() -> None:
    g = og.Graph()
    x = g.placeholder((3, 0), og.float32)
    y = g.reduce_max(g.exp(x), -1)
    (got,) = run_region([y], {x: torch.zeros(3, 0)})
    assert torch.equal(got, torch.full((3,), -INF))


SOFTMAX_SPECIAL = torch.tensor([[-INF] * 7,
                                [-INF, 1.0, -INF, 2.0, -INF, -INF, -INF],
                                [INF, 1.0, -1.0, 2.0, 0.0, 3.0, 4.0],
                                [0.0, -0.0, 1.0, 80.0, -5.0, -90.0, 1e4],
                                [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]])


@pytest.mark.parametrize("dt", [og.float32, og.float16, og.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_special_values(op: str, config: Config | None, dt: og.DType) -> None:
    """Rows of -inf (NaN), with +inf (NaN), with large spreads: as the unfused op, over rows and columns."""
    v = SOFTMAX_SPECIAL.to(dt.torch_dtype)
    for axis in (1, 0):
        g = og.Graph()
        x = g.placeholder(tuple(v.shape), dt)
        y = getattr(g, op)(x, axis)
        compare(g, [y], {x: v}, config)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_with_nan_persistent(op: str) -> None:
    v = SPECIAL.float()[[0, 4, 5]]
    g = og.Graph()
    x = g.placeholder(tuple(v.shape), og.float32)
    y = getattr(g, op)(x, 1)
    (got,) = run_region([y], {x: v})
    assert got[:2].isnan().all() and not got[2].isnan().any()  # a NaN poisons its whole row, as torch.softmax
    compare(g, [y], {x: v})


def test_softmax_with_nan_looped() -> None:
    v = SPECIAL.float()[[0, 4, 5]]
    g = og.Graph()
    x = g.placeholder(tuple(v.shape), og.float32)
    y = g.softmax(x, 1)
    compare(g, [y], {x: v}, LOOPED)


# ---- integer and bool reductions ---------------------------------------------------------------------------
def _ints(dt: torch.dtype, shape: tuple[int, ...], lo: int, hi: int, seed: int) -> torch.Tensor:
    return torch.randint(lo, hi, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int64).to(dt)


INTEGER: list[tuple[str, Callable[..., Any], torch.Tensor, Callable[[np.ndarray], np.ndarray]]] = [
    ("sum_int32", lambda g, x: g.reduce_sum(x, -1), _ints(torch.int32, (4, 7), -100, 100, 1),
     lambda a: a.sum(-1, dtype=np.int32)),
    ("sum_int32_columns_keepdims", lambda g, x: g.reduce_sum(x, 0, True), _ints(torch.int32, (4, 7), -100, 100, 2),
     lambda a: a.sum(0, keepdims=True, dtype=np.int32)),
    ("sum_int32_wraps", lambda g, x: g.reduce_sum(x, -1), torch.full((3, 7), 2**30, dtype=torch.int32),
     lambda a: a.sum(-1, dtype=np.int32)),
    ("sum_int64_large", lambda g, x: g.reduce_sum(x, -1), _ints(torch.int64, (3, 7), -2**40, 2**40, 3),
     lambda a: a.sum(-1)),
    ("prod_int32", lambda g, x: g.reduce_prod(x, -1), _ints(torch.int32, (4, 7), -3, 4, 4),
     lambda a: a.prod(-1, dtype=np.int32)),
    ("max_int8", lambda g, x: g.reduce_max(x, -1), _ints(torch.int8, (4, 7), -128, 128, 5), lambda a: a.max(-1)),
    ("max_int8_all_minimum", lambda g, x: g.reduce_max(x, -1), torch.full((3, 7), -128, dtype=torch.int8),
     lambda a: a.max(-1)),
    ("min_int8_columns", lambda g, x: g.reduce_min(x, 0), _ints(torch.int8, (4, 7), -128, 128, 6), lambda a: a.min(0)),
    ("min_uint8", lambda g, x: g.reduce_min(x, -1), _ints(torch.uint8, (4, 7), 0, 256, 7), lambda a: a.min(-1)),
    ("max_int16", lambda g, x: g.reduce_max(x, -1), _ints(torch.int16, (4, 7), -2**15, 2**15, 8), lambda a: a.max(-1)),
    ("max_int64", lambda g, x: g.reduce_max(x, -1), _ints(torch.int64, (4, 7), -2**40, 2**40, 9), lambda a: a.max(-1)),
    ("or_int32", lambda g, x: g.reduce_or(x, -1), torch.tensor([[0, 0, 0], [0, 2, 0]], dtype=torch.int32),
     lambda a: a.any(-1)),
    ("and_float_nan_is_true", lambda g, x: g.reduce_and(x, -1), torch.tensor([[0.0, 1.0, NAN], [1.0, 2.0, NAN]]),
     lambda a: np.all(a != 0, -1)),
    ("count_of_a_comparison", lambda g, x: g.reduce_sum(g.cast(x > 0, og.int32), -1),
     _ints(torch.int32, (4, 7), -3, 4, 10), lambda a: (a > 0).sum(-1, dtype=np.int32)),
]


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("name,build,value,ref", INTEGER, ids=[c[0] for c in INTEGER])
def test_integer_reductions(name: str, build: Callable[..., Any], value: torch.Tensor,
                            ref: Callable[[np.ndarray], np.ndarray], config: Config | None) -> None:
    g = og.Graph()
    x = g.placeholder(tuple(value.shape), as_dtype(value.dtype))
    y = build(g, x)
    (got,) = run_region([y], {x: value}, config)
    want = ref(value.numpy())
    assert got.dtype == y.dtype.torch_dtype
    np.testing.assert_array_equal(got.numpy(), want)
    check([got], g.run({x: value}, [y]))


BOOLS = torch.tensor([[True] * 7, [False] * 7, [True, False, True, True, True, True, True],
                      [False, False, False, False, False, False, True]])


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("op,ref", [("reduce_and", np.all), ("reduce_or", np.any), ("reduce_max", np.max),
                                    ("reduce_min", np.min)])
def test_bool_reductions(op: str, ref: Callable[..., Any], config: Config | None) -> None:
    for axis, keepdims in ((1, False), (0, True)):
        g = og.Graph()
        x = g.placeholder(tuple(BOOLS.shape), og.bool)
        y = getattr(g, op)(x, axis, keepdims)
        (got,) = run_region([y], {x: BOOLS}, config)
        assert got.dtype == torch.bool
        np.testing.assert_array_equal(got.numpy(), ref(BOOLS.numpy(), axis=axis, keepdims=keepdims))


# ---- bugs found by the property tests (smallest reproducers) --------------------------------------------------
def test_load_at_a_constant_index() -> None:
    g = og.Graph()
    x, w = g.placeholder((4,), og.float32), g.placeholder((3,), og.float32)
    y = g.exp(x[2]) + w
    gen = torch.Generator().manual_seed(0)
    feeds = {x: torch.randn(4, generator=gen), w: torch.randn(3, generator=gen)}
    compare(g, [y], feeds)


def test_reverse_of_a_size_one_reduced_axis() -> None:
    g = og.Graph()
    x = g.placeholder((1,), og.float32)
    y = g.exp(g.reverse(g.softmax(x), 0))
    compare(g, [y], {x: torch.tensor([0.5])})


def test_output_without_the_kept_dims() -> None:
    g = og.Graph()
    x = g.placeholder((4,), og.float32)
    h = x * 2.0
    outs = [h, g.softmax(g.reshape(h, [1, 4]), 1)]
    compare(g, outs, {x: torch.randn(4, generator=torch.Generator().manual_seed(0))})


@pytest.mark.parametrize("xblock,rblock", [(64, 32), (16, 128), (8, 256)])
def test_column_sums_in_every_candidate_tile(xblock: int, rblock: int) -> None:
    """Column reductions (bias gradients) in each tile shape the tuner may pick, ragged both ways, in bfloat16
    through float32 as autocast graphs have them, against NumPy."""
    gen = torch.Generator().manual_seed(3)
    g = og.Graph()
    x = g.placeholder((300, 40), og.bfloat16)
    y = g.cast(g.reduce_sum(g.cast(x, og.float32), [0]), og.bfloat16)
    v = randn((300, 40), og.bfloat16, gen, 1.0)
    (got,) = run_region([y], {x: v}, Config(reduction=True, xblock=xblock, rblock=rblock, looped=True))
    np.testing.assert_allclose(got.float().numpy(), v.double().numpy().sum(0), rtol=1e-2, atol=1e-1)


def test_narrow_column_tiles_are_offered_when_column_tiles_are_few() -> None:
    from unittest import mock

    from opgraph.codegen.triton import configs
    from opgraph.codegen.triton.kernel import region_of
    from opgraph.codegen.triton.region import RegionEmitter

    def tiles(cols: int) -> list[tuple[int, int]]:
        g = og.Graph()
        x = g.placeholder((4096, cols), og.float32)
        y = g.reduce_sum(x, [0])
        ops, ins = region_of([y])
        with mock.patch.object(configs, "multiprocessors", lambda: 132):
            return [(c.xblock, c.rblock) for c in configs.candidate_configs(RegionEmitter(ops, ins, [y]))]

    assert (8, 256) in tiles(768) and (16, 128) in tiles(768)  # 12 tiles of 64 columns on 132 SMs
    assert (8, 256) not in tiles(64 * 132)  # enough 64-column tiles already
