"""Logical ops from raw entries: a coalesced run counts once, a p2p batch carries its state.

A run of entries sharing one seq and ended by a ``*coalesced`` entry is one logical collective
whose signature is built from all its entries; a ``coalesced`` entry closing a batch of sends
and receives is p2p and carries the batch's state. Runs cut by a wrapped buffer are dropped.
Vectorised: segments of one sort, each column one gather or segment reduction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionArray

from frtrace.load.dumpset import DumpSet
from frtrace.load.hooks import runs_order

__all__ = ["drop_truncated_runs", "logical_collectives", "mark_p2p_batches"]


def mark_p2p_batches(frame: pd.DataFrame) -> None:
    """A ``coalesced`` entry closing a batch of p2p ops is itself p2p, and carries their state.

    Inside ``batch_isend_irecv`` the individual send/recv entries stay ``scheduled``; the
    closing ``coalesced`` entry (same rank, group and p2p_seq) is the one that completes. It is
    recorded with ``is_p2p`` false, so it is recognised by following p2p entries.
    """
    is_marker = frame["op"].eq("coalesced")
    if not is_marker.any():  # (no batch: no copy of the frame below)
        return
    prev_p2p = frame["is_p2p"].shift(1, fill_value=False) & frame["rank"].eq(frame["rank"].shift(1))
    frame.loc[is_marker & prev_p2p, "is_p2p"] = True
    # Everything below is about p2p rows (batch markers included): those alone, not a copy
    # of every row of the frame.
    p2p = frame.loc[
        frame["is_p2p"].to_numpy(dtype=bool),
        ["rank", "gid", "p2p_seq", "seq", "op", "done", "state_rank"],
    ]
    # the batch's key: p2p_seq (torch 2.4+); before that one seq_id counted both kinds of op
    framed = p2p.assign(batch=p2p["p2p_seq"].fillna(p2p["seq"]))
    del p2p
    is_marker = framed["op"].eq("coalesced")
    markers = framed[is_marker & framed["batch"].notna()]
    if markers.empty:
        return
    batch_state = markers.groupby(["rank", "gid", "batch"])[["done", "state_rank"]].max()
    ops = framed[~is_marker & framed["batch"].notna()]
    joined = (
        ops.reset_index()
        .merge(
            batch_state.reset_index(),
            on=["rank", "gid", "batch"],
            how="left",
            suffixes=("", "_batch"),
        )
        .set_index("index")
    )
    has_batch = joined["done_batch"].notna()
    idx = joined.index[has_batch]
    frame.loc[idx, "done"] = joined.loc[has_batch, "done_batch"].astype(bool)
    frame.loc[idx, "state_rank"] = joined.loc[has_batch, "state_rank_batch"].astype(np.int8)


def logical_collectives(frame: pd.DataFrame, keep: np.ndarray | None = None) -> pd.DataFrame:
    """One row per (rank, gid, seq) of the collectives in ``frame`` (its rows where ``keep``,
    else all; an entry's row in the table is its index), in (gid, seq, rank) order; coalesced
    runs folded into one signature. Consumes ``frame`` (its columns are taken out one by one,
    each filtered alone: never a copy of the whole frame).

    One sort of the rows by (gid, seq, rank, row) puts each run's entries side by side; every
    logical op is then a segment of that order (one row, or a run), and each output column is
    one gather or one segment reduction: no hash of 8M keys, no copy of the whole frame.
    """
    # Each input column is taken out of ``coll`` at its last use and freed there: at 32,768
    # ranks every column is 65M rows, and the frame and the output never coexist whole.

    def take(name: str) -> ExtensionArray:
        # (the values alone: a filtered Series would carry an index of the kept rows, and
        # resetting it copied them again: 16 bytes per row at the peak)
        column: ExtensionArray = frame.pop(name).array
        if keep is None:
            return column
        kept: ExtensionArray = column[keep]
        return kept

    gid = take("gid").to_numpy()
    seq = take("seq").to_numpy(dtype=np.int64)  # (no nulls: the collectives have a seq)
    rank = take("rank").to_numpy()
    row = _rows(frame, keep)
    order, first = _op_order(gid, seq, rank, row)
    n = len(order)
    runs = len(first) < n
    if runs:
        last = np.append(first[1:], n) - 1
        at_first, at_last = order[first], order[last]
    else:  # (every op one entry, as in most jobs: no index arrays besides the order)
        first = last = at_first = at_last = order

    out: dict[str, Any] = {}
    out["rank"] = rank[at_first]
    out["gid"] = gid[at_first]
    out["seq"] = seq[at_first]
    del rank, gid, seq
    out["row"] = row[at_first]
    out["last_row"] = row[at_last] if runs else out["row"]
    del row
    out["op"] = take("op").take(at_last)  # a run's closing entry
    op_code = take("op_code").to_numpy()
    out["op_code"] = op_code[at_last]
    sig_all = take("sig").to_numpy()
    sig = sig_all[at_first]
    del at_first, at_last  # (an int64 per op each, not needed below)
    if runs:
        _fold_run_signatures(sig, sig_all, op_code, order, first, last)
    del sig_all, op_code
    out["sig"] = sig
    done = take("done").to_numpy(dtype=bool)[order]
    out["done"] = np.logical_or.reduceat(done, first) if runs else done
    del done
    state = take("state_rank").to_numpy()[order]
    out["state_rank"] = np.maximum.reduceat(state, first) if runs else state
    del state
    if runs:
        out["created_ns"] = _first_valid(take("created_ns"), order, first, last)
        out["n_entries"] = (last - first + 1).astype(np.int32)
    else:
        out["created_ns"] = take("created_ns").take(order)
        out["n_entries"] = np.ones(n, dtype=np.int32)
    del order, first, last
    for name in list(frame.columns):  # consumed
        del frame[name]
    # (copy=False: the columns are fresh arrays; pandas would otherwise copy them into one
    # block per dtype, twice the frame for a moment)
    return pd.DataFrame({name: out[name] for name in _LOGICAL_COLUMNS}, copy=False)


def _segment_firsts(order: np.ndarray, columns: tuple[np.ndarray, ...]) -> np.ndarray:
    """The first place, in ``order``, of each run of rows equal in every one of ``columns``."""
    start = np.zeros(len(order), dtype=bool)
    start[:1] = True
    for column in columns:
        ordered = column[order]
        start[1:] |= ordered[1:] != ordered[:-1]
        del ordered
    first: np.ndarray = np.flatnonzero(start)
    return first


def _rows(frame: pd.DataFrame, keep: np.ndarray | None) -> np.ndarray:
    """Each kept row's place in the table: the frame's index (``match``'s frame: each row's
    place in it), as int32."""
    index = frame.index
    if isinstance(index, pd.RangeIndex) and index.step == 1:
        at = np.arange(index.start, index.stop, dtype=np.int32)
    else:
        at = index.to_numpy().astype(np.int32)
    return at if keep is None else at[keep]


def _fold_run_signatures(
    sig: np.ndarray,
    sig_all: np.ndarray,
    op_code: np.ndarray,
    order: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
) -> None:
    """Each run's signature, in ``sig`` (one per logical op): every member entry's op and
    sizes, in order (position-weighted so that two runs with the same entries in another
    order differ); worked out for the entries of runs only."""
    multi = np.flatnonzero(last > first)
    lengths = (last - first + 1)[multi]
    offsets = np.cumsum(lengths) - lengths  # each run's first place among run entries
    run = np.repeat(np.arange(len(multi)), lengths)
    position = np.arange(int(lengths.sum())) - offsets[run]
    rows = order[first[multi][run] + position]
    del run
    with np.errstate(over="ignore"):
        part = (
            sig_all[rows].view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
            + op_code[rows].astype(np.uint64) * np.uint64(0x632BE59BD9B4E019)
        ) * (position.astype(np.uint64) * np.uint64(2) + np.uint64(1))
    sig[multi] = np.add.reduceat(part, offsets).view(np.int64)


def _op_order(
    gid: np.ndarray, seq: np.ndarray, rank: np.ndarray, row: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The rows' order by (gid, seq, rank, row), and where in it each run of rows equal in
    (gid, seq, rank) starts.

    Rows come in (rank, row) order as loaded (one rank's file after another): a stable sort
    on one int64 key of (gid, seq) keeps that order among equals, one pass instead of four;
    where the key's values are few enough (``_most_counted``), a counting sort in C that finds
    the runs as it goes (``load.hooks.runs_order``): at 4,096 ranks 0.08 s, against 0.15 s for
    the sort and 0.08 s for the runs (``CHANGELOG.md``, stop 45), the same order and
    runs.
    """
    n = len(gid)
    if n > 1 and bool((rank[1:] >= rank[:-1]).all()):
        low, high = int(seq.min()), int(seq.max())
        width = high - low + 1
        span = width * (int(gid.max()) + 1)
        if span < 1 << 62:
            # gid * width + (seq - low), in place in one array: the sum wraps on the way
            # only where the result fits (int64 arithmetic is modular); two temporaries of
            # 8 bytes an entry were 0.3 s of fresh memory at 4,096 ranks. In 4 bytes where
            # the sum before ``- low`` fits (``span + high``): the stable sort takes half as
            # long (0.25 s, not 0.49 s, for 8 million), the int64 seq added in by numpy's
            # casting, with no temporary
            narrow = low >= 0 and span + high < 1 << 31
            key: np.ndarray[Any, np.dtype[np.signedinteger[Any]]] = gid.astype(
                np.int32 if narrow else np.int64
            )
            key *= width
            key += seq
            key -= low
            counted = runs_order(key, rank, span) if span <= _most_counted(n) else None
            if counted is not None:
                return counted
            order: np.ndarray = np.argsort(key, kind="stable")
            # (the key tells (gid, seq) apart in one gather, not two)
            return order, _segment_firsts(order, (key, rank))
        order = np.lexsort((seq, gid))
    else:
        order = np.lexsort((row, rank, seq, gid))
    return order, _segment_firsts(order, (gid, seq, rank))


def _most_counted(rows: int) -> int:
    """The most distinct keys a counting sort takes for ``rows`` rows: its counts (8 bytes a
    key) are then at most twice the order it makes, and its time linear in the rows."""
    return 2 * rows + (1 << 16)


def _first_valid(
    column: ExtensionArray, order: np.ndarray, first: np.ndarray, last: np.ndarray
) -> pd.Series:
    """Per segment [first, last] of ``order``: the first non-null value (as pandas' "first")."""
    values = column.to_numpy(dtype=np.int64, na_value=0)[order]
    valid = ~np.asarray(column.isna())[order]
    if valid[first].all() or not len(first):
        return pd.Series(pd.array(values[first], dtype="Int64"))
    candidate = np.where(valid, np.arange(len(order)), len(order))
    at = np.minimum.reduceat(candidate, first)
    found = at <= last
    picked = pd.array(np.where(found, values[np.minimum(at, len(order) - 1)], 0), dtype="Int64")
    picked[~found] = pd.NA
    return pd.Series(picked)


_LOGICAL_COLUMNS = [
    "rank",
    "gid",
    "seq",
    "row",
    "last_row",
    "op",
    "op_code",
    "sig",
    "done",
    "state_rank",
    "created_ns",
    "n_entries",
]


def drop_truncated_runs(
    dumps: DumpSet, first_row: pd.Series, collectives: pd.DataFrame
) -> pd.DataFrame:
    """Forget a coalesced run cut in half by the ring buffer.

    When a buffer wraps inside a coalesced run, the oldest surviving entries are its tail
    (often just the closing ``*_coalesced`` marker, with no sizes): comparing that with a
    peer's whole run would be a false mismatch. Only a wrapped rank's oldest op can be cut.
    ``first_row``: each rank's first entry row.
    """
    files = dumps.files
    wrapped = [
        r
        for r, w in zip(
            files.column("rank").to_pylist(), files.column("wrapped").to_pylist(), strict=True
        )
        if w
    ]
    if not wrapped:
        return collectives
    oldest = collectives["rank"].map(first_row[first_row.index.isin(wrapped)])
    coalesced = (collectives["n_entries"] > 1) | collectives["op"].str.contains(
        "coalesced", case=False, regex=False
    )
    cut = (collectives["row"] == oldest) & coalesced
    if not cut.any():
        return collectives
    # A lone *_coalesced entry with sizes is a whole op (the fast-path coalesced APIs record
    # one entry with every tensor's shape), not the closing marker of a cut run (no sizes).
    # An onlyActive dump, which looks wrapped, often holds just such an op.
    alone = cut & (collectives["n_entries"] == 1)
    if alone.any():
        rows = collectives.loc[alone, "row"].to_numpy()
        sizes = dumps.entries.column("input_sizes").take(rows).to_pylist()
        whole = np.array([bool(s) for s in sizes], dtype=bool)
        cut.loc[alone] = ~whole
    if not cut.any():
        return collectives
    return collectives[~cut].reset_index(drop=True)
