"""Converters of shape/view/indexing ops and of reductions (``converters/shape.py``, ``converters/reduce.py``).

Two layers: ``check_op`` builds a one-node FX graph calling an ATen overload (so ops that core-ATen decomposition
removes, and every overload and corner case, are reached directly) and compares the executable with the ATen op
itself; the ``compiled`` tests go through ``torch.compile(backend="opgraph")`` (AOTAutograd, core-ATen
decompositions), forward and backward. Ops converted elsewhere (elementwise, creation) may fall back here
(``OTHERS``); ops of these two modules may not.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import pytest
import torch

from opgraph.frontends.torch import TorchOptions, compile_fx, recording
from tests.frontends.torch_harness import check_inference, check_training

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
aten = torch.ops.aten
END = 9223372036854775807  # ATen's "to the end"

# Elementwise and creation ops that AOTAutograd's graphs of these programs also hold (converted by other modules).
OTHERS = ("aten::full.default", "aten::arange.start_step", "aten::arange.default", "aten::eq.Scalar",
          "aten::eq.Tensor", "aten::ne.Scalar", "aten::gt.Scalar", "aten::where.self", "aten::scalar_tensor.default",
          "aten::remainder.Scalar", "aten::fmod.Scalar", "aten::logical_not.default", "aten::logical_and.default",
          "aten::logical_or.default", "aten::bitwise_not.default", "aten::bitwise_and.Tensor",
          "aten::isnan.default", "aten::abs.default", "aten::sqrt.default", "aten::exp.default", "aten::log.default",
          "aten::div.Tensor", "aten::div.Scalar", "aten::mul.Scalar", "aten::sub.Scalar",
          "aten::full_like.default", "aten::zeros_like.default", "aten::new_zeros.default", "aten::pow.Tensor_Scalar",
          "aten::sign.default", "aten::sgn.default", "aten::_to_copy.default", "aten::neg.default",
          "aten::masked_fill.Scalar", "aten::lt.Scalar", "aten::ge.Scalar", "aten::le.Scalar", "aten::tanh.default",
          "aten::sigmoid.default", "aten::exp2.default", "aten::reciprocal.default", "aten::rsqrt.default")


def _t(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, seed: int = 0, low: int = -4,
       high: int = 5) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=dtype)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    return torch.randint(low, high, shape, generator=gen, dtype=dtype)


def _perm_index(shape: tuple[int, ...], dim: int, n: int, seed: int = 0) -> torch.Tensor:
    """Distinct indices along ``dim`` (a scatter with duplicates has no defined winner)."""
    gen = torch.Generator().manual_seed(seed)
    keys = torch.rand(*shape[:dim], n, *shape[dim + 1:], generator=gen)
    return keys.argsort(dim=dim).narrow(dim, 0, shape[dim])


# ---- one ATen node, compiled alone ---------------------------------------------------------------------
def _one_node_graph(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Any], Any]:
    g = torch.fx.Graph()
    inputs: list[torch.Tensor] = []

    def lift(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            node = g.placeholder(f"in{len(inputs)}")
            node.meta["val"] = v
            inputs.append(v)
            return node
        if isinstance(v, (list, tuple)):
            return type(v)(lift(u) for u in v)
        return v

    fx_args, fx_kwargs = lift(args), {k: lift(v) for k, v in kwargs.items()}
    want = target(*args, **kwargs)
    node = g.call_function(target, fx_args, fx_kwargs)
    node.meta["val"] = want
    if isinstance(want, (tuple, list)):
        outs = []
        for i, w in enumerate(want):
            item = g.call_function(operator.getitem, (node, i))
            item.meta["val"] = w
            outs.append(item)
        g.output(tuple(outs))
    else:
        g.output(node)
    return torch.fx.GraphModule(torch.nn.Module(), g), inputs, want


def check_op(target: Any, *args: Any, fallback: str | None = None, rtol: float = 1e-5, atol: float = 1e-6,
             **kwargs: Any) -> None:
    """``target(*args, **kwargs)`` through its converter equals ATen's; ``fallback``: it must fall back instead,
    with a reason containing that text."""
    gm, inputs, want = _one_node_graph(target, args, kwargs)
    with recording() as reports:
        run = compile_fx(gm, inputs, TorchOptions(warn_fallbacks=False))
    got = run(list(inputs))
    wants = list(want) if isinstance(want, (tuple, list)) else [want]
    torch.testing.assert_close(got, wants, rtol=rtol, atol=atol, equal_nan=True)
    (report,) = reports
    if fallback is None:
        assert not report.fallbacks, report.reasons
    else:
        assert sum(report.fallbacks.values()) == 1, report.fallbacks
        assert fallback in next(iter(report.reasons.values())), report.reasons


X = _t((2, 3, 4))
Z = torch.arange(30.0).reshape(5, 6)
ONES = _t((1, 3, 1, 2))
Case = tuple[Any, tuple[Any, ...], dict[str, Any]]


def _case(target: Any, *args: Any, **kwargs: Any) -> Case:
    return target, args, kwargs


def _ids(cases: list[Case]) -> list[str]:
    return [f"{i}-{c[0]}" for i, c in enumerate(cases)]


VIEWS = [
    _case(aten.expand.default, _t((3, 1)), [2, 3, 4]),
    _case(aten.expand.default, _t((3, 1)), [2, -1, 4]),
    _case(aten.expand.default, X, [-1, -1, -1]),
    _case(aten.expand.default, torch.tensor(2.0), [3, 2]),
    _case(aten.expand_copy.default, _t((1, 4), torch.int64), [3, 4]),
    _case(aten.unsqueeze.default, X, 0),
    _case(aten.unsqueeze.default, X, -1),
    _case(aten.unsqueeze.default, X, 2),
    _case(aten.unsqueeze.default, torch.tensor(True), 0),
    _case(aten.unsqueeze_copy.default, X, -2),
    _case(aten.squeeze.default, ONES),
    _case(aten.squeeze.default, torch.tensor(1.5)),
    _case(aten.squeeze.dim, ONES, 0),
    _case(aten.squeeze.dim, ONES, 1),  # size 3: kept
    _case(aten.squeeze.dim, ONES, -2),
    _case(aten.squeeze.dim, torch.tensor(1.5), -1),
    _case(aten.squeeze.dims, ONES, [0, 1, 2]),
    _case(aten.squeeze.dims, ONES, [1]),
    _case(aten.squeeze.dims, ONES, []),
    _case(aten.squeeze_copy.dims, ONES, [-2]),
    _case(aten.squeeze_copy.default, ONES),
    _case(aten.squeeze_copy.dim, ONES, 0),
    _case(aten.t.default, Z),
    _case(aten.t.default, _t((4,))),
    _case(aten.t_copy.default, Z),
    _case(aten.transpose.int, X, 0, -1),
    _case(aten.transpose.int, X, 1, 1),
    _case(aten.transpose_copy.int, X, 2, 1),
    _case(aten.permute.default, X, [2, 0, 1]),
    _case(aten.permute_copy.default, X, [-1, 0, 1]),
    _case(aten.view_copy.default, X, [6, -1]),
    _case(aten.alias_copy.default, X),
    _case(aten.copy.default, X, _t((3, 1), torch.int64)),
    _case(aten.copy.default, _t((2, 3), torch.bool), _t((2, 3), seed=3)),
    _case(aten.unfold.default, X, 2, 2, 1),
    _case(aten.unfold.default, Z, 1, 3, 2),
    _case(aten.unfold.default, X, -1, 4, 4),
    _case(aten.unfold_copy.default, Z, 0, 1, 3),
]


@pytest.mark.parametrize(("target", "args", "kwargs"), VIEWS, ids=_ids(VIEWS))
def test_views(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    check_op(target, *args, **kwargs)


SLICES = [
    _case(aten.slice.Tensor, Z, 0, 1, 3),
    _case(aten.slice.Tensor, Z, 1, -2, END),
    _case(aten.slice.Tensor, Z, 1, None, None, 2),
    _case(aten.slice.Tensor, Z, 0, -100, 100),
    _case(aten.slice.Tensor, Z, 1, 4, 2),  # empty: end before start
    _case(aten.slice.Tensor, Z, 0, 5, 10),  # empty: past the end
    _case(aten.slice.Tensor, Z, 1, 1, -1, 3),
    _case(aten.slice.Tensor, Z, -1, 0, END, 4),
    _case(aten.slice.Tensor, Z, 0, -END, -4),
    _case(aten.slice.Tensor, Z),
    _case(aten.slice.Tensor, _t((7,), torch.int64), 0, 2, END, 5),
    _case(aten.slice_copy.Tensor, Z, 1, 1, 5, 2),
    _case(aten.select.int, Z, 0, -1),
    _case(aten.select.int, Z, 1, 2),
    _case(aten.select.int, _t((3,), torch.bool), 0, 1),
    _case(aten.select_copy.int, X, -1, 0),
    _case(aten.narrow.default, Z, 1, -3, 2),
    _case(aten.narrow.default, Z, 0, 0, 5),
    _case(aten.narrow.default, Z, 0, 2, 0),
    _case(aten.narrow_copy.default, Z, 1, 1, 4),
    _case(aten.slice_scatter.default, Z, _t((5, 2)), 1, 1, 5, 2),
    _case(aten.slice_scatter.default, Z, _t((2, 6)), 0, -2),
    _case(aten.slice_scatter.default, Z, _t((5, 6)), 0),
    _case(aten.slice_scatter.default, Z, _t((5, 0)), 1, 4, 2),
    _case(aten.slice_scatter.default, _t((4, 6), torch.int64), _t((4, 2), torch.int64, 1), -1, -2, END),
    _case(aten.select_scatter.default, Z, _t((6,)), 0, -1),
    _case(aten.select_scatter.default, Z, _t((5,)), 1, 2),
    _case(aten.select_scatter.default, _t((2, 3), torch.bool), _t((2,), torch.bool, 3), 1, 0),
]


@pytest.mark.parametrize(("target", "args", "kwargs"), SLICES, ids=_ids(SLICES))
def test_slices(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    check_op(target, *args, **kwargs)


A, B = _t((2, 3)), _t((2, 2), seed=1)
JOINS = [
    _case(aten.cat.default, [A, B], 1),
    _case(aten.cat.default, [A, A, B], -1),
    _case(aten.cat.default, [A, _t((1, 3), seed=2)]),
    _case(aten.cat.default, [A, _t((2, 2), torch.int64)], 1),  # promotes to float32
    _case(aten.cat.default, [_t((2, 2), torch.int32), _t((2, 1), torch.int64)], 1),
    _case(aten.cat.default, [A, torch.empty(0), A], 0),  # the legacy empty 1-D tensor is skipped
    _case(aten.cat.default, [A], 1),
    _case(aten.cat.default, [_t((2, 0)), A], 1),
    _case(aten.stack.default, [A, A * 2]),
    _case(aten.stack.default, [A, A, A], -1),
    _case(aten.stack.default, [A, _t((2, 3), torch.int64)], 1),
    _case(aten.split.Tensor, Z, 2),  # 2, 2, 1
    _case(aten.split.Tensor, Z, 6, 1),
    _case(aten.split.Tensor, Z, 4, -1),
    _case(aten.split.Tensor, Z, 10),
    _case(aten.split_copy.Tensor, Z, 3, 1),
    _case(aten.unsafe_split.Tensor, Z, 3),
    _case(aten.split_with_sizes.default, Z, [1, 0, 4]),
    _case(aten.split_with_sizes.default, Z, [6], 1),
    _case(aten.split_with_sizes.default, X, [1, 3], -1),
    _case(aten.split_with_sizes_copy.default, Z, [2, 4], 1),
    _case(aten.unsafe_split_with_sizes.default, Z, [3, 2]),
]


@pytest.mark.parametrize(("target", "args", "kwargs"), JOINS, ids=_ids(JOINS))
def test_joins_and_splits(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    check_op(target, *args, **kwargs)


XI = _t((2, 3, 4), torch.int64)
XB = _t((2, 3, 4), torch.bool)
REORDERS = [
    _case(aten.flip.default, X, [0, 2]),
    _case(aten.flip.default, X, [-1]),
    _case(aten.flip.default, XB, []),
    _case(aten.repeat.default, X, [1, 2, 1]),
    _case(aten.repeat.default, XI, [2, 1, 1, 3]),
    _case(aten.repeat.default, X, [1, 0, 1]),
    _case(aten.repeat.default, torch.tensor(3.0), [3]),
    _case(aten.repeat.default, X, [1, 1, 1]),
    _case(aten.roll.default, X, [1], [2]),
    _case(aten.roll.default, XI, [-1, 2], [0, 1]),
    _case(aten.roll.default, X, [5]),  # of the flattened tensor
    _case(aten.roll.default, X, [7], [1]),
    _case(aten.roll.default, X, [0], [0]),
    _case(aten.roll.default, XB, [-9], [-1]),
    _case(aten.constant_pad_nd.default, X, [1, 2]),
    _case(aten.constant_pad_nd.default, X, [1, 1, 2, 0], 2.5),
    _case(aten.constant_pad_nd.default, X, [-1, 2, 0, -1]),
    _case(aten.constant_pad_nd.default, X, [-1, -2, 1, 1, 1, 0], -1.0),
    _case(aten.constant_pad_nd.default, XI, [1, 1], 7),
    _case(aten.constant_pad_nd.default, XB, [1, 0], 1),
    _case(aten.constant_pad_nd.default, XB, [0, 2], 3),
    _case(aten.constant_pad_nd.default, X, [0, 0]),
    _case(aten.constant_pad_nd.default, X, [1, 0], float("-inf")),
]


@pytest.mark.parametrize(("target", "args", "kwargs"), REORDERS, ids=_ids(REORDERS))
def test_reorders_and_pads(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    check_op(target, *args, **kwargs)


I2 = torch.tensor([2, 0, 2])
X4 = _t((2, 3, 4, 5), seed=3)
GATHERS = [
    _case(aten.index_select.default, X, 1, I2),
    _case(aten.index_select.default, X, -1, torch.tensor([3, 1], dtype=torch.int32)),
    _case(aten.index_select.default, XI, 0, torch.tensor(1)),
    _case(aten.index_select.default, X, 2, torch.zeros(0, dtype=torch.int64)),
    _case(aten.gather.default, X, 2, _t((2, 3, 5), torch.int64, 1, 0, 4)),
    _case(aten.gather.default, X, 1, _t((1, 2, 4), torch.int64, 2, 0, 3)),  # an index smaller than the input
    _case(aten.gather.default, XB, -3, _t((2, 3, 4), torch.int64, 3, 0, 2)),
    _case(aten.index.Tensor, X, [torch.tensor([1, 0, 1])]),
    _case(aten.index.Tensor, X, [None, torch.tensor([[2, 0], [1, -1]])]),
    _case(aten.index.Tensor, X, [torch.tensor([1, 0]), torch.tensor([2, -3])]),
    _case(aten.index.Tensor, X, [None, torch.tensor([[2], [0]]), torch.tensor([3, 1, 0])]),  # broadcast, adjacent
    _case(aten.index.Tensor, X, [torch.tensor([1, 0]), None, torch.tensor([3, 2])]),  # separated: batch first
    _case(aten.index.Tensor, XI, [torch.tensor([1]), torch.tensor([0], dtype=torch.int32), torch.tensor([3])]),
    _case(aten.index.Tensor, X4, [None, torch.tensor([2, 0]), None, torch.tensor([[4], [1]])]),  # separated
    _case(aten._unsafe_index.Tensor, X, [None, None, torch.tensor([0, 3, 3])]),
    _case(aten.index_put.default, X, [torch.tensor([1, 0])], _t((2, 3, 4), seed=4)),
    _case(aten.index_put.default, X, [None, torch.tensor([2, 0, 2, 2])], _t((4,), seed=5), True),  # duplicates add
    _case(aten.index_put.default, X, [torch.tensor([1, 0]), None, torch.tensor([3, 2])], _t((2, 3), seed=6)),
    _case(aten.index_put.default, X, [None, torch.tensor([[2], [0]]), torch.tensor([3, 1])], torch.tensor(9.0)),
    _case(aten.index_put.default, XI, [torch.tensor([1]), torch.tensor([1]), torch.tensor([-1])],
          torch.tensor(7), True),
    _case(aten.index_put.default, X4, [None, torch.tensor([2, 0]), None, torch.tensor([4, 1])], _t((2, 2, 4), seed=7)),
    _case(aten._unsafe_index_put.default, X, [None, torch.tensor([1])], _t((2, 1, 4), seed=7), True),
    _case(aten.scatter.src, X, 2, _perm_index((2, 3, 4), 2, 4), _t((2, 3, 4), seed=8)),
    _case(aten.scatter.src, X, 1, _perm_index((2, 2, 4), 1, 3, 1), _t((2, 3, 5), seed=9)),  # smaller index
    _case(aten.scatter.value, X, 0, _perm_index((2, 3, 4), 0, 2, 2), 3.0),
    _case(aten.scatter.value, XI, 2, _perm_index((1, 3, 2), 2, 4, 3), -5),
    _case(aten.scatter_add.default, X, 1, _t((2, 5, 4), torch.int64, 5, 0, 3), _t((2, 5, 4), seed=10)),
    _case(aten.scatter_add.default, XI, 0, _t((3, 2, 4), torch.int64, 6, 0, 2), _t((3, 3, 4), torch.int64, 11)),
    _case(aten.scatter_reduce.two, X, 1, _t((2, 5, 4), torch.int64, 7, 0, 3), _t((2, 5, 4), seed=12), "amax"),
    _case(aten.scatter_reduce.two, X, 2, _t((2, 3, 6), torch.int64, 8, 0, 4), _t((2, 3, 6), seed=13), "prod"),
    _case(aten.scatter_reduce.two, XI, 0, _t((2, 3, 4), torch.int64, 9, 0, 2), XI, "sum"),
    _case(aten.scatter_reduce.two, X, 0, _t((2, 3, 4), torch.int64, 9, 0, 2), X, "amin"),
]


@pytest.mark.parametrize(("target", "args", "kwargs"), GATHERS, ids=_ids(GATHERS))
def test_gathers_and_scatters(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    check_op(target, *args, **kwargs)


UNSUPPORTED = [
    (_case(aten.as_strided.default, X, [2, 3], [12, 4]), "storage"),
    (_case(aten.index.Tensor, X, [torch.tensor([True, False])]), "mask"),
    (_case(aten.scatter_reduce.two, X, 1, _t((2, 3, 4), torch.int64, 7, 0, 3), X, "mean"), "scatter_reduce"),
    (_case(aten.scatter_reduce.two, X, 1, _t((2, 3, 4), torch.int64, 7, 0, 3), X, "sum", include_self=False),
     "include_self"),
    (_case(aten.constant_pad_nd.default, XI, [1, 1], 2.5), "integer"),
    (_case(aten.index_put.default, X, [torch.tensor([True, False])], torch.tensor(1.0)), "mask"),
    (_case(aten.var.correction, XI.float().to(torch.complex64), [1]), "complex64"),
]


@pytest.mark.parametrize(("case", "reason"), UNSUPPORTED, ids=[c[0][0].__name__ for c in UNSUPPORTED])
def test_unsupported_calls_fall_back_with_a_reason(case: Case, reason: str) -> None:
    target, args, kwargs = case
    check_op(target, *args, fallback=reason, **kwargs)


# ---- reductions, one node ------------------------------------------------------------------------------
DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool]


def _reduction_cases(dt: torch.dtype, keep: bool) -> list[Case]:
    x = _t((3, 4, 5), dt, seed=20)
    cases = [
        _case(aten.sum.default, x),
        _case(aten.sum.dim_IntList, x, [1], keep),
        _case(aten.sum.dim_IntList, x, [-1, 0], keep),
        _case(aten.sum.dim_IntList, x, [], keep),  # an empty list: every axis
        _case(aten.sum.dim_IntList, x, None, keep),
        _case(aten.sum.dim_IntList, x, [2], keep, dtype=torch.float64),
        _case(aten.prod.default, x),
        _case(aten.prod.dim_int, x, 1, keep),
        _case(aten.prod.dim_int, x, -1, keep, dtype=torch.float32),
        _case(aten.amax.default, x, [1], keep),
        _case(aten.amax.default, x, [], keep),
        _case(aten.amin.default, x, [0, 2], keep),
        _case(aten.max.default, x),
        _case(aten.min.default, x),
        _case(aten.max.dim, x, 1, keep),
        _case(aten.min.dim, x, -1, keep),
        _case(aten.any.default, x),
        _case(aten.any.dim, x, 1, keep),
        _case(aten.any.dims, x, [0, 2], keep),
        _case(aten.all.default, x),
        _case(aten.all.dim, x, -1, keep),
        _case(aten.all.dims, x, None, keep),
        _case(aten.any.dims, x, [], keep),  # reduces nothing (unlike sum's empty list)
        _case(aten.all.dims, x, [], keep),
        _case(aten.cumsum.default, x, 1),
        _case(aten.cumsum.default, x, -1, dtype=torch.float64),
        _case(aten.cumprod.default, x, 0),
    ]
    if dt is not torch.bool:  # ATen's argmax refuses bool
        cases += [
            _case(aten.argmax.default, x),
            _case(aten.argmax.default, x, 1, keep),
            _case(aten.argmax.default, x, None, keep),
            _case(aten.argmin.default, x, -1, keep),
            _case(aten.argmin.default, x, None, keep),
        ]
    if dt.is_floating_point:
        cases += [
            _case(aten.mean.default, x),
            _case(aten.mean.dim, x, [1], keep),
            _case(aten.mean.dim, x, [0, -1], keep),
            _case(aten.mean.dim, x, [], keep),
            _case(aten.mean.dim, x, [2], keep, dtype=torch.float64),
        _case(aten.var.correction, x, [], keepdim=keep),
        _case(aten.linalg_vector_norm.default, x, 2, [], keep),
            _case(aten.logsumexp.default, x, [1], keep),
            _case(aten.logsumexp.default, x, [0, 2], keep),
        ]
    else:
        cases += [_case(aten.mean.dim, x, [1], keep, dtype=torch.float32),
                  _case(aten.logsumexp.default, x, [1], keep)]  # in the default float dtype
    return cases


@pytest.mark.parametrize("keep", [False, True], ids=["dropdims", "keepdims"])
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_reductions(dt: torch.dtype, keep: bool) -> None:
    for target, args, kwargs in _reduction_cases(dt, keep):
        check_op(target, *args, **kwargs, rtol=1e-5 if dt is not torch.float64 else 1e-12)


def test_reductions_of_scalars_and_empty_axes() -> None:
    s = torch.tensor(2.5)
    for target, args in [(aten.sum.dim_IntList, (s, [0])), (aten.amax.default, (s, [-1], True)),
                         (aten.max.dim, (s, 0)), (aten.argmax.default, (s,)), (aten.argmin.default, (s, 0, True)),
                         (aten.cumsum.default, (s, 0)), (aten.mean.dim, (s, [])), (aten.any.dim, (s, 0))]:
        check_op(target, *args)
    e = torch.zeros(0, 3)
    for target, args in [(aten.sum.dim_IntList, (e, [0])), (aten.prod.dim_int, (e, 0)), (aten.mean.dim, (e, [0])),
                         (aten.any.dim, (e, 0)), (aten.all.dims, (e, [0], True)), (aten.cumsum.default, (e, 0)),
                         (aten.amax.default, (e, [1])), (aten.max.dim, (e, 1)), (aten.argmin.default, (e, 1, True))]:
        check_op(target, *args)


def test_nan_and_ties_follow_aten() -> None:
    nan = float("nan")
    x = torch.tensor([[1.0, nan, 3.0, nan], [2.0, 5.0, 5.0, 1.0], [nan, nan, nan, nan], [1.0, 1.0, -1.0, -1.0]])
    for target, args in [(aten.amax.default, (x, [1])), (aten.amin.default, (x, [1])), (aten.max.dim, (x, 1)),
                         (aten.min.dim, (x, 1)), (aten.argmax.default, (x, 1)), (aten.argmin.default, (x, 1)),
                         (aten.max.default, (x,)), (aten.argmax.default, (x,)), (aten.any.dim, (x, 1)),
                         (aten.logsumexp.default, (x, [1])), (aten.cumsum.default, (x, 1))]:
        check_op(target, *args)
    inf = float("inf")
    y = torch.tensor([[inf, 1.0], [-inf, -inf], [inf, -inf]])
    check_op(aten.logsumexp.default, y, [1])
    check_op(aten.logsumexp.default, y, [1], True)


def test_integer_sums_widen_and_wrap_as_aten() -> None:
    big = torch.full((4, 3), 2**31 - 5, dtype=torch.int32)
    check_op(aten.sum.dim_IntList, big, [0])  # int64: no overflow
    check_op(aten.cumsum.default, big, 0)
    check_op(aten.prod.dim_int, big, 0)
    check_op(aten.sum.dim_IntList, big.long() * 2**31, [0], dtype=torch.int32)  # cast first, then wrap in int32
    check_op(aten.sum.default, torch.tensor([2**62, 2**62, 2**62]))  # int64 wraps
    check_op(aten.sum.dim_IntList, _t((3, 4), torch.uint8, low=0, high=255), [1])
    check_op(aten.any.dim, _t((3, 4), torch.uint8, low=0, high=3), 1)  # uint8 stays uint8
    check_op(aten.all.default, _t((3, 4), torch.uint8, low=1, high=3))


@pytest.mark.parametrize("correction", [0, 1, 2, 1.5, None])
def test_variance_corrections(correction: Any) -> None:
    x = _t((3, 4, 5), torch.float64, seed=30)
    for dims, keep in [([1], False), ([0, 2], True), (None, False)]:
        check_op(aten.var.correction, x, dims, correction=correction, keepdim=keep, rtol=1e-12)
        check_op(aten.std.correction, x, dims, correction=correction, keepdim=keep, rtol=1e-12)
    check_op(aten.var_mean.correction, x.float(), [2], correction=correction)
    check_op(aten.std_mean.correction, x.float(), [0, 1], correction=correction, keepdim=True)


def test_variance_with_too_few_elements_is_inf_or_nan() -> None:
    x = torch.tensor([[1.0, 2.0], [3.0, 3.0]])
    check_op(aten.var.correction, x, [1], correction=2)  # (inf, nan)
    check_op(aten.var.correction, x[:, :1], [1], correction=1)  # nan
    check_op(aten.std.correction, torch.tensor(4.0), None, correction=1)


@pytest.mark.parametrize("order", [2, 1, 0, 3, 0.5, -1, math.inf, -math.inf])
def test_vector_norms(order: float) -> None:
    x = _t((3, 4), seed=40)
    x[0, 1] = 0.0
    check_op(aten.linalg_vector_norm.default, x, order)
    check_op(aten.linalg_vector_norm.default, x, order, [1], True)
    check_op(aten.linalg_vector_norm.default, x, order, [0], dtype=torch.float64)


# ---- through torch.compile -----------------------------------------------------------------------------
def _views(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x[:, 1:, ::2]
    return (x.expand(3, 2, 3, 4), x.unsqueeze(1), x[:, :1].squeeze(), x[:, :1].squeeze(1), x.transpose(0, 2),
            x.movedim(0, 2), x.flatten(1), x.unflatten(2, (2, 2)), x.unfold(2, 2, 1), y, x[1], x[:, -1, -2:],
            x[:, 5:], x.narrow(2, 1, 2), torch.cat([x, y.flip(1).repeat(1, 1, 2)], 1), torch.stack([x, x], -1),
            *x.split(3, 2), *x.chunk(2, -1), *x.unbind(1), torch.nn.functional.pad(x, (1, 2, -1, 0), value=2))


@pytest.mark.parametrize("dt", [torch.float32, torch.int64, torch.bool], ids=str)
def test_compiled_views(dt: torch.dtype) -> None:
    check_inference(_views, _t((2, 3, 4), dt), allow=OTHERS)


def _indexing(x: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.clone()
    y[i, :, j[:2]] = 7
    z = x.clone()
    z[:, j[:3]] += 1
    w = x.clone()
    w[:, 1:3] = 5
    return (x.index_select(1, j[:2]), x.gather(2, i.view(2, 1, 1).expand(2, 3, 2)), x[i], x[:, j[:3]], x[i, :, j[2:]],
            x[i, j[:2]], x[:, j[1:3], i], y, z, w, x.scatter(2, j[:2].view(1, 1, 2).expand(2, 3, 2), 3),
            x.scatter_add(1, i.view(2, 1, 1).expand(2, 1, 4), x[:, :1]), x.flip(0, 2), x.repeat(1, 2, 1, 1))


@pytest.mark.parametrize("dt", [torch.float32, torch.int64], ids=str)
def test_compiled_indexing(dt: torch.dtype) -> None:
    check_inference(_indexing, _t((2, 3, 4), dt), torch.tensor([1, 0]), torch.tensor([2, 0, 1, 0]), allow=OTHERS)


def _reductions(x: torch.Tensor, keep: bool) -> tuple[torch.Tensor, ...]:
    out = (x.sum(), x.sum(1, keepdim=keep), x.sum((0, 2), keepdim=keep), x.prod(1, keepdim=keep), x.amax(1, keep),
           x.amin((0, -1), keep), *x.max(1, keep), *x.min(-1, keep), x.max(), x.min(), x.any(1, keep), x.all(),
           x.cumsum(2), x.sum(-1, keep, dtype=torch.float64))
    if x.dtype is not torch.bool:  # ATen's argmax refuses bool
        out += (x.argmax(1, keep), x.argmin(keepdim=keep))
    if x.is_floating_point():
        out += (x.mean(), x.mean((1, 2), keep), x.var(1, keepdim=keep), x.std((0, 2), keepdim=keep),
                x.var(None, correction=0), x.norm(), x.norm(dim=1, keepdim=keep))
    return out


@pytest.mark.parametrize("keep", [False, True], ids=["dropdims", "keepdims"])
@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.int64, torch.bool], ids=str)
def test_compiled_reductions(dt: torch.dtype, keep: bool) -> None:
    check_inference(lambda x: _reductions(x, keep), _t((3, 4, 5), dt, seed=50), allow=OTHERS)


class _Slicer(torch.nn.Module):
    """Backward graphs with slice_scatter, select, expand, cat, split, pad's negative padding, permute."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(_t((3, 6, 4), seed=60))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * self.w
        a, b = h.split([2, 4], 1)
        parts = [a[:, :, ::2].sum(2), b[:, 1:-1].mean(1).unsqueeze(1).expand(3, 2, 4).sum(-1), h[:, 3], h[1:2, :, 1]]
        c = torch.cat([p.reshape(3, -1) if p.shape[0] == 3 else p.expand(3, -1) for p in parts], 1)
        d = torch.nn.functional.pad(c, (1, -2)).transpose(0, 1)
        return torch.stack([d, d.flip(0)], 0).narrow(1, 1, 5)


class _Reducer(torch.nn.Module):
    """Backward graphs of amax/max.dim/var/prod/logsumexp/norm/cumsum."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(_t((4, 5), seed=61))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ self.w
        return (h.amax(1) + h.max(0).values.sum() + h.var(1) + h.std(0).sum() + h.prod(1) + h.logsumexp(1)
                + h.norm(dim=1) + h.cumsum(1)[:, -1] + h.amin(1, keepdim=True).squeeze(1) + h.mean())


class _Indexer(torch.nn.Module):
    """Backward graphs of gather/index/index_select/repeat/flip (index_put, scatter_add)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(_t((4, 6), seed=62))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ self.w
        i = torch.tensor([5, 0, 5, 2])
        g = h.gather(1, torch.tensor([[0, 3], [1, 1], [5, 2]]))
        return (h[:, i].sum(1) + h.index_select(1, i[:2]).sum(1) + g.sum(1) + h.repeat(1, 2).sum(1)
                + h.flip(1)[:, :2].sum(1) + h[torch.tensor([2, 0, 1]), torch.tensor([1, 1, 4])])


@pytest.mark.parametrize("model", [_Slicer, _Reducer, _Indexer], ids=lambda m: m.__name__)
def test_training(model: Callable[[], torch.nn.Module]) -> None:
    shapes = {_Slicer: (3, 6, 4), _Reducer: (3, 4), _Indexer: (3, 4)}
    check_training(model(), _t(shapes[model], seed=70), allow=OTHERS, rtol=1e-4, atol=1e-5)  # type: ignore[index]


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_reductions(dt: torch.dtype) -> None:
    x = _t((3, 8), dt, seed=80)
    for target, args in [(aten.sum.dim_IntList, (x, [1])), (aten.mean.dim, (x, [0], True)),
                         (aten.amax.default, (x, [1])), (aten.max.dim, (x, 0)), (aten.argmin.default, (x, 1)),
                         (aten.cumsum.default, (x, 1)), (aten.var.correction, (x, [1])),
                         (aten.sum.dim_IntList, (x, [1], False))]:
        check_op(target, *args, rtol=1e-2, atol=1e-2)
    check_op(aten.sum.dim_IntList, x, [1], dtype=torch.float32)


# ---- dynamic dims: converters called directly on a graph with a dynamic placeholder ---------------------
def _convert(target: Any, shape: tuple[int | None, ...], *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    import opgraph as og
    from opgraph.frontends.torch.registry import ConvertContext, lookup

    g = og.Graph()
    x = g.placeholder(shape, og.float32)
    converter = lookup(target)
    assert converter is not None
    return g, (x, converter(ConvertContext(g, []), x, *args, **kwargs))


@pytest.mark.parametrize("bounds", [(1, END, 1), (-3, END, 2), (None, -1, 1), (-100, 2, 3), (4, 2, 1), (-2, None, 1)])
def test_slices_of_dynamic_dims_clamp_at_run_time(bounds: tuple[Any, Any, int]) -> None:
    start, end, step = bounds
    g, (x, y) = _convert(aten.slice.Tensor, (None, 3), 0, start, end, step)
    for n in (0, 2, 7):
        data = torch.arange(n * 3.0).reshape(n, 3)
        want = data[slice(start, None if end == END else end, step)]
        torch.testing.assert_close(g.run({x: data}, [y])[0], want)


def test_dynamic_dims_that_need_a_static_size_are_unsupported() -> None:
    from opgraph.frontends.torch.registry import Unsupported

    for target, args, kwargs in [(aten.var.correction, ([0],), {"correction": 1}), (aten.squeeze.dim, (0,), {}),
                                 (aten.split.Tensor, (2,), {}), (aten.roll.default, ([1], [0]), {}),
                                 (aten.narrow.default, (0, -1, 1), {}), (aten.expand.default, ([-1, 3],), {})]:
        with pytest.raises(Unsupported):
            _convert(target, (None, 3), *args, **kwargs)
    g, (x, v) = _convert(aten.var.correction, (None, 3), [1], correction=1)  # the reduced axis is static
    data = _t((5, 3), seed=81)
    torch.testing.assert_close(g.run({x: data}, [v])[0], data.var(1))


@pytest.mark.parametrize("dim,index", [(1, -2), (0, 0), (2, 4)])
def test_select_backward_is_a_zero_padding(dim: int, index: int) -> None:
    """select's gradient (kept whole by the backend where no kernels are generated) against PyTorch's."""
    from tests.frontends.torch_harness import check_aten

    sizes = [3, 4, 5]
    grad = torch.randn(*[d for k, d in enumerate(sizes) if k != dim])
    check_aten(lambda g: torch.ops.aten.select_backward(g, sizes, dim, index), grad,
               op=torch.ops.aten.select_backward.default)


def test_select_backward_with_dynamic_sizes_needs_only_the_selected_one() -> None:
    """Traced with symbolic shapes (a backward under dynamic=True): the sizes other than the selected dimension's
    are the gradient's own dims, and the padding is computed without them."""
    from opgraph.frontends.torch.registry import Unsupported
    from tests.frontends.torch_harness import check_aten

    grad = torch.randn(4, 5)
    check_aten(lambda g: torch.ops.aten.select_backward(g, [3, g.shape[0], g.shape[1]], 0, 2), grad,
               op=torch.ops.aten.select_backward.default, tracing_mode="symbolic")
    with pytest.raises(Unsupported, match="into sizes"):  # a size that is not the gradient's
        _convert(torch.ops.aten.select_backward.default, (None, 5), [3, 4, 6], 0, 0)


def test_a_split_projections_backward_is_a_concat_not_a_mask_on_the_cpu() -> None:
    """q, k, v taken from one projection with select (as nn.MultiheadAttention's packed weights are): on the CPU the
    gradients are placed by zero padding, not by a masked select of a constant mask, and the padded parts summed are
    one concat (``passes/pad_sum.py``), with eager's values."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    proj = torch.nn.Linear(4, 12)
    twin = torch.nn.Linear(4, 12)
    twin.load_state_dict(proj.state_dict())

    def f(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        q, k, v = m(x).unflatten(-1, (3, 4)).permute(2, 0, 1, 3)
        return (q * k + v).square().sum()

    x = torch.randn(2, 5, 4)
    with recording() as reports:
        torch.compile(lambda x: f(proj, x), backend="opgraph")(x).backward()
    f(twin, x).backward()
    kernels = [k.op for r in reports if r.kind == "backward" for k in r.executable.kernels()]
    assert "concat" in kernels and "pad" not in kernels and "select" not in kernels, kernels
    torch.testing.assert_close(proj.weight.grad, twin.weight.grad, rtol=1e-5, atol=1e-5)
