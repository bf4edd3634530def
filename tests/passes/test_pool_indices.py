"""passes/pool_indices.py: max pooling whose indices only its gradients read (or nothing) keeps 8-bit window offsets;
indices that leave the program, or that another op reads, stay PyTorch's. Values and gradients are the same as the
unoptimised run's, op by op (PyTorch's kernel, offsets derived from its index) and in the max-pool kernels under
Triton's interpreter (channels-last feeds)."""

from __future__ import annotations

import pytest
import torch

import opgraph as og
from opgraph.kernels import max_pool
from opgraph.passes.pool_indices import compact_pool_indices
from opgraph.passes.program import Program

M = og.PoolingReturnIndicesMode


def _descriptor(k: int = 3, s: int = 2, p: int = 1, **kw: object) -> og.Pooling2dDescriptor:
    return og.Pooling2dDescriptor(k, k, s, s, padding_left=p, padding_right=p, padding_top=p, padding_bottom=p,
                                  return_indices_mode=M.GLOBAL_FLATTEN_2D, return_indices_data_type=og.int64, **kw)


def _pool_and_gradient(d: og.Pooling2dDescriptor, shape: tuple[int, ...] = (2, 3, 9, 9), indices_out: bool = False,
                       read_elsewhere: bool = False) -> tuple[og.Graph, list[og.Tensor], list[og.Tensor]]:
    g = og.Graph()
    x = g.placeholder(shape, og.float32, name="x")
    y, i = g.max_pool2d_return_indices(x, d)
    gy = g.placeholder(y.shape, og.float32, name="gy")
    dx = g.max_pool2d_gradient(gy, i, x, d)
    outs = [y, dx]
    if indices_out:
        outs.append(i)
    if read_elsewhere:
        outs.append(g.cast(i, og.float32))
    return g, [x, gy], outs


def _modes(g: og.Graph, xs: list[og.Tensor], outs: list[og.Tensor]) -> list[tuple[str, str]]:
    after = compact_pool_indices(Program(g, xs, outs, []))
    after.graph.verify()
    return [(o.op.name, (o.attrs if o.op.name.endswith("indices") else o.attrs.descriptor).return_indices_mode.name)
            for o in after.graph.ops if o.op.name.startswith("max_pool")]


def test_indices_only_the_gradient_reads_become_window_offsets() -> None:
    g, xs, outs = _pool_and_gradient(_descriptor())
    assert _modes(g, xs, outs) == [("max_pool2d_return_indices", "LOCAL_FLATTEN_2D"),
                                   ("max_pool2d_gradient", "LOCAL_FLATTEN_2D")]
    after = compact_pool_indices(Program(g, xs, outs, []))
    (pool,) = [o for o in after.graph.ops if o.op.name == "max_pool2d_return_indices"]
    assert pool.outputs[1].dtype is og.int8
    # inference: nothing reads them
    g = og.Graph()
    x = g.placeholder((1, 2, 8, 8))
    y, _ = g.max_pool2d_return_indices(x, _descriptor(2, 2, 0))
    assert _modes(g, [x], [y]) == [("max_pool2d_return_indices", "LOCAL_FLATTEN_2D")]


@pytest.mark.parametrize("case", ["indices_out", "read_elsewhere", "channels_last_descriptor", "int16_window"])
def test_indices_seen_elsewhere_stay_pytorchs(case: str) -> None:
    d = _descriptor()
    if case == "channels_last_descriptor":  # TensorFlow's index, (h * W + w) * C + c
        d = og.Pooling2dDescriptor(3, 3, 2, 2, data_layout=og.TensorLayout.NHWC,
                                   return_indices_mode=M.GLOBAL_FLATTEN_3D)
    shape = (2, 9, 9, 3) if case == "channels_last_descriptor" else (2, 3, 9, 9)
    if case == "int16_window":  # 12 x 12 offsets do not fit 8 bits: 16
        g, xs, outs = _pool_and_gradient(_descriptor(12, 1, 0), (1, 2, 13, 13))
        after = compact_pool_indices(Program(g, xs, outs, []))
        assert [o.outputs[1].dtype for o in after.graph.ops if o.op.name == "max_pool2d_return_indices"] == [og.int16]
        return
    g, xs, outs = _pool_and_gradient(d, shape, indices_out=case == "indices_out",
                                     read_elsewhere=case == "read_elsewhere")
    assert {mode for _, mode in _modes(g, xs, outs)} == {d.return_indices_mode.name}


@pytest.mark.parametrize("window", [(3, 2, 1), (2, 2, 0), (3, 1, 1)], ids=["stem", "vgg", "overlapping"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_values_and_gradients_unchanged(window: tuple[int, int, int], channels_last: bool,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The compacted graph (compiled for the interpreter, where the pass runs) against the unoptimised run; with
    channels-last feeds the max-pool kernels compute the offsets."""
    pytest.importorskip("triton")
    monkeypatch.setattr(max_pool, "ENABLED", True)
    calls: list[bool] = []
    fwd = max_pool.forward
    monkeypatch.setattr(max_pool, "forward", lambda *a, **kw: (calls.append(kw.get("local", False)), fwd(*a, **kw))[1])
    g, xs, outs = _pool_and_gradient(_descriptor(*window), (2, 5, 9, 9))
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (2, 5, 9, 9), generator=gen).float()  # ties in most windows
    gy = torch.randn(tuple(outs[0].shape), generator=gen)  # type: ignore[arg-type]
    if channels_last:
        x, gy = (t.contiguous(memory_format=torch.channels_last) for t in (x, gy))
    types = {t: t.type for t in xs}
    want = g.compile(types, outs, descriptor=og.CompilationDescriptor(optimization_level=0)).run([x, gy])
    exe = g.compile(types, outs, descriptor=og.CompilationDescriptor(triton_interpret=True))
    assert any(o.op.name == "max_pool2d_return_indices" and o.outputs[1].dtype is og.int8
               for o in exe.program.graph.ops)
    got = exe.run([x, gy])
    for w, r in zip(want, got, strict=True):
        torch.testing.assert_close(r, w, rtol=0, atol=0)
    assert calls == ([True] if channels_last else [])
