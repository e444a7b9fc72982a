"""Ranks an error message names as the ones that failed: ``monitored_barrier``'s
"Ranks 3 failed to pass monitoredBarrier in 5000 ms" (raised on rank 0, about rank 3)."""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.detail import NamedByError
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    naming = [f for f in facts.evidence.failures if f.named_ranks]
    if not naming:
        return []
    named = tuple(sorted({r for f in naming for r in f.named_ranks}))
    reporters = tuple(sorted({f.rank for f in naming if f.rank is not None} - set(named)))
    return [
        Finding(
            kind=FindingKind.NAMED_BY_ERROR,
            severity=Severity.ERROR,
            culprit_ranks=named,
            waiting_ranks=reporters,
            confidence=Confidence.HIGH,
            detail=NamedByError(named=named, reporters=reporters, messages=tuple(naming[:4])),
            failures=tuple(naming[:8]),
        )
    ]
