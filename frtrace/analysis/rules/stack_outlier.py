"""The ranks' Python stacks, where the entries are silent: the others wait in
torch.distributed calls while a few ranks are in host code.

Read as evidence only when every other rank with a stack is inside a torch.distributed call
(a collective, a send/recv, a barrier) and the ranks elsewhere are few (at most a quarter of
the ranks with a stack, and at least one rank waiting). In a running job this picture is
ordinary (ranks computing between ops), so the verdict uses it only where the entries already
say something is wrong but cannot say who (``analysis.verdict``).
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.detail import StackOutlier
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    if len(facts.places) < 2:
        return []
    host = tuple(sorted(r for r, p in facts.places.items() if p.place != "collective"))
    comm = tuple(sorted(r for r, p in facts.places.items() if p.place == "collective"))
    if not host or not comm or len(host) > max(1, len(facts.places) // 4):
        return []
    where = tuple(facts.places[r] for r in host)
    lib = {facts.places[r].library_call for r in comm}
    return [
        Finding(
            kind=FindingKind.STACK_OUTLIER,
            severity=Severity.ERROR,
            culprit_ranks=host,
            waiting_ranks=comm,
            confidence=Confidence.MEDIUM,
            detail=StackOutlier(
                host=where, waiting=len(comm), waiting_in=next(iter(lib)) if len(lib) == 1 else None
            ),
            where=where,
        )
    ]
