"""Stragglers: ranks that arrive last at the collectives they finish, by a wide margin, often.

Arrival is ``time_created_ns`` (when the rank enqueued the op). For every finished collective
that every member recorded, the rank that arrived last by a clear margin over the next one
is noted. A rank is a straggler when it is that clear last arrival again and again, and holds
most of the clear last arrivals of its groups.

Clocks: arrivals on different hosts are compared across clocks, and a constant clock offset
between hosts looks exactly like a constant lateness. Two host-local measurements do not have
that problem, and are used to corroborate when the dumps have them: a straggler's own wait
inside the collective is short (it arrives last, so the op completes soon after it enqueues),
seen as a short ``duration_ms`` (NCCL timing) or a short ``time_discovered_completed_ns -
time_created_ns``. A straggler found from arrivals alone is reported as not corroborated.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd

from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import MatchResult
from frtrace.analysis.facts.segments import op_blocks, per_row
from frtrace.detail.notes import StragglerBasis
from frtrace.load.dumpset import DumpSet
from frtrace.model import Straggler

__all__ = ["find_stragglers"]

# A rank must be the clear last arrival in at least this many collectives: one or two late
# arrivals are anecdote (a GC pause, a page fault).
MIN_EVENTS = 3
# ...and hold this share of all clear last arrivals in its groups: a healthy job spreads the
# few it has across ranks, a straggler owns them (3 of 4 is far above 1/group size).
MIN_SHARE = 0.75
# "Clear" means it arrived this much after the second-to-last member. Below 5 ms, launch
# jitter and Python overhead dominate, and nobody chases that as a straggler.
MIN_MARGIN_MS = 5.0


def find_stragglers(
    dumps: DumpSet, membership: Membership, match: MatchResult
) -> tuple[Straggler, ...]:
    """Ranks that are the clear last arrival at finished collectives, again and again.

    Only the collectives where one rank arrives clearly last count (an "event"): with async
    NCCL a slow host is late at the first collectives of each step and in lockstep after,
    so an average over all collectives would hide it.
    """
    coll = match.collectives
    if coll.empty:
        return ()
    loaded = set(dumps.loaded_ranks)  # a member without a dump cannot arrive last: skip it
    size = np.array([sum(m in loaded for m in g.members) for g in membership.groups] or [0])
    ops = match.consensus
    op_gid = ops["gid"].to_numpy()
    starts = ops["start"].to_numpy()
    counts = ops["n_present"].to_numpy()
    members = size[op_gid]
    full = ops["finished"].to_numpy(dtype=bool) & (counts == members) & (members >= 2)
    if not full.any():
        return ()
    arrived, last_t, before_t, alone, last_row, done_per_rank = _arrivals(
        coll, starts, counts, full
    )
    row_rank = coll["rank"].to_numpy()
    clear = full & (arrived >= 2) & alone
    margin_ms = np.where(clear, (last_t - np.where(clear, before_t, 0.0)) / 1e6, 0.0)
    hit = margin_ms >= MIN_MARGIN_MS
    if not hit.any():
        return ()
    events = pd.DataFrame(
        {
            "gid": op_gid[hit],
            "seq": ops["seq"].to_numpy(dtype=np.int64)[hit],
            "rank": row_rank[last_row[hit]],
            "t": last_t[hit],
            "margin_ms": margin_ms[hit],
        }
    )
    local = _local_wait_ms(dumps, coll[per_row(hit, counts)])
    return _stragglers(membership, dumps.world.size, events, local, done_per_rank)


def _arrivals(
    coll: pd.DataFrame, starts: np.ndarray, counts: np.ndarray, full: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per op: its members with a known arrival, the last and second-to-last arrival times,
    whether one member alone arrived last, that member's row; per rank: its finished ops."""
    # Per op (its members' rows are side by side: ``segments``), block by block: at 32,768
    # ranks there are 65M rows. Times relative to the earliest: ns since the epoch are
    # ~1.8e18, past float64's 2^53, so absolute times in float64 would round ops 100 ns apart
    # to the same instant.
    created = coll["created_ns"]
    lowest = created.min()
    base = 0 if pd.isna(lowest) else int(lowest)
    row_rank = coll["rank"].to_numpy()
    n_ops = len(starts)
    arrived = np.zeros(n_ops, dtype=np.int64)  # members with a known arrival
    last_t = np.zeros(n_ops)
    before_t = np.zeros(n_ops)  # the second-to-last arrival
    alone = np.zeros(n_ops, dtype=bool)  # one member arrived last (a tie is no clear last)
    last_row = np.zeros(n_ops, dtype=np.int64)
    done_per_rank = np.zeros(int(row_rank.max()) + 1, dtype=np.int64)  # finished ops
    for first, end, row, end_row in op_blocks(starts, len(coll)):
        offsets = starts[first:end] - row
        sizes = counts[first:end]
        block = created.iloc[row:end_row]
        t = (block.to_numpy(dtype=np.int64, na_value=base) - base).astype(np.float64)
        eligible = per_row(full[first:end], sizes) & block.notna().to_numpy()
        t[~eligible] = -np.inf
        arrived[first:end] = np.add.reduceat(eligible, offsets)
        latest = np.maximum.reduceat(t, offsets)
        is_last = t == per_row(latest, sizes)
        t[is_last] = -np.inf
        before_t[first:end] = np.maximum.reduceat(t, offsets)
        last_t[first:end] = latest
        alone[first:end] = np.add.reduceat(is_last, offsets) == 1
        # each op's last row (where ops tie, the last of them: not used), by a reduction
        # over the rows' indices where they are last, in ``t``'s buffer (float64 holds an
        # index exactly): a search of every such row among the ops' offsets took 4x longer
        t.fill(-1.0)
        t[is_last] = np.flatnonzero(is_last)
        last_row[first:end] = np.maximum.reduceat(t, offsets).astype(np.int64) + row
        done_per_rank += np.bincount(row_rank[row:end_row][eligible], minlength=len(done_per_rank))
        del t, eligible, is_last
    return arrived, last_t, before_t, alone, last_row, done_per_rank


def _stragglers(
    membership: Membership,
    world: int,
    events: pd.DataFrame,
    local: pd.DataFrame,
    done_per_rank: np.ndarray,
) -> tuple[Straggler, ...]:
    """The ranks clearly last often enough, and late on their own (not behind another)."""
    per_rank = events.groupby("rank").agg(n=("seq", "size"), late_ms=("margin_ms", "median"))
    out: list[Straggler] = []
    candidates = []
    for rank, n, late_ms in zip(
        per_rank.index.tolist(),
        per_rank["n"].tolist(),
        per_rank["late_ms"].tolist(),
        strict=True,
    ):
        mine = events[events["rank"] == rank]
        gids = set(mine["gid"].tolist())
        share = n / int(events["gid"].isin(gids).sum())
        if n >= MIN_EVENTS and share >= MIN_SHARE:
            candidates.append((float(mine["t"].min()), int(rank), int(n), float(late_ms)))
    for rank, n, late_ms in _roots_of_lateness(membership, world, candidates):
        mine = events[events["rank"] == rank]
        gids = set(mine["gid"].tolist())
        late_groups = sorted({membership.groups[int(g)].name for g in gids})
        basis, shorter_ms = _corroborate(int(rank), mine, local)
        out.append(
            Straggler(
                rank=int(rank),
                collectives=int(done_per_rank[rank]),
                last_share=round(float(n) / float(done_per_rank[rank]), 3),
                median_late_ms=round(float(late_ms), 3),
                groups=tuple(late_groups),
                corroborated=basis == StragglerBasis.CORROBORATED,
                basis=basis,
                shorter_wait_ms=shorter_ms,
            )
        )
    return tuple(sorted(out, key=lambda s: s.rank))


def _roots_of_lateness(
    membership: Membership, world: int, candidates: list[tuple[float, int, int, float]]
) -> list[tuple[int, int, float]]:
    """Keep the ranks that are late on their own; drop those late because they wait on them.

    Lateness spreads: the tp peers of a slow rank wait for it and arrive late at their dp
    collectives, its pipeline successor waits for its activations, and so on. Taken in order
    of their first late arrival, a candidate that shares a group (other than one spanning
    the whole job) with an earlier straggler, or with a rank already explained by one, is
    explained too: in each set of candidates linked by shared groups, the one late first is
    the root (two independent stragglers that share a group are reported as one); of those
    late first at the same instant, the one late most often.
    """
    shared: dict[int, set[int]] = {}
    for gid, g in enumerate(membership.groups):
        if len(g.members) < world:
            for m in g.members:
                shared.setdefault(m, set()).add(gid)
    by_rank = {c[1]: c for c in candidates}
    linked: nx.Graph[int] = nx.Graph()
    linked.add_nodes_from(by_rank)
    for a in by_rank:
        for b in by_rank:
            if a < b and shared.get(a, set()) & shared.get(b, set()):
                linked.add_edge(a, b)
    roots = []
    for component in nx.connected_components(linked):
        # the first late; at the same instant, the one late most often
        first = min(component, key=lambda r: (by_rank[r][0], -by_rank[r][2], r))
        _, rank, n, late_ms = by_rank[first]
        roots.append((rank, n, late_ms))
    return sorted(roots)


def _local_wait_ms(dumps: DumpSet, rows: pd.DataFrame) -> pd.DataFrame:
    """Host-local time each rank spent in each collective (gid, seq, rank, wait_ms)."""
    take = rows["row"].to_numpy()
    entries = dumps.entries
    duration = entries.column("duration_ms").take(take).to_numpy(zero_copy_only=False)
    created = entries.column("time_created_ns").take(take).to_numpy(zero_copy_only=False)
    completed = entries.column("time_discovered_completed_ns").take(take)
    completed_np = completed.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        discovered_ms = (completed_np.astype("float64") - created.astype("float64")) / 1e6
    wait = np.where(~pd.isna(duration), duration.astype("float64"), discovered_ms)
    frame = pd.DataFrame(
        {
            "gid": rows["gid"].to_numpy(),
            "seq": rows["seq"].to_numpy(),
            "rank": rows["rank"].to_numpy(),
            "wait_ms": wait,
        }
    )
    return frame.dropna()


def _corroborate(
    rank: int, events: pd.DataFrame, local: pd.DataFrame
) -> tuple[StragglerBasis, float | None]:
    """Did the rank wait less inside the collectives where it arrived last (as it must)?
    With how much less (the median, ms) when it did."""
    if local.empty:
        return StragglerBasis.ENQUEUE_ONLY, None
    at = local.merge(events[["gid", "seq"]], on=["gid", "seq"], how="inner")
    if at.empty or not (at["rank"] == rank).any():
        return StragglerBasis.NO_LOCAL_TIMING, None
    theirs = at[at["rank"] != rank].groupby(["gid", "seq"])["wait_ms"].median()
    mine = at[at["rank"] == rank].set_index(["gid", "seq"])["wait_ms"]
    both = pd.concat([mine.rename("mine"), theirs.rename("theirs")], axis=1).dropna()
    if both.empty:
        return StragglerBasis.NO_LOCAL_TIMING, None
    shorter = float((both["mine"] < both["theirs"]).mean())
    gap = float((both["theirs"] - both["mine"]).median())
    if shorter >= MIN_SHARE:
        return StragglerBasis.CORROBORATED, gap
    return StragglerBasis.NOT_SHOWN, None
