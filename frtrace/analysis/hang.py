"""Hang findings: one per root cause of the wait graph and op it holds up.

A root either never joined the op its peers wait in, never posted the other half of a p2p
op, never started it on the GPU, or left no dump (inferred). Each finding carries the waiting
ranks, both sides' signatures and stacks, where the culprit was last seen, and what
``pg_status`` says about it.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow.compute as pc

from frtrace.analysis.capture import DumpMoments
from frtrace.analysis.groups import Membership
from frtrace.analysis.ops import MatchResult
from frtrace.analysis.signatures import call_site, entry_at, signature_at
from frtrace.analysis.stuck import stateless_ranks
from frtrace.analysis.waitgraph import Edge, EdgeKind, WaitGraph, victims_of
from frtrace.load.tables import DumpSet
from frtrace.model import (
    Confidence,
    Finding,
    FindingKind,
    Severity,
)
from frtrace.ranges import format_ranks

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


def last_seen(dumps: DumpSet, membership: Membership, rank: int) -> tuple[str, int | None]:
    """Where a rank was last seen: its newest entry, described, and that entry's row."""
    rows = dumps.entries.column("rank")
    idx = pc.indices_nonzero(pc.equal(rows, rank)).to_pylist()
    if not idx:
        return "no entries in its dump", None
    row = idx[-1]
    e = entry_at(dumps, row)
    group = membership.group_of(rank, e["group_name"]) if e["group_name"] is not None else None
    where = group.label if group else f"pg {e['group_name']}"
    seq = e["collective_seq"] if not e["is_p2p"] else e["p2p_seq"]
    return (
        f"its newest entry is {e['op']} #{seq} of {where} ({e['state'] or 'no state'}"
        f"{', retired' if e['retired'] else ''})",
        row,
    )


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
    op = expected.op
    blocked_total = victims_of(waits, culprits)
    who = f"rank{'s' if len(culprits) > 1 else ''} {format_ranks(culprits)}"
    where = f"{op} #{seq} of {group.label}" if seq is not None else f"{op} in {group.label}"
    them = "them" if len(culprits) > 1 else "it"
    n_blocked = len(blocked_total)
    also = f"; {n_blocked} rank{'s wait' if n_blocked != 1 else ' waits'} on {them}"
    evidence: list[str] = []
    actual = {}
    newest_row: dict[int, int] = {}
    loaded = set(dumps.loaded_ranks)
    for c in culprits:
        if c in loaded:
            seen, row = last_seen(dumps, membership, c)
            evidence.append(f"rank {c}: {seen}")
            if row is not None:
                actual[c] = signature_at(dumps, row)
                newest_row[c] = row
    evidence.append(
        f"rank{'s' if len(waiting) > 1 else ''} {format_ranks(waiting)}: inside {where} "
        f"({expected.state or 'no state'})"
    )
    site = call_site(expected.stack)
    if site:
        evidence.append(f"the waiting ranks called it from {site}")
    evidence.extend(failed_evidence(dumps, matched, gid, seq, where))
    confidence, why = Confidence.HIGH, "every rank involved has a dump that shows it"
    severity = Severity.ERROR
    if kind == FindingKind.NEVER_JOINED:
        summary = f"{who} never joined {where}{also}"
        failure = matched.failed.get((gid, seq)) if seq is not None else None
        if failure is not None and all(e.kind == EdgeKind.JOINED_LATE for e in edges):
            summary = (
                f"{who} joined {where} {_seconds(failure.late_by_s)} after its peers, past "
                f"their {_seconds(failure.timeout_s)} timeout: it was held up before it{also}"
            )
        if group.inferred:
            confidence, why = (
                Confidence.MEDIUM,
                ("group membership was inferred from the entries (pg_config not usable)"),
            )
        elif any(m not in loaded for m in group.members):
            confidence, why = Confidence.MEDIUM, "some members of the group have no dump"
        evidence.extend(_pg_status_evidence(dumps, group.name, culprits[:4], seq))
        done = [c for c in culprits if c in actual and _all_done(matched, c)]
        hidden = [c for c in done if any(r == c for r, _ in unrecorded)]
        stateless = stateless_ranks(dumps)
        unretired = {
            c: newest_row[c] for c in done if c in stateless and _unretired(dumps, newest_row[c])
        }
        host = [c for c in done if c not in hidden and c not in unretired]
        if unretired:
            newest = signature_at(dumps, next(iter(unretired.values())))
            evidence.append(
                f"rank{'s' if len(unretired) > 1 else ''} {format_ranks(sorted(unretired))}: "
                f"newest op {newest.op} not retired, though other members finished it: "
                "stuck in host code after it (if Gloo retired it late), or still inside it "
                "(an op its members disagree on can finish on some of them only, e.g. a "
                "broadcast from another root: the recorder does not record the root)"
            )
            confidence, why = (
                Confidence.MEDIUM,
                "the named ranks' newest op is not retired while other members finished it; "
                "Gloo does not record whether they are still inside it",
            )
        if host:
            evidence.append(
                f"rank{'s' if len(host) > 1 else ''} {format_ranks(host)} finished every op "
                "it recorded: it is stuck in host code (data loading, a Python loop, an "
                "exception handler) before this collective"
            )
            idle = moments.idle_s if moments is not None else {}
            timed = [c for c in host if c in idle]
            for c in timed[:4]:
                evidence.append(
                    f"rank {c} dumped {_seconds(idle[c])} after its newest entry (the "
                    "recorder's dump time): stuck, not between two ops"
                )
            if failure is None and len(timed) < len(host):
                evidence.append(
                    "the dumps do not record when they were written, and nothing shows the op "
                    "timed out: read as taken while the job was stuck. If it was running, "
                    f"rank{'s' if len(host) > 1 else ''} {format_ranks(host)} may just be "
                    "between ops; a second snapshot a few seconds later settles it"
                )
        if hidden:
            evidence.append(
                f"rank{'s' if len(hidden) > 1 else ''} {format_ranks(hidden)} finished every "
                "op it recorded, but also runs send/recv, which Gloo does not record: it is "
                "stuck in host code or blocked in a send/recv; the dumps cannot tell which "
                "(py-spy dump --pid <pid> shows it)"
            )
            confidence, why = (
                Confidence.MEDIUM,
                "some named ranks may be blocked in a send/recv that Gloo does not record, "
                "waiting on another of them",
            )
    elif kind == FindingKind.NOT_STARTED:
        summary = f"{who} enqueued {where} but never started it while its peers did{also}"
        evidence.append("its GPU stream is busy with other work that the recorder does not see")
    elif kind == FindingKind.P2P_UNMATCHED:
        peers = ", ".join(f"{e.waiter}->{e.target}" for e in edges[:8])
        summary = f"{who} never posted the p2p op matching {where} ({peers}){also}"
    else:
        failed: list[int] = []
        if seq is not None:
            failed = sorted(
                r for (r, g, q), op in matched.pending.items() if g == gid and q == seq and op.done
            )
        if failed:
            waiting = tuple(sorted({*waiting, *failed}))
            also += f"; {len(failed)} more failed it (Gloo shows a failed op as finished)"
            evidence.append(
                f"rank{'s' if len(failed) > 1 else ''} {format_ranks(failed)} show {where} "
                "as finished although the op could not complete without "
                f"{format_ranks(culprits)}: Gloo retires an op that failed (a peer crashed, "
                "a connection reset) like one that finished; their logs show the error"
            )
        summary = (
            f"{who} ha{'ve' if len(culprits) > 1 else 's'} no dump, and {where} waits on "
            f"{them}{also}"
        )
        confidence, why = (
            Confidence.LOW,
            (
                "inferred from missing data: every member with a dump is inside the op or "
                "failed it; the rank(s) without a dump are the only ones that may not be"
            ),
        )
        failure = matched.failed.get((gid, seq)) if seq is not None else None
        if failure is not None and failure.reason == "stopped":
            severity = Severity.WARNING
            summary = (
                f"{who} ha{'ve' if len(culprits) > 1 else 's'} no dump, and every other member "
                f"stopped in {where}: if the job hung, look there first "
                "(it may also have finished and lost its dump)"
            )
            why = (
                "Gloo retires a failed op as it does a finished one, so the dumps cannot tell "
                f"a death of {who} in {where} from a job that finished it; {who}'s log or "
                "exit status settles it"
            )
    return Finding(
        kind=kind,
        severity=severity,
        summary=summary,
        culprit_ranks=culprits,
        waiting_ranks=waiting,
        group=group,
        seq=seq,
        op=op,
        expected=expected,
        actual=actual,
        confidence=confidence,
        why=why,
        evidence=tuple(evidence),
    )


def _pg_status_evidence(
    dumps: DumpSet, group_name: str, ranks: tuple[int, ...], seq: int | None
) -> list[str]:
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
                enqueued = row["last_enqueued"]
                agrees = enqueued is not None and enqueued < seq
                out.append(
                    f"rank {rank}'s pg_status for this group: last enqueued #{enqueued}, last "
                    f"completed #{row['last_completed']}"
                    + (f" (it never enqueued #{seq})" if agrees else "")
                )
    return out


def _all_done(matched: MatchResult, rank: int) -> bool:
    return rank not in matched.blocked


def _unretired(dumps: DumpSet, row: int) -> bool:
    """Is the entry at ``row`` a collective not retired? (On a Gloo rank whose ops all count
    as finished, only because other members finished this one.)"""
    entry = entry_at(dumps, row)
    return entry["retired"] is False and not entry["is_p2p"]


def _seconds(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.1f} s" if value < 600 else f"{value / 60:.0f} min"


def failed_evidence(
    dumps: DumpSet, matched: MatchResult, gid: int, seq: int | None, where: str
) -> list[str]:
    """What shows that the op failed, and which ranks dumped after it did."""
    failure = matched.failed.get((gid, seq)) if seq is not None else None
    if failure is None:
        return _timed_out_evidence(dumps, matched, gid, seq, where)
    reason = {
        "absent": f"rank(s) {format_ranks(failure.absent)} never reached it",
        "late": f"rank(s) {format_ranks(failure.late)} entered it after the others' timeout",
        "stopped": (
            f"rank(s) {format_ranks(failure.missing)} left no dump and every other member "
            "stopped in it"
        ),
    }[failure.reason]
    out = [f"{where} cannot have completed: {reason}"]
    if failure.retired_on:
        out.append(
            f"rank{'s' if len(failure.retired_on) > 1 else ''} "
            f"{format_ranks(failure.retired_on)} dumped after {where} failed or timed out "
            "(their entry is retired: Gloo retires a failed op as it does a finished one)"
        )
    return out


def _timed_out_evidence(
    dumps: DumpSet, matched: MatchResult, gid: int, seq: int | None, where: str
) -> list[str]:
    """NCCL: members whose entry is retired without having completed dumped after the
    watchdog gave up on the op (timeout or abort)."""
    if seq is None:
        return []
    retired = dumps.entries.column("retired")
    ranks = sorted(
        r
        for (r, g, q), op in matched.pending.items()
        if g == gid and q == seq and not op.done and op.state_rank < 2 and retired[op.row].as_py()
    )
    if not ranks:
        return []
    return [
        f"rank{'s' if len(ranks) > 1 else ''} {format_ranks(ranks)} dumped after {where} timed "
        "out or was aborted (retired without completing: the watchdog gave up on it)"
    ]
