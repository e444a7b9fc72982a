"""When each dump was written, against the job's own cadence: a running job or a stall.

A rank that finished op ``k - 1`` and has not entered ``k`` looks the same whether the job is
running (the rank is between ops) or hung (the rank is stuck in host code): the Flight
Recorder does not record when a dump was written. The recorder's stack sidecar does
(``dumped_at_ns``). Where it is known, a rank was *running* when it dumped if its newest entry
was created a moment before: within a few of its own longest gaps between ops (from the
history in its buffer), and never more than a few seconds, far below any collective timeout.
Waits in a snapshot of a running job are ops in flight, not hangs (``waitgraph``).

NCCL dumps carry a dump time of their own: the recorder works out each entry's state when it
dumps, so an entry it found started or completed and that the watchdog has not yet retired
(it retires every ~100 ms) was discovered at most a watchdog tick before the dump
(``dump_times_from_entries``).

Without a dump time nothing is concluded here: the dumps are read as taken while the job was
stuck, and the report says so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from frtrace.analysis.facts.ops import codes, filled, fixed_values
from frtrace.load.dumpset import DumpSet

__all__ = ["DumpMoments", "dump_moments", "dump_times_from_entries"]

# A rank whose newest entry is older than this at its dump is not "between two ops", whatever
# its cadence: real stalls are reported after seconds to minutes.
_MAX_RUNNING_S = 2.0
_MIN_RUNNING_S = 0.25  # ... and one whose newest entry is this recent always is
_GAP_FACTOR = 3.0  # a few of the rank's own longest gaps between ops
# Known dump times this close together were one capture (a signal to every rank at once).
_TOGETHER_NS = 1_000_000_000
# An op entered this long after a rank's dump time is one the dump cannot show: the recorder
# takes the time, then the stacks (a millisecond or two), then the buffer; two hosts' clocks
# put on one (``facts.clocks``, from first arrivals) agree to well under it. (A rank whose
# dump caught it running and that had not joined by then is on its way either way.)
_BEFORE_NS = 20_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class DumpMoments:
    """Per rank: when its dump was written and how long its newest op had been open."""

    dumped_at_ns: Mapping[int, int]  # known, or that of the peers dumped in the same capture
    idle_s: Mapping[int, float]  # dump time minus the newest entry's creation
    limit_s: Mapping[int, float]  # the longest pause that still counts as running
    running: frozenset[int]  # ranks whose dump caught them mid-work (idle <= limit)
    # each rank's clock component (``facts.clocks``): times of two are compared only in one
    component: Mapping[int, int] = field(default_factory=dict)

    def dumped_before(self, rank: int, since_ns: int, peer: int) -> bool:
        """Was ``rank``'s dump written before ``peer`` entered, at ``since_ns``, an op? Its
        dump cannot show that op then: its absence from it says nothing (False where its dump
        time is unknown, or the two ranks' clocks cannot be compared)."""
        at = self.dumped_at_ns.get(rank)
        if at is None or since_ns <= 0:
            return False
        mine, theirs = self.component.get(rank), self.component.get(peer)
        if mine is not None and theirs is not None and mine != theirs:
            return False
        return since_ns - at > _BEFORE_NS

    def kept_waiting(self, rank: int, since_ns: int) -> bool:
        """Had ``rank`` still not joined, at its own dump, an op its peers entered at
        ``since_ns``, for longer than it ever pauses when running? (False where its dump
        time or its cadence is unknown.)"""
        at, limit = self.dumped_at_ns.get(rank), self.limit_s.get(rank)
        if at is None or limit is None or since_ns <= 0:
            return False
        return (at - since_ns) / 1e9 > limit


def dump_moments(
    dumps: DumpSet, dumped_at_ns: Mapping[int, int], failed_ranks: frozenset[int] = frozenset()
) -> DumpMoments:
    """Classify each rank with a known dump time; see the module docstring. ``failed_ranks``
    dumped because something failed (an exception, per the recorder's trigger): never a
    snapshot of a running job, however recent their newest entry."""
    if not dumped_at_ns:
        return DumpMoments(dumped_at_ns={}, idle_s={}, limit_s={}, running=frozenset())
    rank = dumps.entries.column("rank").to_numpy()
    created = filled(dumps.entries.column("time_created_ns"), 0)
    # entries are grouped by rank (file order): one slice per rank, never a mask per rank
    if len(rank):
        starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
        ends = np.r_[starts[1:], len(rank)].astype(np.int64)
    else:  # no rank recorded an op yet (a job hung before its first collective)
        starts = ends = np.zeros(0, dtype=np.int64)
    where = {int(rank[a]): (int(a), int(b)) for a, b in zip(starts, ends, strict=True)}
    idle: dict[int, float] = {}
    limit: dict[int, float] = {}
    times_known = dict(dumped_at_ns)
    known = sorted(times_known.values())
    if known[-1] - known[0] <= _TOGETHER_NS:
        # The ranks whose dump time is known were dumped together (one signal to every rank,
        # one timer): the others, read the same way, were dumped at that instant too. A rank
        # dumped earlier than its peers only looks idler, so this errs towards "stuck".
        common = known[len(known) // 2]
        times_known |= {r: common for r in where if r not in times_known}
    # each rank's gaps between its last 512 ops, sorted; their 95th percentile taken at once
    # for the ranks with as many gaps (most ranks: numpy's quantile along rows computes what it
    # computes for each row alone), not 4,096 calls
    gaps_of = _recent_gaps(created, where, times_known, idle)
    by_count: dict[int, list[int]] = {}
    for r, gaps in gaps_of.items():
        by_count.setdefault(gaps.size, []).append(r)
    longest: dict[int, float] = {}
    for count, ranks in by_count.items():
        if count == 0:
            longest |= dict.fromkeys(ranks, 0.0)
            continue
        rows = np.quantile(np.stack([gaps_of[r] for r in ranks]), 0.95, axis=1)
        longest |= dict(zip(ranks, map(float, rows), strict=True))
    for r in gaps_of:  # (in rank order, as the ranks were taken)
        limit[r] = min(_MAX_RUNNING_S, max(_MIN_RUNNING_S, _GAP_FACTOR * longest[r]))
    running = frozenset(
        r for r, s in idle.items() if -1.0 <= s <= limit[r] and r not in failed_ranks
    )
    return DumpMoments(dumped_at_ns=times_known, idle_s=idle, limit_s=limit, running=running)


# Window rows sorted at a time (a few int64 arrays of 2 MB, whatever the job's size)
_CHUNK_ROWS = 1 << 18


def _recent_gaps(
    created: np.ndarray,
    where: dict[int, tuple[int, int]],
    times_known: dict[int, int],
    idle: dict[int, float],
) -> dict[int, np.ndarray]:
    """Per rank with a known dump time and a recorded creation time among its newest 512
    entries: the gaps (s) between those times, sorted; its idle time (s) since the newest
    put in ``idle``. Many ranks' windows sorted at once (``_CHUNK_ROWS`` rows), not a slice
    and a sort a rank."""
    ranks = [r for r in sorted(times_known) if r in where]
    if not ranks:
        return {}
    bounds = np.array([where[r] for r in ranks], dtype=np.int64).reshape(-1, 2)
    ends = bounds[:, 1]
    begins = np.maximum(bounds[:, 0], ends - 512)
    lengths = ends - begins
    # chunks of whole windows, each of about _CHUNK_ROWS rows (a window is at most 512)
    cuts = np.searchsorted(np.cumsum(lengths), np.arange(_CHUNK_ROWS, lengths.sum(), _CHUNK_ROWS))
    out: dict[int, np.ndarray] = {}
    for part in np.split(np.arange(len(ranks)), np.unique(cuts)):
        if len(part):
            a, b = int(part[0]), int(part[-1]) + 1
            for r, gaps, newest in _windows(created, ranks[a:b], begins[a:b], lengths[a:b]):
                idle[r] = (times_known[r] - newest) / 1e9
                out[r] = gaps
    return out


def _windows(
    created: np.ndarray, ranks: list[int], begins: np.ndarray, lengths: np.ndarray
) -> Iterator[tuple[int, np.ndarray, int]]:
    """Each rank's recorded creation times in its window (rows ``begins`` on, ``lengths``
    of them), sorted: its gaps (s) and its newest; ranks with none are left out."""
    owner = np.repeat(np.arange(len(ranks)), lengths)
    rows = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    times = created[np.repeat(begins, lengths) + rows]
    kept = times > 0
    times, owner = times[kept], owner[kept]
    # (a window is in record order, which is creation order in every dump seen: sorted only
    # where it is not, a check of one pass instead of a sort of 8 million at 4,096 ranks)
    if len(times) > 1 and not ((times[1:] >= times[:-1]) | (owner[1:] != owner[:-1])).all():
        order = np.lexsort((times, owner))
        times, owner = times[order], owner[order]
    counts = np.bincount(owner, minlength=len(ranks))
    stops = np.cumsum(counts)
    gaps = np.diff(times) / 1e9  # (a rank's gaps: its own slice, its last one dropped)
    newest = times[np.maximum(stops - 1, 0)].tolist() if len(times) else []
    for i, (r, count, stop) in enumerate(zip(ranks, counts.tolist(), stops.tolist(), strict=True)):
        if count:
            yield r, gaps[stop - count : stop - 1], int(newest[i])


def dump_times_from_entries(dumps: DumpSet) -> dict[int, int]:
    """Per rank, the latest discovery time of an entry not yet retired whose state says the
    dump discovered it (``started`` with its start time, ``completed`` with its completion
    time; NCCL): the dump was written moments after it. Ranks without one are absent.

    Only the rows that count are gathered (a few a rank where most entries are retired):
    filling each time column's nulls and masking every row were two 64 MB copies a column at
    4,096 ranks, 0.74 s of CPU beside the entry frame."""
    entries = dumps.entries
    retired = entries.column("retired").fill_null(True).to_numpy(zero_copy_only=False)
    open_ = ~retired.astype(bool)
    del retired
    if not open_.any():
        return {}
    state, names = codes(entries.column("state"))
    rank = entries.column("rank").to_numpy()
    out: dict[int, int] = {}
    for column, wanted in (
        ("time_discovered_started_ns", "started"),
        ("time_discovered_completed_ns", "completed"),
    ):
        if wanted not in names:
            continue
        mask = open_ & (state == names.index(wanted))
        times, nulls = fixed_values(entries.column(column))
        if nulls is not None:
            mask &= ~nulls
        rows = np.flatnonzero(mask)
        del mask
        if not len(rows):
            continue
        # per run of one rank's rows, the latest (a rank's rows are one run, or a few if the
        # files came in another order: each run's latest, then the latest of those)
        owner = rank[rows]
        runs = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        latest = np.maximum.reduceat(times[rows], runs)
        for r, t in zip(owner[runs].tolist(), latest.tolist(), strict=True):
            out[r] = max(out.get(r, 0), int(t))
    return out
