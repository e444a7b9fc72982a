"""A large set's history cut to its frontier: per-(group, seq) summaries folded where the files
are read, merged in a tree, and from them the entries the analysis needs.

A collective that every rank recording its group recorded, completed everywhere, with one
signature, says nothing about a hang but that it finished: a 100,000-rank job's history is
nearly all such ops. So on a cluster (``load.cluster``) each worker folds its files' entries
into one row per (group, seq) (``fold``: how many ranks have it, whether all completed, the
lowest and highest signature), the workers' partials are merged two by two (``merge``), and
the last merge keeps, per group, only where the first op that is *not* settled lies
(``cut``). The files are then read again and each keeps its entries from ``margin`` ops
before that point on, its own newest ``margin`` ops of each group wherever they lie (a rank
stuck far behind keeps the ops it stopped at), and every p2p entry (``Frontier.keep``): each
rank's history in a group stays one unbroken run to its end. The coordinator never holds a
summary per op, only a cutoff per group.

What the analysis loses is the settled history before the window: stragglers are judged on
the window's ops, and the report says so (``DumpSet.window``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from frtrace.load.opkinds import COMPARE_INPUT_ONLY, COMPARE_OUTPUT_ONLY, UNEVEN_OPS

__all__ = ["LATE_NS", "MARGIN", "Frontier", "Partial", "cut", "fold", "merge"]

# Settled ops kept before the first op that is not: the lead-up the rules and the straggler
# finder read (a straggler needs 3 clear late arrivals; a mismatch shows at the frontier).
MARGIN = 32

# A settled op whose last rank arrived this much after the one before it is kept wherever it
# lies: the straggler finder's evidence (``analysis.stragglers.MIN_MARGIN_MS``, 5 ms; half
# of it here, so an op's arrival read from another of a rank's entries loses no event).
LATE_NS = 2_500_000
_NEVER = np.iinfo(np.int64).min  # no arrival known

_GROUP = ["group_name", "group_desc"]
_KEY = [*_GROUP, "seq"]
_COLUMNS = [*_KEY, "n", "done", "sig_min", "sig_max", "t1", "t2"]  # a partial's keys
_MULT = (0x27D4EB2F165667C5, 0x165667B19E3779F9, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F)

GroupKey = tuple[str, str]
_Rows = TypeVar("_Rows", pa.RecordBatch, pa.Table)


@dataclass(frozen=True, slots=True)
class Partial:
    """What some ranks' files say per (group, seq) and per group."""

    keys: pa.Table  # group_name, group_desc, seq, n, done, sig_min, sig_max, t1, t2
    groups: pa.Table  # group_name, group_desc, first (highest rank's lowest seq), last


@dataclass(frozen=True, slots=True)
class Frontier:
    """Per group, the first seq every rank keeps (each rank also keeps its own newest
    ``margin`` ops of the group, wherever its cutoff is)."""

    margin: int
    cutoffs: dict[GroupKey, int]
    settled: int  # ops settled before their group's cutoff (their entries not kept)
    # settled ops before the cutoff kept all the same: one rank arrived clearly last
    late: dict[GroupKey, frozenset[int]] = field(default_factory=dict)

    def keep(self, entries: _Rows) -> _Rows:
        """One dump's entries, less the settled history before its groups' cutoffs."""
        if entries.num_rows == 0:
            return entries
        names, descs = _texts(entries, "group_name"), _texts(entries, "group_desc")
        seq = entries.column("collective_seq")
        p2p = entries.column("is_p2p").fill_null(False).to_numpy(zero_copy_only=False)
        keep = seq.is_null().to_numpy(zero_copy_only=False) | p2p
        seqs = seq.fill_null(0).to_numpy()
        pairs = np.array([f"{n}\x00{d}" for n, d in zip(names, descs, strict=True)])
        for pair in np.unique(pairs):
            rows = pairs == pair
            name, _, desc = str(pair).partition("\x00")
            cutoff = self.cutoffs.get((name, desc))
            if cutoff is None:  # a group no summary knows: all kept
                keep |= rows
                continue
            mine = seqs[rows & ~keep]
            if mine.size == 0:
                continue
            own = int(mine.max())  # this rank's newest op in the group
            keep |= rows & (seqs > min(cutoff - 1, own - self.margin))
            late = self.late.get((name, desc))
            if late:
                keep |= rows & np.isin(seqs, np.fromiter(late, dtype=np.int64))
        if keep.all():
            return entries
        return entries.filter(pa.array(keep))


def _texts(entries: pa.RecordBatch | pa.Table, column: str) -> list[str]:
    """A text column's values per row, null as ''."""
    values = entries.column(column)
    decoded = pc.cast(values, pa.string())
    out: list[str] = decoded.fill_null("").to_pylist()
    return out


def _signature(entries: pa.Table) -> np.ndarray:
    """Per entry, a value equal across ranks where matching would call the ops equal (op,
    dtypes, and the sizes the op's family compares); unequal where it might not."""
    ops = pc.cast(entries.column("op"), pa.string()).fill_null("").to_pylist()
    op_hash = np.array([zlib.crc32(o.encode()) for o in ops], dtype=np.uint64)
    family = np.array(ops, dtype=object)
    uneven = np.isin(family, list(UNEVEN_OPS))
    input_only = np.isin(family, list(COMPARE_INPUT_ONLY))
    output_only = np.isin(family, list(COMPARE_OUTPUT_ONLY))

    def sig(column: str, skip: np.ndarray) -> np.ndarray:
        values: np.ndarray = entries.column(column).fill_null(0).to_numpy().astype(np.uint64)
        values[skip] = 0
        return values

    parts = (
        sig("input_dtype_sig", output_only),
        sig("output_dtype_sig", input_only),
        sig("input_sig", uneven | output_only),
        sig("output_sig", uneven | input_only),
    )
    out = op_hash
    with np.errstate(over="ignore"):
        for part, mult in zip(parts, _MULT, strict=True):
            out = (out * np.uint64(0x100000001B3)) ^ (part * np.uint64(mult))
    return out


def fold(entries: pa.RecordBatch | pa.Table) -> Partial:
    """One rank's dump, as a partial: its collectives per (group, seq), its groups' extent."""
    table = pa.Table.from_batches([entries]) if isinstance(entries, pa.RecordBatch) else entries
    seq = table.column("collective_seq")
    collective = pc.and_(pc.invert(table.column("is_p2p").fill_null(False)), seq.is_valid())
    table = table.filter(collective)
    rows = pa.table(
        {
            "group_name": pa.array(_texts(table, "group_name"), pa.string()),
            "group_desc": pa.array(_texts(table, "group_desc"), pa.string()),
            "seq": table.column("collective_seq"),
            "done": pc.equal(table.column("state").cast(pa.string()), "completed").fill_null(False),
            "sig": pa.array(_signature(table), pa.uint64()),
            "t": table.column("time_created_ns").fill_null(_NEVER),
        }
    )
    # a rank's entries of one op (a coalesced run: its ops stay "scheduled", its marker says
    # how the run ended) as one: finished if any is, one signature whatever their order (a
    # sum that wraps)
    keys = rows.group_by(_KEY).aggregate([("done", "max"), ("sig", "sum"), ("t", "min")])
    sig, t = keys.column("sig_sum"), keys.column("t_min")
    keys = keys.drop_columns(["sig_sum", "t_min"]).rename_columns([*_KEY, "done"])
    keys = keys.append_column("sig_min", sig).append_column("sig_max", sig)
    keys = keys.append_column("n", pa.array(np.ones(keys.num_rows, dtype=np.int64)))
    keys = keys.append_column("t1", t)  # this rank's arrival
    keys = keys.append_column("t2", pa.array(np.full(keys.num_rows, _NEVER, dtype=np.int64)))
    keys = keys.select(_COLUMNS)
    groups = rows.group_by(_GROUP).aggregate([("seq", "min"), ("seq", "max")])
    return Partial(keys=keys, groups=groups.rename_columns([*_GROUP, "first", "last"]))


def merge(*partials: Partial) -> Partial:
    """Several partials as one: counts added, agreement and extents combined."""
    rows = pa.concat_tables([p.keys.select(_COLUMNS) for p in partials])
    keys = rows.group_by(_KEY, use_threads=False).aggregate(
        [("n", "sum"), ("done", "min"), ("sig_min", "min"), ("sig_max", "max")]
    )
    keys = keys.rename_columns([*_KEY, "n", "done", "sig_min", "sig_max"])
    t1, t2 = _last_two(rows, keys)
    keys = keys.append_column("t1", pa.array(t1)).append_column("t2", pa.array(t2))
    groups = pa.concat_tables([p.groups for p in partials])
    groups = groups.group_by(_GROUP).aggregate([("first", "max"), ("last", "max")])
    return Partial(keys=keys, groups=groups.rename_columns([*_GROUP, "first", "last"]))


def _last_two(rows: pa.Table, keys: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Per key of ``keys`` (in its order), the last and second-to-last arrival over ``rows``
    (each a partial's last two)."""
    import pandas as pd

    frame = rows.select([*_KEY, "t1", "t2"]).to_pandas()
    order = pd.MultiIndex.from_frame(keys.select(_KEY).to_pandas())
    grouped = frame.groupby(_KEY, sort=False)
    first = grouped["t1"].max()
    second = frame["t1"].where(grouped["t1"].rank(method="first", ascending=False) == 2)
    runner_up = second.groupby([frame[k] for k in _KEY], sort=False).max()
    t2 = grouped["t2"].max().combine(runner_up.reindex(first.index), max, fill_value=_NEVER)
    return (
        first.reindex(order).to_numpy(np.int64),
        t2.reindex(order).fillna(_NEVER).to_numpy(np.int64),
    )


def cut(partial: Partial, margin: int = MARGIN) -> Frontier:
    """Per group, the first op that is not settled (not every rank that records the group
    has it, not completed everywhere, or two signatures) at or after the seq from which
    every such rank still holds its history; the cutoff ``margin`` ops before it."""
    import pandas as pd

    keys = partial.keys.to_pandas()
    groups = partial.groups.to_pandas().set_index(_GROUP)
    if keys.empty:
        return Frontier(margin=margin, cutoffs={}, settled=0)
    most = keys.groupby(_GROUP)["n"].transform("max")
    unsettled = (keys["n"] < most) | ~keys["done"] | (keys["sig_min"] != keys["sig_max"])
    keys = keys.join(groups, on=_GROUP)
    after = keys[unsettled & (keys["seq"] >= keys["first"])]
    frontier = after.groupby(_GROUP)["seq"].min()
    stop = groups["last"] + 1
    stop.update(frontier)  # (no unsettled op: the cut is at the group's end)
    cutoffs = (stop - margin).astype(np.int64)
    at = cutoffs.reindex(pd.MultiIndex.from_frame(keys[_GROUP])).to_numpy()
    below = pd.Series(keys["seq"].to_numpy() < at, index=keys.index)
    known = (keys["t1"] != _NEVER) & (keys["t2"] != _NEVER)
    late = ~unsettled & below & known & (keys["t1"] - keys["t2"] >= LATE_NS)
    return Frontier(
        margin=margin,
        cutoffs={(str(n), str(d)): int(c) for (n, d), c in cutoffs.items()},
        settled=int((~unsettled & below & ~late).sum()),
        late={
            (str(n), str(d)): frozenset(int(s) for s in part["seq"])
            for (n, d), part in keys[late].groupby(_GROUP)
        },
    )
