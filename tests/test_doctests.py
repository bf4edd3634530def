"""Every ``>>>`` example in opgraph's docstrings runs and prints what it says."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import opgraph

MODULES = sorted(m.name for m in pkgutil.walk_packages(opgraph.__path__, "opgraph.")
                 if not m.name.startswith("opgraph.cli"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
