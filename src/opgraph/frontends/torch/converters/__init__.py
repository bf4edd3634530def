"""ATen -> opgraph converters, one module per family; importing this package registers them all."""

from . import attention as attention
from . import core as core
from . import distance as distance
from . import elementwise as elementwise
from . import extra as extra
from . import gradients as gradients
from . import max_pool_offsets as max_pool_offsets
from . import nn as nn
from . import pool1d as pool1d
from . import reduce as reduce
from . import sampling as sampling
from . import shape as shape
