"""Each dump's fingerprint for the caches, taken before the dump is read: by the load's
worker that reads it where nothing is stored to compare with (``incident.fingerprint``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from frtrace.incident.discover import discover
from frtrace.incident.fingerprint import HASH_BYTES, content_fingerprint, file_fingerprint, taken
from frtrace.load import cache as cache_mod
from frtrace.load.tables import load_dumps
from frtrace.load.workers import worker
from tests.conftest import healthy_set
from tests.load.test_cache import (
    _no_reading,
    _same,
    edit_keeping_size_and_mtime,
    edited_in_the_middle,
)


def _manifest() -> dict[str, Any]:
    (entry,) = (cache_mod.cache_root() / "sets").iterdir()
    stored = json.loads((entry / "manifest.json").read_text())
    assert isinstance(stored, dict)
    return stored


def _noted_by_workers(monkeypatch: pytest.MonkeyPatch, log: Path) -> None:
    """Each fingerprint a worker takes, its file's name appended to ``log`` (a worker's
    memory is its own: a list would stay empty here)."""
    real = worker.read_first

    def noted(cand: Any) -> Any:
        with log.open("a") as out:
            out.write(f"{cand.path.name}\n")
        return real(cand)

    monkeypatch.setattr(worker, "read_first", noted)


def _here_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fingerprint taken in this process, before the workers start, fails the test."""

    def refuse(cand: Any) -> list[Any]:
        raise AssertionError(f"{cand.path}: fingerprinted before its worker read it")

    monkeypatch.setattr(cache_mod, "file_fingerprint", refuse)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_first_load_stores_the_fingerprints_its_workers_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    """Nothing stored: no dump is fingerprinted up front; the manifest holds, in file order,
    what this process would have taken (the files unchanged), and the next load is a hit."""
    directory = healthy_set(tmp_path / "d", world=5)
    (directory / "nccl_trace_rank_3").write_bytes(b"\x80\x05damaged")  # (one that fails)
    log = tmp_path / "taken"
    with monkeypatch.context() as first:
        _here_refused(first)
        _noted_by_workers(first, log)
        fresh = load_dumps(directory, cache=True, jobs=jobs)
    assert fresh.unreadable_ranks == (3,)
    assert sorted(log.read_text().split()) == sorted(p.name for p in directory.iterdir())
    expected = [file_fingerprint(c) for c in discover(directory).candidates]
    assert _manifest()["files"] == expected
    _no_reading(monkeypatch)
    _same(load_dumps(directory, cache=True), fresh)


def test_a_stored_entry_is_compared_with_fingerprints_taken_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a manifest to compare with, every dump is fingerprinted before any is read, and
    a changed file reads the dumps again, the new tables stored under those fingerprints."""
    directory = healthy_set(tmp_path / "d", world=3, steps=3)
    load_dumps(directory, cache=True)
    healthy_set(directory, world=3, steps=4)  # (every file rewritten)
    log = tmp_path / "taken"
    _noted_by_workers(monkeypatch, log)
    again = load_dumps(directory, cache=True)
    assert again.entries.num_rows == 12
    assert not log.exists()  # (none taken twice)
    assert _manifest()["files"] == [file_fingerprint(c) for c in discover(directory).candidates]
    _no_reading(monkeypatch)
    _same(load_dumps(directory, cache=True), again)


def test_a_dump_edited_after_it_was_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker reads rank 1, then the file is edited in the middle (size and mtime put
    back): the fingerprint stored is the one from before the read, so the next load does not
    take the stored tables (which hold the old op) for the edited file."""
    target = edited_in_the_middle(tmp_path / "d")
    real_parse, real_plain = worker.try_parse, worker.try_parse_plain

    def then_edited(parse: Any) -> Any:
        def read(cand: Any) -> Any:
            result = parse(cand)
            if cand.path.name == target.name:
                edit_keeping_size_and_mtime(target)
            return result

        return read

    with monkeypatch.context() as editing:
        _here_refused(editing)
        editing.setattr(worker, "try_parse", then_edited(real_parse))
        editing.setattr(worker, "try_parse_plain", then_edited(real_plain))
        first = load_dumps(target.parent, cache=True)
    cached = load_dumps(target.parent, cache=True)
    fresh = load_dumps(target.parent, cache=False)
    assert not fresh.entries.equals(first.entries)  # (the edit shows in the tables)
    _same(cached, fresh)


def test_a_file_without_a_fingerprint_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dump its worker could not fingerprint (it vanished, or its reader crashed first):
    the load goes on, and no entry is stored under an identity that lacks it."""
    directory = healthy_set(tmp_path / "d", world=3)
    real = worker.read_first

    def lost(cand: Any) -> Any:
        return (cand, None) if cand.rank == 2 else real(cand)

    monkeypatch.setattr(worker, "read_first", lost)
    loaded = load_dumps(directory, cache=True)
    assert loaded.loaded_ranks == (0, 1, 2)
    sets = cache_mod.cache_root() / "sets"
    assert not sets.exists() or not list(sets.glob("*/manifest.json"))


@pytest.mark.parametrize("size", [0, 1, HASH_BYTES, HASH_BYTES + 1, 2 * HASH_BYTES + 7, 100_000])
def test_a_fingerprint_from_the_bytes_read_is_the_files(tmp_path: Path, size: int) -> None:
    """The worker's fingerprint (``fstat``, then the ends of the bytes it read) is what this
    process takes from the file, at every size around the ends hashed; None where the bytes
    are not the whole file the ``fstat`` saw."""
    import os

    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(bytes((i * 7 + size) % 251 for i in range(size)))
    (cand,) = discover(tmp_path).candidates
    with path.open("rb") as f:
        info = os.fstat(f.fileno())
        data = f.read()
    assert content_fingerprint(cand, info, data) == file_fingerprint(cand)
    assert content_fingerprint(cand, info, data + b"x") is None
    read, mark = worker.read_first(cand)
    assert read.data == data
    assert mark == file_fingerprint(cand)


def test_taken_is_none_for_a_file_that_cannot_be_opened(tmp_path: Path) -> None:
    directory = healthy_set(tmp_path / "d", world=1)
    (cand,) = discover(directory).candidates
    assert taken(cand) == file_fingerprint(cand)
    cand.path.unlink()
    assert taken(cand) is None


def test_a_cluster_load_fingerprints_every_dump_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers elsewhere see the files through another mount (another device number): the
    fingerprints are taken here, all before the executor reads any file."""
    import concurrent.futures as cf

    from frtrace.load.workers.executors import FuturesExecutor

    directory = healthy_set(tmp_path / "d", world=3)
    order: list[str] = []
    real_identity = cache_mod.DirectoryCache._identity

    def identity(self: Any, files: Any = None) -> Any:
        if self.identity is None:
            order.append("fingerprints")
        return real_identity(self, files)

    monkeypatch.setattr(cache_mod.DirectoryCache, "_identity", identity)
    with cf.ThreadPoolExecutor(1) as pool:
        executor = FuturesExecutor(pool, workers=1)
        real_parse = executor.parse

        def parse(candidates: Any, consume: Any) -> None:
            order.append("read")
            real_parse(candidates, consume)

        executor.parse = parse  # type: ignore[method-assign]
        loaded = load_dumps(directory, cache=True, scheduler=executor)
    assert order[:2] == ["fingerprints", "read"]
    assert loaded.loaded_ranks == (0, 1, 2)
    assert _manifest()["files"] == [file_fingerprint(c) for c in discover(directory).candidates]
    _no_reading(monkeypatch)
    _same(load_dumps(directory, cache=True), loaded)
