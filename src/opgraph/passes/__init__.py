"""Graph passes. Each is a named ``Program -> Program``; ``rewrite`` is the one walking mechanism."""

from .constant_fold import constant_folding
from .cse import common_subexpression_elimination
from .dce import dead_code_elimination
from .manager import Pass, PassRecord, run_pipeline
from .program import DROP, Program, rewrite

__all__ = ["DROP", "Pass", "PassRecord", "Program", "common_subexpression_elimination", "constant_folding",
           "dead_code_elimination", "rewrite", "run_pipeline"]
