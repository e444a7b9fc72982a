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

from collections.abc import Mapping
from dataclasses import replace

from frtrace.analysis.alltoall import split_mismatches
from frtrace.analysis.capture import dump_moments
from frtrace.analysis.deadlock import find_deadlocks
from frtrace.analysis.groups import Membership, resolve_groups
from frtrace.analysis.hang import hang_findings
from frtrace.analysis.match import match
from frtrace.analysis.mismatch import find_mismatches
from frtrace.analysis.notes import data_notes, unexplained_ranks
from frtrace.analysis.ops import MatchResult
from frtrace.analysis.segments import rank_group_spans
from frtrace.analysis.stragglers import find_stragglers
from frtrace.analysis.stuck import in_flight_findings, stuck_findings
from frtrace.analysis.unrecorded import unrecorded_finding, unrecorded_ops
from frtrace.analysis.waitgraph import WaitGraph, build_wait_graph, victims_of
from frtrace.load.tables import DumpSet, give_back_memory
from frtrace.model import (
    Finding,
    FindingKind,
    GroupProgress,
    Report,
    Severity,
    Verdict,
)
from frtrace.ranges import format_ranks

__all__ = ["diagnose"]


def diagnose(
    dumps: DumpSet,
    dumped_at_ns: Mapping[int, int] | None = None,
    failed_ranks: frozenset[int] = frozenset(),
) -> Report:
    """Analyse a loaded dump set; ``dumped_at_ns``: when each rank's dump was written, where
    known (the recorder's stack sidecar), to tell a running job from a stall; ``failed_ranks``:
    ranks whose dump was written because something failed there (an exception)."""
    membership = resolve_groups(dumps)
    matched = match(dumps, membership)
    give_back_memory()  # (matching's per-entry temporaries: before the next steps allocate)
    moments = dump_moments(dumps, dumped_at_ns or {}, failed_ranks)
    waits = build_wait_graph(dumps, membership, matched, running=moments.running)
    unrecorded = unrecorded_ops(dumps, membership)
    findings = find_mismatches(dumps, membership, matched)
    findings += split_mismatches(dumps, membership, matched)  # FR 2.11 all_to_all splits
    findings += hang_findings(dumps, membership, matched, waits, unrecorded, moments)
    findings += find_deadlocks(dumps, membership, matched, waits)
    explained = {(f.group, f.seq) for f in findings if f.group is not None}  # e.g. FR003 splits
    findings += [
        f
        for f in stuck_findings(dumps, membership, matched, waits, moments.running)
        if (f.group, f.seq) not in explained  # not "with matching arguments" after a mismatch
    ]
    findings += in_flight_findings(membership, matched, waits, moments)
    findings, presumed = _explain_missing(findings, membership, waits, set(dumps.loaded_ranks))
    hidden = unrecorded_finding(membership, unrecorded)
    if hidden is not None:
        findings.append(hidden)
    give_back_memory()  # (the pages of mapped columns the findings read, and their garbage)
    stragglers = find_stragglers(dumps, membership, matched)
    give_back_memory()
    findings.sort(key=Finding.sort_key)

    errors = [f for f in findings if f.severity == Severity.ERROR]
    culprits = sorted({r for f in errors for r in f.culprit_ranks})
    suspected = sorted(
        {r for f in findings if f.kind == FindingKind.MISSING_DUMP for r in f.culprit_ranks}
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
        or any(f.kind == FindingKind.MISSING_DUMP for f in findings)
        or unexplained_ranks(matched, waits)
        or hidden is not None  # every recorded op finished, but a send/recv may not have
    ):
        verdict = Verdict.CANNOT_TELL
    elif stragglers:
        verdict = Verdict.STRAGGLERS
    else:
        verdict = Verdict.HEALTHY
    notes = data_notes(dumps, membership, matched, waits, verdict)
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
    done = rank_group_spans(
        coll, matched.consensus["start"].to_numpy(), where=coll["done"].to_numpy(dtype=bool)
    )
    finished = {
        (r, g): top
        for r, g, top in zip(
            done["rank"].tolist(), done["gid"].tolist(), done["max"].tolist(), strict=True
        )
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
