"""Ops every member entered that did not finish: the cause is below the Flight Recorder.

The network, the communication library or the GPU; on Gloo, whose entries never change state,
the same picture is also a healthy dump taken a moment after an op, so it is informational.
"""

from __future__ import annotations

from typing import Literal

from frtrace.analysis.capture import DumpMoments
from frtrace.analysis.groups import Membership
from frtrace.analysis.ops import MatchResult
from frtrace.analysis.signatures import signature_at
from frtrace.analysis.waitgraph import WaitGraph, victims_of
from frtrace.detail import DumpedAfter, InFlight, RunningOps, StuckInCollective
from frtrace.load.tables import DumpSet
from frtrace.model import (
    Confidence,
    Finding,
    FindingKind,
    Severity,
)

__all__ = ["in_flight_findings", "stateless_ranks", "stuck_findings"]


def stuck_findings(
    dumps: DumpSet,
    membership: Membership,
    matched: MatchResult,
    waits: WaitGraph,
    running: frozenset[int] = frozenset(),
) -> list[Finding]:
    """Ops that every member entered and none finished. When a member dumped moments after
    its newest entry (``running``), the op had only just got all its members: in flight."""
    findings = []
    stateless = stateless_ranks(dumps)
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


def in_flight_findings(
    membership: Membership, matched: MatchResult, waits: WaitGraph, moments: DumpMoments
) -> list[Finding]:
    """Waits on members that had not entered the op yet when a running job was dumped.

    Both sides' dumps were written moments after their newest entries (``capture``): the
    member is between ops, or finishing the one before; the chain of waits ends in an op in
    flight, not in a culprit.
    """
    by_op: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in waits.in_flight:
        if e.seq is not None:
            by_op.setdefault((e.gid, e.seq), []).append((e.waiter, e.target))
    findings = []
    for (gid, seq), pairs in sorted(by_op.items()):
        group = membership.groups[gid]
        waiting = tuple(sorted({w for w, _ in pairs}))
        behind = tuple(sorted({t for _, t in pairs}))
        op = (
            matched.pending[(waiting[0], gid, seq)].op
            if (waiting[0], gid, seq) in matched.pending
            else "op"
        )
        findings.append(
            Finding(
                kind=FindingKind.IN_FLIGHT,
                severity=Severity.INFO,
                culprit_ranks=(),
                waiting_ranks=waiting,
                group=group,
                seq=seq,
                op=op,
                confidence=Confidence.HIGH,
                detail=RunningOps(
                    waiting=waiting,
                    behind=behind,
                    idle_s=max(moments.idle_s.get(r, 0.0) for r in waiting),
                    dumped=tuple(
                        DumpedAfter(rank=r, idle_s=moments.idle_s[r], limit_s=moments.limit_s[r])
                        for r in waiting[:8]
                        if r in moments.idle_s
                    ),
                ),
            )
        )
    return findings


def stateless_ranks(dumps: DumpSet) -> set[int]:
    files = dumps.files
    return {
        int(r)
        for r, b in zip(
            files.column("rank").to_pylist(), files.column("backend").to_pylist(), strict=True
        )
        if b == "gloo"
    }
