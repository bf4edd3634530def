"""Tuning decisions kept on disk: which launch configuration of a generated kernel ``RegionKernel._tune`` found
fastest, per kernel source, its candidates, input shapes and strides, GPU, and Triton and PyTorch versions, so that
a later process (a restarted training run, the next test file) launches the winner at once instead of compiling and
timing every candidate again. Triton keeps the compiled binaries in its own cache; this keeps only the choice.

Each record is a small JSON file named after its key, written atomically, under ``tuning/`` in the kernel source
cache directory. A record is a hint, never trusted blindly: candidates that changed since (one added, or the
recorded one gone) make another key, and a file that does not parse is ignored; the kernel is tuned again.
``OPGRAPH_TUNING_RECORDS=0`` turns reading and writing them off.

``OPGRAPH_TUNING_LOG=FILE`` appends a JSON line per tuning to ``FILE``: the kernel's ops, inputs, every candidate
with its time (or its one-launch time where that left it out, or its error) and the winner.
``benchmarks/tuning_census.py`` reads such logs: which candidates win, and which are compiled for nothing.

>>> import tempfile, pathlib
>>> from opgraph.codegen.triton.configs import Config
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> store("k1", Config(reduction=True, xblock=64, rblock=32, looped=True, split=8), folder)
>>> lookup("k1", folder)
Config(reduction=True, block=1024, xblock=64, rblock=32, looped=True, num_warps=4, split=8, programs=0, stages=2,
       cluster=False, maxnreg=0)
>>> lookup("k2", folder) is None
True
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import torch

from .configs import Config

# each field's type name ("bool", "int"), whether annotations are postponed (strings) or not (classes)
_FIELDS = {f.name: getattr(f.type, "__name__", f.type) for f in dataclasses.fields(Config)}


def enabled() -> bool:
    return os.environ.get("OPGRAPH_TUNING_RECORDS", "1") != "0"


def record_key(source_key: str, candidates: str, inputs: Sequence[torch.Tensor]) -> str:
    """What a decision depends on beyond the kernel's source: the candidates it was chosen from (a text naming
    them), the inputs' shapes and strides, the GPU and the versions of the compilers that made the candidates."""
    import triton

    dev = inputs[0].device
    gpu = (torch.cuda.get_device_name(dev), torch.cuda.get_device_capability(dev)) if dev.type == "cuda" else "cpu"
    parts = [source_key, candidates, [(tuple(x.shape), x.stride()) for x in inputs], gpu, triton.__version__,
             torch.__version__]
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def _path(key: str, folder: Path) -> Path:
    return folder / "tuning" / f"{key}.json"


def lookup(key: str, folder: Path) -> Config | None:
    """The configuration recorded under ``key``, or None (no record, or one that does not parse as a ``Config``)."""
    try:
        fields = json.loads(_path(key, folder).read_text())
        if not isinstance(fields, dict) or set(fields) - set(_FIELDS) or \
                any(type(v).__name__ != _FIELDS[k] for k, v in fields.items()):  # bool fields bool, int fields int
            return None
        return Config(**fields)
    except (OSError, ValueError, TypeError):
        return None


def log_path() -> Path | None:
    value = os.environ.get("OPGRAPH_TUNING_LOG", "")
    return Path(value) if value else None


_LOG_LOCK = threading.Lock()


def log(source_key: str, ops: Sequence[str], reductions: Sequence[str], candidates: Sequence[Config],
        inputs: Sequence[torch.Tensor], outcomes: Sequence[dict[str, object]], winner: int | None) -> None:
    """Append one tuning to the log file (``log_path()``): the region's ops and reductions among them, its inputs,
    candidates, their outcomes and the winner's index (None: none was timed); a file that cannot be written keeps
    nothing."""
    path = log_path()
    if path is None:
        return
    dev = inputs[0].device
    entry = {"source": source_key, "ops": list(ops), "reductions": sorted(set(reductions)),
             "inputs": [[list(x.shape), list(x.stride()), str(x.dtype).removeprefix("torch.")] for x in inputs],
             "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
             "candidates": [dataclasses.asdict(c) for c in candidates], "outcomes": list(outcomes),
             "winner": winner}
    try:
        with _LOG_LOCK, path.open("a") as f:
            f.write(json.dumps(entry) + "\n")
    except OSError:
        pass


def store(key: str, config: Config, folder: Path) -> None:
    """Record ``config`` under ``key`` (atomically: concurrent writers race to the same content); a folder that
    cannot be written keeps nothing."""
    path = _path(key, folder)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(config)))
        os.replace(tmp, path)
    except OSError:
        pass


__all__ = ["enabled", "log", "log_path", "lookup", "record_key", "store"]
