"""Hang findings: one per root cause of the wait graph and op it holds up.

A root either never joined the op its peers wait in, never posted the other half of a p2p
op, never started it on the GPU, or left no dump (inferred). Each finding carries the waiting
ranks, both sides' signatures and stacks, where the culprit was last seen, and what
``pg_status`` says about it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

import pyarrow.compute as pc

from frtrace.analysis.capture import DumpMoments
from frtrace.analysis.failure import FailedOp
from frtrace.analysis.groups import Membership
from frtrace.analysis.ops import MatchResult
from frtrace.analysis.signatures import call_site, entry_at, signature_at
from frtrace.analysis.stuck import stateless_ranks
from frtrace.analysis.waitgraph import Edge, EdgeKind, WaitGraph, victims_of
from frtrace.detail import (
    IdleAtDump,
    LastSeen,
    NeverJoined,
    NeverPosted,
    NewestEntry,
    NoDump,
    NotStarted,
    OpFailed,
    PgStatus,
    Waits,
)
from frtrace.load.tables import DumpSet
from frtrace.model import Confidence, Finding, FindingKind, GroupRef, Severity

__all__ = ["hang_findings", "in_sink_cycle", "last_seen"]

_HANG_KINDS = {
    EdgeKind.NEVER_JOINED: FindingKind.NEVER_JOINED,
    EdgeKind.JOINED_LATE: FindingKind.NEVER_JOINED,
    EdgeKind.NOT_STARTED: FindingKind.NOT_STARTED,
    EdgeKind.P2P_UNMATCHED: FindingKind.P2P_UNMATCHED,
    EdgeKind.NO_DUMP: FindingKind.MISSING_DUMP,
}


def in_sink_cycle(waits: WaitGraph) -> set[int]:
    return {r for component in waits.sink_components for r in component}


def hang_findings(
    dumps: DumpSet,
    membership: Membership,
    matched: MatchResult,
    waits: WaitGraph,
    unrecorded: dict[tuple[int, int], int],
    moments: DumpMoments | None = None,
) -> list[Finding]:
    """One finding per (kind, op waited in) over the edges that end at a root cause.
    ``moments``: when each dump was written, where known (what the evidence can say)."""
    roots = set(waits.roots)
    cyclic = in_sink_cycle(waits)
    grouped: dict[tuple[FindingKind, int, int | None, int | None], list[Edge]] = defaultdict(list)
    for e in waits.edges:
        kind = _HANG_KINDS.get(e.kind)
        if kind is None or e.target not in roots:
            continue
        if e.target in cyclic:
            continue  # told by the deadlock finding, with its waiters
        key = (kind, e.gid, e.seq, e.p2p_seq if e.seq is None else None)
        grouped[key].append(e)
    findings = []
    for (kind, gid, seq, _), edges in sorted(
        grouped.items(),
        key=lambda kv: (kv[0][0], kv[0][1], -1 if kv[0][2] is None else kv[0][2], kv[0][3] or -1),
    ):
        findings.append(
            _hang_finding(
                dumps, membership, matched, waits, kind, gid, seq, edges, unrecorded, moments
            )
        )
    return findings


def last_seen(dumps: DumpSet, membership: Membership, rank: int) -> tuple[LastSeen, int | None]:
    """Where a rank was last seen: its newest entry, and that entry's row."""
    rows = dumps.entries.column("rank")
    idx = pc.indices_nonzero(pc.equal(rows, rank)).to_pylist()
    if not idx:
        return LastSeen(rank=rank, entry=None), None
    row = idx[-1]
    e = entry_at(dumps, row)
    group = membership.group_of(rank, e["group_name"]) if e["group_name"] is not None else None
    entry = NewestEntry(
        op=e["op"],
        seq=e["collective_seq"] if not e["is_p2p"] else e["p2p_seq"],
        group=group,
        group_name=e["group_name"],
        state=e["state"],
        retired=bool(e["retired"]),
    )
    return LastSeen(rank=rank, entry=entry), row


def _hang_finding(
    dumps: DumpSet,
    membership: Membership,
    matched: MatchResult,
    waits: WaitGraph,
    kind: FindingKind,
    gid: int,
    seq: int | None,
    edges: list[Edge],
    unrecorded: dict[tuple[int, int], int],
    moments: DumpMoments | None = None,
) -> Finding:
    group = membership.groups[gid]
    culprits = tuple(sorted({e.target for e in edges}))
    waiting = tuple(sorted({e.waiter for e in edges}))
    ref = min(edges, key=lambda e: e.waiter)
    expected = signature_at(dumps, ref.row)
    seen: list[LastSeen] = []
    actual = {}
    newest_row: dict[int, int] = {}
    loaded = set(dumps.loaded_ranks)
    for c in culprits:
        if c in loaded:
            place, row = last_seen(dumps, membership, c)
            seen.append(place)
            if row is not None:
                actual[c] = signature_at(dumps, row)
                newest_row[c] = row
    failure = matched.failed.get((gid, seq)) if seq is not None else None
    context = Waits(
        culprits=culprits,
        waiting=waiting,
        # the group's members that wait on them, directly or not (the job's are the headline's)
        blocked=len(victims_of(waits, culprits) & set(group.members)),
        last_seen=tuple(seen),
        waiting_state=expected.state,
        call_site=call_site(expected.stack),
        failed=_op_failed(failure),
        timed_out=() if failure is not None else _timed_out(dumps, matched, gid, seq),
    )
    confidence = Confidence.HIGH
    severity = Severity.ERROR
    detail: NeverJoined | NotStarted | NeverPosted | NoDump
    if kind == FindingKind.NEVER_JOINED:
        detail, confidence = _never_joined(
            dumps, matched, context, group, seq, failure, edges, unrecorded, moments, newest_row
        )
    elif kind == FindingKind.NOT_STARTED:
        detail = NotStarted(waits=context)
    elif kind == FindingKind.P2P_UNMATCHED:
        detail = NeverPosted(waits=context, pairs=tuple((e.waiter, e.target) for e in edges[:8]))
    else:
        failed: list[int] = []
        if seq is not None:
            failed = sorted(
                r for (r, g, q), op in matched.pending.items() if g == gid and q == seq and op.done
            )
        if failed:
            waiting = tuple(sorted({*waiting, *failed}))
        stopped = failure is not None and failure.reason == "stopped"
        confidence = Confidence.LOW
        if stopped:
            severity = Severity.WARNING
        detail = NoDump(waits=context, failed_it=tuple(failed), stopped=stopped)
    return Finding(
        kind=kind,
        severity=severity,
        culprit_ranks=culprits,
        waiting_ranks=waiting,
        group=group,
        seq=seq,
        op=expected.op,
        expected=expected,
        actual=actual,
        confidence=confidence,
        detail=detail,
    )


def _never_joined(
    dumps: DumpSet,
    matched: MatchResult,
    context: Waits,
    group: GroupRef,
    seq: int | None,
    failure: FailedOp | None,
    edges: list[Edge],
    unrecorded: dict[tuple[int, int], int],
    moments: DumpMoments | None,
    newest_row: dict[int, int],
) -> tuple[NeverJoined, Confidence]:
    """FR001's evidence: why the culprits are where they are, and how sure that is."""
    culprits = context.culprits
    loaded = set(dumps.loaded_ranks)
    late = failure is not None and all(e.kind == EdgeKind.JOINED_LATE for e in edges)
    confidence = Confidence.HIGH
    basis: Literal["dumps", "inferred", "members_missing", "unretired", "unrecorded"] = "dumps"
    if group.inferred:
        confidence, basis = Confidence.MEDIUM, "inferred"
    elif any(m not in loaded for m in group.members):
        confidence, basis = Confidence.MEDIUM, "members_missing"
    status = _pg_status(dumps, group.name, culprits[:4], seq)
    done = [c for c in culprits if c in newest_row and _all_done(matched, c)]
    hidden = [c for c in done if any(r == c for r, _ in unrecorded)]
    stateless = stateless_ranks(dumps)
    unretired = {
        c: newest_row[c] for c in done if c in stateless and _unretired(dumps, newest_row[c])
    }
    host = [c for c in done if c not in hidden and c not in unretired]
    unretired_op = None
    if unretired:
        unretired_op = signature_at(dumps, next(iter(unretired.values()))).op
        confidence, basis = Confidence.MEDIUM, "unretired"
    idle = moments.idle_s if moments is not None else {}
    timed = [c for c in host if c in idle]
    if hidden:
        confidence, basis = Confidence.MEDIUM, "unrecorded"
    return (
        NeverJoined(
            waits=context,
            late=late,
            late_by_s=failure.late_by_s if late and failure is not None else None,
            timeout_s=failure.timeout_s if late and failure is not None else None,
            basis=basis,
            pg_status=tuple(status),
            unretired=tuple(sorted(unretired)),
            unretired_op=unretired_op,
            host=tuple(host),
            idle=tuple(IdleAtDump(rank=c, idle_s=idle[c]) for c in timed[:4]),
            no_dump_time=bool(host) and failure is None and len(timed) < len(host),
            hidden=tuple(hidden),
        ),
        confidence,
    )


def _pg_status(
    dumps: DumpSet, group_name: str, ranks: tuple[int, ...], seq: int | None
) -> list[PgStatus]:
    """What each rank's own pg_status says about the group (torch 2.5+): corroboration."""
    if seq is None or dumps.pg_status.num_rows == 0:
        return []
    out = []
    entries = dumps.entries
    status = dumps.pg_status.to_pylist()
    for rank in ranks:
        mine = entries.filter(
            pc.and_(
                pc.equal(entries.column("rank"), rank),
                pc.equal(entries.column("group_name"), group_name),
            )
        )
        pg_ids = {p for p in mine.column("pg_id").to_pylist() if p is not None}
        for row in status:
            if row["rank"] == rank and row["pg_id"] in pg_ids:
                out.append(
                    PgStatus(
                        rank=rank,
                        last_enqueued=row["last_enqueued"],
                        last_completed=row["last_completed"],
                    )
                )
    return out


def _all_done(matched: MatchResult, rank: int) -> bool:
    return rank not in matched.blocked


def _unretired(dumps: DumpSet, row: int) -> bool:
    """Is the entry at ``row`` a collective not retired? (On a Gloo rank whose ops all count
    as finished, only because other members finished this one.)"""
    entry = entry_at(dumps, row)
    return entry["retired"] is False and not entry["is_p2p"]


def _op_failed(failure: FailedOp | None) -> OpFailed | None:
    """What shows that the op failed (``analysis.failure``), or None."""
    if failure is None:
        return None
    reason: Literal["absent", "late", "stopped"]
    if failure.reason == "absent":
        reason, ranks = "absent", failure.absent
    elif failure.reason == "late":
        reason, ranks = "late", failure.late
    else:
        reason, ranks = "stopped", failure.missing
    return OpFailed(reason=reason, ranks=ranks, retired_on=failure.retired_on)


def _timed_out(dumps: DumpSet, matched: MatchResult, gid: int, seq: int | None) -> tuple[int, ...]:
    """NCCL: members whose entry is retired without having completed dumped after the
    watchdog gave up on the op (timeout or abort)."""
    if seq is None:
        return ()
    retired = dumps.entries.column("retired")
    return tuple(
        sorted(
            r
            for (r, g, q), op in matched.pending.items()
            if g == gid
            and q == seq
            and not op.done
            and op.state_rank < 2
            and retired[op.row].as_py()
        )
    )
