"""Ops the recorder counted but never wrote: Gloo's send/recv.

Gloo's Flight Recorder writes no entry for a send or recv, but counts it: ``op_id`` (per
group) goes up by one for every op, ``collective_seq_id`` only for collectives. So on a Gloo
rank, an entry whose ``op_id`` is ahead of its ``collective_seq_id`` shows that many ops on
that group the buffer does not hold (checked on real Gloo dumps: a 4-rank pipeline chain has
op_id 13 at collective #5 on the middle ranks, 9 on the ends; without p2p the two are equal).

What it means for a diagnosis: a rank blocked in a send or recv looks exactly like a rank that
finished everything it recorded. Such a rank cannot be called "stuck in host code", and a
dump set where every recorded op finished cannot be called healthy. Where the ranks' counts
differ at one collective, the one that differs from its peers and from itself has left a
send or recv out (``skipped_unrecorded``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import MatchResult, codes
from frtrace.load.dumpset import DumpSet

__all__ = ["Skip", "skipped_unrecorded", "unrecorded_ops"]


def unrecorded_ops(dumps: DumpSet, membership: Membership) -> dict[tuple[int, int], int]:
    """(rank, gid) -> ops on that group before the rank's newest collective entry that its
    buffer does not hold, for Gloo ranks where there are any."""
    entries = dumps.entries
    backend, names = codes(entries.column("backend"))  # (no 8M strings: a Gloo set is small,
    if "gloo" not in names:  # but an NCCL one is not)
        return {}
    gloo = pa.array(backend == names.index("gloo"))
    rows = entries.filter(gloo).select(["rank", "group_name", "collective_seq", "op_id"])
    frame = rows.to_pandas().dropna(subset=["group_name", "collective_seq", "op_id"])
    if frame.empty:
        return {}
    newest = frame.sort_values("collective_seq").groupby(["rank", "group_name"]).tail(1)
    gap = newest["op_id"].to_numpy(np.int64) - newest["collective_seq"].to_numpy(np.int64)
    out: dict[tuple[int, int], int] = {}
    for rank, name, n in zip(
        newest["rank"].tolist(),
        newest["group_name"].astype(str).tolist(),
        gap.tolist(),
        strict=True,
    ):
        gid = membership.of_rank.get((int(rank), name))
        if n > 0 and gid is not None:
            out[(int(rank), gid)] = int(n)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Skip:
    """A rank that ran another number of unrecorded ops (send/recv) before collective ``seq``
    of group ``gid`` than the group's other members that recorded it, all alike, and than it
    ran itself before the same collective (same op and sizes) earlier: it left out (or added)
    a send or recv there, and the rank at the other end of it is blocked."""

    rank: int
    gid: int
    seq: int
    ran: int  # unrecorded ops it ran between its previous collective of the group and ``seq``
    others: int  # what every other member that recorded ``seq`` ran there
    peers: tuple[int, ...]  # those members
    before: int  # an earlier seq it ran ``others`` before, as its peers do now


def skipped_unrecorded(dumps: DumpSet, match: MatchResult) -> tuple[Skip, ...]:
    """The ranks whose unrecorded ops before their group's newest collective differ from the
    other members' and from their own at the same op before (``Skip``), for Gloo groups."""
    entries = dumps.entries
    backend, names = codes(entries.column("backend"))
    coll = match.collectives
    if "gloo" not in names or coll.empty:
        return ()
    rows = coll["row"].to_numpy(np.int64)
    gloo = backend[rows] == names.index("gloo")
    op_id = entries.column("op_id").take(pa.array(rows)).to_numpy(zero_copy_only=False)
    frame = coll[["rank", "gid", "seq"]].assign(op_id=op_id)[gloo]
    frame = frame.dropna(subset=["seq", "op_id"])
    if frame.empty:
        return ()
    frame = frame.sort_values(["rank", "gid", "seq"], kind="stable")
    by = frame.groupby(["rank", "gid"], sort=False)
    # (unrecorded ops between two consecutive collectives: op_id's step past seq's)
    frame = frame.assign(ran=by["op_id"].diff() - by["seq"].diff()).dropna(subset=["ran"])
    out: list[Skip] = []
    for gid, part in frame.groupby("gid", sort=False):
        newest = part["seq"].max()
        at = part[part["seq"] == newest]
        counts = at["ran"].astype(int).value_counts()
        if len(at) < 3 or len(counts) != 2 or counts.iloc[0] == counts.iloc[1]:
            continue  # (a majority needs two alike beside the odd one)
        common = int(counts.index[0])
        for rank, ran in zip(at["rank"].tolist(), at["ran"].astype(int).tolist(), strict=True):
            mine = part[(part["rank"] == rank) & (part["seq"] < newest)]
            alike = mine[mine["ran"].astype(int) == common]
            if ran == common or alike.empty:
                continue
            peers = tuple(sorted(int(r) for r in at["rank"].tolist() if r != rank))
            out.append(Skip(rank=int(rank), gid=int(gid), seq=int(newest), ran=ran,
                            others=common, peers=peers,
                            before=int(alike["seq"].max())))  # fmt: skip
    return tuple(sorted(out, key=lambda s: (s.gid, s.rank)))
