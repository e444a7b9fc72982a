"""Ranks an error message names as the ones that failed: ``monitored_barrier``'s
"Ranks 3 failed to pass monitoredBarrier in 5000 ms" (raised on rank 0, about rank 3).

The ranks it names are the barrier's process group's, counted from the group's rank 0 that
raises it ("[Rank 0]:"): the job's own where the rank that wrote it is the job's rank 0, or
where the job's groups say which group's rank 0 it is; a message whose numbering cannot be
told (``evidence.messages.job_ranks``) names no one.
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.detail import NamedByError
from frtrace.evidence.messages import job_ranks
from frtrace.evidence.model import Failure
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    world = facts.dumps.world.size
    groups = [(g.members, g.inferred) for g in facts.membership.groups]
    naming: list[Failure] = []
    ranks: set[int] = set()
    for f in facts.evidence.failures:
        if not f.named_ranks:
            continue
        numbered = job_ranks(
            f.named_ranks, as_rank=f.as_rank, reporter=f.rank, world=world, groups=groups
        )
        if numbered is not None and numbered.ranks:
            naming.append(f)
            ranks.update(numbered.ranks)
    if not naming:
        return []
    named = tuple(sorted(ranks))
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
