"""Per-op arithmetic on the members' rows side by side (analysis/facts/segments.py): the helpers
against plain references, and the steps that work block by block against one block."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from frsim import Fault, FaultKind, JobSpec, simulate, write_dumps
from frtrace.analysis.facts import segments
from frtrace.analysis.facts.groups import resolve_groups
from frtrace.analysis.facts.match import match
from frtrace.analysis.stragglers import find_stragglers
from frtrace.load.tables import load_dumps


def _ops(rng: np.random.Generator, n: int, spread: int) -> tuple[np.ndarray, np.ndarray]:
    keys = sorted({(int(g), int(s)) for g, s in rng.integers(0, spread, size=(n, 2))})
    gid = np.array([g for g, _ in keys], dtype=np.int32)
    seq = np.array([s for _, s in keys], dtype=np.int64)
    return gid, seq


@pytest.mark.parametrize("huge", [False, True])
def test_locate_ops_finds_exactly_the_keys_present(huge: bool) -> None:
    """Both ways (one int64 key per op; two binary searches where sequence numbers are too
    far apart for one key) give the positions of the keys that are there, in order."""
    rng = np.random.default_rng(1)
    gid, seq = _ops(rng, 300, 40)
    if huge:
        seq = seq * (1 << 55)  # (gid x seq range no longer fits an int64 key)
    keys = [(int(g), int(s)) for g, s in zip(gid[::3], seq[::3], strict=True)]
    keys += [(int(gid[0]), int(seq[0]) + 1), (99, 5), (-1, 0)]  # absent (one may be present)
    got = segments.locate_ops(gid, seq, keys)
    position = {(int(g), int(s)): i for i, (g, s) in enumerate(zip(gid, seq, strict=True))}
    expected = sorted({position[k] for k in keys if k in position})
    assert got.tolist() == expected
    assert segments.locate_ops(gid, seq, []).tolist() == []


def test_op_blocks_cover_every_op_once_in_whole_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    counts = rng.integers(1, 9, size=500)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    n_rows = int(counts.sum())
    monkeypatch.setattr(segments, "BLOCK_ROWS", 20)
    blocks = list(segments.op_blocks(starts, n_rows))
    assert blocks[0][0] == 0 and blocks[-1][1] == len(starts) and blocks[-1][3] == n_rows
    for (_, end, _, end_row), (first, _, row, _) in itertools.pairwise(blocks):
        assert end == first and end_row == row  # contiguous: nothing skipped or repeated
    for first, _, row, end_row in blocks:
        assert row == starts[first] and end_row - row <= max(20, int(counts[first]))


@pytest.mark.parametrize("only_some", [False, True])
def test_rank_group_spans_equal_the_group_by(
    monkeypatch: pytest.MonkeyPatch, only_some: bool
) -> None:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(
        {
            "rank": rng.integers(0, 50, size=2000).astype(np.int32),
            "gid": rng.integers(0, 7, size=2000).astype(np.int32),
            "seq": rng.integers(0, 10_000, size=2000),
        }
    )
    frame = frame.sort_values(["gid", "seq", "rank"], kind="stable").reset_index(drop=True)
    where = rng.random(len(frame)) < 0.3 if only_some else None
    monkeypatch.setattr(segments, "_KEY_ROWS", 50)  # (a member's rows across many parts)
    got = segments.rank_group_spans(frame, where=where)
    kept = frame if where is None else frame[where]
    expected = kept.groupby(["rank", "gid"], sort=True)["seq"].agg(["min", "max"])
    assert list(zip(got["rank"], got["gid"], got["min"], got["max"], strict=True)) == [
        (r, g, lo, hi)
        for (r, g), lo, hi in zip(expected.index, expected["min"], expected["max"], strict=True)
    ]


def test_stragglers_block_by_block_equal_one_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A straggler found with the rows in blocks of 7 is the one found in a single block."""
    spec = JobSpec(
        world_size=16, tp=4, pp=1, steps=12, fault=Fault(kind=FaultKind.STRAGGLER, rank=5)
    )
    write_dumps(simulate(spec), tmp_path / "d")
    dumps = load_dumps(tmp_path / "d")
    membership = resolve_groups(dumps)
    matched = match(dumps, membership)
    whole = find_stragglers(dumps, membership, matched)
    assert [s.rank for s in whole] == [5]
    monkeypatch.setattr(segments, "BLOCK_ROWS", 7)
    assert find_stragglers(dumps, membership, matched) == whole


@pytest.mark.parametrize("block_rows", [5, 1 << 20])
def test_arrivals_equal_a_plain_reference_op_by_op(
    block_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each op's arrivals, last and second-to-last times, whether one member alone was last
    and that member's row, each rank's finished ops: as a loop over the ops says, with ties,
    ops nobody arrived at (not full, or no time) and blocks that cut between ops."""
    from frtrace.analysis.stragglers import _arrivals

    monkeypatch.setattr(segments, "BLOCK_ROWS", block_rows)
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 6, size=60)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n = int(sizes.sum())
    created = rng.integers(1_000, 1_006, size=n).astype(object)  # (few values: ties)
    created[rng.random(n) < 0.15] = None
    coll = pd.DataFrame(
        {"rank": rng.integers(0, 8, size=n), "created_ns": pd.array(created, dtype="Int64")}
    )
    full = rng.random(len(sizes)) < 0.7
    got = _arrivals(coll, starts, sizes, full)
    base = int(coll["created_ns"].min())
    done = np.zeros(int(coll["rank"].max()) + 1, dtype=np.int64)
    for i, (start, size) in enumerate(zip(starts, sizes, strict=True)):
        rows = range(int(start), int(start + size))
        t = [
            float(coll["created_ns"][r] - base)
            if full[i] and not pd.isna(coll["created_ns"][r])
            else -np.inf
            for r in rows
        ]
        latest = max(t)
        last = [r for r, x in zip(rows, t, strict=True) if x == latest]
        rest = [x for x in t if x != latest]
        assert got[0][i] == sum(x > -np.inf for x in t)
        assert got[1][i] == latest and got[2][i] == max(rest, default=-np.inf)
        assert got[3][i] == (len(last) == 1) and got[4][i] == max(last)
        for r, x in zip(rows, t, strict=True):
            done[coll["rank"][r]] += x > -np.inf
    assert got[5].tolist() == done.tolist()
