"""Ops every member entered that did not finish: the cause is below the Flight Recorder.

The network, the communication library or the GPU; on Gloo, whose entries never change state,
the same picture is also a healthy dump taken a moment after an op, so it is informational.
"""

from __future__ import annotations

from frtrace.analysis.capture import DumpMoments
from frtrace.analysis.groups import Membership
from frtrace.analysis.ops import MatchResult
from frtrace.analysis.signatures import signature_at
from frtrace.analysis.waitgraph import WaitGraph, victims_of
from frtrace.load.tables import DumpSet
from frtrace.model import (
    Confidence,
    Finding,
    FindingKind,
    Severity,
)
from frtrace.ranges import format_ranks

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
        where = f"{sig.op} #{seq} of {group.label}"
        in_flight = None
        if running & set(ranks):
            in_flight = (
                "the last of them moments before its dump",
                Confidence.HIGH,
                "the dump times show nobody had waited long (a running job)",
            )
        elif set(ranks) <= stateless and not held:
            in_flight = (
                "and Gloo retires an op a moment after it finishes",
                Confidence.MEDIUM,
                "Gloo marks an op retired a moment after it finishes, so the newest op can "
                "look unfinished in a healthy job",
            )
        if in_flight is not None:
            how, confidence, why = in_flight
            findings.append(
                Finding(
                    kind=FindingKind.IN_FLIGHT,
                    severity=Severity.INFO,
                    summary=f"{where} was in flight when the dumps were taken: every member "
                    f"entered it, {how}",
                    culprit_ranks=(),
                    waiting_ranks=tuple(ranks),
                    group=group,
                    seq=seq,
                    op=sig.op,
                    expected=sig,
                    confidence=confidence,
                    why=why,
                )
            )
            continue
        findings.append(
            Finding(
                kind=FindingKind.STUCK_IN_COLLECTIVE,
                severity=Severity.WARNING,
                summary=(
                    f"every member of {group.label} entered {where} with matching arguments "
                    "and it did not finish"
                    + (f"; {len(held)} more ranks wait on them" if held else "")
                    + ": the Flight Recorder cannot name a rank"
                ),
                culprit_ranks=(),
                waiting_ranks=tuple(sorted(set(ranks) | held)),
                group=group,
                seq=seq,
                op=sig.op,
                expected=sig,
                confidence=Confidence.MEDIUM,
                why="all members joined; the cause is below the collective layer",
                evidence=(
                    "check the NCCL/transport logs (NCCL_DEBUG=INFO), the network between "
                    f"ranks {format_ranks(ranks)}, and GPU health (Xid errors in dmesg)",
                ),
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
        where = f"{op} #{seq} of {group.label}"
        idle = max(moments.idle_s.get(r, 0.0) for r in waiting)
        findings.append(
            Finding(
                kind=FindingKind.IN_FLIGHT,
                severity=Severity.INFO,
                summary=(
                    f"rank{'s' if len(waiting) > 1 else ''} {format_ranks(waiting)} entered "
                    f"{where}, which rank{'s' if len(behind) > 1 else ''} "
                    f"{format_ranks(behind)} had not finished or entered yet: a running job, "
                    f"dumped at most {idle * 1000:.0f} ms after the waiting ranks' newest op"
                ),
                culprit_ranks=(),
                waiting_ranks=waiting,
                group=group,
                seq=seq,
                op=op,
                confidence=Confidence.HIGH,
                why="the recorder wrote each dump moments after the rank's newest entry, well "
                "within the job's own gaps between ops: nobody had waited long",
                evidence=tuple(
                    f"rank {r}: dumped {moments.idle_s[r] * 1000:.0f} ms after its newest entry "
                    f"(running if under {moments.limit_s[r] * 1000:.0f} ms)"
                    for r in waiting[:8]
                    if r in moments.idle_s
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
