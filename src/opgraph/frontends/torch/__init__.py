"""PyTorch on opgraph: the ``torch.compile`` backend, ``from_torch`` and ``explain``.

    >>> import torch, opgraph as og
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    >>> fast = torch.compile(model, backend="opgraph")
    >>> x = torch.randn(2, 4)
    >>> torch.allclose(fast(x), model(x))
    True
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> module: loaded on first use, so ``import opgraph`` does not load the converters (looking up ATen ops
# pulls in PyTorch's meta registrations, ~0.2 s)
_EXPORTS = {
    "GraphReport": "backend", "TorchOptions": "backend", "compile_fx": "backend", "opgraph_backend": "backend",
    "recording": "backend", "Explanation": "report", "explain": "report", "TorchGraph": "export",
    "from_torch": "export", "CONVERTERS": "registry", "ConvertContext": "registry", "Unsupported": "registry",
    "converts": "registry", "NotTranslatable": "translation", "Translation": "translation", "translate": "translation",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = sorted(_EXPORTS)
