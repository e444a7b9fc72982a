"""A real Dask cluster on 127.0.0.1 (a `dask scheduler` and two `dask worker` processes) reads the
dumps: the reports equal a local run's, a damaged file and dead workers included."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace.cli import app
from frtrace.load.dumpset import DumpSet
from frtrace.load.tables import load_dumps
from frtrace.load.workers.executors import dask_executor
from frtrace.pipeline import analyze_dumps
from frtrace.report.json import render_json
from tests.conftest import GLOO, fixture_sets, healthy_set
from tests.load.workers.executor_hooks import KillsItsWorker, SlowOnce

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("distributed") is None,
        reason="dask.distributed is not installed (pip install 'frtrace[dask]')",
    ),
    pytest.mark.xdist_group("dask"),  # on one xdist worker: one cluster (the module's fixture)
]

ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 60  # a busy 2-core machine imports distributed in ~3 s per process


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process and everything it started (its own process group); bounded."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address of a scheduler with two single-threaded workers, all on loopback."""
    from distributed import Client

    work = tmp_path_factory.mktemp("dask")
    info = work / "scheduler.json"
    env = os.environ | {
        "PYTHONPATH": str(ROOT),  # the workers import tests.load.workers.executor_hooks
        "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1",  # a task may kill 2 workers
    }
    dask = [sys.executable, "-m", "dask"]
    log = (work / "cluster.log").open("wb")
    serve = "--host 127.0.0.1 --port 0 --no-dashboard --scheduler-file".split()
    procs = [
        subprocess.Popen(
            [*dask, "scheduler", *serve, str(info)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=work,
            env=env,
            start_new_session=True,
        )
    ]
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert info.exists(), (work / "cluster.log").read_text()[-2000:]
        time.sleep(0.2)  # written in one go, but read it whole
        address = json.loads(info.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        for _ in range(2):
            work_opts = "--host 127.0.0.1 --nthreads 1 --no-dashboard --death-timeout 60"
            procs.append(
                subprocess.Popen(
                    [*dask, "worker", address, *work_opts.split(), "--memory-limit", "2GB"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=work,
                    env=env,
                    start_new_session=True,
                )
            )
        with Client(address, timeout=START_TIMEOUT_S) as client:
            client.wait_for_workers(2, timeout=START_TIMEOUT_S)
        yield address
    finally:
        for proc in reversed(procs):
            _stop(proc)
        log.close()


def _report(dumps: DumpSet) -> str:
    return render_json(analyze_dumps(dumps))


def _damaged_copy(tmp_path: Path) -> Path:
    directory = tmp_path / "mesh_stall"
    shutil.copytree(GLOO / "mesh_stall", directory)
    (directory / "rank_3").write_bytes((directory / "rank_3").read_bytes()[:300])  # truncated
    return directory


def test_distributed_reports_equal_local_ones(scheduler: str, tmp_path: Path) -> None:
    """Every Gloo fixture, every NCCL scenario in two formats, a truncated file: same report."""
    formats = ("gloo", "2.10-pickle", "2.4-json")
    sets = [d for d in fixture_sets() if d.name in formats or d.parent.name in formats]
    sets.append(_damaged_copy(tmp_path))
    with dask_executor(scheduler) as engine:
        assert engine.workers == 2
        for directory in sets:
            local, remote = load_dumps(directory), load_dumps(directory, scheduler=engine)
            assert _report(remote) == _report(local), directory
            assert remote.problems == local.problems
    assert remote.unreadable_ranks == (3,)


def test_cli_scheduler_option_gives_the_local_output(scheduler: str, tmp_path: Path) -> None:
    """`frtrace analyze --scheduler tcp://...` prints what the local run prints, exit code too."""
    directory = _damaged_copy(tmp_path)
    runner = CliRunner()
    local = runner.invoke(app, ["analyze", "-d", str(directory), "-f", "json", "--no-cache"])
    remote = runner.invoke(
        app, ["analyze", "-d", str(directory), "-f", "json", "--no-cache", "--scheduler", scheduler]
    )
    assert remote.exit_code == local.exit_code == 1
    assert remote.stdout == local.stdout
    assert remote.stderr == local.stderr  # the same one-line problem for rank_3


def test_a_worker_killed_mid_run_costs_nothing(scheduler: str, tmp_path: Path) -> None:
    """The worker reading one file is killed (SIGKILL) mid-task: its files are read again
    elsewhere and the report equals the local one."""
    directory = healthy_set(tmp_path / "dumps", world=8, steps=30)
    marker = tmp_path / "pid"
    out: dict[str, DumpSet | BaseException] = {}

    def run() -> None:
        try:
            with dask_executor(scheduler) as engine:
                engine.task = SlowOnce("nccl_trace_rank_5", str(marker))
                out["dumps"] = load_dumps(directory, scheduler=engine)
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the slow task never started"
    time.sleep(0.1)
    os.kill(int(marker.read_text()), signal.SIGKILL)
    thread.join(timeout=60)
    assert not thread.is_alive(), "the run did not finish after its worker died"
    assert "error" not in out, out.get("error")
    dumps = out["dumps"]
    assert isinstance(dumps, DumpSet)
    assert dumps.loaded_ranks == tuple(range(8))
    assert _report(dumps) == _report(load_dumps(directory))


def test_a_file_that_kills_every_worker_is_reported(scheduler: str, tmp_path: Path) -> None:
    """A file whose reader dies on every try: one line naming it; every other rank is read."""
    directory = healthy_set(tmp_path / "dumps", world=6, steps=10)
    with dask_executor(scheduler) as engine:
        engine.task = KillsItsWorker("nccl_trace_rank_2")
        dumps = load_dumps(directory, scheduler=engine)
    assert dumps.loaded_ranks == (0, 1, 3, 4, 5)
    (problem,) = dumps.problems
    assert problem.fatal and problem.rank == 2
    assert problem.message.startswith(f"{directory / 'nccl_trace_rank_2'}: the Dask workers")
    assert "KilledWorker" in problem.message and "\n" not in problem.message


def test_a_large_set_is_cut_on_the_workers_and_names_the_same_ranks(
    scheduler: str, tmp_path: Path
) -> None:
    """With the cut from the first byte: the folds and the tree of merges run on the workers,
    the coordinator holds a fraction of the entries, and the report names what a local run
    names, stragglers included, and says what was left out."""
    directory = tmp_path / "straggler"
    argv = [sys.executable, "-m", "frsim", "--world", "32", "--entries", "300"]
    argv += ["--fault", "straggler", "--seed", "5", "--out", str(directory)]
    subprocess.run(argv, check=True, cwd=ROOT, capture_output=True)
    with dask_executor(scheduler, frontier_min_bytes=0) as engine:
        remote = load_dumps(directory, scheduler=engine)
    local = load_dumps(directory)
    assert remote.window is not None and remote.window.cutoffs
    assert remote.entries.num_rows < 0.7 * local.entries.num_rows
    assert remote.files.equals(local.files)  # (each dump's own count, as it was read)
    here, there = analyze_dumps(local), analyze_dumps(remote)
    assert (there.verdict, there.culprit_ranks) == (here.verdict, here.culprit_ranks)
    assert [s.rank for s in there.stragglers] == [s.rank for s in here.stragglers]
    assert there.stragglers
    assert "entries of settled ops left out" in render_json(there)


def test_a_cut_report_is_said_and_never_cached_for_a_later_run(
    scheduler: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`analyze --scheduler` on a set it cuts: the note in the report, exit code as a local
    run's, and neither its tables nor its diagnosis stored (a later local run reads every
    entry and says nothing was left out)."""
    monkeypatch.setattr("frtrace.load.workers.cluster.FRONTIER_MIN_BYTES", 0)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("FRTRACE_NO_CACHE", raising=False)
    directory = healthy_set(tmp_path / "dumps", world=8, steps=60)
    runner = CliRunner()
    remote = runner.invoke(
        app, ["analyze", "-d", str(directory), "-f", "json", "--scheduler", scheduler]
    )
    local = runner.invoke(app, ["analyze", "-d", str(directory), "-f", "json"])
    assert remote.exit_code == local.exit_code == 0, remote.output
    assert "entries of settled ops left out" in remote.stdout
    assert "left out" not in local.stdout
    assert json.loads(remote.stdout)["verdict"] == json.loads(local.stdout)["verdict"]
