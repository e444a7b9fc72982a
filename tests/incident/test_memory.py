"""Memory bounded by the machine's: worker limits shared among the workers, the same guard for
files read in this process (no workers, a Dask worker), archive members held in the parent."""

from __future__ import annotations

import concurrent.futures as cf
import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from frtrace.errors import DumpTooLargeError
from frtrace.incident import archive, memory
from frtrace.incident.discover import Candidate
from frtrace.load.read.declared import declared_bytes
from frtrace.load.read.parse import ParsedDump
from frtrace.load.read.unpickle import read_payload
from frtrace.load.tables import load_dumps
from frtrace.load.workers import parallel
from frtrace.load.workers.executors import FuturesExecutor
from tests.conftest import GLOO

HANG = GLOO / "never_joins"  # ranks 0-3
MACHINE = 256 << 20  # FRTRACE_MEMORY_MAX_BYTES in these tests: a file may take 128 MiB
MEMO_INDEX = 1 << 24  # LONG_BINPUT 16M: the C unpickler zero-fills a 256 MiB memo


def _memo_bomb() -> bytes:
    """A 13-byte pickle of an empty list whose memo index asks for 256 MiB."""
    return b"\x80\x04]r" + MEMO_INDEX.to_bytes(4, "little") + b"."


@pytest.fixture
def small_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRTRACE_MEMORY_MAX_BYTES", str(MACHINE))


def _bomb_set(tmp_path: Path) -> Path:
    directory = tmp_path / "d"
    shutil.copytree(HANG, directory)
    (directory / "rank_2").write_bytes(_memo_bomb())
    return directory


def _no_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a daemon process (a Dask worker) or a sandbox: no process can be started."""
    monkeypatch.setattr(parallel._WatchedPool, "start", lambda self: None)


def _refused(result: object) -> str:
    assert isinstance(result, DumpTooLargeError), result
    message = str(result)
    assert "\n" not in message and "refused" in message
    return message


def test_the_machine_bounds_every_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    """One 1 GiB file asked for 64 GiB per worker, every worker at once: now at most an even
    share of half the machine's memory."""
    monkeypatch.setenv("FRTRACE_MEMORY_MAX_BYTES", str(8 << 30))
    assert memory.machine_bytes() == 8 << 30
    assert memory.file_allowance(1 << 30, workers=4) == 1 << 30
    assert memory.file_allowance(1 << 20, workers=1) == (512 << 20) + 64 * (1 << 20)
    assert memory.archive_bytes(4 << 30) == 2 << 30
    monkeypatch.delenv("FRTRACE_MEMORY_MAX_BYTES")
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < memory.machine_bytes() <= physical


def test_the_memory_available_is_read_again_after_a_moment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read once for the files of the next half second (a worker asks before each), then
    again: never an old answer for long."""
    meminfo = tmp_path / "meminfo"
    monkeypatch.setattr(memory, "MEMINFO", meminfo)
    monkeypatch.setattr(memory, "_AVAILABLE", [])
    monkeypatch.setattr(memory, "AVAILABLE_FOR_S", 3600.0)
    meminfo.write_text("MemTotal: 9000 kB\nMemAvailable:    2048 kB\n")
    assert memory._available() == 2048 << 10
    meminfo.write_text("MemAvailable: 1024 kB\n")
    assert memory._available() == 2048 << 10  # (within the moment: as read)
    monkeypatch.setattr(memory, "AVAILABLE_FOR_S", 0.0)
    assert memory._available() == 1024 << 10
    meminfo.unlink()
    assert memory._available() is None


def test_a_memo_bomb_read_in_this_process_is_refused_before_it_is_unpickled(
    tmp_path: Path, small_machine: None
) -> None:
    """The library reading a file itself: refused from what the pickle declares."""
    path = tmp_path / "rank_0"
    path.write_bytes(_memo_bomb())
    assert declared_bytes(_memo_bomb()) == 16 * MEMO_INDEX
    with pytest.raises(DumpTooLargeError, match=r"rank_0: refused: the pickle declares 256 MiB"):
        read_payload(path, path.stat().st_size)


def test_without_workers_a_memo_bomb_costs_its_file_only(
    tmp_path: Path, small_machine: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback that reads in this process, through load_dumps: one line, the rest loads."""
    _no_workers(monkeypatch)
    dumps = load_dumps(_bomb_set(tmp_path), jobs=1)
    assert dumps.loaded_ranks == (0, 1, 3)
    (problem,) = [p for p in dumps.problems if p.fatal]
    assert problem.rank == 2 and "rank_2: refused: the pickle declares" in problem.message


def test_a_futures_executor_without_workers_refuses_it_too(
    tmp_path: Path, small_machine: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on a Dask worker (a daemon process: it reads the files itself)."""
    _no_workers(monkeypatch)
    directory = _bomb_set(tmp_path)
    results: dict[int, object] = {}
    candidates = [
        Candidate(path=directory / f"rank_{r}", rank=r, prefix="rank_", encoding="auto",
                  size_bytes=(directory / f"rank_{r}").stat().st_size)
        for r in range(4)
    ]  # fmt: skip
    with cf.ThreadPoolExecutor(1) as pool:
        FuturesExecutor(pool, files_per_task=2).parse(candidates, results.__setitem__)
    _refused(results[2])
    assert all(isinstance(results[r], ParsedDump) for r in (0, 1, 3))


def test_a_watched_worker_gets_only_its_share(tmp_path: Path, small_machine: None) -> None:
    """In a worker (no check before unpickling there) the address-space limit holds the
    share: the memo that fitted in 512 MiB + 64 B per byte no longer does."""
    directory = _bomb_set(tmp_path)
    path = directory / "rank_2"
    cand = Candidate(path=path, rank=2, prefix="rank_", encoding="auto", size_bytes=13)
    (result,) = parallel.parse_candidates([cand], jobs=1)
    assert "more memory than" in _refused(result)


def test_archive_members_held_are_bounded_by_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quarter of the machine's memory at most, whatever MAX_ARCHIVE_BYTES says."""
    data = {p.name: p.read_bytes() for p in sorted(HANG.iterdir())}
    path = tmp_path / "d.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, content in data.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    monkeypatch.setenv("FRTRACE_MEMORY_MAX_BYTES", str(4 * (len(data["rank_0"]) + 10)))
    candidates = archive.read_archive(path).candidates
    assert [c.refused is None for c in candidates] == [True, False, False, False]
    assert "quarter of this machine's memory" in str(candidates[1].refused)
