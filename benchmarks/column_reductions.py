"""Launch configurations of the NHWC batch-norm column reductions, timed against each other and the copy
bandwidth in the same run: the sweep behind the column-split rules of ``codegen/triton/configs.py``'s
``candidate_configs``.

For each ``--regions`` x ``--dtypes`` x ``--shapes`` on (``--batch``, S, S, C) channels-last activations, one
region is emitted with every configuration worth trying. ``statistics``: a decomposed batch norm's sums
(16-bit data cast to float32, shifted by each channel's first element), then mean, variance and scale.
``backward``: the incoming gradient plus a residual gradient, masked by the ReLU (zero where y <= 0), and its
two sums against x - mean. ``sums``: one column sum of each ``--matrices`` (R, C) matrix, as a bias or
layer-norm gradient alone (16-bit data cast to float32), timed against PyTorch's own ``sum`` over the rows in the
same run. Configurations: the region's own ``candidate_configs`` (the first is the default, what runs untuned),
then a grid of column tiles (``--tiles`` xblock x rblock, ``--warps``) split as
``configs.column_split`` splits them for about ``--per-sm`` programs a multiprocessor.

Times are device time with a cold L2 (``benchmarks/fusion.py``'s ``measure``, the median of ``--repeats``).
``of copy``: bytes moved / time / copy bandwidth; statistics read x once, the backward moves five passes (y,
the gradient, the residual gradient and x read, the masked gradient written).

    python benchmarks/column_reductions.py --batch 128 --shapes 64x56,512x28 --dtypes float32,bfloat16 --top 5
    python benchmarks/column_reductions.py --dtypes float32 --tiles 64x64,64x128,128x64 --warps 4,8 --per-sm 2,4,8
    python benchmarks/column_reductions.py --regions sums --matrices 8192x768,8192x3072,128x4096 --dtypes float32
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

import opgraph as og
from opgraph.cli._table import format_table
from opgraph.codegen.triton.configs import column_split
from opgraph.codegen.triton.kernel import region_kernel
from opgraph.codegen.triton.region import Config, RegionEmitter, candidate_configs

_spec = importlib.util.spec_from_file_location("opgraph_benchmarks_fusion", Path(__file__).with_name("fusion.py"))
assert _spec is not None and _spec.loader is not None
fusion = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fusion
_spec.loader.exec_module(fusion)

DTYPES = {"float32": og.float32, "bfloat16": og.bfloat16}
REGIONS = ("statistics", "backward", "sums")
# activation-sized passes over memory a region cannot do with fewer
PASSES = {"statistics": 1, "backward": 5, "sums": 1}


if TYPE_CHECKING:  # mypy sees benchmarks/fusion.py as the top-level module ``fusion``
    from fusion import RegionCase as Region
else:
    Region = fusion.RegionCase


def build(region: str, shape: tuple[int, ...], dtype: og.DType, device: str) -> Region:
    """The ``region`` of a batch norm over NHWC ``shape`` (``sums``: of an (R, C) matrix) in ``dtype``, and random
    inputs on ``device``."""
    c, rows = shape[-1], math.prod(shape[:-1])
    gen = torch.Generator(device=device).manual_seed(rows * c)

    def rand(*size: int, offset: float = 0.0) -> torch.Tensor:
        return (torch.randn(size, device=device, generator=gen) + offset).to(dtype.torch_dtype)

    g = og.Graph()
    x = g.placeholder(shape, dtype, name="x")
    xv = rand(*shape, offset=3.0)
    xf = g.cast(x, og.float32) if dtype is not og.float32 else x
    if region == "sums":
        outputs, values = [g.reduce_sum(xf, [0])], {id(x): xv}
    elif region == "statistics":  # as passes/decompose.py writes them: shifted sums, then the constants
        gamma = g.placeholder((c,), og.float32, name="gamma")
        shift = g.slice(xf, [0, 0, 0, 0], [1, 1, 1, c], [1, 1, 1, 1])
        d = xf - shift
        s1, s2 = g.reduce_sum(d, [0, 1, 2]), g.reduce_sum(d * d, [0, 1, 2])
        mean_d = s1 * (1.0 / rows)
        var = g.maximum(s2 * (1.0 / rows) - mean_d * mean_d, 0.0)
        mean = g.reshape(shift, [c]) + mean_d
        outputs = [var, mean, g.rsqrt(var + 1e-5) * gamma]
        values = {id(x): xv, id(gamma): torch.rand(c, device=device, generator=gen)}
    else:  # the ReLU mask on the incoming gradient (plus a residual gradient), its sums against x - mean
        y, gy, gr = (g.placeholder(shape, dtype, name=n) for n in ("y", "gy", "gr"))
        m = g.placeholder((c,), og.float32, name="mean")
        dy = g.select(g.less_equal(y, 0.0), 0.0, gy + gr)
        dyf = g.cast(dy, og.float32) if dtype is not og.float32 else dy
        outputs = [dy, g.reduce_sum(dyf, [0, 1, 2]), g.reduce_sum(dyf * (xf - m), [0, 1, 2])]
        values = {id(y): rand(*shape), id(gy): rand(*shape), id(gr): rand(*shape), id(x): xv,
                  id(m): torch.rand(c, device=device, generator=gen)}
    return fusion.region_case(outputs, values, device, PASSES[region] * xv.numel() * xv.element_size())


def aten_sum(r: Region) -> Callable[[], torch.Tensor]:
    """PyTorch's column sum of a ``sums`` region's matrix (float32 accumulation and result, as the region's)."""
    x = r.feed[0]
    return lambda: torch.sum(x, 0, dtype=torch.float32)


@dataclass(frozen=True)
class Grid:
    """The swept column tiles: (xblock, rblock) pairs, warps a program, programs a multiprocessor."""

    tiles: tuple[tuple[int, int], ...] = ((32, 32), (32, 64), (64, 32), (64, 64))
    warps: tuple[int, ...] = (4,)
    per_sm: tuple[int, ...] = (2, 8)


def configs(r: Region, rows: int, kept: int, sms: int, grid: Grid = Grid()) -> tuple[list[Config], list[Config]]:
    """The region's candidates, and those followed by the swept grid of split column tiles."""
    candidates = candidate_configs(RegionEmitter(r.ops, r.inputs, r.outputs, None))
    out = list(candidates)
    for xblock, rblock in grid.tiles:
        for warps in grid.warps:
            for per_sm in grid.per_sm:
                split = column_split(kept, xblock, rows, rblock, per_sm * sms)
                cfg = Config(reduction=True, xblock=xblock, rblock=rblock, looped=True, num_warps=warps, split=split)
                if cfg not in out:
                    out.append(cfg)
    return candidates, out


def _tiles(text: str) -> tuple[tuple[int, int], ...]:
    """``XxR`` pairs of powers of two, comma-separated: column tiles of X columns by R rows."""
    what = "XxR pairs of powers of two such as 64x32"
    tiles = fusion.int_pairs(text, what)
    if any(v & (v - 1) for tile in tiles for v in tile):
        raise argparse.ArgumentTypeError(f"takes {what}, got {text!r}")
    return tuple(tiles)


def _matrices(text: str) -> list[tuple[int, int]]:
    return fusion.int_pairs(text, "RxC pairs such as 8192x768")


def agrees(got: list[torch.Tensor], want: list[torch.Tensor]) -> bool:
    """Same outputs as the default configuration's, up to the order of float32 summation."""
    return all(torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-3) for a, b in zip(got, want, strict=True))


def describe(c: Config) -> str:
    return f"{c.xblock}x{c.rblock}, {c.num_warps} warps, split {c.split}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=128, help="images a batch")
    p.add_argument("--shapes", type=fusion.channel_shapes, default=[(64, 56), (512, 28)],
                   help="CxS pairs: C channels of S x S (comma-separated)")
    p.add_argument("--matrices", type=_matrices, default=[(8192, 768), (8192, 3072)],
                   help="RxC matrices of the sums region: C columns of R rows (comma-separated)")
    p.add_argument("--dtypes", default="float32,bfloat16", help=f"of {', '.join(DTYPES)} (the activations' dtype)")
    p.add_argument("--regions", default=",".join(REGIONS), help=f"of {', '.join(REGIONS)}")
    p.add_argument("--top", type=int, default=5, help="configurations listed per case (fastest first)")
    p.add_argument("--repeats", type=int, default=10, help="timed launches of each configuration")
    p.add_argument("--tiles", type=_tiles, default=Grid.tiles, help="swept XxR column tiles (X columns, R rows)")
    p.add_argument("--warps", type=fusion.positive_ints, default=Grid.warps,
                   help="swept warps a program (comma-separated)")
    p.add_argument("--per-sm", type=fusion.positive_ints, default=Grid.per_sm,
                   help="swept programs a multiprocessor the split aims at (comma-separated)")
    args = p.parse_args(argv)
    grid = Grid(args.tiles, args.warps, args.per_sm)
    if not torch.cuda.is_available():
        p.error("needs a CUDA device: split configurations meet at barriers that the interpreter cannot run")
    dtypes, regions = args.dtypes.split(","), args.regions.split(",")
    if set(dtypes) - set(DTYPES) or set(regions) - set(REGIONS):
        p.error(f"dtypes from {', '.join(DTYPES)}, regions from {', '.join(REGIONS)}")
    shapes = args.shapes
    dev = og.device("cuda")
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    copy = fusion.copy_roofline(dev, args.repeats, f", {sms} SMs, batch {args.batch}")
    summary: list[list[str]] = []
    for region in regions:
        for dtype in dtypes:
            cases: list[tuple[int, ...]] = list(args.matrices) if region == "sums" else \
                [(args.batch, s, s, c) for c, s in shapes]
            for shape in cases:
                rows, c = math.prod(shape[:-1]), shape[-1]
                case = f"{region} {dtype} {'x'.join(map(str, shape))}"
                r = build(region, shape, DTYPES[dtype], "cuda")
                candidates, cfgs = configs(r, rows, c, sms, grid)
                results: list[tuple[float, Config]] = []
                want = region_kernel(r.ops, r.inputs, r.outputs, config=candidates[0])(*r.feed)
                for cfg in cfgs:
                    try:
                        k = region_kernel(r.ops, r.inputs, r.outputs, config=cfg)
                        if not agrees(k(*r.feed), want):  # a fast wrong configuration is no result
                            print(f"  {case}: {describe(cfg)}: differs from the default", file=sys.stderr)
                            continue
                        ms = fusion.measure({"k": lambda k=k, f=r.feed: k(*f)}, dev, 2, args.repeats)["k"]
                        results.append((sorted(ms)[len(ms) // 2], cfg))
                    except Exception as e:  # a configuration that does not compile is a line, not the end
                        print(f"  {case}: {describe(cfg)}: {fusion._error(e)}", file=sys.stderr, flush=True)
                results.sort(key=lambda t: t[0])
                table = [[i + 1, f"{ms:.4f}", f"{r.nbytes / ms / 1e6 / copy:.2f}", cfg.xblock, cfg.rblock,
                          cfg.num_warps, cfg.split,
                          "default" if cfg == candidates[0] else "yes" if cfg in candidates else "-"]
                         for i, (ms, cfg) in enumerate(results[:args.top])]
                print(f"\n== {case}: {len(results)} of {len(cfgs)} configurations ran")
                print(format_table(["rank", "ms", "of copy", "xblock", "rblock", "warps", "split", "candidate"],
                                   table), flush=True)
                default = next((ms for ms, cfg in results if cfg == candidates[0]), None)
                best = results[0] if results else None
                aten = "-"
                if region == "sums":
                    ms = fusion.measure({"aten": aten_sum(r)}, dev, 2, args.repeats)["aten"]
                    aten = f"{sorted(ms)[len(ms) // 2]:.4f}"
                summary.append([case, f"{default:.4f}" if default is not None else "-",
                                f"{best[0]:.4f}" if best else "-", describe(best[1]) if best else "-",
                                f"{default / best[0]:.2f}" if default is not None and best else "-", aten,
                                f"{float(aten) / best[0]:.2f}" if best and aten != "-" else "-"])
    print()
    print(format_table(["case", "default ms", "best ms", "best config", "default/best", "ATen ms", "ATen/best"],
                       summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
