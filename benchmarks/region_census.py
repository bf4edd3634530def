"""Every generated reduction kernel of a model's training step through ``torch.compile(backend="opgraph")``, timed
alone against the copy bandwidth measured in the same run: which regions of a real network stay far from memory
speed, in which layout, and whether another of their launch configurations would do better.

A first step compiles (tuning each kernel on its first launch); the launches of a second are recorded. Each
distinct (kernel, input shapes and strides) is then launched again on random inputs of the same shapes, strides and
dtypes, as the step launched it: the strided variant where an input is not contiguous, then the configuration the
tuner chose. ``best other`` times the variant's other candidate configurations, its default included. Times are
device time with a cold L2 (``benchmarks/fusion.py``'s ``measure``, median of ``--repeats``); ``of copy``: bytes of
the inputs (broadcast dims once) and outputs / time / copy bandwidth. ``layout``: ``contig`` or the domain dim
stored innermost (1: the channels of channels-last NCHW). A second table sums the launches of each kernel kind (the
same ops, whatever their numbers in the graph).

    python benchmarks/region_census.py --model resnet50 --batch 128 --dtype bfloat16 --channels-last
    python benchmarks/region_census.py --model resnet50 --batch 64 --dtype float32 --channels-last --all
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import re
import statistics
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from opgraph.cli._bench_models import MODELS, WithLoss, make_data
from opgraph.cli._table import format_table
from opgraph.codegen.triton.kernel import RegionKernel

_spec = importlib.util.spec_from_file_location("opgraph_benchmarks_fusion", Path(__file__).with_name("fusion.py"))
assert _spec is not None and _spec.loader is not None
fusion = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fusion
_spec.loader.exec_module(fusion)

Meta = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]  # shape, strides, dtype of one input


@dataclass
class Seen:
    kernel: RegionKernel
    inputs: tuple[Meta, ...]
    launches: int = 0


@contextlib.contextmanager
def recording(only_reductions: bool, device_type: str = "cuda") -> Iterator[dict[tuple[int, tuple[Meta, ...]], Seen]]:
    """Within the block, each outermost ``RegionKernel`` launch on ``device_type`` is recorded, per kernel and
    input shapes, strides and dtypes (the variants a call dispatches to are not counted again)."""
    seen: dict[tuple[int, tuple[Meta, ...]], Seen] = {}
    call = RegionKernel.__call__
    nesting = threading.local()  # autograd runs CUDA backward graphs on a thread of its own

    def recorded(self: RegionKernel, *inputs: torch.Tensor, **kw: Any) -> list[torch.Tensor]:
        depth = getattr(nesting, "depth", 0)
        outermost = not depth and inputs and inputs[0].device.type == device_type and (
            self.config.reduction or not only_reductions)
        nesting.depth = depth + 1
        try:
            out = call(self, *inputs, **kw)
        finally:
            nesting.depth = depth
        if outermost:  # counted once it ran
            meta = tuple((tuple(x.shape), tuple(x.stride()), x.dtype) for x in inputs)
            seen.setdefault((id(self), meta), Seen(self, meta)).launches += 1
        return out

    RegionKernel.__call__ = recorded  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        RegionKernel.__call__ = call  # type: ignore[method-assign]


def random_like(meta: Meta, device: torch.device) -> torch.Tensor:
    """Random values of the recorded shape, strides (broadcast dims stay stride 0) and dtype. Not reproduced:
    the storage offset, and inputs that shared memory in the step (each gets its own)."""
    shape, strides, dtype = meta
    span = 1 + sum((d - 1) * s for d, s in zip(shape, strides, strict=True) if d > 0)
    n = span if all(shape) else 0
    if dtype == torch.bool:
        base = torch.rand(n, device=device) < 0.5
    elif dtype.is_floating_point:
        base = torch.randn(n, device=device).to(dtype)  # float8 has no normal_
    else:
        base = torch.randint(0, 8, (n,), device=device).to(dtype)
    return base.as_strided(shape, strides)


def launched_for(k: RegionKernel, feed: Sequence[torch.Tensor]) -> tuple[RegionKernel, RegionKernel]:
    """The variant a launch on ``feed`` dispatches to (strided where an input is not contiguous), and the
    configuration its tuner chose for these shapes (the variant itself when untuned)."""
    variant = k
    if k.strided is not None and not all(x.is_contiguous() for x in feed):
        variant = k._strided.get(k._inner_axis(feed)) or k
    return variant, variant._tuned.get(tuple(tuple(x.shape) for x in feed), variant)


def moved_bytes(k: RegionKernel, feed: Sequence[torch.Tensor]) -> int:
    """Bytes a launch must move at least: each input's distinct elements (broadcast dims once), the outputs."""
    read = sum(math.prod(d for d, s in zip(x.shape, x.stride(), strict=True) if s) * x.element_size()
               for x in feed if x.numel())
    outs = k._launch(tuple(tuple(x.shape) for x in feed)).out_shapes
    written = sum(math.prod(s) * t.dtype.torch_dtype.itemsize for s, t in zip(outs, k.out_types, strict=True))
    return int(read + written)


def describe(k: RegionKernel) -> str:
    c = k.config
    split = f"/{c.split}" if c.split > 1 else ""
    return f"{c.xblock}x{c.rblock}{'L' if c.looped else ''} w{c.num_warps}{split}"


def layout(feed: Sequence[torch.Tensor], k: RegionKernel) -> str:
    if all(x.is_contiguous() for x in feed) or k.strided is None:
        return "contig"
    inner = k._inner_axis(feed)
    return "contig" if inner is None else f"dim {inner}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS), help="one of opgraph bench's models")
    ap.add_argument("--batch", type=int, default=64, help="batch size")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16", help="bfloat16: autocast")
    ap.add_argument("--channels-last", action="store_true", help="model and images channels-last")
    ap.add_argument("--all", action="store_true", help="elementwise kernels too, not only reductions")
    ap.add_argument("--repeats", type=int, default=10, help="timed launches a kernel (median)")
    ap.add_argument("--no-others", dest="others", action="store_false",
                    help="time only the launched configuration, not the other candidates")
    ap.add_argument("--top", type=int, default=40, help="rows listed, by total time a step")
    args = ap.parse_args(argv)
    dev = fusion.cuda_device(ap)
    m = MODELS[args.model]
    torch.manual_seed(0)
    model: torch.nn.Module = WithLoss(m.build(False)).cuda().train()
    x, y = (t.cuda() for t in make_data(m, args.batch, m.size, torch.device("cuda")))
    if args.channels_last and x.dim() == 4:
        # torch's stubs give Module.to no memory_format overload, which it takes at runtime
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        x = x.contiguous(memory_format=torch.channels_last)
    run = torch.compile(model, backend="opgraph", options={"cuda_graphs": False})
    for record in (False, True):  # a first step compiles and tunes; the second is recorded
        # declared: mypy would type the conditional as the join of the two managers, an ABC with no __enter__
        scope: contextlib.AbstractContextManager[dict[tuple[int, tuple[Meta, ...]], Seen]]
        scope = recording(not args.all) if record else contextlib.nullcontext({})
        with scope as seen:
            with torch.autocast("cuda", torch.bfloat16, enabled=args.dtype == "bfloat16"):
                loss = run(x, y)
            loss.backward()
    torch.cuda.synchronize()
    gbps = fusion.copy_roofline(dev, 5, f"; {len({id(s.kernel) for s in seen.values()})} kernels, {len(seen)} "
                                f"kernel and input layouts, {args.model} batch {args.batch} {args.dtype}")
    rows = []
    kinds: dict[str, list[tuple[float, float, int]]] = {}  # kernel ops -> (ms, bytes, kernel id) a step, per layout
    for s in list(seen.values()):
        feed = [random_like(meta, dev.torch) for meta in s.inputs]
        variant, launched = launched_for(s.kernel, feed)
        others = [variant, *variant.alternatives()] if variant.alternatives and args.others else []
        pool = [launched] + [o for o in others if o.config != launched.config]
        shapes = tuple(tuple(x.shape) for x in feed)
        tuned = variant._tuned.get(shapes)
        variant._tuned[shapes] = variant  # while timing, the default configuration launches as itself
        times = fusion.measure({str(i): (lambda o=o, f=feed: o(*f)) for i, o in enumerate(pool)}, dev, 2, args.repeats)
        if tuned is None:
            del variant._tuned[shapes]
        else:
            variant._tuned[shapes] = tuned
        med = [statistics.median(v) for v in times.values()]
        best = min(range(1, len(med)), key=med.__getitem__, default=None)
        nbytes = moved_bytes(launched, feed)
        kind = " ".join(re.sub(r"_\d+$", "", op) for op in s.kernel.ops)
        kinds.setdefault(kind, []).append((med[0] * s.launches, nbytes * s.launches, id(s.kernel)))
        rows.append((med[0] * s.launches, [
            "_".join(s.kernel.ops)[:48], "x".join(map(str, s.inputs[0][0])), layout(feed, s.kernel),
            describe(launched), s.launches, f"{med[0]:.4f}", f"{nbytes / med[0] / 1e6 / gbps:.2f}",
            "-" if best is None else f"{med[best]:.4f} {describe(pool[best])}"]))
    rows.sort(key=lambda r: -r[0])
    total = sum(r[0] for r in rows)
    print(format_table(["kernel ops", "first input", "layout", "launched", "per step", "ms", "of copy",
                        "best other ms"], [r[1] for r in rows[:args.top]]))
    launches = sum(s.launches for s in seen.values())
    print(f"{launches} launches a step: {total:.3f} ms (each timed alone, cold L2)")
    by_kind = sorted(((sum(v[0] for v in vs), sum(v[1] for v in vs), k) for k, vs in kinds.items()), reverse=True)
    print(format_table(["kernel ops", "kernels", "ms a step", "of copy"],
                       [[k[:72], len({v[2] for v in kinds[k]}), f"{ms:.3f}", f"{nb / ms / 1e6 / gbps:.2f}"]
                        for ms, nb, k in by_kind]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
