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

__all__ = ["stateless_ranks", "stuck_findings"]


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


def stateless_ranks(dumps: DumpSet) -> set[int]:
    files = dumps.files
    return {
        int(r)
        for r, b in zip(
            files.column("rank").to_pylist(), files.column("backend").to_pylist(), strict=True
        )
        if b == "gloo"
    }
