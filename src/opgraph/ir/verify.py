"""The IR verifier: a list of rules, each a function that yields the problems it finds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..core.errors import OpgraphError, VerificationError

if TYPE_CHECKING:
    from .graph import GraphCore

Rule = Callable[["GraphCore"], Iterator[str]]


def _inputs_defined_before_use(graph: GraphCore) -> Iterator[str]:
    defined: set[int] = set()
    for op in graph.ops:
        for t in op.inputs:
            if t.graph is not graph:
                yield f"%{op.name} uses %{t.name} from another graph"
            elif id(t) not in defined:
                yield f"%{op.name} uses %{t.name} before it is defined"
        defined.update(id(t) for t in op.outputs)


def _types_match_rules(graph: GraphCore) -> Iterator[str]:
    from .graph import infer_types

    for op in graph.ops:
        try:
            expected = infer_types(op.op, op.attrs, tuple(t.type for t in op.inputs), op.payload)
        except OpgraphError as e:
            yield f"%{op.name}: type rule fails: {e}"
            continue
        got = tuple(t.type for t in op.outputs)
        if expected != got:
            shown = ([str(t) for t in got], [str(t) for t in expected])
            yield f"%{op.name}: recorded types {shown[0]} differ from the rule's {shown[1]}"


def _attrs_have_declared_type(graph: GraphCore) -> Iterator[str]:
    for op in graph.ops:
        want = op.op.attrs
        if want is None and op.attrs is not None:
            yield f"%{op.name}: {op.op.name} takes no attributes, has {op.attrs!r}"
        elif want is not None and not isinstance(op.attrs, want):
            yield f"%{op.name}: attributes must be {want.__name__}, got {type(op.attrs).__name__}"


def _unique_names(graph: GraphCore) -> Iterator[str]:
    seen: set[str] = set()
    for op in graph.ops:
        if op.name in seen:
            yield f"the name %{op.name} is used twice"
        seen.add(op.name)


RULES: tuple[Rule, ...] = (_inputs_defined_before_use, _types_match_rules, _attrs_have_declared_type, _unique_names)


def verify_graph(graph: GraphCore, rules: tuple[Rule, ...] = RULES) -> None:
    problems = [p for rule in rules for p in rule(graph)]
    if problems:
        raise VerificationError("graph fails verification:\n  " + "\n  ".join(problems))
