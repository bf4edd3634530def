"""``opgraph.data``: the bundled digits load with the right shapes, dtypes and classes; the split is
stratified, deterministic and complete."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest

from opgraph.data import DIGITS_CLASSES, load_digits, train_test_split


def test_digits_shapes_dtypes_and_range() -> None:
    images, labels = load_digits()
    assert images.shape == (1797, 1, 8, 8) and images.dtype == np.float32
    assert labels.shape == (1797,) and labels.dtype == np.int64
    assert images.min() == 0.0 and images.max() == 1.0
    # pixels were counts 0..16: every value is a multiple of 1/16
    assert np.array_equal(images * 16, np.round(images * 16))
    assert images.flags.writeable and labels.flags.writeable


def test_digits_classes_are_balanced() -> None:
    _, labels = load_digits()
    counts = np.bincount(labels, minlength=DIGITS_CLASSES)
    assert len(counts) == DIGITS_CLASSES == 10
    assert counts.sum() == 1797 and counts.min() >= 170 and counts.max() <= 185


def test_digits_known_values() -> None:
    images, labels = load_digits()
    assert labels[:10].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert (images[0, 0, 0] * 16).astype(int).tolist() == [0, 0, 5, 13, 9, 1, 0, 0]


def test_each_call_returns_fresh_arrays() -> None:
    a, la = load_digits()
    a[:] = -1
    la[:] = -1
    b, lb = load_digits()
    assert b.min() == 0.0 and lb.min() == 0


def test_data_and_license_ship_in_the_package() -> None:
    root = resources.files("opgraph.data")
    assert root.joinpath("digits.csv.gz").is_file()
    assert "BSD 3-Clause License" in root.joinpath("LICENSE").read_text()
    assert "scikit-learn" in root.joinpath("NOTICE").read_text()


def test_split_is_stratified_complete_and_deterministic() -> None:
    _, labels = load_digits()
    train, test = train_test_split(labels, test_fraction=0.2, seed=0)
    assert len(train) + len(test) == len(labels)
    assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(len(labels)))
    assert train.dtype.kind == "i" and np.all(np.diff(train) > 0) and np.all(np.diff(test) > 0)
    for c in range(10):
        n = int((labels == c).sum())
        assert int((labels[test] == c).sum()) == round(0.2 * n)
    again = train_test_split(labels, test_fraction=0.2, seed=0)
    assert np.array_equal(again[0], train) and np.array_equal(again[1], test)
    other = train_test_split(labels, test_fraction=0.2, seed=1)
    assert not np.array_equal(other[1], test)
    # the fixed hash gives the same split everywhere: pin a few indices
    assert test[:8].tolist() == [3, 10, 18, 21, 33, 41, 48, 49]


def test_split_edges_and_errors() -> None:
    labels = np.array([0, 1, 0, 1])
    assert len(train_test_split(labels, test_fraction=0.0)[1]) == 0
    assert len(train_test_split(labels, test_fraction=1.0)[0]) == 0
    with pytest.raises(ValueError, match="test_fraction"):
        train_test_split(labels, test_fraction=1.5)
    with pytest.raises(ValueError, match="1-D"):
        train_test_split(labels.reshape(2, 2))
