"""Which process each rank ran in: its host and pid, from every place that saw it.

Each source says what it saw as ``ProcessSeen`` records (a rank, a host and a pid where known,
and when): the Python stack samples (the recorder's sidecar has both and the dump time,
py-spy text the pid), and any other source that knows (``frtrace collect``'s manifest) only
appends its own. ``rank_processes`` makes one ``RankProcess`` per rank of them all: the latest
record wins where two disagree (a rank restarted), and a record that does not contradict it
fills in what it lacks (the pid from one sample, the host from another).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from frtrace.evidence.collected import MANIFEST_NAME, Collected
from frtrace.model import RankProcess
from frtrace.pystack.discover import StackSet

__all__ = [
    "ProcessSeen",
    "rank_processes",
    "seen_in_collected",
    "seen_in_stacks",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessSeen:
    """One source's word on a rank's process (None: it does not say)."""

    rank: int
    host: str | None
    pid: int | None
    at_ns: int | None  # when it was seen (a sample's time); None: unknown, taken as oldest
    source: str  # where it was read ("stacks_rank_5.json", "frtrace-collect.json")


def seen_in_stacks(stacks: StackSet | None) -> list[ProcessSeen]:
    """What every stack sample says of its rank's process (each file, not only the one the
    analysis reads)."""
    if stacks is None:
        return []
    return [
        ProcessSeen(rank=s.rank, host=s.host, pid=s.pid, at_ns=s.taken_at_ns, source=s.path)
        for s in stacks.samples
        if s.rank is not None and (s.host or s.pid is not None)
    ]


def seen_in_collected(collected: Collected | None) -> list[ProcessSeen]:
    """What ``frtrace collect``'s manifests say of each rank's process: its host (the host
    it ran on, or the one its worker server registered) and its pid, at its dump's time."""
    if collected is None:
        return []
    return [
        ProcessSeen(rank=r.rank, host=r.host, pid=r.pid, at_ns=r.dumped_at_ns, source=MANIFEST_NAME)
        for r in collected.ranks
        if r.host or r.pid is not None
    ]


def _agrees(a: RankProcess, b: ProcessSeen) -> bool:
    return (a.host is None or b.host is None or a.host == b.host) and (
        a.pid is None or b.pid is None or a.pid == b.pid
    )


def rank_processes(
    seen: Iterable[ProcessSeen], world_size: int | None = None
) -> dict[int, RankProcess]:
    """One ``RankProcess`` per rank seen (below ``world_size`` when given), sorted by rank:
    the latest record's host and pid (records of unknown time are older than any known, and
    among themselves in the order given), with what it lacks filled from older records that
    do not contradict it."""
    by_rank: dict[int, list[tuple[int, ProcessSeen]]] = {}
    for i, s in enumerate(seen):
        if s.rank < 0 or (world_size is not None and s.rank >= world_size):
            continue
        by_rank.setdefault(s.rank, []).append((i, s))
    out: dict[int, RankProcess] = {}
    for rank in sorted(by_rank):
        newest_first = sorted(
            by_rank[rank],
            key=lambda item: (item[1].at_ns is not None, item[1].at_ns or 0, item[0]),
            reverse=True,
        )
        known = RankProcess()
        for _, s in newest_first:
            if not _agrees(known, s):
                continue  # another process of the rank (an older one): not this one
            known = RankProcess(
                host=known.host or s.host, pid=s.pid if known.pid is None else known.pid
            )
        if known.host is not None or known.pid is not None:
            out[rank] = known
    return out
