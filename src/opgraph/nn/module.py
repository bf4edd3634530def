"""``og.nn.Module``: a layer that builds ops into a graph; its weights are the graph's variables.

A module owns no values: ``parameters`` and ``buffers`` are variable tensors of the graph, so the
graph stays the single source of truth (it saves, compiles and runs them like any other variable).
Calling a module builds its ops again, reusing the same variables: build a training graph with
``model.train()`` and an inference one with ``model.eval()`` from one set of weights. Keys follow
PyTorch's ``state_dict`` naming, so ``load_state_dict(torch_module.state_dict())`` copies weights over.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..core.dtype import DType, as_dtype
from ..core.errors import DTypeError, GraphError, ShapeError
from ..ir.graph import Operation, Tensor
from ..runtime.device import device as get_device

if TYPE_CHECKING:
    from ..graph import Graph

# PyTorch buffers with no counterpart here (BatchNorm's batch counter only matters when momentum=None)
_IGNORED_SUFFIXES = ("num_batches_tracked",)


class Module:
    """Base class of the layers: holds variables, child modules, a training flag and update ops.

    >>> import opgraph as og, torch
    >>> g = og.Graph()
    >>> model = og.nn.Sequential(og.nn.Linear(g, 4, 3, name="fc"), og.nn.ReLU())
    >>> [p.name for p in model.parameters]
    ['fc.weight', 'fc.bias']
    >>> list(model.variables)
    ['0.weight', '0.bias']
    """

    graph: Graph | None
    training: bool
    _params: dict[str, Tensor]
    _buffers: dict[str, Tensor]
    _children: dict[str, Module]
    _updates: list[Operation]

    def __init__(self, graph: Graph | None = None) -> None:
        object.__setattr__(self, "graph", graph)
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_updates", [])

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Module):  # child modules register themselves, as in torch.nn.Module
            children = self.__dict__.get("_children")
            if children is None:
                raise GraphError(f"{type(self).__name__}: call super().__init__(graph) before assigning modules")
            children[name] = value
        object.__setattr__(self, name, value)

    # ---- building ------------------------------------------------------------------------------
    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        return self.forward(x, *args, **kwargs)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        """Build this module's ops on ``x``; subclasses define it."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward")

    def _graph(self) -> Graph:
        if self.graph is None:
            raise GraphError(f"{type(self).__name__}: a module with variables needs a graph")
        return self.graph

    def _prefix(self, name: str | None, keys: tuple[str, ...]) -> str:
        """``name``, or the first free ``<class>_<k>`` whose variable names are unused in the graph."""
        if name is not None:
            return name
        base = type(self).__name__.lower()
        for k in range(1 << 30):
            prefix = f"{base}_{k}"
            if not any(_has_name(self._graph(), f"{prefix}.{key}") for key in keys):
                return prefix
        raise GraphError("no free layer name")  # pragma: no cover

    def _parameter(self, prefix: str, key: str, value: torch.Tensor) -> Tensor:
        t = self._graph().variable(value, name=f"{prefix}.{key}")
        self._params[key] = t
        return t

    def _buffer(self, prefix: str, key: str, value: torch.Tensor) -> Tensor:
        t = self._graph().variable(value, name=f"{prefix}.{key}")
        self._buffers[key] = t
        return t

    def _record_updates(self, ops: tuple[Operation, ...] | list[Operation]) -> None:
        self._updates.extend(ops)

    # ---- mode ----------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set the training flag here and in every child (it picks what later calls build); returns self."""
        if not isinstance(mode, bool):
            raise GraphError(f"train: mode must be a bool, got {mode!r}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        """``train(False)``: later calls build inference ops (batch norm reads its running statistics)."""
        return self.train(False)

    # ---- contents ------------------------------------------------------------------------------
    def children(self) -> Iterator[Module]:
        yield from self._children.values()

    def modules(self) -> Iterator[Module]:
        """This module and all below it, depth first."""
        yield self
        for c in self._children.values():
            yield from c.modules()

    def named_variables(self, prefix: str = "") -> Iterator[tuple[str, Tensor, bool]]:
        """``(key, variable, is_parameter)`` in ``state_dict`` order: own parameters, own buffers, children."""
        for k, t in self._params.items():
            yield prefix + k, t, True
        for k, t in self._buffers.items():
            yield prefix + k, t, False
        for name, c in self._children.items():
            yield from c.named_variables(f"{prefix}{name}.")

    @property
    def variables(self) -> dict[str, Tensor]:
        """Every variable (parameters and buffers) by its PyTorch ``state_dict`` key."""
        return {k: t for k, t, _ in self.named_variables()}

    @property
    def named_parameters(self) -> dict[str, Tensor]:
        """The trainable variables by ``state_dict`` key."""
        return {k: t for k, t, is_param in self.named_variables() if is_param}

    @property
    def parameters(self) -> list[Tensor]:
        """The trainable variables (weights, biases, norm scales), each once, in ``state_dict`` order."""
        return list(dict.fromkeys(t for _, t, is_param in self.named_variables() if is_param))

    @property
    def buffers(self) -> list[Tensor]:
        """The non-trainable variables (batch-norm running statistics)."""
        return list(dict.fromkeys(t for _, t, is_param in self.named_variables() if not is_param))

    @property
    def updates(self) -> list[Operation]:
        """The ``assign`` ops that calls in training mode built here and below (running statistics);
        run them through ``target_ops`` with the training step."""
        return list(dict.fromkeys(op for m in self.modules() for op in m._updates))

    # ---- values --------------------------------------------------------------------------------
    def state_dict(self, device: object = None) -> dict[str, torch.Tensor]:
        """Copies of the variables' current values on ``device`` (CPU tensors), by ``state_dict`` key."""
        g = self._graph_of_variables()
        return {k: g.variable_value(t, device).cpu() for k, t in self.variables.items()} if g is not None else {}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """Copy values (e.g. ``torch_module.state_dict()``) into the variables, converted to their dtypes.

        The new values become the variables' initial values and replace their current values on every
        device the graph has run on. ``strict``: the keys must match exactly (PyTorch's
        ``num_batches_tracked`` is ignored).
        """
        own = self.variables
        given = {k: v for k, v in state_dict.items() if not k.endswith(_IGNORED_SUFFIXES)}
        if strict:
            missing, unexpected = sorted(set(own) - set(given)), sorted(set(given) - set(own))
            if missing or unexpected:
                raise GraphError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        for k, value in given.items():
            if k in own:
                _load_variable(own[k], value, k)

    def _graph_of_variables(self) -> Graph | None:
        return next((t.graph for t in self.variables.values()), None)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not self._children:
            return head + ")"
        body = "\n".join(f"  ({k}): " + repr(c).replace("\n", "\n  ") for k, c in self._children.items())
        return f"{head}\n{body}\n)"


def _has_name(g: Graph, name: str) -> bool:
    try:
        g.operation(name)
    except GraphError:
        return False
    return True


def _load_variable(var: Tensor, value: Any, key: str) -> None:
    t = value.detach() if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    if tuple(t.shape) != var.shape:
        raise ShapeError(f"load_state_dict: {key} has shape {tuple(t.shape)}, the variable %{var.name} is {var.type}")
    if t.is_floating_point() != var.dtype.is_floating:
        raise DTypeError(f"load_state_dict: {key} is {t.dtype}, the variable %{var.name} is {var.type}")
    t = t.to("cpu", var.dtype.torch_dtype).clone()
    g = var.graph
    var.op.payload = t  # the initial value: executables compiled later, on any device, start from it
    for dev in list(g._state):
        if var.op.name in g._state[dev]:
            g.set_variable_value(var, t, get_device(dev))


# ---- initialisation (PyTorch's defaults) -------------------------------------------------------
def kaiming_uniform(shape: tuple[int, ...], dtype: DType, generator: torch.Generator | None) -> torch.Tensor:
    """``torch.nn.init.kaiming_uniform_(w, a=sqrt(5))``: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as torch's
    Linear and Conv layers initialise their weights."""
    w = torch.empty(shape, dtype=dtype.torch_dtype)
    return torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=generator)


def bias_uniform(n: int, fan_in: int, dtype: DType, generator: torch.Generator | None) -> torch.Tensor:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)), torch's default bias."""
    bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return torch.nn.init.uniform_(torch.empty(n, dtype=dtype.torch_dtype), -bound, bound, generator=generator)


def float_dtype(dtype: object) -> DType:
    dt = as_dtype(dtype)
    if not dt.is_floating:
        raise DTypeError(f"layer variables must be floating, got {dt.name}")
    return dt


class Lambda(Module):
    """A parameterless module applying ``fn(graph, x)`` (the building block of ReLU, Flatten, ...)."""

    def __init__(self, fn: Callable[[Graph, Tensor], Tensor], label: str = "") -> None:
        super().__init__()
        self._fn = fn
        self._label = label

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Tensor:
        if not isinstance(x, Tensor):
            raise GraphError(f"{type(self).__name__}: expects a graph Tensor, got {type(x).__name__}")
        return self._fn(x.graph, x)

    def extra_repr(self) -> str:
        return self._label


class Sequential(Module):
    """Modules applied in order; their variables are keyed ``"0.weight"``, ``"1.bias"``, ... as in torch.

    >>> import opgraph as og, torch
    >>> g = og.Graph(); x = g.placeholder((2, 4), og.float32)
    >>> model = og.nn.Sequential(og.nn.Linear(g, 4, 8), og.nn.ReLU(), og.nn.Linear(g, 8, 1))
    >>> model(x).shape
    (2, 1)
    """

    def __init__(self, *modules: Module) -> None:
        graphs = {id(m.graph): m.graph for m in modules if m.graph is not None}
        if len(graphs) > 1:
            raise GraphError("Sequential: the modules belong to different graphs")
        super().__init__(next(iter(graphs.values()), None))
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise GraphError(f"Sequential: item {i} is a {type(m).__name__}, not an og.nn.Module")
            setattr(self, str(i), m)

    def __len__(self) -> int:
        return len(self._children)

    def __getitem__(self, i: int) -> Module:
        return list(self._children.values())[i]

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._children.values()))

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        for m in self._children.values():
            x = m(x)
        return x


__all__ = ["Lambda", "Module", "Sequential", "bias_uniform", "float_dtype", "kaiming_uniform"]
