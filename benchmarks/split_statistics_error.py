"""How exact a batch norm's column regions are on the GPU, configuration by configuration, with and without FMA
contraction: the NHWC regions of ``column_reductions.py`` (statistics: shifted sums, the mean, the biased variance
and ``rsqrt(var + eps) * gamma``; backward: the ReLU-masked gradient's sum and its sum against x - mean) run in
their default configuration and in split ones, each compiled with Triton's ``enable_fp_fusion`` on and off, against
the same values in float64. The eleventh session found float32 gradients 9-22x farther from float64 with
contraction in split kernels; the twelfth found the statistics exact either way (RESULTS.md), so the backward sums
are the next suspect. Errors are the largest over channels, relative to each channel's value (statistics) or to
the sum of its terms' magnitudes (backward sums, which may cancel).

    python benchmarks/split_statistics_error.py
    python benchmarks/split_statistics_error.py --shapes 64x56,2048x7 --data normal,narrow
    python benchmarks/split_statistics_error.py --regions backward
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

import opgraph as og
from opgraph.cli._table import format_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fusion  # noqa: E402
from column_reductions import REGIONS, build, configs, describe  # noqa: E402

DATA = {  # (channels' means, spread): normal as the column benchmarks, narrow a spread far below the mean
    "normal": (3.0, 1.0),
    "narrow": (10.0, 1e-2),
    "relu": (0.0, 1.0),  # max(x, 0) of a standard normal
}


def data(kind: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    mean, spread = DATA[kind]
    x = torch.randn(shape, generator=gen, device="cuda") * spread + mean
    return x.clamp_min(0.0) if kind == "relu" else x


COLUMNS = ("variance | sum dy", "mean | sum dy (x - mean)", "scale | -")


def relative(got: torch.Tensor, want: torch.Tensor, scale: torch.Tensor) -> float:
    return float(((got.double() - want).abs() / scale.clamp_min(1e-30)).max())


def references(region: str, feed: dict[str, torch.Tensor], c: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The region's per-channel outputs in float64, and what each error is relative to: the statistics' own values;
    for the backward sums, the sums of the absolute terms (a sum that cancels to ~0 has no relative error)."""
    x = feed["x"].double().reshape(-1, c)
    if region == "statistics":
        mean, var = x.mean(0), x.var(0, unbiased=False)
        want = [var, mean, (var + 1e-5).rsqrt() * feed["gamma"].double()]
        return want, [w.abs() for w in want]
    y, gy, gr = (feed[n].double().reshape(-1, c) for n in ("y", "gy", "gr"))
    dy = torch.where(y <= 0, 0.0, gy + gr)
    terms = [dy, dy * (x - feed["mean"].double())]
    return [t.sum(0) for t in terms], [t.abs().sum(0) for t in terms]


def run(r: Any, cfg: Any, fma: bool) -> list[torch.Tensor]:
    from opgraph.codegen.triton import kernel

    saved = kernel.RegionKernel._arguments

    def arguments(self: Any, *a: Any, **k: Any) -> tuple[list[Any], dict[str, Any]]:
        args, options = saved(self, *a, **k)
        return args, {**options, "enable_fp_fusion": fma}

    kernel.RegionKernel._arguments = arguments  # type: ignore[method-assign]
    try:
        out = kernel.region_kernel(r.ops, r.inputs, r.outputs, config=cfg)(*r.feed)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return list(out)
    finally:
        kernel.RegionKernel._arguments = saved  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=4, help="images a batch (the zoo test's: 4)")
    p.add_argument("--shapes", type=fusion.channel_shapes, default=[(64, 16), (256, 8), (2048, 2)],
                   help="CxS pairs: C channels of S x S (comma-separated; ResNet-50 at 64x64 pixels by default)")
    p.add_argument("--data", default=",".join(DATA), help=f"of {', '.join(DATA)}")
    p.add_argument("--splits", type=int, default=3, help="split configurations tried per case")
    p.add_argument("--regions", type=fusion.names_of(REGIONS), default=list(REGIONS),
                   help="statistics (the forward's sums) and/or backward (the ReLU-masked gradient's two sums)")
    args = p.parse_args(argv)
    kinds = args.data.split(",")
    if set(kinds) - set(DATA):
        p.error(f"--data from {', '.join(DATA)}")
    if not torch.cuda.is_available():
        p.error("needs a CUDA device: split configurations meet at barriers that the interpreter cannot run")
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    rows = []
    for region in args.regions:
        for c, s in args.shapes:
            shape = (args.batch, s, s, c)
            for kind in kinds:
                r = build(region, shape, og.float32, "cuda")
                feed = {t.name: k for k, t in enumerate(r.inputs)}
                r.feed[feed["x"]] = data(kind, shape, torch.Generator(device="cuda").manual_seed(c * s))
                want, scale = references(region, {name: r.feed[k] for name, k in feed.items()}, c)
                candidates, swept = configs(r, args.batch * s * s, c, sms)
                tried = [candidates[0], *[cfg for cfg in swept if cfg.split > 1][:args.splits]]
                for cfg in tried:
                    for fma in (True, False):
                        try:
                            got = run(r, cfg, fma)[-len(want):]
                        except Exception as e:  # a configuration that does not compile is a row, not the end
                            rows.append([region, f"{c}x{s}", kind, describe(cfg), fma, fusion._error(e), "", ""])
                            continue
                        errors = [f"{relative(g, w, k):.2e}" for g, w, k in zip(got, want, scale, strict=True)]
                        rows.append([region, f"{c}x{s}", kind, describe(cfg), "on" if fma else "off",
                                     *errors, *["-"] * (len(COLUMNS) - len(errors))])
                print(f"  {region} {c}x{s} {kind}: done", file=sys.stderr, flush=True)
    print(f"batch {args.batch}, float32 NHWC regions against float64; largest error over channels, relative to each "
          "channel's value (statistics) or to its sum of absolute terms (backward sums)")
    print(format_table(["region", "shape", "data", "configuration", "FMA", *COLUMNS], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
