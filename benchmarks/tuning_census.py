"""Which tuning candidates win, and which are compiled for nothing: a census of ``OPGRAPH_TUNING_LOG`` files.

With tuning records off, every candidate configuration of every tuned kernel is compiled on a model's first step
(ResNet-50: 53 kernels, about 9 candidates each; RESULTS.md seventeenth session), and compiling them is most of the
tuning's time. This reads the log that ``_tune`` appends to (one JSON line per tuning: the candidates, each one's
time or why it has none, the winner) and prints:

* a summary: tunings, candidates, how often the heuristic's first choice wins and what it loses where it does not;
* per region kind (its reductions and dtype): how often the first choice wins, and which families win;
* per configuration family (the configuration's fields, the first choice apart): how often it is offered, wins or
  comes within ``--near`` of the best, and its median time against the best;
* pruning: families left out one at a time, the one losing the least kernel time per compile saved first, with
  the running totals of compiles saved and time lost (the best kept against the best, summed over the tunings).

    OPGRAPH_TUNING_RECORDS=0 OPGRAPH_TUNING_LOG=tuning.jsonl opgraph bench --only training --models resnet50
    python benchmarks/tuning_census.py tuning.jsonl
    python benchmarks/tuning_census.py logs/*.jsonl --near 0.02 --top 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from opgraph.cli._table import format_table

SHORT = {"xblock": "x", "rblock": "r", "num_warps": "w", "split": "split", "programs": "p", "stages": "st"}


def family(config: dict[str, Any]) -> str:
    """A configuration as a short name: its tile, warps, split and programs (``looped``, clusters and a register
    cap marked)."""
    if not config.get("reduction"):
        return f"flat b{config.get('block')} w{config.get('num_warps')}"
    parts = [f"{SHORT[k]}{config[k]}" for k in ("xblock", "rblock", "num_warps") if k in config]
    if config.get("looped"):
        parts.append("looped")
    if config.get("split", 1) > 1:
        parts.append(f"split{config['split']}")
    if config.get("programs", 0):
        parts.append(f"p{config['programs']} st{config.get('stages')}")
    if config.get("cluster"):
        parts.append("cluster")
    if config.get("maxnreg", 0):
        parts.append(f"reg{config['maxnreg']}")
    return " ".join(parts)


def read(paths: list[Path]) -> list[dict[str, Any]]:
    """The tunings of the logs that timed a candidate (one whose candidates all failed has no winner)."""
    entries = []
    for path in paths:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                print(f"{path}:{n}: not JSON, skipped", file=sys.stderr)
                continue
            if entry.get("winner") is not None:
                entries.append(entry)
    return entries


def kind(entry: dict[str, Any]) -> str:
    """A tuning's region kind: its reductions (ops of the reduction fusion kind; "flat" where none) and its first
    input's dtype."""
    dtype = entry["inputs"][0][2] if entry.get("inputs") else "?"
    return f"{'+'.join(entry.get('reductions') or []) or 'flat'} ({dtype})"


def kinds(entries: list[dict[str, Any]]) -> list[list[str]]:
    """Per region kind: tunings, how often the first choice wins, and the families that win most."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        groups[kind(e)].append(e)
    rows = []
    for name, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        wins: dict[str, int] = defaultdict(int)
        for e in group:
            wins[family(e["candidates"][e["winner"]])] += 1
        top = sorted(wins.items(), key=lambda kv: -kv[1])[:3]
        first = sum(e["winner"] == 0 for e in group)
        rows.append([name, str(len(group)), f"{first / len(group):.0%}",
                     "; ".join(f"{fam} ({n})" for fam, n in top)])
    return rows


def _times(entry: dict[str, Any]) -> list[float | None]:
    return [o.get("ms") for o in entry["outcomes"]]


def summary(entries: list[dict[str, Any]]) -> list[list[str]]:
    offered = sum(len(e["candidates"]) for e in entries)
    timed = sum(t is not None for e in entries for t in _times(e))
    probed = sum("one_launch_ms" in o for e in entries for o in e["outcomes"])
    failed = sum("error" in o for e in entries for o in e["outcomes"])
    losses = []  # the first choice's time over the best's, where both were timed
    for e in entries:
        times = _times(e)
        best = min((t for t in times if t is not None), default=None)
        if best and times[0] is not None:
            losses.append(times[0] / best)
    first_wins = sum(e["winner"] == 0 for e in entries)
    rows = [["tunings", str(len(entries))], ["candidates (compiles, records off)", str(offered)],
            ["  timed in full", str(timed)], ["  left at one launch (slow)", str(probed)],
            ["  failed (resources)", str(failed)],
            ["first choice wins", f"{first_wins} ({first_wins / max(1, len(entries)):.0%})"]]
    if losses:
        cut = sorted(losses)
        rows.append(["first choice / best: median, 90th percentile, max",
                     f"{statistics.median(cut):.3f}, {cut[int(0.9 * (len(cut) - 1))]:.3f}, {cut[-1]:.3f}"])
    return rows


def families(entries: list[dict[str, Any]], near: float) -> dict[str, dict[str, Any]]:
    """Per family: offered, offered as first choice, wins, within ``near`` of the best, and ratios to the best."""
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"offered": 0, "first": 0, "wins": 0, "near": 0,
                                                          "ratios": [], "untimed": 0})
    for e in entries:
        times = _times(e)
        best = min((t for t in times if t is not None), default=None)
        for i, (config, t) in enumerate(zip(e["candidates"], times, strict=True)):
            f = out[family(config)]
            f["offered"] += 1
            f["first"] += i == 0
            f["wins"] += i == e["winner"]
            if t is None or not best:
                f["untimed"] += 1
                continue
            f["ratios"].append(t / best)
            f["near"] += t <= best * (1 + near)
    return out


def _best(entry: dict[str, Any], dropped: set[str]) -> float | None:
    return min((t for c, t in zip(entry["candidates"], _times(entry), strict=True)
                if t is not None and family(c) not in dropped), default=None)


def pruning(entries: list[dict[str, Any]], stats: dict[str, dict[str, Any]]) -> list[list[str]]:
    """Families left out one at a time, the cheapest first (the least kernel time lost per compile saved; first
    choices are kept, so every tuning keeps a candidate): per step the family, and the running totals of compiles
    saved, time lost (the best kept against the best, summed over the tunings: about a step's time where each
    tuned kernel launches once a step) and the worst ratio of one tuning."""
    best = [_best(e, set()) for e in entries]
    total = sum(len(e["candidates"]) for e in entries)
    removable = {name for name, f in stats.items() if not f["first"]}
    dropped: set[str] = set()
    rows, saved = [], 0

    def lost(without: set[str]) -> tuple[float, float]:
        extra, worst = 0.0, 1.0
        for e, b in zip(entries, best, strict=True):
            kept = _best(e, without)
            if b and kept is not None:
                extra, worst = extra + kept - b, max(worst, kept / b)
        return extra, worst

    while removable:
        costs = {name: lost(dropped | {name}) for name in removable}
        name = min(removable, key=lambda n: (costs[n][0] / stats[n]["offered"], n))
        dropped.add(name)
        removable.discard(name)
        saved += stats[name]["offered"]
        extra, worst = costs[name]
        rows.append([str(len(dropped)), name, f"{saved} of {total} ({saved / max(1, total):.0%})",
                     f"{extra * 1000:.1f}", f"{worst:.3f}"])
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logs", nargs="+", type=Path, help="OPGRAPH_TUNING_LOG files (JSON lines)")
    p.add_argument("--near", type=float, default=0.03, help="a time within this fraction of the best counts as near")
    p.add_argument("--top", type=int, default=40, help="families listed, most offered first")
    args = p.parse_args(argv)
    entries = read(args.logs)
    if not entries:
        p.error("no tunings in the logs")
    gpus = sorted({e.get("gpu", "?") for e in entries})
    print(f"{len(entries)} tunings from {len(args.logs)} log(s); GPU: {', '.join(gpus)}\n")
    print(format_table(["", "value"], summary(entries)))
    print("\nper region kind (its reductions and first input's dtype):")
    print(format_table(["kind", "tunings", "first choice wins", "winning families (wins)"], kinds(entries)))
    stats = families(entries, args.near)
    rows = []
    for name, f in sorted(stats.items(), key=lambda kv: -kv[1]["offered"])[:args.top]:
        ratios = f["ratios"]
        rows.append([name, str(f["offered"]), str(f["first"]), str(f["wins"]), str(f["near"]), str(f["untimed"]),
                     f"{statistics.median(ratios):.3f}" if ratios else "-"])
    print(f"\nper configuration family (near: within {args.near:.0%} of the best; untimed: left at one launch or "
          "failed):")
    print(format_table(["family", "offered", "as first", "wins", "near", "untimed", "median / best"], rows))
    print("\nfamilies left out one at a time, the cheapest first (running totals; first choices kept):")
    print(format_table(["left out", "family", "compiles saved", "us lost (summed over tunings)", "worst ratio"],
                       pruning(entries, stats)[:args.top]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
