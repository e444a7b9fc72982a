"""Which rank failed first, and whether with a cause of its own.

A job's failures come in a chain: one rank's own fault (an exception in its code, a crash,
OOM, a CUDA error, leaving its schedule) is the cause; the other ranks' timeouts, closed
connections and aborts follow it. The first causes in time (those within ``TOGETHER_NS`` of
the earliest) name the culprits; ranks whose only failures are symptoms are their victims.
When no cause has a time, every rank with a cause is named, with medium confidence. When every
rank reports the same kind of cause, none of them is singled out.
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.detail import FirstFailure
from frtrace.evidence.model import Role
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["TOGETHER_NS", "check"]

TOGETHER_NS = 1_000_000_000  # causes this close to the first one are first too


def check(facts: Facts) -> list[Finding]:
    failures = facts.evidence.failures
    causes = [f for f in failures if f.role == Role.CAUSE and f.rank is not None]
    if not causes:
        return []
    timed = [f for f in causes if f.at_ns is not None]
    if timed:
        t0 = min(f.at_ns for f in timed if f.at_ns is not None)
        first = [f for f in timed if f.at_ns is not None and f.at_ns - t0 <= TOGETHER_NS]
    else:
        t0, first = None, causes
    ranks = tuple(sorted({f.rank for f in first if f.rank is not None}))
    cause_ranks = {f.rank for f in causes}
    world = facts.dumps.world.size
    if world > 1 and len(cause_ranks) >= world:
        return []  # every rank failed on its own: nothing singles one out
    after = [
        f
        for f in failures
        if f.rank is not None
        and f.rank not in ranks
        and f.role == Role.SYMPTOM
        and (t0 is None or f.at_ns is None or f.at_ns >= t0)
    ]
    victims = tuple(sorted({f.rank for f in after if f.rank is not None}))
    untimed_others = sorted(
        {f.rank for f in causes if f.rank is not None and f.at_ns is None and f.rank not in ranks}
    )
    other_causes = sorted(
        {f.rank for f in causes if f.rank is not None and f.rank not in ranks} - set(untimed_others)
    )
    sure = t0 is not None and not untimed_others
    return [
        Finding(
            kind=FindingKind.FIRST_FAILURE,
            severity=Severity.ERROR,
            culprit_ranks=ranks,
            waiting_ranks=victims,
            confidence=Confidence.HIGH if sure else Confidence.MEDIUM,
            detail=FirstFailure(
                ranks=ranks,
                first=tuple(first[:4]),
                after=tuple(after[:3]),
                victims=victims,
                untimed_others=tuple(untimed_others),
                later_causes=tuple(other_causes),
                sure=sure,
            ),
            failures=tuple(first[:4]) + tuple(after[:4]),
        )
    ]
