"""The ``opgraph`` torch.compile backend, its options and fallbacks, ``og.from_torch`` and ``og.torch.explain``."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch

import opgraph as og
from opgraph.frontends.torch import recording
from tests.frontends.torch_harness import check_inference, check_training, compiled

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))


def test_backend_is_registered_by_entry_point() -> None:
    assert "opgraph" in torch._dynamo.list_backends()


def test_inference_and_training_match_eager() -> None:
    x = torch.randn(4, 6)
    reports = check_inference(_mlp(), x)
    assert reports[0].kind == "inference" and reports[0].executable is not None
    check_training(_mlp(), x)


def test_options_are_typed() -> None:
    assert og.torch.TorchOptions.of({"fusion": False}).descriptor().fusion is False
    with pytest.raises(og.AttributeValueError, match="unknown options \\['fusoin'\\]"):
        og.torch.TorchOptions.of({"fusoin": False})
    with pytest.raises(og.AttributeValueError, match="must be a dict"):
        og.torch.TorchOptions.of(3)
    torch._dynamo.reset()
    fast = torch.compile(_mlp(), backend="opgraph", options={"fusion": False, "cuda_graphs": False})
    x = torch.randn(2, 6)
    torch.testing.assert_close(fast(x), _mlp()(x))


def _bessel(x: torch.Tensor) -> torch.Tensor:
    return torch.special.bessel_j0(x * 2.0) + 1.0  # an ATen op without an opgraph equivalent


def test_an_op_without_converter_runs_as_itself_named_once_in_a_warning() -> None:
    x = torch.randn(8)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(_bessel, backend="opgraph")(x)
    torch.testing.assert_close(got, _bessel(x))
    named = [w for w in caught if "aten::special_bessel_j0" in str(w.message)]
    assert len(named) == 1 and "run as themselves" in str(named[0].message)
    report = og.torch.explain(_bessel, x)
    assert report.fallbacks == {"aten::special_bessel_j0.default": 1}
    assert "aten::special_bessel_j0.default x1" in str(report)


def test_fallback_ops_save_and_load(tmp_path: Path) -> None:
    g = og.from_torch(_Bessel(), (torch.randn(8),))
    assert g.fallbacks == {"aten::special_bessel_j0.default": 1}
    g.save(tmp_path / "bessel")
    back = og.Graph.load(tmp_path / "bessel")
    x = torch.randn(8)
    (out,) = back.run({back.tensor(g.inputs[0].name): x}, [back.tensor(g.outputs[0].name)])
    torch.testing.assert_close(out, _bessel(x))


class _Bessel(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _bessel(x)


def test_a_graph_that_cannot_be_translated_runs_eagerly_with_a_warning() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * (x.shape[0] % 3)  # a size's remainder: no graph expression for it

    torch._dynamo.reset()
    fast = torch.compile(f, backend="opgraph", dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (3, 5):
            x = torch.randn(n)
            torch.testing.assert_close(fast(x), f(x))
    assert any("runs eagerly" in str(w.message) for w in caught)


def test_from_torch_variables_updates_and_gradients() -> None:
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Tanh())
    reference = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Tanh())
    reference.load_state_dict(model.state_dict())
    g = og.from_torch(model, (torch.randn(5, 4),))
    assert [p.op.name for p in g.parameters] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert [b.op.name for b in g.buffers] == ["1.running_mean", "1.running_var", "1.num_batches_tracked"]
    assert len(g.updates) == 3
    x = torch.randn(5, 4)
    loss = g.reduce_sum(g.square(g.outputs[0]))
    grads = g.gradients(loss, g.parameters)
    got = g.run({g.inputs[0]: x}, [g.outputs[0], *(grads[p] for p in g.parameters)], g.updates)
    want = reference(x)
    want.square().sum().backward()
    torch.testing.assert_close(got[0], want)
    for t, p in zip(got[1:], reference.parameters(), strict=True):
        torch.testing.assert_close(t, p.grad)
    torch.testing.assert_close(g.variable_value(g.buffers[0]), reference[1].running_mean)


def test_explain_reports_graphs_kernels_and_breaks() -> None:
    def broken(x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        torch._dynamo.graph_break()
        return y + 1.0

    report = og.torch.explain(broken, torch.randn(3))
    assert report.graph_breaks == 1 and len(report.graphs) == 2
    assert "2 graph(s) compiled, 1 graph break(s)" in str(report)
    header = str(report).splitlines()[1].split()
    assert "CUDA" in header and all(r.executable.cuda_graph_status == "off" for r in report.graphs)  # the CPU
    assert compiled(_mlp())(torch.randn(2, 6)).shape == (2, 3)


def test_mark_dynamic_batch_compiles_once_for_every_size() -> None:
    from opgraph.frontends.torch import recording

    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 5))
    torch._dynamo.reset()
    fast = torch.compile(model, backend="opgraph")
    with recording() as reports, torch.no_grad():
        for n in (4, 2, 7):
            x = torch.randn(n, 3, 8, 8)
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-5, atol=1e-5)
    assert len(reports) == 1 and reports[0].fallbacks == {}  # one graph, one executable: no recompile per size
    assert reports[0].executable.input_types[2].shape == (None, 3, 8, 8)


def test_mark_dynamic_training_matches_eager() -> None:
    from opgraph.frontends.torch import recording

    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.Linear(5, 2))
    reference = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.Linear(5, 2))
    reference.load_state_dict(model.state_dict())
    torch._dynamo.reset()
    fast = torch.compile(model, backend="opgraph", options={"warn_fallbacks": False})
    with recording() as reports:
        for n in (3, 5):
            x = torch.randn(n, 6)
            torch._dynamo.mark_dynamic(x, 0)
            fast(x).square().sum().backward()
            reference(x).square().sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5)
    # forward and backward compiled once each, both by opgraph (the forward returns the batch size as is)
    assert [(r.kind, r.executable is not None, r.fallbacks) for r in reports] == [("forward", True, {}),
                                                                              ("backward", True, {})]


def test_in_place_updates_and_copies_are_applied() -> None:
    """Mutations are functionalised by AOTAutograd and written back to the inputs: an optimizer-style update,
    a copy_ into an input, and a buffer updated in place inside the compiled function."""

    def sgd_step(params: list[torch.Tensor], grads: list[torch.Tensor]) -> None:
        for p, g in zip(params, grads, strict=True):
            p.mul_(0.9).add_(g, alpha=-0.1)

    def copy_and_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.copy_(y * 2.0)
        return x + 1.0

    params = [torch.randn(3, 4), torch.randn(5)]
    grads = [torch.randn(3, 4), torch.randn(5)]
    want = [p.clone() for p in params]
    sgd_step(want, grads)
    fast = compiled(sgd_step)
    with torch.no_grad():
        fast(params, grads)
    for p, w in zip(params, want, strict=True):
        torch.testing.assert_close(p, w)
    x, y = torch.zeros(4), torch.randn(4)
    with torch.no_grad():
        out = compiled(copy_and_add)(x, y)
    torch.testing.assert_close(x, y * 2.0)
    torch.testing.assert_close(out, y * 2.0 + 1.0)


def test_dynamic_true_reads_sizes_from_the_inputs() -> None:
    """Under dynamic=True every size is symbolic: a view to (batch, -1) has two unknowns and becomes a
    reshape_dims reading the batch size from the input; one executable serves every shape."""
    from opgraph.frontends.torch import recording

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w).reshape(x.shape[0], -1).sum(1)

    torch._dynamo.reset()
    fast = torch.compile(f, backend="opgraph", dynamic=True)
    with recording() as reports, torch.no_grad():
        for shape in ((5, 4, 3), (2, 6, 3), (7, 2, 3)):  # no size 1: Dynamo specialises those
            x, w = torch.randn(*shape), torch.randn(3, 2)
            torch.testing.assert_close(fast(x, w), f(x, w))
    assert len(reports) == 1 and reports[0].fallbacks == {} and reports[0].executable is not None
    assert any(o.op.name == "reshape_dims" for o in reports[0].executable.program.graph.ops)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("channels_last", [False, True])
def test_dynamic_batch_norm_training_compiles_once_with_size_ratios_read_at_run_time(channels_last: bool,
                                                                                     dtype: torch.dtype) -> None:
    """A batch-norm gradient under dynamic=True multiplies by 1 / (N * H * W), a SymFloat AOTAutograd traces
    with torch's own sympy functions: computed from the input dims at run time, in the traced result's dtype (a
    float64 0-d tensor made float32 products float64), so both graphs run in opgraph for every size. The strided
    convolution's data gradient needs a different output padding for even and odd sizes (read at run time too),
    in NCHW and NHWC."""
    from opgraph.frontends.torch import recording

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 4, 3, stride=2, padding=1)).to(dtype)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype is torch.float64 else dict(rtol=1e-4, atol=1e-5)
    reference = copy.deepcopy(model)
    torch._dynamo.reset()
    # float32 without fusion: the CPU would keep native_batch_norm_backward whole, with no scalar to convert
    options = {"warn_fallbacks": False, "channels_last": channels_last, "fusion": dtype is torch.float64}
    fast = torch.compile(model, backend="opgraph", dynamic=True, options=options)
    with recording() as reports:
        for n, h in ((2, 8), (3, 6), (5, 7)):  # 1 / 108 and 1 / 245 are not exact in float32
            x = torch.randn(n, 3, h, h, dtype=dtype)
            for p in (*model.parameters(), *reference.parameters()):
                p.grad = None
            x.requires_grad_(True)
            fast(x).square().sum().backward()
            grad, x.grad = x.grad, None
            reference(x).square().sum().backward()
            torch.testing.assert_close(grad, x.grad, **tol)
            for p, q in zip(model.parameters(), reference.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad, **tol)
    for name in ("1.running_mean", "1.running_var"):  # n / (n - 1) read from the input's dims too
        torch.testing.assert_close(model.get_buffer(name), reference.get_buffer(name), **tol)
    assert [(r.kind, r.executable is not None, r.fallbacks) for r in reports] == [("forward", True, {}),
                                                                              ("backward", True, {})]


def test_a_size_used_as_a_number_is_read_at_run_time() -> None:
    from opgraph.frontends.torch import recording

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * x.shape[0] / (x.shape[0] + x.shape[1])

    torch._dynamo.reset()
    fast = torch.compile(f, backend="opgraph", dynamic=True)
    with recording() as reports:
        for shape in ((3, 4), (5, 2), (7, 9)):
            x = torch.randn(*shape)
            torch.testing.assert_close(fast(x), f(x))
    assert len(reports) == 1 and reports[0].executable is not None and reports[0].fallbacks == {}


def test_parameters_and_buffers_are_marked_static_inputs() -> None:
    # CUDA-graph replays read them in place; the batch is copied
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 2))
    x = torch.randn(3, 4)
    with recording() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(model)(x).sum().backward()
    kinds = {r.kind: r.executable for r in reports}
    forward, backward = kinds["forward"], kinds["backward"]
    static = sorted(forward._static_inputs)
    shapes = [tuple(forward.input_types[i].shape) for i in static]
    params = {tuple(p.shape) for p in model.parameters()} | {tuple(b.shape) for b in model.buffers()}
    assert set(shapes) <= params and len(static) == len(forward.input_types) - 1  # all but the batch
    assert (3, 4) not in shapes
    # the backward's inputs (activations a replayed forward keeps in its buffers) are read in place until one moves
    assert backward._static_inputs == frozenset(range(len(backward.input_types)))


def test_a_forward_returning_a_computed_size_runs_in_opgraph() -> None:
    """A linear layer on 3-d inputs under dynamic=True saves ``b * t`` (a size computed from two input dims) for
    its backward: the forward returns it, computed at run time from the inputs, instead of running eagerly."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))
    reference = copy.deepcopy(model)
    fast = torch.compile(model, backend="opgraph", dynamic=True)
    with recording() as reports:
        for b, t in ((2, 5), (3, 7), (4, 3)):
            x = torch.randn(b, t, 6)
            for p in (*model.parameters(), *reference.parameters()):
                p.grad = None
            fast(x).square().sum().backward()
            reference(x).square().sum().backward()
            for p, q in zip(model.parameters(), reference.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert [(r.kind, r.executable is not None) for r in reports] == [("forward", True), ("backward", True)], \
        [(r.kind, r.eager_reason) for r in reports]
