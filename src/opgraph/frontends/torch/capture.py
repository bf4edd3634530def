"""Rewrites of Dynamo's FX graphs before AOTAutograd traces them.

``F.scaled_dot_product_attention`` is CompositeImplicitAutograd: traced by AOTAutograd it becomes the kernel
PyTorch picks for the fake inputs, often its math formulation (matmuls and a softmax), and opgraph's fused
attention would never see it. ``capture_attention`` replaces Dynamo's calls of it by ``opgraph::attention``
(``custom_ops.py``), which AOTAutograd keeps whole, forward and backward.

``F.max_pool2d`` in a training step saves PyTorch's int64 argmax for its backward; ``capture_max_pool`` replaces
Dynamo's calls of it by ``opgraph::max_pool2d`` (``pool_ops.py``), which saves 8-bit window offsets instead.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from ...ops.pooling import offsets_dtype
from .custom_ops import ATTENTION
from .pool_ops import MAX_POOL2D

# what Dynamo records for ``F.scaled_dot_product_attention`` (the same builtin as ``torch._C._nn``'s)
SDPA_TARGETS = frozenset({torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention})
_POSITIONAL = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
_DEFAULTS: dict[str, Any] = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None,
                             "enable_gqa": False}
_KEPT_META = ("stack_trace", "nn_module_stack")


def _arguments(node: torch.fx.Node) -> dict[str, Any] | None:
    """The call's arguments by name with defaults filled in; None for a call this rewrite leaves alone."""
    if len(node.args) > len(_POSITIONAL):
        return None
    found = dict(zip(_POSITIONAL, node.args, strict=False))
    for name, value in node.kwargs.items():
        if name in found or (name not in _POSITIONAL and name not in _DEFAULTS):
            return None
        found[name] = value
    if any(name not in found for name in _POSITIONAL[:3]):
        return None
    return {**_DEFAULTS, **found}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _known_equal(a: Any, b: Any) -> bool:
    """``a == b`` for sizes, without adding a guard on symbolic ones (unknown: False)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(a == b))


def _value(arg: Any) -> Any:
    return arg.meta.get("example_value", arg.meta.get("val")) if isinstance(arg, torch.fx.Node) else None


def _mask_fits(q: Any, k: Any, v: Any, mask: Any) -> bool:
    """The mask is bool or floating and broadcasts to the scores ``(*batch, L, S)`` without widening them (the
    op's result has the shape of query, key and value alone)."""
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        return False
    lead = max(q.dim(), k.dim(), v.dim()) - 2
    if mask.dim() > lead + 2:
        return False

    def sizes(t: Any, at: int) -> list[Any]:  # t's leading dim aligned with position ``at`` of ``lead``
        i = at - (lead - (t.dim() - 2))
        return [t.shape[i]] if i >= 0 else []

    targets = [sizes(q, i) + sizes(k, i) + sizes(v, i) for i in range(lead)] + [[q.shape[-2]], [k.shape[-2]]]
    for d, want in zip(mask.shape, targets[len(targets) - mask.dim():], strict=True):
        if not (_known_equal(d, 1) or any(_known_equal(d, w) for w in want)):
            return False
    return True


def _capturable(args: dict[str, Any]) -> bool:
    dropout, causal, scale, mask = args["dropout_p"], args["is_causal"], args["scale"], args["attn_mask"]
    if not (_number(dropout) and dropout == 0) or args["enable_gqa"] is not False:
        return False
    if not isinstance(causal, bool) or not (scale is None or _number(scale)):
        return False
    if causal and mask is not None:  # PyTorch refuses both: left to raise as it does
        return False
    q, k, v = (_value(args[n]) for n in ("query", "key", "value"))
    if not all(isinstance(t, torch.Tensor) and not t.is_nested and t.dim() >= 2 for t in (q, k, v)):
        return False
    if mask is None:
        return True
    m = _value(mask)
    return isinstance(m, torch.Tensor) and not m.is_nested and _mask_fits(q, k, v, m)


def capture_attention(gm: torch.fx.GraphModule) -> int:
    """Replace each ``F.scaled_dot_product_attention`` call of Dynamo's graph ``gm`` without dropout and grouped
    query heads (``enable_gqa``) by ``torch.ops.opgraph.attention(q, k, v, attn_mask, is_causal, scale)[0]``;
    returns how many were replaced (``gm`` is recompiled when any was).

    >>> import torch, torch.nn.functional as F
    >>> from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    >>> gm = torch.fx.symbolic_trace(lambda q: F.scaled_dot_product_attention(q, q, q, scale=0.5))
    >>> FakeTensorProp(gm).propagate(torch.randn(1, 2, 4, 8)).shape  # the example values Dynamo records
    torch.Size([1, 2, 4, 8])
    >>> capture_attention(gm), [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    (1, ['opgraph.attention.default', '<built-in function getitem>'])
    """
    return _rewrite_calls(gm, SDPA_TARGETS, ATTENTION, _attention_call)


def _attention_call(node: torch.fx.Node) -> tuple[Any, ...] | None:
    """``opgraph::attention``'s arguments for a call this rewrite takes, else None."""
    args = _arguments(node)
    if args is None or not _capturable(args):
        return None
    return (args["query"], args["key"], args["value"], args["attn_mask"], args["is_causal"],
            None if args["scale"] is None else float(args["scale"]))


def _rewrite_calls(gm: torch.fx.GraphModule, targets: frozenset[Any], op: Any,
                   arguments: Callable[[torch.fx.Node], tuple[Any, ...] | None]) -> int:
    """Each call of one of ``targets`` for which ``arguments`` gives ``op``'s arguments, replaced by ``op``'s first
    result; the number replaced (``gm`` recompiled when any was)."""
    replaced = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in targets:
            continue
        args = arguments(node)
        if args is None:
            continue
        _replace(gm, node, op, args)
        replaced += 1
    if replaced:
        gm.graph.lint()
        gm.recompile()
    return replaced


def _replace(gm: torch.fx.GraphModule, node: torch.fx.Node, op: Any, args: tuple[Any, ...]) -> None:
    """``node`` replaced by the first result of ``op(*args)``, with its source metadata and example value."""
    with gm.graph.inserting_before(node):
        call = gm.graph.call_function(op, args)
        out = gm.graph.call_function(operator.getitem, (call, 0))
    for key in _KEPT_META:
        if key in node.meta:
            call.meta[key] = out.meta[key] = node.meta[key]
    if "example_value" in node.meta:
        out.meta["example_value"] = node.meta["example_value"]
    node.replace_all_uses_with(out)
    gm.graph.erase_node(node)


# what Dynamo records for ``F.max_pool2d`` (and ``nn.MaxPool2d``) and for ``torch.max_pool2d``
MAX_POOL_TARGETS = frozenset({torch.nn.functional.max_pool2d, torch.max_pool2d})
_POOL_POSITIONAL = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")


def _pair(value: Any, default: list[int] | None = None) -> list[int] | None:
    """A window argument as two ints (one int or a pair; ``default`` for None or empty); None when not static."""
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return default
    v = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(v) == 1:
        v = v * 2
    if len(v) != 2 or any(isinstance(e, bool) or not isinstance(e, int) for e in v):
        return None
    return v


def _pool_arguments(node: torch.fx.Node) -> tuple[Any, ...] | None:
    """(input, kernel, stride, padding, dilation, ceil_mode) of a call this rewrite takes; None for any other: one
    that returns indices, window arguments that are not static ints, an input that is not a static 3-D or 4-D
    floating tensor (dynamic shapes keep PyTorch's op)."""
    if len(node.args) > len(_POOL_POSITIONAL):
        return None
    found = dict(zip(_POOL_POSITIONAL, node.args, strict=False))
    for name, value in node.kwargs.items():
        if name in found or name not in _POOL_POSITIONAL:
            return None
        found[name] = value
    x = _value(found.get("input"))
    ceil, indices = found.get("ceil_mode", False), found.get("return_indices", False)
    if not isinstance(x, torch.Tensor) or x.dim() not in (3, 4) or not x.is_floating_point() or \
            not all(isinstance(d, int) for d in x.shape) or indices is not False or not isinstance(ceil, bool):
        return None
    kernel = _pair(found.get("kernel_size"))
    if kernel is None:
        return None
    stride, padding, dilation = (_pair(found.get("stride"), kernel), _pair(found.get("padding", 0), [0, 0]),
                                 _pair(found.get("dilation", 1), [1, 1]))
    if stride is None or padding is None or dilation is None or offsets_dtype(kernel[0] * kernel[1]) is None:
        return None
    return found["input"], kernel, stride, padding, dilation, ceil


def capture_max_pool(gm: torch.fx.GraphModule) -> int:
    """Replace each ``F.max_pool2d`` / ``torch.max_pool2d`` call of Dynamo's graph ``gm`` (static shapes, no
    indices asked for) by ``torch.ops.opgraph.max_pool2d(...)[0]``; returns how many were replaced (``gm`` is
    recompiled when any was).

    >>> import torch, torch.nn.functional as F
    >>> from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    >>> gm = torch.fx.symbolic_trace(lambda x: F.max_pool2d(x, 2))
    >>> FakeTensorProp(gm).propagate(torch.randn(1, 2, 4, 4)).shape
    torch.Size([1, 2, 2, 2])
    >>> capture_max_pool(gm), [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    (1, ['opgraph.max_pool2d.default', '<built-in function getitem>'])
    """
    return _rewrite_calls(gm, MAX_POOL_TARGETS, MAX_POOL2D, _pool_arguments)


__all__ = ["MAX_POOL_TARGETS", "SDPA_TARGETS", "capture_attention", "capture_max_pool"]
