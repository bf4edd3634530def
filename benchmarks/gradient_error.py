"""How far one training step's gradients land from float64, opgraph's against eager PyTorch's: the relative L2 error
of every parameter's gradient (and the loss) of ``torch.compile(backend="opgraph")`` and of eager, both at the
model's float32 with TF32 off, against eager in float64; the rows are the parameters whose ratio (opgraph's error
over eager's, eager's floored at 1.25e-5 as the zoo test's floor of 1e-4 over its factor 8 does) is worst. The
zoo test (``tests/frontends/test_model_zoo_gpu.py``) fails a ratio above 8.

``--variant`` picks what to compare: ``default`` (the backend as shipped), ``cudnn-bn`` (``batch_norm_regions=False``:
cuDNN's batch norm), ``split-fma`` (split-statistics kernels compiled with FMA contraction, as before the eleventh
session), ``no-split`` (no split configurations). Models: torchvision's by name at ``--size``/``--batch`` (the zoo's
sizes by default), or a ``tiny_*`` stand-in of ``opgraph bench`` (runs on the CPU).

    python benchmarks/gradient_error.py --models resnet50,mobilenet_v2 --variant default
    python benchmarks/gradient_error.py --models resnet50 --variant split-fma
    python benchmarks/gradient_error.py --models tiny_cnn --device cpu
"""

from __future__ import annotations

import argparse
import copy
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

import opgraph  # noqa: F401  (registers the backend when not installed)
from opgraph.cli._bench_models import MODELS, without_dropout
from opgraph.cli._table import format_table

VARIANTS = ("default", "cudnn-bn", "split-fma", "no-split")
FLOOR = 1e-4 / 8


@contextmanager
def variant(name: str) -> Iterator[dict[str, Any]]:
    """The backend options of ``name``, with the code it changes patched for the duration."""
    from opgraph.codegen.triton import configs, kernel, region

    saved_args, saved_configs = kernel.RegionKernel._arguments, configs.candidate_configs
    if name == "split-fma":
        def arguments(self: Any, *a: Any, **k: Any) -> tuple[list[Any], dict[str, Any]]:
            args, options = saved_args(self, *a, **k)
            options["enable_fp_fusion"] = True  # FMA contraction in every kernel, where split programs meet too
            return args, options
        kernel.RegionKernel._arguments = arguments  # type: ignore[method-assign]
    elif name == "no-split":
        def candidates(em: Any) -> list[Any]:
            found = saved_configs(em)
            return [c for c in found if c.split == 1] or found
        configs.candidate_configs = region.candidate_configs = kernel.candidate_configs = candidates
    try:
        yield {"batch_norm_regions": False} if name == "cudnn-bn" else {}
    finally:
        kernel.RegionKernel._arguments = saved_args  # type: ignore[method-assign]
        configs.candidate_configs = region.candidate_configs = kernel.candidate_configs = saved_configs


def build(name: str, size: int, batch: int, device: str) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if name in MODELS:
        model = MODELS[name].build(True)
        size = MODELS[name].size if name.startswith("tiny") else size
    else:
        import torchvision  # the GPU machine's model zoo

        model = getattr(torchvision.models, name)(weights=None)
    return without_dropout(model).to(device).train(), torch.randn(batch, 3, size, size, device=device)


def gradients(model: torch.nn.Module, x: torch.Tensor, options: dict[str, Any] | None) -> dict[str, torch.Tensor]:
    """The loss and every parameter's gradient after one backward of ``mean(out^2)`` (``options``: compiled)."""
    torch._dynamo.reset()
    fn = model if options is None else torch.compile(model, backend="opgraph",
                                                     options={"warn_fallbacks": False, **options})
    loss = fn(x).double().square().mean()
    loss.backward()
    return {"loss": loss.detach(), **{k: p.grad for k, p in model.named_parameters() if p.grad is not None}}


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = want.double().norm().item()
    return (got.double() - want.double()).norm().item() / (scale or 1.0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,mobilenet_v2", help="comma-separated model names")
    ap.add_argument("--variant", choices=VARIANTS, default="default")
    ap.add_argument("--size", type=int, default=64, help="image size of torchvision models (the zoo's: 64)")
    ap.add_argument("--batch", type=int, default=4, help="batch (the zoo's: 4)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--worst", type=int, default=3, help="rows per model")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    rows = []
    for name in args.models.split(","):
        model, x = build(name, args.size, args.batch, args.device)
        with variant(args.variant) as options:
            mine = gradients(copy.deepcopy(model), x, options)
        theirs = gradients(copy.deepcopy(model), x, None)
        exact = gradients(copy.deepcopy(model).double(), x.double(), None)
        found = sorted(((relative(mine[k], w), relative(theirs[k], w), k) for k, w in exact.items()),
                       key=lambda e: -e[0] / max(e[1], FLOOR))
        rows += [[name, args.variant, key, f"{m:.2e}", f"{t:.2e}", f"{m / max(t, FLOOR):.1f}x"]
                 for m, t, key in found[:args.worst]]
    print(format_table(["model", "variant", "gradient", "opgraph error", "eager error", "ratio"], rows))


if __name__ == "__main__":
    main()
