"""Generated Triton kernels run on the CPU under Triton's interpreter in these tests.

Triton reads ``TRITON_INTERPRET`` when a function is decorated, so it is set here, before any test
module (or the kernel cache) imports triton.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"
