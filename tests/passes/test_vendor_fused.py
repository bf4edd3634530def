"""passes/vendor_fused.py where no regions form (the CPU), with the unfused graph's values: conv2d -> add(bias
placed as (C, 1, 1)) becomes conv2d_bias (anything else keeps its two ops), a normalize of reshaped per-channel
statistics batch_norm_inference, a max pooling whose indices go unread one without them."""

from __future__ import annotations

import copy

import pytest
import torch

import opgraph as og
from opgraph.passes.program import Program
from opgraph.passes.vendor_fused import fuse_vendor_calls

D = og.Conv2dDescriptor
PAD1 = D(padding_left=1, padding_right=1, padding_top=1, padding_bottom=1)


def _ops(program: Program) -> list[str]:
    return [o.op.name for o in program.graph.ops if o.op.name != "placeholder"]


def _graph(desc: og.Conv2dDescriptor = PAD1,
           bias_shape: tuple[int, ...] = (3,), place: str = "expand_dims", extra_reader: bool = False,
           w_shape: tuple[int, ...] = (3, 2, 3, 3), x_shape: tuple[int, ...] = (2, 2, 6, 6),
           ) -> tuple[og.Graph, list[og.Tensor], list[og.Tensor]]:
    g = og.Graph()
    x, w, b = g.placeholder(x_shape), g.placeholder(w_shape), g.placeholder(bias_shape)
    y = g.conv2d(x, w, desc)
    placed = {"expand_dims": lambda: g.expand_dims(b, [1, 2]), "reshape": lambda: g.reshape(b, (1, -1, 1, 1)),
              "as-is": lambda: b}[place]()
    out = g.add(y, placed, name="out")
    return g, [x, w, b], [out, g.relu(y)] if extra_reader else [out]


@pytest.mark.parametrize("case", ["expand_dims", "reshape", "asymmetric-padding", "dynamic-batch"])
def test_an_nchw_conv_takes_its_bias(case: str) -> None:
    kwargs: dict = {"expand_dims": {}, "reshape": dict(place="reshape"),
                    "asymmetric-padding": dict(desc=D(padding_style=og.PaddingStyle.TF_SAME), w_shape=(3, 2, 2, 2)),
                    "dynamic-batch": dict(x_shape=(None, 2, 6, 6))}[case]
    g, feeds, outs = _graph(**kwargs)
    fused = fuse_vendor_calls(Program(g, feeds, outs, []))
    assert _ops(fused) == ["conv2d_bias"]
    assert fused.graph.ops[-1].name == "out" and fused.graph.ops[-1].attrs.names[1] == "out"


@pytest.mark.parametrize("case", ["conv-output-read-twice", "bias-along-width", "nhwc"])
def test_anything_else_keeps_its_two_ops(case: str) -> None:
    kwargs: dict = {
        "conv-output-read-twice": dict(extra_reader=True),
        "bias-along-width": dict(bias_shape=(6,), place="as-is"),  # broadcasts along W, not the channels
        "nhwc": dict(desc=D(data_layout=og.TensorLayout.NHWC), x_shape=(2, 6, 6, 2), bias_shape=(3,), place="as-is"),
    }[case]
    g, feeds, outs = _graph(**kwargs)
    before = _ops(Program(g, feeds, outs, []))
    assert "conv2d_bias" not in _ops(fuse_vendor_calls(Program(g, feeds, outs, []))), before


@pytest.mark.parametrize("padding", ["symmetric", "tf-same-asymmetric"])
def test_executables_on_the_cpu_fuse_and_match_the_unfused_values(padding: str) -> None:
    g, feeds, outs = (_graph() if padding == "symmetric" else
                      _graph(desc=D(padding_style=og.PaddingStyle.TF_SAME), w_shape=(3, 2, 2, 2)))
    gen = torch.Generator().manual_seed(0)
    vals = [torch.randn(tuple(t.shape), generator=gen) for t in feeds]  # type: ignore[arg-type]
    types = {t: t.type for t in feeds}
    fused = g.compile(types, outs, device="cpu")
    plain = g.compile(types, outs, device="cpu", descriptor=og.CompilationDescriptor(fusion=False))
    assert [k.op for k in fused.kernels()] == ["conv2d_bias"]
    assert "conv2d_bias" not in [k.op for k in plain.kernels()]
    torch.testing.assert_close(fused.run(vals)[0], plain.run(vals)[0], rtol=1e-5, atol=1e-5)


def test_not_where_regions_form() -> None:
    """With generated kernels (CUDA, or the interpreter) the bias add joins the region of the ops after it."""
    pytest.importorskip("triton")
    g, feeds, outs = _graph()
    exe = g.compile({t: t.type for t in feeds}, [g.relu(outs[0])], device="cpu",
                    descriptor=og.CompilationDescriptor(fusion=True, triton_interpret=True))
    assert "conv2d_bias" not in [k.op for k in exe.kernels()]


def test_a_torch_conv_with_bias_runs_as_one_call_on_the_cpu() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.inference_mode():
        report = og.torch.explain(model, x)
        got = torch.compile(model, backend="opgraph")(x)
    kernels = [k.op for k in report.graphs[0].kernels]
    assert "conv2d_bias" in kernels and "add" not in kernels, kernels
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)


# ---- normalize with per-channel statistics -> batch_norm_inference ---------------------------------------------
def _bn_graph(dtype: og.DType, shape: tuple[int, ...] = (4, 3, 5, 5)) -> tuple[og.Graph, list[og.Tensor], og.Tensor]:
    g = og.Graph()
    x = g.placeholder(shape, dtype)
    params = [g.placeholder((shape[1],), og.float32) for _ in range(4)]
    return g, [x, *params], g.batch_norm(x, *params, training=False).output


@pytest.mark.parametrize("dtype", [og.float32, og.float64, og.bfloat16], ids=str)
def test_inference_batch_norms_drop_their_reshapes(dtype: og.DType) -> None:
    g, feeds, y = _bn_graph(dtype)
    types = {t: t.type for t in feeds}
    fused = g.compile(types, [y], device="cpu")
    kernels = [k.op for k in fused.kernels()]
    assert "batch_norm_inference" in kernels and "reshape" not in kernels and "normalize" not in kernels, kernels
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(4, 3, 5, 5, generator=gen, dtype=torch.float64) * 2 + 1).to(dtype.torch_dtype)
    params = [torch.randn(3, generator=gen), torch.rand(3, generator=gen) + 0.5, torch.rand(3, generator=gen) + 0.5,
              torch.randn(3, generator=gen)]
    got = fused.run([x, *params])[0]
    plain = g.compile(types, [y], device="cpu", descriptor=og.CompilationDescriptor(fusion=False)).run([x, *params])
    assert torch.equal(got, plain[0])  # the same PyTorch call, before and after the rewrite
    up = [v.double() for v in params]
    want = torch.nn.functional.batch_norm(x.double(), up[0], up[1], up[2], up[3], False)
    tol = 2e-2 if dtype is og.bfloat16 else 1e-5
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


def test_statistics_along_two_axes_stay_a_normalize() -> None:
    g = og.Graph()
    x = g.placeholder((2, 3, 4), og.float32)
    mean, var = g.placeholder((3, 4), og.float32), g.placeholder((3, 4), og.float32)
    y = g.normalize(x, mean, var)
    assert _ops(fuse_vendor_calls(Program(g, [x, mean, var], [y], []))) == ["normalize"]


def test_a_torch_batch_norm_in_eval_is_one_call_on_the_cpu() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
    for p in model[1].parameters():
        torch.nn.init.uniform_(p, 0.5, 1.5)
    model.eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.inference_mode():
        report = og.torch.explain(model, x)
        got = torch.compile(model, backend="opgraph")(x)
    kernels = [k.op for k in report.graphs[0].kernels]
    assert kernels.count("batch_norm_inference") == 1 and "reshape" not in kernels, kernels
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)


# ---- max pooling whose indices nothing reads -> max pooling without them ---------------------------------------
POOL = og.Pooling2dDescriptor(kernel_width=2, kernel_height=2, stride_in_x=2, stride_in_y=2,
                              return_indices_mode=og.PoolingReturnIndicesMode.GLOBAL_FLATTEN_2D)


@pytest.mark.parametrize("read", ["values-only", "indices-read", "indices-returned"])
def test_a_pooling_whose_indices_go_unread_computes_none(read: str) -> None:
    g = og.Graph()
    x = g.placeholder((2, 3, 6, 6), og.float32)
    values, indices = g.max_pool2d_return_indices(x, POOL)
    outs = {"values-only": lambda: [g.relu(values)],
            "indices-read": lambda: [g.add(values, g.cast(indices, og.float32))],
            "indices-returned": lambda: [values, indices]}[read]()
    ops = _ops(fuse_vendor_calls(Program(g, [x], outs, [])))
    if read == "values-only":
        assert ops == ["max_pool2d", "relu"], ops
    else:
        assert "max_pool2d_return_indices" in ops and "max_pool2d" not in ops, ops


def test_a_torch_max_pool_in_eval_computes_no_indices_on_the_cpu() -> None:
    """PyTorch's decompositions make every max pooling one with indices; inference drops them, and so do we."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.MaxPool2d(3, 2, padding=1), torch.nn.ReLU()).eval()
    x = torch.randn(2, 3, 9, 9)
    x[0, 0, 2, 2] = float("nan")  # a NaN window stays NaN without indices too
    with torch.inference_mode():
        report = og.torch.explain(model, x)
        got = torch.compile(model, backend="opgraph")(x)
    kernels = [k.op for k in report.graphs[0].kernels]
    assert "max_pool2d" in kernels and "max_pool2d_return_indices" not in kernels, kernels
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5, equal_nan=True)


# ---- select(less_equal(x, t), 0, g) -> threshold_gradient -----------------------------------------------------
@pytest.mark.parametrize("case", ["relu-gradient", "mask-read-twice", "not-zero", "negative-zero",
                                  "threshold-not-constant"])
def test_a_masked_gradient_becomes_one_threshold_gradient(case: str) -> None:
    g = og.Graph()
    x, grad, t = g.placeholder((2, 5)), g.placeholder((2, 5)), g.placeholder(())
    mask = g.less_equal(x, t if case == "threshold-not-constant" else g.constant(0.0))
    fill = g.constant({"not-zero": 1.0, "negative-zero": -0.0}.get(case, 0.0))
    outs = [g.select(mask, fill, grad, name="dx")]
    if case == "mask-read-twice":
        outs.append(g.cast(mask, og.float32))
    fused = fuse_vendor_calls(Program(g, [x, grad, t], outs, []))
    ops = _ops(fused)
    if case == "relu-gradient":
        assert ops == ["threshold_gradient"], ops
        assert fused.graph.ops[-1].name == "dx"
    else:
        assert "threshold_gradient" not in ops, ops


def test_a_relu_network_trains_through_threshold_gradients_on_the_cpu() -> None:
    """The backward graph of a ReLU network (PyTorch's decompositions: less_equal + select) runs
    threshold_backward, with eager's gradients."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    twin = copy.deepcopy(model)
    x = torch.randn(5, 6)
    x[0, 0] = float("nan")  # a NaN passes the gradient through the mask, as eager's threshold_backward does
    with og.torch.recording() as reports:
        torch.compile(model, backend="opgraph")(x).nansum().backward()
    twin(x).nansum().backward()
    kernels = [k.op for r in reports if r.kind == "backward" for k in r.executable.kernels()]
    assert "threshold_gradient" in kernels and "select" not in kernels, kernels
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, equal_nan=True)


# ---- a convolution's data and weights gradients -> conv2d_gradients ------------------------------------------
@pytest.mark.parametrize("padding", ["symmetric", "tf-same-asymmetric", "strided-groups"])
def test_a_convolutions_two_gradients_are_one_call(padding: str) -> None:
    desc = {"symmetric": PAD1, "tf-same-asymmetric": D(padding_style=og.PaddingStyle.TF_SAME),
            "strided-groups": D(strides=(2, 2), groups=2, **{f: 1 for f in ("padding_left", "padding_top")})}[padding]
    w_shape = {"symmetric": (3, 2, 3, 3), "tf-same-asymmetric": (3, 2, 2, 2), "strided-groups": (4, 1, 3, 3)}[padding]
    g = og.Graph()
    x, w = g.placeholder((2, 2, 7, 6)), g.placeholder(w_shape)
    y = g.conv2d(x, w, desc)
    loss = g.reduce_sum(y * y, [0, 1, 2, 3])
    grads = g.gradients(loss, [x, w])
    outs = [grads[x], grads[w]]
    types = {x: x.type, w: w.type}
    fused = g.compile(types, outs, device="cpu")
    plain = g.compile(types, outs, device="cpu", descriptor=og.CompilationDescriptor(fusion=False))
    kernels = [k.op for k in fused.kernels()]
    assert "conv2d_gradients" in kernels and "conv2d_data_gradient" not in kernels, kernels
    gen = torch.Generator().manual_seed(2)
    vals = [torch.randn(2, 2, 7, 6, generator=gen), torch.randn(*w_shape, generator=gen)]
    for got, want in zip(fused.run(vals), plain.run(vals), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_biased_convolutions_three_gradients_are_one_call() -> None:
    """The bias gradient (the incoming gradient summed over N, H, W, as the torch frontend writes it) joins the
    pair as a third output; the values are the unfused graph's, and eager's through the backend."""
    g = og.Graph()
    gy, x, w = g.placeholder((2, 4, 6, 5)), g.placeholder((2, 3, 6, 5)), g.placeholder((4, 3, 3, 3))
    outs = [g.conv2d_data_gradient(gy, w, x.shape, PAD1), g.conv2d_weights_gradient(gy, x, w.shape, PAD1),
            g.reduce_sum(gy, [0, 2, 3])]
    fused = fuse_vendor_calls(Program(g, [gy, x, w], outs, []))
    fused.graph.verify()
    assert [(o.op.name, o.attrs.bias) for o in fused.graph.ops if o.op.name != "placeholder"] == [
        ("conv2d_gradients", True)]
    types = {t: t.type for t in (gy, x, w)}
    compiled = g.compile(types, outs, device="cpu")
    plain = g.compile(types, outs, device="cpu", descriptor=og.CompilationDescriptor(fusion=False))
    gen = torch.Generator().manual_seed(4)
    vals = [torch.randn(2, 4, 6, 5, generator=gen), torch.randn(2, 3, 6, 5, generator=gen),
            torch.randn(4, 3, 3, 3, generator=gen)]
    for got, want in zip(compiled.run(vals), plain.run(vals), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 3))
    twin = copy.deepcopy(model)
    xs = torch.randn(2, 3, 7, 7)
    with og.torch.recording() as reports:
        torch.compile(model, backend="opgraph")(xs).square().sum().backward()
    twin(xs).square().sum().backward()
    made = [k for r in reports if r.kind == "backward" for k in r.executable.kernels() if k.op == "conv2d_gradients"]
    assert made and all(len(k.ops) == 3 for k in made), [k.ops for k in made]
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5)


def test_a_weights_gradient_alone_stays_itself() -> None:
    """The first convolution of a network has no data gradient to pair with."""
    g = og.Graph()
    x, w = g.placeholder((1, 2, 5, 5)), g.placeholder((3, 2, 3, 3))
    loss = g.reduce_sum(g.conv2d(x, w, PAD1), [0, 1, 2, 3])
    dw = g.gradients(loss, [w])[w]
    ops = _ops(fuse_vendor_calls(Program(g, [x, w], [dw], [])))
    assert "conv2d_weights_gradient" in ops and "conv2d_gradients" not in ops, ops


# ---- batch norm's backward whole where no kernels are generated ------------------------------------------------
@pytest.mark.parametrize("interpret", [False, True], ids=["cpu", "generated-kernels"])
def test_a_batch_norm_backward_is_one_call_where_no_kernels_are_generated(interpret: bool) -> None:
    """On the CPU PyTorch's native_batch_norm_backward reaches its converter whole and runs as one call; where
    kernels are generated (here the interpreter) it is spelled with elementwise ops and sums that fuse."""
    if interpret:
        pytest.importorskip("triton")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    twin = copy.deepcopy(model)
    x = torch.randn(2, 3, 6, 6)
    with og.torch.recording() as reports:
        compiled = torch.compile(model, backend="opgraph", options={"triton_interpret": interpret})
        compiled(x).square().sum().backward()
    twin(x).square().sum().backward()
    kernels = [k.op for r in reports if r.kind == "backward" for k in r.executable.kernels()]
    assert ("batch_norm_backward" in kernels) is not interpret, kernels
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_a_layer_norm_and_its_backward_are_one_call_each_on_the_cpu() -> None:
    """native_layer_norm (with the statistics it saves) and its backward run as PyTorch's calls on the CPU, with
    eager's gradients."""
    torch._dynamo.reset()  # static shapes: the tests above compiled Sequential.forward for other sizes
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))
    twin = copy.deepcopy(model)
    x = torch.randn(4, 5, 6)
    with og.torch.recording() as reports:
        torch.compile(model, backend="opgraph")(x).square().sum().backward()
    twin(x).square().sum().backward()
    kernels = {r.kind: [k.op for k in r.executable.kernels()] for r in reports}
    assert "layer_norm_forward" in kernels["forward"] and "layer_norm_backward" in kernels["backward"], kernels
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
