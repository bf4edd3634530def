"""Compile and run: feeds, targets, variables, caching, specialisation, devices, bad input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

import opgraph as og
from opgraph.runtime.graph_methods import RUN_CACHE_SIZE


def _graph() -> tuple[og.Graph, og.Tensor, og.Tensor]:
    g = og.Graph()
    x = g.placeholder((None, 3), og.float32, name="x")
    y = g.exp(x) * 2.0 + 1.0
    return g, x, y


def test_run_numpy_and_torch_inputs() -> None:
    g, x, y = _graph()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    (r1,) = g.run({x: a}, [y])
    (r2,) = g.run({x: torch.from_numpy(a)}, [y])
    np.testing.assert_allclose(r1.numpy(), np.exp(a) * 2 + 1, rtol=1e-6)
    assert torch.equal(r1, r2)


def test_compile_specialize_and_output_types() -> None:
    g, x, y = _graph()
    exe = g.compile({x: og.TensorType((None, 3), og.float32)}, [y], device="cpu")
    assert exe.output_types() == [og.TensorType((None, 3), og.float32)]
    assert exe.output_types([og.TensorType((5, 3), og.float32)]) == [og.TensorType((5, 3), og.float32)]
    (r,) = exe.run([torch.zeros(4, 3)])
    assert r.shape == (4, 3)
    spec = exe.specialize([og.TensorType((4, 3), og.float32)])
    assert spec.output_types() == [og.TensorType((4, 3), og.float32)]
    with pytest.raises(og.FeedError, match="does not fit"):
        exe.specialize([og.TensorType((4, 2), og.float32)])


def test_executable_is_straight_line_code() -> None:
    g, x, y = _graph()
    exe = g.compile({x: og.TensorType((2, 3), og.float32)}, [y], device="cpu")
    body = exe.source
    assert body.startswith("def run(xs, *") and "for " not in body and "if " not in body
    assert "exp" in str(exe) and "Executable on cpu" in exe.summary()


def test_graph_run_cache_is_bounded_and_reused() -> None:
    g, x, y = _graph()
    g.run({x: torch.zeros(1, 3)}, [y])
    g.run({x: torch.zeros(1, 3)}, [y])
    assert len(g._cache()) == 1
    for n in range(RUN_CACHE_SIZE + 5):
        g.run({x: torch.zeros(n + 2, 3)}, [y])
    assert len(g._cache()) == RUN_CACHE_SIZE


def test_variables_persist_and_assign_in_order() -> None:
    g = og.Graph()
    w = g.variable(torch.zeros(2), name="w")
    before = g.read(w)
    upd = g.assign(w, w + 1.0)
    after = g.read(w)
    r = g.run({}, [w, before, after], [upd])
    assert [t.tolist() for t in r] == [[0, 0], [0, 0], [1, 1]]
    r = g.run({}, [w, before, after], [upd])
    assert [t.tolist() for t in r] == [[1, 1], [1, 1], [2, 2]]
    assert g.variable_value(w).tolist() == [2, 2]
    # without the assign as a target nothing is written
    g.run({}, [after])
    assert g.variable_value(w).tolist() == [2, 2]
    g.set_variable_value(w, torch.tensor([5.0, 6.0]))
    assert g.run({}, [w])[0].tolist() == [5, 6]


def test_assign_type_errors() -> None:
    g = og.Graph()
    w = g.variable(torch.zeros(2, 3))
    with pytest.raises(og.DTypeError, match="int32"):
        g.assign(w, g.constant(np.zeros((2, 3), np.int32)))
    with pytest.raises(og.ShapeError, match="shape"):
        g.assign(w, g.constant(np.zeros((3, 2), np.float32)))
    with pytest.raises(og.GraphError, match="variable"):
        g.assign(g.placeholder((2, 3)), w)


def test_optimization_passes_fold_cse_and_dce() -> None:
    g = og.Graph()
    x = g.placeholder((4,), og.float32, name="x")
    c = g.exp(g.constant(np.ones(4, np.float32))) * 3.0  # all-constant: folded
    a = g.exp(x) + c
    b = g.exp(x) + c  # the same again: CSE
    unused = g.negative(x)  # noqa: F841  (dead)
    exe = g.compile({x: og.TensorType((4,), og.float32)}, [a, b], device="cpu",
                    descriptor=og.CompilationDescriptor(verify_each_pass=True))
    names = [o.op.name for o in exe.program.graph.ops]
    assert names.count("exp") == 1 and names.count("add") == 1 and "negative" not in names
    assert names.count("multiply") == 0  # folded into a constant
    r = exe.run([torch.zeros(4)])
    np.testing.assert_allclose(r[0].numpy(), 1 + 3 * np.e, rtol=1e-6)
    assert torch.equal(r[0], r[1])
    level0 = g.compile({x: og.TensorType((4,), og.float32)}, [a, b], device="cpu",
                       descriptor=og.CompilationDescriptor(optimization_level=0))
    assert [o.op.name for o in level0.program.graph.ops].count("exp") == 3


def test_device_selection() -> None:
    assert str(og.device("cpu")) == "cpu"
    assert og.device("cpu").torch == torch.device("cpu")
    assert og.device().kind in ("cpu", "cuda", "mps")
    with pytest.raises(og.DeviceError):
        og.device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(og.DeviceError, match="no CUDA"):
            og.device("cuda:1")


# ---- bad input: every case raises a clear OpgraphError ---------------------------------------
def test_wrong_feed_shape_and_dtype() -> None:
    g, x, y = _graph()
    with pytest.raises(og.FeedError, match=r"expected float32\(\?, 3\), got float32\(2, 4\)"):
        g.run({x: torch.zeros(2, 4)}, [y])
    with pytest.raises(og.FeedError, match="float64"):
        g.run({x: torch.zeros(2, 3, dtype=torch.float64)}, [y])
    exe = g.compile({x: og.TensorType((2, 3), og.float32)}, [y], device="cpu")
    with pytest.raises(og.FeedError, match=r"%x.*expected float32\(2, 3\), got float32\(3, 3\)"):
        exe.run([torch.zeros(3, 3)])
    with pytest.raises(og.FeedError, match="takes 1 inputs"):
        exe.run([])
    with pytest.raises(og.FeedError, match="torch.Tensor or numpy"):
        exe.run(["text"])


def test_missing_and_unknown_feeds() -> None:
    g, x, y = _graph()
    with pytest.raises(og.FeedError, match="placeholder %x.*not fed"):
        g.run({}, [y])
    with pytest.raises(og.FeedError, match="only placeholders"):
        g.run({y: torch.zeros(2, 3)}, [y])


def test_tensor_from_another_graph() -> None:
    g1, x1, _ = _graph()
    g2, x2, _ = _graph()
    with pytest.raises(og.GraphError, match="another graph"):
        g1.add(x1, x2)
    with pytest.raises(og.GraphError, match="not a tensor of this graph"):
        g1.run({x1: torch.zeros(1, 3)}, [x2])
    with pytest.raises(og.FeedError, match="not a tensor of this graph"):
        g1.run({x2: torch.zeros(1, 3)}, [x2])


def test_incompatible_broadcasting_names_op_and_types() -> None:
    g = og.Graph()
    a, b = g.placeholder((2, 3)), g.placeholder((4,))
    with pytest.raises(og.ShapeError, match=r"add\(float32\(2, 3\), float32\(4,\)\).*do not broadcast"):
        g.add(a, b)


def test_dynamic_dims_checked_at_compile() -> None:
    g = og.Graph()
    a, b = g.placeholder((None,), name="a"), g.placeholder((None,), name="b")
    s = a + b
    with pytest.raises(og.ShapeError, match="do not broadcast"):
        g.run({a: torch.zeros(3), b: torch.zeros(4)}, [s])


def test_bad_descriptor_and_names() -> None:
    with pytest.raises(og.AttributeValueError, match="optimization_level"):
        og.CompilationDescriptor(optimization_level=7)
    g = og.Graph()
    g.placeholder((1,), name="x")
    with pytest.raises(og.GraphError, match="already used"):
        g.placeholder((1,), name="x")
    with pytest.raises(og.GraphError, match="no tensor named"):
        g.tensor("nope")


def test_symbolic_tensor_has_no_truth_value() -> None:
    g, x, y = _graph()
    with pytest.raises(og.GraphError, match="truth value"):
        bool(y)


def test_graph_text_form() -> None:
    g, x, y = _graph()
    text = str(g)
    assert text.startswith("graph {") and "%x: float32(?, 3) = placeholder()" in text
    assert "= exp(%x)" in text
    assert g.placeholders == [x]


def test_shape_of_folds_when_shapes_are_static() -> None:
    g = og.Graph()
    x = g.placeholder((None, 3), og.float32, name="x")
    s = g.shape_of(x) * 2
    exe = g.compile({x: og.TensorType((5, 3), og.float32)}, [s], device="cpu")
    assert [o.op.name for o in exe.program.graph.ops] == ["placeholder", "constant"]
    assert exe.run([torch.zeros(5, 3)])[0].tolist() == [10, 6]
    dyn = g.compile({x: og.TensorType((None, 3), og.float32)}, [s], device="cpu")
    assert "shape_of" in [o.op.name for o in dyn.program.graph.ops]
    assert dyn.run([torch.zeros(4, 3)])[0].tolist() == [8, 6]


def test_results_never_alias_state_or_constants() -> None:
    g = og.Graph()
    w = g.variable(torch.ones(3), name="w")
    c = g.constant(np.ones(3, np.float32))
    x = g.placeholder((3,), og.float32, name="x")
    upd = g.assign(w, x)
    (got_w, got_c) = g.run({}, [w, c])
    got_w.add_(5)
    got_c.add_(5)
    assert g.run({}, [w, c])[0].tolist() == [1, 1, 1] and g.run({}, [c])[0].tolist() == [1, 1, 1]
    fed = torch.full((3,), 2.0)
    g.run({x: fed}, [], [upd])
    fed.mul_(100)
    assert g.variable_value(w).tolist() == [2, 2, 2]


def test_scalars_and_operands_promote_like_numpy() -> None:
    g = og.Graph()
    xf, xi, x64 = g.placeholder((3,)), g.placeholder((3,), og.int32), g.placeholder((3,), og.float64)
    assert (xf + np.float32(2)).dtype is og.float32
    assert (xf + torch.ones(3)).dtype is og.float32
    assert (xi * [1.5, 1.0, 1.0]).dtype is og.float32
    assert (x64 * 1j).dtype is og.complex128
    assert (xi + 1).dtype is og.int32 and (xi + 1.5).dtype is og.float32
    with pytest.raises(og.DTypeError, match="does not fit int32"):
        xi + 2**40
    with pytest.raises(og.DTypeError, match="dtype is required"):
        g.cast(xf, None)


def test_tensors_refuse_iteration_and_len() -> None:
    g = og.Graph()
    x = g.placeholder((None,))
    with pytest.raises(og.GraphError, match="cannot be iterated"):
        list(x)
    with pytest.raises(og.GraphError, match="len"):
        len(x)


def test_numpy_feed_of_wrong_dtype_is_an_error() -> None:
    g, x, y = _graph()
    with pytest.raises(og.FeedError, match="float64"):
        g.run({x: np.zeros((2, 3))}, [y])
    (r,) = g.run({x: [[0.0, 0.0, 0.0]]}, [y])  # a list takes the placeholder's dtype
    assert r.dtype == torch.float32


@pytest.mark.parametrize("dtype", [og.int8, og.int16, og.int32, og.int64])
def test_integer_min_divided_by_minus_one_wraps(dtype: og.DType) -> None:
    # the CPU kernel traps on INT_MIN / -1 (SIGFPE kills the process); C/NumPy wrap to INT_MIN
    lo = int(torch.iinfo(dtype.torch_dtype).min)
    g = og.Graph()
    x = g.placeholder((2,), dtype)
    q, r = g.run({x: [lo, 7]}, [g.divide(x, -1), g.division_no_nan(x, -1)])
    assert q.tolist() == [lo, -7] and r.tolist() == [lo, -7]


def test_feeds_the_targets_do_not_need_are_accepted() -> None:
    g = og.Graph()
    x, unused = g.placeholder((2,), name="x"), g.placeholder((3,), name="unused")
    (r,) = g.run({x: torch.ones(2), unused: torch.ones(3)}, [x * 2.0])
    assert r.tolist() == [2.0, 2.0]


def test_split_sizes_checked_against_a_dynamic_axis() -> None:
    g = og.Graph()
    x = g.placeholder((None,), name="x")
    (part,) = g.split(x, split_sizes=(3,))
    exe = g.compile({x: og.TensorType((None,), og.float32)}, [part], device="cpu")
    assert exe.run([torch.arange(3.0)])[0].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(og.ExecutionError, match="split sizes add up to 3"):
        exe.run([torch.arange(5.0)])


def test_scalar_attributes_must_fit_their_dtype() -> None:
    g = og.Graph()
    i, u = g.placeholder((3,), og.int64), g.placeholder((3,), og.uint8)
    with pytest.raises(og.AttributeValueError, match="on_value 1.5 does not fit dtype int32"):
        g.one_hot(i, 3, on_value=1.5, dtype=og.int32)
    with pytest.raises(og.AttributeValueError, match="on_value 300 does not fit dtype uint8"):
        g.one_hot(i, 3, on_value=300, dtype=og.uint8)
    with pytest.raises(og.AttributeValueError, match="constant_value -1.0 does not fit dtype uint8"):
        g.pad(u, og.PaddingMode.CONSTANT, [1], [1], constant_value=-1)


def test_memory_stats_reflect_freeing_after_last_use() -> None:
    g = og.Graph()
    x = g.placeholder((1024,), og.float32, name="x")
    y = x
    for _ in range(20):
        y = g.exp(y)
    s = g.compile({x: x.type}, [y], device="cpu").memory_stats()
    assert s.unplanned_peak_bytes == 20 * 4096
    assert s.planned_peak_bytes == 2 * 4096  # a chain needs its input and its output alive at once


def test_a_view_of_a_variable_returned_as_output_is_a_copy() -> None:
    g = og.Graph()
    w = g.variable(np.arange(4.0, dtype=np.float32), name="w")
    (r,) = g.run({}, [g.reshape(w, (2, 2))])
    r += 1  # the caller owns the result: the variable must not change
    assert g.variable_value(w).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_interpreter_asked_for_after_triton_was_imported_for_a_gpu_is_refused_clearly() -> None:
    # a fresh process: Triton imported without TRITON_INTERPRET (as torch.compile does), then a fused
    # compile with triton_interpret=True must say why it cannot work instead of failing inside a kernel
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys

    code = (
        "import triton, opgraph as og\n"
        "g = og.Graph(); x = g.placeholder((4,), og.float32)\n"
        "try:\n"
        "    g.compile({x: x.type}, [g.exp(x) * 2.0], device='cpu',\n"
        "              descriptor=og.CompilationDescriptor(fusion=True, triton_interpret=True))\n"
        "except og.DeviceError as e:\n"
        "    print('refused:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "refused:" in out.stdout and "TRITON_INTERPRET=1" in out.stdout, out.stdout + out.stderr


def test_meta_tensors_are_refused_clearly() -> None:
    g = og.Graph()
    x = g.placeholder((3,), og.float32, name="x")
    exe = g.compile({x: x.type}, [x * 2.0], device="cpu")
    with pytest.raises(og.FeedError, match="meta"):  # not taken for a CPU tensor by the fast path
        exe.run([torch.empty(3, device="meta")])


def test_a_handed_over_input_is_freed_after_its_last_use() -> None:
    """With ``run_consuming`` nothing but the run holds an input, which goes once its last reader has run (as eager
    autograd frees a saved activation): the second op sees it gone. ``run`` leaves the caller's list as it was."""
    import weakref

    seen: list[bool] = []
    g = og.Graph()
    x = g.placeholder((4,), og.float32)
    y = g.exp(g.exp(x))  # x is read by the first exp only
    exe = g.compile({x: x.type}, [y], device="cpu", descriptor=og.CompilationDescriptor(fusion=False))
    second = exe._generated.kernels[max(exe._generated.kernels)]

    def spy(*a: Any, **k: Any) -> Any:
        seen.append(ref() is None)
        return second(*a, **k)

    exe._generated.fn.__kwdefaults__[f"k{max(exe._generated.kernels)}"] = spy
    value = torch.zeros(4)
    ref = weakref.ref(value)
    args = [value]
    del value
    torch.testing.assert_close(exe.run_consuming(args)[0], torch.full((4,), math.e))
    assert args == [] and seen == [True]
    kept = [torch.zeros(4)]
    ref = weakref.ref(kept[0])
    exe.run(kept)
    assert len(kept) == 1 and seen == [True, False]
    with pytest.raises(og.FeedError, match="takes a list of inputs"):
        exe.run_consuming((torch.zeros(4),))  # type: ignore[arg-type]
