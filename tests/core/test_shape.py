from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import opgraph as og
from opgraph.core.shape import as_shape, broadcast_shapes, normalize_axes, normalize_axis

shapes = st.lists(st.integers(1, 4), min_size=0, max_size=4).map(tuple)


@given(shapes, shapes)
def test_broadcast_matches_numpy(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    try:
        want = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(og.ShapeError):
            broadcast_shapes(a, b)
        return
    assert broadcast_shapes(a, b) == want


def test_dynamic_dims_broadcast() -> None:
    assert broadcast_shapes((None, 3), (4, 1)) == (4, 3)
    assert broadcast_shapes((None, 3), (1, 3)) == (None, 3)
    assert broadcast_shapes((None,), (None,)) == (None,)
    with pytest.raises(og.ShapeError, match=r"\(2, 3\) and \(4,\)"):
        broadcast_shapes((2, 3), (4,))


def test_axes() -> None:
    assert normalize_axis(-1, 3) == 2
    assert normalize_axes((-1, 0), 3) == (0, 2)
    with pytest.raises(og.ShapeError, match="out of range"):
        normalize_axis(3, 3)
    with pytest.raises(og.ShapeError, match="repeat"):
        normalize_axes((1, -2), 3)


def test_bad_shapes() -> None:
    with pytest.raises(og.ShapeError):
        as_shape((2, -1))
    with pytest.raises(og.ShapeError):
        as_shape((2.5,))  # type: ignore[arg-type]
    t = og.TensorType((None, 4), og.float32)
    assert str(t) == "float32(?, 4)" and t.accepts(og.TensorType((7, 4), og.float32))
    assert not t.accepts(og.TensorType((7, 5), og.float32))
