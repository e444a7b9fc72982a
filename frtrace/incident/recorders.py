"""Several dumps of one rank in one folder that are one process's: its several recorders.

One process can hold several Flight Recorders: torch keeps one buffer per kind of backend
(the NCCL recorder, the generic one Gloo records into, and in torch 2.15+ one per hook-recorded
backend: a ``cpu:gloo,cuda:nccl`` group has two), and each dump holds one of them
(``_dump_fr_trace_json(backend=...)``). The same recorder can also be dumped twice, as pickle
and as JSON (torch 2.13 writes both on request). A folder can then hold two files of one rank
under two name patterns (``comm_lib_trace_rank_3`` and ``gloo_trace_rank_3``, ``rank_3`` and
``rank_3.json``): they are one rank's evidence, not two incidents.

Two files of one rank are taken for one process's only on proof from their content, read here
without unpickling (their bytes are scanned within a dump's budget):

- **the same recorder** (their entries name a backend in common): they share an instant, a
  ``time_*_ns`` value to the nanosecond (the same entry, seen in both);
- **two recorders** (no backend in common): their entries' times overlap, or come within
  ``NEAR_NS`` of each other, on the one clock of the rank's host.

Two jobs' dumps of the same ranks (two prefixes, two torch versions, a pickle of one run
beside the JSON of another) share no instant and name the same backend, so they stay two
sets. Where a file cannot be scanned, nothing is proven. Imports nothing of the load: the
reader proper is stage 1's (``frtrace.load.recorders`` merges the entries).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from frtrace.base.ranges import format_ranks
from frtrace.incident.budget import MAX_DUMP_BYTES, read_listed
from frtrace.incident.listing import Candidate
from frtrace.incident.problems import LoadProblem

__all__ = ["NEAR_NS", "Sniffed", "joined_parts", "one_process", "read_together", "sniff"]

NEAR_NS = 5_000_000_000  # two recorders' entries this close in time are one lifetime's
MAX_INSTANTS = 1 << 20  # instants kept a file (a hostile one could hold 10^8): enough to meet
MAX_BACKENDS = 64  # backends a file may name before more are not looked for
# The op names torch's recorders write after "<backend>:" (FORMAT.md section 5)
_OPS = (
    "_all_gather_base _broadcast_oop _reduce_oop _reduce_scatter_base ALLGATHER_coalesced "
    "REDUCE_SCATTER_coalesced all_gather all_gather_into_tensor_coalesced all_gather_single "
    "all_gather_v all_reduce all_reduce_barrier all_to_all all_to_all_single "
    "all_to_all_v_single allgather_coalesced allreduce_coalesced barrier broadcast coalesced "
    "gather new_window recv reduce reduce_scatter reduce_scatter_single "
    "reduce_scatter_tensor_coalesced reduce_scatter_v scatter send split"
).split()
# "<backend>:<op>" as a pickle string (BINUNICODE, SHORT_BINUNICODE) or a JSON string holds it
_NAME = re.compile(
    rb'(?:X[\x00-\xff]{4}|\x8c[\x00-\xff]|")([a-z][a-z0-9_]{0,15}):(?:'
    + b"|".join(o.encode() for o in sorted(_OPS, key=len, reverse=True))
    + rb")",  # (longest first; a pickle's next opcode may be a letter: no end anchor)
    re.DOTALL,
)
# a wall-clock nanosecond time: an 8-byte LONG1 in a pickle, a number after a *_ns key in JSON
_PICKLED_NS = re.compile(rb"\x8a\x08([\x00-\xff]{8})", re.DOTALL)
_JSON_NS = re.compile(rb'_ns"\s*:\s*(\d{18,19})(?![\d.])')
_EARLIEST_NS, _LATEST_NS = 10**18, 4 * 10**18  # 2001 .. 2096: anything else is no time
_OVERLAP = 64  # bytes a match may straddle between two chunks
_CHUNK = 8 << 20


@dataclass(frozen=True, slots=True)
class Sniffed:
    """What a dump's bytes say of its recorder: the backends its entries name, its instants
    (the first ``MAX_INSTANTS``), the earliest and latest of all."""

    backends: frozenset[str]
    instants: frozenset[int]
    first: int | None = None
    last: int | None = None

    @property
    def span(self) -> tuple[int, int] | None:
        if self.first is not None and self.last is not None:
            return self.first, self.last
        return (min(self.instants), max(self.instants)) if self.instants else None


def sniff(cand: Candidate) -> Sniffed | None:
    """The backends and instants of a dump (None where it is refused or cannot be read)."""
    if cand.refused is not None:
        return None
    backends: set[str] = set()
    instants: set[int] = set()
    first, last = _LATEST_NS, _EARLIEST_NS
    try:
        tail = b""
        for chunk in _chunks(cand):
            data = tail + chunk
            if len(backends) < MAX_BACKENDS:
                backends.update(m[1].decode() for m in _NAME.finditer(data))
            found = [
                int.from_bytes(m[1], "little", signed=True) for m in _PICKLED_NS.finditer(data)
            ]
            found += [int(m[1]) for m in _JSON_NS.finditer(data)]
            found = [v for v in found if _EARLIEST_NS <= v < _LATEST_NS]
            if found:
                first, last = min(first, *found), max(last, *found)
                instants.update(found[: max(0, MAX_INSTANTS - len(instants))])
            tail = data[-_OVERLAP:]
    except OSError:
        return None
    if not instants:
        return Sniffed(frozenset(backends), frozenset())
    return Sniffed(frozenset(backends), frozenset(instants), first, last)


def _chunks(cand: Candidate) -> Iterator[bytes]:
    if cand.data is not None:
        for at in range(0, len(cand.data), _CHUNK):
            yield cand.data[at : at + _CHUNK]
        return
    yield from read_listed(cand.path, cand.size_bytes, MAX_DUMP_BYTES, chunk=_CHUNK)


def one_process(files: Sequence[Sniffed | None]) -> bool:
    """Whether several dumps of one rank are one process's (see the module docstring): every
    two of them proven so, directly or through a third."""
    known = [f for f in files if f is not None and f.backends and f.instants]
    if len(known) != len(files) or len(known) < 2:
        return False
    joined = {0}
    grew = True
    while grew:
        grew = False
        for i in range(len(known)):
            if i not in joined and any(_together(known[i], known[j]) for j in joined):
                joined.add(i)
                grew = True
    return len(joined) == len(known)


def _together(a: Sniffed, b: Sniffed) -> bool:
    if a.backends & b.backends:  # one recorder: the same entry seen in both
        return bool(a.instants & b.instants)
    first, second = a.span, b.span
    assert first is not None and second is not None
    return max(first[0], second[0]) <= min(first[1], second[1]) + NEAR_NS


def joined_parts(parts: Sequence[Sequence[Candidate]]) -> list[list[int]]:
    """Of one folder's parts (its files by name pattern), which to read as one: the indices of
    parts whose files of every rank they share are one process's, each part once. Only the
    files of shared ranks are read."""
    sniffed: dict[int, Sniffed | None] = {}
    ranks = [{c.rank for c in p} for p in parts]

    def proven(rank: int, group: Sequence[int]) -> bool:
        files = [c for i in group for c in parts[i] if c.rank == rank]
        if len(files) != sum(rank in ranks[i] for i in group):
            return False  # (a pattern with the rank twice: the same set twice, an error)
        for c in files:
            if id(c) not in sniffed:
                sniffed[id(c)] = sniff(c)
        return one_process([sniffed[id(c)] for c in files])

    groups: list[list[int]] = []
    for i in range(len(parts)):
        for group in groups:
            shared = [r for r in ranks[i] if any(r in ranks[j] for j in group)]
            if shared and all(proven(r, [*group, i]) for r in shared):
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def read_together(
    kept: Sequence[Candidate], siblings: frozenset[str], pattern: Callable[[str], str]
) -> tuple[LoadProblem, ...]:
    """One line per folder whose ranks' several dumps (``siblings``: relative paths) are read
    together; ``pattern``: a file's name with ``*`` for its rank."""
    files = [c for c in kept if c.relative in siblings]
    by_folder: dict[str, list[Candidate]] = defaultdict(list)
    for cand in files:
        by_folder[cand.relative.rpartition("/")[0]].append(cand)
    lines = []
    for folder, mine in sorted(by_folder.items()):
        ranks = sorted({c.rank for c in mine})
        names = sorted({pattern(c.relative).rpartition("/")[2] for c in mine})
        lines.append(
            LoadProblem(
                rank=ranks[0],
                path=str(mine[0].path),
                message=f"{folder or '.'}/: {' and '.join(names)} are dumps of the same "
                f"processes (ranks {format_ranks(ranks)}: one recorder each, or one recorder "
                "dumped twice, by their backends and times): each rank's read as one rank's "
                "evidence, an entry seen twice counted once",
                fatal=False,
            )
        )
    return tuple(lines)
