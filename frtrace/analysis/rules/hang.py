"""Root causes of the wait graph: a member never joined the op its peers wait in, a p2p peer
never posted, a GPU never started it, a dump is missing (inferred). One finding per root cause
and op it holds up; each carries the waiting ranks, both sides' signatures and stacks, where
the culprit was last seen, and what ``pg_status`` says about it.

"Never joined" is positive evidence only when the rank could not be blocked somewhere the
entries do not show. A rank whose buffer holds nothing pending may still be blocked in a
send or recv that Gloo does not record (``facts.elsewhere``: its Python stack is inside a
torch.distributed send, recv, pipeline schedule's p2p wait or barrier, or any such call where
it ran unrecorded ops; it has no stack and ran unrecorded ops; or, with neither, the ranks
absent beside it in a pipeline wait in send/recv behind a rank seen stuck). Such ranks are
told apart from the others of their op: a finding of low confidence and warning severity
(they may be waiting, not holding anyone up), their place and the ops they ran as its
evidence (``NeverJoined.doubts``); the ranks of the same op that nothing doubts keep their
own finding, an error. Likewise a rank that never joined, or never posted, while blocked
itself in an op that waits on no one the dumps show (``Waits.held``: an onlyActive dump
dropped the entries that would say whom): it may not have reached the op yet. Unless its
peers completed that op, or a later one of its group, by their own marks (their entries'
state, their ``pg_status``): no member completes a collective unless every member ran it, so
the rank ran it, and only its own completion marks stopped (its GPU failed): it is no rank
held up before the op, but the one the job hung on (``Waits.stopped``,
``facts.marks``), and its "never joined" stands.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.failure import FailedOp
from frtrace.analysis.facts.marks import stopped_marks
from frtrace.analysis.facts.ops import MatchResult
from frtrace.analysis.facts.signatures import call_site, entry_at, signature_at
from frtrace.analysis.facts.waitgraph import Edge, EdgeKind, victims_of
from frtrace.detail import (
    HeldUnseen,
    IdleAtDump,
    LastSeen,
    MarksStopped,
    NeverJoined,
    NeverPosted,
    NewestEntry,
    NoDump,
    NotStarted,
    OpFailed,
    PgStatus,
    Waits,
)
from frtrace.evidence.model import said_they_waited
from frtrace.load.dumpset import DumpSet
from frtrace.model import Confidence, Finding, FindingKind, GroupRef, OpSignature, Severity

__all__ = ["check"]

# The edges whose target may only be blocked before the op (it has not reached it yet)
_MAY_BE_HELD = frozenset({EdgeKind.NEVER_JOINED, EdgeKind.P2P_UNMATCHED})
_HANG_KINDS = {
    EdgeKind.NEVER_JOINED: FindingKind.NEVER_JOINED,
    EdgeKind.JOINED_LATE: FindingKind.NEVER_JOINED,
    EdgeKind.NOT_STARTED: FindingKind.NOT_STARTED,
    EdgeKind.P2P_UNMATCHED: FindingKind.P2P_UNMATCHED,
    EdgeKind.NO_DUMP: FindingKind.MISSING_DUMP,
}


def check(facts: Facts) -> list[Finding]:
    """One finding per (kind, op waited in) over the edges that end at a root cause; for
    "never joined", the culprits that may be blocked elsewhere apart from the others."""
    waits = facts.waits
    roots = set(waits.roots)
    cyclic = {r for component in waits.sink_components for r in component}
    held = _held_unseen(facts)
    # (a held rank whose peers completed the op it sits in, or a later one: it ran it)
    marks = stopped_marks(facts.dumps, facts.membership, facts.matched, facts.stateless, held)
    held = {r: h for r, h in held.items() if r not in marks}
    Key = tuple[FindingKind, int, int | None, int | None, bool]
    grouped: dict[Key, list[Edge]] = defaultdict(list)
    for e in waits.edges:
        kind = _HANG_KINDS.get(e.kind)
        if kind is None or e.target not in roots:
            continue
        if e.target in cyclic:
            continue  # told by the deadlock finding, with its waiters
        doubted = (kind == FindingKind.NEVER_JOINED and e.target in facts.elsewhere) or (
            e.kind in _MAY_BE_HELD and e.target in held
        )
        key = (kind, e.gid, e.seq, e.p2p_seq if e.seq is None else None, doubted)
        grouped[key].append(e)
    findings = []
    for (kind, gid, seq, _, _), edges in sorted(
        grouped.items(),
        key=lambda kv: (
            kv[0][0],
            kv[0][1],
            -1 if kv[0][2] is None else kv[0][2],
            kv[0][3] or -1,
            kv[0][4],
        ),
    ):
        findings.append(_hang_finding(facts, kind, gid, seq, edges, held, marks))
    return findings


def _held_unseen(facts: Facts) -> dict[int, HeldUnseen]:
    """Ranks blocked in an op that waits on no one the dumps show (not every member inside
    it, not in flight): the op their peers wait in may be one they have not reached yet
    (unless their peers' marks show they ran it: ``check``)."""
    waits, matched = facts.waits, facts.matched
    together = {r for ranks in waits.co_waiting.values() for r in ranks}
    together |= {e.waiter for e in waits.in_flight} | waits.running
    out = {}
    for r, op in matched.blocked.items():
        if r in together or (waits.graph.has_node(r) and waits.graph.out_degree(r) > 0):
            continue
        seq = op.seq if op.seq is not None else op.p2p_seq
        out[r] = HeldUnseen(rank=r, op=op.op, seq=seq, group=facts.membership.groups[op.gid])
    return out


def _last_seen(facts: Facts, rank: int) -> tuple[LastSeen, int | None]:
    """Where a rank was last seen: its newest entry, and that entry's row."""
    dumps, membership = facts.dumps, facts.membership
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
    facts: Facts,
    kind: FindingKind,
    gid: int,
    seq: int | None,
    edges: list[Edge],
    held: dict[int, HeldUnseen],
    marks: dict[int, MarksStopped],
) -> Finding:
    dumps, matched = facts.dumps, facts.matched
    group = facts.membership.groups[gid]
    also_waited: set[int] = set()
    if kind == FindingKind.MISSING_DUMP:  # a missing rank whose log says it waited too
        said = said_they_waited(facts.evidence)
        quiet = [e for e in edges if e.target not in said]
        if quiet and len(quiet) < len(edges):  # (where all said so, nobody is cleared)
            also_waited = {e.target for e in edges} - {e.target for e in quiet}
            edges = quiet
    culprits = tuple(sorted({e.target for e in edges}))
    waiting = tuple(sorted({e.waiter for e in edges} | also_waited))
    ref = min(edges, key=lambda e: e.waiter)
    expected = signature_at(dumps, ref.row)
    seen: list[LastSeen] = []
    actual = {}
    newest_row: dict[int, int] = {}
    loaded = set(dumps.loaded_ranks)
    for c in culprits:
        if c in loaded:
            place, row = _last_seen(facts, c)
            seen.append(place)
            if row is not None:
                actual[c] = signature_at(dumps, row)
                newest_row[c] = row
    failure = matched.failed.get((gid, seq)) if seq is not None else None
    context = _waits(facts, gid, seq, edges, failure, held, expected, tuple(seen))
    if marks:  # culprits whose own marks stopped below what their peers completed
        context = replace(context, stopped=tuple(marks[c] for c in culprits if c in marks))
    confidence = Confidence.HIGH
    severity = Severity.ERROR
    detail: NeverJoined | NotStarted | NeverPosted | NoDump
    if kind == FindingKind.NEVER_JOINED:
        detail, confidence = _never_joined(facts, context, group, seq, failure, edges, newest_row)
        doubts = tuple(d for r in culprits if (d := facts.elsewhere.get(r)) is not None)
        if doubts:  # it may be blocked in an op its buffer does not show: not positive
            severity, confidence = Severity.WARNING, Confidence.LOW
            detail = replace(detail, doubts=doubts)
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
    if context.held:  # blocked itself, on no one seen: it may not have reached the op yet
        severity, confidence = Severity.WARNING, Confidence.LOW
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


def _waits(
    facts: Facts,
    gid: int,
    seq: int | None,
    edges: list[Edge],
    failure: FailedOp | None,
    held: dict[int, HeldUnseen],
    expected: OpSignature,
    seen: tuple[LastSeen, ...],
) -> Waits:
    """What every hang finding rests on: who holds up whom, where the culprits were last
    seen, what shows the op failed, and which culprits are blocked themselves on no one seen."""
    culprits = tuple(sorted({e.target for e in edges}))
    group = facts.membership.groups[gid]
    return Waits(
        culprits=culprits,
        waiting=tuple(sorted({e.waiter for e in edges})),
        # the group's members that wait on them, directly or not (the job's are the headline's)
        blocked=len(victims_of(facts.waits, culprits) & set(group.members)),
        last_seen=seen,
        waiting_state=expected.state,
        call_site=call_site(expected.stack),
        failed=_op_failed(failure),
        timed_out=() if failure is not None else _timed_out(facts.dumps, facts.matched, gid, seq),
        held=tuple(
            held[e.target]
            for e in _first_per_target(edges)
            if e.kind in _MAY_BE_HELD and e.target in held
        ),
    )


def _never_joined(
    facts: Facts,
    context: Waits,
    group: GroupRef,
    seq: int | None,
    failure: FailedOp | None,
    edges: list[Edge],
    newest_row: dict[int, int],
) -> tuple[NeverJoined, Confidence]:
    """FR001's evidence: why the culprits are where they are, and how sure that is."""
    dumps, matched, unrecorded = facts.dumps, facts.matched, facts.unrecorded
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
    unretired = {
        c: newest_row[c] for c in done if c in facts.stateless and _unretired(dumps, newest_row[c])
    }
    # (a rank that may be blocked in an unrecorded op is not said to be in host code)
    host = [c for c in done if c not in hidden and c not in unretired and c not in facts.elsewhere]
    unretired_op = None
    if unretired:
        unretired_op = signature_at(dumps, next(iter(unretired.values()))).op
        confidence, basis = Confidence.MEDIUM, "unretired"
    idle = facts.moments.idle_s
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
    table = dumps.pg_status  # (a row per rank and group: only these ranks' rows are read)
    rows = pc.is_in(
        table.column("rank"), value_set=pa.array(ranks, type=table.schema.field("rank").type)
    )
    status = table.filter(rows).to_pylist()
    # the ranks' entries in the group, in one pass over every entry (not two a rank)
    theirs = pc.is_in(
        entries.column("rank"), value_set=pa.array(ranks, type=entries.schema.field("rank").type)
    )
    mine = entries.select(["rank", "group_name", "pg_id"]).filter(theirs)
    mine = mine.filter(pc.equal(mine.column("group_name"), group_name))
    pg_ids: dict[int, set[int]] = {}
    ranks_of, pg_ids_of = mine.column("rank").to_pylist(), mine.column("pg_id").to_pylist()
    for r, pg_id in zip(ranks_of, pg_ids_of, strict=True):
        if pg_id is not None:
            pg_ids.setdefault(r, set()).add(pg_id)
    for rank in ranks:
        for row in status:
            if row["rank"] == rank and row["pg_id"] in pg_ids.get(rank, ()):
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


def _first_per_target(edges: list[Edge]) -> list[Edge]:
    """One edge per target, in rank order."""
    first: dict[int, Edge] = {}
    for e in sorted(edges, key=lambda e: (e.target, e.waiter)):
        first.setdefault(e.target, e)
    return list(first.values())
