"""The ranks everyone waited on, heard from only by their silence.

Every rank that left a dump (of the attempt analysed) says in its own words that it failed
waiting (a collective or p2p op timed out, a peer closed the connection, the watchdog gave
up), none of them reports a cause of its own, and some ranks of the job left no dump and no
word at all: those are what the others waited on (they hung hard, or were killed, before
they could write), suspected, never confirmed. A missing rank the launcher stopped (torchrun's
summary: ``exitcode: -15 (SIGTERM)``, after another rank failed) was told to stop: that is no
word of its own, and it may be what everyone waited on. Where the entries, a cause or an error
message name anyone, other rules speak; this one is for the folder whose only positive
evidence is who is missing (a Gloo job's group membership is not in its dumps, so its
entries cannot say that the missing rank was a member of the op everyone waited in). Where a
rank with a dump is absent from the op its peers wait in, its stack inside a torch.distributed
call the recorder does not write (a group being made, a send/recv: ``facts.elsewhere``), it
waits there on ranks no file names: the waits are not the silent ones' by elimination, and
this rule says nothing.

A missing rank whose own log says it failed waiting too (its dump lost, overwritten by a later
attempt's) waited with the others: it is never suspected; the silent ones beside it are.
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.waitgraph import EdgeKind
from frtrace.detail import WaitedOnTheSilent
from frtrace.evidence.model import WAITING, FailureKind, Role, said_they_waited
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["WAITING", "check"]


def check(facts: Facts) -> list[Finding]:
    failures = facts.evidence.failures
    if any(f.role == Role.CAUSE or f.named_ranks for f in failures):
        return []  # a cause, or a message naming ranks: first_failure and named speak
    missing = set(facts.dumps.missing_ranks)
    loaded = set(facts.dumps.loaded_ranks)
    also_waited = said_they_waited(facts.evidence) & missing  # (their dumps lost)
    absent = tuple(sorted(missing - also_waited))
    if not absent or not loaded:
        return []
    waited = [f for f in failures if f.kind in WAITING and f.rank in loaded | also_waited]
    # (a rank the launcher stopped said nothing of its own)
    heard = {f.rank for f in failures if f.rank is not None and f.kind != FailureKind.TERMINATED}
    if not loaded <= {f.rank for f in waited} or heard & set(absent):
        return []  # a rank with a dump that never said it waited, or a missing one that spoke
    inside = {r for r, m in facts.elsewhere.items() if m.in_call is not None} & loaded
    if any(e.kind == EdgeKind.NEVER_JOINED and e.target in inside for e in facts.waits.edges):
        return []  # one with a dump is absent, waiting in an unrecorded call: no elimination
    waiting = tuple(sorted(loaded | also_waited))
    return [
        Finding(
            kind=FindingKind.MISSING_DUMP,
            severity=Severity.ERROR,
            culprit_ranks=absent,
            waiting_ranks=waiting,
            confidence=Confidence.LOW,
            detail=WaitedOnTheSilent(
                absent=absent,
                waited=waiting,
                symptoms=tuple(waited[:4]),
                lost=tuple(sorted(also_waited)),
            ),
            failures=tuple(waited[:8]),
        )
    ]
