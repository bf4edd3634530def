"""Shared checks for the PyTorch frontend: a module (or function) through ``torch.compile(backend="opgraph")``
against eager PyTorch, inference and one training step, with the graphs' fallbacks recorded."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from opgraph.frontends.torch import GraphReport, TorchOptions, compile_fx, recording

OPTIONS = {"warn_fallbacks": False}


def fallbacks(reports: Sequence[GraphReport]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in reports:
        for k, v in r.fallbacks.items():
            out[k] = out.get(k, 0) + v
    return out


def compiled(fn: Callable[..., Any], options: dict[str, Any] | None = None) -> Callable[..., Any]:
    torch._dynamo.reset()
    return torch.compile(fn, backend="opgraph", options={**OPTIONS, **(options or {})})


def check_aten(fn: Callable[..., Any], *inputs: Any, op: Any = None, want: Any = None, tracing_mode: str = "real",
               rtol: float = 1e-5, atol: float = 1e-6, expect_fallbacks: dict[str, int] | None = None) -> None:
    """``fn``'s ATen graph (traced without decomposition; it must contain ``op`` when given) compiled by the
    backend's ``compile_fx`` equals ``want`` (default: ``fn`` run eagerly) in every result; the ATen ops that
    fell back are exactly ``expect_fallbacks`` (default: none)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda *xs: fn(*xs), tracing_mode=tracing_mode)(*inputs)  # defaults are not inputs
    if op is not None:
        assert any(n.target is op for n in gm.graph.nodes), gm.graph
    with recording() as reports:
        run = compile_fx(gm, list(inputs), TorchOptions(warn_fallbacks=False))
    assert fallbacks(reports) == (expect_fallbacks or {}), [r.reasons for r in reports]
    want = fn(*inputs) if want is None else want
    torch.testing.assert_close(run(list(inputs)), list(want) if isinstance(want, (tuple, list)) else [want],
                               rtol=rtol, atol=atol, equal_nan=True)


def fell_back(fn: Callable[..., Any], *inputs: Any) -> tuple[Any, list[GraphReport]]:
    """``fn(*inputs)`` through the backend with its fallback warnings silenced, and the graphs' reports."""
    with recording() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = compiled(fn)(*inputs)
    return out, reports


def check_inference(fn: Callable[..., Any], *inputs: Any, rtol: float = 1e-5, atol: float = 1e-6,
                    allow: Sequence[str] = (), options: dict[str, Any] | None = None) -> list[GraphReport]:
    """``fn(*inputs)`` compiled (with the backend's ``options``) equals eager (under ``torch.no_grad``: an inference
    graph); no ATen op falls back except those in ``allow``. Returns the reports."""
    with torch.no_grad():
        want = fn(*inputs)
    with recording() as reports, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        got = compiled(fn, options)(*inputs)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    extra = {k: v for k, v in fallbacks(reports).items() if k not in allow}
    assert not extra, f"ATen ops fell back: {extra}"
    assert reports and all(r.executable is not None for r in reports), [r.eager_reason for r in reports]
    return reports


def check_training(model: torch.nn.Module, *inputs: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-6,
                   allow: Sequence[str] = (), loss: Callable[[Any], torch.Tensor] | None = None) -> list[GraphReport]:
    """Loss, gradients, buffers and one SGD step of the compiled module equal eager's."""
    loss = loss or (lambda out: out.float().square().mean())
    ref = copy.deepcopy(model)
    mine = copy.deepcopy(model)
    with recording() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = compiled(mine)
        got = loss(fast(*inputs))
        got.backward()
    want = loss(ref(*inputs))
    want.backward()
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    for (name, p), q in zip(mine.named_parameters(), ref.parameters(), strict=True):
        # AOTAutograd gives zeros where eager leaves None (a parameter feeding only an output the loss ignores)
        a, b = p.grad, q.grad
        if a is None and b is None:
            continue
        a = a if a is not None else torch.zeros_like(b)
        b = b if b is not None else torch.zeros_like(a)
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")
    for (name, b), c in zip(mine.named_buffers(), ref.buffers(), strict=True):
        torch.testing.assert_close(b, c, rtol=rtol, atol=atol, msg=lambda m, n=name: f"buffer {n}: {m}")
    for opt_model in (mine, ref):
        torch.optim.SGD(opt_model.parameters(), lr=0.1).step()
    for p, q in zip(mine.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=rtol, atol=atol)
    extra = {k: v for k, v in fallbacks(reports).items() if k not in allow}
    assert not extra, f"ATen ops fell back: {extra}"
    assert {r.kind for r in reports} >= {"forward", "backward"}, [r.kind for r in reports]
    return reports


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = want.double().norm().item()
    return (got.double() - want.double()).norm().item() / (scale if scale > 0 else 1.0)


def check_training_against_float64(model: torch.nn.Module, *inputs: torch.Tensor, factor: float = 8.0,
                                   floor: float = 1e-4, allow: Sequence[str] = (),
                                   autocast: bool = False, options: dict[str, Any] | None = None) -> list[GraphReport]:
    """One training step of the compiled module against eager float64 as the oracle: the loss, every gradient,
    buffer and SGD-updated parameter of opgraph may be at most ``factor`` times as far (relative L2 error) from
    float64 as eager PyTorch's at the model's precision, or within ``floor``. For deep models where rounding
    alone moves individual gradient elements of float32 more than a fixed tolerance allows. ``autocast``: opgraph
    and eager step under bfloat16 autocast (the oracle still in float64). ``options``: the backend's."""
    loss = (lambda out: out.double().square().mean())
    runs = {}
    reports: list[GraphReport] = []
    for name in ("opgraph", "eager", "float64"):
        m = copy.deepcopy(model)
        xs = inputs
        if name == "float64":
            m, xs = m.double(), tuple(x.double() if x.is_floating_point() else x for x in inputs)
        fn = m
        cast = torch.autocast(xs[0].device.type, dtype=torch.bfloat16, enabled=autocast and name != "float64")
        if name == "opgraph":
            with recording() as reports, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn = compiled(m, options)
                with cast:
                    value = loss(fn(*xs))
                value.backward()
        else:
            with cast:
                value = loss(fn(*xs))
            value.backward()
        grads = {k: p.grad if p.grad is not None else torch.zeros_like(p) for k, p in m.named_parameters()}
        buffers = {k: b for k, b in m.named_buffers() if b.is_floating_point()}
        torch.optim.SGD(m.parameters(), lr=0.1).step()
        runs[name] = {"loss": {"": value.detach()}, "gradient": grads, "buffer": buffers,
                      "updated": dict(m.named_parameters())}
    for kind, oracle in runs["float64"].items():
        for key, want in oracle.items():
            mine = _relative_error(runs["opgraph"][kind][key], want)
            theirs = _relative_error(runs["eager"][kind][key], want)
            assert mine <= max(factor * theirs, floor), (
                f"{kind} {key}: opgraph is {mine:.2e} from float64, eager {theirs:.2e}")
    extra = {k: v for k, v in fallbacks(reports).items() if k not in allow}
    assert not extra, f"ATen ops fell back: {extra}"
    assert {r.kind for r in reports} >= {"forward", "backward"}, [r.kind for r in reports]
    return reports
