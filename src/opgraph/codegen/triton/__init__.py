"""Triton code generation: the op -> scalar-expression table (``expr``), the elementwise-region kernel
emitter and its source cache (``kernel``), and the shared ``@triton.jit`` helpers (``prelude``).

Nothing here is wired into compilation yet; importing this package does not import triton.
"""
