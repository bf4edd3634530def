"""``opgraph info``: versions of opgraph and its dependencies, and the devices found."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from typing import Any

from ._table import format_table

DESCRIPTION = """\
Print the versions of opgraph, PyTorch, Triton, NumPy and Python, and the devices opgraph can run
on: the CPU (name, threads), each CUDA device (name, memory, compute capability) and Apple's MPS.
The device marked "default" is the one og.device() picks."""

EXAMPLE = """\
example:
  opgraph info
  opgraph info --json"""


def register(sub: Any) -> None:
    p = sub.add_parser("info", help="versions and devices", description=DESCRIPTION, epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
    return 0


def collect() -> dict[str, Any]:
    """The versions and devices as plain data."""
    import torch

    import opgraph as og

    versions = {
        "opgraph": og.__version__,
        "torch": torch.__version__,
        "triton": _dist_version("triton"),
        "numpy": _dist_version("numpy"),
        "python": f"{platform.python_version()} ({platform.python_implementation()}, {sys.executable})",
    }
    if torch.version.cuda:
        versions["CUDA (torch build)"] = torch.version.cuda
    if torch.backends.cudnn.is_available():
        versions["cuDNN"] = str(torch.backends.cudnn.version())
    devices: list[dict[str, Any]] = [{
        "device": "cpu", "name": cpu_name(), "threads": torch.get_num_threads(),
        "cores": os.cpu_count(), "platform": platform.platform(),
    }]
    cuda_error = None
    try:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                devices.append({
                    "device": f"cuda:{i}", "name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                    "compute_capability": f"{p.major}.{p.minor}", "multiprocessors": p.multi_processor_count,
                })
    except Exception as e:  # a broken driver must not stop the report
        cuda_error = f"{type(e).__name__}: {e}"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append({"device": "mps", "name": "Apple GPU (Metal Performance Shaders)"})
    try:
        default = str(og.device())
    except og.OpgraphError as e:
        default, cuda_error = "cpu", cuda_error or str(e)
    report: dict[str, Any] = {"versions": versions, "devices": devices, "default_device": default}
    if cuda_error:
        report["cuda_error"] = cuda_error
    return report


def render(report: dict[str, Any]) -> str:
    versions = report["versions"]
    width = max(len(k) for k in versions)
    lines = ["versions:"] + [f"  {k.ljust(width)}  {v}" for k, v in versions.items()]
    rows = []
    for d in report["devices"]:
        default = "*" if d["device"] == report["default_device"] else ""
        if d["device"] == "cpu":
            detail = f"{d['threads']} threads ({d['cores']} cores), {d['platform']}"
        elif d["device"].startswith("cuda"):
            detail = (f"{d['memory_gib']} GiB, compute capability {d['compute_capability']}, "
                      f"{d['multiprocessors']} SMs")
        else:
            detail = ""
        rows.append([d["device"], default, d["name"], detail])
    lines += ["", "devices:", format_table(["device", "default", "name", "details"], rows, align="<<<<",
                                          indent="  ")]
    if not any(d["device"].startswith("cuda") for d in report["devices"]):
        lines.append("  (no CUDA device found)")
    if "cuda_error" in report:
        lines.append(f"  CUDA error: {report['cuda_error']}")
    return "\n".join(lines)


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_name() -> str:
    """The CPU's marketing name where the OS tells it, else the architecture."""
    system = platform.system()
    try:
        if system == "Linux":
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.lower().startswith(("model name", "hardware", "cpu model")):
                        return line.split(":", 1)[1].strip()
        elif system == "Darwin":
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                 text=True, timeout=5, check=False)
            if out.stdout.strip():
                return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine() or "unknown"
