"""Ops every member entered that did not finish: the cause is below the Flight Recorder.

The network, the communication library or the GPU; on Gloo, whose entries never change state,
the same picture is also a healthy dump taken a moment after an op, so it is informational.
"""

from __future__ import annotations

from frtrace.analysis.findings import (
    Confidence,
    Finding,
    FindingKind,
    Severity,
)
from frtrace.analysis.groups import Membership
from frtrace.analysis.ops import MatchResult
from frtrace.analysis.signatures import signature_at
from frtrace.analysis.waitgraph import WaitGraph, victims_of
from frtrace.load.tables import DumpSet
from frtrace.ranges import format_ranks

__all__ = ["in_flight_findings", "stateless_ranks", "stuck_findings"]


def stuck_findings(
    dumps: DumpSet, membership: Membership, matched: MatchResult, waits: WaitGraph
) -> list[Finding]:
    """Ops that every member entered and none finished."""
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
        if set(ranks) <= stateless and not held:
            findings.append(
                Finding(
                    kind=FindingKind.IN_FLIGHT,
                    severity=Severity.INFO,
                    summary=f"{where} was in flight when the dumps were taken (every member "
                    "entered it)",
                    culprit_ranks=(),
                    waiting_ranks=tuple(ranks),
                    group=group,
                    seq=seq,
                    op=sig.op,
                    expected=sig,
                    confidence=Confidence.MEDIUM,
                    why="Gloo marks an op retired a moment after it finishes, so the newest op "
                    "can look unfinished in a healthy job",
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
    dumps: DumpSet, membership: Membership, matched: MatchResult, waits: WaitGraph
) -> list[Finding]:
    """Waits on members still inside the op before, which another member finished.

    On Gloo (no states) that is a running job caught between ops: ``retired`` comes a moment
    after an op finishes, so a member can still look inside an op its peers left. On NCCL a
    member whose GPU has not finished an op that completed on its peers is stalled below the
    recorder, unless its dump was taken a moment before theirs: a warning that names it.
    """
    by_op: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for e in waits.in_flight:
        if e.seq is not None:
            by_op.setdefault((e.gid, e.seq), []).append((e.waiter, e.target, e.row))
    stateless = stateless_ranks(dumps)
    findings = []
    for (gid, seq), pairs in sorted(by_op.items()):
        group = membership.groups[gid]
        waiting = tuple(sorted({w for w, _, _ in pairs}))
        behind = tuple(sorted({t for _, t, _ in pairs}))
        sig = signature_at(dumps, min(r for _, _, r in pairs))
        where = f"{sig.op} #{seq} of {group.label}"
        ahead = f"rank{'s' if len(waiting) > 1 else ''} {format_ranks(waiting)}"
        late = f"rank{'s' if len(behind) > 1 else ''} {format_ranks(behind)}"
        if set(behind) <= stateless:
            findings.append(
                Finding(
                    kind=FindingKind.IN_FLIGHT,
                    severity=Severity.INFO,
                    summary=f"{ahead} entered {where} while {late} were still finishing "
                    f"#{seq - 1}, which other members had finished: a running job caught "
                    "between ops",
                    culprit_ranks=(),
                    waiting_ranks=waiting,
                    group=group,
                    seq=seq,
                    op=sig.op,
                    expected=sig,
                    confidence=Confidence.MEDIUM,
                    why="Gloo marks an op retired a moment after it finishes; a rank still "
                    "inside an op its peers left is on its way, not stuck",
                    evidence=(
                        "if the job is in fact hung, a second snapshot a few seconds later "
                        "shows it: `frtrace analyze` on both",
                    ),
                )
            )
            continue
        findings.append(
            Finding(
                kind=FindingKind.IN_FLIGHT,
                severity=Severity.WARNING,
                summary=f"{late} had not finished #{seq - 1} of {group.label}, which completed "
                f"on its peers, while {ahead} waited in {where}: a stall below the recorder "
                "(GPU, stream, communicator) on it, or its dump was taken a moment earlier",
                culprit_ranks=behind,
                waiting_ranks=waiting,
                group=group,
                seq=seq,
                op=sig.op,
                expected=sig,
                confidence=Confidence.LOW,
                why="a collective completes on all members at nearly the same moment; the dumps "
                "do not say when each was taken",
                evidence=(
                    f"check rank {format_ranks(behind)}'s GPU (nvidia-smi, Xid errors in dmesg) "
                    "and take a second snapshot a few seconds later",
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
