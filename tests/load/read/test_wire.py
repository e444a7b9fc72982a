"""A parsed file crosses from a worker to the parent unchanged (frtrace.load.read.wire)."""

from __future__ import annotations

import dataclasses
import pickle
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import pytest

from frtrace.errors import FrtraceError
from frtrace.incident.discover import Candidate, discover
from frtrace.load import schema
from frtrace.load.read.parse import ParsedDump, try_parse
from frtrace.load.read.wire import empty_batch

FIXTURES = Path(__file__).parents[2] / "fixtures"
NO_DUMPS = ("golden", "pystack", "stacks", "debug_server", "ras")  # reports, stacks, RAS only
SETS = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p.name not in NO_DUMPS)


def _parsed(directory: Path) -> list[ParsedDump]:
    out = []
    for sub in sorted({p.parent for p in directory.rglob("*") if p.is_file()}):
        try:
            candidates = discover(sub).candidates
        except FrtraceError:  # (a folder of notes, or of several sets: its sub-folders count)
            continue
        for cand in candidates:
            result = try_parse(cand)
            if isinstance(result, ParsedDump):
                out.append(result)
    return out


@pytest.mark.parametrize("directory", SETS, ids=[p.name for p in SETS])
def test_every_fixture_file_arrives_as_it_left(directory: Path) -> None:
    parsed = _parsed(directory)
    assert parsed
    for before in parsed:
        after = pickle.loads(bytes(ForkingPickler.dumps(before)))
        assert after.entries.schema == before.entries.schema
        assert after.entries.equals(before.entries)
        for a, b in zip(after.entries.columns, before.entries.columns, strict=True):
            assert a.null_count == b.null_count
            if hasattr(a, "dictionary") and len(a):  # (an empty batch arrives as empty_batch)
                assert a.dictionary.equals(b.dictionary)  # the same codes, not just values
        assert (after.meta, after.stacks) == (before.meta, before.stacks)
        assert repr((after.groups, after.pg_status)) == repr((before.groups, before.pg_status))


def test_a_sliced_batch_arrives_as_it_left() -> None:
    before = _parsed(FIXTURES / "nccl")[0]
    sliced = ParsedDump(
        meta=before.meta,
        entries=before.entries.slice(1, max(1, before.entries.num_rows - 2)),
        stacks=before.stacks,
        groups=before.groups,
        pg_status=before.pg_status,
    )
    after = pickle.loads(pickle.dumps(sliced))
    assert after.entries.equals(sliced.entries)


def test_an_empty_batch_travels_as_nothing_and_arrives_whole() -> None:
    before = _parsed(FIXTURES / "nccl")[0]
    empty = dataclasses.replace(before, entries=before.entries.slice(0, 0))
    sent = pickle.dumps(empty)
    after = pickle.loads(sent)
    assert after.entries.num_rows == 0
    assert after.entries.schema.equals(schema.ENTRIES)
    assert after.entries.equals(empty.entries)
    for a, b in zip(after.entries.columns, empty.entries.columns, strict=True):
        assert a.type == b.type
    assert (after.meta, after.stacks) == (before.meta, before.stacks)
    # (no column travels: a third of the smallest whole one, of one entry)
    one = dataclasses.replace(before, entries=before.entries.slice(0, 1))
    assert len(sent) < len(pickle.dumps(one)) / 3
    assert pickle.loads(sent).entries is after.entries  # built once where it arrives
    assert empty_batch(schema.ENTRIES).to_pylist() == []


def test_a_candidate_travels_with_every_field() -> None:
    values = {
        "path": Path("/d/dumps.tgz:rank_3"),
        "rank": 3,
        "prefix": "rank_",
        "encoding": "json",
        "size_bytes": 10,
        "relative": "a/rank_3",
        "data": b"{}",
        "refused": "a link",
    }
    assert {f.name for f in dataclasses.fields(Candidate)} == set(values)  # (a new field: here)
    before = Candidate(**values)  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(before)) == before


def test_a_dump_meta_travels_with_every_field() -> None:
    before = _parsed(FIXTURES / "nccl")[0].meta
    after = pickle.loads(pickle.dumps(before))
    assert after == before
    assert [getattr(after, f.name) for f in dataclasses.fields(after)] == [
        getattr(before, f.name) for f in dataclasses.fields(before)
    ]
