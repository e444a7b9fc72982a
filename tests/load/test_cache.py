"""The table cache: a second load skips unpickling, sees every change, never changes a verdict."""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from frtrace.cli import app
from frtrace.incident.discover import discover
from frtrace.incident.fingerprint import HASH_BYTES
from frtrace.load import cache as cache_mod
from frtrace.load import tables
from frtrace.load.dumpset import DumpSet
from frtrace.load.options import LoadOptions
from frtrace.load.tables import load_discovered, load_dumps
from frtrace.pipeline import analyze_dumps
from frtrace.report.json import render_json
from tests.conftest import fixture_sets, healthy_set, make_dump, make_entry, write_pickle

SCENARIOS = fixture_sets()


def _same(a: DumpSet, b: DumpSet) -> None:
    for name in cache_mod.TABLES:
        assert getattr(a, name).equals(getattr(b, name)), name
    assert a.problems == b.problems
    assert a.world == b.world
    assert a.skipped == b.skipped
    assert a._frames == b._frames


def _no_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, reading a dump fails the test: only the cache may answer."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a dump was read although the cache holds the tables")

    monkeypatch.setattr(tables, "open_executor", refuse)


def _entries(root: Path) -> list[Path]:
    sets = cache_mod.cache_root() / "sets"
    return sorted(sets.iterdir()) if sets.exists() else []


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cache_never_changes_a_verdict(scenario: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fixture: the JSON report from cached tables equals the one from the dumps."""
    fresh = load_dumps(scenario, cache=True)
    _no_reading(monkeypatch)
    cached = load_dumps(scenario, cache=True)
    _same(fresh, cached)
    assert render_json(analyze_dumps(cached)) == render_json(analyze_dumps(fresh))


def test_damaged_file_is_cached_as_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unreadable file comes back from the cache with the same one-line problem."""
    directory = healthy_set(tmp_path / "d", world=3)
    (directory / "nccl_trace_rank_1").write_bytes(b"\x80\x05damaged")
    fresh = load_dumps(directory, cache=True)
    _no_reading(monkeypatch)
    cached = load_dumps(directory, cache=True)
    _same(fresh, cached)
    assert cached.unreadable_ranks == (1,)


def _rewrite(path: Path, steps: int, *, keep_stat: bool = False) -> None:
    before = path.stat()
    entries = [make_entry(record_id=i, collective_seq_id=i + 1) for i in range(steps)]
    write_pickle(path, make_dump(entries, world=2))
    if keep_stat:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.parametrize("change", ["changed", "same_size_and_mtime", "added", "removed"])
def test_a_change_is_read_again(tmp_path: Path, change: str) -> None:
    """A changed, added or removed file is noticed: the result equals an uncached load."""
    directory = healthy_set(tmp_path / "d", world=2, steps=3)
    load_dumps(directory, cache=True)
    target = directory / "nccl_trace_rank_1"
    if change == "changed":
        _rewrite(target, steps=5)
    elif change == "same_size_and_mtime":
        # same length, other content (record ids 0-2 become 1-3), mtime put back
        entries = [make_entry(record_id=i + 1, collective_seq_id=i + 1) for i in range(3)]
        size = target.stat().st_size
        before = target.stat()
        write_pickle(target, make_dump(entries, world=2))
        assert target.stat().st_size == size
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif change == "added":
        shutil.copy(target, directory / "nccl_trace_rank_2")
    else:
        target.unlink()
    cached = load_dumps(directory, cache=True)
    _same(cached, load_dumps(directory, cache=False))


def test_corrupt_entries_are_ignored_and_rebuilt(tmp_path: Path) -> None:
    """A flipped byte, a truncated table or a garbled manifest: read from the dumps, rebuilt."""
    directory = healthy_set(tmp_path / "d", world=2, steps=3)
    expected = load_dumps(directory, cache=False)
    for damage in ("flip", "truncate", "manifest", "missing"):
        load_dumps(directory, cache=True)
        (entry,) = _entries(tmp_path)
        (folder,) = [p for p in entry.iterdir() if p.is_dir()]
        table = folder / "entries.arrow"
        data = bytearray(table.read_bytes())
        if damage == "flip":
            data[len(data) // 2] ^= 0xFF
            table.write_bytes(bytes(data))
        elif damage == "truncate":
            table.write_bytes(bytes(data[: len(data) // 2]))
        elif damage == "manifest":
            (entry / "manifest.json").write_text("{not json")
        else:
            table.unlink()
        _same(load_dumps(directory, cache=True), expected)  # not from the damaged entry
        _same(load_dumps(directory, cache=True), expected)  # from the rebuilt one


def test_other_loader_code_never_reuses_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tables written by another version of the loader are not used."""
    directory = healthy_set(tmp_path / "d")
    load_dumps(directory, cache=True)
    monkeypatch.setattr(cache_mod, "_code_version", lambda: "another frtrace")
    calls = []
    real = tables.open_executor
    monkeypatch.setattr(tables, "open_executor", lambda *a, **k: calls.append(1) or real(*a, **k))
    load_dumps(directory, cache=True)
    assert calls == [1]


def test_unwritable_cache_is_one_note_never_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cache directory that cannot be created disables caching with one line on stderr."""
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    directory = healthy_set(tmp_path / "d")
    dumps = load_dumps(directory, cache=True)
    assert dumps.loaded_ranks == (0, 1)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not caching the loaded tables" in err and "--no-cache" in err


def test_no_cache_flag_and_env_turn_it_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-cache and FRTRACE_NO_CACHE=1 neither read nor fill the cache; the CLI caches."""
    directory = healthy_set(tmp_path / "d")
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", "-d", str(directory), "--no-cache"])
    assert result.exit_code == 0, result.output
    assert _entries(tmp_path) == []
    monkeypatch.setenv("FRTRACE_NO_CACHE", "1")
    assert runner.invoke(app, ["summary", "-d", str(directory)]).exit_code == 0
    assert _entries(tmp_path) == []
    monkeypatch.delenv("FRTRACE_NO_CACHE")
    first = runner.invoke(app, ["analyze", "-d", str(directory), "-f", "json"])
    assert len(_entries(tmp_path)) == 1
    _no_reading(monkeypatch)
    again = runner.invoke(app, ["analyze", "-d", str(directory), "-f", "json"])
    assert again.exit_code == first.exit_code == 0
    assert again.output == first.output


def test_eviction_keeps_the_cache_under_its_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past FRTRACE_CACHE_MAX_BYTES the least recently used entries go; the newest stays."""
    dirs = [healthy_set(tmp_path / f"d{i}", steps=3) for i in range(3)]
    load_dumps(dirs[0], cache=True)
    (one,) = _entries(tmp_path)
    size = sum(f.stat().st_size for f in one.rglob("*") if f.is_file())
    monkeypatch.setenv("FRTRACE_CACHE_MAX_BYTES", str(int(size * 2.5)))
    load_dumps(dirs[1], cache=True)
    os.utime(one / "manifest.json", ns=(1, 1))  # d0 used long ago
    load_dumps(dirs[2], cache=True)  # three entries do not fit: d0 goes
    keys = {cache_mod.DirectoryCache(cache_mod.cache_root(), d, ()).entry for d in dirs}
    assert set(_entries(tmp_path)) == keys - {one}
    monkeypatch.setenv("FRTRACE_CACHE_MAX_BYTES", str(size // 2))
    load_dumps(dirs[0], cache=True)  # larger than the whole cap: not stored
    assert one not in _entries(tmp_path)


def test_path_spelling_is_part_of_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative and an absolute spelling each get the paths they gave in messages."""
    directory = healthy_set(tmp_path / "d")
    (directory / "nccl_trace_rank_1").write_bytes(b"junk")
    monkeypatch.chdir(tmp_path)
    absolute = load_dumps(directory, cache=True)
    relative = load_dumps(Path("d"), cache=True)
    assert absolute.problems[0].path == str(directory / "nccl_trace_rank_1")
    assert relative.problems[0].path == str(Path("d") / "nccl_trace_rank_1")


def edited_in_the_middle(directory: Path, *, world: int = 2, steps: int = 400) -> Path:
    """A set of dumps larger than twice the bytes hashed at each end, then rank 1's op in the
    middle of its file edited (all_reduce -> all_gather) with its size and mtime put back, as
    ``cp -p``, ``rsync -t`` or ``tar x`` leave them. Returns the edited file."""
    for rank in range(world):
        entries = [
            # (a string object per entry: pickle writes each one, not a memo reference)
            make_entry(
                record_id=i,
                collective_seq_id=i + 1,
                profiling_name="".join(["nccl:", "all_reduce"]),
            )
            for i in range(steps)
        ]
        write_pickle(directory / f"nccl_trace_rank_{rank}", make_dump(entries, world=world))
    target = directory / "nccl_trace_rank_1"
    assert target.stat().st_size > 2 * HASH_BYTES
    return target


def edit_keeping_size_and_mtime(target: Path) -> None:
    before = target.stat()
    data = bytearray(target.read_bytes())
    middle = data.find(b"nccl:all_reduce", len(data) // 2)
    assert HASH_BYTES < middle < len(data) - HASH_BYTES
    data[middle : middle + 15] = b"nccl:all_gather"
    target.write_bytes(bytes(data))
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    while target.stat().st_ctime_ns == before.st_ctime_ns:  # (a coarse clock: the next tick)
        time.sleep(0.005)
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = target.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_an_edit_in_the_middle_with_size_and_mtime_kept_is_read_again(tmp_path: Path) -> None:
    """The ends of the file, its size and mtime are the same: the inode change time (which
    nobody can set back) tells the edit."""
    target = edited_in_the_middle(tmp_path / "d")
    first = load_dumps(target.parent, cache=True)
    edit_keeping_size_and_mtime(target)
    cached = load_dumps(target.parent, cache=True)
    fresh = load_dumps(target.parent, cache=False)
    assert not fresh.entries.equals(first.entries)  # (the edit shows in the tables)
    _same(cached, fresh)


@pytest.mark.parametrize("large", [False, True], ids=["in memory", "written around holes"])
def test_the_cache_is_private_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, large: bool
) -> None:
    """Folders 0700, files 0600 (tables written by Arrow, the manifest, a sidecar; a large
    set's entries written around holes, ``frtrace.load.handover.ipcfile``) under umask 022; a cache
    folder an earlier version left 0755 is narrowed."""
    from frtrace.load.handover import spill

    if large:
        monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 0)
    directory = healthy_set(tmp_path / "d", world=2, steps=3)
    top = cache_mod.cache_root().parent  # .../frtrace
    top.mkdir(parents=True, mode=0o755)
    os.chmod(top, 0o755)
    old = os.umask(0o022)
    try:
        load_dumps(directory, cache=True)
        (entry,) = _entries(tmp_path)
        store = cache_mod.DirectoryCache(cache_mod.cache_root(), directory, [])
        store.write_sidecar("extra.json", b"{}", "test")
    finally:
        os.umask(old)
    made = [top, *top.rglob("*")]
    assert {p.name for p in made} >= {"manifest.json", "entries.arrow", "extra.json", entry.name}
    for path in made:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_tables_stored_in_the_background_are_there_for_the_next_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``background``: the load returns while its tables are stored; the next load (and
    ``finish_saving``) waits for them, and reads no dump."""
    directory = healthy_set(tmp_path / "d", world=3)
    started = []
    save = cache_mod.DirectoryCache.save

    def slow(self: cache_mod.DirectoryCache, *args: object) -> None:
        started.append(time.monotonic())
        time.sleep(0.2)
        save(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(cache_mod.DirectoryCache, "save", slow)
    fresh = load_discovered(discover(directory), LoadOptions(cache=True, background=True))
    assert started and cache_mod._SAVING  # (still storing when the load returned)
    _no_reading(monkeypatch)
    _same(load_dumps(directory, cache=True), fresh)
    assert not cache_mod._SAVING
    assert capsys.readouterr().err == ""


def test_a_background_store_that_fails_is_one_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = healthy_set(tmp_path / "d", world=3)

    def broken(self: cache_mod.DirectoryCache, *args: object) -> None:
        raise RuntimeError("something unforeseen")

    monkeypatch.setattr(cache_mod.DirectoryCache, "save", broken)
    load_discovered(discover(directory), LoadOptions(cache=True, background=True))
    cache_mod.finish_saving()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "not caching the loaded tables (RuntimeError: something unforeseen)" in err


@pytest.mark.parametrize("way", ["around holes", "arrow copies", "disk full", "fills in a hole"])
def test_a_large_sets_entries_are_written_once_where_the_cache_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    """A large set's entries table is written as the cache's file and mapped from it (its
    checksum taken as the cache stores it, checked by the next load); where Arrow would not write
    around the values, or the file cannot be written, the columns are built the other way:
    the tables are the same, and the next load reads them from the cache."""
    from frtrace.load.handover import ipcfile, spill

    directory = next(d for d in SCENARIOS if "nccl" in str(d))
    kept = load_dumps(directory)  # (in memory: below the spill threshold)
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 0)
    if way == "arrow copies":
        monkeypatch.setattr(ipcfile, "write_around", lambda *args: None)
    elif way == "disk full":

        def full(*args: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(ipcfile, "write_around", full)
    elif way == "fills in a hole":
        from frtrace.load.handover import outputs

        def fills(self: object, data: object) -> None:
            raise OSError(28, "No space left on device")

        # (no room to reserve the file's blocks: the workers' files are kept for the other way)
        monkeypatch.setattr(spill, "reserve", lambda fd, length: False)
        monkeypatch.setattr(outputs.Hole, "_write", fills)
    first = load_dumps(directory, cache=True)
    _same(first, kept)
    sets = str(cache_mod.cache_root() / "sets")  # (this test's: another's may be mapped still)
    mapped = [m for m in Path("/proc/self/maps").read_text().splitlines() if sets in m]
    assert any(m.endswith("entries.arrow") for m in mapped) == (way == "around holes")
    _no_reading(monkeypatch)
    _same(load_dumps(directory, cache=True), kept)


def test_an_unforeseen_failure_while_the_holes_are_filled_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entries' file holds the dumps' contents: whatever stops its writing (here a bug
    in spreading a dump's part), it is removed, as on a full disk; the next load is whole."""
    from frtrace.load.handover import gather, spill

    directory = next(d for d in SCENARIOS if "nccl" in str(d))
    kept = load_dumps(directory)
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 0)
    real = gather.scatter

    def broken(*args: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(gather, "scatter", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        load_dumps(directory, cache=True)
    spill.finish_removing()
    top = cache_mod.cache_root().parent  # (the cache's folders and the spill directory)
    assert not [p for p in top.rglob("*") if p.is_file() and p.name != spill.LOCK_NAME]
    monkeypatch.setattr(gather, "scatter", real)
    _same(load_dumps(directory, cache=True), kept)
    _no_reading(monkeypatch)
    _same(load_dumps(directory, cache=True), kept)
