"""Dead-code elimination: keep what the outputs and the targeted side effects need."""

from __future__ import annotations

from .program import DROP, Program, rewrite


def dead_code_elimination(program: Program) -> Program:
    live: set[int] = {id(t.op) for t in program.outputs} | {id(o) for o in program.effects}
    live |= {id(t.op) for t in program.inputs}
    for op in reversed(program.graph.ops):
        if id(op) in live:
            live.update(id(t.op) for t in op.inputs)
    return rewrite(program, lambda op, ins, g: None if id(op) in live else DROP)
