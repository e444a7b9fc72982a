"""Stragglers: ranks that arrive last at the collectives they finish, by a wide margin, often.

Arrival is ``time_created_ns`` (when the rank enqueued the op). For every finished collective
that every member recorded, each member's lateness is its arrival minus the median arrival of
the members. A rank is a straggler when, over all such collectives of all its groups, it
arrived last in most of them and its median lateness is large against both an absolute floor
and the spread of the other ranks.

Clocks: arrivals on different hosts are compared across clocks, and a constant clock offset
between hosts looks exactly like a constant lateness. Two host-local measurements do not have
that problem, and are used to corroborate when the dumps have them: a straggler's own wait
inside the collective is short (it arrives last, so the op completes soon after it enqueues),
seen as a short ``duration_ms`` (NCCL timing) or a short ``time_discovered_completed_ns -
time_created_ns``. A straggler found from arrivals alone is reported as not corroborated.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from frtrace.findings import Straggler
from frtrace.groups import Membership
from frtrace.match import MatchResult
from frtrace.tables import DumpSet

__all__ = ["find_stragglers"]

# Fewer collectives than this is anecdote: one late arrival can be a GC pause or page fault.
MIN_COLLECTIVES = 5
# Last in 3 of 4 collectives is far above the 1/group_size (at most 1/2) a healthy rank gets.
MIN_LAST_SHARE = 0.75
# Below 5 ms, launch jitter and Python overhead dominate; nobody chases that as a straggler.
MIN_LATE_MS = 5.0
# ...and it must stand out against the other ranks' own spread by this factor.
MIN_LATE_OVER_SPREAD = 4.0


def find_stragglers(
    dumps: DumpSet, membership: Membership, match: MatchResult
) -> tuple[Straggler, ...]:
    """Ranks consistently late to finished collectives; see the module docstring."""
    coll = match.collectives
    if coll.empty:
        return ()
    size = pd.Series(
        {gid: len(g.members) for gid, g in enumerate(membership.groups)}, dtype="int64"
    )
    done = match.consensus[match.consensus["done_any"].astype(bool)]
    done = done.assign(group_size=done["gid"].map(size))
    full = done[(done["n_present"] == done["group_size"]) & (done["group_size"] >= 2)]
    rows = coll.merge(full[["gid", "seq"]], on=["gid", "seq"], how="inner")
    rows = rows[rows["created_ns"].notna()]
    if rows.empty:
        return ()
    created = rows["created_ns"].astype("float64")
    keys = [rows["gid"], rows["seq"]]
    median = created.groupby(keys).transform("median")
    latest = created.groupby(keys).transform("max")
    n_latest = (created == latest).groupby(keys).transform("sum")
    frame = pd.DataFrame(
        {
            "rank": rows["rank"].to_numpy(),
            "gid": rows["gid"].to_numpy(),
            "late_ms": ((created - median) / 1e6).to_numpy(),
            "last": ((created == latest) & (n_latest == 1)).to_numpy(),
            "row": rows["row"].to_numpy(),
        }
    )
    per_rank = frame.groupby("rank").agg(
        n=("last", "size"), last=("last", "sum"), late_ms=("late_ms", "median")
    )
    per_rank["share"] = per_rank["last"] / per_rank["n"]
    candidates = per_rank[
        (per_rank["n"] >= MIN_COLLECTIVES)
        & (per_rank["share"] >= MIN_LAST_SHARE)
        & (per_rank["late_ms"] >= MIN_LATE_MS)
    ]
    if candidates.empty:
        return ()
    others = frame[~frame["rank"].isin(candidates.index)]
    spread = float(np.median(np.abs(others["late_ms"]))) if not others.empty else 0.0
    local = _local_wait_ms(dumps, frame)
    out: list[Straggler] = []
    for rank, n, share, late_ms in zip(
        candidates.index.tolist(),
        candidates["n"].tolist(),
        candidates["share"].tolist(),
        candidates["late_ms"].tolist(),
        strict=True,
    ):
        if late_ms < MIN_LATE_OVER_SPREAD * spread:
            continue
        mine = frame[frame["rank"] == rank]
        late_groups = sorted(
            {membership.groups[int(g)].name for g in mine.loc[mine["last"], "gid"].tolist()}
        )
        corroborated, note = _corroborate(int(rank), local, float(late_ms))
        out.append(
            Straggler(
                rank=int(rank),
                collectives=int(n),
                last_share=round(float(share), 3),
                median_late_ms=round(float(late_ms), 3),
                groups=tuple(late_groups),
                corroborated=corroborated,
                note=note,
            )
        )
    return tuple(sorted(out, key=lambda s: s.rank))


def _local_wait_ms(dumps: DumpSet, frame: pd.DataFrame) -> pd.DataFrame:
    """Host-local time each rank spent in each collective, where the dump records it."""
    rows = frame["row"].to_numpy()
    entries = dumps.entries
    duration = entries.column("duration_ms").take(rows).to_numpy(zero_copy_only=False)
    created = entries.column("time_created_ns").take(rows).to_numpy(zero_copy_only=False)
    completed = entries.column("time_discovered_completed_ns").take(rows)
    completed_np = completed.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        discovered_ms = (completed_np.astype("float64") - created.astype("float64")) / 1e6
    wait = np.where(~pd.isna(duration), duration.astype("float64"), discovered_ms)
    return pd.DataFrame({"rank": frame["rank"].to_numpy(), "wait_ms": wait}).dropna()


def _corroborate(rank: int, local: pd.DataFrame, late_ms: float) -> tuple[bool, str]:
    if local.empty:
        return False, (
            "from enqueue times only (no duration_ms or completion times in the dumps): a "
            "constant clock offset between hosts would look the same; ranks on one host share "
            "a clock. Enable TORCH_NCCL_ENABLE_TIMING=1 to confirm."
        )
    mine = local.loc[local["rank"] == rank, "wait_ms"]
    theirs = local.loc[local["rank"] != rank, "wait_ms"]
    if mine.empty or theirs.empty:
        return False, "host-local timing missing for this rank; not corroborated"
    gap = float(theirs.median() - mine.median())
    if gap >= 0.5 * late_ms:
        return True, (
            f"corroborated by host-local timing: it waits {gap:.1f} ms less inside the "
            "collectives than its peers, as a last arrival does (clock skew cannot cause that)"
        )
    return False, (
        "host-local timing does not show the shorter wait a last arrival has: possibly a "
        "clock offset between hosts rather than a real straggler"
    )
