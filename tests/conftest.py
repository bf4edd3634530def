"""Test set-up. Generated Triton kernels run on the CPU under Triton's interpreter, except in a GPU run
(``pytest -m gpu``), where they are compiled for the device. Triton reads ``TRITON_INTERPRET`` when it is
imported and when a function is decorated, so it is set here, before any test module imports triton."""

from __future__ import annotations

import os
import sys

import pytest
import torch


def _gpu_run() -> bool:
    args = sys.argv[1:]
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            expr: str | None = args[i + 1]
        else:
            expr = a[2:] if a.startswith("-m") and len(a) > 2 else None
        if expr is not None and "gpu" in expr and "not gpu" not in expr:
            return True
    return False


if not _gpu_run():
    os.environ["TRITON_INTERPRET"] = "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _cpu_unless_gpu_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests not marked ``gpu`` run on the CPU even where CUDA exists, so one suite means one thing."""
    if "gpu" in request.keywords:
        return
    import opgraph as og
    from opgraph.runtime import graph_methods

    monkeypatch.setattr(graph_methods, "_default_device", lambda: og.device("cpu"))
