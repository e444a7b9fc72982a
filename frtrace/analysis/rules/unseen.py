"""A rank blocked in an op of a group whose other members recorded nothing of it.

Gloo's ``pg_config`` is unusable, so a group's members are read from the ranks that recorded
entries in it. A group first used in the op that hangs is then seen on one rank only: an op
cannot block in a group of one, so its other members are unseen (they never entered it, or
have no dump). This is never healthy. Who holds it up cannot be read from the entries alone, except
in one case: when every rank of the job has a dump and every one of them is blocked, the
unseen members are among them, blocked elsewhere, and nobody is free to join: the ranks
blocked in such groups wait on each other (a cross-group deadlock where each rank entered a
different new group), and are named.
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.detail import BlockedAlone, UnseenMembers
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    if facts.dumps.world.size <= 1:
        return []
    alone = {
        rank: ref
        for rank, ref in facts.matched.blocked.items()
        if len(facts.membership.groups[ref.gid].members) <= 1 and rank not in facts.moments.running
    }
    if not alone:
        return []
    ranks = tuple(sorted(alone))
    loaded = facts.loaded
    nobody_free = (
        len(ranks) >= 2
        and len(loaded) == facts.dumps.world.size
        and all(r in facts.matched.blocked and r not in facts.moments.running for r in loaded)
    )
    return [
        Finding(
            kind=FindingKind.UNSEEN_MEMBERS,
            severity=Severity.ERROR if nobody_free else Severity.WARNING,
            culprit_ranks=ranks if nobody_free else (),
            waiting_ranks=() if nobody_free else ranks,
            confidence=Confidence.MEDIUM if nobody_free else Confidence.LOW,
            detail=UnseenMembers(
                blocked=tuple(
                    BlockedAlone(
                        rank=r, op=ref.op, seq=ref.seq, group=facts.membership.groups[ref.gid]
                    )
                    for r, ref in sorted(alone.items())
                ),
                nobody_free=nobody_free,
                loaded=len(loaded),
                world_source=facts.dumps.world.source,
            ),
        )
    ]
