"""Ops the recorder counted but did not write (Gloo's send/recv, ``analysis.unrecorded``): a
rank blocked in one cannot be seen in the entries, so a set where they exist is never healthy.

Where one rank ran another number of them before its group's newest collective than every
other member that recorded it, and than it ran itself before (``facts.unrecorded.Skip``), it
left a send or recv out: the finding names it (an error, observed in its own dump), with the
members that never reached that collective, presumably blocked in the other half.
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.unrecorded import Skip, skipped_unrecorded
from frtrace.detail import RankGroupCount, SkippedUnrecorded, UnrecordedOps
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    """One finding naming the ranks with unrecorded ops, and how many per group: a warning,
    or an error naming the ranks that left one out (one group: the first)."""
    membership, unrecorded = facts.membership, facts.unrecorded
    if not unrecorded:
        return []
    ranks = tuple(sorted({r for r, _ in unrecorded}))
    pairs = sorted(unrecorded.items())
    skips = skipped_unrecorded(facts.dumps, facts.matched)
    gid = skips[0].gid if skips else None
    mine = [s for s in skips if s.gid == gid]
    behind = [_behind(facts, s) for s in mine]
    found = Finding(
        kind=FindingKind.UNRECORDED_OPS,
        severity=Severity.ERROR if mine else Severity.WARNING,
        culprit_ranks=tuple(s.rank for s in mine),
        waiting_ranks=behind[0] if behind else (),
        group=membership.groups[gid] if gid is not None else None,
        seq=mine[0].seq if mine else None,
        op=_op_at(facts, mine[0]) if mine else None,
        confidence=Confidence.MEDIUM,
        detail=UnrecordedOps(
            ranks=ranks,
            total=sum(unrecorded.values()),
            counts=tuple(
                RankGroupCount(rank=r, group=membership.groups[g], ops=n) for (r, g), n in pairs[:8]
            ),
            more=max(0, len(pairs) - 8),
            skipped=tuple(
                SkippedUnrecorded(
                    rank=s.rank,
                    seq=s.seq,
                    ran=s.ran,
                    others=s.others,
                    peers=s.peers,
                    before=s.before,
                    behind=held,
                )
                for s, held in zip(mine, behind, strict=True)
            ),
        ),
    )
    return [found]


def _behind(facts: Facts, skip: Skip) -> tuple[int, ...]:
    """The members of the skip's group with a dump that never reached its collective."""
    members = facts.membership.groups[skip.gid].members
    reached = set(skip.peers) | {skip.rank}
    return tuple(m for m in members if m in facts.loaded and m not in reached)


def _op_at(facts: Facts, skip: Skip) -> str | None:
    coll = facts.matched.collectives
    at = coll[(coll["gid"] == skip.gid) & (coll["seq"] == skip.seq)]
    return None if at.empty else str(at["op"].iloc[0])
