"""``og.torch.explain(model, *example_inputs)``: what the ``opgraph`` backend does with a model.

It runs the model once through ``torch.compile(backend="opgraph")`` while recording every graph the backend
compiles, and asks Dynamo for its graph breaks. The result lists, per graph: the ATen ops, the ones that ran
as themselves (fallbacks, with the reason), the ops of the compiled executable, the fused regions, the
kernels, whether runs replay a CUDA graph (and why not, on CUDA) and the convolutions' layout (NHWC with the
channels-last option, and the transposes left); ``print`` shows it as a table.

    >>> import torch, opgraph as og
    >>> report = og.torch.explain(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU()), torch.randn(2, 4))
    >>> report.graph_breaks, report.fallbacks
    (0, {})
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .backend import GraphReport, recording


def _layout(exe: Any) -> str:
    """The 2-D convolutions' layout ("NHWC (k transposes)": the rank-4 transposes left, ``passes.layout``), or
    "-" for a graph without convolutions."""
    from ...ops.shape import TRANSPOSE
    from ...passes.layout import CONVOLUTIONS_2D

    if exe is None:
        return "-"
    ops = exe.program.graph.ops
    layouts = {getattr(o.attrs, "descriptor", o.attrs).data_layout.value for o in ops if o.op in CONVOLUTIONS_2D}
    if layouts != {"NHWC"}:
        return "/".join(sorted(layouts)) or "-"
    transposes = sum(1 for o in ops if o.op is TRANSPOSE and o.outputs[0].rank == 4)
    return f"NHWC ({transposes} transposes)"


@dataclass
class Explanation:
    graphs: list[GraphReport]
    graph_breaks: int
    break_reasons: list[str] = field(default_factory=list)

    @property
    def fallbacks(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.graphs:
            for k, v in r.fallbacks.items():
                out[k] = out.get(k, 0) + v
        return out

    @property
    def fused_regions(self) -> int:
        return sum(1 for r in self.graphs for k in r.kernels if k.op == "fused_region")

    def __str__(self) -> str:
        from ...cli._table import format_table

        rows, graph_notes = [], []
        for i, r in enumerate(self.graphs):
            kernels = len(r.kernels)
            fused = sum(1 for k in r.kernels if k.op == "fused_region")
            fb = ", ".join(f"{k} x{v}" for k, v in sorted(r.fallbacks.items())) or "-"
            status = r.executable.cuda_graph_status if r.executable is not None else "-"
            if r.executable is not None and r.executable.device.is_cuda and status != "on":
                graph_notes.append(f"graph {i} CUDA graph {status}")  # why a CUDA executable runs op by op
            short = status.split(":")[0].split(" (")[0]  # on / off / pending
            rows.append([str(i), r.kind, str(r.aten_nodes), str(kernels), str(fused), short, _layout(r.executable),
                         fb if r.executable is not None else f"eager: {r.eager_reason}"])
        head = (f"{len(self.graphs)} graph(s) compiled, {self.graph_breaks} graph break(s), "
                f"{sum(self.fallbacks.values())} ATen op(s) run as themselves")
        lines = [head, format_table(["graph", "kind", "ATen ops", "kernels", "fused regions", "CUDA graph",
                                     "layout", "fallbacks"], rows)]
        lines += graph_notes
        lines += [f"break: {b}" for b in self.break_reasons]
        reasons = {k: v for r in self.graphs for k, v in r.reasons.items()}
        lines += [f"{k}: {v}" for k, v in sorted(reasons.items())]
        return "\n".join(lines)


def explain(model: Callable[..., Any], *example_inputs: Any, options: dict[str, Any] | None = None,
            train: bool = False) -> Explanation:
    """Compile and run ``model(*example_inputs)`` once with the opgraph backend (and, with ``train``, a backward
    pass of the output's sum) and report what happened."""
    breaks, reasons = 0, []
    try:
        info = torch._dynamo.explain(model)(*example_inputs)
        breaks = int(info.graph_break_count)
        reasons = [str(b.reason) for b in info.break_reasons]
    except Exception as e:  # explain itself failing is not the model's problem: report it as a break reason
        reasons = [f"torch._dynamo.explain failed: {type(e).__name__}: {e}"]
    torch._dynamo.reset()
    with recording() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = torch.compile(model, backend="opgraph", options={**(options or {}), "warn_fallbacks": False})
        out = fast(*example_inputs)
        if train:
            total = sum(o.float().sum() for o in (out if isinstance(out, (tuple, list)) else [out]))
            total.backward()
    torch._dynamo.reset()
    return Explanation(list(reports), breaks, reasons)


__all__ = ["Explanation", "explain"]
