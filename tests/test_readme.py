"""The README's Python code blocks run as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no python code blocks"
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)


def test_readme_commands_match_ci() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    text = README.read_text()
    assert 'pip install -e ".[test]" && pytest' in text and 'pip install -e ".[test]" && pytest' in ci
    assert "pip install -e . && opgraph demo" in text


def test_readme_lists_every_environment_switch() -> None:
    """Each ``OPGRAPH_*`` variable the package reads has a row in the README's table of switches."""
    src = README.parent / "src" / "opgraph"
    read = {m for path in src.rglob("*.py") for m in re.findall(r"\bOPGRAPH_[A-Z_]+\b", path.read_text())}
    rows = set(re.findall(r"^\| `(OPGRAPH_[A-Z_]+)` \|", README.read_text(), re.M))
    assert read and read == rows, (sorted(read - rows), sorted(rows - read))
