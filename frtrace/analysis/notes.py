"""What the dumps could not show (missing, unreadable, wrapped, inferred), and what would
settle it: the data notes of a report."""

from __future__ import annotations

from frtrace.analysis.facts import stateless_ranks
from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import MatchResult
from frtrace.analysis.facts.waitgraph import WaitGraph
from frtrace.load.tables import DumpSet
from frtrace.model import (
    Verdict,
)
from frtrace.ranges import format_ranks

__all__ = ["data_notes", "unexplained_ranks"]


def data_notes(
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
    if stateless_ranks(dumps):
        notes.append(
            "Gloo dumps record no start/complete states and no p2p ops: completion is read "
            "from `retired`, and a hang inside send/recv or monitored_barrier cannot be seen "
            "(after the last recorded collective, such a job looks finished); the ranks' "
            "stacks, logs or the recorder's sidecars show it."
        )
    unexplained = unexplained_ranks(matched, waits)
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


def unexplained_ranks(matched: MatchResult, waits: WaitGraph) -> list[int]:
    """Blocked ranks that wait on no one and are not all inside one op together."""
    together = {r for ranks in waits.co_waiting.values() for r in ranks}
    together |= {e.waiter for e in waits.in_flight}
    together |= waits.running  # dumped moments after its newest op: it has not waited long
    return [
        r
        for r in matched.blocked
        if r not in together
        and (not waits.graph.has_node(r) or waits.graph.out_degree(r) == 0)
        and r not in waits.roots
    ]
