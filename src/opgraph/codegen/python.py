"""One generated Python function per executable: straight-line calls of pre-resolved kernels.

Every op's lowering is resolved once, at compile time, into a callable bound to a global name;
the generated body is then one line per op (``v5 = k5(v1, x0)``) with ``del`` after a value's last
use, so running an executable costs a Python call per kernel and nothing else.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..core.errors import ExecutionError, GraphError, OpgraphError
from ..ir.graph import Operation, Tensor
from ..ir.opdef import LowerContext
from ..ir.sources import ASSIGN, CONSTANT, PLACEHOLDER, READ, VARIABLE
from ..passes.memory_plan import MemoryPlan, plan_memory
from ..passes.program import Program

_counter = itertools.count()
_SHARED = (CONSTANT, VARIABLE, READ)  # producers whose value outlives the run
_NO_KERNEL = frozenset({PLACEHOLDER, CONSTANT, VARIABLE, READ, ASSIGN})


@dataclass
class GeneratedFunction:
    fn: Callable[..., list[torch.Tensor]]
    source: str
    filename: str
    line_ops: dict[int, Operation]  # generated line number -> op, to name the op that failed
    kernels: dict[int, Any]  # op id -> the resolved callable (a generated kernel carries ``.source``)
    plan: MemoryPlan | None = None  # liveness, in-place updates and peak bytes (exe.memory_stats())


def generate(program: Program, device: torch.device, state: dict[str, torch.Tensor],
             options: Any = None) -> GeneratedFunction:
    """Compile ``program`` into a Python function ``run(inputs: list) -> list[Tensor]`` that empties ``inputs``.

    Values live in a few reused local names (a value's name goes back to a free list after its last
    use), and a value no output takes the name of is deleted right after its last use, as eager autograd
    frees it. The run empties its ``inputs`` list first, so a caller that hands its own list over lets inputs
    be freed after their last use too (a training step's backward reads the forward's activations). Kernels,
    constants and the state dict are keyword-only defaults, so every lookup in the body is a fast local.

    Memory planning (``passes.memory_plan``): a kernel carrying ``inplace_ok`` (pairs ``(input i, output
    j)``) that the plan lets write output ``j`` into input ``i``'s dead buffer is called with
    ``out=(...)`` (one entry per output, ``None`` where none is given, or where the buffer turns out not
    to be contiguous at run time), and the output takes the input's name. ``optimization_level=0`` writes
    nothing in place. The plan is ``GeneratedFunction.plan``.
    """
    names: dict[int, str] = {}
    bound: dict[str, Any] = {"S": state}
    profiled = bool(getattr(options, "profile_ops", False))
    if profiled:
        bound["_range"] = torch.profiler.record_function
    last_use: dict[int, int] = {}
    ops = program.graph.ops
    for i, op in enumerate(ops):
        for t in op.inputs:
            last_use[id(t)] = i
    keep = {id(t) for t in program.outputs}
    # assigns write variables in place (stable addresses, so CUDA graphs can replay them); a value read
    # from a variable before an assign to it and used after that assign must therefore be a copy
    assign_at: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        if op.op is ASSIGN:
            assign_at.setdefault(op.inputs[0].op.name, []).append(i)
    end = len(ops)

    def snapshot_outlives_assign(var_name: str, at: int, t: Tensor) -> bool:
        until = end if id(t) in keep else last_use.get(id(t), at)
        return any(at < j < until for j in assign_at.get(var_name, ()))

    free: list[str] = []
    slots = itertools.count()

    for k, t in enumerate(program.inputs):
        names[id(t)] = f"x{k}"
    body: list[str] = []
    if program.inputs:  # the inputs come as a list the run empties: a caller that hands its list over
        body.append(f"    {', '.join(f'x{k}' for k in range(len(program.inputs)))}, = xs")  # frees them early
    body.append("    xs.clear()")
    line_ops: dict[int, Operation] = {}

    def out_name(t: Tensor) -> str:
        if id(t) not in last_use and id(t) not in keep:
            return "_"
        names[id(t)] = free.pop() if free else f"v{next(slots)}"
        return names[id(t)]

    for op in ops:  # resolve every kernel first: the memory plan asks them what they allow
        if op.op not in _NO_KERNEL:
            bound[f"k{op.id}"] = _lower(op, device, options)

    def inplace_ok(op: Operation, i: int, j: int) -> bool:
        return (i, j) in getattr(bound[f"k{op.id}"], "inplace_ok", ())

    def takes_out(op: Operation) -> bool:  # such a kernel writes its outputs into new or given buffers
        return op.op not in _NO_KERNEL and hasattr(bound[f"k{op.id}"], "inplace_ok")

    plan = plan_memory(program, inplace_ok if getattr(options, "optimization_level", 1) >= 1 else None, takes_out)

    for i, op in enumerate(ops):
        if op.op is PLACEHOLDER:
            names[id(op.outputs[0])] = _input_name(program, op)
            continue
        if op.op is CONSTANT:  # bound once at compile time; no line of its own
            bound[f"c{op.id}"] = op.payload.to(device)  # type: ignore[union-attr]
            names[id(op.outputs[0])] = f"c{op.id}"
            continue
        args = [names[id(t)] for t in op.inputs]
        released = [t for t in dict.fromkeys(op.inputs)  # inputs whose last use is here
                    if last_use[id(t)] == i and id(t) not in keep and t.op.op is not CONSTANT]
        # an output written into a released input's buffer takes over that input's name
        given = {j: names[id(op.inputs[src])] for j, src in plan.inplace.get(i, {}).items()
                 if any(t is op.inputs[src] for t in released)}
        dead = [names[id(t)] for t in released if names[id(t)] not in given.values()]
        free.extend(dead)
        if op.op in (VARIABLE, READ):
            var_op = op if op.op is VARIABLE else op.inputs[0].op
            copy = ".clone()" if snapshot_outlives_assign(var_op.name, i, op.outputs[0]) else ""
            line = f"{out_name(op.outputs[0])} = S[{var_op.name!r}]{copy}"
        elif op.op is ASSIGN:
            line = f"S[{op.inputs[0].op.name!r}].copy_({args[1]})"
        else:
            if given:  # kernels write outputs contiguously: a strided buffer (a torch op kept its input's
                # strides) is not given, and the kernel allocates instead
                given_out = [f"{given[j]} if {given[j]}.is_contiguous() else None" if j in given else "None"
                             for j in range(len(op.outputs))]
                args.append(f"out=({', '.join(given_out)}{',' if len(given_out) == 1 else ''})")
            call = f"k{op.id}({', '.join(args)})"
            outs = []
            for j, t in enumerate(op.outputs):
                if j not in given:
                    outs.append(out_name(t))
                elif id(t) in last_use or id(t) in keep:
                    names[id(t)] = given[j]
                    outs.append(given[j])
                else:  # written but never read: the buffer's name is free again
                    free.append(given[j])
                    outs.append("_")
            if all(n == "_" for n in outs):
                line = call
            elif len(outs) == 1:
                line = f"{outs[0]} = {call}"
            else:
                line = f"{', '.join(outs)} = {call}"
        if profiled:  # the op's PyTorch calls nest under its name in a profile
            body.append(f"    with _range({f'{op.op.name} %{op.name}'!r}):")
            body.append("        " + line)
        else:
            body.append("    " + line)
        line_ops[len(body) + 1] = op
        # what this op read last goes now, as eager autograd frees it, unless an output took over its name
        taken = {names.get(id(t)) for t in op.outputs}
        gone = [n for n in dead if n not in taken]
        if gone:
            body.append(f"    del {', '.join(gone)}")
    # results never alias state or constants: a caller may modify what it gets back
    body.append("    return [" + ", ".join(names[id(t)] + (".clone()" if _aliases_state(t) else "")
                                       for t in program.outputs) + "]")
    params = ["xs", "*"] + [f"{n}={n}" for n in bound]
    source = f"def run({', '.join(params)}):\n" + "\n".join(body) + "\n"
    filename = f"<opgraph-executable-{next(_counter)}>"
    exec(compile(source, filename, "exec"), bound)  # our own generated source, never user data
    kernels = {int(k[1:]): v for k, v in bound.items() if k.startswith("k")}
    return GeneratedFunction(bound["run"], source, filename, line_ops, kernels, plan)


def _lower(op: Operation, device: torch.device, options: Any) -> Any:
    if op.op.lower is None:
        raise GraphError(f"op {op.op.name} has no lowering")
    constants = tuple(t.op.payload if t.op.op is CONSTANT else None for t in op.inputs)
    ctx = LowerContext(op.attrs, tuple(t.type for t in op.inputs), tuple(t.type for t in op.outputs), device, options,
                       constants)
    try:
        return op.op.lower(ctx)
    except OpgraphError:
        raise
    except Exception as e:  # a lowering that rejects its attributes: name the op, not torch
        shown = ", ".join(str(t.type) for t in op.inputs)
        raise ExecutionError(f"{op.op.name}({shown}) cannot be compiled for {device} in op %{op.name}: "
                             f"{type(e).__name__}: {e}") from None


def _input_name(program: Program, op: Operation) -> str:
    for k, t in enumerate(program.inputs):
        if t.op is op:
            return f"x{k}"
    raise GraphError(f"placeholder %{op.name} is needed but not fed")


def _aliases_state(t: Tensor) -> bool:
    """Whether ``t`` may share memory with a constant or variable (directly or through views)."""
    from ..passes.memory_plan import MAY_RETURN_INPUT, VIEW_OPS

    while t.op.op in VIEW_OPS or t.op.op in MAY_RETURN_INPUT:
        t = t.op.inputs[0]
    return t.op.op in _SHARED
