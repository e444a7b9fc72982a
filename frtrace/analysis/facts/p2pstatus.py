"""An op whose own entries cannot say it finished, settled by its rank's ``pg_status``.

NCCL's per-op entries of a batch (``batch_isend_irecv``) never change state: the batch's
closing ``coalesced`` entry carries it (``coalesce.mark_p2p_batches``). Where that entry is
gone (an onlyActive dump drops it once its completion was discovered) the per-op entries stay
``scheduled``, unretired, and read as pending forever: a finished batch would hold its rank
(and name its peers as never posting what they did post). The same holds for a coalesced
run of collectives (the slow path, torch 2.8+: ``_broadcast_oop`` entries closed by
``ALLGATHER_coalesced``): its closing entry gone, the run reads as pending.

``pg_status`` says how far the rank's watchdog got in each group: for p2p work its values
count the p2p sequence (FORMAT.md §9), so on a group where the rank recorded no collective
(every entry's ``collective_seq_id`` 0: one counter in ``pg_status``, the p2p one), a
send/recv at ``p2p_seq`` <= ``last_completed`` finished; on a group where it recorded no
p2p op (none in its buffer, and the op's ``p2p_seq_id`` 0: none before it), a coalesced run
at ``seq`` <= ``last_completed`` finished. A group that ran both mixes both counters in one
value and is left alone, as is an entry that speaks for itself (its batch's or run's closing
entry is there, a collective of its own that moves its state, or it was retired: the
watchdog gave up on it): a rank's own ``pg_status`` never overrules its own entry's state.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from frtrace.load.dumpset import DumpSet

__all__ = ["settle_by_status", "settle_collectives_by_status"]


def settle_by_status(
    p2p: pd.DataFrame,
    closed: pd.DataFrame,
    dumps: DumpSet,
    with_collectives: set[tuple[int, int]],
) -> pd.DataFrame:
    """``p2p`` (``pending.p2p_ops``) with ``done`` set where ``pg_status`` says the op
    finished; ``closed``: the batches whose closing entry is there (rank, gid, p2p_seq);
    ``with_collectives``: the (rank, gid) whose buffer holds a collective of the group."""
    status = dumps.pg_status
    if p2p.empty or status.num_rows == 0:
        return p2p
    entries = dumps.entries
    rows = pa.array(p2p["row"].to_numpy(), type=pa.int64())
    ops = pd.DataFrame(
        {
            "rank": p2p["rank"].to_numpy(),
            "gid": p2p["gid"].to_numpy(),
            "p2p_seq": p2p["p2p_seq"].astype("Int64").to_numpy(dtype=np.int64, na_value=-1),
            "pg_id": entries.column("pg_id").take(rows).fill_null(-1).to_numpy(),
            "coll": entries.column("collective_seq").take(rows).fill_null(-1).to_numpy(),
        }
    )
    retired = entries.column("retired").take(rows).fill_null(False).to_numpy()
    # a group where the rank ran collectives (now, or before its window: p2p entries carry
    # the group's current collective seq) counts both kinds in one pg_status value
    coll = ops.groupby(["rank", "gid"])["coll"].agg(["min", "max"])
    pure = coll[(coll["min"] == 0) & (coll["max"] == 0)].index
    if with_collectives:
        pure = pure.difference(pd.MultiIndex.from_tuples(sorted(with_collectives)))
    last = pd.DataFrame(
        {
            "rank": status.column("rank").to_numpy(),
            "pg_id": status.column("pg_id").to_numpy(),
            "last": status.column("last_completed").fill_null(-1).to_numpy(),
        }
    )
    keys = ops[["rank", "pg_id"]].merge(last, on=["rank", "pg_id"], how="left")["last"]
    seq = ops["p2p_seq"].to_numpy()
    reached = (keys.fillna(-1).to_numpy() >= seq) & (seq > 0)
    in_pure = pd.MultiIndex.from_frame(ops[["rank", "gid"]]).isin(pure)
    batch = pd.MultiIndex.from_frame(ops[["rank", "gid", "p2p_seq"]])
    speaks = batch.isin(pd.MultiIndex.from_frame(closed[["rank", "gid", "p2p_seq"]]))
    # its batch's closing entry says how it went; a retired entry was given up on
    settled = reached & in_pure & ~speaks & ~retired
    done = p2p["done"].to_numpy(dtype=bool)
    if not (settled & ~done).any():
        return p2p
    return p2p.assign(done=done | settled)


def _last_completed(dumps: DumpSet) -> pd.DataFrame:
    status = dumps.pg_status
    return pd.DataFrame(
        {
            "rank": status.column("rank").to_numpy(),
            "pg_id": status.column("pg_id").to_numpy(),
            "last": status.column("last_completed").fill_null(-1).to_numpy(),
        }
    )


# The slow path's per-op entries, which torch records only inside a coalesced run (an uneven
# all_gather, reduce_scatter): a lone one is a run whose other entries are gone.
_RUN_MEMBERS = ("_broadcast_oop", "_reduce_oop")


def _op_is(column: pd.Series, test: Callable[[str], bool]) -> np.ndarray:
    """Per row, whether its op's name passes ``test`` (a categorical's names tested once)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        names = [test(str(c)) for c in column.cat.categories]
        hit = np.array([*names, False], dtype=bool)  # (code -1, a null: the last)
        found: np.ndarray = hit[column.cat.codes.to_numpy()]
        return found
    return np.array([test(str(v)) for v in column.tolist()], dtype=bool)


def settle_collectives_by_status(
    collectives: pd.DataFrame, dumps: DumpSet, p2p_rows: pd.DataFrame
) -> pd.DataFrame:
    """``collectives`` (``coalesce.logical_collectives``) with ``done`` set where a coalesced
    run's closing entry is gone and the rank's ``pg_status`` says the run finished, on a group
    where the rank ran no p2p op; ``p2p_rows``: the p2p entries' rows (rank, gid), whose
    groups are left alone."""
    if collectives.empty or dumps.pg_status.num_rows == 0:
        return collectives
    done = collectives["done"].to_numpy(dtype=bool)
    pending = np.flatnonzero(~done)  # (few: the ops not finished)
    op = collectives["op"].iloc[pending]
    closed = _op_is(op, lambda name: name.endswith("coalesced"))
    unclosed = (collectives["n_entries"].to_numpy()[pending] > 1) & ~closed
    todo = pending[unclosed | _op_is(op, lambda name: name in _RUN_MEMBERS)]
    if not len(todo):
        return collectives
    entries = dumps.entries
    first = pa.array(collectives["row"].to_numpy()[todo], type=pa.int64())
    last_row = pa.array(collectives["last_row"].to_numpy()[todo], type=pa.int64())
    ops = pd.DataFrame(
        {
            "rank": collectives["rank"].to_numpy()[todo],
            "gid": collectives["gid"].to_numpy()[todo],
            "pg_id": entries.column("pg_id").take(first).fill_null(-1).to_numpy(),
        }
    )
    keys = ops.merge(_last_completed(dumps), on=["rank", "pg_id"], how="left")["last"]
    seq = collectives["seq"].to_numpy(dtype=np.int64)[todo]
    settled = (keys.fillna(-1).to_numpy() >= seq) & (seq > 0)
    # p2p before it (its p2p_seq_id counts them), or a retired entry (given up on)
    settled &= entries.column("p2p_seq").take(last_row).fill_null(0).to_numpy() <= 0
    for rows in (first, last_row):  # (a run's first and last entry)
        settled &= ~entries.column("retired").take(rows).fill_null(False).to_numpy()
    if settled.any() and not p2p_rows.empty:  # p2p in the buffer, after it or before
        mixed = pd.MultiIndex.from_frame(p2p_rows[["rank", "gid"]].drop_duplicates())
        settled &= ~pd.MultiIndex.from_frame(ops[["rank", "gid"]]).isin(mixed)
    if not settled.any():
        return collectives
    done = done.copy()  # (the frame's own values may be read-only)
    done[todo[settled]] = True
    return collectives.assign(done=done)
