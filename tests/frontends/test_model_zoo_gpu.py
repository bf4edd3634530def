"""The model zoo through ``torch.compile(backend="opgraph")`` on CUDA, against eager PyTorch: torchvision
ResNet-18/50, VGG16, AlexNet, MobileNetV2, EfficientNet-B0, ViT-B/16 and timm's ConvMixer, random weights, no
downloads. Inference (outputs) in float32 with TF32 off; training (loss, gradients, buffers and one SGD step)
against float64 as the oracle, no farther from it than eager float32 (32 BatchNorm layers over tiny batches
amplify rounding beyond any fixed tolerance); bfloat16 inference with a loose tolerance. Runs with
``pytest -m gpu`` where torchvision and timm import (the GPU machine); the CPU subset in CI is in test_convert_nn.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.frontends.torch_harness import check_inference, check_training_against_float64

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]


def _torchvision(name: str, **kwargs: Any) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        tv = pytest.importorskip("torchvision")
        return getattr(tv.models, name)(weights=None, **kwargs)

    return build


def _convmixer() -> torch.nn.Module:
    timm = pytest.importorskip("timm")
    return timm.create_model("convmixer_768_32", pretrained=False, num_classes=10)


# (builder, image size, batch): small batches keep the suite a few minutes long
MODELS: dict[str, tuple[Callable[[], torch.nn.Module], int, int]] = {
    "resnet18": (_torchvision("resnet18"), 64, 4),
    "resnet50": (_torchvision("resnet50"), 64, 4),
    "vgg16": (_torchvision("vgg16"), 32, 2),
    "alexnet": (_torchvision("alexnet"), 64, 2),
    "mobilenet_v2": (_torchvision("mobilenet_v2"), 64, 4),
    "efficientnet_b0": (_torchvision("efficientnet_b0"), 64, 4),
    "vit_b_16": (_torchvision("vit_b_16", image_size=32, num_classes=10), 32, 2),
    "convmixer": (_convmixer, 32, 2),
}


@pytest.fixture(autouse=True)
def _exact_float32() -> Any:
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _model(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    build, size, batch = MODELS[name]
    torch.manual_seed(0)
    model = build().cuda()
    for m in model.modules():  # dropout and stochastic depth off: the comparison needs the same function
        if isinstance(m, torch.nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
    return model, torch.randn(batch, 3, size, size, device="cuda")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_inference_matches_eager(name: str) -> None:
    model, x = _model(name)
    check_inference(model.eval(), x, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_step_matches_eager(name: str) -> None:
    model, x = _model(name)
    check_training_against_float64(model.train(), x)


@pytest.mark.parametrize("name", ["resnet18", "efficientnet_b0"])
def test_bfloat16_autocast_training_step_is_close(name: str) -> None:
    """Under autocast the batch norms take 16-bit inputs, so by default their forward runs as generated regions
    (statistics, then the normalisation with its ReLU/SiLU) instead of cuDNN's kernel; the backend writes the
    backward as elementwise ops and sums either way. The floor is a few bfloat16 rounding steps: a scalar loss of
    eager autocast can land nearer float64 by luck."""
    model, x = _model(name)
    reports = check_training_against_float64(model.train(), x, autocast=True, floor=1e-2)
    kinds = [k.op for r in reports for k in r.executable.kernels()]
    assert "batch_norm_training" not in kinds, "a batch norm kept cuDNN's kernel"


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "efficientnet_b0", "mobilenet_v2"])
def test_float32_training_with_batch_norm_regions(name: str) -> None:
    """Float32 batch norms as generated regions (shifted column sums split across programs, the normalisation
    fused with its activation): a ResNet-50 step took 8% less time than with cuDNN's kernel (RESULTS.md, eighth
    session). Against float64 as the default's zoo test is, before they become the float32 default too."""
    model, x = _model(name)
    reports = check_training_against_float64(model.train(), x, options={"batch_norm_regions": True})
    kinds = [k.op for r in reports for k in r.executable.kernels()]
    assert "batch_norm_training" not in kinds, "a batch norm kept cuDNN's kernel"


@pytest.mark.parametrize("name", ["resnet18", "vit_b_16"])
def test_bfloat16_inference_is_close(name: str) -> None:
    model, x = _model(name)
    model = model.eval().to(torch.bfloat16)
    check_inference(model, x.to(torch.bfloat16), rtol=5e-2, atol=5e-2)
