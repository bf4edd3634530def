"""The models of ``opgraph bench``: the seeds' tables (torchvision, timm, transformers; random weights, no
downloads) and small torch-only stand-ins that ``--quick`` uses where those libraries are missing."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def first_line(e: BaseException) -> str:
    """The first line of an error's message (200 characters at most), for a table cell."""
    text = str(e).strip().splitlines()
    return (text[0] if text else "")[:200]


@dataclass(frozen=True)
class Model:
    """A model of the benchmark: ``build(quick)`` makes it with random weights. ``kind`` "image" takes
    ``(batch, 3, size, size)`` and gives ``classes`` logits; "tokens" takes ``(batch, size)`` token ids
    and gives logits over a vocabulary of ``classes`` per token (a masked-LM head)."""

    name: str
    title: str
    library: str  # the package that builds it; "torch" for the stand-ins written here
    build: Callable[[bool], nn.Module]
    kind: str = "image"
    size: int = 224
    quick_size: int = 64
    classes: int = 1000
    train_batch: int = 64
    quick_train_batch: int = 8
    stand_in: str | None = None  # the tiny model --quick uses when ``library`` is missing

    def sizes(self, quick: bool) -> tuple[int, int]:
        """``(size, training batch)``."""
        return (self.quick_size, self.quick_train_batch) if quick else (self.size, self.train_batch)

    def input_text(self, size: int) -> str:
        return f"{size} tokens" if self.kind == "tokens" else f"3x{size}x{size}"


def _torchvision(name: str, image_kwarg: bool = False) -> Callable[[bool], nn.Module]:
    def build(quick: bool) -> nn.Module:
        import torchvision

        kwargs = {"image_size": 64 if quick else 224} if image_kwarg else {}  # ViT's position embedding
        return getattr(torchvision.models, name)(weights=None, **kwargs)
    return build


def _bert(quick: bool) -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    small: dict[str, Any] = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                             "intermediate_size": 512}
    cfg = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **(small if quick else {}))
    return BertForMaskedLM(cfg)


def _convmixer(quick: bool) -> nn.Module:
    import timm

    if quick:
        from timm.models.convmixer import ConvMixer

        return ConvMixer(dim=256, depth=4, kernel_size=7, patch_size=4, act_layer=nn.ReLU)
    return timm.create_model("convmixer_768_32", pretrained=False)


class _TinyBlock(nn.Module):
    """ResNet's basic block: relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.short = (nn.Identity() if stride == 1 and cin == cout else
                      nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + self.short(x))


def _tiny_cnn(quick: bool) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         _TinyBlock(16, 16, 1), _TinyBlock(16, 32, 2), _TinyBlock(32, 64, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def _tiny_vgg(quick: bool) -> nn.Module:
    def conv(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU()]
    return nn.Sequential(*conv(3, 16), *conv(16, 16), nn.MaxPool2d(2), *conv(16, 32), *conv(32, 32), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 8 * 8, 128), nn.ReLU(), nn.Dropout(), nn.Linear(128, 10))


class _TinyEncoder(nn.Module):
    """Two transformer encoder layers (nn.TransformerEncoderLayer, width 64, 4 heads) on token embeddings with a
    masked-LM head (BERT in small, post-norm), or on 4x4 image patches with a class token (ViT in small, pre-norm)."""

    def __init__(self, tokens: bool, vocab: int = 1000, dim: int = 64, seq: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.tokens = tokens
        self.embed: nn.Module = nn.Embedding(vocab, dim) if tokens else nn.Conv2d(3, dim, 4, 4)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.positions = nn.Parameter(torch.randn(1, seq if tokens else 65, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=not tokens)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab if tokens else classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tokens:
            return self.head(self.norm(self.encoder(self.embed(x) + self.positions[:, :x.shape[1]])))
        h = self.embed(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1) + self.positions
        return self.head(self.norm(self.encoder(h))[:, 0])


class _MBConv(nn.Module):
    """EfficientNet's block: 1x1 expand, depthwise 3x3, squeeze-and-excite, 1x1 project, residual."""

    def __init__(self, cin: int, cout: int, stride: int, mid: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU(),
                                  nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid),
                                  nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, cin // 4, 1), nn.SiLU(),
                                nn.Conv2d(cin // 4, mid, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        h = self.project(h * self.se(h))
        return h + x if self.residual else h


def _tiny_mbconv(quick: bool) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.SiLU(),
                         _MBConv(16, 16, 1, 64), _MBConv(16, 24, 2, 64), _MBConv(24, 24, 1, 96),
                         nn.Conv2d(24, 128, 1, bias=False), nn.BatchNorm2d(128), nn.SiLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))


class _Residual(nn.Sequential):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + x


def _tiny_convmixer(quick: bool, dim: int = 64) -> nn.Module:
    blocks = [nn.Sequential(_Residual(nn.Conv2d(dim, dim, 5, groups=dim, padding="same"), nn.GELU(),
                                      nn.BatchNorm2d(dim)), nn.Conv2d(dim, dim, 1), nn.GELU(), nn.BatchNorm2d(dim))
              for _ in range(4)]
    return nn.Sequential(nn.Conv2d(3, dim, 4, 4), nn.GELU(), nn.BatchNorm2d(dim), *blocks,
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(dim, 10))


def _tiny(name: str, title: str, build: Callable[[bool], nn.Module], kind: str = "image",
          classes: int = 10) -> Model:
    return Model(name, title, "torch", build, kind, 32, 32, classes, 8, 8)


MODELS: dict[str, Model] = {m.name: m for m in [
    Model("resnet50", "ResNet-50", "torchvision", _torchvision("resnet50"), train_batch=128, stand_in="tiny_cnn"),
    Model("bert", "BERT-base", "transformers", _bert, "tokens", 128, 32, 30522, 64, 4, "tiny_transformer"),
    Model("vgg16", "VGG16", "torchvision", _torchvision("vgg16"), stand_in="tiny_vgg"),
    Model("resnet18", "ResNet-18", "torchvision", _torchvision("resnet18"), stand_in="tiny_cnn"),
    Model("alexnet", "AlexNet", "torchvision", _torchvision("alexnet"), stand_in="tiny_vgg"),
    Model("vit_b_16", "ViT-B/16", "torchvision", _torchvision("vit_b_16", image_kwarg=True), stand_in="tiny_vit"),
    Model("efficientnet_b0", "EfficientNet-B0", "torchvision", _torchvision("efficientnet_b0"),
          stand_in="tiny_mbconv"),
    Model("efficientnet_b4", "EfficientNet-B4", "torchvision", _torchvision("efficientnet_b4"),
          stand_in="tiny_mbconv"),
    Model("convmixer", "ConvMixer-768/32", "timm", _convmixer, stand_in="tiny_convmixer"),
    _tiny("tiny_cnn", "tiny ResNet-style CNN", _tiny_cnn),
    _tiny("tiny_vgg", "tiny VGG-style CNN", _tiny_vgg),
    _tiny("tiny_transformer", "tiny transformer encoder (masked LM)", lambda quick: _TinyEncoder(True), "tokens", 1000),
    _tiny("tiny_vit", "tiny ViT", lambda quick: _TinyEncoder(False)),
    _tiny("tiny_mbconv", "tiny EfficientNet-style CNN", _tiny_mbconv),
    _tiny("tiny_convmixer", "tiny ConvMixer", _tiny_convmixer),
]}
TRAINING = ("resnet50", "bert", "vgg16")
INFERENCE = ("vgg16", "resnet18", "resnet50", "alexnet", "vit_b_16", "efficientnet_b0", "efficientnet_b4", "convmixer")


@cache
def library_missing(library: str) -> str | None:
    """Why ``library`` cannot build models here, or None when it can."""
    if library == "torch":
        return None
    try:
        importlib.import_module(library)
    except ModuleNotFoundError:
        return f"{library} not installed"
    except Exception as e:  # installed but broken (e.g. built for another torch)
        return f"{library} does not import ({type(e).__name__}: {first_line(e)})"
    return None


@dataclass
class Pick:
    """A row's model: ``model`` runs (None: skipped because ``skipped``), standing in for ``stands_for``."""

    model: Model | None
    name: str
    title: str
    stands_for: list[str] = field(default_factory=list)
    skipped: str | None = None


def pick_models(names: Sequence[str], quick: bool, only: Sequence[str] | None) -> list[Pick]:
    """The models of a section: those of ``names`` that ``only`` selects (all when None), with ``--quick`` their
    stand-ins where their library is missing (one row per stand-in); a stand-in named in ``only`` runs too."""
    picks: dict[str, Pick] = {}
    for name in names:
        m = MODELS[name]
        missing = library_missing(m.library)
        stand_in = MODELS[m.stand_in] if m.stand_in else None
        uses = []
        if not only or name in only:
            uses.append(stand_in if stand_in and missing and quick else m)
        if only and stand_in and stand_in.name in only and stand_in not in uses:
            uses.append(stand_in)
        for use in uses:
            if use is m and missing:
                picks[name] = Pick(None, name, m.title, skipped=f"skipped: {missing}")
                continue
            pick = picks.setdefault(use.name, Pick(use, use.name, use.title if use is m else use.name))
            if use is not m:
                pick.stands_for.append(m.title)
    for pick in picks.values():
        if pick.stands_for:
            pick.title = f"{pick.title} (for {', '.join(pick.stands_for)})"
    return list(picks.values())


def without_dropout(model: nn.Module) -> nn.Module:
    """Dropout, stochastic depth and drop-path off, so that the backends' training steps can be compared."""
    from torch.nn.modules.dropout import _DropoutNd

    for mod in model.modules():
        if isinstance(mod, _DropoutNd) or type(mod).__name__ in ("StochasticDepth", "DropPath"):
            for attr in ("p", "drop_prob"):
                if isinstance(getattr(mod, attr, None), float):
                    setattr(mod, attr, 0.0)
    return model


def logits_of(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    return out["logits"] if isinstance(out, dict) else out[0]  # transformers' ModelOutput is a dict


class WithLoss(nn.Module):
    """The model and its cross-entropy loss, compiled together."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits = logits_of(self.model(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))


def make_data(m: Model, batch: int, size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic ``(input, target)``: normal images and random labels, or random token ids and targets."""
    gen = torch.Generator().manual_seed(1)
    if m.kind == "tokens":
        x = torch.randint(0, m.classes, (batch, size), generator=gen)
        y = torch.randint(0, m.classes, (batch, size), generator=gen)
    else:
        x = torch.randn(batch, 3, size, size, generator=gen)
        y = torch.randint(0, m.classes, (batch,), generator=gen)
    return x.to(device), y.to(device)

