"""``og.Graph``: the graph data (``ir.GraphCore``) plus every op family's builder methods and
compile/run. Each mixin lives next to the ops it builds; this class only puts them together."""

from __future__ import annotations

from .autodiff.vjp import AutodiffMethods
from .ops.activation import ActivationBuilders
from .ops.attention import AttentionBuilders
from .ops.attention_grad import AttentionGradientBuilders
from .ops.batch_norm import BatchNormBuilders
from .ops.batch_norm_grad import BatchNormGradientBuilders
from .ops.conv import ConvBuilders
from .ops.conv_grad import ConvGradientBuilders
from .ops.elementwise import ElementwiseBuilders
from .ops.gather import GatherBuilders
from .ops.gradient_support import GradientSupportBuilders
from .ops.linalg import LinalgBuilders
from .ops.losses import LossBuilders
from .ops.nn import NNBuilders
from .ops.norm import NormBuilders
from .ops.pooling import PoolingBuilders
from .ops.pooling_grad import PoolingGradientBuilders
from .ops.pooling_indices import PoolingIndicesBuilders
from .ops.reduce import ReduceBuilders
from .ops.reshape_dims import ReshapeDimsBuilders
from .ops.resize import ResizeBuilders
from .ops.scan import ScanBuilders
from .ops.shape import ShapeBuilders
from .ops.slicing import SlicingBuilders
from .ops.sort import SortBuilders
from .ops.space_depth import SpaceDepthBuilders
from .ops.state import StateBuilders
from .ops.training import TrainingBuilders
from .ops.unary import UnaryBuilders
from .runtime.graph_methods import RuntimeMethods


class Graph(
    StateBuilders,
    ElementwiseBuilders,
    UnaryBuilders,
    ActivationBuilders,
    ReduceBuilders,
    ScanBuilders,
    SortBuilders,
    ShapeBuilders,
    ReshapeDimsBuilders,
    SpaceDepthBuilders,
    SlicingBuilders,
    GatherBuilders,
    LinalgBuilders,
    ConvBuilders,
    ConvGradientBuilders,
    PoolingBuilders,
    PoolingIndicesBuilders,
    PoolingGradientBuilders,
    NormBuilders,
    BatchNormBuilders,
    BatchNormGradientBuilders,
    NNBuilders,
    LossBuilders,
    AttentionBuilders,
    AttentionGradientBuilders,
    TrainingBuilders,
    ResizeBuilders,
    GradientSupportBuilders,
    AutodiffMethods,
    RuntimeMethods,
):
    """A graph of ops on symbolic tensors (MPSGraph's ``MPSGraph``).

    >>> import opgraph as og, torch
    >>> g = og.Graph()
    >>> x = g.placeholder((None, 3), og.float32, name="x")
    >>> y = g.exp(x) * 2.0
    >>> g.run({x: torch.zeros(2, 3)}, [y])[0].tolist()
    [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
    """
