"""``opgraph demo train``: train a small CNN with og.nn and og.optim on the bundled handwritten digits."""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from ._progress import Progress
from ._table import format_table

DESCRIPTION = """\
Train a LeNet-style CNN built with og.nn on the handwritten digits bundled with opgraph
(scikit-learn's copy of the UCI data: 1797 images of 8x8 pixels, 10 classes; a fixed stratified
split keeps 20% for testing):
  conv2d 1->16 3x3 pad 1, batch norm, relu, max_pool2d 2x2,
  conv2d 16->32 3x3 pad 1, batch norm, relu, max_pool2d 2x2, flatten, linear 128->64, relu, linear 64->10
with softmax cross entropy and og.optim (Adam, or SGD with momentum). Each training step is one
run of one compiled executable: forward, backward, the optimizer's updates and the batch-norm
running statistics (the updates are its target_ops). After each epoch a second executable (the
model in eval mode, sharing the same variables) measures the test accuracy. Prints a table per
epoch and the final test accuracy, and saves a plot of the training loss and test accuracy as PNG."""

EXAMPLE = """\
example:
  opgraph demo train                     # on og.device(): CUDA if present, else MPS, else the CPU
  opgraph demo train --device cpu --epochs 5 --optimizer sgd --lr 0.05 --out digits.png"""

DEFAULT_OUT = "opgraph-demo-train.png"
DEFAULT_LR = {"adam": 3e-3, "sgd": 0.05}


def register(sub: Any) -> None:
    from .demo import _non_negative, _positive, _positive_float

    p = sub.add_parser("train", help="train a small CNN on handwritten digits with og.nn and og.optim",
                       description=DESCRIPTION, epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: og.device())")
    p.add_argument("--epochs", type=_positive, default=15, help="passes over the training images (default 15)")
    p.add_argument("--batch", type=_positive, default=32, help="images per training step (default 32)")
    p.add_argument("--optimizer", choices=sorted(DEFAULT_LR), default="adam", help="default adam")
    p.add_argument("--lr", type=_positive_float, default=None,
                   help="learning rate (default 3e-3 for adam, 0.05 for sgd)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    p.add_argument("--seed", type=_non_negative, default=0, help="seed of the initial weights and the batch order")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="PNG",
                   help=f"where to save the plot (default {DEFAULT_OUT}; '' for none)")
    p.add_argument("--threads", type=_positive, default=None,
                   help="CPU threads for PyTorch (default 1 on the CPU: these tensors are too small to share)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=run, command="demo train")


# ---- data and model ----------------------------------------------------------------------------
@dataclass
class Split:
    train_images: Any  # torch tensors on the device
    train_labels: Any
    test_images: Any
    test_labels: Any


def load_split(device: Any) -> Split:
    """The digits as torch tensors on ``device``: a fixed stratified 80/20 split."""
    import torch

    from opgraph.data import load_digits, train_test_split

    images, labels = load_digits()
    train, test = train_test_split(labels, test_fraction=0.2, seed=0)
    t = [torch.from_numpy(a).to(device) for a in (images[train], labels[train], images[test], labels[test])]
    return Split(*t)


def build_model(g: Any, seed: int) -> Any:
    """The LeNet-style CNN of the description, with PyTorch's default initialisation from ``seed``."""
    import torch

    from opgraph import nn

    gen = torch.Generator().manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(g, 1, 16, 3, padding=1, bias=False, generator=gen, name="conv1"), nn.BatchNorm2d(g, 16, name="bn1"),
        nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(g, 16, 32, 3, padding=1, bias=False, generator=gen, name="conv2"), nn.BatchNorm2d(g, 32, name="bn2"),
        nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(g, 128, 64, generator=gen, name="fc1"), nn.ReLU(),
        nn.Linear(g, 64, 10, generator=gen, name="fc2"))


@dataclass
class Trainer:
    """The graph, the compiled training step and the compiled evaluation."""

    graph: Any
    model: Any
    step: Any      # Executable: (images, labels) -> (mean loss, correct count); runs the updates
    evaluate: Any  # Executable: (test images, test labels) -> (correct count,)


def build_trainer(args: argparse.Namespace, device: Any, test_size: int) -> Trainer:
    import opgraph as og

    g = og.Graph()
    model = build_model(g, args.seed)
    images = g.placeholder((None, 1, 8, 8), og.float32, name="images")
    labels = g.placeholder((None,), og.int64, name="labels")
    logits = model(images)  # training mode: batch statistics, running-statistics updates in model.updates
    loss = g.softmax_cross_entropy(logits, labels, reduction=og.LossReduction.MEAN, name="loss")
    correct = _correct(g, logits, labels)
    lr = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
    optimizer = (og.optim.Adam(g, model.parameters, lr=lr) if args.optimizer == "adam"
                 else og.optim.SGD(g, model.parameters, lr=lr, momentum=args.momentum))
    updates = optimizer.step(loss) + model.updates
    model.eval()  # the same variables; batch norm now reads the running statistics
    test_correct = _correct(g, model(images), labels)

    def types(n: int) -> dict[Any, Any]:
        return {images: og.TensorType((n, 1, 8, 8), og.float32), labels: og.TensorType((n,), og.int64)}

    step = g.compile(types(args.batch), [loss, correct], updates, device=device)
    evaluate = g.compile(types(test_size), [test_correct], device=device)
    return Trainer(g, model, step, evaluate)


def _correct(g: Any, logits: Any, labels: Any) -> Any:
    import opgraph as og

    return g.reduce_sum(g.cast(g.equal(g.argmax(logits, axis=-1), labels), og.int32))


# ---- training ----------------------------------------------------------------------------------
@dataclass
class History:
    train_loss: list[float] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    test_accuracy: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # wall time of each epoch's training steps


def train(trainer: Trainer, data: Split, args: argparse.Namespace, device: Any, progress: Progress) -> History:
    import torch

    n_train = data.train_images.shape[0]
    steps = n_train // args.batch  # the last partial batch is dropped; each epoch reshuffles
    gen = torch.Generator().manual_seed(args.seed)
    history = History()
    with progress.step(f"training ({args.epochs} epochs of {steps} steps)"):
        for epoch in range(args.epochs):
            order = torch.randperm(n_train, generator=gen).to(device.torch)
            losses, correct = [], []
            device.synchronize()
            t0 = time.perf_counter()
            for i in range(steps):
                idx = order[i * args.batch:(i + 1) * args.batch]
                loss, hits = trainer.step.run([data.train_images[idx], data.train_labels[idx]])
                losses.append(loss)
                correct.append(hits)
                progress.update(epoch * steps + i + 1, args.epochs * steps)
            device.synchronize()
            history.seconds.append(time.perf_counter() - t0)
            (test_hits,) = trainer.evaluate.run([data.test_images, data.test_labels])
            history.train_loss.append(torch.stack(losses).float().mean().item())  # one sync per epoch
            history.train_accuracy.append(torch.stack(correct).sum().item() / (steps * args.batch))
            history.test_accuracy.append(test_hits.item() / data.test_images.shape[0])
    return history


def epoch_table(h: History) -> str:
    rows = [[str(i + 1), f"{loss:.4f}", f"{100 * tr:.2f}%", f"{100 * te:.2f}%", f"{s:.2f}"]
            for i, (loss, tr, te, s) in enumerate(zip(h.train_loss, h.train_accuracy, h.test_accuracy, h.seconds,
                                                      strict=True))]
    return format_table(["epoch", "train loss", "train acc", "test acc", "seconds"], rows, align="<>>>>")


def save_plot(path: str, h: History, device: Any, final: str) -> None:
    from ._plot import BLUE, ORANGE, Series, line_chart, write_png

    epochs = list(range(1, len(h.train_loss) + 1))
    image = line_chart([Series("train loss", epochs, h.train_loss, BLUE),
                        Series("test accuracy (%)", epochs, [100 * a for a in h.test_accuracy], ORANGE,
                               right_axis=True)],
                       title=f"opgraph demo train: digits on {device}, {final}", x_label="epoch",
                       left_label="train loss", right_label="test accuracy (%)",
                       left_range=(0.0, max(v for v in h.train_loss if math.isfinite(v)) if any(
                           math.isfinite(v) for v in h.train_loss) else 1.0),
                       right_range=(min(90.0, 10 * math.floor(10 * min(h.test_accuracy))), 100.0))
    write_png(path, image)


# ---- the command -------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    import torch

    import opgraph as og

    t_start = time.perf_counter()
    progress = Progress(enabled=not args.quiet)
    dev = og.device(args.device)
    if args.threads is not None or dev.kind == "cpu":
        torch.set_num_threads(args.threads or 1)
    data = load_split(dev.torch)
    n_train, n_test = data.train_images.shape[0], data.test_images.shape[0]
    if args.batch > n_train:
        print(f"opgraph demo train: --batch {args.batch} is larger than the {n_train} training images",
              file=sys.stderr)
        return 2
    lr = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
    opt = f"Adam(lr={lr:g})" if args.optimizer == "adam" else f"SGD(lr={lr:g}, momentum={args.momentum:g})"
    print(f"opgraph demo train: LeNet-style CNN on handwritten digits ({n_train} training, {n_test} test images "
          f"of 8x8), {opt}, batch {args.batch}, {args.epochs} epochs, device {dev}"
          + (f" ({_threads()})" if dev.kind == "cpu" else ""))
    with progress.step(f"building and compiling for {dev}"):
        trainer = build_trainer(args, dev, n_test)
    params = sum(math.prod(p.shape) for p in trainer.model.parameters)
    print(f"model: {len(trainer.model.parameters)} parameter tensors, {params} weights; training step: "
          f"{trainer.step!r}, evaluation: {trainer.evaluate!r}")
    history = train(trainer, data, args, dev, progress)
    print()
    print(epoch_table(history))
    print()
    acc = history.test_accuracy[-1]
    steps = len(history.seconds) * (n_train // args.batch)
    seconds = sum(history.seconds)
    final = f"test accuracy {100 * acc:.2f}%"
    print(f"{final} ({round(acc * n_test)}/{n_test}) after {args.epochs} epochs; training {seconds:.2f} s, "
          f"{1e3 * seconds / steps:.2f} ms/step, {steps * args.batch / seconds:.0f} images/s")
    if args.out:
        save_plot(args.out, history, dev, final)
        print(f"plot saved to {args.out}")
    print(f"total {time.perf_counter() - t_start:.2f} s")
    return 0


def _threads() -> str:
    import torch

    n = torch.get_num_threads()
    return f"{n} thread" + ("s" if n != 1 else "")
