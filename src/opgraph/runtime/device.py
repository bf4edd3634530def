"""Devices: ``og.device()`` picks CUDA, then Apple's MPS, then the CPU."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.errors import DeviceError

_KINDS = ("cpu", "cuda", "mps")


@dataclass(frozen=True)
class Device:
    """A place where executables run. ``dev.torch`` is the matching ``torch.device``.

    >>> import opgraph as og
    >>> str(og.device("cpu"))
    'cpu'
    """

    kind: str
    index: int | None = None

    @property
    def torch(self) -> torch.device:
        return torch.device(self.kind if self.index is None else f"{self.kind}:{self.index}")

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    def __repr__(self) -> str:
        return f"og.device({str(self)!r})"

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def synchronize(self) -> None:
        """Wait for all work queued on this device."""
        if self.kind == "cuda":
            torch.cuda.synchronize(self.torch)
        elif self.kind == "mps":
            torch.mps.synchronize()


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def device(spec: object = None) -> Device:
    """The device named by ``spec`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``, a ``torch.device``
    or a ``Device``), or the best one present when ``spec`` is None."""
    if isinstance(spec, Device):
        return spec
    if spec is None:
        if torch.cuda.is_available():
            return Device("cuda", torch.cuda.current_device())
        return Device("mps") if _mps_available() else Device("cpu")
    try:
        td = torch.device(spec)  # type: ignore[call-overload]
    except (RuntimeError, TypeError):
        raise DeviceError(f"unknown device {spec!r}; use 'cpu', 'cuda', 'cuda:N' or 'mps'") from None
    if td.type not in _KINDS:
        raise DeviceError(f"device type {td.type!r} is not supported; use one of {_KINDS}")
    if td.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device {spec!r} asked for, but no CUDA device is present")
        index = td.index if td.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise DeviceError(f"device {spec!r}: only {torch.cuda.device_count()} CUDA device(s) present")
        return Device("cuda", index)
    if td.type == "mps" and not _mps_available():
        raise DeviceError("device 'mps' asked for, but MPS is not available")
    return Device(td.type, None if td.type != "cuda" else td.index)
