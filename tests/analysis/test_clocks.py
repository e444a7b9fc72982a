"""Time is per host (issue 50, item 2): ``frtrace.analysis.facts.clocks`` finds a clock offset
only where nothing else explains a constant lateness, and moves no time of a job on one clock."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from frtrace.analysis.facts.clocks import (
    MIN_OFFSET_NS,
    aligned,
    clock_notes,
    estimate_clocks,
)
from frtrace.detail.notes import ClockOffsets
from frtrace.load.dumpset import DumpSet
from frtrace.load.tables import load_dumps
from frtrace.pipeline import analyze
from frtrace.report.words_notes import note
from tests.conftest import FIXTURES, GLOO, fixture_sets
from tests.transforms import two_hosts_skewed

SETS = {str(d.relative_to(FIXTURES)): d for d in fixture_sets()}


@pytest.mark.parametrize("name", sorted(SETS))
def test_a_job_on_one_clock_has_no_offset(name: str) -> None:
    """Every committed set was written on one clock: no rank's time is moved (a straggler, a
    rank held up once, a rank that joined after its peers' timeout are not clocks)."""
    dumps = load_dumps(SETS[name])
    clocks = estimate_clocks(dumps)
    assert clocks.offsets_ns == {}, name
    assert aligned(dumps, clocks) is dumps


@pytest.mark.parametrize("offset_s", [420, -420, 60, -1500])
def test_a_host_ahead_or_behind_is_found_and_taken_out(tmp_path: Path, offset_s: int) -> None:
    """Ranks 2-3 on a host whose clock is off by minutes, either way: their offset is found
    (within a second), the times moved back onto rank 0's clock, and the report says so."""
    two_hosts_skewed(GLOO / "healthy", tmp_path / "set", offset_s)
    dumps = load_dumps(tmp_path / "set", cache=False)
    clocks = estimate_clocks(dumps)
    assert sorted(clocks.offsets_ns) == [2, 3]
    assert all(abs(o - offset_s * 1e9) < 1e9 for o in clocks.offsets_ns.values())
    original = load_dumps(GLOO / "healthy", cache=False).entries.column("time_created_ns")
    moved = aligned(dumps, clocks).entries.column("time_created_ns")
    assert np.abs(np.asarray(moved) - np.asarray(original)).max() < 1e9
    (n,) = clock_notes(clocks)
    assert (n.ranks, n.reference, round(n.offset_s)) == ((2, 3), 0, offset_s)
    report = analyze(tmp_path / "set", jobs=1)
    assert report.verdict.value == "healthy"
    said = [note(x) for x in report.data_notes if isinstance(x, ClockOffsets)]
    assert len(said) == 1 and "ranks 2-3" in said[0]
    assert ("ahead of" if offset_s > 0 else "behind") in said[0]


def _shifted(dumps: DumpSet, shift_of: dict[int, np.ndarray]) -> DumpSet:
    """``dumps`` with each listed rank's entries' creation times moved by its own array."""
    entries = dumps.entries
    rank = entries.column("rank").to_numpy()
    created = np.asarray(entries.column("time_created_ns").to_numpy(zero_copy_only=False))
    created = created.astype(np.int64).copy()
    for r, by in shift_of.items():
        rows = np.flatnonzero(rank == r)
        created[rows] += by[: rows.size]
    i = entries.schema.get_field_index("time_created_ns")
    column = pa.array(created, pa.int64())
    return replace(dumps, entries=entries.set_column(i, entries.schema.field(i), column))


def test_a_rank_truly_late_at_every_op_is_not_a_clock() -> None:
    """Rank 3 arrives 30 s late at every collective and the others wait for it each time
    (their own clocks show 30 s between their ops): a straggler, not an offset."""
    dumps = load_dumps(GLOO / "healthy", cache=False)
    n = int(np.sum(dumps.entries.column("rank").to_numpy() == 0))
    step = 30 * 10**9
    waited = np.arange(n, dtype=np.int64) * step  # everyone's op k moves by k waits
    late = waited + step  # rank 3: one wait later still
    shifts = {0: waited, 1: waited, 2: waited, 3: late}
    assert estimate_clocks(_shifted(dumps, shifts)).offsets_ns == {}


def test_a_rank_late_once_is_not_a_clock() -> None:
    """Rank 2 held up once, 50 s before its last ops: late at a few collectives, on time at
    the rest: no offset."""
    dumps = load_dumps(GLOO / "healthy", cache=False)
    n = int(np.sum(dumps.entries.column("rank").to_numpy() == 2))
    by = np.zeros(n, dtype=np.int64)
    by[-2:] = 50 * 10**9
    assert estimate_clocks(_shifted(dumps, {2: by})).offsets_ns == {}


def test_an_offset_under_the_floor_is_left_alone() -> None:
    dumps = load_dumps(GLOO / "healthy", cache=False)
    n = int(np.sum(dumps.entries.column("rank").to_numpy() == 1))
    by = np.full(n, MIN_OFFSET_NS // 2, dtype=np.int64)
    assert estimate_clocks(_shifted(dumps, {1: by})).offsets_ns == {}


def test_a_constant_offset_on_one_rank_is_found_without_a_folder() -> None:
    """All dumps in one folder (no host known), rank 1's clock 95 s ahead: found for it
    alone."""
    dumps = load_dumps(GLOO / "healthy", cache=False)
    n = int(np.sum(dumps.entries.column("rank").to_numpy() == 1))
    clocks = estimate_clocks(_shifted(dumps, {1: np.full(n, 95 * 10**9, dtype=np.int64)}))
    assert list(clocks.offsets_ns) == [1]
    assert abs(clocks.offsets_ns[1] - 95e9) < 1e9
