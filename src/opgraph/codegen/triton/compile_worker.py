"""A worker process that compiles generated Triton kernels into Triton's on-disk cache, for a parent that then loads
them from there instead of compiling them itself.

Triton's compile holds the GIL for much of its work (the front end is Python), so compiling in threads gained 2.4x
on 16 cores (RESULTS.md, tenth session); processes do not share it. The parent (``precompile``) starts one worker
per compile thread, as ``python -m opgraph.codegen.triton.compile_worker`` (no ``__main__`` of the user's is
imported again, as ``multiprocessing``'s spawn would), in a session of its own, and sends it pickled jobs on stdin;
each reply comes back on the worker's stdout (what else prints to stdout goes to stderr). A job names the kernel's
source file and function, its launch arguments (tensors as ``stand_in`` descriptions), grid and options: the worker
runs Triton's ``warmup`` on them, so the cache key is the one the parent's launch computes. The worker exits when
its stdin closes (its parent is gone).
"""

from __future__ import annotations

import importlib.util
import math
import os
import pickle
import sys
import time
from dataclasses import dataclass
from typing import Any, BinaryIO


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument as the compile sees it: its dtype, shape, strides (None: contiguous) and address modulo 16
    (Triton specialises a pointer on its alignment)."""

    dtype: Any  # a torch.dtype
    shape: tuple[int, ...]
    misalignment: int = 0
    strides: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Job:
    """One compile: the ``@triton.jit`` function ``function`` of the module file ``path`` (imported as
    ``module``), for ``args`` (``TensorSpec`` for tensors), ``grid`` and launch ``options``, on a device of compute
    capability ``capability``, into the Triton cache ``cache_dir`` (None: Triton's default)."""

    path: str
    module: str
    function: str
    args: tuple[Any, ...]
    grid: tuple[int, ...]
    options: tuple[tuple[str, Any], ...]
    capability: tuple[int, int]
    cache_dir: str | None


def stand_in(shape: tuple[int, ...], dtype: Any, device: Any, misalignment: int = 0,
             strides: tuple[int, ...] | None = None) -> Any:
    """A tensor of ``shape`` and ``dtype`` on ``device`` as Triton's ``warmup`` sees one (Triton's ``MockTensor``),
    with the sizes, ``strides`` (None: contiguous) and device the launcher code reads, at an address that is
    ``misalignment`` bytes past a multiple of 16 (0: aligned, as PyTorch's allocations are)."""
    from triton.runtime.jit import MockTensor

    steps = strides if strides is not None else contiguous_strides(shape)

    class Contiguous(MockTensor):
        def stride(self, dim: int | None = None) -> Any:
            return steps if dim is None else steps[dim]

        def data_ptr(self) -> int:
            return misalignment

    t = Contiguous(dtype, list(shape))
    t.shape, t.device = tuple(shape), device
    return t


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[k + 1:]) for k in range(len(shape)))


def describe(arg: Any) -> Any:
    """``arg`` as a job carries it: a tensor or stand-in as a ``TensorSpec``, anything else (ints, floats, None)
    as itself."""
    if hasattr(arg, "dtype") and hasattr(arg, "data_ptr"):
        return TensorSpec(arg.dtype, tuple(int(d) for d in arg.shape), int(arg.data_ptr()) % 16,
                          tuple(int(s) for s in arg.stride()))
    return arg


def _function(job: Job, loaded: dict[str, Any]) -> Any:
    fn = loaded.get(job.path)
    if fn is None:
        spec = importlib.util.spec_from_file_location(job.module, job.path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[job.module] = module
        spec.loader.exec_module(module)
        fn = loaded[job.path] = getattr(module, job.function)
    return fn


class CompileOnlyDriver:
    """Triton's CUDA driver as far as a compile asks it (the current device, stream and target), for a GPU of
    compute ``capability`` that this machine need not have: nothing it compiles can be launched here."""

    def __init__(self, capability: tuple[int, int]) -> None:
        self.capability = capability

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_device_capability(self, device: int | None = None) -> tuple[int, int]:
        return self.capability

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.capability[0] * 10 + self.capability[1], 32)

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    @staticmethod
    def is_active() -> bool:
        return True


def run(job: Job, loaded: dict[str, Any]) -> None:
    """Compile ``job`` here (``loaded``: the functions imported so far, by path). On CUDA the compile never touches
    the device: Triton asks its driver for the current device, stream and capability, answered here from the job,
    so the worker holds no CUDA context (half a GiB of device memory each when it did, RESULTS.md seventeenth
    session)."""
    import torch

    if job.cache_dir is not None:
        os.environ["TRITON_CACHE_DIR"] = job.cache_dir
    device = torch.device("cpu")
    if job.capability:
        from triton.runtime import driver

        if torch.cuda.is_available():
            active = driver.active
            active.get_current_device = lambda: 0
            active.get_current_stream = lambda *_: 0
            active.get_device_capability = lambda *_: job.capability
        else:  # compiling for a GPU this machine lacks (tests and benchmarks on a CPU machine)
            driver.set_active(CompileOnlyDriver(job.capability))
        device = torch.device("cuda", 0)
    args = [stand_in(a.shape, a.dtype, device, a.misalignment, a.strides) if isinstance(a, TensorSpec) else a
            for a in job.args]
    build_launcher(_function(job, loaded).warmup(*args, grid=job.grid, **dict(job.options)))


def build_launcher(compiled: Any) -> None:
    """Build the C launcher of a compiled kernel ahead of its first launch, where this Triton builds one per
    signature (3.6: a C compiler run; ResNet-50's first step built 35 of them on its main thread, 7.1 s under the
    profiler, RESULTS.md seventeenth session); it is cached on disk, so the launch loads it. Best effort: nothing
    where Triton has no such step."""
    try:
        from triton.runtime import driver

        driver.active.launcher_cls(compiled.src, compiled.metadata)
    except Exception:
        pass


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """Answer each pickled ``Job`` on ``requests`` with a pickled ``(ok, message, seconds)`` on ``replies``,
    until ``requests`` ends."""
    loaded: dict[str, Any] = {}
    while True:
        try:
            job = pickle.load(requests)
        except EOFError:
            return
        start = time.perf_counter()
        try:
            run(job, loaded)
            reply: tuple[bool, str, float] = (True, "", time.perf_counter() - start)
        except Exception as e:  # reported to the parent, whose launch compiles it again and raises it there
            reply = (False, f"{type(e).__name__}: {e}", time.perf_counter() - start)
        pickle.dump(reply, replies)
        replies.flush()


def main() -> None:
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed to stdout (Triton's or a library's) would corrupt the replies
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":  # jobs unpickle as the package module's classes: serve with that module, not __main__'s
    from opgraph.codegen.triton import compile_worker

    compile_worker.main()
