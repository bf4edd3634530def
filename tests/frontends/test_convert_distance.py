"""Converters of the distance ops (converters/distance.py) against PyTorch's own ``torch.cdist`` / ``F.pdist``:
ATen graphs of ``_cdist_forward`` / ``_pdist_forward`` and their backward traced as they are, the same through
``torch.compile`` in inference and training, both p = 2 formulas of cdist, and the cases that fall back.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import opgraph as og
from opgraph.core.types import TensorType
from opgraph.frontends.torch import CONVERTERS, recording
from opgraph.frontends.torch.registry import ConvertContext, Unsupported, lookup
from tests.frontends.torch_harness import check_aten, check_inference, check_training, fallbacks

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

aten = torch.ops.aten
DTYPES = [torch.float32, torch.float64]
ORDERS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.5, math.inf]
OPS = [aten._cdist_forward.default, aten._cdist_backward.default, aten._pdist_forward.default,
       aten._pdist_backward.default]


def _t(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """Random values with repeats (equal coordinates, equal rows and ties of the largest difference)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-3, 4, shape, generator=g).to(dtype) + torch.randn(shape, generator=g, dtype=dtype) * (
        torch.rand(shape, generator=g) < 0.5).to(dtype)


def test_the_ops_are_registered_here() -> None:
    assert all(CONVERTERS[op].__module__.endswith("converters.distance") for op in OPS)


# ---- forward ops as ATen graphs ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", ORDERS)
def test_cdist_forward_broadcasts_batch_dims(p: float, dtype: torch.dtype) -> None:
    x1, x2 = _t(2, 1, 5, 4, dtype=dtype), _t(3, 6, 4, dtype=dtype, seed=1)
    check_aten(lambda a, b: aten._cdist_forward(a, b, p, None), x1, x2, op=aten._cdist_forward.default)
    check_aten(lambda a, b: aten._cdist_forward(a, b, p, None), x1[0, 0], x2[0], op=aten._cdist_forward.default)
    if p == 2:  # the matmul formula, batch dims broadcast too
        check_aten(lambda a, b: aten._cdist_forward(a, b, p, 1), x1, x2, op=aten._cdist_forward.default, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", ORDERS)
def test_pdist_forward(p: float, dtype: torch.dtype) -> None:
    x = _t(7, 3, dtype=dtype, seed=2)
    x[4] = x[1]  # a zero distance
    check_aten(lambda a: aten._pdist_forward(a, p), x, op=aten._pdist_forward.default)


def _near_rows(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Large coordinates with rows 1e-3 apart: the matmul formula cancels to (clamped) 0, the direct one not."""
    g = torch.Generator().manual_seed(3)
    x1 = torch.randn(30, 8, generator=g, dtype=dtype) * 100 + 50
    x2 = torch.randn(7, 8, generator=g, dtype=dtype) * 100 + 50
    x2[:3] = x1[:3] + 1e-3
    return x1, x2


@pytest.mark.parametrize("mode", [None, 0, 1, 2])
@pytest.mark.parametrize("rows", [30, 5])
def test_cdist_p2_takes_atens_formula(mode: int | None, rows: int) -> None:
    """Matmul formula for mode 1, or mode 0/None with more than 25 rows on a side; the direct one otherwise."""
    x1, x2 = _near_rows(torch.float32)
    mm = mode == 1 or (mode in (None, 0) and rows > 25)
    for a, b in ((x1[:rows], x2), (x2, x1[:rows])):  # the many rows on either side
        direct, matmul = (aten._cdist_forward(a, b, 2.0, m) for m in (2, 1))
        assert (direct - matmul).abs().max() > 1e-3  # the case tells the two formulas apart
        want = matmul if mm else direct
        torch.testing.assert_close(aten._cdist_forward(a, b, 2.0, mode), want)
        check_aten(lambda s, t: aten._cdist_forward(s, t, 2.0, mode), a, b, op=aten._cdist_forward.default,
                   want=want, atol=1e-4)


def test_cdist_p2_with_dynamic_rows_picks_the_formula_at_run_time() -> None:
    g = og.Graph()
    x = g.placeholder((None, 8), og.float32)
    y = g.placeholder((7, 8), og.float32)
    converter = lookup(aten._cdist_forward.default)
    assert converter is not None
    d = converter(ConvertContext(g, [TensorType((None, 7), og.float32)]), x, y, 2.0, None)
    x1, x2 = _near_rows(torch.float32)
    for rows in (5, 25, 26, 30):
        got = g.run({x: x1[:rows], y: x2}, [d])[0]
        torch.testing.assert_close(got, torch.cdist(x1[:rows], x2), atol=1e-4, rtol=1e-5)


def test_empty_inputs_give_atens_empty_or_zero_results() -> None:
    check_aten(lambda a, b: aten._cdist_forward(a, b, 2.0, None), torch.randn(2, 3, 0), torch.randn(4, 0),
               op=aten._cdist_forward.default)
    check_aten(lambda a, b: aten._cdist_forward(a, b, 1.0, None), torch.randn(2, 0, 3), torch.randn(4, 3),
               op=aten._cdist_forward.default)
    check_aten(lambda a: aten._pdist_forward(a, 3.0), torch.randn(1, 3), op=aten._pdist_forward.default)
    check_aten(lambda a: aten._pdist_forward(a, 3.0), torch.randn(4, 0), op=aten._pdist_forward.default)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.5, math.inf])
def test_nan_coordinates_as_atens_kernels(p: float) -> None:
    """NaN propagates through the sums and p = 0; cdist's maximum (p = inf) skips it, pdist's does not."""
    x = torch.tensor([[math.nan, 1.0, 2.0], [0.0, 3.0, -1.0], [1.0, 1.0, 1.0]])
    check_aten(lambda a, b: aten._cdist_forward(a, b, p, None), x, x[1:], op=aten._cdist_forward.default)
    check_aten(lambda a: aten._pdist_forward(a, p), x, op=aten._pdist_forward.default)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.5])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_16_bit_inputs_compute_in_float32(dtype: torch.dtype, p: float) -> None:
    """ATen's CPU kernels take no 16-bit dtype: traced with fake tensors, against float32 rounded to 16 bits."""
    x1, x2 = _t(4, 5, dtype=dtype), _t(30, 5, dtype=dtype, seed=1)
    want = torch.cdist(x1.float(), x2.float(), p).to(dtype)
    check_aten(lambda a, b: aten._cdist_forward(a, b, p, None), x1, x2, op=aten._cdist_forward.default, want=want,
               tracing_mode="fake", rtol=1e-2, atol=1e-2)
    want = F.pdist(x2.float(), p).to(dtype)
    check_aten(lambda a: aten._pdist_forward(a, p), x2, op=aten._pdist_forward.default, want=want,
               tracing_mode="fake", rtol=1e-2, atol=1e-2)


# ---- backward ops as ATen graphs ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", ORDERS)
def test_cdist_backward(p: float, dtype: torch.dtype) -> None:
    x1, x2 = _t(2, 1, 5, 4, dtype=dtype), _t(3, 6, 4, dtype=dtype, seed=1)
    x2[1, 2] = x1[0, 0, 3]  # a zero distance
    dist = aten._cdist_forward(x1, x2, p, None)
    grad = torch.randn(dist.shape, dtype=dtype)
    for args in ((grad, x1, x2, p, dist), (grad.mT.contiguous(), x2, x1, p, dist.mT.contiguous())):
        check_aten(lambda *a: aten._cdist_backward(*a[:3], p, a[3]), *args[:3], args[4],
                   op=aten._cdist_backward.default)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", ORDERS)
def test_pdist_backward(p: float, dtype: torch.dtype) -> None:
    x = _t(6, 4, dtype=dtype, seed=4)
    x[5] = x[2]
    dist = aten._pdist_forward(x, p)
    grad = torch.randn(dist.shape, dtype=dtype)
    check_aten(lambda g, a, d: aten._pdist_backward(g, a, p, d), grad, x, dist, op=aten._pdist_backward.default)


# ---- through torch.compile -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.5, math.inf])
def test_torch_cdist_and_pdist_compiled(p: float, dtype: torch.dtype) -> None:
    x1, x2 = _t(2, 1, 5, 4, dtype=dtype), _t(3, 6, 4, dtype=dtype, seed=1)
    check_inference(lambda a, b: torch.cdist(a, b, p), x1, x2)
    check_inference(lambda a: F.pdist(a, p), _t(7, 3, dtype=dtype, seed=2))


@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                                  "donot_use_mm_for_euclid_dist"])
def test_torch_cdist_compute_modes_compiled(mode: str) -> None:
    # torch.cdist itself sends the matmul cases to _euclidean_dist (decomposed): the other converters run them
    x1, x2 = _near_rows(torch.float32)
    check_inference(lambda a, b: torch.cdist(a, b, 2.0, compute_mode=mode), x1, x2, atol=1e-4)


class _Distances(nn.Module):
    """A linear map of the points, then their distances to learnt centres and to each other."""

    def __init__(self, p: float, centres: int = 3) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.centres = nn.Parameter(torch.randn(centres, 4))
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.cat([torch.cdist(h, self.centres, self.p).flatten(), F.pdist(h, self.p)])


def _spy(monkeypatch: pytest.MonkeyPatch) -> Counter[Any]:
    """Counts the calls of this module's converters."""
    seen: Counter[Any] = Counter()
    for op in OPS:
        def counted(*args: Any, _op: Any = op, _fn: Any = CONVERTERS[op], **kwargs: Any) -> Any:
            seen[_op] += 1
            return _fn(*args, **kwargs)

        monkeypatch.setitem(CONVERTERS, op, counted)
    return seen


@pytest.mark.parametrize("p", ORDERS)
def test_training_through_cdist_and_pdist(p: float, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    torch.manual_seed(0)
    x = torch.randn(6, 4, dtype=torch.float64)
    check_training(_Distances(p).double(), x)
    assert all(seen[op] for op in OPS), seen


def test_training_through_the_matmul_formula() -> None:
    torch.manual_seed(0)
    check_training(_Distances(2.0, centres=30).double(), torch.randn(6, 4, dtype=torch.float64))


# ---- fallbacks ------------------------------------------------------------------------------------------
def test_integer_inputs_are_unsupported_naming_the_dtype() -> None:
    g = og.Graph()
    x = g.placeholder((4, 3), og.int32)
    for op, args in ((aten._cdist_forward.default, (x, x, 2.0, None)), (aten._pdist_forward.default, (x, 2.0))):
        converter = lookup(op)
        assert converter is not None
        with pytest.raises(Unsupported, match="int32"):
            converter(ConvertContext(g, []), *args)


def test_pdist_of_a_dynamic_row_count_falls_back_with_the_reason() -> None:
    torch._dynamo.reset()
    fn = torch.compile(lambda t: F.pdist(t, 3.0), backend="opgraph", dynamic=True,
                       options={"warn_fallbacks": False})
    with recording() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (5, 7):
            x = torch.randn(n, 3)
            torch.testing.assert_close(fn(x), F.pdist(x, 3.0))
    assert fallbacks(reports) == {"aten::_pdist_forward.default": 1}
    assert "row count" in reports[0].reasons["aten::_pdist_forward.default"]
