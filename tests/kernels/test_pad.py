"""``opgraph.kernels.pad`` against ``torch.nn.functional.pad`` (constant padding of the last axis), on the CPU under
Triton's interpreter: left and right padding, rows longer than one block, strided rows, every float dtype, NaN and
infinite fills; and the ``pad`` op's lowering choosing it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

import opgraph as og  # noqa: E402
from opgraph.kernels import pad as pad_kernel  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16],
                         ids=["f64", "f32", "f16", "bf16"])
@pytest.mark.parametrize(("shape", "left", "right"), [((5, 30), 0, 2), ((3, 1001), 3, 5), ((2, 3, 7), 1, 0),
                                                      ((9,), 0, 7), ((4, 2050), 2, 1030)])
def test_matches_torch_pad(dtype: torch.dtype, shape: tuple[int, ...], left: int, right: int) -> None:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    assert pad_kernel.use_kernel(x, left, right, 0.0, interpret=True)
    got = pad_kernel.pad_last_axis(x, left, right)
    assert got.is_contiguous()
    assert torch.equal(got, torch.nn.functional.pad(x, (left, right)))


@pytest.mark.parametrize("value", [float("nan"), float("-inf"), 2.5])
def test_fills_and_strided_rows(value: float) -> None:
    base = torch.randn(6, 40, generator=torch.Generator().manual_seed(1))
    x = base[::2, 3:33]  # rows 80 elements apart, starting at an offset
    got = pad_kernel.pad_last_axis(x, 2, 3, value)
    torch.testing.assert_close(got, torch.nn.functional.pad(x, (2, 3), value=value), equal_nan=True, rtol=0, atol=0)


def test_unevenly_strided_rows_and_other_dtypes_keep_the_fallback() -> None:
    x = torch.randn(4, 6, 5).permute(1, 0, 2)  # rows of the (6 * 4, 5) view are not evenly strided
    assert not pad_kernel.use_kernel(x, 0, 3, interpret=True)
    assert not pad_kernel.use_kernel(torch.randn(4, 5).t(), 0, 3, interpret=True)  # elements not contiguous
    assert not pad_kernel.use_kernel(torch.ones(4, 5, dtype=torch.int32), 0, 3, interpret=True)
    assert not pad_kernel.use_kernel(torch.ones(4, 5, dtype=torch.float64), 0, 3, 0.1, interpret=True)
    assert not pad_kernel.use_kernel(torch.ones(4, 5), 0, 3)  # on the CPU only under the interpreter
    with pytest.raises(ValueError, match="evenly strided"):
        pad_kernel.pad_last_axis(x, 0, 3)
    from opgraph.core.errors import ShapeError

    with pytest.raises(ShapeError, match=r"shape \(6, 4, 5\) with strides \(5, 30, 1\)"):  # an og.OpgraphError
        pad_kernel.pad_last_axis(x, 0, 3)


@pytest.mark.parametrize("mode", [og.PaddingMode.ZERO, og.PaddingMode.CONSTANT])
def test_the_pad_op_under_the_interpreter_uses_the_kernel(mode: og.PaddingMode, monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    calls = []
    real = pad_kernel.pad_last_axis
    monkeypatch.setattr(pad_kernel, "pad_last_axis", lambda *a: calls.append(a[1:]) or real(*a))
    g = og.Graph()
    x = g.placeholder((3, 30), og.bfloat16)
    y = g.pad(x, mode, [0, 1], [0, 2], constant_value=-1.5 if mode is og.PaddingMode.CONSTANT else 0.0)
    desc = og.CompilationDescriptor(triton_interpret=True, fusion=False)
    exe = g.compile({x: x.type}, [y], device="cpu", descriptor=desc)
    feed = torch.randn(3, 30).bfloat16()
    value = -1.5 if mode is og.PaddingMode.CONSTANT else 0.0
    assert torch.equal(exe.run([feed])[0], torch.nn.functional.pad(feed, (1, 2), value=value))
    assert calls == [(1, 2, value)]
    plain = g.compile({x: x.type}, [y], device="cpu", descriptor=og.CompilationDescriptor(fusion=False))
    assert torch.equal(plain.run([feed])[0], exe.run([feed])[0])
    assert len(calls) == 2  # the compilation without the interpreter kept the fallback


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_on_cuda_matches_torch_pad(dtype: torch.dtype) -> None:
    x = torch.randn(513, 30522, device="cuda").to(dtype)  # a vocabulary's rows: 2 bytes short of alignment in bf16
    assert pad_kernel.use_kernel(x, 0, 6)
    assert torch.equal(pad_kernel.pad_last_axis(x, 0, 6), torch.nn.functional.pad(x, (0, 6)))
    y = x[1::2, 5:]  # strided rows at an offset
    assert torch.equal(pad_kernel.pad_last_axis(y, 3, 1, float("-inf")),
                       torch.nn.functional.pad(y, (3, 1), value=float("-inf")))
