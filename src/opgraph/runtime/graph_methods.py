"""Graph methods that compile and run: ``compile``, ``run`` (with a bounded cache), ``save``/``load``."""

from __future__ import annotations

import functools
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from ..core.errors import FeedError, GraphError
from ..core.types import TensorType
from ..ir.graph import GraphCore, Operation, Tensor
from ..ir.serialize import load_graph, save_graph
from ..ops.state import expect_variable, to_torch
from .compile import CompilationDescriptor
from .device import Device
from .device import device as get_device
from .executable import Executable

G = TypeVar("G", bound="RuntimeMethods")
RUN_CACHE_SIZE = 32
_DEFAULT_DESCRIPTOR = CompilationDescriptor()


@functools.cache
def _default_device() -> Device:
    """``og.device()``, probed once (probing CUDA costs microseconds per call)."""
    return get_device(None)


class RuntimeMethods(GraphCore):
    """``compile``/``run`` on a graph; ``run`` keeps the last ``RUN_CACHE_SIZE`` executables."""

    _run_cache: OrderedDict[Any, Executable]

    def compile(self, feeds: Mapping[Tensor, TensorType], targets: Sequence[Tensor] = (),
                target_ops: Sequence[Operation] = (), *, device: object = None,
                descriptor: CompilationDescriptor | None = None) -> Executable:
        """Compile ``targets`` and ``target_ops`` for ``feeds`` (placeholder -> ``TensorType``).

        >>> import opgraph as og
        >>> g = og.Graph(); x = g.placeholder((None, 4), og.float32, name="x")
        >>> exe = g.compile({x: og.TensorType((2, 4), og.float32)}, [g.exp(x)], device="cpu")
        >>> exe.output_types()
        [TensorType((2, 4), opgraph.float32)]
        """
        feeds = dict(feeds)
        for t, ty in feeds.items():
            if not isinstance(ty, TensorType):
                raise FeedError(f"compile: feeds map placeholders to og.TensorType, got {type(ty).__name__}"
                                f" for {t!r}")
        return Executable(self, feeds, list(targets), list(target_ops),
                          _default_device() if device is None else get_device(device),
                          descriptor or CompilationDescriptor())

    def run(self, feeds: Mapping[Tensor, Any] | None = None, targets: Sequence[Tensor] = (),
            target_ops: Sequence[Operation] = (), *, device: object = None,
            descriptor: CompilationDescriptor | None = None) -> list[torch.Tensor]:
        """Compile (once per input types and device) and run; returns the target values.

        >>> import opgraph as og, numpy as np
        >>> g = og.Graph(); x = g.placeholder((2,), og.float32)
        >>> g.run({x: np.array([1, 2], np.float32)}, [x * 2])[0].tolist()
        [2.0, 4.0]
        """
        feeds = feeds or {}
        # lists and scalars take the placeholder's dtype; arrays keep theirs (a mismatch is an error)
        values = [v if isinstance(v, torch.Tensor) else
                  to_torch(v, None if isinstance(v, np.ndarray | np.generic) or not isinstance(t, Tensor) else t.dtype)
                  for t, v in feeds.items()]
        dev = _default_device() if device is None else get_device(device)
        desc = descriptor or _DEFAULT_DESCRIPTOR
        # key on raw shapes and dtypes; TensorTypes are built only when compiling
        key = (*map(id, feeds), *[(v.dtype, v.shape) for v in values], None, *map(id, targets), None,
               *map(id, target_ops), dev, desc)
        cache = self._cache()
        exe = cache.get(key)
        if exe is None:
            types = [TensorType.of(v) for v in values]
            exe = self.compile(dict(zip(feeds, types, strict=True)), targets, target_ops, device=dev,
                               descriptor=desc)
            cache[key] = exe
            if len(cache) > RUN_CACHE_SIZE:
                cache.popitem(last=False)
        else:
            cache.move_to_end(key)
        return exe.run(values)

    def _cache(self) -> OrderedDict[Any, Executable]:
        if not hasattr(self, "_run_cache"):
            self._run_cache = OrderedDict()
        return self._run_cache

    # ---- state -----------------------------------------------------------------------------
    def variable_value(self, variable: Tensor, device: object = None) -> torch.Tensor:
        """A copy of ``variable``'s current value on ``device`` (its initial value if never run there)."""
        expect_variable(variable, "variable_value")
        value = self._state.get(str(get_device(device)), {}).get(variable.op.name)
        return (value if value is not None else variable.op.payload).clone()  # type: ignore[union-attr]

    def set_variable_value(self, variable: Tensor, value: Any, device: object = None) -> None:
        """Overwrite ``variable``'s value on ``device`` (shape and dtype must match)."""
        expect_variable(variable, "set_variable_value")
        t = to_torch(value) if not isinstance(value, torch.Tensor) else value.detach()
        if TensorType.of(t) != variable.type:
            raise FeedError(f"set_variable_value: %{variable.name} is {variable.type}, got {TensorType.of(t)}")
        dev: Device = get_device(device)
        state = self._state.setdefault(str(dev), {})
        current = state.get(variable.op.name)
        if current is not None:  # in place: executables (and captured CUDA graphs) hold this tensor
            current.copy_(t.to(dev.torch))
        else:
            state[variable.op.name] = t.to(dev.torch).clone()

    # ---- files -----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Save as a directory holding ``graph.json`` and ``weights.safetensors`` (no pickle)."""
        save_graph(self, path)

    @classmethod
    def load(cls: type[G], path: str | os.PathLike[str]) -> G:
        """Load a graph saved with ``save``; a corrupt file raises ``og.SerializationError``."""
        if not isinstance(cls, type) or not issubclass(cls, GraphCore):
            raise GraphError("load is a classmethod of og.Graph")
        return load_graph(cls, path)
