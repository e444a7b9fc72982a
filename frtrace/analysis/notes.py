"""What the dumps could not show (missing, unreadable, wrapped, inferred), and what would
settle it: the data notes of a report."""

from __future__ import annotations

from frtrace.analysis.facts import stateless_ranks
from frtrace.analysis.facts.blind import BlindSpots
from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import MatchResult
from frtrace.analysis.facts.waitgraph import EdgeKind, WaitGraph
from frtrace.detail.kinds import RankGroupCount
from frtrace.detail.notes import (
    BuffersWrapped,
    DataNote,
    GraphReplay,
    HistoryCut,
    LoadWarnings,
    NoDumpFor,
    OldDumps,
    SkippedCollectives,
    StatelessDumps,
    UnexplainedBlocked,
    UnreadableDumps,
    WorldSizeGuessed,
)
from frtrace.load.dumpset import DumpSet
from frtrace.model import Verdict

__all__ = ["blind_notes", "data_notes", "unexplained_ranks"]


def data_notes(
    dumps: DumpSet,
    membership: Membership,
    matched: MatchResult,
    waits: WaitGraph,
    verdict: Verdict,
) -> list[DataNote]:
    """What the dumps could not show, in the order a report says it (``report.words_notes``
    makes each sentence)."""
    notes: list[DataNote] = []
    world = dumps.world
    if dumps.missing_ranks:
        notes.append(NoDumpFor(ranks=tuple(dumps.missing_ranks), world_size=world.size))
    if dumps.unreadable_ranks:
        notes.append(UnreadableDumps(ranks=tuple(dumps.unreadable_ranks)))
    if not world.certain:
        notes.append(WorldSizeGuessed(size=world.size, source=world.source))
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
        notes.append(BuffersWrapped(ranks=tuple(wrapped)))
    notes.extend(membership.notes)
    layouts = set(dumps.files.column("layout").to_pylist()) - {None}
    if layouts & {"list", "1.x"}:
        notes.append(OldDumps())
    if stateless_ranks(dumps):
        notes.append(StatelessDumps())
    unexplained = unexplained_ranks(matched, waits)
    if unexplained:
        notes.append(UnexplainedBlocked(ranks=tuple(unexplained)))
    if dumps.window is not None:
        read = sum(c for c in dumps.files.column("entry_count").to_pylist() if c)
        notes.append(HistoryCut(margin=dumps.window.margin, dropped=read - dumps.entries.num_rows))
    warnings = [p for p in dumps.problems if not p.fatal]
    if warnings:
        notes.append(LoadWarnings(count=len(warnings)))
    return notes


def blind_notes(blind: BlindSpots, membership: Membership) -> list[DataNote]:
    """What the recorder cannot see (``facts.blind``): the collectives it counted and never
    wrote, the ranks whose stacks are in a CUDA graph replay."""
    notes: list[DataNote] = []
    if blind.skipped:
        pairs = sorted(blind.skipped.items())
        notes.append(
            SkippedCollectives(
                ranks=tuple(sorted({r for (r, _), _ in pairs})),
                total=sum(blind.skipped.values()),
                counts=tuple(
                    RankGroupCount(rank=r, group=membership.groups[g], ops=n)
                    for (r, g), n in pairs[:4]
                ),
                more=max(0, len(pairs) - 4),
            )
        )
    if blind.replaying:
        notes.append(GraphReplay(ranks=blind.replaying))
    return notes


def unexplained_ranks(matched: MatchResult, waits: WaitGraph) -> list[int]:
    """Blocked ranks that wait on no one and are not all inside one op together. A root
    cause others wait on is explained by why they wait on it (it never joined, never posted,
    ...), not by others being blocked behind it while it is blocked itself, on no one seen."""
    together = {r for ranks in waits.co_waiting.values() for r in ranks}
    together |= {e.waiter for e in waits.in_flight}
    together |= waits.running  # dumped moments after its newest op: it has not waited long
    named = {e.target for e in waits.edges if e.kind != EdgeKind.BLOCKED_ELSEWHERE}
    return [
        r
        for r in matched.blocked
        if r not in together
        and (not waits.graph.has_node(r) or waits.graph.out_degree(r) == 0)
        and not (r in waits.roots and r in named)
    ]
