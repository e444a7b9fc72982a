"""The 100,000-rank model of issue 32 (item 4), from costs measured here on a bench.py set.

The design modelled is the one built (``frtrace.load.workers.cluster``,
``frtrace.load.workers.frontier``):
with ``--scheduler`` and a large set, two passes over the files on the Dask workers.

1. Each task (``CUT_FILES_PER_TASK`` files: 128) reads its dumps and folds them into
   per-(group, seq) partials (``fold``); the partials are merged ``FAN_IN`` (8) at a time
   on the workers, level by level (``merge``); the root merges the last and cuts
   (``cut``): a cutoff per group.
2. Each task reads its files again and keeps each dump's entries near the frontier
   (``Frontier.keep``); only those travel to the coordinator, which builds the tables from
   them and runs the analysis.

What it measures on the set's first ``--sample`` files, CPU time on one core of this
machine: a file's parse (``try_parse``), fold and keep; the merge, per key going in; the
cut, per key; a key's bytes in a partial (numpy); the keys per rank in small groups (tensor
parallel: their number grows with the ranks) and in large ones (data parallel and the
default group: as many whatever the ranks). What it takes from whole runs (``scripts/bench.py
--scheduler``, at two sizes): the coordinator's CPU seconds and peak, per rank (entries kept
per rank are what the cut leaves, the same at any size for this job's shape).

The model, for N ranks on W single-core workers: pass 1 is N x (parse + fold) / W; the tree's
level l has ceil(N / F / 8^l) merges of 8 partials (F files a task), each covering up to
F x 8^l ranks (small keys) plus the large groups' keys, and runs them W at a time; the root
also cuts;
pass 2 is N x (parse + keep) / W, beside which the coordinator receives and builds (its CPU
per rank, measured); then the coordinator's analysis (in that same CPU per rank). The
coordinator's memory is its peak per rank at the two sizes, extrapolated linearly. The
root's worker holds its 8 inputs, the merge and the cut's frame: about 4 times the final
partial. A cluster's cores and disks are assumed as fast as this machine's.

Usage (from the repository root)::

    python3 scripts/dask_model.py /tmp/b32/2d_r4096_e2000_host_stall_s0 \\
        --coordinator 4096:CPU_S:PEAK_MB 16384:CPU_S:PEAK_MB --ranks 100000 --workers 8 32 128
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_ARRAYS = ("key", "n", "done", "sig_min", "sig_max", "t1", "t2")  # a partial's, per key


def _cpu(call: Any, *args: Any) -> tuple[Any, float]:
    start = time.process_time()
    result = call(*args)
    return result, time.process_time() - start


def measure(dumps: Path, sample: int, small: int) -> dict[str, float]:
    """The per-file and per-key costs, on the first ``sample`` files of ``dumps``."""
    sys.path.insert(0, str(ROOT))
    from frtrace.incident.discover import discover
    from frtrace.load.read.parse import ParsedDump, try_parse
    from frtrace.load.workers.cluster import FAN_IN
    from frtrace.load.workers.frontier import cut, fold, merge

    every = discover(dumps).candidates
    candidates = every[:sample]
    try_parse(candidates[-1])  # (warm)
    parsed, parse_s = [], 0.0
    for cand in candidates:
        result, took = _cpu(try_parse, cand)
        assert isinstance(result, ParsedDump), result
        parsed.append(result)
        parse_s += took
    folds, fold_s = [], 0.0
    for result in parsed:
        partial, took = _cpu(fold, result.entries)
        folds.append(partial)
        fold_s += took
    step = math.ceil(len(folds) / FAN_IN)
    children = [merge(*folds[i : i + step]) for i in range(0, len(folds), step)]
    keys_in = sum(c.key.size for c in children)
    merged, merge_s = _cpu(merge, *children)
    frontier, cut_s = _cpu(cut, merged)
    keep_s, kept = 0.0, 0
    for result in parsed:
        rows, took = _cpu(frontier.keep, result.entries)
        keep_s += took
        kept += rows.num_rows
    sizes = {}
    for result in parsed:
        for g in result.groups:
            members = g.get("ranks")
            if members is not None and len(members):
                sizes[g["group_name"]] = len(members)
    names = [merged.groups[code][0] for code in (merged.key >> 32).tolist()]
    small_keys = sum(1 for name in names if sizes.get(name, 0) <= small)
    n = len(candidates)
    return {
        "world": len(every),
        "sample_files": n,
        "entries_per_file": sum(r.entries.num_rows for r in parsed) / n,
        "parse_s": parse_s / n,
        "fold_s": fold_s / n,
        "keep_s": keep_s / n,
        "merge_s_per_key": merge_s / keys_in,
        "cut_s_per_key": cut_s / merged.key.size,
        "bytes_per_key": sum(getattr(merged, f).nbytes for f in _ARRAYS) / merged.key.size,
        "small_keys_per_rank": small_keys / n,
        "large_keys": merged.key.size - small_keys,
    }


def coordinator_slope(points: list[tuple[int, float, float]]) -> dict[str, float]:
    """The coordinator's CPU seconds and peak MB per rank, from (ranks, cpu_s, peak_mb) of
    whole runs: the slope between the two sizes (one size: through the origin)."""
    points = sorted(points)
    (r0, c0, m0), (r1, c1, m1) = (0, 0.0, 0.0) if len(points) == 1 else points[0], points[-1]
    return {
        "cpu_s_per_rank": (c1 - c0) / (r1 - r0),
        "cpu_s_fixed": c1 - (c1 - c0) / (r1 - r0) * r1,
        "mb_per_rank": (m1 - m0) / (r1 - r0),
        "mb_fixed": m1 - (m1 - m0) / (r1 - r0) * r1,
    }


def model(
    costs: dict[str, float], coord: dict[str, float], ranks: int, workers: int
) -> dict[str, float]:
    """The prediction for ``ranks`` on ``workers`` single-core workers."""
    from frtrace.load.workers.cluster import FAN_IN
    from frtrace.load.workers.executors import CUT_FILES_PER_TASK as FILES_PER_TASK

    tasks = math.ceil(ranks / FILES_PER_TASK)
    pass1_s = ranks * (costs["parse_s"] + costs["fold_s"]) / workers
    tree_s, level, width = 0.0, 0, tasks
    while width > 1:
        level += 1
        width = math.ceil(width / FAN_IN)
        covered = min(ranks, FILES_PER_TASK * FAN_IN**level)
        keys_in = covered * costs["small_keys_per_rank"] + FAN_IN * costs["large_keys"]
        tree_s += math.ceil(width / workers) * keys_in * costs["merge_s_per_key"]
    keys = ranks * costs["small_keys_per_rank"] + costs["large_keys"]
    cut_s = keys * costs["cut_s_per_key"]
    pass2_s = ranks * (costs["parse_s"] + costs["keep_s"]) / workers
    coordinator_s = coord["cpu_s_fixed"] + coord["cpu_s_per_rank"] * ranks
    return {
        "keys": keys,
        "pass1_s": pass1_s,
        "tree_levels": level,
        "tree_s": tree_s,
        "cut_s": cut_s,
        "pass2_s": pass2_s,
        "coordinator_s": coordinator_s,
        # pass 2 and the coordinator's receiving overlap: the longer of the two, then no
        # more than the analysis could add (counted whole: an upper bound)
        "total_s": pass1_s + tree_s + cut_s + max(pass2_s, coordinator_s),
        "coordinator_gb": (coord["mb_fixed"] + coord["mb_per_rank"] * ranks) / 1024,
        "root_worker_gb": 4 * keys * costs["bytes_per_key"] / 2**30,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dumps", type=Path, help="a bench.py set (2d: tp=8 x dp)")
    parser.add_argument(
        "--coordinator",
        nargs="+",
        required=True,
        help="RANKS:CPU_S:PEAK_MB of whole `analyze --scheduler` runs (scripts/bench.py "
        "--scheduler: the coordinator's CPU time and peak), one or two sizes",
    )
    parser.add_argument("--ranks", type=int, default=100_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[32])
    parser.add_argument("--sample", type=int, default=64, help="files measured")
    parser.add_argument("--small", type=int, default=8, help="ranks of a 'small' group")
    parser.add_argument("--json", type=Path, help="also write the costs and predictions here")
    args = parser.parse_args(argv)
    costs = measure(args.dumps, args.sample, args.small)
    points = []
    for spec in args.coordinator:
        r, c, m = spec.split(":")
        points.append((int(r), float(c), float(m)))
    coord = coordinator_slope(points)
    print(
        f"measured on {costs['sample_files']:.0f} files of {args.dumps.name} "
        f"({costs['entries_per_file']:.0f} entries each), one core: parse "
        f"{costs['parse_s'] * 1e3:.2f} ms a file, fold {costs['fold_s'] * 1e3:.2f} ms, keep "
        f"{costs['keep_s'] * 1e3:.2f} ms; merge {costs['merge_s_per_key'] * 1e9:.0f} ns a key in,"
        f" cut {costs['cut_s_per_key'] * 1e9:.0f} ns a key; {costs['bytes_per_key']:.0f} bytes "
        f"a key; {costs['small_keys_per_rank']:.0f} keys a rank in small groups, "
        f"{costs['large_keys']:.0f} in large ones"
    )
    print(
        f"the coordinator (whole runs): {coord['cpu_s_per_rank'] * 1e3:.2f} ms of CPU a rank "
        f"+ {coord['cpu_s_fixed']:.1f} s; {coord['mb_per_rank'] * 1024:.1f} KB a rank + "
        f"{coord['mb_fixed']:.0f} MB"
    )
    print(
        "  ranks  workers        keys  pass 1 s  tree levels  tree s  cut s  pass 2 s"
        "  coordinator s  total s  coordinator GB  root worker GB"
    )
    predictions = []
    for workers in args.workers:
        p = model(costs, coord, args.ranks, workers)
        predictions.append({"workers": workers, **p})
        print(
            f"{args.ranks:7d}  {workers:7d}  {p['keys']:10,.0f}  {p['pass1_s']:8.1f}  "
            f"{int(p['tree_levels']):11d}  {p['tree_s']:6.1f}  {p['cut_s']:5.1f}  "
            f"{p['pass2_s']:8.1f}  {p['coordinator_s']:13.1f}  {p['total_s']:7.1f}  "
            f"{p['coordinator_gb']:14.2f}  {p['root_worker_gb']:14.2f}"
        )
    if args.json:
        payload = {"costs": costs, "coordinator": coord, "predictions": predictions}
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
