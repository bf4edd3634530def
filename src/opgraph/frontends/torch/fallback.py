"""``torch_fallback``: an ATen op without a converter, run as itself inside an executable.

The op records the ATen op's qualified name (``aten::max_pool3d_with_indices.default``), its arguments as a
JSON template in which tensors are references to the op's inputs, and its output types (taken from the traced
FakeTensors). The lowering resolves the name in ``torch.ops`` (only registered ATen ops can be named, so a saved
graph never runs code of its own) and calls it. Device arguments are replaced by the executable's device.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ...core.dtype import DType
from ...core.errors import AttributeValueError, SerializationError
from ...core.types import TensorType
from ...ir.opdef import FusionKind, LowerContext, OpDef
from ...ops.registry import attrs


@attrs
class FallbackAttrs:
    target: str  # "namespace::name.overload"
    args: str  # JSON: [args (a list), kwargs (a dict)], each value encoded by encode_args ({"in": i}: input i)
    out_shapes: tuple[tuple[int | None, ...], ...]
    out_dtypes: tuple[DType, ...]


def _rule(a: FallbackAttrs, ins: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    if len(a.out_shapes) != len(a.out_dtypes):
        raise AttributeValueError(f"torch_fallback {a.target}: {len(a.out_shapes)} shapes for "
                                  f"{len(a.out_dtypes)} dtypes")
    return tuple(TensorType(s, d) for s, d in zip(a.out_shapes, a.out_dtypes, strict=True))


def resolve(target: str) -> Any:
    """The ``torch.ops`` overload named ``ns::name.overload`` (a SerializationError when there is none)."""
    try:
        ns, rest = target.split("::", 1)
        name, _, overload = rest.partition(".")
        return getattr(getattr(getattr(torch.ops, ns), name), overload or "default")
    except (AttributeError, ValueError, RuntimeError):
        raise SerializationError(f"torch_fallback: no ATen op named {target!r} in this PyTorch") from None


def qualified_name(op: Any) -> str:
    schema = op._schema
    return f"{schema.name}.{schema.overload_name or 'default'}"


# ---- the argument template ------------------------------------------------------------------------------
def encode_args(value: Any, index_of: Callable[[Any], int | None]) -> Any:
    """``value`` as JSON; ``index_of(v)`` is the input number of a graph tensor (None for anything else)."""
    i = index_of(value)
    if i is not None:
        return {"in": i}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (list, tuple)):
        return {"seq": [encode_args(v, index_of) for v in value], "tuple": isinstance(value, tuple)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": True}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    raise TypeError(f"cannot record an argument of type {type(value).__name__}")


def decode_args(value: Any, inputs: Sequence[torch.Tensor], device: torch.device) -> Any:
    if isinstance(value, dict):
        if "in" in value:
            return inputs[value["in"]]
        if "seq" in value:
            items = [decode_args(v, inputs, device) for v in value["seq"]]
            return tuple(items) if value["tuple"] else items
        if "float" in value:
            return float(value["float"])
        if "device" in value:
            return device
        for key in ("dtype", "layout", "memory_format"):
            if key in value:
                found = getattr(torch, value[key], None)
                if not isinstance(found, (torch.dtype, torch.layout, torch.memory_format)):
                    raise SerializationError(f"torch_fallback: unknown {key} {value[key]!r}")
                return found
        raise SerializationError(f"torch_fallback: unknown argument record {value!r}")
    if isinstance(value, list):
        return [decode_args(v, inputs, device) for v in value]
    return value


def _lower(ctx: LowerContext) -> Callable[..., Any]:
    a: FallbackAttrs = ctx.attrs
    op = resolve(a.target)
    template = json.loads(a.args)
    device = ctx.device
    several = len(a.out_dtypes) != 1

    def run(*xs: torch.Tensor) -> Any:
        args = decode_args(template[0], xs, device)
        kwargs = {k: decode_args(v, xs, device) for k, v in template[1].items()}
        out = op(*args, **kwargs)
        if several:
            return tuple(out)
        return out[0] if isinstance(out, (tuple, list)) else out

    return run


TORCH_FALLBACK = OpDef("torch_fallback", infer=_rule, lower=_lower, attrs=FallbackAttrs, fusion=FusionKind.OPAQUE,
                       differentiable=False,
                       doc="an ATen op without a converter, run as itself (made by the PyTorch frontend)")
