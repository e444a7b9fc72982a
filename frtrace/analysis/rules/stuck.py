"""Ops every member entered that did not finish: the cause is below the Flight Recorder.

The network, the communication library or the GPU; on Gloo, whose entries never change state,
the same picture is also a healthy dump taken a moment after an op, so it is informational.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.signatures import entry_at, signature_at
from frtrace.analysis.facts.waitgraph import victims_of
from frtrace.detail import InFlight, StuckInCollective
from frtrace.load.dumpset import DumpSet
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
        if sorted(ranks) != sorted(loaded_members):
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
                detail=StuckInCollective(
                    entered=tuple(ranks),
                    held=len(held),
                    on_gpu=None if set(ranks) & stateless else _on_gpu(facts, gid, seq, ranks),
                ),
            )
        )
    return findings


def _on_gpu(
    facts: Facts, gid: int, seq: int, ranks: Sequence[int]
) -> Literal["not_started", "started"] | None:
    """Where the op is on the members' GPUs: started on any (``"started"`` is only recorded
    with timing on), or still ``scheduled`` on every member of a job that records starts
    (``pg_status.last_started`` set, or an entry with a start time): not started."""
    m = facts.matched.collectives
    rows = m[(m["gid"] == gid) & (m["seq"] == seq) & m["rank"].isin(ranks)]["row"]
    states = {entry_at(facts.dumps, int(r))["state"] for r in rows}
    if "started" in states:
        return "started"
    if states == {"scheduled"} and _timed(facts.dumps, ranks):
        return "not_started"
    return None


def _timed(dumps: DumpSet, ranks: Sequence[int]) -> bool:
    """Whether these ranks' recorders record when an op starts (NCCL's timing)."""
    members = pa.array(ranks, pa.int32())
    status = dumps.pg_status.filter(pc.is_in(dumps.pg_status["rank"], members))
    if pc.any(pc.greater_equal(status["last_started"], 0)).as_py():
        return True
    e = dumps.entries
    mine = pc.is_in(e["rank"], pa.array(ranks, e.schema.field("rank").type))
    started = e.filter(mine)["time_discovered_started_ns"]
    return bool(started.null_count < len(started))
