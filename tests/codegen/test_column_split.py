"""Column reductions with their rows split across programs (``Config(split=...)`` on a column reduction): each
part sums its chunk of rows into a workspace and the last part to count itself in combines them in part order
and stores the outputs (no waiting, so Triton's interpreter runs it too). Against the unfused graph run, twice
per kernel (the counters reset for the next launch), ragged both ways; full-size values are stored by each part
unless they use the statistics (then the region is refused); the tuner is offered these configurations when
column tiles are few."""

from __future__ import annotations

from collections.abc import Callable
from unittest import mock

import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton import configs  # noqa: E402
from opgraph.codegen.triton.expr import NotExpressible  # noqa: E402
from opgraph.codegen.triton.kernel import region_kernel, region_of  # noqa: E402
from opgraph.codegen.triton.region import Config, RegionEmitter  # noqa: E402

PLAIN = og.CompilationDescriptor(fusion=False)
CASES: dict[str, Callable[..., og.Tensor]] = {
    "bias-gradient": lambda g, x, w: g.cast(g.reduce_sum(g.cast(x, og.float32), [0]), og.bfloat16),
    "weight-gradient": lambda g, x, w: g.reduce_sum(x * g.tanh(x + w), [0]),
    "max-then-epilogue": lambda g, x, w: g.exp(g.reduce_max(x * 2.0, [0])) + w,
    "two-statistics": lambda g, x, w: g.reduce_sum(x, [0]) * g.reduce_min(x, [0]),
    "mean-keepdims": lambda g, x, w: g.reduce_mean(x, [0], keepdims=True) * 3.0,
}


def _split(xblock: int, rblock: int, split: int) -> Config:
    return Config(reduction=True, xblock=xblock, rblock=rblock, looped=True, num_warps=4, split=split)


@pytest.mark.parametrize("split", [2, 4, 8, 64])  # 64: the last part combines the partials in steps
@pytest.mark.parametrize("case", sorted(CASES))
def test_split_column_reduction_matches_unfused(case: str, split: int) -> None:
    rows, cols = 203, 37  # chunks and column tiles both ragged
    dt = og.bfloat16 if case == "bias-gradient" else og.float32
    g = og.Graph()
    x = g.placeholder((rows, cols), dt)
    w = g.placeholder((cols,), dt)
    y = CASES[case](g, x, w)
    ops, ins = region_of([y])
    # 64 parts of 4 rows: parts past the first 32 hold rows (the last part combines them in a second step)
    kernel = region_kernel(ops, ins, [y], config=_split(8, 4 if split > 32 else 16, split))
    assert "atomic_add" in kernel.source and "while" not in kernel.source  # no waiting
    gen = torch.Generator().manual_seed(split)
    xv, wv = (torch.randn(*s, generator=gen).to(dt.torch_dtype) for s in ((rows, cols), (cols,)))
    args = [xv if t is x else wv if t is w else t.op.payload for t in ins]
    (want,) = g.compile({x: x.type, w: w.type}, [y], device="cpu", descriptor=PLAIN).run([xv, wv])
    tol = dict(rtol=2e-2, atol=5e-2) if dt is og.bfloat16 else dict(rtol=1e-5, atol=1e-4)
    for _ in range(2):  # the last part resets the tile's counter: a second launch is right too
        torch.testing.assert_close(kernel(*args)[0].float(), want.float(), **tol)


def test_full_values_are_stored_by_each_part_unless_they_use_the_statistics() -> None:
    # a batch-norm gradient's region in NHWC: the ReLU gradient stored for the next region beside its sums
    g = og.Graph()
    x = g.placeholder((203, 37), og.float32)
    t = g.select(g.less_equal(x, 0.0), 0.0, g.tanh(x))
    s, s2 = g.reduce_sum(t, [0]), g.reduce_sum(t * x, [0])
    ops, ins = region_of([t, s, s2])
    kernel = region_kernel(ops, ins, [t, s, s2], config=_split(8, 16, 4))
    xv = torch.randn(203, 37)
    want = torch.where(xv <= 0, 0.0, xv.tanh())
    for _ in range(2):
        got = kernel(*(xv if u is x else u.op.payload for u in ins))
        torch.testing.assert_close(got[0], want)
        torch.testing.assert_close(got[1], want.sum(0), rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(got[2], (want * xv).sum(0), rtol=1e-5, atol=1e-4)
    centred = x - g.reduce_mean(x, [0], keepdims=True)  # full values that need the finished statistic
    ops, ins = region_of([centred])
    with pytest.raises(NotExpressible, match="use its statistics"):
        region_kernel(ops, ins, [centred], config=_split(8, 16, 4))


def test_variance_is_refused() -> None:
    g = og.Graph()
    x = g.placeholder((64, 16), og.float32)
    y = g.variance(x, [0])
    ops, ins = region_of([y])
    with pytest.raises(NotExpressible):
        region_kernel(ops, ins, [y], config=_split(8, 16, 4))


def _column_sum_configs(rows: int, cols: int) -> list[Config]:
    """The candidate configurations of a column sum, on 132 multiprocessors with splits allowed."""
    g = og.Graph()
    x = g.placeholder((rows, cols), og.float32)
    y = g.reduce_sum(x, [0])
    ops, ins = region_of([y])
    with mock.patch.object(configs, "multiprocessors", lambda: 132), \
            mock.patch.object(configs, "_splittable", lambda em: True):
        return configs.candidate_configs(RegionEmitter(ops, ins, [y]))


def test_offered_when_column_tiles_are_few() -> None:
    def splits(rows: int, cols: int) -> list[tuple[int, int, int]]:
        return [(c.xblock, c.rblock, c.split) for c in _column_sum_configs(rows, cols) if c.split > 1]

    # 12 tiles of 64 (24 of 32) on 132 SMs: up to eight, four or two programs a multiprocessor, each part walking
    # at least four row blocks (4096 rows cap 32-row blocks at 32 parts, 64-row ones at 16), duplicates dropped
    assert splits(4096, 768) == [(64, 32, 32), (64, 64, 16), (32, 32, 16), (32, 32, 32), (32, 64, 16)]
    assert splits(64, 768) == []  # too few rows to split
    assert splits(4096, 64 * 132) == []  # tiles enough


def test_split_is_the_default_for_a_few_very_long_columns() -> None:
    # NHWC batch-norm statistics: 64 channels over 32 * 56 * 56 rows would be one program unsplit
    def default(rows: int, cols: int) -> Config:
        return _column_sum_configs(rows, cols)[0]

    assert default(32 * 56 * 56, 64).split > 1
    assert default(4096, 2560).split == 1  # 40 tiles of 64: enough programs unsplit (the tuner still times both)


def test_the_strided_variant_is_tuned_over_the_same_configurations() -> None:
    # channels-last inputs reach a region as strided views: its variant for them once had no alternatives, so
    # a column reduction over 64 channels ran as one program walking every row
    g = og.Graph()
    x = g.placeholder((4096, 64), og.float32)
    y = g.reduce_sum(g.relu(x), [0])
    ops, ins = region_of([y])
    with mock.patch.object(configs, "multiprocessors", lambda: 132), \
            mock.patch.object(configs, "_splittable", lambda em: True):
        kernel = region_kernel(ops, ins, [y])
        strided = kernel.strided()
        plain, others = kernel.alternatives(), strided.alternatives()
    assert [k.config for k in others] == [k.config for k in plain] and any(k.config.split > 1 for k in others)
    assert all("st0_" in k.source for k in others) and not any("st0_" in k.source for k in plain)
    xv = torch.randn(64, 4096).t()  # a transposed view: the strided variant's input
    want = xv.relu().sum(0)
    for k in (strided, *others):
        torch.testing.assert_close(k(xv)[0], want, rtol=1e-5, atol=1e-4)


REFUSED: dict[str, Callable[..., og.Tensor]] = {  # a statistic used before the parts meet, or integers
    "centred-squares": lambda g, x: g.reduce_sum(g.square(x - g.reduce_mean(x, [0], keepdims=True)), [0]),
    "exp-minus-max": lambda g, x: g.reduce_sum(g.exp(x - g.reduce_max(x, [0], keepdims=True)), [0]),
    "softmax": lambda g, x: g.reduce_sum(g.softmax(x, 0) * x, [0]),
    "log-softmax-row": lambda g, x: g.slice(g.log_softmax(x, 0), [0, 0], [1, 37]),
    "rms-norm-row": lambda g, x: g.slice(g.rms_norm(x, [0]), [0, 0], [1, 37]),
    "integers": lambda g, x: g.reduce_sum(g.cast(x, og.int32), [0]),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_statistics_needing_the_whole_column_are_refused(case: str) -> None:
    """Found by a review: each part holds only its rows' statistics, so a value computed from one before the
    last part combines them (a second statistic about a mean or max, a normaliser bound in the top scope, the
    looped softmax's online statistics) would use a partial; integers would round through the float32
    workspace. The emitter refuses these (the tuner keeps another configuration); unsplit they are right."""
    g = og.Graph()
    x = g.placeholder((203, 37), og.float32)
    y = REFUSED[case](g, x)
    ops, ins = region_of([y])
    with pytest.raises(NotExpressible):
        region_kernel(ops, ins, [y], config=_split(8, 16, 4))
    kernel = region_kernel(ops, ins, [y], config=Config(reduction=True, xblock=8, rblock=16, looped=True))
    xv = torch.randn(203, 37, generator=torch.Generator().manual_seed(0)) * 3
    args = [xv if t is x else t.op.payload for t in ins]
    (want,) = g.compile({x: x.type}, [y], device="cpu", descriptor=PLAIN).run([xv])
    torch.testing.assert_close(kernel(*args)[0], want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape", [(4, 24, 5, 7), (2, 70, 3, 3)], ids=["ragged", "more-channels"])
def test_nchw_values_stored_channels_last_are_reduced_as_columns(shape: tuple[int, int, int, int]) -> None:
    # a batch-norm backward's sums over a channels-last tensor read as NCHW (a graph without a convolution keeps
    # NCHW): the channels are contiguous in memory, so the strided variant tiles them (column configurations);
    # the row configurations read across the storage (3-5x eager's time in benchmarks/batch_norm.py)
    g = og.Graph()
    x, dy = g.placeholder(shape, og.float32), g.placeholder(shape, og.float32)
    mean = g.placeholder((1, shape[1], 1, 1), og.float32)
    masked = g.select(g.less_equal(x, 0.0), 0.0, dy)
    outs = [masked, g.reduce_sum(masked, [0, 2, 3]), g.reduce_sum(masked * (x - mean), [0, 2, 3])]
    ops, ins = region_of(outs)
    kernel = region_kernel(ops, ins, outs)
    rows = shape[0] * shape[2] * shape[3]
    assert kernel.config.rblock >= rows  # contiguous NCHW: a row configuration (each channel's row in registers)
    gen = torch.Generator().manual_seed(shape[1])
    xv, dyv = (torch.randn(shape, generator=gen).contiguous(memory_format=torch.channels_last) for _ in range(2))
    mv = torch.randn(1, shape[1], 1, 1, generator=gen)
    args = [{id(x): xv, id(dy): dyv, id(mean): mv}.get(id(t), t.op.payload) for t in ins]
    got = kernel(*args)
    (variant,) = kernel._strided.values()
    # column tiles of 64 or more channels (a row configuration holds at most 16 rows: the channels)
    assert variant.config.xblock >= 64 > 16 >= kernel.config.xblock, (variant.config, kernel.config)
    want_masked = torch.where(xv <= 0, 0.0, dyv)
    want = [want_masked, want_masked.sum((0, 2, 3)), (want_masked * (xv - mv)).sum((0, 2, 3))]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert got[0].is_contiguous()  # outputs stay contiguous
    assert kernel(*[a.contiguous() for a in args])[1].allclose(want[1], rtol=1e-5, atol=1e-5)  # and NCHW reads


def test_batch_norm_statistics_of_channels_last_values_are_reduced_as_columns() -> None:
    # the decomposed statistics read x twice: shifted at every element, and its first element per channel
    # through a slice (the shift); the slice must not hide x's layout
    shape, c = (4, 24, 5, 7), 24
    g = og.Graph()
    x = g.placeholder(shape, og.float32)
    shift = g.slice(x, [0, 0, 0, 0], [1, c, 1, 1], [1, 1, 1, 1])
    d = x - shift
    outs = [g.reduce_sum(d, [0, 2, 3]), g.reduce_sum(d * d, [0, 2, 3])]
    ops, ins = region_of(outs)
    kernel = region_kernel(ops, ins, outs)
    (only,) = [i for i, t in enumerate(ins) if t is x]
    assert kernel.aligned == (only,)
    xv = (torch.randn(shape, generator=torch.Generator().manual_seed(2)) + 5).contiguous(
        memory_format=torch.channels_last)
    got = kernel(*[xv if t is x else t.op.payload for t in ins])
    (variant,) = kernel._strided.values()
    assert variant.config.xblock >= 16, variant.config
    dv = xv - xv[:1, :, :1, :1]
    for a, b in zip(got, [dv.sum((0, 2, 3)), (dv * dv).sum((0, 2, 3))], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


def test_only_inputs_read_at_the_domains_index_vote_for_its_memory_order() -> None:
    # a square input read through a transpose has the domain's shape but not its index: it must not vote
    g = og.Graph()
    a, b = g.placeholder((8, 8), og.float32), g.placeholder((8, 8), og.float32)
    y = g.reduce_sum(g.relu(g.transpose(a, [1, 0])) * b, [0])
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y])
    (only,) = [i for i, t in enumerate(ins) if t is b]
    assert kernel.aligned == (only,)
    av, bv = (torch.randn(8, 8, generator=torch.Generator().manual_seed(k)) for k in (1, 2))
    got = kernel(*[av.t().contiguous().t() if t is a else bv.t().contiguous().t() for t in ins])[0]
    torch.testing.assert_close(got, (av.t().relu() * bv).sum(0), rtol=1e-5, atol=1e-5)


def test_tuning_spin_doubles_while_the_host_outlasts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_device_ms`` (CUDA replaced by fakes): the timed launches must be queued before the spin ahead of them
    ends, else the events would time the host; a slower host gets a spin twice as long, up to four times."""
    from opgraph.codegen.triton import kernel as kmod
    from opgraph.core import device_timing as timing

    spins: list[int] = []
    host_ms = {"per_launch": 0.0}

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            pass

        def record(self) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, other: object) -> float:
            return 0.25

    clock = {"now": 0.0}

    def launch(*inputs: object) -> None:
        clock["now"] += host_ms["per_launch"] / 1e3

    monkeypatch.setattr(timing.torch.cuda, "Event", Event)
    monkeypatch.setattr(timing.torch.cuda, "_sleep", spins.append)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock["now"])
    base = timing.TUNE_HEAD_START_CYCLES
    spin_ms = base / timing.SPIN_CYCLES_PER_MS
    for per_launch, want in ((0.0, [base]), (spin_ms / timing.TUNE_LAUNCHES * 1.5, [base, 2 * base]),
                             (spin_ms * 10, [base, 2 * base, 4 * base])):
        spins.clear()
        host_ms["per_launch"] = per_launch
        assert kmod._device_ms(launch, []) == 0.25  # type: ignore[arg-type]
        assert spins == want, (per_launch, spins)


def test_candidates_compile_in_threads_with_their_launch_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """``compile_in_threads`` (Triton's ``warmup`` replaced by a recorder): with ``OPGRAPH_COMPILE_THREADS=4``
    every candidate compiles, off the calling thread, with the arguments and options its launch passes; one that
    fails is left to its launch; with 1 (the default) nothing is compiled ahead."""
    import threading

    from opgraph.codegen.triton import kernel as kmod

    g = og.Graph()
    x = g.placeholder((4096, 96), og.float32)
    y = CASES["weight-gradient"](g, x, g.placeholder((96,), og.float32))
    ops, inputs = region_of([y])
    kernels = [region_kernel(ops, inputs, [y], config=c) for c in (_split(32, 16, 4), _split(64, 8, 1))]
    values = [torch.randn(4096, 96), torch.randn(96)]

    class Recorder:
        def __init__(self, fail: bool) -> None:
            self.fail, self.calls = fail, []

        def warmup(self, *args: object, grid: tuple[int, ...], **options: object) -> None:
            self.calls.append((threading.current_thread().name, args, grid, options))
            if self.fail:
                raise RuntimeError("out of shared memory")

        def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
            return lambda *args, **options: self.calls.append(("launch", args, grid, options))

    for k, fail in zip(kernels, (False, True), strict=True):
        k._fn = Recorder(fail)
    monkeypatch.setenv("OPGRAPH_COMPILE_THREADS", "1")
    kmod.compile_in_threads(kernels, values)
    assert all(not k._fn.calls for k in kernels)
    monkeypatch.setenv("OPGRAPH_COMPILE_THREADS", "4")
    kmod.compile_in_threads(kernels, values)  # the failing one raises nothing here
    for k in kernels:
        (thread, args, grid, options), = k._fn.calls
        assert thread.startswith("opgraph-compile")
        k(*values)
        _, launch_args, launch_grid, launch_options = k._fn.calls[-1]
        assert (grid, options) == (launch_grid, launch_options)
        assert not any(isinstance(a, torch.Tensor) for a in args)  # stand-ins: nothing allocated to compile
        typed = lambda xs: [(tuple(a.shape), a.dtype, tuple(a.stride()), a.data_ptr() % 16)  # noqa: E731
                            if hasattr(a, "dtype") else a for a in xs]
        assert typed(args) == typed(launch_args)
