"""One generated Python function per executable: straight-line calls of pre-resolved kernels.

Every op's lowering is resolved once, at compile time, into a callable bound to a global name;
the generated body is then one line per op (``t5 = k5(t1, t3)``) with ``del`` after a value's last
use, so running an executable costs a Python call per kernel and nothing else.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..core.errors import GraphError
from ..ir.graph import Operation, Tensor
from ..ir.opdef import LowerContext
from ..ops.state import ASSIGN, CONSTANT, PLACEHOLDER, READ, VARIABLE
from ..passes.program import Program

_counter = itertools.count()


@dataclass
class GeneratedFunction:
    fn: Callable[..., list[torch.Tensor]]
    source: str
    filename: str
    line_ops: dict[int, Operation]  # generated line number -> op, to name the op that failed


def generate(program: Program, device: torch.device, state: dict[str, torch.Tensor]) -> GeneratedFunction:
    """Compile ``program`` into a Python function ``run(*inputs) -> list[Tensor]``."""
    names: dict[int, str] = {}
    env: dict[str, Any] = {"S": state}
    last_use: dict[int, int] = {}
    ops = program.graph.ops
    for i, op in enumerate(ops):
        for t in op.inputs:
            last_use[id(t)] = i
    keep = {id(t) for t in program.outputs}

    for k, t in enumerate(program.inputs):
        names[id(t)] = f"x{k}"
    lines = [f"def run({', '.join(names[id(t)] for t in program.inputs)}):"]
    line_ops: dict[int, Operation] = {}

    def var(t: Tensor) -> str:
        return names[id(t)]

    for i, op in enumerate(ops):
        outs = []
        for t in op.outputs:
            names[id(t)] = f"t{op.id}" if len(op.outputs) == 1 else f"t{op.id}_{t.index}"
            outs.append(names[id(t)])
        if op.op is PLACEHOLDER:
            names[id(op.outputs[0])] = _input_name(program, op)
            continue
        if op.op is CONSTANT:  # bound once as a global; no line of its own
            env[f"c{op.id}"] = op.payload.to(device)  # type: ignore[union-attr]
            names[id(op.outputs[0])] = f"c{op.id}"
            continue
        elif op.op in (VARIABLE, READ):
            var_op = op if op.op is VARIABLE else op.inputs[0].op
            line = f"{outs[0]} = S[{var_op.name!r}]"
        elif op.op is ASSIGN:
            line = f"S[{op.inputs[0].op.name!r}] = {var(op.inputs[1])}"
        else:
            if op.op.lower is None:
                raise GraphError(f"op {op.op.name} has no lowering")
            ctx = LowerContext(op.attrs, tuple(t.type for t in op.inputs), tuple(t.type for t in op.outputs), device)
            env[f"k{op.id}"] = op.op.lower(ctx)
            args = ", ".join(var(t) for t in op.inputs)
            target = outs[0] if len(outs) == 1 else (", ".join(outs) + ("," if len(outs) == 1 else ""))
            line = f"{target} = k{op.id}({args})" if outs else f"k{op.id}({args})"
        lines.append("    " + line)
        line_ops[len(lines)] = op
        dead = [var(t) for t in op.inputs if last_use.get(id(t)) == i and id(t) not in keep
                and t.op.op is not CONSTANT]
        dead += [n for t, n in zip(op.outputs, outs, strict=True) if id(t) not in last_use and id(t) not in keep]
        if dead:
            lines.append("    del " + ", ".join(dict.fromkeys(dead)))
    lines.append("    return [" + ", ".join(var(t) for t in program.outputs) + "]")
    source = "\n".join(lines) + "\n"
    filename = f"<opgraph-executable-{next(_counter)}>"
    exec(compile(source, filename, "exec"), env)  # our own generated source, never user data
    return GeneratedFunction(env["run"], source, filename, line_ops)


def _input_name(program: Program, op: Operation) -> str:
    for k, t in enumerate(program.inputs):
        if t.op is op:
            return f"x{k}"
    raise GraphError(f"placeholder %{op.name} is needed but not fed")
