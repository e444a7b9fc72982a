"""The executor seam: any concurrent.futures executor gives the local tables; failures reported."""

from __future__ import annotations

import concurrent.futures as cf
import shutil
import sys
from pathlib import Path

import pytest

from frtrace.errors import ReaderFailedError
from frtrace.load.dumpset import DumpSet
from frtrace.load.tables import load_dumps
from frtrace.load.workers import executors
from frtrace.load.workers.executors import FuturesExecutor, LocalProcesses
from tests.conftest import GLOO, healthy_set
from tests.load.workers.executor_hooks import Bundled, RaisesOn, Stalls

# Each file's own result, or one bundle a task (a cluster's cut history, ``load.workers.bundle``)
TASKS = pytest.mark.parametrize("task", [executors.parse_files, Bundled()], ids=["files", "bundle"])


def _same(a: DumpSet, b: DumpSet) -> None:
    for name in ("entries", "stacks", "groups", "pg_status", "files"):
        assert getattr(a, name).equals(getattr(b, name)), name
    assert a.problems == b.problems


def _damaged(tmp_path: Path) -> Path:
    directory = healthy_set(tmp_path / "dumps", world=9, steps=20)
    (directory / "nccl_trace_rank_4").write_bytes(b"\x80\x05damaged")
    return directory


@TASKS
@pytest.mark.parametrize("files_per_task", [1, 2, 16])
def test_any_futures_executor_gives_the_local_tables(
    tmp_path: Path, files_per_task: int, task: executors.Task
) -> None:
    """Threads standing in for a cluster: same tables, problems and order as the local run
    (a damaged file in the middle of a task included)."""
    directory = _damaged(tmp_path)
    local = load_dumps(directory, scheduler=LocalProcesses(jobs=2))
    with cf.ThreadPoolExecutor(3) as pool:
        engine = FuturesExecutor(pool, workers=3, files_per_task=files_per_task, task=task)
        remote = load_dumps(directory, scheduler=engine)
    _same(local, remote)
    assert remote.unreadable_ranks == (4,)


@TASKS
def test_relative_paths_come_back_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: executors.Task
) -> None:
    """Workers get absolute paths; results and messages name the path as the user spelled it."""
    shutil.copytree(GLOO / "never_joins", tmp_path / "d")
    (tmp_path / "d" / "rank_2").write_bytes(b"junk")
    monkeypatch.chdir(tmp_path)
    local = load_dumps(Path("d"))
    with cf.ThreadPoolExecutor(2) as pool:
        engine = FuturesExecutor(pool, workers=2, task=task)
        remote = load_dumps(Path("d"), scheduler=engine)
    _same(local, remote)
    assert any(p.message.startswith("d/rank_2: ") for p in remote.problems)


@pytest.mark.parametrize(
    "task", [RaisesOn("nccl_trace_rank_1"), Bundled("nccl_trace_rank_1")], ids=["files", "bundle"]
)
def test_a_failing_task_is_retried_file_by_file(tmp_path: Path, task: executors.Task) -> None:
    """A batch whose task fails is sent again one file per task: only the bad file is lost,
    and it is reported in one line naming it, never silently missing."""
    directory = healthy_set(tmp_path / "dumps", world=6, steps=5)
    with cf.ThreadPoolExecutor(2) as pool:
        engine = FuturesExecutor(pool, workers=1, files_per_task=3, task=task, engine="Test")
        dumps = load_dumps(directory, scheduler=engine)
    assert dumps.loaded_ranks == (0, 2, 3, 4, 5)
    (problem,) = dumps.problems
    assert problem.fatal and problem.rank == 1
    assert problem.message.startswith(f"{directory / 'nccl_trace_rank_1'}: the Test workers")
    assert "ConnectionError" in problem.message and "\n" not in problem.message


def test_a_stalled_task_is_reported_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task past its time limit costs its files, reported; the run does not hang."""
    monkeypatch.setattr(executors, "_limit_s", lambda batch: 1.0)
    directory = healthy_set(tmp_path / "dumps", world=4, steps=5)
    pool = cf.ThreadPoolExecutor(2)
    engine = FuturesExecutor(
        pool, workers=2, files_per_task=1, task=Stalls("nccl_trace_rank_2", 4.0)
    )
    dumps = load_dumps(directory, scheduler=engine)
    pool.shutdown(wait=False, cancel_futures=True)  # the stalled thread ends on its own
    assert dumps.unreadable_ranks == (2,)
    assert "took longer than" in dumps.problems[0].message


def test_results_reach_the_tables_in_file_order(tmp_path: Path) -> None:
    """Whatever order tasks finish in, consume sees indices 0, 1, 2, ... once each."""
    directory = healthy_set(tmp_path / "dumps", world=7, steps=3)
    from frtrace.incident.discover import discover

    seen: list[int] = []
    with cf.ThreadPoolExecutor(4) as pool:
        FuturesExecutor(pool, workers=4, files_per_task=1).parse(
            discover(directory).candidates, lambda i, r: seen.append(i)
        )
    assert seen == list(range(7))


def test_reader_failed_error_type_survives_relocation() -> None:
    """Relocated errors keep their type (the tables and the exit code depend on it)."""
    from frtrace.incident.discover import Candidate

    remote = Candidate(path=Path("/abs/d/r_1"), rank=1, prefix="r_", encoding="auto", size_bytes=1)
    local = Candidate(path=Path("d/r_1"), rank=1, prefix="r_", encoding="auto", size_bytes=1)
    moved = executors._relocate(ReaderFailedError("/abs/d/r_1: crashed"), remote, local)
    assert type(moved) is ReaderFailedError and str(moved) == "d/r_1: crashed"


def test_scheduler_without_dask_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--scheduler without dask.distributed: exit 2, one line naming the extra to install."""
    from typer.testing import CliRunner

    from frtrace.cli import app

    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as if not installed
    directory = healthy_set(tmp_path / "dumps")
    result = CliRunner().invoke(
        app, ["analyze", "-d", str(directory), "--scheduler", "tcp://127.0.0.1:1"]
    )
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "pip install 'frtrace[dask]'" in result.stderr
