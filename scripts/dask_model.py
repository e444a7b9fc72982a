"""The 100,000-rank model of issue 32 (item 4), from costs measured here on a bench.py set.

The design modelled: the coordinator holds per-(group, collective seq) summaries, not every
entry. Each Dask worker reads its files and folds their entries into summaries; the workers'
partial summaries are merged in a tree (log2 W levels) and only the last one reaches the
coordinator. frtrace does not do this yet (its analysis reads every entry, so ``--scheduler``
brings every dump's entries to the coordinator); this script measures what such a design's
cost rests on and prints the model's prediction. What it measures, on the set's first
``--sample`` files, on one core of this machine:

- parse: one file read by frtrace's reader (``try_parse``), the mean (with ``--smaller``,
  also on a set of fewer ranks, and taken as linear in the ranks: every file records the
  default group's member list);
  (every cost is CPU time, steadier than wall time on a shared machine)
- fold: per entry, the sample's entries folded into per-(group, seq) summaries (Arrow's
  ``group_by``: the ranks' count, lowest and highest rank, lowest and highest state, sizes'
  signature and creation time);
- merge: per key going in, two partial summaries (each half of the sample) merged into one;
- bytes per key: a summary's Arrow size, its group column dictionary-encoded;
- keys: the sample's split by its groups' size: groups of up to ``--small`` ranks (tensor
  parallel: their number grows with the ranks) and larger ones (data parallel, the default
  group: as many whatever the ranks), so keys(N) = small keys per rank x N + large keys.

The model, for N ranks x E entries on W single-core workers: the workers' part is
N x (parse + E x fold) / W; the tree's critical path merges, at each of its levels, two
partials covering N / W x 2^level ranks (every key, where any file may go to any worker; only
the large groups' keys, where the files go out in blocks of ranks, a small group's on one
worker, so that the partials' small-group keys are disjoint and put side by side); the last
partial travels to the coordinator (10 Gbit/s); the coordinator holds it twice (received and
in use). The entries and the
sample's per-file costs are this machine's; a cluster's cores and disks are assumed as fast.

Usage (from the repository root)::

    python3 scripts/dask_model.py /tmp/frbench/2d_r4096_e2000_host_stall_s0 --ranks 100000 \
        --workers 32
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
STATES = pa.array(["scheduled", "started", "completed"])
# Per key: what the ranks' entries of one (group, seq) fold into, and how two folds merge.
FOLD = [
    ("rank", "count"),
    ("rank", "min"),
    ("rank", "max"),
    ("state", "min"),
    ("state", "max"),
    ("input_sig", "min"),
    ("input_sig", "max"),
    ("time_created_ns", "min"),
    ("time_created_ns", "max"),
]
MERGE = [(f"{column}_{how}", "sum" if how == "count" else how) for column, how in FOLD]
KEYS = ["group", "seq"]


def summaries(entries: pa.Table) -> pa.Table:
    """The entries' per-(group, collective seq) summaries."""
    plain = pa.table(
        {
            "group": entries.column("group_name").cast(pa.string()),
            "seq": entries.column("collective_seq"),
            "rank": entries.column("rank"),
            "state": pc.index_in(entries.column("state").cast(pa.string()), value_set=STATES),
            "input_sig": entries.column("input_sig"),
            "time_created_ns": entries.column("time_created_ns"),
        }
    ).filter(pc.is_valid(entries.column("collective_seq")))
    return plain.group_by(KEYS).aggregate(FOLD)


def merged(a: pa.Table, b: pa.Table) -> pa.Table:
    """Two partial summaries as one."""
    both = pa.concat_tables([a, b])
    out = both.group_by(KEYS).aggregate(MERGE)
    return out.rename_columns([n.rsplit("_", 1)[0] for n in out.column_names[:-2]] + KEYS)


def _timed(call: Any, *args: Any, repeat: int = 3) -> tuple[Any, float]:
    best, result = math.inf, None
    for _ in range(repeat):
        start = time.process_time()
        result = call(*args)
        best = min(best, time.process_time() - start)
    return result, best


def measure(dumps: Path, sample: int, small: int, only_parse: bool = False) -> dict[str, float]:
    """The costs the model rests on, measured on the first ``sample`` files of ``dumps``
    (``only_parse``: the parse alone)."""
    sys.path.insert(0, str(ROOT))
    from frtrace.load.discover import discover
    from frtrace.load.parse import try_parse
    from frtrace.load.tables import build_dump_set

    every = discover(dumps).candidates
    candidates = every[:sample]
    try_parse(candidates[-1])  # (warm)
    start = time.process_time()
    results = [try_parse(c) for c in candidates]
    parse_s = (time.process_time() - start) / len(candidates)
    if only_parse:
        return {"world": len(every), "parse_s": parse_s}
    loaded = build_dump_set(dumps, candidates, results)
    entries = loaded.entries
    folded, fold_s = _timed(summaries, entries)
    half = pc.less(entries.column("rank"), sample // 2)
    a, b = summaries(entries.filter(half)), summaries(entries.filter(pc.invert(half)))
    both, merge_s = _timed(merged, a, b)
    assert both.num_rows == folded.num_rows
    encoded = folded.set_column(0, "group", pc.dictionary_encode(folded.column("group")))
    sizes = {
        g["group_name"]: len(g["ranks"])
        for g in loaded.groups.select(["group_name", "ranks"]).to_pylist()
        if g["ranks"]
    }
    is_small = pa.array([sizes.get(g, 0) <= small for g in folded.column("group").to_pylist()])
    small_keys = int(pc.sum(is_small).as_py() or 0)
    return {
        "world": len(every),
        "sample_files": len(candidates),
        "entries_per_file": entries.num_rows / len(candidates),
        "parse_s": parse_s,
        "fold_s_per_entry": fold_s / entries.num_rows,
        "merge_s_per_key": merge_s / (a.num_rows + b.num_rows),
        "bytes_per_key": encoded.nbytes / max(1, encoded.num_rows),
        "small_keys_per_rank": small_keys / len(candidates),
        "large_keys": folded.num_rows - small_keys,
    }


def model(costs: dict[str, float], ranks: int, entries: int, workers: int) -> dict[str, float]:
    """The prediction for ``ranks`` x ``entries`` on ``workers`` single-core workers."""
    per_worker = ranks / workers
    parse_s = costs["parse_s"] + costs.get("parse_s_per_member", 0.0) * (ranks - costs["world"])
    read_s = per_worker * (parse_s + entries * costs["fold_s_per_entry"])
    levels = math.ceil(math.log2(workers)) if workers > 1 else 0
    keys = costs["small_keys_per_rank"] * ranks + costs["large_keys"]
    tree_s = blocks_s = 0.0
    for level in range(levels):
        covered = costs["small_keys_per_rank"] * per_worker * 2**level + costs["large_keys"]
        tree_s += 2 * covered * costs["merge_s_per_key"]
        # files given out in blocks of ranks (a small group's ranks on one worker): the
        # partials' small-group keys are disjoint, put side by side; only the rest merge
        blocks_s += 2 * costs["large_keys"] * costs["merge_s_per_key"]
    summary_bytes = keys * costs["bytes_per_key"]
    transfer_s = summary_bytes / 1.25e9
    return {
        "parse_s": parse_s,
        "keys": keys,
        "workers_s": read_s,
        "tree_levels": levels,
        "tree_s": tree_s,
        "tree_blocks_s": blocks_s,
        "transfer_s": transfer_s,
        "total_s": read_s + tree_s + transfer_s,
        "total_blocks_s": read_s + blocks_s + transfer_s,
        "coordinator_gb": 2 * summary_bytes / 1e9,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dumps", type=Path, help="a bench.py set (2d: tp=8 x dp)")
    parser.add_argument("--ranks", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--workers", type=int, nargs="+", default=[32])
    parser.add_argument("--sample", type=int, default=64, help="files measured")
    parser.add_argument("--small", type=int, default=8, help="ranks of a 'small' group")
    parser.add_argument(
        "--smaller",
        type=Path,
        help="a set of fewer ranks: a file's parse measured on both, and taken as growing "
        "linearly with the ranks (each file records the default group's member list)",
    )
    parser.add_argument("--json", type=Path, help="also write the costs and predictions here")
    args = parser.parse_args(argv)
    costs = measure(args.dumps, args.sample, args.small)
    if args.smaller is not None:
        other = measure(args.smaller, args.sample, args.small, only_parse=True)
        if other["world"] != costs["world"]:
            slope = (costs["parse_s"] - other["parse_s"]) / (costs["world"] - other["world"])
            costs["parse_s_per_member"] = max(0.0, slope)
        print(
            f"a file's parse: {other['parse_s'] * 1e3:.2f} ms at {other['world']:,.0f} ranks, "
            f"{costs['parse_s'] * 1e3:.2f} ms at {costs['world']:,.0f}: "
            f"{costs.get('parse_s_per_member', 0.0) * 1e9:.0f} ns more a rank of the job"
        )
    print(
        f"measured on {costs['sample_files']:.0f} files of {args.dumps.name} "
        f"({costs['entries_per_file']:.0f} entries each), one core: parse "
        f"{costs['parse_s'] * 1e3:.2f} ms a file; fold {costs['fold_s_per_entry'] * 1e9:.0f} ns "
        f"an entry; merge {costs['merge_s_per_key'] * 1e9:.0f} ns a key in; "
        f"{costs['bytes_per_key']:.0f} bytes a key; {costs['small_keys_per_rank']:.0f} keys a "
        f"rank in small groups, {costs['large_keys']:.0f} in large ones"
    )
    print(
        "ranks  entries  workers  parse ms a file  keys  workers s  tree levels"
        "  tree s (any files; in rank blocks)  to coordinator s  total s (any; blocks)"
        "  coordinator GB"
    )
    predictions = []
    for workers in args.workers:
        p = model(costs, args.ranks, args.entries, workers)
        predictions.append({"workers": workers, **p})
        print(
            f"{args.ranks:5d}  {args.entries:7d}  {workers:7d}  {p['parse_s'] * 1e3:15.1f}  "
            f"{p['keys']:,.0f}  "
            f"{p['workers_s']:9.1f}  {int(p['tree_levels']):11d}  "
            f"{p['tree_s']:6.1f}; {p['tree_blocks_s']:.1f}  {p['transfer_s']:16.2f}  "
            f"{p['total_s']:7.1f}; {p['total_blocks_s']:.1f}  {p['coordinator_gb']:14.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"costs": costs, "predictions": predictions}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
