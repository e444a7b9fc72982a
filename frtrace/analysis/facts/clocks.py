"""Each rank's clock against the others', from what must have happened together (issue 50).

Every absolute time a dump records (``time_created_ns`` and the discovery times, the
recorder's sidecar's dump time) is its host's wall clock; two hosts without NTP differ by
minutes (FORMAT.md, "Clocks"). No rule may order two hosts' events by their raw clocks, so
before any rule runs the offsets are estimated and taken out:

- The ranks of one collective (a group's op ``#seq``) enqueue it close together: each rank's
  lateness against a reference rank (the lowest loaded rank that recorded the op) over every
  collective both recorded is its **apparent offset**, the median of those.
- It is a **clock offset** only where nothing else can explain it: at least ``MIN_OPS``
  collectives, three in four of them within ``tolerance`` of the median (a constant, as
  a clock's offset is; a rank held up once is late at one op, not at every op), at least
  ``MIN_OFFSET_NS`` (a straggler arrives milliseconds late), and the side that looks early
  never waited that long between two of its collectives by its own clock (a rank truly late by
  minutes at every op keeps its peers waiting minutes at every op: their own gaps would say
  so). Then every time of the rank's is moved by the offset, onto the reference's clock.
- The ranks whose dumps lie in one folder (a host's) share a clock: one that could not be
  estimated on its own (too few collectives in common) takes its folder's, where every rank of
  that folder with one agrees.

Where no offset is proven, nothing moves: the times of a job on one clock are never touched,
and a report says which ranks' times were moved and by how much (``ClockOffsets`` in the
report's notes: ``detail.notes.ClockOffsets``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import PurePath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from frtrace.detail.notes import ClockOffsets
from frtrace.evidence.model import Failure, JobEvidence
from frtrace.load.dumpset import DumpSet

__all__ = [
    "MIN_OFFSET_NS",
    "MIN_OPS",
    "Clocks",
    "aligned",
    "clock_notes",
    "estimate_clocks",
    "evidence_on_one_clock",
]

# An offset smaller than this is left alone: ranks of one collective arrive within
# milliseconds to seconds of each other, and a straggler's lateness is not a clock's.
MIN_OFFSET_NS = 10_000_000_000
# Collectives in common with the reference that an offset is estimated from, at least.
MIN_OPS = 3
# The share of those that must lie within the tolerance of the offset (a clock's is constant).
_AGREEING = 0.75
# Each rank's newest collectives read, at most.
NEWEST = 256
# The times an entry records on its host's clock.
TIME_COLUMNS = ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns")


@dataclass(frozen=True, slots=True)
class Clocks:
    """The clock offsets estimated (ns, a rank's clock minus the reference's), of the ranks
    whose offset was proven; every other rank is on the reference's clock or unknown."""

    reference: int | None = None  # the lowest rank whose clock others are read against
    # a moved rank's offset against its component's reference rank's clock (ns)
    offsets_ns: dict[int, int] = field(default_factory=dict)
    # per rank moved, how many collectives in common its offset rests on (0: its folder's)
    evidence: dict[int, int] = field(default_factory=dict)
    # each rank with collectives -> the reference rank of its component: the ranks whose
    # clocks are known against each other's (collectives in common, directly or in a chain);
    # times of two components are never compared (their clocks' offset is unknown)
    component: dict[int, int] = field(default_factory=dict)

    def of(self, rank: int) -> int:
        return self.offsets_ns.get(rank, 0)

    def comparable(self, a: int, b: int) -> bool:
        """May ``a``'s and ``b``'s times (once aligned) be compared? Yes where both are of one
        component, or where either recorded no collective (no time of its to compare)."""
        ca, cb = self.component.get(a), self.component.get(b)
        return ca is None or cb is None or ca == cb


def _tolerance(offset: float) -> float:
    return max(1e9, abs(offset) / 20)


def _collectives(dumps: DumpSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank, op key and creation time (ns) of each rank's newest ``NEWEST`` collective entries
    with a time, grouped by rank in rank order: the key is the (group, seq) pair, as one integer
    per distinct pair. (A median needs no more: the bound keeps a 4,096-rank set's pass small.)"""
    empty = np.zeros(0, dtype=np.int64)
    entries = dumps.entries
    if entries.num_rows == 0:
        return empty, empty, empty
    p2p = entries.column("is_p2p").fill_null(False)
    seq = entries.column("collective_seq")
    created = entries.column("time_created_ns")
    keep = pc.and_(
        pc.and_(pc.invert(p2p), pc.is_valid(seq)),
        pc.and_(pc.is_valid(created), pc.greater(created.fill_null(0), 0)),
    )
    rows = entries.select(["rank", "group_name", "collective_seq", "time_created_ns"]).filter(keep)
    if rows.num_rows == 0:
        return empty, empty, empty
    rank = rows.column("rank").to_numpy().astype(np.int64)
    order = np.argsort(rank, kind="stable")  # (file order kept within a rank: oldest first)
    rank = rank[order]
    starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
    ends = np.r_[starts[1:], rank.size]
    from_end = np.repeat(ends, ends - starts) - np.arange(rank.size) - 1
    newest = order[from_end < NEWEST]
    rows = rows.take(pa.array(newest))
    group = pc.dictionary_encode(rows.column("group_name").cast(pa.string()).fill_null(""))
    gid = np.asarray(group.combine_chunks().indices.to_numpy(zero_copy_only=False), np.int64)
    seqs = rows.column("collective_seq").to_numpy().astype(np.int64)
    key = gid * (int(seqs.max(initial=0)) + 1) + seqs
    return (
        rows.column("rank").to_numpy().astype(np.int64),
        key,
        rows.column("time_created_ns").to_numpy().astype(np.int64),
    )


def _max_gap(times: np.ndarray) -> float:
    """The longest wait between two consecutive collectives, by one clock."""
    ordered = np.sort(times)
    return float(np.diff(ordered).max()) if ordered.size > 1 else 0.0


def _first_arrivals(
    rank: np.ndarray, key: np.ndarray, created: np.ndarray, placed: dict[int, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Per op key recorded by a placed rank, the first placed rank's arrival on the
    reference's clock (its time less its offset): sorted keys, their times."""
    offset = np.full(int(rank.max(initial=0)) + 1, np.nan)
    for r, o in placed.items():
        offset[r] = o
    on = ~np.isnan(offset[rank])
    keys, inverse = np.unique(key[on], return_inverse=True)
    first = np.full(keys.size, np.inf)
    np.minimum.at(first, inverse, created[on] - offset[rank[on]])
    return keys, first


class _Rows:
    """The collectives of each rank, as slices of the arrays (they are grouped by rank)."""

    def __init__(self, rank: np.ndarray) -> None:
        starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]]) if rank.size else rank
        ends = np.r_[starts[1:], rank.size] if rank.size else rank
        self.of = {int(rank[a]): slice(int(a), int(b)) for a, b in zip(starts, ends, strict=True)}


def _place(
    rows: slice, key: np.ndarray, created: np.ndarray, ref: tuple[np.ndarray, np.ndarray]
) -> tuple[float, int] | None:
    """A rank's offset against the placed ranks' first arrivals: ``(offset, ops)``, 0 where
    none is proven (within ``MIN_OFFSET_NS``, a lateness that is not constant, or one its own
    or their waits explain: its times are taken as they are); None where it shares too few
    collectives with them to tell (another clock component)."""
    ref_keys, ref_times = ref
    mine_keys, mine_times = key[rows], created[rows].astype(np.float64)
    if ref_keys.size == 0:
        return None
    pos = np.minimum(np.searchsorted(ref_keys, mine_keys), ref_keys.size - 1)
    common = ref_keys[pos] == mine_keys
    d = mine_times[common] - ref_times[pos[common]]
    if d.size < MIN_OPS:
        return None
    offset = float(np.median(d))
    constant = np.mean(np.abs(d - offset) <= _tolerance(offset)) >= _AGREEING
    # the side that looks early waited that long between two of its ops by its own clock: a
    # real lateness, not a clock
    early = ref_times[pos[common]] if offset > 0 else mine_times
    if abs(offset) < MIN_OFFSET_NS or not constant or _max_gap(early) >= abs(offset) / 2:
        return 0.0, int(d.size)
    return offset, int(d.size)


def estimate_clocks(dumps: DumpSet) -> Clocks:
    """The proven clock offsets of ``dumps``' ranks (see the module docstring)."""
    rank, key, created = _collectives(dumps)
    if rank.size == 0:
        return Clocks()
    rows = _Rows(rank)
    offsets: dict[int, int] = {}
    evidence: dict[int, int] = {}
    component: dict[int, int] = {}
    pending = sorted(rows.of)
    while pending:  # one component of ranks that recorded collectives together at a time
        reference = pending[0]
        placed: dict[int, float] = {reference: 0.0}
        rest = pending[1:]
        while rest:  # (each round against every rank placed so far: groups that chain)
            ref = _first_arrivals(rank, key, created, placed)
            found = {r: got for r in rest if (got := _place(rows.of[r], key, created, ref))}
            if not found:
                break
            for r, (offset, ops) in found.items():
                placed[r] = offset
                evidence[r] = ops
            rest = [r for r in rest if r not in found]
        component |= dict.fromkeys(placed, reference)
        offsets |= _by_clock(rank, key, created, placed)
        pending = rest
    _folder_mates(dumps, offsets, evidence, component)
    return Clocks(
        reference=min(component),
        offsets_ns=offsets,
        evidence={r: n for r, n in evidence.items() if r in offsets},
        component=component,
    )


def _by_clock(
    rank: np.ndarray, key: np.ndarray, created: np.ndarray, placed: dict[int, float]
) -> dict[int, int]:
    """One offset per clock of a component: the ranks whose offsets agree are one clock (a
    host), and its offset is that of its first arrivals against the reference clock's (a rank
    of either that arrives late, a straggler, moves neither), where they have ``MIN_OPS`` ops
    in common."""
    on_ref = {r: 0.0 for r, o in placed.items() if o == 0.0}
    moved = sorted((o, r) for r, o in placed.items() if o != 0.0)
    clocks: list[list[int]] = []
    for o, r in moved:
        if clocks and abs(o - placed[clocks[-1][0]]) <= _tolerance(o):
            clocks[-1].append(r)
        else:
            clocks.append([r])
    out: dict[int, int] = {}
    ref_keys, ref_times = _first_arrivals(rank, key, created, on_ref)
    for members in clocks:
        mine_keys, mine_times = _first_arrivals(rank, key, created, dict.fromkeys(members, 0.0))
        both, i, j = np.intersect1d(ref_keys, mine_keys, return_indices=True)
        if both.size >= MIN_OPS:
            offset = float(np.median(mine_times[j] - ref_times[i]))
        else:
            offset = float(np.median([placed[r] for r in members]))
        out |= dict.fromkeys(members, round(offset))
    return out


def _folder_mates(
    dumps: DumpSet, offsets: dict[int, int], evidence: dict[int, int], component: dict[int, int]
) -> None:
    """A rank without an offset of its own, alone in its component (too few collectives in
    common), takes its folder's (a host's ranks share a clock) where every moved rank of that
    folder agrees and no rank of the folder is on its component's reference clock: it joins
    their component."""
    files = dumps.files
    folder_of = {
        int(r): str(PurePath(p).parent)
        for r, p in zip(
            files.column("rank").to_pylist(), files.column("path").to_pylist(), strict=True
        )
    }
    by_folder: dict[str, list[int]] = defaultdict(list)
    for r, folder in folder_of.items():
        by_folder[folder].append(r)
    sizes = Counter(component.values())  # (one count, not one list a rank: 4,096 ranks)
    alone = {r for r, c in component.items() if c == r and sizes[r] == 1}
    for members in by_folder.values():
        moved = [r for r in members if r in offsets]
        if not moved or any(r not in offsets and r not in alone for r in members):
            continue
        mid = float(np.median([offsets[r] for r in moved]))
        if any(abs(offsets[r] - mid) > _tolerance(mid) for r in moved):
            continue
        home = component[moved[0]]
        for r in members:
            if r not in offsets and r in alone:
                offsets[r] = round(mid)
                evidence[r] = 0
                component[r] = home


def aligned(dumps: DumpSet, clocks: Clocks) -> DumpSet:
    """``dumps`` with every time of a rank whose offset was proven moved onto the reference's
    clock (the same set where none was)."""
    if not clocks.offsets_ns:
        return dumps
    entries = dumps.entries
    rank = entries.column("rank").to_numpy()
    # one lookup per row through a table by rank, not one mask per moved rank
    table = np.zeros(max(int(rank.max(initial=0)), *clocks.offsets_ns) + 1, dtype=np.int64)
    table[list(clocks.offsets_ns)] = list(clocks.offsets_ns.values())
    shift = table[rank]
    by = pa.array(shift)
    for name in TIME_COLUMNS:
        i = entries.schema.get_field_index(name)
        if i < 0:
            continue
        column = entries.column(name)
        moved = pc.if_else(
            pc.and_(pc.is_valid(column), pc.greater(column.fill_null(0), 0)),
            pc.subtract(column, by),
            column,
        )
        entries = entries.set_column(i, entries.schema.field(i), moved)
    return replace(dumps, entries=entries)


def clock_notes(clocks: Clocks) -> list[ClockOffsets]:
    """The report's notes of the offsets taken out: one per clock (ranks whose offsets agree
    within a second), largest first."""
    if clocks.reference is None:
        return []
    by_clock: dict[tuple[int, int], list[int]] = defaultdict(list)
    for r, off in sorted(clocks.offsets_ns.items()):
        by_clock[clocks.component.get(r, clocks.reference), round(off / 1e9)].append(r)
    notes = [
        ClockOffsets(
            ranks=tuple(ranks),
            offset_s=round(float(np.median([clocks.offsets_ns[r] for r in ranks])) / 1e9, 1),
            reference=home,
            collectives=min(clocks.evidence.get(r, 0) for r in ranks),
        )
        for (home, _), ranks in by_clock.items()
    ]
    return sorted(notes, key=lambda n: (-abs(n.offset_s), n.ranks))


def _folder_offsets(dumps: DumpSet, clocks: Clocks) -> list[tuple[PurePath, int]]:
    """The dump folders (relative to the set's) whose ranks share one moved clock, deepest
    first; never the reference's folder."""
    by_folder: dict[PurePath, set[int]] = defaultdict(set)
    base = PurePath(dumps.directory)
    for r, p in zip(
        dumps.files.column("rank").to_pylist(),
        dumps.files.column("path").to_pylist(),
        strict=True,
    ):
        path = PurePath(p)
        rel = path.relative_to(base) if path.is_relative_to(base) else path
        by_folder[rel.parent].add(clocks.of(int(r)))
    ref_folder = next(
        (f for f, offs in by_folder.items() if clocks.reference is not None and 0 in offs), None
    )
    return sorted(
        (
            (folder, next(iter(offs)))
            for folder, offs in by_folder.items()
            if len(offs) == 1 and 0 not in offs and folder != ref_folder and folder.parts
        ),
        key=lambda fo: -len(fo[0].parts),
    )


def evidence_on_one_clock(evidence: JobEvidence, dumps: DumpSet, clocks: Clocks) -> JobEvidence:
    """The job's failures with each time written on a moved clock moved onto the reference's:
    a failure of a rank whose offset is known, or read from a file under a folder whose dumps
    all share one moved clock (a host's folder: its logs are that host's); in time order."""
    if not clocks.offsets_ns or not evidence.failures:
        return evidence
    folders = _folder_offsets(dumps, clocks)

    def offset(f: Failure) -> int:
        if f.rank is not None and f.rank in clocks.offsets_ns:
            return clocks.offsets_ns[f.rank]
        source = PurePath(f.source.rsplit(":", 1)[0])
        return next((o for folder, o in folders if source.is_relative_to(folder)), 0)

    moved = [
        replace(f, at_ns=f.at_ns - off) if f.at_ns is not None and (off := offset(f)) else f
        for f in evidence.failures
    ]
    moved.sort(key=lambda f: (f.at_ns is None, f.at_ns or 0))
    return replace(evidence, failures=tuple(moved))
