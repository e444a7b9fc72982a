"""A large set's entry columns through the workers' files (frtrace.load.handover.shipped).

tests/load/handover/test_spill.py loads every fixture set both ways (gathered from the workers'
files,
and in memory) and compares tables and reports; these check the hand-over's edges: a worker
that cannot write its file, results read in the parent, and what a writer's file holds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from frtrace.errors import WorkFilesLost
from frtrace.incident.discover import discover
from frtrace.load import schema
from frtrace.load.dumpset import DumpSet
from frtrace.load.handover import gather, spill
from frtrace.load.handover.gather import Gather
from frtrace.load.handover.shipped import ColumnWriter, ShippedDump, encode
from frtrace.load.read.parse import ParsedDump, PlainDump, try_parse, try_parse_plain
from frtrace.load.tables import build_dump_set, load_dumps
from tests.conftest import fixture_sets

NCCL = next(d for d in fixture_sets() if "nccl" in str(d))


def _load(directory: Path, monkeypatch: pytest.MonkeyPatch, *, gathered: bool) -> DumpSet:
    monkeypatch.delenv("FRTRACE_SPILL_MIN_BYTES", raising=False)
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 0 if gathered else 1 << 62)
    return load_dumps(directory, jobs=2)


def _same(a: DumpSet, b: DumpSet) -> None:
    for name in schema.ENTRIES.names:
        assert a.entries.column(name).equals(b.entries.column(name)), name
    assert a.stacks.equals(b.stacks)


def test_a_worker_that_cannot_write_its_file_sends_the_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    kept = _load(NCCL, monkeypatch, gathered=False)

    def full(self: ColumnWriter, batch: pa.RecordBatch) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ColumnWriter, "put", full)  # (the forked workers inherit it)
    _same(_load(NCCL, monkeypatch, gathered=True), kept)


def test_results_read_here_and_shipped_ones_gather_in_file_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every other file shipped by a writer, the rest handed over as batches (as when a worker
    cannot write, or files are read in this process): the tables are the in-memory ones."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    candidates = discover(NCCL).candidates
    results = [try_parse(c) for c in candidates]
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 1 << 62)
    kept = build_dump_set(NCCL, candidates, results)
    writer = ColumnWriter(tmp_path, "worker.columns")
    mixed = [
        writer.ship(r) if i % 2 and isinstance(r, ParsedDump) else r for i, r in enumerate(results)
    ]
    assert any(isinstance(r, ShippedDump) for r in mixed)
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 0)
    _same(build_dump_set(NCCL, candidates, mixed), kept)


def test_a_dump_read_for_the_hand_over_is_the_dump_read_in_arrow() -> None:
    """Every fixture dump read as a worker reads it for its file (``try_parse_plain``: no
    Arrow made for the columns a fast path read) and as an Arrow batch: the same meta, stacks
    and side rows, the same bytes, validity and dictionaries in the file, and the same batch
    where it is sent whole instead (``PlainDump.parsed``)."""
    read = 0
    for directory in fixture_sets():
        for cand in discover(directory).candidates:
            plain, parsed = try_parse_plain(cand), try_parse(cand)
            if not isinstance(parsed, ParsedDump):
                assert str(plain) == str(parsed)
                continue
            assert isinstance(plain, PlainDump)
            read += 1
            assert (plain.meta, plain.stacks) == (parsed.meta, parsed.stacks)
            assert repr((plain.groups, plain.pg_status)) == repr((parsed.groups, parsed.pg_status))
            got, want = encode(plain.entries), encode(parsed.entries)
            assert b"".join(map(bytes, got[0])) == b"".join(map(bytes, want[0])), cand.path
            assert [v if isinstance(v, bool) else v.tolist() for v in got[1]] == [
                v if isinstance(v, bool) else v.tolist() for v in want[1]
            ]
            assert repr(got[2]) == repr(want[2])
            assert plain.parsed().entries.equals(parsed.entries)
    assert read >= 100


def test_a_writers_file_holds_each_column_padded_and_nulls_filled(tmp_path: Path) -> None:
    fields = [
        pa.field("a", pa.int64()),
        pa.field("b", pa.dictionary(pa.int32(), pa.string())),
        pa.field("c", pa.bool_()),
        pa.field("d", pa.int32()),
    ]
    table_schema = pa.schema(fields)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([1, None, 3], pa.int64()),
            pa.array(["x", None, "y"]).dictionary_encode(),
            pa.array([True, False, None]),
            pa.array([None, None, None], pa.int32()),
        ],
        schema=table_schema,
    )
    writer = ColumnWriter(tmp_path, "w.columns")
    first = writer.put(batch)
    second = writer.put(batch.slice(1, 2))
    assert (first.offset, second.offset) == (0, 24 + 16 + 8 + 16)
    assert first.dictionaries[1] == ["x", "y"] and first.dictionaries[0] is None
    assert first.valid[0].tolist() == [True, False, True] and first.valid[3] is False
    gather = Gather(table_schema, None)
    for part in (first, second):
        gather.add(part, {1: np.array([5, 7, -1], dtype=np.int32)})  # (x, y, null)
    assert gather.column(0).to_pylist() == [1, None, 3, None, 3]
    assert gather.column(1).to_pylist() == [5, None, 7, None, 7]
    assert gather.column(2).to_pylist() == [True, False, None, False, None]
    assert gather.column(3).to_pylist() == [None] * 5
    gather.close()


def test_a_column_whose_file_cannot_be_written_goes_on_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while the columns are built: what was written is read back and the
    column goes on in memory; the tables are the same."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    candidates = discover(NCCL).candidates
    results = [try_parse(c) for c in candidates]
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 1 << 62)
    kept = build_dump_set(NCCL, candidates, results)
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 0)
    monkeypatch.setattr(gather, "BLOCK_ROWS", 8)  # (a write every dump or so)
    writes = 0
    pwrite = os.pwrite

    def fills(fd: int, data: Any, offset: int) -> int:
        nonlocal writes
        writes += 1
        if writes > 40:
            raise OSError(28, "No space left on device")
        return pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", fills)
    _same(build_dump_set(NCCL, candidates, results), kept)
    assert writes > 40


def test_scatter_in_c_is_scatter_in_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """One dump's part spread over its columns: the C pass and numpy give the same blocks
    (copied, remapped with numpy's take, a remapped value past the table refused), zeroed."""
    from frtrace.load.handover.shipped import padded
    from frtrace.load.read import native

    if not native.active():
        pytest.skip("the C module is not built here")
    rng = np.random.default_rng(32)
    dtypes = [np.dtype(t) for t in ("int64", "int32", "uint8", "float64", "int32", "uint32")]
    widths = tuple(d.itemsize for d in dtypes)
    for _ in range(200):
        rows, at = int(rng.integers(0, 40)), int(rng.integers(0, 5))
        columns = [rng.integers(-3, 9, rows).astype(d) for d in dtypes]
        part = b"".join(c.tobytes() + bytes(padded(c.nbytes) - c.nbytes) for c in columns)
        remaps: list[np.ndarray | None] = [None] * len(dtypes)
        zeroed: list[np.ndarray | None] = [None] * len(dtypes)
        remaps[1] = rng.integers(-1, 100, 9).astype(np.int32)
        remaps[4] = rng.integers(-1, 100, int(rng.integers(1, 12))).astype(np.int32)
        zeroed[4] = (rng.random(rows) < 0.7).astype(np.uint8)
        zeroed[0] = (rng.random(rows) < 0.7).astype(np.uint8)
        blocks = []
        for pure in (False, True):
            if pure:
                monkeypatch.setenv("FRTRACE_PURE_PYTHON", "1")
            targets = [np.zeros(at + rows, dtype=d) for d in dtypes]
            try:
                gather.scatter(part, rows, at, targets, widths, remaps, zeroed)
                blocks.append(targets)
            except IndexError:
                blocks.append(None)
            monkeypatch.delenv("FRTRACE_PURE_PYTHON", raising=False)
        c, py = blocks
        assert (c is None) == (py is None)
        if c is not None and py is not None:
            for a, b in zip(c, py, strict=True):
                assert a.tobytes() == b.tobytes()


def test_scatter_in_c_refuses_a_remap_that_is_not_int32() -> None:
    """A remap of another width would be read as int32s (wrong values, reads past its end):
    refused, as numpy's take would not write int64s into an int32 column either."""
    from frtrace.load.read import native

    if not native.active():
        pytest.skip("the C module is not built here")
    part = np.arange(4, dtype=np.int32).tobytes()
    target = [np.zeros(4, dtype=np.int32)]
    for remap in (np.arange(8, dtype=np.int64), np.arange(8, dtype=np.float32)):
        with pytest.raises(ValueError, match="int32"):
            native.scatter(part, 4, 0, target, (4,), [remap], [None])
    native.scatter(part, 4, 0, target, (4,), [np.arange(10, 14, dtype=np.int32)], [None])
    assert target[0].tolist() == [10, 11, 12, 13]


@pytest.mark.parametrize("cache", [False, True])
def test_a_worker_lost_midway_costs_only_its_file_when_gathered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: bool
) -> None:
    """A worker killed (SIGSEGV) after shipping some dumps: the dumps it wrote before are
    gathered from its file, its replacement writes its own, the rest are the same as in
    memory; no file of the load's is left."""
    import struct

    from frtrace.load.workers import parallel
    from tests.conftest import make_dump, make_entry, write_pickle

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    sets = tmp_path / "set"
    sets.mkdir()
    for rank in range(12):
        entries = [make_entry(record_id=i, collective_seq_id=i + 1) for i in range(rank + 3)]
        write_pickle(sets / f"rank_{rank}", make_dump(entries, world=12, rank=rank))
    # (hashing a tuple nested 300,000 deep as a dict key kills the reader: SIGSEGV)
    (sets / "rank_5").write_bytes(b"\x80\x02}" + b")" + b"\x85" * 300_000 + b"K\x01s.")
    # (a memo index of 2**31: the reader runs out of memory, says so and exits)
    (sets / "rank_9").write_bytes(b"\x80\x02]r" + struct.pack("<I", 2**31 - 1) + b".")
    kept = _load(sets, monkeypatch, gathered=False)
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 0)
    gathered = load_dumps(sets, jobs=2, cache=cache)
    assert gathered.loaded_ranks == tuple(r for r in range(12) if r not in (5, 9))
    _same(gathered, kept)
    spill.finish_removing()
    assert not any((tmp_path / "cache" / "frtrace" / "spill").iterdir())


def test_a_workers_file_removed_before_it_is_gathered_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something removes the load's working files mid-run (a cleaner of the cache
    directory): one line naming the file and what to do, not an unexpected error."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    candidates = discover(NCCL).candidates
    writer = ColumnWriter(tmp_path, "worker.columns")
    results = [try_parse(c) for c in candidates]
    shipped = [writer.ship(r) if isinstance(r, ParsedDump) else r for r in results]
    writer.close()
    writer.path.unlink()
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 0)
    with pytest.raises(WorkFilesLost, match=r"worker\.columns: .* run again") as caught:
        build_dump_set(NCCL, candidates, shipped)
    assert "\n" not in str(caught.value)


def _shipped_to(writer: ColumnWriter) -> tuple[list[Any], list[Any]]:
    candidates = discover(NCCL).candidates
    results = [try_parse(c) for c in candidates]
    shipped = [writer.ship(r) if isinstance(r, ParsedDump) else r for r in results]
    return candidates, shipped


def _can_drop(where: Path) -> bool:
    """Can this filesystem let go of a file's range (``spill.drop_range``)?"""
    probe = where / "probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, bytes(1 << 16))
        return spill.reserve(fd, 1 << 16) and spill.drop_range(fd, 0, 1 << 16)
    finally:
        os.close(fd)
        probe.unlink()


@pytest.mark.parametrize("reserved", [True, False])
def test_the_writers_files_are_let_go_of_as_the_table_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reserved: bool
) -> None:
    """The parts of the workers' files are freed as they are gathered into the entries'
    file (so that its pages are theirs again), once that file's room is reserved; where it
    cannot be, they stay until the end, for the other way. The table is the same either way."""
    if not _can_drop(tmp_path):
        pytest.skip("this filesystem cannot free a range of a file")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kept = _load(NCCL, monkeypatch, gathered=False)
    if not reserved:
        monkeypatch.setattr(spill, "reserve", lambda fd, length: False)
    writer = ColumnWriter(tmp_path, "worker.columns")
    candidates, shipped = _shipped_to(writer)
    writer.close()
    assert os.stat(writer.path).st_blocks > 0
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 0)
    _same(build_dump_set(NCCL, candidates, shipped), kept)
    assert (os.stat(writer.path).st_blocks == 0) == reserved


def test_next_offsets_are_the_lowest_of_each_files_later_parts() -> None:
    def part(path: str, offset: int) -> Any:
        return gather.ShippedColumns(path, offset, 1, (), ())

    parts = [part("a", 0), part("b", 0), part("a", 80), part("a", 40), part("b", 8)]
    assert gather._next_offsets(parts) == [40, 8, 40, None, None]


def test_a_table_write_that_fails_once_the_parts_are_let_go_of_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the entries' file fails to be written (a disk error) after the workers' files
    were freed, the columns cannot be gathered the other way: one line naming the file and
    what to do, and no file of the dumps' contents left behind."""
    from frtrace.load.handover import outputs

    if not _can_drop(tmp_path):
        pytest.skip("this filesystem cannot free a range of a file")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    writer = ColumnWriter(tmp_path, "worker.columns")
    candidates, shipped = _shipped_to(writer)
    writer.close()
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 0)

    def broken(self: object, data: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(outputs.Hole, "_write", broken)
    said = r"entries\.arrow: .*Input/output.* run again"
    with pytest.raises(WorkFilesLost, match=said) as caught:
        build_dump_set(NCCL, candidates, shipped)
    assert "\n" not in str(caught.value)
    spill.finish_removing()
    spilled = tmp_path / "cache" / "frtrace" / "spill"
    assert not [p for p in spilled.rglob("*") if p.is_file() and p.name != spill.LOCK_NAME]


def test_a_shipped_dump_pickles_as_its_values(tmp_path: Path) -> None:
    """The hand-over's records cross the pipe by their own ``__reduce__`` (no slots
    dataclass's field lookup per object), and come back equal."""
    import pickle

    cand = discover(NCCL).candidates[0]
    plain = try_parse_plain(cand)
    assert isinstance(plain, PlainDump)
    writer = ColumnWriter(tmp_path, "w.columns")
    shipped = writer.ship(plain)
    writer.close()
    back = pickle.loads(pickle.dumps(shipped, protocol=pickle.HIGHEST_PROTOCOL))
    assert isinstance(back, ShippedDump)
    assert back.meta == shipped.meta
    got, sent = back.columns, shipped.columns
    assert (got.path, got.offset, got.rows) == (sent.path, sent.offset, sent.rows)
    assert got.dictionaries == sent.dictionaries
    for a, b in zip(got.valid, sent.valid, strict=True):
        assert np.array_equal(a, b)
    assert back.stacks == shipped.stacks
    assert [g["group_name"] for g in back.groups] == [g["group_name"] for g in shipped.groups]


def test_a_dictionarys_remap_of_the_same_values_is_the_last_one() -> None:
    """A chunk whose values are the last chunk's gets the same remap; any other its own."""
    from frtrace.load.handover.merging import Dictionary

    merged = Dictionary()
    first = merged.remap(["a", "b"])
    assert merged.remap(["a", "b"]) is first
    assert merged.remap(["b", "c"]).tolist() == [1, 2, -1]
    assert merged.remap(["a", "b"]).tolist() == [0, 1, -1]
    sizes = merged.remap([[1, 2], [3]])
    assert merged.remap([[1, 2], [3]]) is sizes and sizes.tolist() == [3, 4, -1]
    assert merged.values == ["a", "b", "c", [1, 2], [3]]
