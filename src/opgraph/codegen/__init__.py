"""Code generation: the executable's Python function now; Triton kernels for fused regions later."""
