"""Where the time of the ResNet-18-like training step goes: torch.profiler over opgraph's executable
and eager PyTorch, kernels grouped by name, plus the op histogram of the compiled step.

    python benchmarks/profile_training.py --device cuda
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import training as T  # noqa: E402

import opgraph as og  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rows", type=int, default=25)
    a = p.parse_args()
    cfg = T.Config(batch=a.batch, image=32, width=64, classes=10, seed=0)
    dev = og.device(a.device)
    ref = T.torch_model(cfg).to(dev.torch)
    step, n_ops = T.opgraph_step(cfg, ref, dev)
    x = torch.randn(cfg.batch, 3, 32, 32, device=dev.torch)
    y = torch.randint(0, 10, (cfg.batch,), device=dev.torch)
    for _ in range(3):
        step(x, y)
    dev.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev.is_cuda else [])
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(5):
            step(x, y)
        dev.synchronize()
    key = "self_device_time_total" if dev.is_cuda else "self_cpu_time_total"
    print(f"opgraph step ({n_ops} ops), 5 steps:")
    print(prof.key_averages().table(sort_by=key, row_limit=a.rows))
    eager = T.torch_step(T.torch_model(cfg).to(dev.torch), compiled=False)
    for _ in range(3):
        eager(x, y)
    dev.synchronize()
    with torch.profiler.profile(activities=acts) as prof2:
        for _ in range(5):
            eager(x, y)
        dev.synchronize()
    print("eager PyTorch, 5 steps:")
    print(prof2.key_averages().table(sort_by=key, row_limit=a.rows))


if __name__ == "__main__":
    main()
