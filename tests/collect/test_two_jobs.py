"""Two jobs on one host: collect refuses to mix their ranks, names both, and picks one by --env."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from frtrace.collect.procs import RankProcess, find_rank_processes
from frtrace.collect.run import one_job
from frtrace.errors import SeveralJobs


def _proc(rank: int, pid: int, **env: str) -> RankProcess:
    return RankProcess(pid=pid, rank=rank, local_rank=rank, cmdline="python train.py", env=env)


def test_one_job_passes_and_two_are_refused_with_both_named() -> None:
    one_job([_proc(r, 100 + r, MASTER_PORT="29500") for r in range(4)])
    two = [_proc(r, 100 + r, MASTER_PORT="29500") for r in range(2)]
    two += [_proc(r, 200 + r, MASTER_PORT="29600") for r in range(2)]
    with pytest.raises(SeveralJobs) as err:
        one_job(two)
    text = str(err.value)
    assert "2 jobs" in text and "MASTER_PORT=29500 (ranks 0-1" in text
    assert "MASTER_PORT=29600 (ranks 0-1" in text and "--env MASTER_PORT=29500" in text
    assert "\n" not in text


def test_the_hint_names_the_variable_that_tells_the_jobs_apart() -> None:
    """Two jobs on one host share MASTER_ADDR (127.0.0.1): the hint names their port."""
    two = [_proc(r, 100 + r, MASTER_ADDR="127.0.0.1", MASTER_PORT="29500") for r in range(2)]
    two += [_proc(r, 200 + r, MASTER_ADDR="127.0.0.1", MASTER_PORT="29600") for r in range(2)]
    with pytest.raises(SeveralJobs) as err:
        one_job(two)
    assert str(err.value).endswith("e.g. frtrace collect DIR --env MASTER_PORT=29500")
    runs = [_proc(0, 1, MASTER_ADDR="10.0.0.1", TORCHELASTIC_RUN_ID="a"), _proc(0, 2)]
    runs += [_proc(1, 3, MASTER_ADDR="10.0.0.1", TORCHELASTIC_RUN_ID="b")]
    with pytest.raises(SeveralJobs) as err:  # no port: the run id, never the shared address
        one_job(runs)
    assert str(err.value).endswith("e.g. frtrace collect DIR --env TORCHELASTIC_RUN_ID=a")
    same = [_proc(0, 1, MASTER_ADDR="10.0.0.1"), _proc(0, 2, MASTER_ADDR="10.0.0.1")]
    with pytest.raises(SeveralJobs) as err:  # nothing tells them apart: said so
        one_job(same)
    assert str(err.value).endswith("(a variable whose value differs between the jobs)")


def test_a_rank_held_twice_without_a_job_variable_is_refused() -> None:
    with pytest.raises(SeveralJobs, match="one rank number held by several processes"):
        one_job([_proc(0, 1), _proc(0, 2)])


@pytest.fixture
def two_jobs() -> Iterator[str]:
    """Four sleeping 'ranks' of two jobs (ports 29500 and 29600), tagged for this test."""
    tag = uuid.uuid4().hex
    procs = []
    for port in ("29500", "29600"):
        for rank in (0, 1):
            env = dict(
                os.environ,
                RANK=str(rank),
                MASTER_PORT=port,
                MASTER_ADDR="127.0.0.1",
                FRTRACE_TEST_JOB=tag,
            )
            procs.append(
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
            )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if len(find_rank_processes({"FRTRACE_TEST_JOB": tag})) == 4:
            break
        time.sleep(0.05)
    try:
        yield tag
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _collect(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("frtrace")
    return subprocess.run(
        [str(exe), "collect", str(out), "--no-analyze", "--no-pyspy", "--timeout", "1", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_console_script_names_both_jobs_and_collects_one(two_jobs: str, tmp_path: Path) -> None:
    if not Path(sys.executable).with_name("frtrace").exists():
        pytest.skip("the console script is not installed next to this Python")
    mine = f"FRTRACE_TEST_JOB={two_jobs}"
    both = _collect(tmp_path / "both", "--env", mine)
    assert both.returncode == 2, both.stdout + both.stderr
    assert "2 jobs on this host" in both.stderr and "MASTER_PORT=29600" in both.stderr
    assert not (tmp_path / "both").exists()  # nothing written for a refused collection
    one = _collect(tmp_path / "one", "--env", mine, "--env", "MASTER_PORT=29600")
    assert "2 jobs" not in one.stderr
    rows = [line.split() for line in one.stdout.splitlines()[3:]]
    pids = {row[2] for row in rows if row and row[0].isdigit()}  # rank, host, pid, ...
    assert len(pids) == 2, one.stdout
