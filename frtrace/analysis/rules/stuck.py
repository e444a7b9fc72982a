"""Ops every member entered that did not finish: the cause is below the Flight Recorder.

The network, the communication library or the GPU; on Gloo, whose entries never change state,
the same picture is also a healthy dump taken a moment after an op, so it is informational.
"""

from __future__ import annotations

from typing import Literal

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.signatures import signature_at
from frtrace.analysis.facts.waitgraph import victims_of
from frtrace.detail import InFlight, StuckInCollective
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    """Ops that every member entered and none finished. When a member dumped moments after
    its newest entry (``moments.running``), the op had only just got all its members: in
    flight."""
    dumps, membership, matched, waits = facts.dumps, facts.membership, facts.matched, facts.waits
    running, stateless = facts.moments.running, facts.stateless
    findings = []
    for (gid, seq), ranks in sorted(waits.co_waiting.items()):
        group = membership.groups[gid]
        loaded_members = [m for m in group.members if m in set(dumps.loaded_ranks)]
        if sorted(ranks) != sorted(loaded_members) or len(group.members) < 2:
            continue
        row = int(
            matched.collectives[
                (matched.collectives["gid"] == gid)
                & (matched.collectives["seq"] == seq)
                & (matched.collectives["rank"] == ranks[0])
            ]["row"].iloc[0]
        )
        sig = signature_at(dumps, row)
        held = victims_of(waits, ranks)
        in_flight: tuple[Literal["running", "gloo"], Confidence] | None = None
        if running & set(ranks):
            in_flight = ("running", Confidence.HIGH)
        elif set(ranks) <= stateless and not held:
            in_flight = ("gloo", Confidence.MEDIUM)
        if in_flight is not None:
            how, confidence = in_flight
            findings.append(
                Finding(
                    kind=FindingKind.IN_FLIGHT,
                    severity=Severity.INFO,
                    culprit_ranks=(),
                    waiting_ranks=tuple(ranks),
                    group=group,
                    seq=seq,
                    op=sig.op,
                    expected=sig,
                    confidence=confidence,
                    detail=InFlight(because=how),
                )
            )
            continue
        findings.append(
            Finding(
                kind=FindingKind.STUCK_IN_COLLECTIVE,
                severity=Severity.WARNING,
                culprit_ranks=(),
                waiting_ranks=tuple(sorted(set(ranks) | held)),
                group=group,
                seq=seq,
                op=sig.op,
                expected=sig,
                confidence=Confidence.MEDIUM,
                detail=StuckInCollective(entered=tuple(ranks), held=len(held)),
            )
        )
    return findings
