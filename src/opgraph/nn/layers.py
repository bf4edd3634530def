"""Layers with PyTorch's shapes, defaults and initialisations, built from graph ops.

Layers with variables take the graph first (``og.nn.Linear(g, 784, 10, name="fc1")``) and create
their variables there, named ``<name>.<key>``; parameterless ones (``ReLU``, ``Flatten``,
``MaxPool2d``, ``Dropout``) take the graph of their input. ``generator`` (a ``torch.Generator``)
makes the initial values reproducible; without it torch's global generator is used, so
``torch.manual_seed(s)`` before building gives the values ``torch.nn`` would.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..core.dtype import float32
from ..core.errors import AttributeValueError, GraphError, ShapeError
from ..ir.graph import Tensor
from ..ops.conv import Conv2dDescriptor
from ..ops.pooling import Pooling2dDescriptor
from .module import Lambda, Module, bias_uniform, float_dtype, kaiming_uniform

if TYPE_CHECKING:
    from ..graph import Graph

Generator = torch.Generator | None


def _pair(v: int | Sequence[int], what: str) -> tuple[int, int]:
    t = (v, v) if isinstance(v, int) else tuple(v)
    if len(t) != 2 or not all(isinstance(i, int) and not isinstance(i, bool) for i in t):
        raise AttributeValueError(f"{what} must be an int or a pair of ints, got {v!r}")
    return t


def _positive(v: object, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise AttributeValueError(f"{what} must be an int >= 1, got {v!r}")
    return v


def _expect_tensor(layer: Module, x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise GraphError(f"{type(layer).__name__}: expects a graph Tensor, got {type(x).__name__}")
    if layer.graph is not None and x.graph is not layer.graph:
        raise GraphError(f"{type(layer).__name__}: %{x.name} belongs to another graph than the layer's variables")
    return x


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` (out_features, in_features), as ``torch.nn.Linear``.

    >>> import opgraph as og, torch
    >>> g = og.Graph(); fc = og.nn.Linear(g, 3, 2, name="fc", generator=torch.Generator().manual_seed(0))
    >>> [p.shape for p in fc.parameters], fc(g.placeholder((5, 3))).shape
    ([(2, 3), (2,)], (5, 2))
    """

    def __init__(self, graph: Graph, in_features: int, out_features: int, bias: bool = True, *,
                 dtype: object = float32, generator: Generator = None, name: str | None = None) -> None:
        super().__init__(graph)
        self.in_features = _positive(in_features, "Linear: in_features")
        self.out_features = _positive(out_features, "Linear: out_features")
        dt = float_dtype(dtype)
        prefix = self._prefix(name, ("weight", "bias"))
        self.weight = self._parameter(prefix, "weight", kaiming_uniform((out_features, in_features), dt, generator))
        self.bias = (self._parameter(prefix, "bias", bias_uniform(out_features, in_features, dt, generator))
                     if bias else None)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Tensor:
        g = self._graph()
        y = g.matmul(_expect_tensor(self, x), g.transpose(self.weight, (1, 0)))
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Conv2d(Module):
    """2-D convolution of NCHW input, weight (out, in / groups, kH, kW), as ``torch.nn.Conv2d``
    (zero padding given as an int or an (h, w) pair)."""

    def __init__(self, graph: Graph, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                 dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True, *, dtype: object = float32,
                 generator: Generator = None, name: str | None = None) -> None:
        super().__init__(graph)
        self.in_channels = _positive(in_channels, "Conv2d: in_channels")
        self.out_channels = _positive(out_channels, "Conv2d: out_channels")
        groups = _positive(groups, "Conv2d: groups")
        if in_channels % groups or out_channels % groups:
            raise AttributeValueError(f"Conv2d: groups={groups} must divide in_channels={in_channels} "
                                      f"and out_channels={out_channels}")
        kh, kw = self.kernel_size = _pair(kernel_size, "Conv2d: kernel_size")
        ph, pw = _pair(padding, "Conv2d: padding")
        self.descriptor = Conv2dDescriptor(strides=_pair(stride, "Conv2d: stride"),
                                           dilation_rates=_pair(dilation, "Conv2d: dilation"),
                                           padding_left=pw, padding_right=pw, padding_top=ph, padding_bottom=ph,
                                           groups=groups)
        dt = float_dtype(dtype)
        prefix = self._prefix(name, ("weight", "bias"))
        fan_in = in_channels // groups * kh * kw
        self.weight = self._parameter(prefix, "weight",
                                      kaiming_uniform((out_channels, in_channels // groups, kh, kw), dt, generator))
        self.bias = (self._parameter(prefix, "bias", bias_uniform(out_channels, fan_in, dt, generator))
                     if bias else None)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Tensor:
        g = self._graph()
        y = g.conv2d(_expect_tensor(self, x), self.weight, self.descriptor)
        return y if self.bias is None else y + g.reshape(self.bias, (self.out_channels, 1, 1))

    def extra_repr(self) -> str:
        d = self.descriptor
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={d.strides}, "
                f"padding={(d.padding_top, d.padding_left)}")


class _BatchNorm(Module):
    """Batch normalisation over axis 1; ``weight``/``bias`` (ones/zeros) are parameters, ``running_mean``/
    ``running_var`` (zeros/ones) buffers. A call in training mode records the running-statistics
    updates in ``updates``; one in eval mode reads the running statistics."""

    _ranks: tuple[int, ...] = ()

    def __init__(self, graph: Graph, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, *, dtype: object = float32, name: str | None = None) -> None:
        super().__init__(graph)
        self.num_features = n = _positive(num_features, f"{type(self).__name__}: num_features")
        self.eps, self.momentum = eps, momentum
        dt = float_dtype(dtype)
        prefix = self._prefix(name, ("weight", "bias", "running_mean", "running_var"))
        td = dt.torch_dtype
        self.weight = self._parameter(prefix, "weight", torch.ones(n, dtype=td)) if affine else None
        self.bias = self._parameter(prefix, "bias", torch.zeros(n, dtype=td)) if affine else None
        self.running_mean = self._buffer(prefix, "running_mean", torch.zeros(n, dtype=td))
        self.running_var = self._buffer(prefix, "running_var", torch.ones(n, dtype=td))

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Tensor:
        x = _expect_tensor(self, x)
        if x.rank not in self._ranks:
            raise ShapeError(f"{type(self).__name__}: expects an input of rank {' or '.join(map(str, self._ranks))}, "
                             f"got {x.type}")
        y, updates = self._graph().batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                              training=self.training, momentum=self.momentum, epsilon=self.eps)
        self._record_updates(updates)
        return y

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.weight is not None}"


class BatchNorm1d(_BatchNorm):
    """``torch.nn.BatchNorm1d``: (N, C) or (N, C, L) input."""

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """``torch.nn.BatchNorm2d``: (N, C, H, W) input.

    >>> import opgraph as og, torch
    >>> g = og.Graph(); bn = og.nn.BatchNorm2d(g, 3, name="bn")
    >>> y = bn(g.placeholder((2, 3, 4, 4)))
    >>> [op.op.name for op in bn.updates], list(bn.variables)
    (['assign', 'assign'], ['weight', 'bias', 'running_mean', 'running_var'])
    """

    _ranks = (4,)


class LayerNorm(Module):
    """``torch.nn.LayerNorm``: normalise over the trailing ``normalized_shape`` dims; weight ones, bias zeros."""

    def __init__(self, graph: Graph, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, *, dtype: object = float32,
                 name: str | None = None) -> None:
        super().__init__(graph)
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape = tuple(_positive(d, "LayerNorm: normalized_shape") for d in shape)
        self.eps = eps
        td = float_dtype(dtype).torch_dtype
        prefix = self._prefix(name, ("weight", "bias"))
        self.weight = self._parameter(prefix, "weight", torch.ones(shape, dtype=td)) if elementwise_affine else None
        self.bias = (self._parameter(prefix, "bias", torch.zeros(shape, dtype=td))
                     if elementwise_affine and bias else None)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Tensor:
        x = _expect_tensor(self, x)
        k = len(self.normalized_shape)
        if x.shape[x.rank - k:] != self.normalized_shape and None not in x.shape[x.rank - k:]:
            raise ShapeError(f"LayerNorm: expects trailing dims {self.normalized_shape}, got {x.type}")
        return self._graph().layer_norm(x, tuple(range(-k, 0)), self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class Embedding(Module):
    """``torch.nn.Embedding``: rows of ``weight`` (num_embeddings, embedding_dim), initialised N(0, 1),
    gathered at integer indices."""

    def __init__(self, graph: Graph, num_embeddings: int, embedding_dim: int, *, dtype: object = float32,
                 generator: Generator = None, name: str | None = None) -> None:
        super().__init__(graph)
        self.num_embeddings = _positive(num_embeddings, "Embedding: num_embeddings")
        self.embedding_dim = _positive(embedding_dim, "Embedding: embedding_dim")
        w = torch.empty(num_embeddings, embedding_dim, dtype=float_dtype(dtype).torch_dtype)
        self.weight = self._parameter(self._prefix(name, ("weight",)), "weight",
                                      torch.nn.init.normal_(w, generator=generator))

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Tensor:
        return self._graph().gather(self.weight, _expect_tensor(self, x), axis=0)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class Dropout(Module):
    """``torch.nn.Dropout``: the identity in eval mode or with ``p == 0``; random masks come with the
    random ops, so training with ``p > 0`` raises for now."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise AttributeValueError(f"Dropout: p must be a number in [0, 1], got {p!r}")
        self.p = float(p)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Tensor:
        x = _expect_tensor(self, x)
        if self.training and self.p > 0:
            raise GraphError(f"Dropout(p={self.p}) in training mode needs random ops; random ops come later "
                             "(use p=0 or eval mode)")
        return x

    def extra_repr(self) -> str:
        return f"p={self.p}"


class MaxPool2d(Module):
    """``torch.nn.MaxPool2d`` on NCHW input (``stride`` defaults to ``kernel_size``; padding counts as -inf)."""

    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False) -> None:
        super().__init__()
        kh, kw = _pair(kernel_size, "MaxPool2d: kernel_size")
        sh, sw = _pair(kernel_size if stride is None else stride, "MaxPool2d: stride")
        ph, pw = _pair(padding, "MaxPool2d: padding")
        dh, dw = _pair(dilation, "MaxPool2d: dilation")
        if 2 * ph > kh or 2 * pw > kw:
            raise AttributeValueError(f"MaxPool2d: padding {(ph, pw)} must be at most half the kernel {(kh, kw)}")
        self.descriptor = Pooling2dDescriptor(kw, kh, sw, sh, dw, dh, pw, pw, ph, ph, ceil_mode=ceil_mode)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Tensor:
        x = _expect_tensor(self, x)
        return x.graph.max_pool2d(x, self.descriptor)

    def extra_repr(self) -> str:
        d = self.descriptor
        return f"kernel_size={d.kernel_sizes}, stride={d.strides}"


class ReLU(Lambda):
    """``max(x, 0)``."""

    def __init__(self) -> None:
        super().__init__(lambda g, x: g.relu(x))


class Flatten(Module):
    """``torch.nn.Flatten``: dims ``start_dim`` to ``end_dim`` merged into one."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Tensor:
        x = _expect_tensor(self, x)
        g, r = x.graph, max(x.rank, 1)
        s, e = self.start_dim % r, self.end_dim % r
        if s > e:
            raise ShapeError(f"Flatten: start_dim {self.start_dim} comes after end_dim {self.end_dim} for {x.type}")
        if s == 1 and e == x.rank - 1:
            return g.flatten(x, 1)  # MPSGraph's flatten2D is exactly this case, dynamic dims included
        merged = x.shape[s:e + 1]
        size = math.prod(d for d in merged if d is not None) if None not in merged else -1
        shape = [d if d is not None else -1 for d in x.shape[:s]] + [size] + \
                [d if d is not None else -1 for d in x.shape[e + 1:]]
        if shape.count(-1) > 1:
            raise ShapeError(f"Flatten: cannot flatten dims {s}..{e} of {x.type} with more than one dynamic dim")
        return g.reshape(x, shape)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


__all__ = ["BatchNorm1d", "BatchNorm2d", "Conv2d", "Dropout", "Embedding", "Flatten", "LayerNorm", "Linear",
           "MaxPool2d", "ReLU"]
