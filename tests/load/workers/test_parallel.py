"""Files parsed in worker processes reach the tables in file order, whatever order they finish."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from frtrace.errors import DumpFormatError
from frtrace.incident.discover import discover
from frtrace.load.options import LoadOptions
from frtrace.load.read.parse import ParsedDump
from frtrace.load.tables import build_dump_set, load_discovered, load_dumps
from frtrace.load.workers import parallel
from tests.conftest import healthy_set, make_dump, make_entry, write_pickle


def _set_with_damage(tmp_path: Path) -> Path:
    directory = healthy_set(tmp_path / "dumps", world=9, steps=40)
    (directory / "nccl_trace_rank_4").write_bytes(b"\x80\x05damaged")  # a truncated pickle
    return directory


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_consume_gets_every_result_in_file_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)  # workers even for small files
    candidates = discover(_set_with_damage(tmp_path)).candidates
    expected = parallel.parse_candidates(candidates, jobs=jobs)
    seen: list[tuple[int, ParsedDump | DumpFormatError]] = []
    rest = parallel.parse_candidates(
        candidates, jobs=jobs, consume=lambda i, r: seen.append((i, r))
    )
    assert rest == []
    assert [i for i, _ in seen] == list(range(len(candidates)))
    for (_, got), want in zip(seen, expected, strict=True):
        assert type(got) is type(want)
        if isinstance(got, ParsedDump) and isinstance(want, ParsedDump):
            assert got.entries.equals(want.entries)
        else:
            assert str(got) == str(want)


def test_streamed_tables_equal_tables_built_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    directory = _set_with_damage(tmp_path)
    streamed = load_dumps(directory, jobs=2)
    discovery = discover(directory)
    at_once = build_dump_set(
        directory, discovery.candidates, parallel.parse_candidates(discovery.candidates)
    )
    assert streamed.entries.equals(at_once.entries)
    assert streamed.files.equals(at_once.files)
    assert streamed.groups.equals(at_once.groups)
    assert streamed.stacks.equals(at_once.stacks)
    assert streamed.unreadable_ranks == at_once.unreadable_ranks == (4,)
    assert streamed.entries.column("input_sizes").num_chunks == 1


def test_in_process_fallback_streams_in_order_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no worker process can be started, files are read here, still handed over."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel._WatchedPool, "start", lambda self: None)
    candidates = discover(_set_with_damage(tmp_path)).candidates
    seen: list[int] = []
    parallel.parse_candidates(candidates, jobs=2, consume=lambda i, r: seen.append(i))
    assert seen == list(range(len(candidates)))


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_worker_lost_midway_costs_only_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    """A worker is sent its next file before its result is taken in: when it crashes, or
    exits after running out of memory, that next file is read by its replacement."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    for rank in range(9):
        write_pickle(tmp_path / f"rank_{rank}", make_dump([make_entry()], world=9))
    # a tuple nested 300,000 deep as a dict key: hashing it kills the reader (SIGSEGV)
    (tmp_path / "rank_3").write_bytes(b"\x80\x02}" + b")" + b"\x85" * 300_000 + b"K\x01s.")
    # a memo index of 2**31: the reader runs out of memory, reports it and exits
    (tmp_path / "rank_6").write_bytes(b"\x80\x02]r" + struct.pack("<I", 2**31 - 1) + b".")
    dumps = load_dumps(tmp_path, jobs=jobs)
    assert dumps.loaded_ranks == (0, 1, 2, 4, 5, 7, 8)
    problems = {p.rank: p.message for p in dumps.problems}
    assert "crashed (killed by SIGSEGV)" in problems[3]
    assert "more memory" in problems[6]


def test_meanwhile_runs_beside_the_workers_and_no_fork_meets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's work (the analysis imported) runs in a thread once the workers are
    started; a worker started to replace one that crashed waits for it to end (a fork would
    copy the locks it holds); it has ended when the load returns, its error swallowed."""
    import threading
    import time

    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    for rank in range(40):
        write_pickle(tmp_path / f"rank_{rank}", make_dump([make_entry()], world=40))
    # (hashing a tuple nested 300,000 deep as a dict key kills the reader: SIGSEGV)
    (tmp_path / "rank_1").write_bytes(b"\x80\x02}" + b")" + b"\x85" * 300_000 + b"K\x01s.")
    events: list[str] = []
    start = parallel._WatchedPool.start

    def starting(self: parallel._WatchedPool) -> object:
        started = start(self)
        events.append("fork")  # (once forked)
        return started

    def meanwhile() -> None:
        beside = threading.current_thread() is not threading.main_thread()
        events.append("begun" if beside else "in the main thread")
        time.sleep(0.5)
        events.append("ended")
        raise RuntimeError("its errors are the caller's to meet again")

    monkeypatch.setattr(parallel._WatchedPool, "start", starting)
    dumps = load_discovered(discover(tmp_path), LoadOptions(jobs=2, meanwhile=meanwhile))
    assert dumps.loaded_ranks == tuple(r for r in range(40) if r != 1)
    assert events[:3] == ["fork", "fork", "begun"] and "ended" in events
    replacements = [i for i, e in enumerate(events) if e == "fork"][2:]
    assert replacements and min(replacements) > events.index("ended")


def test_meanwhile_runs_first_where_no_worker_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel._WatchedPool, "start", lambda self: None)
    candidates = discover(_set_with_damage(tmp_path)).candidates
    done: list[int] = []
    parallel.parse_candidates(candidates, jobs=2, meanwhile=lambda: done.append(1))
    assert done == [1]


def test_a_second_file_that_cannot_be_sent_is_read_all_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new worker's second file (``parallel.IN_FLIGHT``) cannot be sent: the worker reads
    its first, and every file is read once, in order, with no problem reported."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    for rank in range(6):
        write_pickle(tmp_path / f"rank_{rank}", make_dump([make_entry()], world=6))
    sends = 0
    send = parallel._WatchedPool.send

    def second_fails(self: parallel._WatchedPool, worker: object, index: int) -> bool:
        nonlocal sends
        sends += 1
        return False if sends == 2 else send(self, worker, index)  # type: ignore[arg-type]

    monkeypatch.setattr(parallel._WatchedPool, "send", second_fails)
    dumps = load_dumps(tmp_path, jobs=1)
    assert dumps.loaded_ranks == tuple(range(6)) and not dumps.problems
    assert dumps.entries.column("rank").to_pylist() == list(range(6))
    assert sends > 6
