"""Launch configurations of flat (elementwise) generated kernels, timed against each other and the copy bandwidth
in the same run: whether anything beats the one configuration ``codegen/triton/configs.py`` gives them (1024
elements a program, 4 warps), which the tuner therefore never questions.

Cases (``--cases``):

* ``chain-N``: ``benchmarks/fusion.py``'s chain of the first N elementwise steps, on vectors of ``--mib`` MiB;
* ``bn-forward``: a decomposed batch norm's normalisation and ReLU on an NHWC activation of ResNet-50's
  (``--shape`` NxHxWxC): ``relu((x - mean[c]) * scale[c] + beta[c])``, per-channel vectors in float32;
* ``bn-backward``: the batch-norm backward's elementwise part on the same activation:
  ``(g - gmean[c] - (x - mean[c]) * k[c]) * scale[c]``, g the masked incoming gradient.

Each runs in ``--dtypes`` with every ``--blocks`` x ``--warps`` pair that gives a thread 2-32 elements. The
default configuration is the reference: every other must agree with it exactly (the same expression on each
element). Times are device time with a cold L2 (``fusion.measure``, median of ``--repeats``); ``of copy``:
bytes of the inputs and outputs / time / copy bandwidth.

    python benchmarks/elementwise_configs.py
    python benchmarks/elementwise_configs.py --cases bn-backward --dtypes bfloat16 --blocks 1024,2048,4096,8192
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import opgraph as og
from opgraph.cli._table import format_table
from opgraph.codegen.triton.configs import Config
from opgraph.codegen.triton.kernel import region_kernel

_spec = importlib.util.spec_from_file_location("opgraph_benchmarks_fusion", Path(__file__).with_name("fusion.py"))
assert _spec is not None and _spec.loader is not None
fusion = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fusion
_spec.loader.exec_module(fusion)

CASES = ("chain-3", "chain-8", "bn-forward", "bn-backward")
DEFAULT = Config(reduction=False, block=1024, num_warps=4)


if TYPE_CHECKING:  # mypy sees benchmarks/fusion.py as the top-level module ``fusion``
    from fusion import RegionCase as Region
else:
    Region = fusion.RegionCase


def build(case: str, dtype: og.DType, mib: float, shape: tuple[int, ...], device: str) -> Region:
    """The region of ``case`` in ``dtype`` and random inputs on ``device``."""
    gen = torch.Generator(device=device).manual_seed(7)
    g = og.Graph()
    values: dict[int, torch.Tensor] = {}

    def placeholder(size: tuple[int, ...], dt: og.DType, name: str) -> og.Tensor:
        t = g.placeholder(size, dt, name=name)
        values[id(t)] = torch.randn(size, device=device, generator=gen).to(dt.torch_dtype)
        return t

    if case.startswith("chain-"):
        n = int(case.split("-", 1)[1])
        if not 1 <= n <= len(fusion.STEPS):
            raise ValueError(f"{case}: chains have 1 to {len(fusion.STEPS)} steps")
        numel = max(1, int(mib * 2**20) // int(dtype.itemsize))
        x, y = placeholder((numel,), dtype, "x"), placeholder((numel,), dtype, "y")
        outputs = [fusion._chain(g, x, y, n)]
    else:
        c = shape[-1]
        x = placeholder(shape, dtype, "x")
        mean, scale = placeholder((c,), og.float32, "mean"), placeholder((c,), og.float32, "scale")
        xf = g.cast(x, og.float32) if dtype is not og.float32 else x
        if case == "bn-forward":
            beta = placeholder((c,), og.float32, "beta")
            y = g.maximum((xf - mean) * scale + beta, 0.0)
        elif case == "bn-backward":
            grad, gmean = placeholder(shape, dtype, "grad"), placeholder((c,), og.float32, "gmean")
            k = placeholder((c,), og.float32, "k")
            gf = g.cast(grad, og.float32) if dtype is not og.float32 else grad
            y = (gf - gmean - (xf - mean) * k) * scale
        else:
            raise ValueError(f"unknown case {case!r}: choose from {', '.join(CASES)} (chain-1 .. chain-8)")
        outputs = [g.cast(y, dtype) if dtype is not og.float32 else y]
    return fusion.region_case(outputs, values, device)


def configs(blocks: tuple[int, ...], warps: tuple[int, ...]) -> list[Config]:
    """The default first, then each block x warps pair giving a thread 2-32 elements."""
    out = [DEFAULT]
    for block in blocks:
        for w in warps:
            cfg = Config(reduction=False, block=block, num_warps=w)
            if 2 <= block // (32 * w) <= 32 and cfg not in out:
                out.append(cfg)
    return out


def _powers_of_two(text: str) -> tuple[int, ...]:
    values = fusion.positive_ints(text)
    if any(v & (v - 1) for v in values):
        raise argparse.ArgumentTypeError(f"expected powers of two, got {text!r}")
    return values


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        dims = ()
    if len(dims) != 4 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"expected NxHxWxC, got {text!r}")
    return dims


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=fusion.names_of([*CASES, *(f"chain-{n}" for n in range(1, 9))]),
                   default=list(CASES), help=f"comma-separated, of {', '.join(CASES)} (chain-1 .. chain-8)")
    p.add_argument("--dtypes", type=fusion.names_of(["float32", "bfloat16"]), default=["float32", "bfloat16"],
                   help="comma-separated, of float32, bfloat16")
    p.add_argument("--mib", type=float, default=256, help="MiB of each chain input")
    p.add_argument("--shape", type=_shape, default=(128, 56, 56, 256), help="NxHxWxC activation of the bn cases")
    p.add_argument("--blocks", type=_powers_of_two, default=(512, 1024, 2048, 4096), help="elements a program")
    p.add_argument("--warps", type=_powers_of_two, default=(4, 8, 16), help="warps a program")
    p.add_argument("--repeats", type=int, default=15, help="timed calls of each configuration (median)")
    args = p.parse_args(argv)
    dev = fusion.cuda_device(p)
    copy = fusion.copy_roofline(dev, args.repeats)
    failed = False
    for case in args.cases:
        for dtype in args.dtypes:
            r = build(case, fusion.DTYPES[dtype][0], args.mib, args.shape, "cuda")
            rows: list[tuple[float, list[Any]]] = []
            reference: list[torch.Tensor] | None = None
            for c in configs(args.blocks, args.warps):
                kernel = region_kernel(r.ops, r.inputs, r.outputs, config=c)
                got = kernel(*r.feed)
                reference = got if reference is None else reference
                same = all(torch.equal(a, b) for a, b in zip(got, reference, strict=True))
                failed = failed or not same
                timed = fusion.measure({"k": lambda k=kernel, f=r.feed: k(*f)}, dev, 2, args.repeats)["k"]
                ms = statistics.median(timed)
                rows.append((ms, [f"{c.block}", f"{c.num_warps}", f"{ms:.4f}", f"{r.nbytes / ms / 1e6 / copy:.2f}",
                                  "default" if c == DEFAULT else "", "ok" if same else "DIFFERS"]))
            rows.sort(key=lambda row: row[0])
            print(f"\n== {case} {dtype}: {r.nbytes / 2**20:.0f} MiB moved")
            print(format_table(["block", "warps", "ms", "of copy", "", "check"], [row for _, row in rows]))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
