"""opgraph: a graph compiler and runtime for machine learning on NVIDIA GPUs and CPUs.

The public API, re-exported explicitly from the private modules that define it.
"""

from typing import Any

from . import nn as nn  # og.nn: layers (re-exported)
from . import optim as optim  # og.optim: optimizers in torch.optim's spelling
from .core.dtype import (
    DType,
    bfloat16,
    bool_,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    int4,
    int8,
    int16,
    int32,
    int64,
    pack_4bit,
    promote_types,
    uint4,
    uint8,
    unpack_4bit,
)
from .core.errors import (
    AttributeValueError,
    DeviceError,
    DTypeError,
    ExecutionError,
    FeedError,
    GraphError,
    OpgraphError,
    SerializationError,
    ShapeError,
    VerificationError,
)
from .core.types import TensorType
from .frontends import torch as torch  # og.torch: explain, TorchOptions, the backend (loaded on first use)
from .frontends.torch import fallback as _fallback  # noqa: F401  (declares torch_fallback: saved graphs load)
from .graph import Graph
from .ir.graph import Operation, Tensor
from .ops._padding import PaddingStyle, TensorLayout, WeightsLayout
from .ops.activation import GeluApproximation
from .ops.conv import Conv2dDescriptor, Conv3dDescriptor, DepthwiseConv2dDescriptor
from .ops.gather import ScatterMode
from .ops.losses import LossReduction
from .ops.pooling import Pooling2dDescriptor, Pooling4dDescriptor, PoolingReturnIndicesMode
from .ops.resize import ResizeMode, ResizeNearestRoundingMode
from .ops.slicing import PaddingMode
from .runtime.compile import CompilationDescriptor
from .runtime.device import Device, device
from .runtime.executable import Executable

bool = bool_  # MPSGraph spells it ``bool``; ``og.bool_`` also works


def from_torch(*args: Any, **kwargs: Any) -> Any:
    """``opgraph.frontends.torch.from_torch``: a PyTorch module as an ``og.Graph`` (through ``torch.export``)."""
    from .frontends.torch.export import from_torch as convert

    return convert(*args, **kwargs)
__version__ = "0.1.0"

__all__ = [
    "AttributeValueError", "CompilationDescriptor", "Conv2dDescriptor", "Conv3dDescriptor",
    "DepthwiseConv2dDescriptor", "GeluApproximation", "LossReduction", "PaddingMode", "PaddingStyle",
    "Pooling2dDescriptor", "Pooling4dDescriptor", "PoolingReturnIndicesMode", "ResizeMode",
    "ResizeNearestRoundingMode", "ScatterMode", "TensorLayout", "optim", "torch", "from_torch",
    "WeightsLayout", "DType", "DTypeError", "Device", "DeviceError",
    "ExecutionError", "Executable", "FeedError", "Graph", "GraphError", "Operation", "OpgraphError",
    "SerializationError", "ShapeError", "Tensor", "TensorType", "VerificationError", "__version__",
    "bfloat16", "bool", "bool_", "complex64", "complex128", "device", "float16", "float32", "float64",
    "int4", "int8", "int16", "int32", "int64", "pack_4bit", "promote_types", "uint4", "uint8", "unpack_4bit",
]
