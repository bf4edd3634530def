"""``codegen.triton.precompile``: an executable's kernels compiled in the background before their first launch, on
stand-ins (Triton's ``warmup`` replaced by a recorder, on the CPU): the arguments, grid and options of each warmup are
the launch's own; a kernel that will be tuned has every candidate compiled, or only the one a tuning record names;
a launch of a source still compiling waits for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
import torch

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton import configs, precompile, tuning_records  # noqa: E402
from opgraph.codegen.triton import kernel as kmod  # noqa: E402
from opgraph.codegen.triton.kernel import RegionKernel, region_kernel, region_of  # noqa: E402

from .test_tuning_records import _column_sum  # noqa: E402  (a column sum with split candidates)


class Recorder:
    """A Triton function that records its warmups (and their thread) and launches instead of compiling."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.warmups: list[tuple[str, tuple[object, ...], tuple[int, ...], dict[str, object]]] = []
        self.launches: list[tuple[tuple[object, ...], tuple[int, ...], dict[str, object]]] = []
        self.gate = gate

    def warmup(self, *args: object, grid: tuple[int, ...], **options: object) -> None:
        if self.gate is not None:
            self.gate.wait(5)
        self.warmups.append((threading.current_thread().name, args, grid, options))

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        return lambda *args, **options: self.launches.append((args, grid, options))


@pytest.fixture
def recorders(monkeypatch: pytest.MonkeyPatch) -> dict[str, Recorder]:
    """Every kernel source loads as its own recorder; every input is large enough to be tuned."""
    made: dict[str, Recorder] = {}
    monkeypatch.setattr(kmod, "load_kernel", lambda source, folder=None: made.setdefault(source, Recorder()))
    monkeypatch.setattr(kmod, "TUNE_MIN_ELEMENTS", 0)
    with mock.patch.object(configs, "multiprocessors", lambda: 132), \
            mock.patch.object(configs, "_splittable", lambda em: True):
        yield made


def _settle() -> None:
    for future in list(precompile._PENDING.values()):
        future.result()


def _described(args: tuple[object, ...]) -> list[object]:
    return [(tuple(a.shape), a.dtype) if hasattr(a, "dtype") else a for a in args]


def test_a_stand_in_is_a_contiguous_tensor_at_an_aligned_address() -> None:
    t = precompile.stand_in((2, 3, 4), torch.bfloat16, torch.device("cpu"))
    assert t.shape == (2, 3, 4) and t.stride() == (12, 4, 1) and t.stride(1) == 4
    assert t.dtype is torch.bfloat16 and t.device == torch.device("cpu")


def _warmed(recorders: dict[str, Recorder], k: RegionKernel) -> list[tuple[tuple[int, ...], dict[str, object]]]:
    """(grid, options) of each warmup of ``k``'s configuration (candidates may share a source)."""
    x = torch.randn(2048, 64)
    k(x)  # on the CPU a kernel launches as itself (tuning is CUDA's): its own grid and options
    recorder = recorders[k.source]
    _, grid, options = recorder.launches[-1]
    return [(g, o) for _, _, g, o in recorder.warmups if (g, o) == (grid, options)]


def test_every_candidate_compiles_in_the_background_with_its_launch_arguments(recorders: dict[str, Recorder],
                                                                               tmp_path: Path) -> None:
    kernel = _column_sum(tmp_path)
    candidates = [kernel, *kernel.alternatives()]
    queued = precompile.precompile(kernel, torch.device("cpu"))
    _settle()
    assert [k.config for k in queued] == [k.config for k in candidates] and not precompile._PENDING
    for k in candidates:
        assert len(_warmed(recorders, k)) == 1
        recorder = recorders[k.source]
        thread, args, grid, options = next(w for w in recorder.warmups if w[2:] == recorder.launches[-1][1:])
        assert thread.startswith("opgraph-compile")
        assert _described(args) == _described(recorder.launches[-1][0])
        assert not any(isinstance(a, torch.Tensor) for a in args)  # split workspaces too: no device memory


def test_a_tuning_record_narrows_the_compiles_to_its_winner(recorders: dict[str, Recorder], tmp_path: Path) -> None:
    kernel = _column_sum(tmp_path)
    candidates = [kernel, *kernel.alternatives()]
    winner = candidates[-1]
    ins = [precompile.stand_in((2048, 64), torch.float32, torch.device("cpu"))]
    key = tuning_records.record_key(kernel.key, repr([k.config for k in candidates]), ins)
    assert key == tuning_records.record_key(kernel.key, repr([k.config for k in candidates]), [torch.randn(2048, 64)])
    tuning_records.store(key, winner.config, tmp_path)
    assert [k.config for k in precompile.precompile(kernel, torch.device("cpu"))] == [winner.config]
    _settle()
    assert [k.config for k in candidates if _warmed(recorders, k)] == [winner.config]


def test_a_launch_waits_for_its_source_still_compiling(recorders: dict[str, Recorder], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    g = og.Graph()
    x = g.placeholder((64, 64), og.float32)
    y = g.exp(x)
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], cache_dir=tmp_path)
    gate = threading.Event()
    recorders[kernel.source] = Recorder(gate)
    kernel._fn = None
    precompile.precompile(kernel, torch.device("cpu"))
    pending = precompile._PENDING[(kernel.key, kernel.config)]
    deadline = time.monotonic() + 5
    while not pending.running() and time.monotonic() < deadline:  # a job still queued is compiled by the launch
        time.sleep(0.01)
    assert pending.running()
    launched = threading.Thread(target=kernel, args=(torch.randn(64, 64),))
    launched.start()
    launched.join(0.2)
    assert launched.is_alive() and not recorders[kernel.source].launches  # waiting for the compile
    gate.set()
    launched.join(5)
    assert len(recorders[kernel.source].warmups) == 1 and len(recorders[kernel.source].launches) == 1
    assert not precompile._PENDING


def test_dynamic_input_types_are_not_precompiled(recorders: dict[str, Recorder], tmp_path: Path) -> None:
    g = og.Graph()
    x = g.placeholder((None, 64), og.float32)
    ops, ins = region_of([g.exp(x)])
    kernel = region_kernel(ops, ins, [ops[-1].outputs[0]], cache_dir=tmp_path)
    assert precompile.precompile(kernel, torch.device("cpu")) == []


def test_a_launch_compiles_a_configuration_still_queued_itself(recorders: dict[str, Recorder], tmp_path: Path) -> None:
    gate = threading.Event()
    busy = [precompile._submit(lambda: gate.wait(5)) for _ in range(max(1, len(precompile._WORKERS)))]
    busy += [precompile._submit(lambda: gate.wait(5)) for _ in range(len(precompile._WORKERS))]  # workers started
    g = og.Graph()
    x = g.placeholder((64, 64), og.float32)
    y = g.exp(x)
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], cache_dir=tmp_path)
    try:
        assert precompile.precompile(kernel, torch.device("cpu")) == [kernel]
        done = threading.Thread(target=kernel, args=(torch.randn(64, 64),))
        done.start()
        done.join(2)
        assert not done.is_alive()  # taken off the queue, not waited for behind the busy workers
        assert (kernel.key, kernel.config) not in precompile._PENDING
        assert len(recorders[kernel.source].launches) == 1 and not recorders[kernel.source].warmups
    finally:
        gate.set()
        for f in busy:
            f.result(5)


def _typed(args: tuple[object, ...]) -> list[object]:
    """Arguments as a compile specialises on them: tensors by shape, dtype, strides and alignment; ints as they are."""
    return [(tuple(a.shape), a.dtype, tuple(a.stride()), a.data_ptr() % 16) if hasattr(a, "dtype") else a
            for a in args]


def test_compiles_ahead_of_strided_inputs_are_the_launchs_own(recorders: dict[str, Recorder],
                                                               tmp_path: Path) -> None:
    """A strided variant tuned on a transposed input: the compile ahead sees its strides (and alignment), not a
    contiguous tensor's, so the launch finds it compiled."""
    g = og.Graph()
    x = g.placeholder((96, 64), og.float32)
    y = g.reduce_sum(g.exp(x), [1])
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], cache_dir=tmp_path, strided=True)
    xt = torch.randn(64, 97)[:, 1:].t()  # strides (1, 97), 4 bytes past an aligned address
    precompile.compile_ahead([kernel], [xt])
    kernel(xt)
    recorder = recorders[kernel.source]
    (_, args, grid, options), = recorder.warmups
    launch_args, launch_grid, launch_options = recorder.launches[-1]
    assert (grid, options) == (launch_grid, launch_options)
    assert _typed(args) == _typed(launch_args)
    assert _typed(args)[0] == ((96, 64), torch.float32, (1, 97), 4)


def _relu_of_nhwc(shape: tuple[int, int, int, int], folder: Path) -> RegionKernel:
    """The kernel of relu(transpose(x, NCHW -> NHWC)) for an NCHW ``x`` of ``shape``: input 0 is one it transposes."""
    g = og.Graph()
    x = g.placeholder(shape, og.float32)
    y = g.relu(g.transpose(x, (0, 2, 3, 1)))
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], cache_dir=folder)
    assert precompile.nhwc_stored_inputs(kernel) == {0}
    return kernel


def test_an_input_the_region_transposes_to_nhwc_has_its_strided_variant_compiled_too(recorders: dict[str, Recorder],
                                                                                       tmp_path: Path) -> None:
    """A region that transposes an NCHW input to NHWC (how the layout pass leaves one that is stored NHWC): the
    background compiles include the strided variant for a channels-last stand-in, the one a channels-last launch
    takes, with the launch's own arguments; a contiguous launch still finds the contiguous kernel compiled."""
    kernel = _relu_of_nhwc((4, 8, 6, 6), tmp_path)
    queued = precompile.precompile(kernel, torch.device("cpu"))
    _settle()
    assert len(queued) == 2 and queued[0] is kernel and queued[1] in kernel._strided.values()
    xv = torch.randn(4, 8, 6, 6)
    for value in (xv.contiguous(memory_format=torch.channels_last), xv):
        kernel(value)  # recorded, not run
    for k in queued:
        recorder = recorders[k.source]
        (_, args, grid, options), = recorder.warmups
        launch_args, launch_grid, launch_options = recorder.launches[-1]
        assert (grid, options) == (launch_grid, launch_options) and _typed(args) == _typed(launch_args)
    assert _typed(recorders[queued[1].source].warmups[0][1])[0] == ((4, 8, 6, 6), torch.float32, (288, 1, 48, 8), 0)


def test_no_strided_variant_where_channels_last_storage_is_contiguous_anyway(recorders: dict[str, Recorder],
                                                                             tmp_path: Path) -> None:
    """After a global pooling (H = W = 1) a channels-last tensor is contiguous: its launch takes the kernel's own
    variant, so none other is compiled for it."""
    kernel = _relu_of_nhwc((4, 8, 1, 1), tmp_path)
    assert precompile.precompile(kernel, torch.device("cpu")) == [kernel]
    _settle()
    assert torch.randn(4, 8, 1, 1).contiguous(memory_format=torch.channels_last).is_contiguous()
    assert not kernel._strided


def test_a_tuner_takes_its_candidates_ahead_of_the_queued_background_work(recorders: dict[str, Recorder],
                                                                          tmp_path: Path) -> None:
    gate = threading.Event()
    busy = [precompile._submit(lambda: gate.wait(5)) for _ in range(max(1, len(precompile._WORKERS)))]
    busy += [precompile._submit(lambda: gate.wait(5)) for _ in range(len(precompile._WORKERS))]  # workers started
    for _ in range(200):  # every thread holds a busy job (an ahead job would overtake one still queued)
        if sum(f.running() for f in busy) == len(precompile._WORKERS):
            break
        time.sleep(0.01)
    g = og.Graph()
    x = g.placeholder((64, 64), og.float32)
    kernels = [region_kernel(*region_of([y]), [y], cache_dir=tmp_path) for y in (g.exp(x), g.tanh(x))]
    try:
        for k in kernels:
            assert precompile.precompile(k, torch.device("cpu")) == [k]
        background = precompile._PENDING[(kernels[1].key, kernels[1].config)]
        ahead = threading.Thread(target=precompile.compile_ahead, args=([kernels[1]], [torch.randn(64, 64)]))
        ahead.start()
        for _ in range(200):
            if precompile._PENDING.get((kernels[1].key, kernels[1].config)) is not background:
                break
            time.sleep(0.01)
        assert background.cancelled()  # taken off the background queue, queued again ahead of it
        assert ahead.is_alive()  # waiting for its compile behind the busy threads
    finally:
        gate.set()
        for f in busy:
            f.result(5)
    ahead.join(5)
    assert not ahead.is_alive()
    _settle()
    assert [len(recorders[k.source].warmups) for k in kernels] == [1, 1]


@pytest.mark.gpu
def test_on_cuda_a_launch_after_the_background_compile_compiles_nothing(tmp_path: Path) -> None:
    g = og.Graph()
    x = g.placeholder((1024, 4096), og.float32)
    y = g.reduce_sum(g.relu(x), [1])
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], cache_dir=tmp_path, config=None)
    dev = torch.device("cuda")
    precompile.precompile(kernel, dev)
    _settle()
    fn = kernel.fn
    entries = lambda: sum(len(c[0]) for c in fn.device_caches.values())  # noqa: E731  (Triton's compiled kernels)
    before = entries()
    assert before >= 1
    xv = torch.randn(1024, 4096, device=dev)
    kernel._tuned[((1024, 4096),)] = kernel  # launch this configuration, untuned
    out = kernel(xv)[0]
    torch.testing.assert_close(out, xv.relu().sum(1), rtol=1e-4, atol=1e-3)
    assert entries() == before  # the stand-ins' specialisation is the real tensors'


@pytest.mark.gpu
def test_on_cuda_a_kernel_compiled_ahead_launches_without_building_its_launcher(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Where Triton builds a C launcher per signature (3.6), the compile thread builds it: the launch, from a fresh
    Triton cache, runs no C compiler."""
    from triton.backends.nvidia import driver
    from triton.runtime import build

    if not hasattr(driver, "make_launcher"):
        pytest.skip("this Triton builds no launcher per signature")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("OPGRAPH_COMPILE_PROCESSES", "0")
    g = og.Graph()
    x = g.placeholder((512, 2048), og.bfloat16)
    y = g.reduce_max(g.exp(x), [1])
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], cache_dir=tmp_path, config=None)
    xv = torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16)
    precompile.compile_ahead([kernel], [xv])
    builds: list[object] = []
    real = build._build
    monkeypatch.setattr(build, "_build", lambda *a, **k: builds.append(a) or real(*a, **k))
    kernel._tuned[((512, 2048),)] = kernel  # launch this configuration, untuned
    torch.testing.assert_close(kernel(xv)[0], xv.float().exp().amax(1).to(torch.bfloat16), rtol=2e-2, atol=1e-2)
    assert builds == []


@pytest.mark.gpu
def test_on_cuda_a_channels_last_launch_finds_its_strided_variant_compiled(tmp_path: Path) -> None:
    g = og.Graph()
    x = g.placeholder((16, 64, 28, 28), og.bfloat16)
    y = g.relu(g.transpose(x, (0, 2, 3, 1)))
    ops, ins = region_of([y])
    kernel = region_kernel(ops, ins, [y], cache_dir=tmp_path)
    dev = torch.device("cuda")
    queued = precompile.precompile(kernel, dev)
    _settle()
    (variant,) = [k for k in queued if k is not kernel]
    fn = variant.fn
    entries = lambda: sum(len(c[0]) for c in fn.device_caches.values())  # noqa: E731  (Triton's compiled kernels)
    before = entries()
    assert before >= 1
    xv = torch.randn(16, 64, 28, 28, device=dev, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(kernel(xv)[0], xv.permute(0, 2, 3, 1).relu())
    assert entries() == before  # the channels-last stand-in's specialisation is the real tensor's


def test_a_tuner_stops_waiting_for_a_candidate_far_slower_to_compile_than_its_default(
        recorders: dict[str, Recorder], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the default compiles at once; one candidate's compile hangs (ptxas for minutes): with patience compile_ahead
    # returns after OPGRAPH_CANDIDATE_COMPILE_S with that one's position, which still compiles in the background
    monkeypatch.setenv("OPGRAPH_CANDIDATE_COMPILE_S", "0.3")
    kernel = _column_sum(tmp_path)
    candidates = [kernel, *kernel.alternatives()]
    assert len(candidates) >= 3
    gate = threading.Event()
    slow = candidates[2]
    recorders[slow.source] = Recorder(gate)
    for k in candidates:
        k._fn = None
    start = time.monotonic()
    try:
        late = precompile.compile_ahead(candidates, [torch.randn(2048, 64)], patience=True)
        waited = time.monotonic() - start
        assert late[:1] == [2] and waited < 3  # (and those queued behind it, with one compile thread)
        assert not recorders[slow.source].warmups  # still compiling
    finally:
        gate.set()
    _settle()
    assert len(recorders[slow.source].warmups) >= 1
    # without patience (the background's own compile-ahead) every compile is waited for
    assert precompile.compile_ahead(candidates[:1], [torch.randn(2048, 64)]) == []
