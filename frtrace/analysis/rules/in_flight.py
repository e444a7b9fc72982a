"""Waits in a running job's snapshot: ops in flight, not hangs.

Waits on members that had not entered the op yet when a running job was dumped: both sides'
dumps were written moments after their newest entries (``analysis.capture``), so the member is
between ops, or finishing the one before; the chain of waits ends in an op in flight, not in a
culprit.
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.detail import DumpedAfter, RunningOps
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    """One finding per op that running members wait in (``WaitGraph.in_flight``)."""
    membership, matched, moments = facts.membership, facts.matched, facts.moments
    by_op: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in facts.waits.in_flight:
        if e.seq is not None:
            by_op.setdefault((e.gid, e.seq), []).append((e.waiter, e.target))
    findings = []
    for (gid, seq), pairs in sorted(by_op.items()):
        group = membership.groups[gid]
        waiting = tuple(sorted({w for w, _ in pairs}))
        behind = tuple(sorted({t for _, t in pairs}))
        op = (
            matched.pending[(waiting[0], gid, seq)].op
            if (waiting[0], gid, seq) in matched.pending
            else "op"
        )
        findings.append(
            Finding(
                kind=FindingKind.IN_FLIGHT,
                severity=Severity.INFO,
                culprit_ranks=(),
                waiting_ranks=waiting,
                group=group,
                seq=seq,
                op=op,
                confidence=Confidence.HIGH,
                detail=RunningOps(
                    waiting=waiting,
                    behind=behind,
                    idle_s=max(moments.idle_s.get(r, 0.0) for r in waiting),
                    dumped=tuple(
                        DumpedAfter(rank=r, idle_s=moments.idle_s[r], limit_s=moments.limit_s[r])
                        for r in waiting[:8]
                        if r in moments.idle_s
                    ),
                ),
            )
        )
    return findings
