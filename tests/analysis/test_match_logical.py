"""Logical collectives (one row per rank, group and seq; coalesced runs folded) computed with
segment reductions equal the plain pandas group-by they replaced (kept here as the oracle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from frsim import Fault, FaultKind, JobSpec, simulate, write_dumps
from frtrace.analysis.facts import coalesce
from frtrace.analysis.facts import match as match_module
from frtrace.analysis.facts.groups import resolve_groups
from frtrace.load.read import native
from frtrace.load.tables import load_dumps

KEYS = ["rank", "gid", "seq"]


def _reference(coll: pd.DataFrame) -> pd.DataFrame:
    """The pandas implementation (hash of every key, group-by aggregation)."""
    dup = coll.duplicated(KEYS, keep=False)
    single = coll[~dup]
    out = single.assign(last_row=single["row"], n_entries=1)
    if dup.any():
        runs = coll[dup].sort_values("row")
        position = runs.groupby(KEYS, sort=False).cumcount().to_numpy().astype(np.uint64)
        with np.errstate(over="ignore"):
            part = (
                runs["sig"].to_numpy().view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
                + runs["op_code"].to_numpy().astype(np.uint64) * np.uint64(0x632BE59BD9B4E019)
            ) * (position * np.uint64(2) + np.uint64(1))
        runs = runs.assign(part=part)
        folded = runs.groupby(KEYS, sort=False).agg(
            row=("row", "first"),
            last_row=("row", "last"),
            op=("op", "last"),
            op_code=("op_code", "last"),
            sig=("part", "sum"),
            done=("done", "any"),
            state_rank=("state_rank", "max"),
            created_ns=("created_ns", "first"),
            n_entries=("row", "size"),
        )
        folded = folded.reset_index()
        folded["sig"] = folded["sig"].to_numpy().astype(np.uint64).view(np.int64)
        out = pd.concat([out, folded], ignore_index=True)
    cols = coalesce._LOGICAL_COLUMNS
    # (a run has at most a buffer's entries; a collective always has a seq)
    out = out.astype({"n_entries": np.int32, "seq": np.int64})
    return out[cols].sort_values(["gid", "seq", "rank"], kind="stable").reset_index(drop=True)


def _with_rows(frame: pd.DataFrame, keep: np.ndarray | None) -> pd.DataFrame:
    """The rows of matching's frame that ``keep`` keeps, each with its row in the table (the
    frame's index there) as a column, as the reference reads it."""
    coll = frame if keep is None else frame[keep]
    return coll.assign(row=coll.index.to_numpy().astype(np.int32)).reset_index(drop=True)


def _indexed_by_row(coll: pd.DataFrame) -> pd.DataFrame:
    """The rows as matching hands them over: each one's row in the table is its index."""
    return coll.set_index("row").rename_axis(None)


JOBS = {
    "3d coalesced and p2p": JobSpec(world_size=16, tp=2, pp=2, steps=6, buffer_size=2000),
    "3d wrapped": JobSpec(world_size=16, tp=2, pp=2, steps=12, buffer_size=90),
    "uneven wraps": JobSpec(
        world_size=8, tp=2, pp=2, steps=10, buffer_size=tuple(60 + 7 * r for r in range(8))
    ),
    "stalled": JobSpec(
        world_size=8,
        tp=2,
        pp=2,
        steps=8,
        fault=Fault(kind=FaultKind.HOST_STALL, rank=3, step=5),
    ),
    "collectives only": JobSpec(world_size=8, tp=4, steps=5, coalesced=False, batched_p2p=False),
}


@pytest.mark.parametrize("name", list(JOBS))
def test_segments_equal_group_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    write_dumps(simulate(JOBS[name]), tmp_path / "d")
    dumps = load_dumps(tmp_path / "d")
    seen: list[tuple[pd.DataFrame, pd.DataFrame]] = []
    real = coalesce.logical_collectives

    def both(frame: pd.DataFrame, keep: np.ndarray | None = None) -> pd.DataFrame:
        expected = _reference(_with_rows(frame, keep))
        got = real(frame, keep)
        seen.append((got.copy(), expected))  # (matching adds columns to it later)
        return got

    monkeypatch.setattr(match_module, "logical_collectives", both)
    match_module.match(dumps, resolve_groups(dumps))
    ((got, expected),) = seen
    assert len(got) > 0
    if name != "collectives only":
        assert (got["n_entries"] > 1).any()  # runs were folded
    pd.testing.assert_frame_equal(got, expected, check_categorical=True)


@pytest.mark.parametrize("name", ["3d coalesced and p2p", "collectives only"])
def test_ranks_in_any_order_give_the_same_ops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Rows usually come one rank after another (one sort key then suffices); ranks loaded in
    another order take the four-key sort, with the same result."""
    write_dumps(simulate(JOBS[name]), tmp_path / "d")
    dumps = load_dumps(tmp_path / "d")
    frames: list[pd.DataFrame] = []
    real = coalesce.logical_collectives

    def kept(frame: pd.DataFrame, keep: np.ndarray | None = None) -> pd.DataFrame:
        frames.append(_with_rows(frame, keep))
        return real(frame, keep)

    monkeypatch.setattr(match_module, "logical_collectives", kept)
    match_module.match(dumps, resolve_groups(dumps))
    (coll,) = frames
    shuffled = coll.sort_values(["rank", "row"], ascending=[False, True])
    assert not (np.diff(shuffled["rank"].to_numpy()) >= 0).all()
    expected = _reference(coll.copy())
    got = coalesce.logical_collectives(_indexed_by_row(shuffled))
    pd.testing.assert_frame_equal(got, expected, check_categorical=True)
    in_order = coalesce.logical_collectives(_indexed_by_row(coll))
    pd.testing.assert_frame_equal(in_order, expected, check_categorical=True)


@pytest.mark.parametrize("name", list(JOBS))
def test_group_ids_counted_or_hashed_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Each entry's group id, looked up through a table of every (rank, group name) (the
    usual case) and through a hash of the pairs (ranks numbered far apart): the same."""
    write_dumps(simulate(JOBS[name]), tmp_path / "d")
    dumps = load_dumps(tmp_path / "d")
    membership = resolve_groups(dumps)
    counted = match_module._gid_column(dumps.entries, membership)
    monkeypatch.setattr(match_module, "_PAIRS_COUNTED", -(1 << 62))
    hashed = match_module._gid_column(dumps.entries, membership)
    assert (counted >= 0).any()
    np.testing.assert_array_equal(counted, hashed)
    assert counted.dtype == hashed.dtype == np.int32


def test_first_valid_skips_nulls_like_pandas_first() -> None:
    column = pd.Series(pd.array([None, 5, 7, None, None, 3], dtype="Int64"))
    order = np.array([0, 1, 2, 3, 4, 5])
    first = np.array([0, 2, 3, 5])
    last = np.array([1, 2, 4, 5])
    got = coalesce._first_valid(column, order, first, last)
    assert got.tolist() == [5, 7, pd.NA, 3]


def test_op_order_with_sequence_numbers_at_int64s_top() -> None:
    """(Damaged dumps) the sort key, made in place, wraps past int64 on the way and back:
    the order is still by (gid, seq), rows of equal keys in row order."""
    top = 2**63 - 1
    gid = np.array([3, 0, 3, 0, 3], dtype=np.int32)
    seq = np.array([top, top - 2, top - 1, top - 2, top], dtype=np.int64)
    rank = np.array([0, 0, 1, 1, 2], dtype=np.int32)
    row = np.arange(5, dtype=np.int32)
    order, first = coalesce._op_order(gid, seq, rank, row)
    assert order.tolist() == [1, 3, 2, 0, 4]
    assert first.tolist() == [0, 1, 2, 3, 4]  # (equal (gid, seq), but of two ranks)


@pytest.mark.parametrize("counted", [True, False], ids=["counting sort", "numpy"])
@pytest.mark.parametrize("base", [0, 7, 2**31 - 60, 2**31 + 5, 2**40, -(2**40)])
def test_op_order_in_four_bytes_or_eight_is_the_lexicographic_order(
    base: int, counted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key in int32 where every (gid, seq) fits, else int64: both the order of
    (gid, seq, rank, row), whether the sequence numbers start at 0 or near int32's top
    (where gid * width + seq would not fit though gid * width + seq - low does); by the C
    counting sort where it is built, and by numpy's sort (the key's values too many to
    count), the same order and runs."""
    if counted and not native.active():
        pytest.skip(f"the C module is not used here ({native.inactive_reason()})")
    if not counted:
        monkeypatch.setattr(coalesce, "_most_counted", lambda rows: 0)
    rng = np.random.default_rng(abs(base) % 1000)
    for _ in range(50):
        n = int(rng.integers(2, 200))
        rank = np.sort(rng.integers(0, 6, n)).astype(np.int32)
        gid = rng.integers(0, 5, n).astype(np.int32)
        seq = (rng.integers(0, 40, n) + base).astype(np.int64)
        row = np.arange(n, dtype=np.int32)
        expected = np.lexsort((row, rank, seq, gid))
        order, first = coalesce._op_order(gid, seq, rank, row)
        assert order.dtype == first.dtype == np.int64
        assert order.tolist() == expected.tolist()
        # a run starts where the (gid, seq, rank) of the rows in order changes
        ordered = (gid[order].tolist(), seq[order].tolist(), rank[order].tolist())
        rows = list(zip(*ordered, strict=True))
        assert first.tolist() == [0, *(i for i in range(1, n) if rows[i] != rows[i - 1])]
