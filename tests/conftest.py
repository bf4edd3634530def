from __future__ import annotations

import pytest
import torch


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
