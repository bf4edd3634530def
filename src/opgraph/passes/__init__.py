"""Graph passes. Each is a named ``Program -> Program``; ``rewrite`` is the one walking mechanism."""

from .constant_fold import constant_folding
from .cse import common_subexpression_elimination
from .dce import dead_code_elimination
from .epilogue import fuse_matmul_epilogues
from .manager import Pass, PassRecord, run_pipeline
from .memory_plan import MemoryPlan, ValueInfo, plan_memory
from .pad_matmul import pad_matmuls
from .pad_sum import pads_to_concat
from .program import DROP, Program, rewrite
from .transpose_product import transpose_products
from .views import fold_views

__all__ = ["DROP", "Pass", "PassRecord", "Program", "common_subexpression_elimination", "constant_folding",
           "dead_code_elimination", "rewrite", "run_pipeline"]
__all__ += ["fuse_matmul_epilogues"]
__all__ += ["MemoryPlan", "ValueInfo", "plan_memory"]
__all__ += ["fold_views", "pad_matmuls", "pads_to_concat", "transpose_products"]
