"""og.nn layers against their torch.nn counterparts: initial values, forward results, state dicts."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import opgraph as og

F64 = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _run(g: og.Graph, feeds: dict[og.Tensor, Any], targets: list[og.Tensor], **kw: Any) -> list[torch.Tensor]:
    return g.run(feeds, targets, device="cpu", **kw)


def _randomise(module: torch.nn.Module, seed: int) -> None:
    """Random values everywhere (norm weights start as ones/zeros, which would hide mistakes)."""
    gen = _gen(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.rand(p.shape, generator=gen, dtype=p.dtype) - 0.5)


# ---- initialisation: the same values as torch.nn under the same seed ---------------------------------
@pytest.mark.parametrize("make", [
    (lambda g, gen: og.nn.Linear(g, 7, 3, generator=gen), lambda: torch.nn.Linear(7, 3)),
    (lambda g, gen: og.nn.Linear(g, 5, 2, bias=False, generator=gen), lambda: torch.nn.Linear(5, 2, bias=False)),
    (lambda g, gen: og.nn.Conv2d(g, 4, 6, 3, groups=2, generator=gen), lambda: torch.nn.Conv2d(4, 6, 3, groups=2)),
    (lambda g, gen: og.nn.Embedding(g, 10, 4, generator=gen), lambda: torch.nn.Embedding(10, 4)),
    (lambda g, gen: og.nn.BatchNorm2d(g, 3), lambda: torch.nn.BatchNorm2d(3)),
    (lambda g, gen: og.nn.LayerNorm(g, (2, 3)), lambda: torch.nn.LayerNorm((2, 3))),
], ids=["linear", "linear-nobias", "conv2d-groups", "embedding", "batchnorm2d", "layernorm"])
def test_initialisation_matches_torch(make: Any) -> None:
    ours, theirs = make
    layer = ours(og.Graph(), _gen(3))
    torch.manual_seed(3)
    ref = theirs()
    expected = {k: v for k, v in ref.state_dict().items() if not k.endswith("num_batches_tracked")}
    got = layer.state_dict()
    assert list(got) == list(expected)
    for k in expected:
        assert torch.equal(got[k], expected[k]), k


def test_generator_makes_initialisation_reproducible() -> None:
    a = og.nn.Linear(og.Graph(), 4, 4, generator=_gen(1)).state_dict()
    b = og.nn.Linear(og.Graph(), 4, 4, generator=_gen(1)).state_dict()
    c = og.nn.Linear(og.Graph(), 4, 4, generator=_gen(2)).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a) and not torch.equal(a["weight"], c["weight"])


def test_dtype_argument() -> None:
    g = og.Graph()
    fc = og.nn.Linear(g, 3, 2, dtype=og.float64)
    assert all(p.dtype is og.float64 for p in fc.parameters)
    with pytest.raises(og.DTypeError, match="floating"):
        og.nn.Linear(g, 3, 2, dtype=og.int32)


# ---- forward against torch.nn with identical weights --------------------------------------------------
def _compare(ours: og.nn.Module, ref: torch.nn.Module, x: torch.Tensor, rtol: float = 1e-12,
             atol: float = 1e-12, ph_shape: tuple[int | None, ...] | None = None) -> None:
    ours.load_state_dict(ref.state_dict())
    g = ours.graph if ours.graph is not None else og.Graph()
    ph = g.placeholder(ph_shape if ph_shape is not None else tuple(x.shape), og.TensorType.of(x).dtype)
    (got,) = _run(g, {ph: x}, [ours(ph)])
    with torch.no_grad():
        want = ref(x)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)


def test_linear_forward() -> None:
    g = og.Graph()
    ref = torch.nn.Linear(6, 4, dtype=F64)
    x = torch.randn(2, 3, 6, dtype=F64, generator=_gen())
    _compare(og.nn.Linear(g, 6, 4, dtype=og.float64), ref, x)
    _compare(og.nn.Linear(g, 6, 4, dtype=og.float64), ref, x[0], ph_shape=(None, 6))  # dynamic batch


def test_linear_float32_forward() -> None:
    ref = torch.nn.Linear(5, 3)
    _compare(og.nn.Linear(og.Graph(), 5, 3), ref, torch.randn(4, 5, generator=_gen()), 1e-5, 1e-6)


@pytest.mark.parametrize("kw", [
    {}, {"stride": 2, "padding": 1}, {"padding": (2, 0), "dilation": 2}, {"groups": 2, "bias": False},
    {"kernel_size": (3, 1), "stride": (1, 2)},
], ids=["plain", "stride-pad", "dilation", "groups-nobias", "rect"])
def test_conv2d_forward(kw: dict[str, Any]) -> None:
    args = {"kernel_size": 3, **kw}
    ref = torch.nn.Conv2d(4, 6, dtype=F64, **args)
    x = torch.randn(2, 4, 9, 8, dtype=F64, generator=_gen())
    _compare(og.nn.Conv2d(og.Graph(), 4, 6, dtype=og.float64, **args), ref, x)


def test_layer_norm_forward() -> None:
    ref = torch.nn.LayerNorm((3, 5), dtype=F64)
    _randomise(ref, 1)
    x = torch.randn(4, 3, 5, dtype=F64, generator=_gen())
    _compare(og.nn.LayerNorm(og.Graph(), (3, 5), dtype=og.float64), ref, x)
    ref1 = torch.nn.LayerNorm(5, elementwise_affine=False, dtype=F64)
    _compare(og.nn.LayerNorm(og.Graph(), 5, elementwise_affine=False, dtype=og.float64), ref1, x)


def test_embedding_forward() -> None:
    ref = torch.nn.Embedding(10, 4)
    g = og.Graph()
    emb = og.nn.Embedding(g, 10, 4)
    emb.load_state_dict(ref.state_dict())
    idx = torch.tensor([[1, 9, 0], [3, 3, 7]])
    ph = g.placeholder((None, 3), og.int64)
    (got,) = _run(g, {ph: idx}, [emb(ph)])
    assert torch.equal(got, ref(idx).detach())


@pytest.mark.parametrize("kw", [
    {"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1}, {"kernel_size": (2, 3), "stride": (1, 2)},
    {"kernel_size": 3, "stride": 2, "ceil_mode": True}, {"kernel_size": 2, "dilation": 2},
], ids=["k2", "k3-s2-p1", "rect", "ceil", "dilation"])
def test_max_pool2d_forward(kw: dict[str, Any]) -> None:
    x = torch.randn(2, 3, 9, 10, dtype=F64, generator=_gen())
    _compare(og.nn.MaxPool2d(**kw), torch.nn.MaxPool2d(**kw), x)


def test_relu_flatten_dropout() -> None:
    x = torch.randn(2, 3, 4, 5, dtype=F64, generator=_gen())
    _compare(og.nn.ReLU(), torch.nn.ReLU(), x)
    _compare(og.nn.Flatten(), torch.nn.Flatten(), x)
    _compare(og.nn.Flatten(), torch.nn.Flatten(), x, ph_shape=(None, 3, None, 5))
    _compare(og.nn.Flatten(2), torch.nn.Flatten(2), x)
    _compare(og.nn.Flatten(0, 1), torch.nn.Flatten(0, 1), x, ph_shape=(None, 3, 4, 5))
    _compare(og.nn.Dropout(0.0), torch.nn.Dropout(0.0), x)
    _compare(og.nn.Dropout(0.3).eval(), torch.nn.Dropout(0.3).eval(), x)
    g = og.Graph()
    with pytest.raises(og.OpgraphError, match="random ops come later"):
        og.nn.Dropout(0.3)(g.placeholder((2, 3)))
    with pytest.raises(og.AttributeValueError, match="p must be"):
        og.nn.Dropout(1.5)


def test_sequential_keys_and_forward() -> None:
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.BatchNorm2d(3), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(12, 5)).double().eval()
    _randomise(ref, 2)
    ref[1].running_mean.uniform_(-1, 1)
    ref[1].running_var.uniform_(0.5, 2)
    g = og.Graph()
    ours = og.nn.Sequential(og.nn.Conv2d(g, 2, 3, 3, padding=1, dtype=og.float64),
                            og.nn.BatchNorm2d(g, 3, dtype=og.float64), og.nn.ReLU(), og.nn.MaxPool2d(2),
                            og.nn.Flatten(), og.nn.Linear(g, 12, 5, dtype=og.float64)).eval()
    assert list(ours.variables) == [k for k in ref.state_dict() if not k.endswith("num_batches_tracked")]
    assert len(ours) == 6 and isinstance(ours[1], og.nn.BatchNorm2d)
    _compare(ours, ref, torch.randn(4, 2, 4, 4, dtype=F64, generator=_gen()))
    assert ours.updates == []  # eval mode builds no running-statistics updates
    assert "BatchNorm2d" in repr(ours)


# ---- module bookkeeping -----------------------------------------------------------------------------
class _Net(og.nn.Module):
    def __init__(self, g: og.Graph) -> None:
        super().__init__(g)
        self.fc1 = og.nn.Linear(g, 4, 8)
        self.bn = og.nn.BatchNorm1d(g, 8)
        self.fc2 = og.nn.Linear(g, 8, 2)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> og.Tensor:
        return self.fc2(self.graph.relu(self.bn(self.fc1(x))))  # type: ignore[union-attr]


def test_custom_module_collects_parameters_buffers_updates() -> None:
    g = og.Graph()
    net = _Net(g)
    names = [p.name for p in net.parameters]
    assert names == ["linear_0.weight", "linear_0.bias", "batchnorm1d_0.weight", "batchnorm1d_0.bias",
                     "linear_1.weight", "linear_1.bias"]
    assert [b.name for b in net.buffers] == ["batchnorm1d_0.running_mean", "batchnorm1d_0.running_var"]
    assert list(net.named_parameters)[:2] == ["fc1.weight", "fc1.bias"]
    x = g.placeholder((None, 4))
    net(x)
    assert len(net.updates) == 2 and all(op.op.name == "assign" for op in net.updates)
    net.eval()
    assert not net.bn.training
    net(x)
    assert len(net.updates) == 2  # the eval call added none


def test_names_must_be_unique() -> None:
    g = og.Graph()
    og.nn.Linear(g, 2, 2, name="fc")
    with pytest.raises(og.GraphError, match="already used"):
        og.nn.Linear(g, 2, 2, name="fc")


def test_layer_rejects_tensor_of_another_graph() -> None:
    fc = og.nn.Linear(og.Graph(), 2, 2)
    with pytest.raises(og.GraphError, match="another graph"):
        fc(og.Graph().placeholder((1, 2)))


def test_load_state_dict_errors_and_live_update() -> None:
    g = og.Graph()
    fc = og.nn.Linear(g, 3, 2)
    ref = torch.nn.Linear(3, 2)
    with pytest.raises(og.GraphError, match="missing keys"):
        fc.load_state_dict({"weight": ref.weight})
    with pytest.raises(og.ShapeError, match="shape"):
        fc.load_state_dict({"weight": torch.zeros(3, 2), "bias": torch.zeros(2)})
    fc.load_state_dict({"weight": ref.weight}, strict=False)
    assert torch.equal(fc.state_dict()["weight"], ref.weight.detach())
    x = g.placeholder((1, 3))
    y = fc(x)
    _run(g, {x: torch.ones(1, 3)}, [y])  # the variables now live on the CPU
    fc.load_state_dict({k: v.double() for k, v in ref.state_dict().items()})  # converted to float32
    (got,) = _run(g, {x: torch.ones(1, 3)}, [y])
    torch.testing.assert_close(got, ref(torch.ones(1, 3)).detach())
