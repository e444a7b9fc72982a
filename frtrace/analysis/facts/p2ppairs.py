"""Which send meets which recv: in one group, the n-th send from a to b meets b's n-th recv
from a (NCCL and Gloo match point-to-point ops in posting order per pair of ranks).

A pending send or recv is only "not posted by its peer" when the peer's buffer shows fewer
ops of the other kind with it than the n-th; its peer did post it when the n-th is there,
finished or not. Without counting, a finished batch's per-op entries (NCCL keeps them
``scheduled``: their batch's closing entry carries the state) or the peer's next op with the
same rank would be taken for the match, and a stage that posted its half named as never
posting it (or a stage blocked behind it read as in flight).

Counting needs each side's whole history of p2p ops in the group: a rank's ``p2p_seq``
(+1 per p2p op or batch, per group; before torch 2.4 the ``seq_id`` that also counts the
group's collectives) shows it, when the values its buffer holds are 1, 2, ... with none
missing (a wrapped buffer, or an onlyActive dump that dropped finished standalone ops, does
not). Pairs where either side's history is not whole are not paired here; the wait graph then
falls back to any pending op of the other kind with the same peer.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["pair_p2p"]


def pair_p2p(p2p: pd.DataFrame, keys: pd.DataFrame, wrapped: set[int]) -> dict[int, int]:
    """For each unfinished send/recv of ``p2p`` (``pending.p2p_ops``) whose pair of ranks can
    be counted: the entries-table row of the op it meets, or -1 where its peer has not posted
    it. ``keys``: every p2p entry's (rank, gid, p2p_seq: its batch), closing entries included;
    ``wrapped``: ranks whose buffer wrapped (one without a p2p entry in a group then says
    nothing of the ops it posted there)."""
    ops = p2p[p2p["peer"].notna()]
    if ops.empty:
        return {}
    ranks = ops["rank"].to_numpy(dtype=np.int64)
    peers = ops["peer"].to_numpy(dtype=np.int64)
    gids = ops["gid"].to_numpy(dtype=np.int64)
    is_send = (ops["kind"] == "send").to_numpy()
    frame = pd.DataFrame(
        {
            "gid": gids,
            "src": np.where(is_send, ranks, peers),
            "dst": np.where(is_send, peers, ranks),
            "send": is_send,
            "row": ops["row"].to_numpy(dtype=np.int64),
            "done": ops["done"].to_numpy(dtype=bool),
        }
    ).sort_values("row", kind="stable")
    # the n-th of each kind on each (group, sender, receiver): posting order is row order
    frame["n"] = frame.groupby(["gid", "src", "dst", "send"]).cumcount()
    whole = _whole_histories(keys)
    present = pd.MultiIndex.from_frame(keys[["rank", "gid"]].drop_duplicates())
    is_whole = pd.MultiIndex.from_tuples(sorted(whole)) if whole else present[:0]

    def counted(rank: np.ndarray, gid: np.ndarray) -> np.ndarray:
        at = pd.MultiIndex.from_arrays([rank, gid])
        # no p2p entry in the group, and nothing lost: it posted none there
        none = ~at.isin(present) & ~np.isin(rank, sorted(wrapped))
        out: np.ndarray = at.isin(is_whole) | none
        return out

    gid = frame["gid"].to_numpy()
    frame = frame[counted(frame["src"].to_numpy(), gid) & counted(frame["dst"].to_numpy(), gid)]
    # each unfinished op with the row of the other kind's op at the same place, if posted
    other = frame[["gid", "src", "dst", "n", "row"]].assign(send=~frame["send"])
    open_ops = frame.loc[~frame["done"], ["gid", "src", "dst", "n", "send", "row"]]
    met = open_ops.merge(
        other, on=["gid", "src", "dst", "n", "send"], how="left", suffixes=("", "_other")
    )
    partner = met["row_other"].fillna(-1).to_numpy(dtype=np.int64)
    return dict(zip(met["row"].tolist(), partner.tolist(), strict=True))


def _whole_histories(keys: pd.DataFrame) -> set[tuple[int, int]]:
    """(rank, gid) whose buffer holds every p2p op the rank posted in the group: its p2p_seq
    values are 1..n with none missing."""
    known = keys.dropna(subset=["p2p_seq"])
    if known.empty:
        return set()
    seqs = known.assign(p2p_seq=known["p2p_seq"].astype(np.int64)).drop_duplicates()
    agg = seqs.groupby(["rank", "gid"])["p2p_seq"].agg(["min", "max", "count"])
    whole = agg[(agg["min"] == 1) & (agg["max"] == agg["count"])]
    return {(int(r), int(g)) for r, g in whole.index}
