"""Long rows split across programs that each walk their chunk (``Config(split=..., looped=True)``): the parts'
statistics meet at one barrier in a workspace, then each part walks its chunk again (from L2 on a GPU) to store.
Triton's interpreter runs one program at a time, so a part waiting at the barrier would wait forever: here the
spin is taken out of the source and the kernel launched twice on the same workspace, the second launch reading
the partials every part wrote in the first. That checks the chunks, masks and how the partials meet; the
barrier itself is shared with the register-held split rows, run on the GPU (``test_region_gpu.py``)."""

from __future__ import annotations

import dataclasses
import re
from unittest import mock

import pytest
import torch

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton import configs  # noqa: E402
from opgraph.codegen.triton.expr import NotExpressible  # noqa: E402
from opgraph.codegen.triton.kernel import RegionKernel, region_kernel, region_of  # noqa: E402
from opgraph.codegen.triton.region import Config, RegionEmitter  # noqa: E402
from tests.codegen.test_region_gpu import CASES  # noqa: E402

SPIN = re.compile(r"^(\s*)while tl\.load\(cnt [^\n]*volatile=True\) < \d+:$", re.M)
GUARD = re.compile(r"^\s*if tl\.max\(\(\(var\w* != var\w*\) \| ", re.M)  # a variance's guard
ROW_CASES = [c for c in CASES if c not in ("sum", "column_sum")]  # "sum" keeps no row: its output is the sums


def _without_spin(kernel: RegionKernel) -> RegionKernel:
    source, spins = SPIN.subn(r"\1if False:", kernel.source)
    # one barrier: every statistic of these regions meets at once; a variance's guard (rows whose shift lay far from
    # the mean) meets again in its branch
    assert spins == 1 + len(GUARD.findall(source)), kernel.source
    return dataclasses.replace(kernel, source=source, _fn=None, _launches={}, _workspaces={})


@pytest.mark.parametrize("looped", [True, False])
@pytest.mark.parametrize("split,rblock", [(4, 8), (8, 4)])
@pytest.mark.parametrize("case", ROW_CASES)
def test_split_rows_match_unfused(case: str, split: int, rblock: int, looped: bool) -> None:
    """Parts walking their chunk (looped) or holding it in registers (each part's chunk then ``2 * rblock`` wide,
    so that the parts cover the row), on special rows: a NaN, whole parts of -inf, an offset row."""
    rows, width = 5, 61  # ragged: the last part's chunk is partly past the row's end
    g = og.Graph()
    x = g.placeholder((rows, width), og.float32)
    w = g.placeholder((width,), og.float32)
    y = CASES[case](g, x, w)
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], config=Config(reduction=True, xblock=1, rblock=rblock * (1 if looped else 2),
                                                        looped=looped, num_warps=4, split=split))
    assert ("for start" in kernel.source and "chunk =" in kernel.source) == looped
    gen = torch.Generator().manual_seed(split)
    xv = torch.randn(rows, width, generator=gen)
    xv[1, 7] = float("nan")  # one part's NaN reaches the whole row
    xv[2, :20] = float("-inf")  # whole parts of -inf (softmax: a part's max of -inf adds nothing)
    xv[3] += 1e3  # an offset row: the shifted sums keep its variance
    wv = torch.randn(width, generator=gen)
    args = [xv if t is x else wv if t is w else t.op.payload for t in ins]
    runnable = _without_spin(kernel)
    runnable(*args)  # every part writes its partials (the early parts read stale ones)
    (got,) = runnable(*args)  # now every part reads every partial of the first launch
    (want,) = g.compile({x: x.type, w: w.type}, [y], device="cpu",
                        descriptor=og.CompilationDescriptor(fusion=False)).run([xv, wv])
    # atol: a few float32 steps at 1000 (the offset row's x - mean loses them in either summation order)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=3e-4, equal_nan=True)


@pytest.mark.parametrize("looped", [True, False])
@pytest.mark.parametrize("case", ["layer_norm", "variance"])
def test_a_taken_guard_meets_again_and_gives_the_centred_variance(case: str, looped: bool) -> None:
    """Rows whose first element (the shift) lies far from the mean take the variance's guard: the parts sum (x -
    mean)^2 and meet a second time. The interpreter's launches read the partials of the one before, so the third
    launch is the first whose guard reads every part's (the second's result is wrong: the branch's value is used)."""
    rows, width = 5, 61
    g = og.Graph()
    x = g.placeholder((rows, width), og.float32)
    y = g.layer_norm(x, [1]) if case == "layer_norm" else g.variance(x, [1])
    ops, ins = region_of([y])
    config = Config(reduction=True, xblock=1, rblock=4 if looped else 8, looped=looped, num_warps=4, split=8)
    with mock.patch.object(configs, "multiprocessors", lambda: 132):
        kernel = region_kernel(ops, ins, [y], config=config)
    assert len(GUARD.findall(kernel.source)) == 1
    xv = torch.randn(rows, width, generator=torch.Generator().manual_seed(3))
    xv[:, 0] += 100.0  # (mean - shift)^2 ~ 60 variances: past SHIFT_GUARD, every row takes the branch
    args = [xv if t is x else t.op.payload for t in ins]
    runnable = _without_spin(kernel)
    runnable(*args)
    runnable(*args)
    (got,) = runnable(*args)
    (want,) = g.compile({x: x.type}, [y], device="cpu", descriptor=og.CompilationDescriptor(fusion=False)).run([xv])
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("split", [1, 4])
def test_softmax_and_log_softmax_of_one_input_share_their_statistics(split: int) -> None:
    """A cross entropy's loss and gradient (log_softmax and softmax of the same logits) in one region: one max, one
    meeting of a split row (``_without_spin`` checks there is one), results as unfused."""
    g = og.Graph()
    x = g.placeholder((5, 61), og.float32)
    outs = [g.softmax(x, 1), g.log_softmax(x, 1)]
    ops, ins = region_of(outs)
    config = Config(reduction=True, xblock=1, rblock=16, num_warps=4, split=split) if split > 1 else None
    kernel = region_kernel(ops, ins, outs, config=config)
    assert kernel.source.count("tl.max(") == (2 if split > 1 else 1)  # a split row: its part's, then the parts'
    xv = torch.randn(5, 61, generator=torch.Generator().manual_seed(1)) * 4
    if split > 1:
        kernel = _without_spin(kernel)
        kernel(xv)  # every part writes its partials (the early parts read stale ones)
    got = kernel(xv)
    want = g.compile({x: x.type}, outs, device="cpu", descriptor=og.CompilationDescriptor(fusion=False)).run([xv])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["integers", "two_rows_a_program"])
def test_split_rows_refused_where_they_cannot_meet(case: str) -> None:
    # parts meet in a float32 workspace (an int32 sum of 2**24 + 1 values would round), one row a program
    g = og.Graph()
    x = g.placeholder((2, 64), og.int32 if case == "integers" else og.float32)
    y = g.reduce_sum(x, [1])
    ops, ins = region_of([y])
    xblock = 2 if case == "two_rows_a_program" else 1
    with pytest.raises(NotExpressible):
        region_kernel(ops, ins, [y], config=Config(reduction=True, xblock=xblock, rblock=16, looped=True,
                                                   num_warps=4, split=4))


def _row_sum_configs(shape: tuple[int, ...], axes: list[int]) -> list[Config]:
    g = og.Graph()
    x = g.placeholder(shape, og.float32)
    y = g.reduce_sum(x, axes)
    ops, ins = region_of([y])
    with mock.patch.object(configs, "multiprocessors", lambda: 132), \
            mock.patch.object(configs, "_splittable", lambda em: True):
        return configs.candidate_configs(RegionEmitter(ops, ins, [y]))


def test_split_rows_never_outnumber_the_multiprocessors() -> None:
    # a row's parts wait at a barrier for each other: VGG16's first bias gradient (64 rows of 64 * 224 * 224,
    # NCHW) was offered 256 parts of 16384 registers-held elements, fewer of which fit at once, and hung the GPU
    splits = [(c.split, c.looped, c.rblock) for c in _row_sum_configs((64, 64, 224, 224), [0, 2, 3]) if c.split > 1]
    assert splits and all(split <= 132 for split, _, _ in splits)
    assert (128, True, 4096) in splits  # the long row in parts of 128 that each walk their chunk
    # 262k-element rows (issue 4's widest): 16 and 32 parts holding their chunk in registers, as before
    wide = _row_sum_configs((8, 262144), [1])
    assert [(c.split, c.looped) for c in wide if c.split > 1] == [(16, False), (32, False)]


def test_clusters_join_the_candidates_on_sm90() -> None:
    # on sm_90 the 262k rows are also offered as clusters of 16 parts (4, 8 or 16 warps) and of 8 (16 warps), the
    # fastest launches of the twentieth and twenty-first sessions' sweeps; rows too long for 16 parts of 32k get none
    with mock.patch.object(configs, "clusters", lambda: True):
        wide = _row_sum_configs((8, 262144), [1])
        longest = _row_sum_configs((2, 1 << 20), [1])
    clustered = [(c.split, c.rblock, c.num_warps) for c in wide if c.cluster and not c.looped]
    assert clustered == [(16, 16384, 4), (16, 16384, 8), (16, 16384, 16), (8, 32768, 16)]
    assert all(c.split <= configs.MAX_CLUSTER for c in wide if c.cluster)
    assert not any(c.cluster for c in longest) and not any(c.cluster for c in _row_sum_configs((8, 262144), [1]))


def test_16_bit_rows_are_offered_clusters_walking_their_chunks() -> None:
    # bfloat16 norms at 262k: parts walking their chunk twice in steps hold few registers, so that more clusters
    # share the GPU (twenty-fifth session: 0.158 against 0.188 ms for rms_norm); float32 rows only by 16 warps
    def walking_clusters(dtype: og.DType, width: int) -> list[tuple[int, int, int]]:
        g = og.Graph()
        x = g.placeholder((8, width), dtype)
        y = g.rms_norm(x, [1])
        ops, ins = region_of([y])
        with mock.patch.object(configs, "multiprocessors", lambda: 132), \
                mock.patch.object(configs, "_splittable", lambda em: True), \
                mock.patch.object(configs, "clusters", lambda: True):
            found = configs.candidate_configs(RegionEmitter(ops, ins, [y]))
        return [(c.split, c.rblock, c.num_warps) for c in found if c.cluster and c.looped]

    assert walking_clusters(og.bfloat16, 262144) == [(16, 2048, 8), (16, 4096, 8)]
    assert walking_clusters(og.bfloat16, 100000) == [(8, 2048, 8), (8, 4096, 8)]  # chunks of 12500: ragged steps
    assert walking_clusters(og.float16, 65536) == [(4, 2048, 8), (4, 4096, 8)]
    assert walking_clusters(og.float32, 262144) == [(16, 2048, 16)]  # by 16 warps: four programs an SM
    assert walking_clusters(og.bfloat16, 1 << 20) == []  # 64 parts: more than a cluster holds


def test_layer_norm_parts_are_offered_as_any_others() -> None:
    # a layer norm's parts were held to 8192 elements or 32 a thread while ptxas (Triton 3.6) took minutes on them;
    # that was their partials' layout (see the next test): now they are offered the launches a softmax is
    def split_launches(layer_norm: bool) -> list[tuple[int, int, int, bool, bool]]:
        g = og.Graph()
        x, w = g.placeholder((8, 262144), og.float32), g.placeholder((262144,), og.float32)
        y = g.layer_norm(x, [1], gamma=w, beta=w) if layer_norm else g.softmax(x, 1)
        ops, ins = region_of([y])
        with mock.patch.object(configs, "multiprocessors", lambda: 132), \
                mock.patch.object(configs, "_splittable", lambda em: True), \
                mock.patch.object(configs, "clusters", lambda: True):
            found = configs.candidate_configs(RegionEmitter(ops, ins, [y]))
        return [(c.split, c.rblock, c.num_warps, c.cluster, c.looped) for c in found if c.split > 1]

    launches = split_launches(layer_norm=True)
    assert launches == split_launches(layer_norm=False)
    assert (16, 16384, 4, True, False) in launches and (16, 16384, 8, True, False) in launches


def test_the_parts_partials_meet_as_vectors() -> None:
    # every part's partials are a [split] vector, reduced to the row's statistic: as a [1, split] tile Triton 3.6
    # laid them out as the chunk (8 values a thread), and a layer norm's parts spilled (f32 16x8 warps: 255
    # registers and 240 bytes of spills, 37 s in ptxas; as vectors 104 registers, 0.2 s)
    g = og.Graph()
    x, w = g.placeholder((8, 262144), og.float32), g.placeholder((262144,), og.float32)
    y = g.layer_norm(x, [1], gamma=w, beta=w)
    ops, ins = region_of([y])
    config = Config(reduction=True, xblock=1, rblock=16384, num_warps=8, split=16, cluster=True)
    with mock.patch.object(configs, "multiprocessors", lambda: 132):
        source = region_kernel(ops, ins, [y], config=config).source
    loads = re.findall(r"= tl\.load\(ws \+ [^\n]*", source)
    assert len(loads) >= 2 and all("tl.arange(0, 16), " in line for line in loads), loads
    assert re.search(r"= tl\.sum\(all\d+, 0\)", source) and "[None, :], cache_modifier" not in source


def test_a_row_split_past_the_multiprocessors_is_refused() -> None:
    # a configuration given by hand (benchmarks/reduction_configs.py) is held to the same bound as the tuner's
    g = og.Graph()
    x = g.placeholder((4, 4096), og.float32)
    y = g.reduce_sum(x, [1])
    ops, ins = region_of([y])
    with mock.patch.object(configs, "multiprocessors", lambda: 8):
        region_kernel(ops, ins, [y], config=Config(reduction=True, xblock=1, rblock=512, num_warps=4, split=8))
        with pytest.raises(NotExpressible, match="16 parts: more than the 8 multiprocessors"):
            region_kernel(ops, ins, [y], config=Config(reduction=True, xblock=1, rblock=256, num_warps=4, split=16))


@pytest.mark.parametrize("looped", [False, True])
@pytest.mark.parametrize("case", ["softmax", "layer_norm", "rms_norm"])
def test_cluster_split_rows_meet_at_the_cluster_barrier(case: str, looped: bool) -> None:
    """``Config(cluster=True)``: the parts of a row meet at the thread-block cluster's barrier (``og_cluster_sync``)
    with no counter, spin or reset, and read the partials addressed through the barrier's token. Under the
    interpreter the barrier returns at once, so the kernel is launched again on the same workspace (as above), once
    more per barrier (every statistic of these regions meets at one)."""
    rows, width, split = 5, 61, 4
    g = og.Graph()
    x = g.placeholder((rows, width), og.float32)
    w = g.placeholder((width,), og.float32)
    y = CASES[case](g, x, w)
    ops, ins = region_of([y])
    config = Config(reduction=True, xblock=1, rblock=8 if looped else 16, looped=looped, num_warps=4, split=split,
                    cluster=True)
    kernel = region_kernel(ops, ins, [y], config=config)
    source = kernel.source
    assert "og_cluster_sync(" in source and "atomic" not in source and "while" not in source
    token = re.search(r"(tok\d+) = og_cluster_sync", source)
    assert token is not None and re.search(rf"tl\.load\(ws \+ \(row \* \d+ \+ {token.group(1)}\)", source)
    gen = torch.Generator().manual_seed(3)
    xv, wv = torch.randn(rows, width, generator=gen), torch.randn(width, generator=gen)
    args = [xv if t is x else wv if t is w else t.op.payload for t in ins]
    for _ in range(source.count("og_cluster_sync(")):
        kernel(*args)
    (got,) = kernel(*args)
    (want,) = g.compile({x: x.type, w: w.type}, [y], device="cpu",
                        descriptor=og.CompilationDescriptor(fusion=False)).run([xv, wv])
    torch.testing.assert_close(got, want, rtol=1e-4, atol=3e-4)


@pytest.mark.parametrize("split,looped", [(1, False), (32, False), (4, "columns")])
def test_cluster_launch_refused_where_no_cluster_meets(split: int, looped: bool | str) -> None:
    # a cluster is for the parts of one row meeting at its barrier: not a row in one part, not more parts than a
    # cluster holds (16 on Hopper), not a column reduction's parts (the last one finishes, nobody waits)
    g = og.Graph()
    x = g.placeholder((64, 4096), og.float32)
    y = g.reduce_sum(x, [0] if looped == "columns" else [1])
    ops, ins = region_of([y])
    with pytest.raises(NotExpressible):
        kernel = region_kernel(ops, ins, [y], config=Config(reduction=True, xblock=1 if looped != "columns" else 32,
                                                            rblock=128, looped=looped == "columns", num_warps=4,
                                                            split=split, cluster=True))
        assert kernel.source is None  # not reached: the source is emitted when the kernel is made


@pytest.mark.parametrize("columns", [False, True])
def test_parts_reading_another_parts_elements_keep_their_input(columns: bool) -> None:
    """x - x[:, :1] beside a row sum, split into parts walking their chunks (or x - x[:1, :] beside a column sum,
    its rows split): every part reads the first element, which the first part may already have stored over, so the
    output may not take x's buffer (a review's race: off by 2.9 in place under the interpreter)."""
    g = og.Graph()
    x = g.placeholder((64, 8) if columns else (2, 64), og.float32)
    first = g.slice(x, [0, 0], [1, 8]) if columns else g.slice(x, [0, 0], [2, 1])
    outs = [g.reduce_sum(x, [0 if columns else 1]), x - first]
    ops, ins = region_of(outs)
    config = Config(reduction=True, xblock=8 if columns else 1, rblock=8, looped=True, num_warps=4, split=4)
    kernel = region_kernel(ops, ins, outs, config=config)
    assert not any(ins[i] is x for i, _ in kernel.inplace_ok), kernel.inplace_ok


def test_a_float32_scalar_leaves_a_16_bit_row_16_bit() -> None:
    # the RMSNorm of Llama's code: x cast to float32, its epsilon a float32 constant the region reads; the row is
    # still bfloat16 to the candidates (walking clusters, the register cap)
    g = og.Graph()
    x, w = g.placeholder((8, 262144), og.bfloat16), g.placeholder((262144,), og.bfloat16)
    xf = g.cast(x, og.float32)
    y = g.cast(xf * g.rsqrt(g.reduce_mean(xf * xf, axes=[1], keepdims=True) + 1e-6), og.bfloat16) * w
    ops, ins = region_of([y])
    em = RegionEmitter(ops, ins, [y])
    assert any(t.dtype == og.float32 and t.shape == () for t in em.inputs)
    with mock.patch.object(configs, "multiprocessors", lambda: 132), \
            mock.patch.object(configs, "_splittable", lambda em: True), \
            mock.patch.object(configs, "clusters", lambda: True):
        found = configs.candidate_configs(em)
    assert sum(c.cluster and c.looped for c in found) == 2 and sum(c.maxnreg == 80 for c in found) == 1


def test_16_bit_parts_of_eight_warps_are_also_offered_under_a_register_cap() -> None:
    # three programs of 8 warps an SM rather than two (log_softmax's part took 108 registers, softmax's 80): the cap
    # goes to Triton as ``maxnreg`` on CUDA only, and says so in the kernel's description
    def capped(dtype: og.DType) -> list[Config]:
        g = og.Graph()
        x = g.placeholder((8, 262144), dtype)
        y = g.log_softmax(x, 1)
        ops, ins = region_of([y])
        with mock.patch.object(configs, "multiprocessors", lambda: 132), \
                mock.patch.object(configs, "_splittable", lambda em: True), \
                mock.patch.object(configs, "clusters", lambda: True):
            return [c for c in configs.candidate_configs(RegionEmitter(ops, ins, [y])) if c.maxnreg]

    (cfg,) = capped(og.bfloat16)
    assert (cfg.split, cfg.rblock, cfg.num_warps, cfg.cluster, cfg.maxnreg) == (16, 16384, 8, True, 80)
    assert cfg.describe() == "split 16, 16384 a program, 8 warps, as clusters, at most 80 registers"
    assert capped(og.float32) == []
    g = og.Graph()
    x = g.placeholder((2, 64), og.float32)
    y = g.softmax(x, 1)
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], config=Config(reduction=True, xblock=1, rblock=64, num_warps=4, maxnreg=80))
    data = torch.randn(2, 64)
    (got,) = kernel(data)  # the interpreter: no register cap to take, the same result
    torch.testing.assert_close(got, torch.softmax(data, 1))
    # every compile of it for CUDA (direct, precompiled, in a worker: all from these options) asks ptxas for the cap
    from opgraph.codegen.triton import compile_worker, precompile

    gpu = torch.device("cuda", 0)
    _, _, options = precompile.stand_in_arguments(kernel, [compile_worker.stand_in((2, 64), torch.float32, gpu)], gpu)
    assert options["maxnreg"] == 80
