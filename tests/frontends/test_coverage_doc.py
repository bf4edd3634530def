"""docs/torch_converters.md is the generated converter table (for the PyTorch version it was made with)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from opgraph.frontends.torch.coverage import core_aten_ops, coverage_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "torch_converters.md"


def test_the_docs_table_is_current() -> None:
    text = DOC.read_text()
    made_with = re.search(r"in PyTorch ([0-9.]+)\)", text)
    assert made_with is not None
    if made_with.group(1) != torch.__version__.split("+")[0]:
        pytest.skip(f"the table was made with PyTorch {made_with.group(1)}")
    regenerate = "python -m opgraph.frontends.torch.coverage > docs/torch_converters.md"
    assert text == coverage_markdown(), f"the table is out of date: {regenerate}"


def test_the_core_set_is_found() -> None:
    names = {str(op) for op in core_aten_ops()}
    assert {"aten.add.Tensor", "aten.convolution.default", "aten._softmax.default"} <= names
