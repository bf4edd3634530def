"""The channels-last pass (``passes.layout``): every rewrite against the same graph compiled without it (float64,
so differences are rounding only), the transposes it leaves (none between convolutions), pooling indices kept
as they were, and a small CNN trained through the backend against eager PyTorch, plain and fused (Triton's
interpreter)."""

from __future__ import annotations

import copy
import dataclasses
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import opgraph as og
from opgraph.codegen.triton import configs
from opgraph.frontends.torch import recording
from opgraph.ops.shape import TRANSPOSE

ON = og.CompilationDescriptor(channels_last=True, verify_each_pass=True, fusion=False)
OFF = og.CompilationDescriptor(channels_last=False, fusion=False)
N, C, H, W = 2, 4, 5, 6
PAD = og.Conv2dDescriptor(padding_left=1, padding_right=1, padding_top=1, padding_bottom=1)


def _check(g: og.Graph, feeds: dict[og.Tensor, torch.Tensor], targets: list[og.Tensor],
           on_descriptor: og.CompilationDescriptor = ON) -> og.Executable:
    types = {t: t.type for t in feeds}
    on = g.compile(types, targets, device="cpu", descriptor=on_descriptor)
    off = g.compile(types, targets, device="cpu", descriptor=OFF)
    got, want = on.run(list(feeds.values())), off.run(list(feeds.values()))
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    return on


def _transposes(exe: og.Executable) -> list[str]:
    return [o.name for o in exe.program.graph.ops if o.op is TRANSPOSE]


def _image(g: og.Graph) -> tuple[og.Tensor, og.Tensor, dict[og.Tensor, torch.Tensor]]:
    x = g.placeholder((N, 3, H, W), og.float64, name="x")
    w = g.placeholder((C, 3, 3, 3), og.float64, name="w")
    return x, w, {x: torch.randn(N, 3, H, W, dtype=torch.float64), w: torch.randn(C, 3, 3, 3, dtype=torch.float64)}


def test_no_transposes_between_convolutions() -> None:
    g = og.Graph()
    x, w, feeds = _image(g)
    w2 = g.placeholder((C, C, 3, 3), og.float64, name="w2")
    bias = g.placeholder((C, 1, 1), og.float64, name="bias")
    feeds |= {w2: torch.randn(C, C, 3, 3, dtype=torch.float64), bias: torch.randn(C, 1, 1, dtype=torch.float64)}
    y = g.relu(g.conv2d(x, w, PAD) + bias)
    z = g.conv2d(y, w2, PAD) * 0.5 + y
    out = g.reduce_mean(z, [2, 3])
    exe = _check(g, feeds, [out])
    assert _transposes(exe) == ["x.nhwc"]  # the image, seen NHWC; the mean over H, W needs none after it
    assert all(o.attrs.data_layout is og.TensorLayout.NHWC for o in exe.program.graph.ops if o.op.name == "conv2d")


def test_graph_outputs_keep_their_nchw_meaning() -> None:
    g = og.Graph()
    x, w, feeds = _image(g)
    y = g.conv2d(x, w, PAD)
    exe = _check(g, feeds, [g.sigmoid(y), y])
    assert len(_transposes(exe)) == 3  # the image, and one view back to NCHW per output


def test_without_convolutions_nothing_changes() -> None:
    g = og.Graph()
    x = g.placeholder((N, C, H, W), og.float64, name="x")
    exe = _check(g, {x: torch.randn(N, C, H, W, dtype=torch.float64)}, [g.relu(x) + 1.0])
    assert "channels_last" not in [r.name for r in exe.pass_log if r.ops_before != r.ops_after]
    assert _transposes(exe) == []


def test_an_input_on_a_branch_without_convolutions_is_left_as_it_is() -> None:
    g = og.Graph()
    x, w, feeds = _image(g)
    u = g.placeholder((N, C, H, W), og.float64, name="u")
    feeds[u] = torch.randn(N, C, H, W, dtype=torch.float64)
    exe = _check(g, feeds, [g.conv2d(x, w, PAD), g.exp(u) * 2.0])
    assert not any(name.startswith("u.") for name in _transposes(exe))  # read in NHWC order it would be strided


def test_inputs_stored_channels_last_are_read_nhwc_without_convolutions() -> None:
    """A batch norm, a ReLU and a spatial mean of an input stored channels-last: all on its NHWC view, the
    results back as channels-last views (eager's layout). A pooling of an input not so stored is left alone."""
    g = og.Graph()
    x = g.placeholder((N, C, H, W), og.float64, name="x")
    u = g.placeholder((N, C, 4, 4), og.float64, name="u")
    y, mean, var = g.batch_norm_training(x, axis=1)
    r = g.relu(y)
    pooled = g.relu(g.max_pool2d(u, og.Pooling2dDescriptor(kernel_width=2, kernel_height=2, stride_in_x=2,
                                                             stride_in_y=2)))
    targets = [r, g.reduce_mean(r, [2, 3]), mean, var, pooled]
    xv = torch.randn(N, C, H, W, dtype=torch.float64).to(memory_format=torch.channels_last)
    uv = torch.randn(N, C, 4, 4, dtype=torch.float64)
    types = {x: x.type, u: u.type}
    stored = og.CompilationDescriptor(channels_last=True, verify_each_pass=True, fusion=False,
                                      channels_last_inputs=(0,))
    exe = g.compile(types, targets, device="cpu", descriptor=stored)
    want = g.compile(types, targets, device="cpu", descriptor=OFF).run([xv, uv])
    got = exe.run([xv, uv])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert [o.attrs.axis for o in exe.program.graph.ops if o.op.name == "batch_norm_training"] == [3]
    assert got[0].is_contiguous(memory_format=torch.channels_last) and not got[0].is_contiguous()
    assert not any(name.startswith(("u.", "max_pool2d")) for name in _transposes(exe)), _transposes(exe)
    # declared but not so stored: the same values, read across memory
    torch.testing.assert_close(exe.run([xv.contiguous(), uv])[0], want[0], rtol=1e-12, atol=1e-12)
    plain = g.compile(types, targets, device="cpu", descriptor=ON)  # nothing declared: nothing changes
    assert _transposes(plain) == []


def test_stored_weights_and_transposed_pooling_inputs_are_not_seeded() -> None:
    """A channels-last model's weights are stored channels-last too: the convolution takes them as they are (no
    pair of transposes). A pooling of a stored input transposed by the graph itself (H and W swapped: not NHWC
    storage) does not seed its results."""
    g = og.Graph()
    x, w, feeds = _image(g)
    s = g.placeholder((N, C, 4, 4), og.float64, name="s")
    feeds[x] = feeds[x].to(memory_format=torch.channels_last)
    feeds[w] = feeds[w].to(memory_format=torch.channels_last)
    feeds[s] = torch.randn(N, C, 4, 4, dtype=torch.float64).to(memory_format=torch.channels_last)
    pool = og.Pooling2dDescriptor(kernel_width=2, kernel_height=2, stride_in_x=2, stride_in_y=2)
    pooled = g.relu(g.max_pool2d(g.transpose(g.sin(s), [0, 1, 3, 2]), pool))
    exe = _check(g, feeds, [g.conv2d(x, w, PAD), pooled], dataclasses.replace(ON, channels_last_inputs=(0, 1, 2)))
    names = _transposes(exe)
    assert not any(n.startswith("w.") for n in names) and not any(n.startswith("max_pool2d") for n in names), names
    conv_free = og.Graph()  # the same pooling path alone: the pool-follows-inputs rule of conv-free graphs
    s2 = conv_free.placeholder((N, C, 4, 4), og.float64, name="s")
    pooled2 = conv_free.relu(conv_free.max_pool2d(conv_free.transpose(conv_free.sin(s2), [0, 1, 3, 2]), pool))
    exe = _check(conv_free, {s2: feeds[s]}, [pooled2], dataclasses.replace(ON, channels_last_inputs=(0,)))
    assert not any(n.startswith("max_pool2d") for n in _transposes(exe)), _transposes(exe)


def test_channels_last_inputs_must_be_positions() -> None:
    with pytest.raises(og.OpgraphError, match="channels_last_inputs"):
        og.CompilationDescriptor(channels_last_inputs=[0])  # type: ignore[arg-type]
    with pytest.raises(og.OpgraphError, match="channels_last_inputs"):
        og.CompilationDescriptor(channels_last_inputs=(-1,))
    with pytest.raises(og.OpgraphError, match="channels_last_inputs"):
        og.CompilationDescriptor(channels_last_inputs=(True,))
    g = og.Graph()
    x = g.placeholder((N, C, H, W), og.float64, name="x")
    with pytest.raises(og.OpgraphError, match=r"channels_last_inputs \[1\] name no input"):
        g.compile({x: x.type}, [g.relu(x)], device="cpu", descriptor=dataclasses.replace(ON, channels_last_inputs=(1,)))


@pytest.mark.parametrize("bn_regions", [False, True], ids=["vendor", "regions"])
def test_a_batch_norm_alone_on_channels_last_activations_trains_nhwc(bn_regions: bool) -> None:
    """The graph of a batch norm and ReLU without a convolution (a graph break, or ``benchmarks/batch_norm.py``):
    the backend names its channels-last inputs, so both graphs compute NHWC and return channels-last results, as
    eager does; the step matches eager."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(8), torch.nn.ReLU()).double()
    twin = copy.deepcopy(model)
    x = torch.randn(4, 8, 5, 6, dtype=torch.float64).to(memory_format=torch.channels_last)
    grad = torch.randn(4, 8, 5, 6, dtype=torch.float64).to(memory_format=torch.channels_last)
    compiled = torch.compile(model, backend="opgraph", dynamic=False, options={
        "channels_last": True, "triton_interpret": True, "warn_fallbacks": False, "batch_norm_regions": bn_regions})
    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    with recording() as reports:
        y = compiled(xs[0])
        y.backward(grad)
    want = twin(xs[1])
    want.backward(grad)
    torch.testing.assert_close(y, want, rtol=1e-10, atol=1e-10)
    assert y.is_contiguous(memory_format=torch.channels_last) == want.is_contiguous(memory_format=torch.channels_last)
    assert xs[0].grad is not None and xs[1].grad is not None
    torch.testing.assert_close(xs[0].grad, xs[1].grad, rtol=1e-10, atol=1e-10)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(model[0].running_var, twin[0].running_var, rtol=1e-12, atol=1e-12)
    for r in reports:  # every graph reads its activations through NHWC views
        names = [o.op.name for o in r.executable.program.graph.ops]
        assert "transpose" in names, (r.kind, names)
        for o in r.executable.program.graph.ops:
            if o.op.name in ("batch_norm_training", "batch_norm_training_gradient"):
                assert o.attrs.axis == 3, (r.kind, o)


def test_a_variable_read_after_an_assign_keeps_its_old_value() -> None:
    # a view of the variable made for its first reader must not serve a reader after the assign
    g = og.Graph()
    x = g.placeholder((1, 1, 2, 2), og.float64, name="x")
    w = g.placeholder((2, 1, 1, 1), og.float64, name="w")
    b = g.variable(torch.tensor([[[1.0]], [[2.0]]], dtype=torch.float64), name="b")
    y = g.conv2d(x, w)
    before = y + b
    update = g.assign(b, g.constant(torch.zeros(2, 1, 1, dtype=torch.float64)))
    after = y * b
    got = g.compile({x: x.type, w: w.type}, [before, after], [update], device="cpu", descriptor=ON).run(
        [torch.ones(1, 1, 2, 2, dtype=torch.float64), torch.ones(2, 1, 1, 1, dtype=torch.float64)])
    assert got[1].flatten().tolist() == [1.0] * 4 + [2.0] * 4


_OPERANDS = ["scalar", "channel", "channel4", "sample", "leaf", "computed"]


@settings(max_examples=40, deadline=None)
@given(operands=st.lists(st.sampled_from(_OPERANDS), min_size=1, max_size=4),
       tail=st.sampled_from(["none", "reduce", "transpose", "conv", "concat", "slice", "pad"]),
       axes=st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True), keepdims=st.booleans(),
       perm=st.permutations(range(4)), head=st.sampled_from(["conv", "stored"]))
def test_random_tails_after_a_convolution_or_a_stored_input(operands: list[str], tail: str, axes: list[int],
                                                             keepdims: bool, perm: list[int], head: str) -> None:
    """Elementwise ops whose other operand is cheap to see NHWC (a scalar, a per-channel or per-sample value, a
    broadcast, a graph input) or not (a value computed in NCHW), then a reduction, a transpose or a convolution:
    the same values with the pass as without. They follow a convolution, or (``stored``) read an input stored
    channels-last, declared so (``channels_last_inputs``)."""
    g = og.Graph()
    x, w, feeds = _image(g)
    descriptor = ON
    if head == "conv":
        y = g.conv2d(x, w, PAD)
    else:
        y = g.placeholder((N, C, H, W), og.float64, name="s")
        feeds[y] = torch.randn(N, C, H, W, dtype=torch.float64).to(memory_format=torch.channels_last)
        descriptor = dataclasses.replace(ON, channels_last_inputs=(2,))
    for k, kind in enumerate(operands):
        if kind == "scalar":
            other = g.constant(1.5, og.float64)
        elif kind in ("channel", "channel4", "sample"):
            shape = {"channel": (C, 1, 1), "channel4": (1, C, 1, 1), "sample": (N, C, 1, 1)}[kind]
            p = g.placeholder(shape, og.float64, name=f"p{k}")
            feeds[p] = torch.randn(shape, dtype=torch.float64)
            other = g.broadcast_to(g.exp(p), (N, C, H, W)) if kind == "sample" else p
        elif kind == "leaf":
            other = g.placeholder((N, C, H, W), og.float64, name=f"p{k}")
            feeds[other] = torch.randn(N, C, H, W, dtype=torch.float64)
        else:  # computed in NCHW: a reshape of something else
            p = g.placeholder((N, C * H * W), og.float64, name=f"p{k}")
            feeds[p] = torch.randn(N, C * H * W, dtype=torch.float64)
            other = g.reshape(g.tanh(p), (N, C, H, W))
        y = [g.add, g.multiply, g.subtract, g.maximum][k % 4](y, other)
    if tail == "reduce":
        y = g.reduce_sum(y, sorted(axes), keepdims=keepdims)
    elif tail == "transpose":
        y = g.sin(g.transpose(y, perm))
    elif tail == "conv":
        w2 = g.placeholder((C, C, 1, 1), og.float64, name="w2")
        feeds[w2] = torch.randn(C, C, 1, 1, dtype=torch.float64)
        y = g.conv2d(g.relu(y), w2)
    elif tail == "concat":  # along a random axis, with a second convolution's output or a graph input
        other = g.conv2d(x, w, PAD) if keepdims else g.placeholder((N, C, H, W), og.float64, name="c")
        if not keepdims:
            feeds[other] = torch.randn(N, C, H, W, dtype=torch.float64)
        y = g.concat([y, g.exp(other)], axes[0])
    elif tail == "slice":
        y = g.slice(g.sin(y), [0, 1, 1, 0], [N, C, H, W - 1], [1, 2, 1, 2], start_mask=perm[0], end_mask=perm[1])
    elif tail == "pad":
        mode = og.PaddingMode.REFLECT if keepdims else og.PaddingMode.CONSTANT
        y = g.pad(g.sin(y), mode, [0, 1, 2, 1], [1, 0, 1, 2], 0.5)
    exe = _check(g, feeds, [y] if head == "conv" else [y, g.reduce_sum(x, [1])], descriptor)  # x, w still fed
    if head == "stored" and operands[0] != "computed":  # the first op is carried: it reads the NHWC view
        assert "s.nhwc" in _transposes(exe), _transposes(exe)


class _Dense(torch.nn.Module):
    """A DenseNet/U-Net-like block: channel concatenations, a padded pooling path and a crop, between convolutions
    with batch norm."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(9)
        self.c2 = torch.nn.Conv2d(9, 4, 3, padding=1)
        self.c3 = torch.nn.Conv2d(13, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(torch.cat([x, self.c1(x)], 1)))
        z = torch.cat([y, self.c2(y)], 1)
        u = torch.nn.functional.pad(torch.nn.functional.avg_pool2d(z, 2), (0, 1, 0, 1))[:, :, : z.shape[2] // 2]
        return self.c3(u).mean((2, 3))


def test_concatenations_and_crops_train_through_the_backend_as_in_eager() -> None:
    torch.manual_seed(0)
    model = _Dense().double()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="opgraph", dynamic=False,
                             options={"channels_last": True, "warn_fallbacks": False})
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    with recording() as reports:
        compiled(x).square().sum().backward()
    twin(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-10, msg=name)
    forward = next(r.executable for r in reports if r.kind == "forward")
    concats = [o for o in forward.program.graph.ops if o.op.name == "concat"]
    assert concats and all(o.attrs.axis == 3 for o in concats)  # joined in NHWC


def test_explain_shows_the_layout() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    report = og.torch.explain(_Net(), x, options={"channels_last": True})
    text = str(report)
    assert "layout" in text and "NHWC (" in text
    assert "NHWC" not in str(og.torch.explain(_Net(), x, options={"channels_last": False}))


def test_pooling_indices_keep_their_values() -> None:
    g = og.Graph()
    x, w, feeds = _image(g)
    d = og.Pooling2dDescriptor(kernel_width=2, kernel_height=2, stride_in_x=2, stride_in_y=2,
                               return_indices_mode=og.PoolingReturnIndicesMode.GLOBAL_FLATTEN_2D)
    values, indices = g.max_pool2d_return_indices(g.relu(g.conv2d(x, w, PAD)), d)
    grad = g.max_pool2d_gradient(g.exp(values), indices, (N, C, H, W), d)
    exe = _check(g, feeds, [values, indices, grad * 2.0])
    assert [getattr(o.attrs, "descriptor", o.attrs).data_layout for o in exe.program.graph.ops
            if o.op.name.startswith("max_pool")] == \
        [og.TensorLayout.NCHW] * 2


def test_batch_norm_and_gradients_of_a_conv_block() -> None:
    g = og.Graph()
    x, w, feeds = _image(g)
    gamma = g.placeholder((C,), og.float64, name="gamma")
    beta = g.placeholder((C,), og.float64, name="beta")
    feeds |= {gamma: torch.rand(C, dtype=torch.float64) + 0.5, beta: torch.randn(C, dtype=torch.float64)}
    y, _, _ = g.batch_norm_training(g.conv2d(x, w, PAD), gamma, beta)
    loss = g.reduce_sum(g.relu(y) * g.relu(y))
    grads = g.gradients(loss, [x, w, gamma, beta])
    exe = _check(g, feeds, [loss, *(grads[t] for t in (x, w, gamma, beta))])
    assert {o.attrs.axis for o in exe.program.graph.ops if o.op.name.startswith("batch_norm")} == {3}


@pytest.mark.parametrize("dtype", [og.float32, og.float64], ids=str)
def test_1x1_data_gradients_come_back_nhwc_stored(dtype: og.DType) -> None:
    # 1x1 weights are channels-last contiguous with NCHW strides: PyTorch read them as NCHW and ran the data
    # gradient in NCHW (two copies of a full activation per 1x1 convolution on cuDNN)
    g = og.Graph()
    dy = g.placeholder((2, 5, 6, 8), dtype)
    w = g.placeholder((8, 4, 1, 1), dtype)
    dx = g.conv2d_data_gradient(dy, w, (2, 5, 6, 4), og.Conv2dDescriptor(data_layout=og.TensorLayout.NHWC))
    feeds = {dy: torch.randn(2, 5, 6, 8, dtype=dtype.torch_dtype), w: torch.randn(8, 4, 1, 1, dtype=dtype.torch_dtype)}
    got = g.run(feeds, [dx])[0]
    assert got.is_contiguous()
    want = torch.nn.grad.conv2d_input((2, 4, 5, 6), feeds[w], feeds[dy].permute(0, 3, 1, 2))
    torch.testing.assert_close(got, want.permute(0, 2, 3, 1))


def test_depthwise_convolution_and_its_gradients() -> None:
    g = og.Graph()
    x = g.placeholder((N, C, H, W), og.float64, name="x")
    w = g.placeholder((2, C, 3, 3), og.float64, name="w")
    feeds = {x: torch.randn(N, C, H, W, dtype=torch.float64), w: torch.randn(2, C, 3, 3, dtype=torch.float64)}
    d = og.DepthwiseConv2dDescriptor(padding_style=og.PaddingStyle.TF_SAME)
    loss = g.reduce_sum(g.square(g.depthwise_conv2d(x, w, d)))
    grads = g.gradients(loss, [x, w])
    exe = _check(g, feeds, [loss, grads[x], grads[w]])
    names = [o.op.name for o in exe.program.graph.ops]
    assert "depthwise_conv2d_data_gradient" in names and "depthwise_conv2d_weights_gradient" in names


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.b2 = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(torch.relu(self.b1(self.c1(x))))
        z = torch.relu(self.b2(self.c2(y)) + y)
        return self.fc(z.mean((2, 3)))


@pytest.mark.parametrize("fusion,bn_regions", [(False, False), (True, False), (True, True)],
                         ids=["plain", "fused", "fused-batch-norm-regions"])
def test_a_cnn_trains_through_the_backend_as_in_eager(fusion: bool, bn_regions: bool) -> None:
    torch.manual_seed(0)
    model = _Net().double()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="opgraph", options={
        "channels_last": True, "fusion": fusion, "triton_interpret": fusion, "warn_fallbacks": False,
        "batch_norm_regions": bn_regions})
    opt, opt2 = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin))
    for _ in range(2):
        x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
        for m, o in ((compiled, opt), (twin, opt2)):
            o.zero_grad()
            m(x).square().sum().backward()
            o.step()
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-10, msg=name)
    for name in ("b1.running_mean", "b2.running_var"):
        torch.testing.assert_close(model.get_buffer(name), twin.get_buffer(name), rtol=1e-9, atol=1e-10)


def test_outputs_the_caller_sees_are_contiguous_as_in_eager() -> None:
    # NHWC-stored views would break ``.view`` in the caller and in the graph after a graph break
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1).double()
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64)

    def body(x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(conv(x))
        torch._dynamo.graph_break()
        return y.view(y.size(0), -1).sum(1)

    compiled = torch.compile(body, backend="opgraph", options={"channels_last": True, "warn_fallbacks": False})
    torch.testing.assert_close(compiled(x), body(x))
    y = torch.compile(conv, backend="opgraph", options={"channels_last": True, "warn_fallbacks": False})(x)
    assert y.is_contiguous()


def test_nhwc_batch_norm_gradients_split_their_columns_and_match_eager() -> None:
    """In NHWC a batch-norm gradient's sums are column reductions over N*H*W rows; with few channels they split
    the rows across programs (as on a GPU: 132 multiprocessors assumed), storing the ReLU gradient beside."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64),
                                torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(64), torch.nn.ReLU())
    twin = copy.deepcopy(model)
    x = torch.randn(4, 3, 16, 16)
    with mock.patch.object(configs, "multiprocessors", lambda: 132), \
            mock.patch.object(configs, "_splittable", lambda em: True), recording() as reports:
        compiled = torch.compile(model, backend="opgraph", dynamic=False, options={
            "channels_last": True, "triton_interpret": True, "warn_fallbacks": False})
        compiled(x).square().sum().backward()
    twin(x).square().sum().backward()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4 * float(q.grad.abs().max()))
    backward = next(r.executable for r in reports if r.kind == "backward")
    sources = [k.source or "" for k in backward.kernels() if k.op == "fused_region"]
    assert any("atomic_add" in src and "chunk" in src for src in sources)  # a split column reduction ran


@pytest.mark.gpu
def test_a_cnn_trains_channels_last_on_cuda_as_in_eager() -> None:
    """On CUDA (``channels_last=None``: there only) the convolutions run NHWC (cuDNN), the rest in fused regions,
    and three SGD steps match eager PyTorch (TF32 off on both sides)."""
    torch.manual_seed(0)
    model = _Net().cuda()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="opgraph", options={"warn_fallbacks": False, "channels_last": None})
    opt, opt2 = (torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, twin))
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        with recording() as reports:
            for _ in range(3):
                x = torch.randn(4, 3, 16, 16, device="cuda")
                for m, o in ((compiled, opt), (twin, opt2)):
                    o.zero_grad()
                    m(x).square().sum().backward()
                    o.step()
    finally:
        torch.backends.cudnn.allow_tf32 = saved
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
        assert p.grad is not None and p.grad.is_contiguous(), name  # weight gradients dense, as eager's
    layouts = {o.attrs.data_layout if o.op.name == "conv2d" else o.attrs.descriptor.data_layout
               for r in reports if r.executable is not None for o in r.executable.program.graph.ops
               if o.op.name.startswith("conv2d")}
    assert layouts == {og.TensorLayout.NHWC}
