"""Who finished what: completion settled across members, pending ops, where each rank blocks.

A collective cannot finish on one member unless every member joined it, so completion is a
consensus over the members (forgiving Gloo's late ``retired`` but not a mismatch or a missing
member). Each rank's oldest unfinished op, collective or p2p, is where it is blocked.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import pandas as pd
import pyarrow as pa

from frtrace.analysis.facts.failure import FailedOp, find_failed
from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import COLLECTIVE, P2P, OpRef
from frtrace.analysis.facts.segments import locate_ops, op_starts, per_row
from frtrace.load.dumpset import DumpSet

__all__ = [
    "blocked_ops",
    "consensus_of",
    "p2p_ops",
    "pending_collectives",
    "pending_p2p_ops",
    "settle_completion",
]


def settle_completion(
    dumps: DumpSet,
    membership: Membership,
    collectives: pd.DataFrame,
    consensus: pd.DataFrame,
    spans: pd.DataFrame,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple[int, int], FailedOp]]:
    """Decide, per (group, seq) and member, whether the op finished.

    A collective cannot finish on one member unless every member joined it, so one member's
    "finished" vouches for all — this forgives Gloo marking an op retired a moment late. It
    does not hold when the members disagree (a mismatched op can return garbage on one side),
    nor for Gloo when a member has no dump (Gloo retires a *failed* op, e.g. after its peer
    crashed, exactly like a finished one). There, each member speaks only for itself.

    A retired op that cannot have completed (``failure.find_failed``: a member never reached
    it, joined it after a peer's timeout, or the job stopped in it with a member unseen) is
    not done on any member: they are all still waiting in it, as if the dumps had been taken
    while they blocked.

    Sets ``done`` (effective, per member) in collectives and adds ``finished`` (every member
    that recorded it is done) to consensus; ``done_any`` keeps "some member finished it".
    ``spans``: ``segments.rank_group_spans`` of the collectives. Returns the failed ops too.
    """
    failed = find_failed(dumps, membership, collectives, consensus, spans)
    if collectives.empty:
        return collectives, consensus.assign(finished=pd.Series([], dtype=bool)), failed
    starts = consensus["start"].to_numpy()
    counts = consensus["n_present"].to_numpy()
    op_gid = consensus["gid"].to_numpy()
    done_any = consensus["done_any"].to_numpy(dtype=bool)
    if failed:
        is_failed = np.zeros(len(consensus), dtype=bool)
        is_failed[locate_ops(op_gid, consensus["seq"].to_numpy(dtype=np.int64), failed)] = True
        collectives["done"] = collectives["done"].to_numpy(dtype=bool) & ~per_row(is_failed, counts)
        done_any = done_any & ~is_failed
        consensus["done_any"] = done_any
    loaded = set(dumps.loaded_ranks)
    complete = [
        gid for gid, g in enumerate(membership.groups) if all(m in loaded for m in g.members)
    ]
    files = dumps.files
    gloo_ranks = [
        r
        for r, b in zip(
            files.column("rank").to_pylist(), files.column("backend").to_pylist(), strict=True
        )
        if b == "gloo"
    ]
    gloo = np.zeros(len(consensus), dtype=bool)
    if gloo_ranks:
        gloo = np.logical_or.reduceat(np.isin(collectives["rank"].to_numpy(), gloo_ranks), starts)
    vouch = (
        consensus["consistent"].to_numpy(dtype=bool)
        & done_any
        & (~gloo | np.isin(op_gid, complete))
    )
    done = collectives["done"].to_numpy(dtype=bool) | per_row(vouch, counts)
    collectives["done"] = done
    consensus["finished"] = np.logical_and.reduceat(done, starts)
    return collectives, consensus, failed


def consensus_of(collectives: pd.DataFrame) -> pd.DataFrame:
    """One row per (gid, seq), in the collectives' order: gid, seq, start (its first row in
    ``collectives``), n_present (its rows), done_any, consistent (every member's op and
    signature equal)."""
    gid = collectives["gid"].to_numpy()
    seq = collectives["seq"].to_numpy(dtype=np.int64)
    starts = op_starts(gid, seq)
    counts = np.diff(np.append(starts, len(gid)))
    if not len(starts):
        empty = np.zeros(0, dtype=np.int64)
        return pd.DataFrame(
            {
                "gid": gid[:0],
                "seq": seq[:0],
                "start": empty,
                "n_present": empty,
                "done_any": empty.astype(bool),
                "consistent": empty.astype(bool),
            }
        )
    consistent = np.ones(len(starts), dtype=bool)
    for column in ("sig", "op_code"):
        values = collectives[column].to_numpy()
        consistent &= np.minimum.reduceat(values, starts) == np.maximum.reduceat(values, starts)
    done_any = np.logical_or.reduceat(collectives["done"].to_numpy(dtype=bool), starts)
    return pd.DataFrame(
        {
            "gid": gid[starts],
            "seq": seq[starts],
            "start": starts,
            "n_present": counts,
            "done_any": done_any,
            "consistent": consistent,
        }
    )


def p2p_ops(p2p: pd.DataFrame, membership: Membership, entries: pa.Table) -> pd.DataFrame:
    """Send/recv ops with their peer as a global rank (null where it cannot be known)."""
    ops = p2p[p2p["op"].isin(["send", "recv"])]
    rows = pa.array(ops["row"].to_numpy(), type=pa.int64())
    ops = ops.assign(
        src=entries.column("p2p_src_local").take(rows).to_pandas().astype("Int64").to_numpy(),
        dst=entries.column("p2p_dst_local").take(rows).to_pandas().astype("Int64").to_numpy(),
    )
    # group-local rank -> global rank, for every group at once: each group's members laid
    # end to end (a group's local rank r is at its start + r)
    sizes = np.fromiter((len(g.members) for g in membership.groups), np.int64)
    flat = np.fromiter(chain.from_iterable(g.members for g in membership.groups), np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    is_send = (ops["op"] == "send").to_numpy()
    local = np.where(is_send, ops["dst"].fillna(-1), ops["src"].fillna(-1)).astype(np.int64)
    me = np.where(is_send, ops["src"].fillna(-1), ops["dst"].fillna(-1)).astype(np.int64)
    gid = ops["gid"].to_numpy().astype(np.int64)
    peer = _to_global((flat, starts, sizes), gid, local)
    mine = _to_global((flat, starts, sizes), gid, me)
    # the name's other end must be this rank, else the names are not group-local
    wrong = (me >= 0) & (mine != ops["rank"].to_numpy())
    unknown = wrong | (peer < 0)
    peers = pd.array(np.where(unknown, 0, peer), dtype="Int64")
    peers[unknown] = pd.NA
    out = ops[["rank", "gid", "row", "done", "state_rank", "p2p_seq", "created_ns"]].copy()
    out["kind"] = ops["op"].to_numpy()
    out["peer"] = peers
    return out.reset_index(drop=True)


def _to_global(
    members: tuple[np.ndarray, np.ndarray, np.ndarray], gid: np.ndarray, local: np.ndarray
) -> np.ndarray:
    """Global rank of (group, group-local rank); -1 where there is none. ``members``: every
    group's members end to end, each group's start in them, and its size."""
    flat, starts, sizes = members
    out = np.full(len(gid), -1, dtype=np.int64)
    known = (gid >= 0) & (gid < len(sizes)) & (local >= 0)
    known[known] = local[known] < sizes[gid[known]]
    out[known] = flat[starts[gid[known]] + local[known]]
    return out


def _ints(series: pd.Series) -> list[int | None]:
    """A nullable integer column as Python ints and None."""
    return [None if pd.isna(v) else int(v) for v in series.tolist()]


def pending_collectives(
    collectives: pd.DataFrame, consensus: pd.DataFrame
) -> dict[tuple[int, int, int], OpRef]:
    """Logical collectives at (group, seq)s no member finished, keyed (rank, gid, seq)."""
    is_open = ~consensus["finished"].to_numpy(dtype=bool)
    rows = collectives[per_row(is_open, consensus["n_present"].to_numpy())]
    out: dict[tuple[int, int, int], OpRef] = {}
    for rank, gid, seq, op, sig, state, row, done in zip(
        rows["rank"].tolist(),
        rows["gid"].tolist(),
        _ints(rows["seq"]),
        rows["op"].tolist(),
        rows["sig"].tolist(),
        rows["state_rank"].tolist(),
        rows["row"].tolist(),
        rows["done"].tolist(),
        strict=True,
    ):
        assert seq is not None  # collectives always carry a seq
        out[(rank, gid, seq)] = OpRef(
            rank=rank,
            gid=gid,
            seq=seq,
            p2p_seq=None,
            kind=COLLECTIVE,
            op=str(op),
            sig=int(sig),
            state_rank=int(state),
            row=int(row),
            done=bool(done),
        )
    return out


def pending_p2p_ops(p2p: pd.DataFrame) -> dict[int, list[OpRef]]:
    """Unfinished send/recv ops per rank, oldest first."""
    open_ops = p2p[~p2p["done"].astype(bool)].sort_values("row")
    out: dict[int, list[OpRef]] = {}
    for rank, gid, p2p_seq, kind, peer, state, row in zip(
        open_ops["rank"].tolist(),
        open_ops["gid"].tolist(),
        _ints(open_ops["p2p_seq"]),
        open_ops["kind"].tolist(),
        _ints(open_ops["peer"]),
        open_ops["state_rank"].tolist(),
        open_ops["row"].tolist(),
        strict=True,
    ):
        out.setdefault(rank, []).append(
            OpRef(
                rank=rank,
                gid=gid,
                seq=None,
                p2p_seq=p2p_seq,
                kind=P2P,
                op=str(kind),
                sig=0,
                state_rank=int(state),
                row=int(row),
                peer=peer,
            )
        )
    return out


def blocked_ops(
    pending: dict[tuple[int, int, int], OpRef], pending_p2p: dict[int, list[OpRef]]
) -> dict[int, OpRef]:
    """Each rank's oldest unfinished op (a collective counts only if no member finished it)."""
    out: dict[int, OpRef] = {}
    for op in [*pending.values(), *(o for ops in pending_p2p.values() for o in ops)]:
        if op.done:
            continue
        best = out.get(op.rank)
        if best is None or op.row < best.row:
            out[op.rank] = op
    return dict(sorted(out.items()))
