"""Small data sets shipped inside the package (nothing is downloaded at run time).

``load_digits()``: scikit-learn's copy of the UCI handwritten digits, 1797 images of 8x8 pixels in
10 classes (BSD-3, see ``LICENSE`` and ``NOTICE`` beside this file); ``train_test_split`` divides it
the same way on every machine.

>>> from opgraph.data import load_digits, train_test_split
>>> images, labels = load_digits()
>>> images.shape, images.dtype.name, labels.dtype.name
((1797, 1, 8, 8), 'float32', 'int64')
>>> train, test = train_test_split(labels, test_fraction=0.2)
>>> len(train), len(test)
(1438, 359)
"""

from __future__ import annotations

import functools
import gzip
import io
from importlib import resources

import numpy as np

DIGITS_FILE = "digits.csv.gz"
DIGITS_CLASSES = 10


@functools.cache
def _digits_table() -> np.ndarray:
    raw = resources.files(__name__).joinpath(DIGITS_FILE).read_bytes()
    with gzip.open(io.BytesIO(raw), "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    table.setflags(write=False)
    return table


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The handwritten digits: ``images`` float32 ``(1797, 1, 8, 8)`` in [0, 1] (NCHW, one channel)
    and ``labels`` int64 ``(1797,)`` in 0..9. Fresh arrays on every call.

    >>> images, labels = load_digits()
    >>> float(images.min()), float(images.max()), sorted(set(labels.tolist())) == list(range(10))
    (0.0, 1.0, True)
    """
    table = _digits_table()
    images = (table[:, :64].astype(np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    return images, table[:, 64].copy()


def train_test_split(labels: np.ndarray, test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(train, test)`` of a stratified split: each class gives ``round(test_fraction * n)``
    of its ``n`` examples to the test set. The order comes from a fixed integer hash of ``(seed,
    index)``, so the split is the same with every NumPy version and platform.

    >>> import numpy as np
    >>> train, test = train_test_split(np.array([0, 0, 0, 0, 1, 1, 1, 1]), test_fraction=0.5, seed=3)
    >>> sorted(train.tolist() + test.tolist()) == list(range(8)), len(test)
    (True, 4)
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"train_test_split: labels must be 1-D, got shape {labels.shape}")
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"train_test_split: test_fraction must be in [0, 1], got {test_fraction}")
    keys = _splitmix64(np.arange(labels.size, dtype=np.uint64) + np.uint64(seed & 0xFFFFFFFF) * np.uint64(1 << 32))
    train: list[np.ndarray] = []
    test: list[np.ndarray] = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        members = members[np.argsort(keys[members], kind="stable")]
        k = int(round(test_fraction * members.size))
        test.append(members[:k])
        train.append(members[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on uint64s (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


__all__ = ["DIGITS_CLASSES", "load_digits", "train_test_split"]
