"""Max pooling over H and W with PyTorch's indices (``h * W + w`` in each channel's plane), forward and backward,
for activations stored channels-last (NHWC), where PyTorch's CUDA kernels are slow: on an H200 its NHWC backward
took 0.91 ms for ResNet-50's stem pool at batch 128 in bf16, where moving its bytes at copy bandwidth takes ~0.11 ms
(RESULTS.md, eighth session). These kernels take forward + backward 1.6-3.2x less time than PyTorch's there and at
VGG16's pools (``benchmarks/max_pool.py``, ninth session). With PyTorch's int64 index Inductor's is faster at VGG16's
float32 pools; storing 8-bit window offsets instead (``local``, as Inductor does) they take 1.1-2.4x less time than
Inductor's in every case (fourteenth session).

The forward gives each program a tile of output positions x channels (channels innermost, so loads and stores
are contiguous) and walks the window, keeping PyTorch's argmax rules: the first maximum wins, a NaN wins and a
later NaN replaces it, and a window of -inf points at its first element inside the image. The backward gathers
instead of scattering: each input element checks the (at most ``ceil(window / stride)`` per dim) windows that
cover it and sums the gradients of those whose index names it; no atomics, deterministic.

A window of -inf points at its first element inside the image, as PyTorch's NCHW and CPU kernels do; PyTorch's
NHWC CUDA kernel points it at element 0 instead (whose gradient then lands outside the window). The kernels keep
the first rule, in every layout.

The kernels read and write at the tensors' strides (any layout works). While ``ENABLED``, the lowering of
``max_pool2d_return_indices`` and ``max_pool2d_gradient`` uses them for channels-last tensors on CUDA, or on the
CPU under Triton's interpreter when the compilation asks for it (``use_kernels``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from collections.abc import Sequence
from typing import Any

import torch

# on: faster than PyTorch's kernels in every case of benchmarks/max_pool.py (H200: 1.6-3.2x forward + backward,
# RESULTS.md ninth session); OPGRAPH_MAX_POOL_KERNELS=0 turns them off (a model's A/B timing)
ENABLED = os.environ.get("OPGRAPH_MAX_POOL_KERNELS", "1") != "0"
Window = tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]  # kernel, stride, pad, dilation
BLOCK_P, BLOCK_C = 32, 64  # positions x channels a program: 16 elements a thread with 4 warps
MAX_WINDOW = 64  # window elements the kernels unroll; larger (global) windows keep PyTorch's kernels
_kernels: dict[str, Any] = {}


def use_kernels(x: torch.Tensor, window: Window, other_numel: int, interpret: bool = False) -> bool:
    """These kernels replace PyTorch's for ``x`` pooled over ``window``: ``x`` stored channels-last on CUDA, or on
    the CPU when kernels run in Triton's interpreter (``CompilationDescriptor(triton_interpret=True)``); the window
    unrolled in at most ``MAX_WINDOW`` steps (and as many covering windows per input element in the backward);
    ``x`` and the other tensor (the output, or dx) of ``other_numel`` elements with 32-bit offsets; Triton
    installed, and not switched off."""
    # the interpreter only where Triton was set up for it (the compilation sets TRITON_INTERPRET when fusing)
    on_device = x.is_cuda or (interpret and x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1")
    (kh, kw), *_ = window
    reach_h, reach_w = _reach(window)
    return (ENABLED and on_device and x.dim() == 4 and not x.is_contiguous()
            and x.is_contiguous(memory_format=torch.channels_last) and max(x.numel(), other_numel) < 2**31
            and kh * kw <= MAX_WINDOW and reach_h * reach_w <= MAX_WINDOW and _triton_installed())


def _reach(window: Window) -> tuple[int, int]:
    """Output positions per dim whose windows can cover one input element: ceil(dilated window / stride)."""
    (kh, kw), (sh, sw), _, (dh, dw) = window
    return -(-((kh - 1) * dh + 1) // sh), -(-((kw - 1) * dw + 1) // sw)


@functools.cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def _channels_last(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    n, c, h, w = shape
    return torch.empty((n, h, w, c), dtype=dtype, device=device).permute(0, 3, 1, 2)


def forward(x: torch.Tensor, window: Window, out_hw: tuple[int, int],
            index_dtype: torch.dtype = torch.int64, local: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, indices)`` of max pooling ``x`` (N, C, H, W) over ``window`` (kernel, stride, padding, dilation,
    each (along H, along W)) into ``out_hw`` positions; both results stored channels-last. An index is PyTorch's
    ``h * W + w``, or with ``local`` the offset ``i * kW + j`` in the window (``torch.int8`` holds those of windows
    of up to 128 elements).

    Under Triton's interpreter (``TRITON_INTERPRET=1``) on the CPU, or on a GPU:

    >>> x = torch.arange(16.0).reshape(1, 1, 4, 4)
    >>> v, i = forward(x, ((2, 2), (2, 2), (0, 0), (1, 1)), (2, 2))
    >>> v.flatten().tolist(), i.flatten().tolist()
    ([5.0, 7.0, 13.0, 15.0], [5, 7, 13, 15])
    >>> forward(x, ((2, 2), (2, 2), (0, 0), (1, 1)), (2, 2), torch.int8, local=True)[1].flatten().tolist()
    [3, 3, 3, 3]
    """
    k = _load()
    n, c, h, w = x.shape
    oh, ow = out_hw
    values = _channels_last((n, c, oh, ow), x.dtype, x.device)
    indices = _channels_last((n, c, oh, ow), index_dtype, x.device)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = window
    positions = n * oh * ow
    if positions and c:
        grid = (-(-positions // BLOCK_P), -(-c // BLOCK_C))
        with _on(x):
            k["forward"][grid](x, values, indices, positions, c, h, w, oh, ow, *x.stride(), *values.stride(),
                               KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw, DH=dh, DW=dw,
                               WIDE=x.dtype == torch.float64, LOCAL=local, BLOCK_P=BLOCK_P, BLOCK_C=BLOCK_C,
                               num_warps=4)
    return values, indices


def backward(grad: torch.Tensor, indices: torch.Tensor, in_hw: tuple[int, int], window: Window,
             local: bool = False) -> torch.Tensor:
    """The gradient of max pooling with respect to its input (N, C, H, W), stored channels-last: each element gets
    the sum of ``grad`` over the windows whose index in ``indices`` (``forward``'s, ``local`` as there) names it."""
    k = _load()
    n, c, oh, ow = grad.shape
    h, w = in_hw
    dx = _channels_last((n, c, h, w), grad.dtype, grad.device)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = window
    positions = n * h * w
    if positions and c:
        grid = (-(-positions // BLOCK_P), -(-c // BLOCK_C))
        reach_h, reach_w = _reach(window)
        with _on(grad):
            k["backward"][grid](grad, indices, dx, positions, c, h, w, oh, ow, *grad.stride(), *indices.stride(),
                                *dx.stride(), KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw, DH=dh, DW=dw, RH=reach_h,
                                RW=reach_w, WIDE=grad.dtype == torch.float64, LOCAL=local, BLOCK_P=BLOCK_P,
                                BLOCK_C=BLOCK_C, num_warps=4)
    return dx


def _on(t: torch.Tensor) -> contextlib.AbstractContextManager[object]:
    """Launch on ``t``'s GPU (Triton launches on the current one)."""
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _load() -> dict[str, Any]:
    """The jitted kernels, defined on first use (Triton is imported only then)."""
    if not _kernels:
        from . import _max_pool_triton as kt

        _kernels.update(forward=kt.max_pool2d_forward, backward=kt.max_pool2d_backward)
    return _kernels


__all__ = ["ENABLED", "MAX_WINDOW", "backward", "forward", "use_kernels"]
