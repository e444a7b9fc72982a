"""Which ranks without a dump are suspected, and which are presumed victims (``verdict``).

A rank without a dump is only suspected when nothing else explains its peers' wait; see
``explain_missing``.
"""

from __future__ import annotations

from dataclasses import replace

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.waitgraph import victims_of
from frtrace.base.ranges import format_ranks
from frtrace.evidence.model import Failure, FailureKind, Role
from frtrace.model import Finding, FindingKind, Severity

__all__ = ["Presumed", "explain_missing"]

# a rank presumed held up: (where, by, its own symptom where that explains its missing dump)
Presumed = tuple[str, tuple[int, ...], str | None]


def _symptoms_only(facts: Facts) -> dict[int, str]:
    """Ranks whose every failure the job reported is a symptom (stopped by the launcher, a
    peer closed, a timeout), with the first one's kind."""
    kinds: dict[int, list[Failure]] = {}
    for f in facts.evidence.failures:
        if f.rank is not None:
            kinds.setdefault(f.rank, []).append(f)
    return {
        r: fs[0].kind.value.replace("_", " ")
        for r, fs in kinds.items()
        if all(f.role == Role.SYMPTOM for f in fs)
    }


def explain_missing(
    findings: list[Finding], facts: Facts
) -> tuple[list[Finding], dict[int, Presumed]]:
    """Drop a no-dump suspect that a confirmed culprit already explains.

    A rank without a dump is only suspected when nothing else explains its peers' wait. It is
    presumed a victim when it is a member of a group whose other members wait on a confirmed
    culprit (it is presumably stuck in that same collective), when every peer it has with
    a dump is itself held up by a confirmed culprit (it cannot have got further than them),
    or when a first cause is observed on another rank (a crash, an exception; Gloo's size
    check, a collective mismatch) and this rank's own failures are all symptoms of it (stopped
    by the launcher, its peer gone): its dump was lost to the cause. A rank Gloo's size check
    aborted received its peer's data inside the op: it did not fail to join it.
    """
    membership, waits, loaded = facts.membership, facts.waits, facts.loaded
    symptoms = _symptoms_only(facts)
    confirmed = [
        f for f in findings if f.severity == Severity.ERROR and f.kind != FindingKind.MISSING_DUMP
    ]
    culprits = tuple(sorted({r for f in confirmed for r in f.culprit_ranks}))
    causes = {x.rank for x in facts.evidence.failures if x.role == Role.CAUSE}
    aborted = {
        x.rank
        for x in facts.evidence.failures
        if x.kind == FailureKind.SIZE_CHECK and x.rank is not None
    }
    first_cause = tuple(
        sorted(
            r
            for f in confirmed
            if f.kind == FindingKind.FIRST_FAILURE
            for r in f.culprit_ranks
            if r in causes
        )
    )
    held = victims_of(waits, culprits) if culprits else set()
    presumed: dict[int, Presumed] = {}
    out: list[Finding] = []
    for f in findings:
        if f.kind != FindingKind.MISSING_DUMP:
            out.append(f)
            continue
        keep = []
        # Per group, once: its members that could be r's peers, and the groups of each rank
        # (asking every group about every missing rank is quadratic: 10^10 steps for a
        # 100,000-rank job with a handful of dumps).
        waiting_on_r = set(f.waiting_ranks)
        eligible = [
            {m for m in g.members if m in loaded and m not in waiting_on_r and m not in culprits}
            for g in membership.groups
        ]
        groups_of: dict[int, list[int]] = {}
        for gi, g in enumerate(membership.groups):
            for m in g.members:
                groups_of.setdefault(m, []).append(gi)
        confirmed_members = [set(c.group.members) if c.group else set() for c in confirmed]
        for r in f.culprit_ranks:
            why = next(
                (
                    c
                    for c, members in zip(confirmed, confirmed_members, strict=True)
                    if c.group is not None and r in members and r not in c.culprit_ranks
                ),
                None,
            )
            peers = {m for gi in groups_of.get(r, ()) for m in eligible[gi] if m != r}
            if why is not None and why.group is not None:
                presumed[r] = (why.group.label, why.culprit_ranks, None)
            elif r in aborted:  # (Gloo's size check: it received its peer's data in the op)
                presumed[r] = ("", (), "size check")
            elif r in symptoms and (first_cause or aborted):
                presumed[r] = ("", first_cause or tuple(sorted(aborted)), symptoms[r])
            elif culprits and peers and peers <= held:
                presumed[r] = (f"groups with ranks {format_ranks(peers)}", culprits, None)
            else:
                keep.append(r)
        if keep:
            out.append(replace(f, culprit_ranks=tuple(keep)))
    return out, presumed
