"""Launch configurations of generated region kernels: what ``RegionKernel`` times on a region's first launch
(rules of thumb from sweeps on an H200; ``benchmarks/reduction_configs.py`` measures them)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...passes.fuse import SHORT_COLUMN

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...ir.graph import Operation
    from .region import RegionEmitter

PERSISTENT_MAX = 32768  # reduced elements a program keeps in registers (32 a thread at 32 warps)
SPLIT_CHUNK = 16384  # elements of a split row each part holds in registers, at most
MAX_CLUSTER = 16  # programs a Hopper cluster holds (more than 8: the launcher allows it, non-portable)


@dataclass(frozen=True)
class Config:
    """Launch configuration: flat (``block``) or reduction (``xblock`` rows by ``rblock``; ``looped``)."""

    reduction: bool
    block: int = 1024
    xblock: int = 1
    rblock: int = 1
    looped: bool = False
    num_warps: int = 4
    split: int = 1  # programs sharing a row (a power of two): each keeps a chunk, statistics meet in memory
    programs: int = 0  # > 0: that many programs loop over the tiles (loads of the next tile overlap this one's)
    stages: int = 2  # software-pipelining depth of that loop
    cluster: bool = False  # a split row's programs launch as a thread-block cluster, meeting at its barrier (sm_90)
    maxnreg: int = 0  # > 0: registers a thread at most (ptxas spills past it), so that more programs share an SM

    def describe(self) -> str:
        """In words, for tables and ``exe.kernels()``.

        >>> Config(reduction=True, rblock=16384, num_warps=4, split=16, cluster=True).describe()
        'split 16, 16384 a program, 4 warps, as clusters'
        """
        if not self.reduction:
            return f"flat, {self.block} a program, {self.num_warps} warps"
        meeting = ", as clusters" if self.cluster else ""
        meeting += f", at most {self.maxnreg} registers" if self.maxnreg else ""
        if self.split > 1 and self.looped:
            return f"split {self.split}, looped in steps of {self.rblock}, {self.num_warps} warps{meeting}"
        kind = "looped" if self.looped else f"split {self.split}" if self.split > 1 else "persistent"
        rows = f"{self.xblock}x" if self.xblock > 1 else ""
        grid = f", a grid of {self.programs} ({self.stages} stages)" if self.programs else ""
        return f"{kind}, {rows}{self.rblock} a program, {self.num_warps} warps{grid}{meeting}"


def default_config(em: RegionEmitter) -> Config:
    """The first of ``candidate_configs``: what runs before (or without) tuning."""
    return candidate_configs(em)[0]


def candidate_configs(em: RegionEmitter) -> list[Config]:
    """Launch configurations worth timing for this region, the heuristic choice first (rules of thumb from
    sweeps on an H200; ``RegionKernel`` times them on first launch). Flat kernels take 1024 elements a
    program. A reduction keeps its rows in registers up to ``PERSISTENT_MAX`` elements (8-64 a thread);
    longer rows are walked in steps (looped) or, for float32 statistics, split across programs."""
    if not em.reductions:
        return [Config(reduction=False, block=1024, num_warps=4)]
    rsizes = [em.domain.shape[k] for k in em.raxes]
    rnumel = math.prod(d for d in rsizes if d is not None) if all(d is not None for d in rsizes) else None
    inner_reduced = em.inner_axis in em.raxes
    looped = Config(reduction=True, xblock=1, rblock=4096, looped=True, num_warps=16)
    # or in wider steps by more threads: 0.130 against 0.137 ms for bfloat16 rms_norm 4096x32768, 0.136 against
    # 0.149 for layer_norm (RESULTS.md, twentieth session)
    looped_wide = Config(reduction=True, xblock=1, rblock=8192, looped=True, num_warps=32)
    if not inner_reduced:  # column reductions: rows of the tile run along the contiguous dim
        if rnumel is not None and rnumel <= SHORT_COLUMN:  # the columns in registers (region formation agrees)
            rblock = max(2, 1 << (rnumel - 1).bit_length())
            return [Config(reduction=True, xblock=max(1, min(128, 4096 // rblock)), rblock=rblock, num_warps=4)]
        out = [Config(reduction=True, xblock=64, rblock=32, looped=True, num_warps=8),
               Config(reduction=True, xblock=128, rblock=16, looped=True, num_warps=8)]
        ksizes = [em.domain.shape[k] for k in em.xaxes]
        kept = math.prod(d for d in ksizes if d is not None) if None not in ksizes else None
        sms = multiprocessors()
        if kept is not None and sms and kept < 64 * sms:  # few column tiles (bias gradients): narrower ones
            out += [Config(reduction=True, xblock=16, rblock=128, looped=True, num_warps=4),
                    Config(reduction=True, xblock=8, rblock=256, looped=True, num_warps=4)]
            if rnumel is not None and _splittable(em):  # ... or rows split across programs, the last one finishes
                splits: list[Config] = []
                # the winners of the NHWC batch-norm sums on the H200 (RESULTS.md, sixth to eighth session): four to
                # eight programs a multiprocessor, or two of 64x64 tiles since flat column addresses (eighth)
                for xblock, rblock, per_sm in ((64, 32, 8), (64, 64, 8), (64, 32, 4), (32, 32, 4), (32, 32, 8),
                                               (32, 64, 8), (64, 64, 2)):
                    split = column_split(kept, xblock, rnumel, rblock, per_sm * sms)
                    cfg = Config(reduction=True, xblock=xblock, rblock=rblock, looped=True, num_warps=4, split=split)
                    if split > 1 and cfg not in splits:
                        splits.append(cfg)
                # a few programs walking very long columns (NHWC batch-norm statistics): split is the default too
                first = splits[:1] if splits and -(-kept // out[0].xblock) * 8 <= sms else []
                out = first + out + splits[1:] if first else out + splits
        return out
    if rnumel is not None and rnumel <= PERSISTENT_MAX:
        rblock = max(2, 1 << (rnumel - 1).bit_length())
        xblock = max(1, min(16, 2048 // rblock))
        per = rblock * xblock
        out = [Config(reduction=True, xblock=xblock, rblock=rblock, num_warps=min(16, max(4, per // 512)))]
        for warps in (4, 8, 16, 32):
            if warps != out[0].num_warps and 4 <= per // (32 * warps) <= 64:
                out.append(Config(reduction=True, xblock=xblock, rblock=rblock, num_warps=warps))
        if rblock <= 4096:
            out.append(Config(reduction=True, xblock=xblock * 2, rblock=rblock, num_warps=out[0].num_warps))
        if rnumel > 8192:
            out += [looped, looped_wide]
        elif rnumel >= 4096:  # or walked in two steps, fewer registers: 0.127 against 0.132 ms for float32 layer_norm
            # 16384x4096, 0.128 against 0.133 for bfloat16 32768x4096; the tuner's choice for all four float32 norms
            # at 4096 and the bfloat16 layer_norm and rms_norm (RESULTS.md, twenty-second session)
            out += [replace(looped, rblock=2048), replace(looped, rblock=2048, num_warps=8)]
        row_bytes = rblock * _element_bytes(em)
        sms = multiprocessors()
        if rnumel >= 16384 and sms and row_bytes <= 65536:  # long 16-bit rows: a grid that pipelines row loads
            out += [Config(reduction=True, xblock=xblock, rblock=rblock, num_warps=w, programs=2 * sms, stages=3)
                    for w in (8, 16)]
        return out
    out = [looped, looped_wide]
    sms = multiprocessors()
    if rnumel is not None and sms and _splittable(em):
        # a row's parts wait for each other at a barrier, so all of them must be resident at once: programs are
        # dispatched in order and one a multiprocessor always fits, so at most ``sms`` parts (more hung VGG16)
        for chunk, warps in ((SPLIT_CHUNK, 4), (SPLIT_CHUNK // 2, 4)):
            split = 1 << (-(-rnumel // chunk) - 1).bit_length()
            rblock = 1 << (-(-rnumel // split) - 1).bit_length()
            if split <= sms and _part_fits(rblock, warps):
                out.append(Config(reduction=True, xblock=1, rblock=rblock, num_warps=warps, split=split))
        parts = 1 << (sms.bit_length() - 1)  # rows too long for that: parts walking chunks of several blocks
        if parts > 1 and rnumel > parts * SPLIT_CHUNK:
            out.append(replace(looped, split=parts))
        if clusters():  # sm_90: the parts meet at the cluster's hardware barrier, not at counters in L2 (faster
            # at 262k, RESULTS.md twentieth session: 0.161 against 0.188 ms for float32 softmax, 256 rows); 8 and 16
            # warps too: the hand-written bfloat16 softmax's best was 8 (0.168 against 0.188 ms at 4, twenty-first
            # session; the generated one's takes the hand-written one's 80 registers since the twenty-third)
            sixteen_bit = 0 < _element_bytes(em) <= 2
            for chunk, warps in ((SPLIT_CHUNK, 4), (SPLIT_CHUNK, 8), (SPLIT_CHUNK, 16), (2 * SPLIT_CHUNK, 16)):
                split = 1 << (-(-rnumel // chunk) - 1).bit_length()
                rblock = 1 << (-(-rnumel // split) - 1).bit_length()
                if 1 < split <= MAX_CLUSTER and _part_fits(rblock, warps):
                    out.append(Config(reduction=True, xblock=1, rblock=rblock, num_warps=warps, split=split,
                                      cluster=True))
                    if warps == 8 and sixteen_bit:  # three programs an SM, not two: a bfloat16 log_softmax's part
                        # took 108 registers, a softmax's 80 (RESULTS.md, twenty-fifth session)
                        out.append(Config(reduction=True, xblock=1, rblock=rblock, num_warps=warps, split=split,
                                          cluster=True, maxnreg=80))
            # 16-bit rows: parts walking their chunk twice (the second from L2) hold few registers, so more share an
            # SM and hide each other's meetings (bfloat16 norms at 262k: 17-20% faster; RESULTS.md, 25th session)
            split = 1 << (-(-rnumel // SPLIT_CHUNK) - 1).bit_length()  # a chunk of 8192 or more: two steps at least
            # float32 rows by 16 warps (four programs an SM, their chunks still in L2): layer_norm 0.183 against 0.186
            walks = ((2048, 8), (4096, 8)) if sixteen_bit else ((2048, 16),)
            if 1 < split <= MAX_CLUSTER:
                out += [Config(reduction=True, xblock=1, rblock=step, looped=True, num_warps=warps, split=split,
                               cluster=True) for step, warps in walks]
    return out


def _element_bytes(em: RegionEmitter) -> int:
    """Bytes an element of the region's widest input (0: none), scalars left out: a float32 epsilon read as a
    constant does not make a bfloat16 row a float32 one."""
    return max((int(t.dtype.itemsize) for t in em.inputs if math.prod(d or 2 for d in t.shape) > 1), default=0)


def _part_fits(rblock: int, warps: int) -> bool:
    """Whether a split row's part of ``rblock`` elements is worth compiling at ``warps``: at most 32768 elements and
    128 a thread. (Layer norms were held to 8192, or 32 a thread, while their parts' partials took the chunk's layout
    and spilled: ptxas of Triton 3.6 took 37-182 s on them, 0.1-0.3 s since, RESULTS.md twenty-third session.)"""
    return rblock // (32 * warps) <= 128 and rblock <= 2 * SPLIT_CHUNK


def column_split(kept: int, xblock: int, rows: int, rblock: int, programs: int) -> int:
    """Parts (a power of two) to split each column tile's rows into: at most ``programs`` programs, each walking at
    least four row blocks."""
    tiles = -(-kept // xblock)
    split = 1
    while tiles * split * 2 <= programs and rows >= split * 2 * 4 * rblock:
        split *= 2
    return split


def multiprocessors() -> int:
    """Streaming multiprocessors of the current CUDA device (0 without one, or under the interpreter)."""
    import torch

    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return 0
    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)


def clusters() -> bool:
    """Whether the current CUDA device launches thread-block clusters (sm_90 and newer; never the interpreter)."""
    import torch

    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(torch.cuda.current_device()) >= (9, 0)


def _splittable(em: RegionEmitter) -> bool:
    """Split rows across programs only on a GPU (the interpreter runs programs one at a time, so a program
    waiting for its row's others would wait forever) and for floating statistics (the workspace is float32)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    return float32_statistics(em.reductions)


def float32_statistics(reductions: Sequence[Operation]) -> bool:
    """Split programs meet in a float32 workspace: floating inputs of at most 4 bytes only."""
    return all(op.inputs[0].dtype.is_floating and op.inputs[0].dtype.itemsize <= 4 for op in reductions)


__all__ = ["MAX_CLUSTER", "PERSISTENT_MAX", "Config", "candidate_configs", "clusters", "column_split",
           "default_config", "multiprocessors"]
