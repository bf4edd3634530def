"""Kernel-wide choices the region emitter makes about single loads and ops, kept apart from the emitting itself:

* where a cheaper, approximate expression of an op may stand in (``APPROXIMABLE``, ``error_stays_relative``):
  bfloat16 ``tanh`` by the hardware's ``tanh.approx.f32``, where no sum downstream would cancel its error;
* the L2 eviction hints of row reductions (``eviction_mark``, ``resolve_eviction``): a row walked more than once
  stays in L2 until its last walk, a row-invariant input stays, as Inductor's hints do.

    >>> resolve_eviction(["x = tl.load(in0 + o, mask=m" + eviction_mark(0, False, 0) + ")"])
    ['x = tl.load(in0 + o, mask=m, eviction_policy="evict_last")']
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...ir.graph import Operation
from ...ir.opdef import FusionKind
from ...ops import activation as act
from ...ops import elementwise as ew
from ...ops import unary as un

APPROXIMABLE = frozenset({un.TANH})  # ops with a cheaper expression whose error is relative
# ops through which a relative error stays relative (they scale, pick, convert or contract)
SCALING = frozenset({ew.MULTIPLY, ew.DIVIDE, un.NEGATIVE, un.SQUARE, un.ABS, un.SQRT, un.RSQRT, un.RECIPROCAL,
                     un.TANH, ew.CAST, ew.MAXIMUM, ew.MINIMUM, ew.MAXIMUM_NAN, ew.MINIMUM_NAN, ew.SELECT, ew.CLAMP})
# ops that turn the error of their argument into a relative error of a positive result (exp(1.5 t): 1.5 times it)
POSITIVE_RESULT = frozenset({un.EXP, un.EXP2, act.SIGMOID})


def error_stays_relative(op: Operation, ops: Sequence[Operation]) -> bool:
    """Whether a relative error in ``op``'s result stays relative within the kernel of ``ops``: through the ops that
    only scale, pick or move values it reaches stores and exponentials (whose positive results then carry it as a
    relative error), and no sum, difference or reduction (``1 - t``, ``1 - t * t`` of tanh's and GELU's gradients,
    a row sum), where it would become an absolute error against a smaller result."""
    users: dict[int, list[Operation]] = {}
    for o in ops:
        for t in o.inputs:
            users.setdefault(id(t), []).append(o)
    frontier, seen = [op.outputs[0]], set()
    while frontier:
        t = frontier.pop()
        for user in users.get(id(t), ()):
            if id(user) in seen:
                continue
            seen.add(id(user))
            if user.op in SCALING or user.op.fusion is FusionKind.INJECTIVE:
                frontier.extend(user.outputs)
            elif user.op not in POSITIVE_RESULT:
                return False
    return True


EVICT_MARK = "@@evict@@"
_EVICT = re.compile(f"{EVICT_MARK}(\\d+)([rc])(\\d+){EVICT_MARK}")


def eviction_mark(i: int, by_row: bool, loop: int) -> str:
    """The mark ``resolve_eviction`` reads, put inside a load of input ``i`` in the loop numbered ``loop`` (0: in
    no loop): ``by_row`` for a row's elements, else a row-invariant input's."""
    return f"{EVICT_MARK}{i}{'r' if by_row else 'c'}{loop}{EVICT_MARK}"


def resolve_eviction(lines: Sequence[str]) -> list[str]:
    """The eviction marks in a kernel's ``lines`` as hints: a row that the kernel walks in more than one loop stays
    in L2 until its last walk (``evict_last``: the next walk finds it there), whose loads let it go first
    (``evict_first``), leaving L2 to the others; a row-invariant input (a norm's weight) stays; a row walked once
    keeps the default. With them bfloat16 layer_norm at 32k went from 0.74 to 0.82 of copy on the H200
    (RESULTS.md, eighteenth session)."""
    text = "\n".join(lines)
    marks = list(_EVICT.finditer(text))
    if not marks:
        return list(lines)
    walks: dict[str, set[int]] = {}
    for m in marks:
        if m.group(2) == "r" and int(m.group(3)):
            walks.setdefault(m.group(1), set()).add(int(m.group(3)))
    out, last = [], 0
    for m in marks:
        i, kind, loop = m.group(1), m.group(2), int(m.group(3))
        hint = ""
        if kind == "c":
            hint = ', eviction_policy="evict_last"'
        elif len(walks.get(i, ())) > 1:  # walked more than once: kept until the last walk
            hint = f', eviction_policy="{"evict_first" if loop == max(walks[i]) else "evict_last"}"'
        out.append(text[last:m.start()] + hint)
        last = m.end()
    out.append(text[last:])
    return "".join(out).split("\n")


__all__ = ["APPROXIMABLE", "POSITIVE_RESULT", "SCALING", "error_stays_relative", "eviction_mark", "resolve_eviction"]
