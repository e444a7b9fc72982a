"""The ranks everyone waited on, heard from only by their silence.

Every rank that left a dump (of the attempt analysed) says in its own words that it failed
waiting (a collective or p2p op timed out, a peer closed the connection, the watchdog gave
up), none of them reports a cause of its own, and some ranks of the job left no dump and no
word at all: those are what the others waited on (they hung hard, or were killed, before
they could write), suspected, never confirmed. Where the entries, a cause or an error
message name anyone, other rules speak; this one is for the folder whose only positive
evidence is who is missing (a Gloo job's group membership is not in its dumps, so its
entries cannot say that the missing rank was a member of the op everyone waited in).
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.detail import WaitedOnTheSilent
from frtrace.evidence.model import FailureKind, Role
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["WAITING", "check"]

# What a rank's own failure says when it waited on a peer
WAITING = frozenset({FailureKind.TIMEOUT, FailureKind.PEER_CLOSED, FailureKind.WATCHDOG_ABORT})


def check(facts: Facts) -> list[Finding]:
    failures = facts.evidence.failures
    if any(f.role == Role.CAUSE or f.named_ranks for f in failures):
        return []  # a cause, or a message naming ranks: first_failure and named speak
    absent = tuple(sorted(facts.dumps.missing_ranks))
    loaded = set(facts.dumps.loaded_ranks)
    if not absent or not loaded:
        return []
    waited = [f for f in failures if f.kind in WAITING and f.rank in loaded]
    heard = {f.rank for f in failures if f.rank is not None}
    if {f.rank for f in waited} != loaded or heard & set(absent):
        return []  # a rank with a dump that never said it waited, or a missing one that spoke
    waiting = tuple(sorted(loaded))
    return [
        Finding(
            kind=FindingKind.MISSING_DUMP,
            severity=Severity.ERROR,
            culprit_ranks=absent,
            waiting_ranks=waiting,
            confidence=Confidence.LOW,
            detail=WaitedOnTheSilent(absent=absent, waited=waiting, symptoms=tuple(waited[:4])),
            failures=tuple(waited[:8]),
        )
    ]
