"""Ops the recorder counted but did not write (Gloo's send/recv, ``analysis.unrecorded``): a
rank blocked in one cannot be seen in the entries, so a set where they exist is never healthy."""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.detail import RankGroupCount, UnrecordedOps
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    """One warning naming the ranks with unrecorded ops, and how many per group."""
    membership, unrecorded = facts.membership, facts.unrecorded
    if not unrecorded:
        return []
    ranks = tuple(sorted({r for r, _ in unrecorded}))
    pairs = sorted(unrecorded.items())
    found = Finding(
        kind=FindingKind.UNRECORDED_OPS,
        severity=Severity.WARNING,
        culprit_ranks=(),
        confidence=Confidence.MEDIUM,
        detail=UnrecordedOps(
            ranks=ranks,
            total=sum(unrecorded.values()),
            counts=tuple(
                RankGroupCount(rank=r, group=membership.groups[g], ops=n) for (r, g), n in pairs[:8]
            ),
            more=max(0, len(pairs) - 8),
        ),
    )
    return [found]
