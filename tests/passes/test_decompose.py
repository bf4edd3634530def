"""Decompositions for fusion (``passes.decompose``): group_norm, softmax_cross_entropy and (on request)
batch_norm_training and one-update scatters become ops the region generator writes, one fused region each (plus
the batch reduction of a reduced loss; batch norm: two). Fused executables (Triton's interpreter) are checked
against the unfused ones and against PyTorch (``F.group_norm``, ``F.cross_entropy``, ``F.batch_norm``,
``Tensor.scatter``)."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

import opgraph as og  # noqa: E402
from opgraph.codegen.triton import configs as configs_module  # noqa: E402
from opgraph.passes.decompose import decompose_for_fusion  # noqa: E402
from opgraph.passes.fuse import FUSED_REGION  # noqa: E402
from opgraph.passes.program import Program  # noqa: E402
from tests.codegen.test_region_formation import golden, text  # noqa: E402

FUSED = og.CompilationDescriptor(fusion=True, triton_interpret=True, verify_each_pass=True)
PLAIN = og.CompilationDescriptor(fusion=False)
TOL = {og.float32: dict(rtol=1e-5, atol=1e-5), og.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _names(exe: og.Executable) -> list[str]:
    return [o.op.name for o in exe.program.graph.ops]


def _steps(exe: og.Executable) -> list[list[str]]:
    return [[s.op for s in o.attrs.steps] for o in exe.program.graph.ops if o.op is FUSED_REGION]


def _compile(g: og.Graph, feeds: Sequence[og.Tensor], outs: Sequence[og.Tensor]
             ) -> tuple[og.Executable, og.Executable]:
    types = {t: t.type for t in feeds}
    return (g.compile(types, list(outs), device="cpu", descriptor=FUSED),
            g.compile(types, list(outs), device="cpu", descriptor=PLAIN))


# ---- group_norm ----------------------------------------------------------------------------------------
GN_CASES = [  # (shape, groups): spatial dims 0..3, G = 1, G = C, in between
    ((3, 6), 3), ((2, 6), 6), ((2, 4, 5), 1), ((2, 6, 4, 3), 3), ((2, 6, 4, 3), 6), ((1, 4, 2, 3, 2), 2),
]


def _group_norm_graph(shape: tuple[int, ...], groups: int, affine: str, dtype: og.DType
                      ) -> tuple[og.Graph, list[og.Tensor], og.Tensor]:
    g = og.Graph()
    x = g.placeholder(shape, dtype, name="x")
    c = shape[1]
    gamma = g.placeholder((c,), dtype, name="gamma") if "g" in affine else None
    beta = g.placeholder((c,), dtype, name="beta") if "b" in affine else None
    y = g.group_norm(x, groups, gamma, beta, epsilon=1e-5, name="gn")
    return g, [t for t in (x, gamma, beta) if t is not None], y


@pytest.mark.parametrize("dtype", [og.float32, og.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("affine", ["", "g", "b", "gb"])
@pytest.mark.parametrize("shape,groups", GN_CASES, ids=[f"{s}-G{k}" for s, k in GN_CASES])
def test_group_norm_is_one_region_and_matches(shape: tuple[int, ...], groups: int, affine: str,
                                              dtype: og.DType) -> None:
    g, feeds, y = _group_norm_graph(shape, groups, affine, dtype)
    fused, plain = _compile(g, feeds, [y])
    assert _names(fused).count("fused_region") == 1 and "group_norm" not in _names(fused)
    (steps,) = _steps(fused)
    assert "layer_norm" in steps
    # x is read by the region itself; outside it only views (and 16-bit parameters' casts to float32)
    (region,) = [o for o in fused.program.graph.ops if o.op is FUSED_REGION]
    assert region.inputs[0].op.op.name == "placeholder" and region.inputs[0].shape == shape
    assert set(_names(fused)) <= {"placeholder", "fused_region", "reshape", "cast"}
    assert all(o.outputs[0].shape == (groups, shape[1] // groups, *(1,)[:len(shape) - 2])
               for o in fused.program.graph.ops if o.op.name == "cast")
    gen = _gen(len(shape) + groups)
    vals = [torch.randn(t.shape, generator=gen).to(dtype.torch_dtype) for t in feeds]
    got = fused.run(vals)[0]
    want = plain.run(vals)[0]
    assert got.dtype == want.dtype == dtype.torch_dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, **TOL[dtype])
    up = [v.float() for v in vals]
    rest = iter(up[1:])
    params = {k: next(rest) for k, flag in (("weight", "g"), ("bias", "b")) if flag in affine}
    oracle = F.group_norm(up[0], groups, eps=1e-5, **params).to(dtype.torch_dtype)
    torch.testing.assert_close(got, oracle, **TOL[dtype])


def test_group_norm_golden() -> None:
    g, feeds, y = _group_norm_graph((2, 6, 4, 3), 3, "gb", og.float32)
    fused, _ = _compile(g, feeds, [y])
    assert str(fused).splitlines()[0] == "Executable on cpu: 5 ops (placeholder x3, fused_region x1, reshape x1)"
    assert text(fused.program.graph) == golden("""
        %x: float32(2, 6, 4, 3) = placeholder()
        %gamma: float32(6,) = placeholder()
        %beta: float32(6,) = placeholder()
        %fused_region_3: float32(2, 3, 2, 12) = fused_region(%x, %gamma, %beta) [reshape layer_norm reshape multiply reshape add -> 5]
        %gn: float32(2, 6, 4, 3) = reshape(%fused_region_3) {shape=(2, 6, 4, 3)}""")  # noqa: E501
    (kernel,) = [k for k in fused.kernels() if k.op == "fused_region"]
    assert kernel.ops == ["gn.grouped", "gn.normalised", "gn.gamma", "gn.multiply", "gn.beta", "gn.add"]


@pytest.mark.parametrize("gamma_shape", [(1,), ()])
def test_group_norm_broadcast_parameters(gamma_shape: tuple[int, ...]) -> None:
    g = og.Graph()
    x = g.placeholder((2, 4, 2, 2), og.bfloat16, name="x")
    gamma = g.placeholder(gamma_shape, og.bfloat16, name="gamma")
    beta = g.placeholder((4,), og.bfloat16, name="beta")
    y = g.group_norm(x, 1, gamma, beta)
    fused, plain = _compile(g, [x, gamma, beta], [y])
    assert _names(fused).count("fused_region") == 1 and "group_norm" not in _names(fused)
    vals = [torch.randn(t.shape, generator=_gen(1)).to(torch.bfloat16) for t in (x, gamma, beta)]
    got = fused.run(vals)[0]
    torch.testing.assert_close(got, plain.run(vals)[0], **TOL[og.bfloat16])
    up = [v.float() for v in vals]
    want = F.group_norm(up[0], 1, up[1].expand(4), up[2]).to(torch.bfloat16)
    torch.testing.assert_close(got, want, **TOL[og.bfloat16])


def test_group_norm_looped_kernel() -> None:
    """Rows longer than ``PERSISTENT_MAX`` are walked in steps: the same region, a looped kernel."""
    g, feeds, y = _group_norm_graph((2, 6, 4, 3), 2, "gb", og.float32)
    with mock.patch.object(configs_module, "PERSISTENT_MAX", 1):
        fused, plain = _compile(g, feeds, [y])
        (kernel,) = [k for k in fused.kernels() if k.op == "fused_region"]
        assert "for start" in (kernel.source or "")
        vals = [torch.randn(t.shape, generator=_gen(2)) for t in feeds]
        torch.testing.assert_close(fused.run(vals)[0], plain.run(vals)[0], **TOL[og.float32])


def test_group_norm_dynamic_batch_decomposes_dynamic_channels_do_not() -> None:
    g = og.Graph()
    x = g.placeholder((None, 6, 4), og.float32, name="x")
    gamma = g.placeholder((6,), og.float32, name="gamma")
    y = g.group_norm(x, 3, gamma)
    exe = g.compile({x: og.TensorType((None, 6, 4), og.float32), gamma: gamma.type}, [y], device="cpu",
                    descriptor=FUSED)
    assert _names(exe).count("fused_region") == 1 and "group_norm" not in _names(exe)
    for n in (1, 3):
        vals = [torch.randn(n, 6, 4, generator=_gen(n)), torch.randn(6, generator=_gen(9))]
        torch.testing.assert_close(exe.run(vals)[0], F.group_norm(vals[0], 3, vals[1]), rtol=1e-5, atol=1e-5)
    g = og.Graph()
    x = g.placeholder((2, None, 4), og.float32, name="x")
    y = g.group_norm(x, 2)
    exe = g.compile({x: og.TensorType((2, None, 4), og.float32)}, [y], device="cpu", descriptor=FUSED)
    assert "group_norm" in _names(exe) and "fused_region" not in _names(exe)
    v = torch.randn(2, 6, 4, generator=_gen(3))
    torch.testing.assert_close(exe.run([v])[0], F.group_norm(v, 2))


EPILOGUES = {  # what follows group_norm, and whether it joins the region (computed in the grouped layout)
    "silu": (lambda g, y, x, s: g.silu(y), True),
    "scale_shift_silu": (lambda g, y, x, s: g.silu(y * (s + 1.0) + s * 0.5), True),
    "residual": (lambda g, y, x, s: g.relu(x + y) * 2.0, True),
    "shift_first": (lambda g, y, x, s: g.relu(g.subtract(s, y)), False),  # not commutative: stays outside
    "read_twice": (lambda g, y, x, s: g.tanh(y) + g.sigmoid(y), False),
}


@pytest.mark.parametrize("dtype", [og.float32, og.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", sorted(EPILOGUES))
def test_group_norm_epilogues(case: str, dtype: og.DType) -> None:
    """Elementwise ops after group_norm (each value read by the next only) are computed in the grouped layout
    too, their other operands reshaped (views), so they join the region and its result is reshaped back."""
    build, joins = EPILOGUES[case]
    g = og.Graph()
    x = g.placeholder((2, 6, 4, 3), dtype, name="x")
    gamma = g.placeholder((6,), dtype, name="gamma")
    s = g.placeholder((2, 6, 1, 1), dtype, name="s")
    out = build(g, g.group_norm(x, 3, gamma, 0.5), x, s)
    fused, plain = _compile(g, [x, gamma, s], [out])
    steps = _steps(fused)
    assert "group_norm" not in _names(fused)
    if joins:
        assert len(steps) == 1 and steps[0][-1] != "layer_norm"
        assert fused.program.graph.ops[-1].op.name == "reshape"
    else:
        assert len(steps) == 2 and steps[0][-1] in ("layer_norm", "add", "cast")
    vals = [torch.randn(t.shape, generator=_gen(12)).to(dtype.torch_dtype) for t in (x, gamma, s)]
    got = fused.run(vals)[0]
    torch.testing.assert_close(got, plain.run(vals)[0], **TOL[dtype])
    up = [v.float() for v in vals]
    y = F.group_norm(up[0], 3, up[1], torch.full((6,), 0.5)).to(dtype.torch_dtype).float()
    want = {"silu": lambda: F.silu(y), "scale_shift_silu": lambda: F.silu(y * (up[2] + 1) + up[2] * 0.5),
            "residual": lambda: F.relu(up[0] + y) * 2, "shift_first": lambda: F.relu(up[2] - y),
            "read_twice": lambda: torch.tanh(y) + torch.sigmoid(y)}[case]()
    torch.testing.assert_close(got.float(), want, **TOL[dtype])


# ---- softmax_cross_entropy -----------------------------------------------------------------------------
REDUCTIONS = [og.LossReduction.NONE, og.LossReduction.SUM, og.LossReduction.MEAN]
CE_SHAPES = [((6, 5), -1), ((3, 4, 5), 1), ((7,), 0)]  # (logits shape, class axis)


def _ce_graph(shape: tuple[int, ...], axis: int, soft: bool, smoothing: float, reduction: og.LossReduction,
              dtype: og.DType, label_dtype: og.DType = og.int64) -> tuple[og.Graph, list[og.Tensor], og.Tensor]:
    g = og.Graph()
    x = g.placeholder(shape, dtype, name="x")
    ax = axis % len(shape)
    label_shape = shape if soft else shape[:ax] + shape[ax + 1:]
    y = g.placeholder(label_shape, dtype if soft else label_dtype, name="y")
    loss = g.softmax_cross_entropy(x, y, axis, smoothing, reduction, name="ce")
    return g, [x, y], loss


def _ce_values(x: og.Tensor, y: og.Tensor, axis: int, seed: int) -> list[torch.Tensor]:
    gen = _gen(seed)
    logits = (3 * torch.randn(x.shape, generator=gen)).to(x.dtype.torch_dtype)
    if y.dtype.is_floating:
        labels = torch.softmax(2 * torch.randn(y.shape, generator=gen), axis).to(y.dtype.torch_dtype)
    else:
        labels = torch.randint(0, x.shape[axis] or 1, y.shape, generator=gen).to(y.dtype.torch_dtype)
    return [logits, labels]


def _torch_ce(logits: torch.Tensor, labels: torch.Tensor, axis: int, smoothing: float,
              reduction: og.LossReduction) -> torch.Tensor:
    x = logits.float()
    soft = labels.dtype.is_floating_point
    t = labels.float() if soft else labels.long()
    if x.dim() >= 2:
        x = x.movedim(axis, 1)
        t = t.movedim(axis, 1) if soft else t
    return F.cross_entropy(x, t, reduction=reduction.value, label_smoothing=smoothing).to(logits.dtype)


@pytest.mark.parametrize("dtype", [og.float32, og.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("reduction", REDUCTIONS, ids=[r.value for r in REDUCTIONS])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("soft", [False, True], ids=["index", "probabilities"])
@pytest.mark.parametrize("shape,axis", CE_SHAPES, ids=[f"{s}-axis{a}" for s, a in CE_SHAPES])
def test_cross_entropy_fuses_and_matches(shape: tuple[int, ...], axis: int, soft: bool, smoothing: float,
                                         reduction: og.LossReduction, dtype: og.DType) -> None:
    g, feeds, loss = _ce_graph(shape, axis, soft, smoothing, reduction, dtype)
    fused, plain = _compile(g, feeds, [loss])
    names = _names(fused)
    assert "softmax_cross_entropy" not in names
    regions = _steps(fused)
    # one region over the logits (softmax statistics, the picked or weighted log-probabilities, their sum) ...
    assert sum("log_softmax" in s for s in regions) == 1
    (main,) = [s for s in regions if "log_softmax" in s]
    assert "reduce_sum" in main
    # ... and the batch reduction: an op, or with the final cast a small region of its own
    if reduction is og.LossReduction.NONE:
        assert len(regions) == 1
    else:
        batch = "reduce_mean" if reduction is og.LossReduction.MEAN else "reduce_sum"
        rest = [s for s in regions if s is not main]
        assert (len(rest) == 0 and batch in names) or rest == [[batch, "cast"]]
    vals = _ce_values(feeds[0], feeds[1], axis % len(shape), seed=len(shape))
    got = fused.run(vals)[0]
    want = plain.run(vals)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, **TOL[dtype])
    torch.testing.assert_close(got, _torch_ce(*vals, axis % len(shape), smoothing, reduction), **TOL[dtype])


@pytest.mark.parametrize("label_dtype", [og.int32, og.uint8, og.int8])
def test_cross_entropy_label_dtypes(label_dtype: og.DType) -> None:
    """Class coordinates take the labels' dtype; labels too narrow for the class count are widened."""
    classes = 200
    g, feeds, loss = _ce_graph((4, classes), -1, False, 0.0, og.LossReduction.NONE, og.float32, label_dtype)
    fused, plain = _compile(g, feeds, [loss])
    assert "softmax_cross_entropy" not in _names(fused)
    gen = _gen(4)
    top = min(classes, 128) if label_dtype is og.int8 else classes
    labels = torch.randint(0, top, (4,), generator=gen).to(label_dtype.torch_dtype)
    vals = [torch.randn(4, classes, generator=gen), labels]
    got = fused.run(vals)[0]
    torch.testing.assert_close(got, plain.run(vals)[0])
    torch.testing.assert_close(got, F.cross_entropy(vals[0], vals[1].long(), reduction="none"))


def test_cross_entropy_with_minus_infinity_logits() -> None:
    """A masked-out class (-inf logit) other than the label leaves the loss finite, as in PyTorch."""
    g, feeds, loss = _ce_graph((3, 5), -1, False, 0.0, og.LossReduction.NONE, og.float32)
    fused, plain = _compile(g, feeds, [loss])
    x = torch.randn(3, 5, generator=_gen(5))
    x[:, 4] = float("-inf")
    labels = torch.tensor([0, 2, 3])
    got = fused.run([x, labels])[0]
    assert bool(torch.isfinite(got).all())
    torch.testing.assert_close(got, F.cross_entropy(x, labels, reduction="none"))
    torch.testing.assert_close(got, plain.run([x, labels])[0])


def test_cross_entropy_golden() -> None:
    g, feeds, loss = _ce_graph((6, 5), -1, False, 0.0, og.LossReduction.MEAN, og.float32)
    fused, _ = _compile(g, feeds, [loss])
    assert text(fused.program.graph) == golden("""
        %x: float32(6, 5) = placeholder()
        %y: int64(6,) = placeholder()
        %ce.classes: int64(1, 5) = constant() <5 values>
        %ce.constant: float32() = constant() <[0.0]>
        %fused_region_4: float32(6, 1) = fused_region(%x, %ce.classes, %y, %ce.constant) [log_softmax broadcast_like expand_dims equal select reduce_sum negative -> 6]
        %ce: float32() = reduce_mean(%fused_region_4) {axes=(0, 1)}""")  # noqa: E501


def test_cross_entropy_dynamic_classes_are_not_decomposed() -> None:
    g = og.Graph()
    x = g.placeholder((4, None), og.float32, name="x")
    y = g.placeholder((4,), og.int64, name="y")
    loss = g.softmax_cross_entropy(x, y)
    exe = g.compile({x: og.TensorType((4, None), og.float32), y: y.type}, [loss], device="cpu", descriptor=FUSED)
    assert "softmax_cross_entropy" in _names(exe)
    vals = [torch.randn(4, 3, generator=_gen(6)), torch.tensor([0, 2, 1, 1])]
    torch.testing.assert_close(exe.run(vals)[0], F.cross_entropy(*vals))


def test_cross_entropy_dynamic_batch() -> None:
    g = og.Graph()
    x = g.placeholder((None, 5), og.float32, name="x")
    y = g.placeholder((None,), og.int64, name="y")
    loss = g.softmax_cross_entropy(x, y, label_smoothing=0.2)
    exe = g.compile({x: og.TensorType((None, 5), og.float32), y: og.TensorType((None,), og.int64)}, [loss],
                    device="cpu", descriptor=FUSED)
    assert "softmax_cross_entropy" not in _names(exe) and _names(exe).count("fused_region") == 1
    for n in (2, 7):
        vals = [torch.randn(n, 5, generator=_gen(n)), torch.randint(0, 5, (n,), generator=_gen(n + 1))]
        torch.testing.assert_close(exe.run(vals)[0], F.cross_entropy(*vals, label_smoothing=0.2))


# ---- when the decomposition runs ---------------------------------------------------------------------------
def test_no_decomposition_without_fusion() -> None:
    g = og.Graph()
    x = g.placeholder((2, 4, 3), og.float32, name="x")
    labels = g.placeholder((2, 3), og.int64, name="labels")
    y = g.group_norm(x, 2)
    loss = g.softmax_cross_entropy(y, labels, axis=1)
    for descriptor in (PLAIN, og.CompilationDescriptor(fusion=True), og.CompilationDescriptor(optimization_level=0)):
        exe = g.compile({x: x.type, labels: labels.type}, [loss], device="cpu", descriptor=descriptor)
        names = _names(exe)  # fusion off, or on but without a GPU or the interpreter
        assert "group_norm" in names and "softmax_cross_entropy" in names and "layer_norm" not in names
    fused = g.compile({x: x.type, labels: labels.type}, [loss], device="cpu", descriptor=FUSED)
    assert "group_norm" not in _names(fused) and "softmax_cross_entropy" not in _names(fused)


def test_decomposition_leaves_ops_the_generator_writes() -> None:
    g = og.Graph()
    x = g.placeholder((2, 4, 3), og.float32, name="x")
    y = g.group_norm(x, 2, name="gn")
    program = Program(g, [x], [y], [])
    assert decompose_for_fusion(program, lambda op: op.op.name == "group_norm") is program
    out = decompose_for_fusion(program, lambda op: False)
    assert [o.op.name for o in out.graph.ops] == ["placeholder", "reshape", "layer_norm", "reshape"]
    assert out.outputs[0].name == "gn"


def test_decomposed_names_do_not_clash_with_later_ops() -> None:
    """The new ops are named after the op they replace, avoiding every name of the graph (copied after them)."""
    g = og.Graph()
    x = g.placeholder((2, 4, 3), og.float32, name="x")
    y = g.group_norm(x, 2, name="gn")
    z = g.exp(y, name="gn.grouped")
    w = g.tanh(z, name="gn.normalised")
    fused, plain = _compile(g, [x], [w])
    v = torch.randn(2, 4, 3, generator=_gen(7))
    torch.testing.assert_close(fused.run([v])[0], plain.run([v])[0])
    torch.testing.assert_close(fused.run([v])[0], torch.tanh(torch.exp(F.group_norm(v, 2))))


# ---- gradients --------------------------------------------------------------------------------------------
def test_training_graph_through_group_norm_and_cross_entropy() -> None:
    """Autodiff runs before fusion: the forward group_norm and cross entropy are decomposed and fused, their
    gradient ops fuse as they are, and every gradient matches the unfused executable and PyTorch."""
    g = og.Graph()
    x = g.placeholder((4, 6, 3, 2), og.float32, name="x")
    gamma = g.placeholder((6,), og.float32, name="gamma")
    beta = g.placeholder((6,), og.float32, name="beta")
    w = g.placeholder((6, 5), og.float32, name="w")
    labels = g.placeholder((4,), og.int64, name="labels")
    h = g.relu(g.group_norm(x, 3, gamma, beta))
    logits = g.matmul(g.reduce_mean(h, [2, 3]), w)
    loss = g.softmax_cross_entropy(logits, labels, label_smoothing=0.1)
    grads = g.gradients(loss, [x, gamma, beta, w])
    outs = [loss, *(grads[t] for t in (x, gamma, beta, w))]
    fused, plain = _compile(g, [x, gamma, beta, w, labels], outs)
    names = _names(fused)
    assert "group_norm" not in names and "softmax_cross_entropy" not in names
    assert any("layer_norm" in s for s in _steps(fused)) and any("log_softmax" in s for s in _steps(fused))
    gen = _gen(8)
    vals = [torch.randn(4, 6, 3, 2, generator=gen), torch.randn(6, generator=gen), torch.randn(6, generator=gen),
            torch.randn(6, 5, generator=gen), torch.randint(0, 5, (4,), generator=gen)]
    got = fused.run(vals)
    for a, b in zip(got, plain.run(vals), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    leaves = [v.clone().requires_grad_() for v in vals[:4]]
    t_logits = F.relu(F.group_norm(leaves[0], 3, leaves[1], leaves[2])).mean((2, 3)) @ leaves[3]
    t_loss = F.cross_entropy(t_logits, vals[4], label_smoothing=0.1)
    t_loss.backward()
    torch.testing.assert_close(got[0], t_loss.detach(), rtol=1e-5, atol=1e-6)
    for a, leaf in zip(got[1:], leaves, strict=True):
        torch.testing.assert_close(a, leaf.grad, rtol=1e-4, atol=1e-5)


# ---- batch_norm_training (CompilationDescriptor(batch_norm_regions=True)) ------------------------------------
BN_FUSED = og.CompilationDescriptor(fusion=True, triton_interpret=True, verify_each_pass=True, batch_norm_regions=True)
BN_TOL = {og.float32: dict(rtol=1e-4, atol=1e-4), og.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
          og.float64: dict(rtol=1e-10, atol=1e-10)}  # float32: x near 1000 holds ~3e-5 of its spread of 1


def _bn_graph(shape: tuple[int | None, ...], axis: int, affine: bool, dtype: og.DType
              ) -> tuple[og.Graph, list[og.Tensor], list[og.Tensor]]:
    g = og.Graph()
    x = g.placeholder(shape, dtype, name="x")
    pt = og.float32 if dtype.bits < 32 else dtype  # autocast's float32 parameters beside 16-bit data
    params = [g.placeholder((shape[axis],), pt, name=n) for n in ("gamma", "beta")] if affine else []
    y, mean, var = g.batch_norm_training(x, *params, axis=axis)
    return g, [x, *params], [g.relu(y), mean, var]


@pytest.mark.parametrize("dtype", [og.float32, og.bfloat16, og.float64], ids=str)
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("shape,axis", [((16, 6, 5, 24), 3), ((16, 24, 6, 5), 1), ((64, 3), 1)],
                         ids=["nhwc", "nchw", "2d"])
def test_batch_norm_is_a_statistics_region_and_a_normalisation_region(shape: tuple[int, ...], axis: int,
                                                                       affine: bool, dtype: og.DType) -> None:
    """Two sums (one region, the statistics) and the normalisation with the ReLU after it (a second region, for
    long columns); x far
    from 0 (mean 1000, spread 1): a sum of squares about 0 would lose the variance in float32 (PyTorch's own CPU
    kernel is 10x further from the float64 oracle here than the shifted sums)."""
    g, feeds, outs = _bn_graph(shape, axis, affine, dtype)
    fused = g.compile({t: t.type for t in feeds}, outs, device="cpu", descriptor=BN_FUSED)
    names = _names(fused)
    assert "batch_norm_training" not in names and "relu" not in names
    # 64 rows (2-D case) stay in registers: statistics and normalisation in one kernel (``passes.fuse._column``)
    assert names.count("fused_region") == (1 if len(shape) == 2 else 2), names
    # nothing full-size outside the regions (a slice of x cast to float32 once kept a float32 copy of x)
    outside = [t for o in fused.program.graph.ops if o.op.name not in ("fused_region", "placeholder")
               for t in o.outputs if math.prod(t.shape) > shape[axis]]  # type: ignore[arg-type]
    assert not outside, outside
    gen = _gen(3)
    offset = 10.0 if dtype is og.bfloat16 else 1000.0  # bfloat16 holds 1000 + N(0, 1) to a few units only
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) + offset).to(dtype.torch_dtype)
    vals = [x] + [(torch.rand(shape[axis], generator=gen) + 0.5).to(t.dtype.torch_dtype) for t in feeds[1:]]
    got = fused.run(vals)
    up = [v.double() for v in vals]  # the oracle: float64 on the same (rounded) values
    want = F.relu(F.batch_norm(up[0].movedim(axis, 1), None, None, *up[1:], training=True)).movedim(1, axis)
    tol = BN_TOL[dtype]
    torch.testing.assert_close(got[0].double(), want, **tol)
    dims = [k for k in range(len(shape)) if k != axis]
    torch.testing.assert_close(got[1].double(), up[0].mean(dims), rtol=1e-6, atol=0.0)
    torch.testing.assert_close(got[2].double(), up[0].var(dims, unbiased=False), rtol=1e-5, atol=0.0)


def test_batch_norm_keeps_its_vendor_kernel_on_the_cpu_by_default_and_with_dynamic_dims() -> None:
    g, feeds, outs = _bn_graph((8, 4, 3, 3), 1, True, og.float32)
    assert "batch_norm_training" in _names(g.compile({t: t.type for t in feeds}, outs, device="cpu", descriptor=FUSED))
    g, feeds, outs = _bn_graph((None, 4, 3, 3), 1, True, og.float32)  # type: ignore[arg-type]
    exe = g.compile({t: t.type for t in feeds}, outs, device="cpu", descriptor=BN_FUSED)
    assert "batch_norm_training" in _names(exe)  # the count N*H*W is not known before the run
    x = torch.randn(5, 4, 3, 3, generator=_gen(4))
    got = exe.run([x, torch.ones(4), torch.zeros(4)])
    torch.testing.assert_close(got[1], x.mean((0, 2, 3)))


def test_batch_norm_regions_default_on_cuda_up_to_float32() -> None:
    """``batch_norm_regions=None``: on CUDA the batch norms of 16- and 32-bit inputs are decomposed (measured
    faster; float64 keeps the vendor kernel); on the CPU none; ``True``/``False`` override."""
    from opgraph.runtime.compile import batch_norm_regions

    g = og.Graph()
    half = g.placeholder((8, 4, 3, 3), og.bfloat16, name="half")
    full = g.placeholder((8, 4, 3, 3), og.float32, name="full")
    double = g.placeholder((8, 4, 3, 3), og.float64, name="double")
    y16, _, _ = g.batch_norm_training(half, axis=1, name="bn16")
    y32, _, _ = g.batch_norm_training(full, axis=1, name="bn32")
    y64, _, _ = g.batch_norm_training(double, axis=1, name="bn64")
    program = Program(g, [half, full, double], [y16, y32, y64], [])

    def kept(choice: object) -> list[str]:
        out = decompose_for_fusion(program, batch_norm=choice)  # type: ignore[arg-type]
        return [o.name for o in out.graph.ops if o.op.name == "batch_norm_training"]

    assert kept(batch_norm_regions(og.CompilationDescriptor(), "cuda")) == ["bn64"]
    assert kept(batch_norm_regions(og.CompilationDescriptor(), "cpu")) == ["bn16", "bn32", "bn64"]
    assert kept(batch_norm_regions(og.CompilationDescriptor(batch_norm_regions=True), "cpu")) == []
    assert kept(batch_norm_regions(og.CompilationDescriptor(batch_norm_regions=False), "cuda")) == [
        "bn16", "bn32", "bn64"]


def test_batch_norm_training_step_through_the_decomposition() -> None:
    """Autodiff first: the gradient (batch_norm_training_gradient) reads the decomposed forward's statistics."""
    g, feeds, outs = _bn_graph((8, 5, 4, 6), 3, True, og.float64)
    loss = g.reduce_sum(outs[0] * outs[0])
    grads = g.gradients(loss, feeds)
    targets = [loss, *(grads[t] for t in feeds)]
    types = {t: t.type for t in feeds}
    fused = g.compile(types, targets, device="cpu", descriptor=BN_FUSED)
    plain = g.compile(types, targets, device="cpu", descriptor=PLAIN)
    assert "batch_norm_training" not in _names(fused)
    gen = _gen(5)
    vals = [torch.randn(8, 5, 4, 6, generator=gen, dtype=torch.float64) * 2 + 3,
            torch.rand(6, generator=gen, dtype=torch.float64) + 0.5, torch.randn(6, generator=gen, dtype=torch.float64)]
    for a, b in zip(fused.run(vals), plain.run(vals), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_batch_norm_and_relu_of_a_torch_model_are_two_regions() -> None:
    """Through the backend: the running-statistics updates read the per-channel mean from the normalisation
    region; that small read does not stop the ReLU after it from joining (``passes.fuse``)."""
    from opgraph.frontends.torch import recording

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    fast = torch.compile(model, backend="opgraph", options={
        "triton_interpret": True, "batch_norm_regions": True, "channels_last": True, "warn_fallbacks": False})
    x = torch.randn(4, 3, 8, 8)
    with recording() as reports:
        got = fast(x)
    torch.testing.assert_close(got, twin(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(model[1].running_var, twin[1].running_var, rtol=1e-5, atol=1e-6)
    names = _names(reports[0].executable)
    assert "batch_norm_training" not in names and "relu" not in names and names.count("fused_region") >= 2, names


# ---- on CUDA: compiled kernels, rows in registers, walked in steps and split across programs ------------------
GPU_FUSED = og.CompilationDescriptor(fusion=True, cuda_graphs=False)
GPU_PLAIN = og.CompilationDescriptor(fusion=False, cuda_graphs=False)
GPU_TOL = {og.float32: dict(rtol=1e-4, atol=1e-4), og.bfloat16: dict(rtol=3e-2, atol=3e-2)}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [og.float32, og.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape,groups", [((8, 32, 16, 16), 8), ((4, 64, 32, 32), 2), ((2, 32, 64, 64), 1),
                                          ((16, 96), 4)])
def test_group_norm_on_cuda(shape: tuple[int, ...], groups: int, dtype: og.DType) -> None:
    g, feeds, y = _group_norm_graph(shape, groups, "gb", dtype)
    y = g.silu(y)  # joins the region
    types = {t: t.type for t in feeds}
    fused = g.compile(types, [y], device="cuda", descriptor=GPU_FUSED)
    plain = g.compile(types, [y], device="cuda", descriptor=GPU_PLAIN)
    names = _names(fused)
    assert names.count("fused_region") == 1 and "group_norm" not in names and "silu" not in names
    gen = _gen(11)
    vals = [torch.randn(t.shape, generator=gen).to(dtype.torch_dtype).cuda() for t in feeds]
    got = fused.run(vals)[0]
    torch.testing.assert_close(got.float(), plain.run(vals)[0].float(), **GPU_TOL[dtype])
    up = [v.float() for v in vals]
    want = F.silu(F.group_norm(up[0], groups, up[1], up[2]))
    torch.testing.assert_close(got.float(), want, **GPU_TOL[dtype])


@pytest.mark.gpu
def test_default_descriptor_puts_16_and_32_bit_batch_norms_in_regions_on_cuda() -> None:
    for dtype, vendor in ((og.bfloat16, False), (og.float32, False), (og.float64, True)):
        g, feeds, outs = _bn_graph((16, 8, 8, 32), 3, True, dtype)
        exe = g.compile({t: t.type for t in feeds}, outs, device="cuda", descriptor=og.CompilationDescriptor())
        assert ("batch_norm_training" in _names(exe)) is vendor, (dtype, _names(exe))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [og.float32, og.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape,axis", [((64, 28, 28, 128), 3), ((32, 64, 28, 28), 1), ((8, 7, 7, 2048), 3)],
                         ids=["nhwc", "nchw", "nhwc-wide"])
def test_batch_norm_regions_on_cuda(shape: tuple[int, ...], axis: int, dtype: og.DType) -> None:
    g, feeds, outs = _bn_graph(shape, axis, True, dtype)
    fused = g.compile({t: t.type for t in feeds}, outs, device="cuda",
                      descriptor=og.CompilationDescriptor(cuda_graphs=False, batch_norm_regions=True))
    assert "batch_norm_training" not in _names(fused)
    gen = _gen(12)
    vals = [(torch.randn(shape, generator=gen) * 2 + 3).to(dtype.torch_dtype).cuda()]
    vals += [(torch.rand(shape[axis], generator=gen) + 0.5).cuda() for _ in feeds[1:]]
    got = fused.run(vals)
    up = [v.double() for v in vals]
    want = F.relu(F.batch_norm(up[0].movedim(axis, 1), None, None, *up[1:], training=True)).movedim(1, axis)
    torch.testing.assert_close(got[0].double(), want, **GPU_TOL[dtype])
    dims = [k for k in range(len(shape)) if k != axis]
    torch.testing.assert_close(got[1].double(), up[0].mean(dims), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[2].double(), up[0].var(dims, unbiased=False), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [og.float32, og.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("soft", [False, True], ids=["index", "probabilities"])
@pytest.mark.parametrize("classes", [1000, 50257, 100003])
def test_cross_entropy_on_cuda(classes: int, soft: bool, dtype: og.DType) -> None:
    g, feeds, loss = _ce_graph((16, classes), -1, soft, 0.1, og.LossReduction.NONE, dtype)
    mean = g.reduce_mean(loss)
    types = {t: t.type for t in feeds}
    fused = g.compile(types, [loss, mean], device="cuda", descriptor=GPU_FUSED)
    plain = g.compile(types, [loss, mean], device="cuda", descriptor=GPU_PLAIN)
    assert "softmax_cross_entropy" not in _names(fused)
    vals = [v.cuda() for v in _ce_values(feeds[0], feeds[1], 1, seed=classes)]
    got = fused.run(vals)
    for a, b in zip(got, plain.run(vals), strict=True):
        torch.testing.assert_close(a.float(), b.float(), **GPU_TOL[dtype])
    torch.testing.assert_close(got[0].float(), _torch_ce(*vals, 1, 0.1, og.LossReduction.NONE).float(),
                               **GPU_TOL[dtype])


@pytest.mark.parametrize("case", ["two_chains", "one_not_decomposed", "max_tie"])
def test_group_norms_meeting_in_one_op(case: str) -> None:
    # an op reading two group_norms joins one chain and reads the other in its own layout; a group_norm that
    # cannot be decomposed (dynamic parameter size) builds no chain; maximum keeps its operand order (ties)
    g = og.Graph()
    x = g.placeholder((2, 8, 3, 3), og.float32, name="x")
    y = g.placeholder((2, 8, 3, 3), og.float32, name="y")
    feeds = [x, y]
    if case == "one_not_decomposed":
        w = g.placeholder((None,), og.float32, name="w")
        feeds.append(w)
        other = g.group_norm(y, 4, w)
    else:
        other = g.group_norm(y, 4)
    first = g.group_norm(x, 2)
    joined = g.maximum(other, first) if case == "max_tie" else first + other
    out = g.silu(joined, name="out")
    fused, plain = _compile(g, feeds, [out])
    xs = [torch.randn(2, 8, 3, 3, generator=_gen(1)), torch.randn(2, 8, 3, 3, generator=_gen(2))]
    if case == "one_not_decomposed":
        xs.append(torch.randn(8, generator=_gen(3)))
    got, want = fused.run(xs)[0], plain.run(xs)[0]
    assert got.shape == want.shape == (2, 8, 3, 3)
    torch.testing.assert_close(got, want, **TOL[og.float32])


def test_cross_entropy_ignores_no_class() -> None:
    # the op has no ignored class: -100 is out of range unfused (F.cross_entropy would silently ignore it by
    # default), so valid labels are what fused and unfused both define
    g = og.Graph()
    x = g.placeholder((3, 5), og.float32)
    t = g.placeholder((3,), og.int64)
    y = g.softmax_cross_entropy(x, t)
    fused, plain = _compile(g, [x, t], [y])
    xv = torch.randn(3, 5, generator=_gen(4))
    labels = torch.tensor([1, 2, 4])
    torch.testing.assert_close(fused.run([xv, labels])[0], torch.nn.functional.cross_entropy(xv, labels))
    torch.testing.assert_close(plain.run([xv, labels])[0], torch.nn.functional.cross_entropy(xv, labels))
    with pytest.raises(og.ExecutionError, match="out of bounds"):
        plain.run([xv, torch.tensor([1, -100, 4])])


# ---- scatter_along_axis, one update per fibre ---------------------------------------------------------------
UNCHECKED = og.CompilationDescriptor(fusion=True, triton_interpret=True, verify_each_pass=True, check_indices=False)


def _one_hot_gradient(shape: tuple[int, ...], axis: int, mode: og.ScatterMode, index_dtype: og.DType,
                      zero_base: bool) -> tuple[og.Graph, list[og.Tensor], og.Tensor]:
    """nll_loss's gradient as autograd writes it (a zero base, one update per row at the label), then an
    elementwise op reading it, as log_softmax's gradient does; or a scatter into a computed tensor."""
    g = og.Graph()
    x = g.placeholder(shape, og.float32, name="x")
    one = tuple(1 if k == axis else d for k, d in enumerate(shape))
    idx = g.placeholder(one, index_dtype, name="idx")
    upd = g.placeholder(one, og.float32, name="upd")
    base = g.fill_like(x, 0.0) if zero_base else g.exp(x)
    s = g.scatter_along_axis(base, upd, idx, axis, mode)
    return g, [x, idx, upd], g.exp(x) * 2.0 - s


@pytest.mark.parametrize("mode", [og.ScatterMode.SET, og.ScatterMode.ADD])
@pytest.mark.parametrize("shape,axis,index_dtype,zero_base", [
    ((5, 7), 1, og.int64, True), ((5, 7), 0, og.int64, False), ((3, 4, 6), 1, og.int32, True),
    ((3, 300), 1, og.int8, False),  # coordinates past int8's range: compared in int64
])
def test_one_update_scatter_is_a_select_in_the_region_that_reads_it(
        shape: tuple[int, ...], axis: int, index_dtype: og.DType, zero_base: bool, mode: og.ScatterMode) -> None:
    g, feeds, y = _one_hot_gradient(shape, axis, mode, index_dtype, zero_base)
    types = {t: t.type for t in feeds}
    fused = g.compile(types, [y], device="cpu", descriptor=UNCHECKED)
    checked = g.compile(types, [y], device="cpu", descriptor=FUSED)
    assert _names(fused).count("scatter_along_axis") == 0 and _names(fused).count("fused_region") == 1
    assert "scatter_along_axis" in _names(checked)  # checked indices keep the op, whose lowering checks them
    assert "fill_like" not in _names(fused)  # a filled base is its value in the region: nothing writes it
    size = shape[axis]
    one = tuple(1 if k == axis else d for k, d in enumerate(shape))
    gen = _gen(5)
    x = torch.randn(shape, generator=gen)
    idx = torch.randint(-min(size, 128), min(size, 128), one, generator=gen).to(index_dtype.torch_dtype)  # < 0 wraps
    upd = torch.randn(one, generator=gen)
    base = torch.zeros(shape) if zero_base else torch.exp(x)
    wrapped = torch.where(idx < 0, idx.long() + size, idx.long())
    scattered = base.scatter_add(axis, wrapped, upd) if mode is og.ScatterMode.ADD else base.scatter(axis, wrapped, upd)
    want = torch.exp(x) * 2.0 - scattered
    for exe in (fused, checked):
        torch.testing.assert_close(exe.run([x, idx, upd])[0], want, **TOL[og.float32])


def test_one_update_scatter_with_a_dynamic_batch() -> None:
    g, feeds, y = _one_hot_gradient((None, 7), 1, og.ScatterMode.SET, og.int64, True)  # type: ignore[arg-type]
    exe = g.compile({t: t.type for t in feeds}, [y], device="cpu", descriptor=UNCHECKED)
    assert {k.op for k in exe.kernels()} == {"fused_region"}  # the coordinate's compares too: no op left unfused
    for rows in (3, 6):
        gen = _gen(rows)
        x, idx, upd = torch.randn(rows, 7, generator=gen), torch.randint(-7, 7, (rows, 1), generator=gen), \
            torch.randn(rows, 1, generator=gen)
        want = torch.exp(x) * 2.0 - torch.zeros(rows, 7).scatter(1, idx % 7, upd)
        torch.testing.assert_close(exe.run([x, idx, upd])[0], want, **TOL[og.float32])


def test_scatters_with_several_updates_per_fibre_keep_the_op() -> None:
    g = og.Graph()
    x = g.placeholder((4, 6), og.float32)
    idx = g.placeholder((4, 2), og.int64)
    upd = g.placeholder((4, 2), og.float32)
    y = g.exp(x) - g.scatter_along_axis(g.fill_like(x, 0.0), upd, idx, 1, og.ScatterMode.SET)
    exe = g.compile({t: t.type for t in (x, idx, upd)}, [y], device="cpu", descriptor=UNCHECKED)
    assert "scatter_along_axis" in _names(exe)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [og.ScatterMode.SET, og.ScatterMode.ADD])
@pytest.mark.parametrize("zero_base", [True, False], ids=["fill", "computed"])
def test_one_update_scatter_on_cuda(zero_base: bool, mode: og.ScatterMode) -> None:
    shape = (64, 30522)  # BERT's vocabulary: the masked-LM head's nll_loss gradient
    g, feeds, y = _one_hot_gradient(shape, 1, mode, og.int64, zero_base)
    types = {t: t.type for t in feeds}
    fused = g.compile(types, [y], device="cuda", descriptor=og.CompilationDescriptor(check_indices=False))
    assert "scatter_along_axis" not in _names(fused)
    plain = g.compile(types, [y], device="cuda", descriptor=GPU_PLAIN)
    gen = _gen(6)
    vals = [torch.randn(shape, generator=gen), torch.randint(-shape[1], shape[1], (shape[0], 1), generator=gen),
            torch.randn(shape[0], 1, generator=gen)]
    vals = [v.cuda() for v in vals]
    torch.testing.assert_close(fused.run(vals)[0], plain.run(vals)[0], **GPU_TOL[og.float32])
