"""A send/recv whose own entry cannot say it finished, settled by its rank's ``pg_status``.

NCCL's per-op entries of a batch (``batch_isend_irecv``) never change state: the batch's
closing ``coalesced`` entry carries it (``coalesce.mark_p2p_batches``). Where that entry is
gone (an onlyActive dump drops it once its completion was discovered) the per-op entries stay
``scheduled``, unretired, and read as pending forever: a finished batch would hold its rank
(and name its peers as never posting what they did post).

``pg_status`` says how far the rank's watchdog got in each group: for p2p work its values
count the p2p sequence (FORMAT.md §9), so on a group where the rank recorded no collective
(every entry's ``collective_seq_id`` 0: one counter in ``pg_status``, the p2p one), a
send/recv at ``p2p_seq`` <= ``last_completed`` finished. A group that also ran collectives
mixes both counters in one value and is left alone, as is an entry that speaks for itself
(its batch's closing entry is there, or it was retired: the watchdog gave up on it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from frtrace.load.dumpset import DumpSet

__all__ = ["settle_by_status"]


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
