"""PyTorch on opgraph: the ``torch.compile`` backend, ``from_torch`` and ``explain``.

    >>> import torch, opgraph as og
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    >>> fast = torch.compile(model, backend="opgraph")
    >>> x = torch.randn(2, 4)
    >>> torch.allclose(fast(x), model(x))
    True
"""

from .backend import GraphReport, TorchOptions, compile_fx, opgraph_backend, recording
from .explain import Explanation, explain
from .export import TorchGraph, from_torch
from .registry import CONVERTERS, ConvertContext, Unsupported, converts
from .translate import NotTranslatable, Translation, translate

__all__ = ["CONVERTERS", "ConvertContext", "Explanation", "GraphReport", "NotTranslatable", "TorchGraph",
           "TorchOptions", "Translation", "Unsupported", "compile_fx", "converts", "explain", "from_torch",
           "opgraph_backend", "recording", "translate"]
