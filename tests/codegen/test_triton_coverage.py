"""Every elementwise op has a Triton expression or is listed as unsupported with a reason."""

from __future__ import annotations

import opgraph  # noqa: F401  (declares every op)
from opgraph.codegen.triton.expr import EXPRESSIONS, UNSUPPORTED
from opgraph.ir.opdef import FusionKind, all_ops


def test_every_elementwise_op_has_an_expression_or_a_reason() -> None:
    missing = [op.name for op in all_ops()
               if op.fusion is FusionKind.ELEMENTWISE and op not in EXPRESSIONS and op not in UNSUPPORTED]
    assert not missing, f"elementwise ops with neither a Triton expression nor an UNSUPPORTED reason: {missing}"


def test_table_is_keyed_by_elementwise_op_objects() -> None:
    for op in (*EXPRESSIONS, *UNSUPPORTED):
        assert op.fusion is FusionKind.ELEMENTWISE, op
    assert not set(EXPRESSIONS) & set(UNSUPPORTED)
    assert all(isinstance(reason, str) and reason for reason in UNSUPPORTED.values())
