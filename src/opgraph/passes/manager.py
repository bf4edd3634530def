"""The pass manager: named ``Program -> Program`` passes, with verification and timing hooks."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.errors import VerificationError
from .program import Program

PassFn = Callable[[Program], Program]


@dataclass(frozen=True)
class Pass:
    name: str
    run: PassFn


@dataclass(frozen=True)
class PassRecord:
    """One line of an executable's pass log: what ran, how long, ops before and after."""

    name: str
    seconds: float
    ops_before: int
    ops_after: int

    def __str__(self) -> str:
        return f"{self.name:<32} {self.ops_before:>6} -> {self.ops_after:<6} ops  {self.seconds * 1e3:8.2f} ms"


def run_pipeline(program: Program, passes: Sequence[Pass], verify_each: bool = False,
                 log: list[PassRecord] | None = None) -> Program:
    """Run ``passes`` in order; with ``verify_each`` the verifier runs after every pass."""
    for p in passes:
        before = len(program.graph)
        t0 = time.perf_counter()
        program = p.run(program)
        if log is not None:
            log.append(PassRecord(p.name, time.perf_counter() - t0, before, len(program.graph)))
        if verify_each:
            try:
                program.graph.verify()
            except VerificationError as e:
                raise VerificationError(f"after pass {p.name!r}: {e}") from None
    return program
