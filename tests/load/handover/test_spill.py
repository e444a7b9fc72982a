"""Entry columns on disk (frtrace.load.handover.spill): the same tables and verdicts as in memory.

A large set's entry columns (all but the booleans) are written to disk as results arrive and
memory-mapped back. These tests force that path on every committed fixture set and compare
with the in-memory path, write through a disk that fills up, and check nothing is left behind.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from frtrace.load import schema
from frtrace.load.dumpset import DumpSet
from frtrace.load.handover import spill
from frtrace.load.handover.spill import SpilledColumn
from frtrace.load.tables import load_dumps
from frtrace.pipeline import analyze_dumps
from frtrace.report.json import render_json
from tests.conftest import fixture_sets

SCENARIOS = fixture_sets()


def _load(directory: Path, *, spilled: bool, monkeypatch: pytest.MonkeyPatch) -> DumpSet:
    monkeypatch.delenv("FRTRACE_SPILL_MIN_BYTES", raising=False)
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 0 if spilled else 1 << 62)
    return load_dumps(directory, jobs=1)


@pytest.mark.parametrize("directory", SCENARIOS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_spilled_tables_and_reports_equal_the_in_memory_ones(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = _load(directory, spilled=False, monkeypatch=monkeypatch)
    spilled = _load(directory, spilled=True, monkeypatch=monkeypatch)
    assert spilled.entries.schema == kept.entries.schema
    for name in schema.ENTRIES.names:
        assert spilled.entries.column(name).equals(kept.entries.column(name)), name
    assert render_json(analyze_dumps(spilled)) == render_json(analyze_dumps(kept))


def test_entry_columns_are_memory_mapped_and_the_files_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    directory = next(d for d in SCENARIOS if "nccl" in str(d))
    dumps = _load(directory, spilled=True, monkeypatch=monkeypatch)
    maps = Path("/proc/self/maps").read_text()
    # (the entries' Arrow IPC file, written once: frtrace.load.handover.ipcfile)
    assert re.search(r"/spill/[^/\s]+/entries\.arrow \(deleted\)", maps)
    spill.finish_removing()
    assert not any((tmp_path / "cache" / "frtrace" / "spill").iterdir())  # nothing left
    del dumps


def test_released_pages_are_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping the mapped columns' pages from memory (after matching) loses no value."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    directory = next(d for d in SCENARIOS if "nccl" in str(d))
    dumps = _load(directory, spilled=True, monkeypatch=monkeypatch)
    before = dumps.entries.to_pylist()
    spill.release_pages()
    assert dumps.entries.to_pylist() == before


class _FullDisk:
    """A file that takes ``room`` bytes (the last of them in a short write, as a raw file may),
    then fails as a full disk does."""

    def __init__(self, real: object, room: int) -> None:
        self.real, self.room = real, room

    def write(self, data: memoryview) -> int:
        if not self.room:
            raise OSError(28, "No space left on device")
        part = data[: self.room]
        self.room -= part.nbytes
        return self.real.write(part)  # type: ignore[attr-defined, no-any-return]

    def close(self) -> None:
        self.real.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("write_bytes", [1, 1 << 20], ids=["each-chunk", "batched"])
@pytest.mark.parametrize("room", [0, 3 * 8, 4 * 8 + 3])
def test_a_full_disk_keeps_the_column_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_bytes: int, room: int
) -> None:
    """Chunks are written a MiB at a time (or each, here): whatever the disk took before it
    filled up, part of a chunk included, the column reads back whole."""
    monkeypatch.setattr(spill, "WRITE_BYTES", write_bytes)
    column = SpilledColumn(tmp_path, "record_id", np.dtype(np.int64))
    column.out = _FullDisk(column.out, room=room)  # type: ignore[assignment]
    column.append(np.array([1, 2, 3]), None)
    column.append(np.array([4, 5]), np.array([True, False]))  # fails: read back, goes on
    column.append(np.array([6]), None)
    got = column.finish(pa.int64())
    assert got.to_pylist() == [1, 2, 3, 4, None, 6]
    assert not any(tmp_path.iterdir())


def test_chunks_are_written_a_mib_at_a_time(tmp_path: Path) -> None:
    column = SpilledColumn(tmp_path, "record_id", np.dtype(np.int64))
    writes: list[int] = []
    real = column.out
    assert real is not None

    class Counted:
        def write(self, data: memoryview) -> int:
            writes.append(data.nbytes)
            return real.write(data)  # type: ignore[no-any-return]

        def close(self) -> None:
            real.close()

    column.out = Counted()  # type: ignore[assignment]
    for i in range(100):  # 100 chunks of 16 KB, as 100 files of 2,000 entries
        column.append(np.full(2000, i, dtype=np.int64), None)
    got = column.finish(pa.int64())
    assert len(writes) == 2 and sum(writes) == 100 * 2000 * 8
    assert got.to_numpy().reshape(100, 2000)[:, 0].tolist() == list(range(100))


def test_an_empty_column_is_not_mapped(tmp_path: Path) -> None:
    column = SpilledColumn(tmp_path, "op_id", np.dtype(np.int64))
    assert column.finish(pa.int64()).to_pylist() == []
    assert not any(tmp_path.iterdir())


def test_orphans_of_dead_processes_are_removed(tmp_path: Path) -> None:
    base = tmp_path / "spill"
    dead = base / f"{spill._host()}-999999999-dead"
    dead.mkdir(parents=True)
    made = spill.spill_directory(tmp_path / "v1")
    assert made is not None and made.parent == base
    assert not dead.exists()
    spill.remove_spill_directory(made)
    assert not made.exists()


def test_only_this_hosts_unlocked_orphans_are_removed(tmp_path: Path) -> None:
    """A cache shared over NFS: another host's load (its pid means nothing here) and a load
    that holds its lock keep their directories; this host's dead, unlocked ones go."""
    import fcntl

    base = tmp_path / "spill"
    other = base / "otherhost-999999999-abcd"  # another host's live load
    older = base / "999999996-abcd"  # an earlier frtrace's (which host's cannot be told)
    older.mkdir(parents=True)
    held = base / f"{spill._host()}-999999998-abcd"  # its lock held (same name on another host)
    dead = base / f"{spill._host()}-999999997-abcd"
    for folder in (other, held, dead):
        folder.mkdir(parents=True)
        (folder / spill.LOCK_NAME).touch()
        (folder / "entries.values").write_bytes(b"x")
    with open(held / spill.LOCK_NAME, "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        made = spill.spill_directory(tmp_path / "v1")
        assert made is not None
        assert other.exists() and held.exists() and older.exists() and not dead.exists()
        assert made.name.startswith(f"{spill._host()}-{os.getpid()}-")
        # this load's own directory is locked while it lives: another load leaves it
        again = spill.spill_directory(tmp_path / "v1")
        assert again is not None and made.exists()
    spill.remove_spill_directory(made)
    spill.remove_spill_directory(again)


def test_spill_directories_and_files_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0700 directories and 0600 files under the usual umask: they hold what the dumps hold."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    old = os.umask(0o022)
    try:
        made = spill.spill_directory(tmp_path / "cache" / "frtrace" / "v1")
        assert made is not None
        column = SpilledColumn(made, "op_id", np.dtype(np.int64))
        column.append(np.arange(4), None)
        column._write_pending()
        assert _mode(column.path) == 0o600
        for folder in (made, made.parent, tmp_path / "cache" / "frtrace"):
            assert _mode(folder) == 0o700, folder
        assert column.finish(pa.int64()).to_pylist() == [0, 1, 2, 3]
        spill.remove_spill_directory(made)
    finally:
        os.umask(old)


def test_a_base_directory_of_another_owner_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link planted where the spill base would be is never written through."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "spill").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setattr(spill, "FALLBACK_BASES", (tmp_path / "disk",))
    made = spill.spill_directory(tmp_path / "cache" / "v1")
    assert made is not None and made.parent == tmp_path / "disk" / spill.fallback_name()
    assert not any((tmp_path / "elsewhere").iterdir())
    spill.remove_spill_directory(made)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


SETS = ["nccl/host_stall/2.10-pickle", "gloo/never_joins", "damaged"]


@pytest.mark.parametrize("name", SETS)
def test_every_table_command_prints_the_same_through_the_console_script(
    tmp_path: Path, name: str
) -> None:
    """analyze, show, summary and export, as a user runs them, with the detail columns on disk
    (FRTRACE_SPILL_MIN_BYTES=0) and in memory: the same output, the same Parquet."""
    from tests.conftest import FIXTURES
    from tests.test_commands import frtrace_script

    directory = FIXTURES / name
    assert directory.is_dir()
    out: dict[str, list[str]] = {}
    for mode, threshold in (("memory", str(1 << 62)), ("disk", "0")):
        env = {
            **os.environ,
            "FRTRACE_SPILL_MIN_BYTES": threshold,
            "FRTRACE_NO_CACHE": "1",  # (each run reads the dumps)
            "XDG_CACHE_HOME": str(tmp_path / f"cache-{mode}"),
        }
        runs = [
            ["analyze", str(directory), "-f", "json", "--allow-partial"],
            ["analyze", str(directory)],
            ["show", str(directory)],
            ["summary", str(directory)],
            ["export", str(directory), "-o", str(tmp_path / mode)],
        ]
        printed = []
        for args in runs:
            proc = subprocess.run(
                [frtrace_script(), *args], env=env, capture_output=True, text=True, check=False
            )
            assert "Traceback" not in proc.stderr, proc.stderr
            printed.append(f"{proc.returncode}\n{proc.stdout.replace(mode, 'MODE')}")
        out[mode] = printed
        spilled = tmp_path / f"cache-{mode}" / "frtrace" / "spill"
        assert not spilled.exists() or not any(spilled.iterdir())  # nothing left behind
    assert out["disk"] == out["memory"]
    for table in ("entries", "groups", "stacks"):
        kept = pq.read_table(tmp_path / "memory" / f"{table}.parquet")
        assert pq.read_table(tmp_path / "disk" / f"{table}.parquet").equals(kept), table


def test_the_threshold_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRTRACE_SPILL_MIN_BYTES", "0")
    assert spill.spill_min_bytes() == 0
    monkeypatch.setenv("FRTRACE_SPILL_MIN_BYTES", "lots")
    assert spill.spill_min_bytes() == spill.SPILL_MIN_BYTES
    monkeypatch.delenv("FRTRACE_SPILL_MIN_BYTES")
    assert spill.spill_min_bytes() == spill.SPILL_MIN_BYTES


def test_a_memory_filesystem_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Columns spilled to a tmpfs would be memory all the same: the next candidate on a disk
    takes them, and where every candidate is in memory they stay in the process."""
    cache, disk = tmp_path / "cache", tmp_path / "disk"
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\ntmpfs {cache} tmpfs rw,nosuid 0 0\n")
    monkeypatch.setattr(spill, "MOUNTS", mounts)
    monkeypatch.setattr(spill, "FALLBACK_BASES", (disk,))
    where = spill.spill_directory(cache / "frtrace")
    assert where is not None and where.parent == disk / spill.fallback_name()
    mounts.write_text("tmpfs / tmpfs rw 0 0\n")
    assert spill.spill_directory(cache / "frtrace") is None
    mounts.write_text("/dev/vda / ext4 rw 0 0\n")
    where = spill.spill_directory(cache / "frtrace")
    assert where is not None and where.parent == cache / "spill"
