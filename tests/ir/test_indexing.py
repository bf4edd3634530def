"""``Tensor[...]`` indexing against NumPy, and the movement ops compiled with dynamic dims."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import opgraph as og
from opgraph.ops.shape import SHAPE_OF
from opgraph.ops.slicing import SLICE, PaddingMode

CPU = og.device("cpu")
KEYS: list[Any] = [
    (slice(1, 3), slice(None, None, 2)),
    (Ellipsis, -1),
    (None, 0),
    (slice(None, None, -1),),
    (slice(None, None, -2), slice(4, 0, -3)),
    (slice(-2, None, -1), None, Ellipsis, 1),
    (Ellipsis, None, slice(1, -1)),
    (np.int64(2), slice(np.int32(-100), np.int32(100))),
    (slice(3, 1), 0),  # empty
    (0, 1, 2),
    (-4, Ellipsis, -1, None),
    Ellipsis,
    slice(None),
]


def _x(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.arange(4 * 5 * 6).reshape(4, 5, 6).to(dtype)


@pytest.mark.parametrize("key", KEYS, ids=repr)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool, torch.bfloat16])
def test_getitem_matches_numpy(key: Any, dtype: torch.dtype) -> None:
    g = og.Graph()
    x = g.placeholder((4, 5, 6), dtype)
    y = x[key]
    value = _x(dtype)
    (got,) = g.run({x: value}, [y], device=CPU)
    want = value.float().numpy()[key] if dtype == torch.bfloat16 else value.numpy()[key]
    assert y.shape == want.shape and tuple(got.shape) == want.shape
    np.testing.assert_array_equal(got.float().numpy() if dtype == torch.bfloat16 else got.numpy(), want)


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_getitem_with_dynamic_dims(key: Any) -> None:
    g = og.Graph()
    x = g.placeholder((None, None, 6), og.int64)
    y = x[key]
    exe = g.compile({x: og.TensorType((None, None, 6), og.int64)}, [y], device=CPU)
    for shape in ((4, 5, 6), (7, 3, 6)):
        value = torch.arange(int(np.prod(shape))).reshape(shape)
        (got,) = exe.run([value])
        np.testing.assert_array_equal(got.numpy(), value.numpy()[key])


def test_getitem_examples() -> None:
    g = og.Graph()
    x = g.placeholder((4, 5), og.float32)
    v = torch.randn(4, 5)
    outs = [x[1:3, ::2], x[..., -1], x[None, 0], x[::-1, -2::-2]]
    got = g.run({x: v}, outs, device=CPU)
    a = v.numpy()
    for r, e in zip(got, [a[1:3, ::2], a[..., -1], a[None, 0], a[::-1, -2::-2]], strict=True):
        np.testing.assert_array_equal(r.numpy(), e)


def test_getitem_uses_slice_and_names_the_result() -> None:
    g = og.Graph()
    x = g.placeholder((4, 5))
    y = g.getitem(x, (1, None), name="row")
    assert y.name == "row" and y.shape == (1, 5)
    assert [op.op.name for op in g.ops] == ["placeholder", "slice", "expand_dims"]
    assert x[...] is x and x[:, :] is x  # nothing to slice: no op


@pytest.mark.parametrize("key,error,match", [
    ((0, 0, 0), og.ShapeError, "too many indices"),
    ((Ellipsis, Ellipsis), og.ShapeError, "single ellipsis"),
    ((slice(None, None, 0),), og.AttributeValueError, "zero"),
    (([0, 1],), og.GraphError, "gather"),
    (np.array([0, 1]), og.GraphError, "gather"),
    ((True,), og.GraphError, "not supported"),
    ("a", og.GraphError, "not supported"),
    ((3,), og.ShapeError, "out of range"),
    ((0, -6), og.ShapeError, "out of range"),
])
def test_getitem_errors(key: Any, error: type[og.OpgraphError], match: str) -> None:
    g = og.Graph()
    with pytest.raises(error, match=match):
        g.placeholder((3, 5))[key]


def test_getitem_tensor_index_says_gather() -> None:
    g = og.Graph()
    x, i = g.placeholder((3, 5)), g.placeholder((2,), og.int32)
    with pytest.raises(og.GraphError, match="use gather"):
        x[i]


# ---- movement ops compiled with dynamic dims: the lowerings read dims at run time ------------------
def _dynamic_run(build: Any, shapes: list[tuple[int, ...]], dtype: Any = og.float32) -> None:
    """Compile ``build(g, x)`` for an all-dynamic input; check each shape against the static build."""
    g = og.Graph()
    x = g.placeholder((None,) * len(shapes[0]), dtype)
    outs = build(g, x)
    outs = outs if isinstance(outs, list) else [outs]
    exe = g.compile({x: og.TensorType((None,) * len(shapes[0]), dtype)}, outs, device=CPU)
    for shape in shapes:
        value = torch.arange(int(np.prod(shape))).reshape(shape).to(dtype.torch_dtype)
        got = exe.run([value])
        g2 = og.Graph()
        x2 = g2.placeholder(shape, dtype)
        outs2 = build(g2, x2)
        want = g2.run({x2: value}, outs2 if isinstance(outs2, list) else [outs2], device=CPU)
        for t, a, b in zip(outs, got, want, strict=True):
            assert all(d is None or d == s for d, s in zip(t.shape, a.shape, strict=True))
            torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("name,build,shapes", [
    ("slice", lambda g, x: g.slice(x, (-1, 1), (0, 100), (-2, 2), end_mask=1), [(5, 6), (2, 1), (0, 3)]),
    ("slice_squeeze", lambda g, x: g.slice(x, (-1, 0), (0, 0), (1, -1), squeeze_mask=1, start_mask=2,
                                           end_mask=2), [(5, 6), (1, 3)]),
    ("slice_update", lambda g, x: g.slice_update(x, 7.0, (-1, 0), (0, 5), (-2, 2)), [(5, 6), (3, 2)]),
    ("pad_reflect", lambda g, x: g.pad(x, PaddingMode.REFLECT, (2, 1), (3, 0)), [(4, 3), (3, 2)]),
    ("pad_symmetric", lambda g, x: g.pad(x, "symmetric", (5, 1), (3, 0)), [(2, 3), (6, 1)]),
    ("pad_constant", lambda g, x: g.pad(x, "constant", (1, 0), (2, 1), 9.0), [(2, 3), (0, 1)]),
    ("reshape", lambda g, x: g.reshape(x, (-1, 2)), [(3, 4), (1, 2)]),
    ("squeeze", lambda g, x: g.squeeze(x, 1), [(3, 1), (2, 1)]),
    ("expand_dims", lambda g, x: g.expand_dims(x, axes=(0, 2)), [(3, 4)]),
    ("flatten", lambda g, x: g.flatten(x, 1), [(2, 3, 4), (1, 0, 2)]),
    ("split_num", lambda g, x: g.split(x, 2, axis=1), [(3, 4), (1, 6)]),
    ("split_sizes", lambda g, x: g.split(x, split_sizes=(1, 2)), [(3, 4), (3, 1)]),
    ("concat", lambda g, x: g.concat([x, x[::-1]], axis=0), [(3, 4)]),
    ("tile", lambda g, x: g.tile(x, (2, 1)), [(3, 4)]),
    ("broadcast_to", lambda g, x: g.broadcast_to(x, (2, 3, 4)), [(3, 4), (1, 4), (3, 1)]),
    ("space_to_depth", lambda g, x: g.space_to_depth(x, 2, "NHWC"), [(1, 4, 6, 3), (2, 2, 2, 1)]),
    ("depth_to_space", lambda g, x: g.depth_to_space(x, 2, pixel_shuffle=True), [(1, 8, 2, 3)]),
    ("shape_of", lambda g, x: g.shape_of(x), [(3, 4), (0, 7)]),
])
def test_movement_ops_with_dynamic_dims(name: str, build: Any, shapes: list[tuple[int, ...]]) -> None:
    _dynamic_run(build, shapes)


def test_dynamic_dim_that_does_not_fit_fails_at_run_time() -> None:
    g = og.Graph()
    x = g.placeholder((None, 3))
    exe = g.compile({x: og.TensorType((None, 3), og.float32)}, [g.squeeze(x, 0)], device=CPU)
    assert exe.run([torch.ones(1, 3)])[0].shape == (3,)
    with pytest.raises(og.ExecutionError, match="squeeze"):
        exe.run([torch.ones(2, 3)])
    exe = g.compile({x: og.TensorType((None, 3), og.float32)}, g.split(x, 2), device=CPU)
    with pytest.raises(og.ExecutionError, match="split"):
        exe.run([torch.ones(3, 3)])


def test_specialising_a_dynamic_graph_checks_static_sizes() -> None:
    g = og.Graph()
    x = g.placeholder((None, 3))
    y = g.squeeze(x, 0)
    with pytest.raises(og.ShapeError, match="cannot squeeze"):
        g.run({x: torch.ones(2, 3)}, [y], device=CPU)


def test_slices_of_constants_fold() -> None:
    g = og.Graph()
    c = g.constant(np.arange(10, dtype=np.int64))
    y = g.pad(c[::-3], "symmetric", [2], [0])
    exe = g.compile({}, [y], device=CPU)
    assert all(op.op is not SLICE for op in exe.program.graph.ops)
    assert exe.run([])[0].tolist() == [6, 9, 9, 6, 3, 0]


def test_shape_of_is_int32_and_not_differentiable() -> None:
    g = og.Graph()
    x = g.placeholder((2, 0, 5), og.bfloat16)
    s = g.shape_of(x)
    assert s.type == og.TensorType((3,), og.int32) and not SHAPE_OF.differentiable
    assert g.run({x: torch.zeros(2, 0, 5, dtype=torch.bfloat16)}, [s], device=CPU)[0].tolist() == [2, 0, 5]


def test_space_depth_round_trip_and_pixel_shuffle() -> None:
    g = og.Graph()
    x = g.placeholder((2, 3, 4, 6))
    v = torch.randn(2, 3, 4, 6)
    s2d = g.space_to_depth(x, 2)
    outs = [g.depth_to_space(s2d, 2), g.space_to_depth(x, 2, pixel_shuffle=True),
            g.depth_to_space(g.space_to_depth(x, 2, pixel_shuffle=True), 2, pixel_shuffle=True)]
    back, unshuffled, back2 = g.run({x: v}, outs, device=CPU)
    torch.testing.assert_close(back, v, rtol=0, atol=0)
    torch.testing.assert_close(back2, v, rtol=0, atol=0)
    torch.testing.assert_close(unshuffled, torch.nn.functional.pixel_unshuffle(v, 2), rtol=0, atol=0)


def test_padding_mode_accepts_names_and_mpsgraph_values() -> None:
    g = og.Graph()
    x = g.placeholder((3,), og.int64)
    outs = [g.pad(x, m, [1], [1]) for m in ("clamp_to_edge", "CLAMP_TO_EDGE", 3, PaddingMode.CLAMP_TO_EDGE)]
    for r in g.run({x: torch.tensor([1, 2, 3])}, outs, device=CPU):
        assert r.tolist() == [1, 1, 2, 3, 3]


def test_random_slices_match_numpy() -> None:
    rng = np.random.default_rng(0)
    g = og.Graph()
    x = g.placeholder((5, 4, 3), og.int64)
    value = torch.arange(60).reshape(5, 4, 3)
    keys, outs = [], []
    for _ in range(300):
        key = []
        for d in value.shape:
            if rng.random() < 0.2:
                key.append(int(rng.integers(-d, d)))
                continue
            start, stop = (None if rng.random() < 0.3 else int(rng.integers(-2 * d, 2 * d)) for _ in range(2))
            step = None if rng.random() < 0.3 else int(rng.choice([-3, -2, -1, 1, 2, 3]))
            key.append(slice(start, stop, step))
        keys.append(tuple(key))
        outs.append(x[tuple(key)])
    for key, got in zip(keys, g.run({x: value}, outs, device=CPU), strict=True):
        np.testing.assert_array_equal(got.numpy(), value.numpy()[key], err_msg=repr(key))


@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("symmetric", "symmetric"),
                                          ("clamp_to_edge", "edge"), ("periodic", "wrap")])
def test_pad_any_size_matches_numpy(mode: str, np_mode: str) -> None:
    g = og.Graph()
    outs, cases = [], []
    for d in (1, 2, 3, 5):
        x = g.placeholder((d,), og.int64)
        for left, right in ((0, 9), (9, 0), (d, d + 1), (2 * d + 1, 3 * d)):
            outs.append(g.pad(x, mode, [left], [right]))
            cases.append((x, d, left, right))
    feeds = {x: torch.arange(d) * 10 for x, d, _, _ in cases}
    for (_, d, left, right), got in zip(cases, g.run(feeds, outs, device=CPU), strict=True):
        want = np.pad(np.arange(d) * 10, (left, right), mode=np_mode)
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{mode} d={d} pad=({left}, {right})")
