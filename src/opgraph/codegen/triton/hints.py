"""Kernel-wide choices the region emitter makes about single loads and ops, kept apart from the emitting itself:

* where a cheaper, approximate expression of an op may stand in (``APPROXIMABLE``, ``error_stays_relative``):
  bfloat16 ``tanh`` by the hardware's ``tanh.approx.f32``, where nothing downstream would cancel or magnify its
  error;
* the L2 eviction hints of row reductions (``eviction_mark``, ``resolve_eviction``): a row walked more than once
  stays in L2 until its last walk, a row-invariant input stays, as Inductor's hints do.

    >>> resolve_eviction(["x = tl.load(in0 + o, mask=m" + eviction_mark(0, False, 0) + ")"])
    ['x = tl.load(in0 + o, mask=m, eviction_policy="evict_last")']
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...ir.graph import Operation, Tensor
from ...ir.opdef import FusionKind
from ...ir.sources import CONSTANT
from ...ops import activation as act
from ...ops import elementwise as ew
from ...ops import unary as un

APPROXIMABLE = frozenset({un.TANH})  # ops with a cheaper expression whose error is relative
# ops through which a relative error stays relative (they scale, pick, convert to a float or contract)
SCALING = frozenset({ew.MULTIPLY, ew.DIVIDE, un.NEGATIVE, un.SQUARE, un.ABS, un.SQRT, un.RSQRT, un.RECIPROCAL,
                     un.TANH, ew.CAST, ew.MAXIMUM, ew.MINIMUM, ew.MAXIMUM_NAN, ew.MINIMUM_NAN, ew.SELECT, ew.CLAMP})
# ops that turn an absolute error of their argument into a relative error of their positive result: as large as the
# argument's error times its size, so taken only where that size is at most EXP_ARGUMENT_BOUND (sigmoid: or where
# the argument is non-negative, where (1 - sigmoid(z)) * z stays under 0.28)
POSITIVE_RESULT = frozenset({un.EXP, un.EXP2, act.SIGMOID})
EXP_ARGUMENT_BOUND = 4.0  # 4 * 2^-11 = 2^-9: still within bfloat16's rounding
_NON_NEGATIVE = frozenset({un.EXP, un.EXP2, act.SIGMOID, un.SQUARE, un.ABS, un.SQRT})


def _constant(t: Tensor) -> Any:
    """A constant's value (a variable's may change), else None."""
    op = t.op
    return op.payload if op.op is CONSTANT and op.payload is not None and op.payload.numel() else None


_DEPTH = 16  # producers looked through by ``bound`` and ``non_negative`` (beyond: nothing known)


def bound(t: Tensor, depth: int = _DEPTH) -> float | None:
    """An upper bound of ``|t|`` read from the ops that make it (None: none known)."""
    if depth <= 0:
        return None
    c = _constant(t)
    if c is not None:
        return float(c.abs().max())
    op, ins = t.op.op, t.op.inputs
    if op in (un.TANH, act.SIGMOID):
        return 1.0
    if op in (un.NEGATIVE, un.ABS) or (op is ew.CAST and t.dtype.is_floating) or op.fusion is FusionKind.INJECTIVE:
        return bound(ins[0], depth - 1) if ins else None
    if op in (ew.MULTIPLY, ew.MAXIMUM, ew.MINIMUM):
        a, b = bound(ins[0], depth - 1), bound(ins[1], depth - 1)
        return None if a is None or b is None else a * b if op is ew.MULTIPLY else max(a, b)
    return None


def non_negative(t: Tensor, depth: int = _DEPTH) -> bool:
    """Whether every element of ``t`` is known to be >= 0 from the ops that make it."""
    if depth <= 0:
        return False
    c = _constant(t)
    if c is not None:
        return bool((c >= 0).all())
    op, ins = t.op.op, t.op.inputs
    if op in _NON_NEGATIVE:
        return True
    if op in (ew.MAXIMUM, ew.MAXIMUM_NAN):
        return non_negative(ins[0], depth - 1) or non_negative(ins[1], depth - 1)
    if op in (ew.MULTIPLY, ew.DIVIDE, ew.ADD):
        return non_negative(ins[0], depth - 1) and non_negative(ins[1], depth - 1)
    return op.fusion is FusionKind.INJECTIVE and bool(ins) and non_negative(ins[0], depth - 1)


def error_stays_relative(op: Operation, ops: Sequence[Operation]) -> bool:
    """Whether a relative error in ``op``'s result stays small and relative within the kernel of ``ops``: it passes
    only through ops that scale, pick or move values, through exponentials of bounded arguments (``POSITIVE_RESULT``)
    and sums of non-negative terms, to stores. A difference, a sum that may cancel, a reduction, a cast to an
    integer or any other op ends it: there it could become a large error of a small result (``1 - t * t`` of tanh's
    and GELU's gradients, ``exp(t) - 2``)."""
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
            kind = user.op
            if kind is ew.CAST and not user.outputs[0].dtype.is_floating:
                return False
            if kind in POSITIVE_RESULT:
                size = bound(t)
                if (size is None or size > EXP_ARGUMENT_BOUND) and not (kind is act.SIGMOID and non_negative(t)):
                    return False
            elif kind is ew.ADD:
                if not all(non_negative(x) for x in user.inputs):
                    return False
            elif kind not in SCALING and kind.fusion is not FusionKind.INJECTIVE:
                return False
            frontier.extend(user.outputs)
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


__all__ = ["APPROXIMABLE", "POSITIVE_RESULT", "SCALING", "bound", "error_stays_relative", "eviction_mark",
           "non_negative", "resolve_eviction"]
