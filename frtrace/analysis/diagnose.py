"""From matched entries and the wait graph to findings, culprits and a verdict.

Order of reasoning:

1. mismatches (``mismatch``): the majority of a (group, seq) against the odd ones out;
2. the wait graph (``waitgraph``): each root cause gets one finding per op it holds up —
   never joined, p2p peer never posted, GPU never started it, no dump (inferred), or a
   cross-group deadlock when the roots wait on each other in a cycle;
3. ops every member entered that did not finish: the cause is below the Flight Recorder;
4. stragglers (``stragglers``);
5. what the dumps could not show (missing, unreadable, wrapped, inferred), with what would
   settle it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from frtrace.analysis.deadlock import find_deadlocks
from frtrace.analysis.findings import (
    Confidence,
    Finding,
    FindingKind,
    GroupProgress,
    Report,
    Severity,
    Verdict,
)
from frtrace.analysis.groups import Membership, resolve_groups
from frtrace.analysis.match import match
from frtrace.analysis.mismatch import find_mismatches
from frtrace.analysis.ops import MatchResult
from frtrace.analysis.signatures import call_site, entry_at, signature_at
from frtrace.analysis.stragglers import find_stragglers
from frtrace.analysis.unrecorded import unrecorded_finding, unrecorded_ops
from frtrace.analysis.waitgraph import Edge, EdgeKind, WaitGraph, build_wait_graph, victims_of
from frtrace.load.tables import DumpSet
from frtrace.ranges import format_ranks

__all__ = ["diagnose"]

_HANG_KINDS = {
    EdgeKind.NEVER_JOINED: FindingKind.NEVER_JOINED,
    EdgeKind.NOT_STARTED: FindingKind.NOT_STARTED,
    EdgeKind.P2P_UNMATCHED: FindingKind.P2P_UNMATCHED,
    EdgeKind.NO_DUMP: FindingKind.MISSING_DUMP,
}


def diagnose(dumps: DumpSet) -> Report:
    """Analyse a loaded dump set."""
    membership = resolve_groups(dumps)
    matched = match(dumps, membership)
    waits = build_wait_graph(dumps, membership, matched)
    unrecorded = unrecorded_ops(dumps, membership)
    findings = find_mismatches(dumps, membership, matched)
    findings += _hang_findings(dumps, membership, matched, waits, unrecorded)
    findings += find_deadlocks(dumps, membership, matched, waits)
    findings += _stuck_findings(dumps, membership, matched, waits)
    findings, presumed = _explain_missing(findings, membership, waits, set(dumps.loaded_ranks))
    hidden = unrecorded_finding(membership, unrecorded)
    if hidden is not None:
        findings.append(hidden)
    stragglers = find_stragglers(dumps, membership, matched)
    findings.sort(key=Finding.sort_key)

    errors = [f for f in findings if f.severity == Severity.ERROR]
    culprits = sorted({r for f in errors for r in f.culprit_ranks})
    suspected = sorted(
        {r for f in errors if f.kind == FindingKind.MISSING_DUMP for r in f.culprit_ranks}
        - {r for f in errors if f.kind != FindingKind.MISSING_DUMP for r in f.culprit_ranks}
    )
    kinds = {f.kind for f in errors}
    desync = {
        FindingKind.OP_MISMATCH,
        FindingKind.SIZE_MISMATCH,
        FindingKind.DTYPE_MISMATCH,
        FindingKind.SEQUENCE_SHIFT,
    }
    if kinds & desync:
        verdict = Verdict.DESYNC
    elif errors:
        verdict = Verdict.HANG
    elif (
        any(f.kind == FindingKind.STUCK_IN_COLLECTIVE for f in findings)
        or _unexplained(matched, waits)
        or hidden is not None  # every recorded op finished, but a send/recv may not have
    ):
        verdict = Verdict.CANNOT_TELL
    elif stragglers:
        verdict = Verdict.STRAGGLERS
    else:
        verdict = Verdict.HEALTHY
    notes = _data_notes(dumps, membership, matched, waits, verdict)
    notes += [
        f"rank {r} has no dump, but its peers in {label} wait on {format_ranks(by)}: it is "
        "presumably held up there too, not a cause"
        for r, (label, by) in sorted(presumed.items())
    ]
    victims = victims_of(waits, tuple(culprits)) | {r for f in errors for r in f.waiting_ranks}
    victims |= set(presumed) | victims_of(waits, tuple(presumed))
    return Report(
        verdict=verdict,
        culprit_ranks=tuple(culprits),
        findings=tuple(findings),
        stragglers=stragglers,
        world_size=dumps.world.size,
        ranks_loaded=dumps.loaded_ranks,
        ranks_missing=dumps.missing_ranks,
        ranks_unreadable=dumps.unreadable_ranks,
        data_notes=tuple(notes),
        groups=membership.groups,
        wait_edges=tuple(sorted({(e.waiter, e.target, str(e.kind)) for e in waits.edges})),
        suspected_ranks=tuple(suspected),
        victim_ranks=tuple(sorted(victims - set(culprits))),
        progress=_progress(membership, matched),
    )


def _explain_missing(
    findings: list[Finding], membership: Membership, waits: WaitGraph, loaded: set[int]
) -> tuple[list[Finding], dict[int, tuple[str, tuple[int, ...]]]]:
    """Drop a no-dump suspect that a confirmed culprit already explains.

    A rank without a dump is only suspected when nothing else explains its peers' wait. It is
    presumed a victim when it is a member of a group whose other members wait on a confirmed
    culprit (it is presumably stuck in that same collective), or when every peer it has with
    a dump is itself held up by a confirmed culprit (it cannot have got further than them).
    """
    confirmed = [
        f for f in findings if f.severity == Severity.ERROR and f.kind != FindingKind.MISSING_DUMP
    ]
    culprits = tuple(sorted({r for f in confirmed for r in f.culprit_ranks}))
    held = victims_of(waits, culprits) if culprits else set()
    presumed: dict[int, tuple[str, tuple[int, ...]]] = {}
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
                presumed[r] = (why.group.label, why.culprit_ranks)
            elif culprits and peers and peers <= held:
                presumed[r] = (f"groups with ranks {format_ranks(peers)}", culprits)
            else:
                keep.append(r)
        if keep:
            out.append(replace(f, culprit_ranks=tuple(keep)))
    return out, presumed


def _progress(membership: Membership, matched: MatchResult) -> tuple[GroupProgress, ...]:
    """Per group and member: highest seq entered and highest seq finished (by anyone)."""
    coll = matched.collectives
    done = coll["done"].to_numpy(dtype=bool)  # (three columns, not a copy of the frame)
    rank = coll["rank"].to_numpy()[done]
    gid = coll["gid"].to_numpy()[done]
    top = pd.Series(coll["seq"].to_numpy(dtype=np.int64)[done]).groupby([rank, gid]).max()
    finished = {
        (int(key[0]), int(key[1])): int(seq)
        for key, seq in zip(top.index.tolist(), top.tolist(), strict=True)
    }
    out = []
    for gid, group in enumerate(membership.groups):
        out.append(
            GroupProgress(
                group=group,
                entered=tuple(
                    (matched.extent.get((m, gid)) or (None, None))[1] for m in group.members
                ),
                finished=tuple(finished.get((m, gid)) for m in group.members),
            )
        )
    return tuple(out)


def _unexplained(matched: MatchResult, waits: WaitGraph) -> list[int]:
    """Blocked ranks that wait on no one and are not all inside one op together."""
    together = {r for ranks in waits.co_waiting.values() for r in ranks}
    return [
        r
        for r in matched.blocked
        if r not in together
        and (not waits.graph.has_node(r) or waits.graph.out_degree(r) == 0)
        and r not in waits.roots
    ]


def _in_sink_cycle(waits: WaitGraph) -> set[int]:
    return {r for component in waits.sink_components for r in component}


def _hang_findings(
    dumps: DumpSet,
    membership: Membership,
    matched: MatchResult,
    waits: WaitGraph,
    unrecorded: dict[tuple[int, int], int],
) -> list[Finding]:
    """One finding per (kind, op waited in) over the edges that end at a root cause."""
    roots = set(waits.roots)
    cyclic = _in_sink_cycle(waits)
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
            _hang_finding(dumps, membership, matched, waits, kind, gid, seq, edges, unrecorded)
        )
    return findings


def _last_seen(dumps: DumpSet, membership: Membership, rank: int) -> tuple[str, int | None]:
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
            seen, row = _last_seen(dumps, membership, c)
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
    confidence, why = Confidence.HIGH, "every rank involved has a dump that shows it"
    if kind == FindingKind.NEVER_JOINED:
        summary = f"{who} never joined {where}{also}"
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
        stateless = _stateless_ranks(dumps)
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
    return Finding(
        kind=kind,
        severity=Severity.ERROR,
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


def _stuck_findings(
    dumps: DumpSet, membership: Membership, matched: MatchResult, waits: WaitGraph
) -> list[Finding]:
    """Ops that every member entered and none finished."""
    findings = []
    stateless = _stateless_ranks(dumps)
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


def _stateless_ranks(dumps: DumpSet) -> set[int]:
    files = dumps.files
    return {
        int(r)
        for r, b in zip(
            files.column("rank").to_pylist(), files.column("backend").to_pylist(), strict=True
        )
        if b == "gloo"
    }


def _data_notes(
    dumps: DumpSet,
    membership: Membership,
    matched: MatchResult,
    waits: WaitGraph,
    verdict: Verdict,
) -> list[str]:
    notes: list[str] = []
    world = dumps.world
    if dumps.missing_ranks:
        notes.append(
            f"no dump for rank(s) {format_ranks(dumps.missing_ranks)} of {world.size}: a rank "
            "that crashed or hung hard often writes none. Their state is unknown; their "
            "dumps (TORCH_FR_DUMP_TEMP_FILE on their hosts) or logs would settle it."
        )
    if dumps.unreadable_ranks:
        notes.append(
            f"unreadable dump for rank(s) {format_ranks(dumps.unreadable_ranks)}; see the "
            "errors above. Those ranks are analysed as if they had no dump."
        )
    if not world.certain:
        notes.append(
            f"world size {world.size} taken from the {world.source}; if the job had more "
            "ranks, the highest ones have no dump and are not seen."
        )
    wrapped = [
        r
        for r, w in zip(
            dumps.files.column("rank").to_pylist(),
            dumps.files.column("wrapped").to_pylist(),
            strict=True,
        )
        if w
    ]
    if wrapped:
        notes.append(
            f"ring buffers of rank(s) {format_ranks(wrapped)} wrapped (older entries "
            "dropped); only ops every member still holds are compared. A larger "
            "TORCH_FR_BUFFER_SIZE keeps more history."
        )
    notes.extend(membership.notes)
    layouts = set(dumps.files.column("layout").to_pylist()) - {None}
    if layouts & {"list", "1.x"}:
        notes.append(
            "dumps from torch 2.3 or older record no dtypes (a dtype mismatch is invisible) and "
            "name groups only by a per-process id; torch 2.2 also records batched send/recv as "
            "a bare 'coalesced' entry without peers, so findings on those are uncertain. "
            "Dumps from torch 2.4+ settle such cases."
        )
    if _stateless_ranks(dumps):
        notes.append(
            "Gloo dumps record no start/complete states and no p2p ops: completion is read "
            "from `retired`, and a hang inside send/recv cannot be seen."
        )
    unexplained = _unexplained(matched, waits)
    if unexplained:
        notes.append(
            f"rank(s) {format_ranks(unexplained)} are blocked in ops whose missing members "
            "cannot be determined from the buffers (gaps, or wrapped buffers); "
            "larger buffers or pg_status from every rank would settle it."
        )
    warnings = [p for p in dumps.problems if not p.fatal]
    if warnings:
        notes.append(f"{len(warnings)} warning(s) while loading; see the file problems.")
    return notes


def analyze_frame(dumps: DumpSet) -> pd.DataFrame:
    """Debug view: the matched logical collectives with group labels."""
    membership = resolve_groups(dumps)
    matched = match(dumps, membership)
    out = matched.collectives.copy()
    out["group"] = [membership.groups[g].label for g in out["gid"]]
    return out
