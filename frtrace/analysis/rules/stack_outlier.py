"""The ranks' Python stacks, where the entries are silent: the others wait in
torch.distributed calls while a few ranks are in host code.

Read as evidence only when every other rank with a stack is inside a torch.distributed call
(a collective, a send/recv, a barrier) and the ranks elsewhere are few (at most a quarter of
the ranks with a stack, and at least one rank waiting). In a running job this picture is
ordinary (ranks computing between ops), so the verdict uses it only where the entries already
say something is wrong but cannot say who (``analysis.verdict``).

Where no dump was read at all (``frtrace collect`` on a job that records nothing it can ask
for), the stacks are all there is, and they name a rank only where they observe it: every
rank of the job has a stack, every rank but the few in host code is in the same place of the
same torch.distributed call, and each of those few is outside any (``stacks_only``). Anything
less (a rank without a stack, the others in several places or calls, a rank whose sample has
no frames) is the picture above, which the verdict uses only where the job's own failures say
something is wrong; else it cannot tell.
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.detail import CulpritWhere, StackOutlier
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def _few(host: tuple[int, ...], ranks: int) -> bool:
    """At most a quarter of the ranks with a stack (one, of fewer than eight)."""
    return len(host) <= max(1, ranks // 4)


def check(facts: Facts) -> list[Finding]:
    alone = [] if facts.loaded else _stacks_alone(facts)
    if alone:
        return alone
    if len(facts.places) < 2:
        return []
    host = tuple(sorted(r for r, p in facts.places.items() if p.place != "collective"))
    comm = tuple(sorted(r for r, p in facts.places.items() if p.place == "collective"))
    if not host or not comm or not _few(host, len(facts.places)):
        return []
    lib = {facts.places[r].library_call for r in comm}
    return [_finding(facts, host, comm, next(iter(lib)) if len(lib) == 1 else None)]


def _stacks_alone(facts: Facts) -> list[Finding]:
    """No dump read: the ranks the stacks observe outside the one collective all the others
    are in, or none (see the module's docstring)."""
    places = {r: facts.places[r] for r in facts.sampled if r in facts.places}
    if len(places) < max(2, facts.dumps.world.size):
        return []  # a rank of the job without a stack: it may be anywhere
    if any(p.sampled != "frames" for p in places.values()):
        return []
    host = tuple(sorted(r for r, p in places.items() if p.place != "collective"))
    comm = tuple(sorted(r for r, p in places.items() if p.place == "collective"))
    spots = {_spot(places[r]) for r in comm}
    if not host or not comm or not _few(host, len(places)) or len(spots) != 1:
        return []
    return [_finding(facts, host, comm, places[comm[0]].library_call, stacks_only=True)]


def _spot(p: CulpritWhere) -> tuple[str | None, str | None, str | None, int | None]:
    """Where a rank waits: the torch.distributed call and the user code's frame that made it."""
    return p.library_call, p.function, p.file, p.line


def _finding(
    facts: Facts,
    host: tuple[int, ...],
    comm: tuple[int, ...],
    waiting_in: str | None,
    *,
    stacks_only: bool = False,
) -> Finding:
    where = tuple(facts.places[r] for r in host)
    return Finding(
        kind=FindingKind.STACK_OUTLIER,
        severity=Severity.ERROR,
        culprit_ranks=host,
        waiting_ranks=comm,
        confidence=Confidence.MEDIUM,
        detail=StackOutlier(
            host=where, waiting=len(comm), waiting_in=waiting_in, stacks_only=stacks_only
        ),
        where=where,
    )
