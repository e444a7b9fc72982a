"""Root causes of the wait graph (``analysis.hang``): a member never joined the op its peers
wait in, a p2p peer never posted, a GPU never started it, a dump is missing (inferred).

"Never joined" is positive evidence only when the rank could not be blocked somewhere the
entries do not show. A rank whose buffer holds nothing pending may still be blocked in a
send or recv that Gloo does not record: when its Python stack is inside a torch.distributed
send, recv or barrier call (or any such call, where it ran unrecorded ops), or it has no
stack and ran unrecorded ops, the finding is kept as a warning (it
may be waiting, not holding anyone up), and the rank's place and the ops it ran are its
evidence.
"""

from __future__ import annotations

from dataclasses import replace

from frtrace.analysis.facts import Facts
from frtrace.analysis.hang import hang_findings
from frtrace.detail import MaybeElsewhere, NeverJoined
from frtrace.model import Confidence, Finding, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    found = hang_findings(
        facts.dumps,
        facts.membership,
        facts.matched,
        facts.waits,
        dict(facts.unrecorded),
        facts.moments,
    )
    return [_weighed(f, facts) for f in found]


def _maybe_elsewhere(rank: int, facts: Facts) -> MaybeElsewhere | None:
    """Why the rank may be blocked in an op its buffer does not show, or None."""
    if rank in facts.matched.blocked:
        return None  # its buffer shows where it is blocked
    in_comm = facts.in_comm(rank)
    ran = sum(n for (r, _), n in facts.unrecorded.items() if r == rank)
    place = facts.places.get(rank)
    p2p_call = place is not None and any(
        word in (place.library_call or "") for word in ("send", "recv", "barrier")
    )
    if in_comm and place is not None and (ran or p2p_call):
        return MaybeElsewhere(rank=rank, in_call=place, unrecorded=ran)
    if in_comm is None and ran:
        return MaybeElsewhere(rank=rank, in_call=None, unrecorded=ran)
    return None


def _weighed(f: Finding, facts: Facts) -> Finding:
    if not isinstance(f.detail, NeverJoined) or f.severity != Severity.ERROR:
        return f
    doubts = [why for r in f.culprit_ranks if (why := _maybe_elsewhere(r, facts)) is not None]
    if not doubts:
        return f
    return replace(
        f,
        severity=Severity.WARNING,
        confidence=Confidence.LOW,
        detail=replace(f.detail, doubts=tuple(doubts)),
    )
