"""``og.nn``: layers that build common subgraphs with PyTorch's shapes, defaults and initialisations.

Variables live in the graph (``layer.parameters``, ``layer.buffers``); ``model.updates`` are the
batch-norm running-statistics assigns to run with the training step; ``load_state_dict`` copies a
``torch.nn.Module``'s weights in.

>>> import opgraph as og, torch
>>> g = og.Graph(); x = g.placeholder((None, 1, 8, 8), og.float32, name="x")
>>> model = og.nn.Sequential(og.nn.Conv2d(g, 1, 4, 3, padding=1), og.nn.BatchNorm2d(g, 4), og.nn.ReLU(),
...                          og.nn.MaxPool2d(2), og.nn.Flatten(), og.nn.Linear(g, 64, 10))
>>> model(x).shape, len(model.parameters), len(model.updates)
((None, 10), 6, 2)
"""

from .layers import BatchNorm1d, BatchNorm2d, Conv2d, Dropout, Embedding, Flatten, LayerNorm, Linear, MaxPool2d, ReLU
from .module import Lambda, Module, Sequential

__all__ = ["BatchNorm1d", "BatchNorm2d", "Conv2d", "Dropout", "Embedding", "Flatten", "Lambda", "LayerNorm",
           "Linear", "MaxPool2d", "Module", "ReLU", "Sequential"]
