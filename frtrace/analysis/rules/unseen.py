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
from frtrace.model import Confidence, Finding, FindingKind, Severity
from frtrace.ranges import format_ranks

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
    evidence = tuple(
        f"rank {r}: blocked in {ref.op}"
        + (f" #{ref.seq}" if ref.seq is not None else "")
        + f" of {facts.membership.groups[ref.gid].label}, which no other rank recorded"
        for r, ref in sorted(alone.items())
    )
    several = len(ranks) > 1
    if nobody_free:
        evidence = (
            *evidence,
            f"every rank of the job ({len(loaded)}: the world size is the "
            f"{facts.dumps.world.source}) has a dump and is blocked: the unseen members are "
            "blocked elsewhere, and no rank is free to join",
        )
    return [
        Finding(
            kind=FindingKind.UNSEEN_MEMBERS,
            severity=Severity.ERROR if nobody_free else Severity.WARNING,
            summary=(
                f"rank{'s' if several else ''} {format_ranks(ranks)} "
                f"{'are' if several else 'is'} blocked in ops of groups that no other member "
                "recorded: the other members never entered them"
                + (
                    ": every rank is blocked, so they wait on each other (a cross-group deadlock)"
                    if nobody_free
                    else " (each rank in a different group: a cross-group deadlock?)"
                    if several
                    else ""
                )
            ),
            culprit_ranks=ranks if nobody_free else (),
            waiting_ranks=() if nobody_free else ranks,
            confidence=Confidence.MEDIUM if nobody_free else Confidence.LOW,
            why="Gloo's pg_config does not say who the other members are",
            evidence=(
                *evidence,
                "the members of each group (the ranks passed to new_group), and each rank's "
                "Python stack, would say who never entered",
            ),
        )
    ]
