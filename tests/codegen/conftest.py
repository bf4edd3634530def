"""Generated Triton kernels run on the CPU under Triton's interpreter in these tests.

Triton reads ``TRITON_INTERPRET`` when it is imported and when a function is decorated, so it is set
here, before any test module (or the kernel cache) imports triton: except in a GPU run
(``pytest -m gpu``), where the kernels must be compiled for the device.
"""

from __future__ import annotations

import os
import sys


def _gpu_run() -> bool:
    args = sys.argv[1:]
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            expr: str | None = args[i + 1]
        else:
            expr = a[2:] if a.startswith("-m") and len(a) > 2 else None
        if expr is not None and "gpu" in expr and "not gpu" not in expr:
            return True
    return False


if not _gpu_run():
    os.environ["TRITON_INTERPRET"] = "1"
