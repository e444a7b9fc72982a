"""frtrace collect on real hung Gloo jobs: the report names the culprit and where it is stuck.

Each job is tagged with a unique FRTRACE_TEST_JOB value and collected with ``--env`` so other
jobs on a shared machine are left alone; every child is killed in ``finally``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace.cli import app
from frtrace.collect.procs import find_rank_processes, signal_caught
from frtrace.collect.run import host_folder
from frtrace.job.env import DUMP_PREFIX
from tests.collect.jobs import await_ready, free_port
from tests.conftest import SERIAL

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "collect" / "hung_job.py"
# where load_batch sleeps: the place the report must name
STUCK_AT = next(
    f"load_batch (hung_job.py:{n})"
    for n, line in enumerate(JOB.read_text().splitlines(), 1)
    if line.strip() == "time.sleep(0.05)"
)
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
    SERIAL,  # real 2- and 4-rank jobs
]


@contextmanager
def hung_job(
    tmp: Path, world: int, mode: str, *, stuck: int = 2
) -> Iterator[tuple[str, list[subprocess.Popen[str]]]]:
    """Start ``world`` ranks of tests/collect/hung_job.py; yield (tag, processes) once all
    are where they will stay; kill them all afterwards."""
    tag = uuid.uuid4().hex
    port, debug = free_port(), str(free_port())
    dumps = tmp / "job_dumps"
    procs: list[subprocess.Popen[str]] = []
    try:
        for r in range(world):
            env = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("TORCH_FR_", "TORCH_NCCL_"))
            }
            env.update(
                PYTHONPATH=str(ROOT),
                PYTHONUNBUFFERED="1",
                RANK=str(r),
                LOCAL_RANK=str(r),
                WORLD_SIZE=str(world),
                FRTRACE_TEST_JOB=tag,
                STUCK_RANK=str(stuck),
            )
            if mode == "server":
                env["TORCH_WORKER_SERVER_SOCKET"] = str(tmp / f"ws{r}.sock")
            if mode == "debug_server":  # (the job's store in its environment, as torchrun's)
                env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DEBUG_PORT=debug)
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(JOB), str(r), str(world), str(port), str(dumps), mode],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    env=env,
                    cwd=ROOT,
                    start_new_session=True,  # (a debug server's frontend goes with rank 0)
                )
            )
        await_ready(procs)
        # the waiting ranks are inside the all_reduce, and have waited long enough to be hung:
        # dumps written milliseconds into a wait show a running job (analysis/facts/capture.py)
        time.sleep(3.0)
        yield tag, procs
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.communicate(timeout=20)


def _pyspy_works(pid: int) -> str | None:
    exe = shutil.which("py-spy")
    if exe is None:
        return "py-spy is not installed (pip install 'frtrace[stacks]')"
    r = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
    err = (r.stderr + r.stdout).lower()
    if r.returncode != 0 and ("permission" in err or "not permitted" in err or "ptrace" in err):
        return f"ptrace is not permitted here: {r.stderr.strip()[:200]}"
    return None


def test_collect_a_hung_recorder_job_names_rank_and_function(tmp_path: Path) -> None:
    """4 real Gloo ranks with frtrace.recorder, rank 2 in load_batch: collect gets every
    dump (a request to the recorder: no signal), sidecar and py-spy stack; the report's first
    lines name rank 2 and load_batch; the same from the py-spy files alone, without the
    recorder's sidecars."""
    out = tmp_path / "incident"
    with hung_job(tmp_path, 4, "recorder") as (tag, procs):
        found = find_rank_processes({"FRTRACE_TEST_JOB": tag})
        assert [p.rank for p in found] == [0, 1, 2, 3]
        assert [p.pid for p in found] == [p.pid for p in procs]
        assert all(signal_caught(p.pid, signal.SIGUSR1) for p in found)
        no_pyspy = _pyspy_works(procs[0].pid)
        result = CliRunner().invoke(app, ["collect", str(out), "--env", f"FRTRACE_TEST_JOB={tag}"])
        assert all(p.poll() is None for p in procs), "collect must not kill the job"
    lines = result.output.splitlines()
    assert result.exit_code == 1, result.output
    assert sum("recorder (request (+ stacks sidecar))" in line for line in lines) == 4, (
        result.output
    )
    start = next(i for i, line in enumerate(lines) if line.startswith("HANG"))
    first = "\n".join(lines[start : start + 8])
    assert lines[start].startswith("HANG: culprit rank 2;"), result.output
    assert f"rank 2: in host code at {STUCK_AT}" in first, first
    assert "The stacks corroborate the verdict: culprit rank 2" in result.output
    here = out / host_folder(socket.gethostname())  # collect writes DIR/<host>/
    manifest = json.loads((here / "frtrace-collect.json").read_text())
    assert [(r["rank"], r["pid"]) for r in manifest["ranks"]] == [(p.rank, p.pid) for p in found]
    for r in range(4):
        assert (here / f"{DUMP_PREFIX}{r}").is_file()
        assert (here / f"stacks_rank_{r}.json").is_file()
    if no_pyspy is not None:
        pytest.skip(f"py-spy path not checked: {no_pyspy}")
    assert sum("py-spy (dump)" in line for line in lines) == 4, result.output
    for r in range(4):
        (here / f"stacks_rank_{r}.json").unlink()
    again = CliRunner().invoke(app, ["analyze", "-d", str(out)])
    assert again.output.splitlines()[0].startswith("HANG: culprit rank 2;")
    assert f"rank 2: in host code at {STUCK_AT}" in again.output
    assert "rank 2's Python stack (py-spy-text, pyspy_rank_2.txt)" in again.output


def test_collect_through_torchs_worker_server(tmp_path: Path) -> None:
    """2 real Gloo ranks in torch's worker_main() (no recorder), rank 1 stuck: the worker
    server's fr_trace_json and dump_traceback are enough to name rank 1 and load_batch."""
    out = tmp_path / "incident"
    with hung_job(tmp_path, 2, "server", stuck=1) as (tag, procs):
        args = ["collect", str(out), "--env", f"FRTRACE_TEST_JOB={tag}", "--no-pyspy"]
        result = CliRunner().invoke(app, [*args, "--no-analyze"])
        assert all(p.poll() is None for p in procs)
    assert result.exit_code == 0, result.output
    assert result.output.count("worker_server (fr_trace_json)") == 2, result.output
    assert result.output.count("dump_traceback (worker server)") == 2
    # a dump and stacks got for every rank: what else was tried is not said (issue 31)
    assert "recorder: frtrace.recorder not enabled in it" not in result.output
    assert "TORCH_NCCL_DEBUG_INFO_PIPE_FILE" not in result.output
    rows = [line.split() for line in result.output.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 2 and all(row[-1] == "-" for row in rows), result.output
    report = CliRunner().invoke(app, ["analyze", "-d", str(out)])
    lines = report.output.splitlines()
    assert lines[0].startswith("HANG: culprit rank 1;"), report.output
    assert f"rank 1: in host code at {STUCK_AT}" in "\n".join(lines[:8])


def test_local_collect_of_a_debug_server_job_points_at_store(tmp_path: Path) -> None:
    """A job that runs torch's debug server and no recorder: collect on its host gets no
    dump, and says how to reach every rank instead (``--store`` with the job's
    MASTER_ADDR:MASTER_PORT, from the ranks' environment); run as said, it gets them all."""
    pytest.importorskip("jinja2")  # the debug server's frontend (rank 0) imports it
    with hung_job(tmp_path, 2, "debug_server", stuck=1) as (tag, procs):
        args = ["collect", str(tmp_path / "local"), "--env", f"FRTRACE_TEST_JOB={tag}"]
        local = CliRunner().invoke(app, [*args, "--no-pyspy", "--no-analyze"])
        said = " ".join(local.output.split())
        store = said.split("frtrace collect DIR --store ", 1)[1].split()[0]
        assert "no rank's dump on this host" in said, local.output
        assert store.startswith("127.0.0.1:") and "torch's debug server" in said, local.output
        args = ["collect", str(tmp_path / "store"), "--store", store, "--no-pyspy"]
        reached = CliRunner().invoke(app, [*args, "--no-analyze"])
        assert all(p.poll() is None for p in procs)
    assert reached.exit_code == 0, reached.output
    assert reached.output.count("debug_server (fr_trace_json)") == 2, reached.output


def test_collect_twice_tells_hung_from_slow(tmp_path: Path) -> None:
    """Two snapshots of a hung job: nothing moved, so it is hung (and the culprit named)."""
    with hung_job(tmp_path, 2, "server", stuck=1) as (tag, _):
        args = ["collect", str(tmp_path / "inc"), "--env", f"FRTRACE_TEST_JOB={tag}"]
        result = CliRunner().invoke(app, [*args, "--no-pyspy", "--twice", "1"])
    assert "HUNG: none of the 2 ranks moved between the snapshots" in result.output, result.output
    assert "HANG: culprit rank 1;" in result.output


def test_collect_with_no_rank_process_says_why(tmp_path: Path) -> None:
    """No process matches: exit 2 with what was looked for."""
    result = CliRunner().invoke(
        app, ["collect", str(tmp_path), "--env", f"FRTRACE_TEST_JOB={uuid.uuid4().hex}"]
    )
    assert result.exit_code == 2
    assert "no rank process found on this host" in result.output


def test_data_loader_workers_are_not_taken_for_ranks(tmp_path: Path) -> None:
    """A child that inherits RANK (a data loader worker) is skipped; its parent is found."""
    tag = uuid.uuid4().hex
    code = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(c.pid, flush=True); time.sleep(60)"
    )
    env = {**os.environ, "RANK": "7", "LOCAL_RANK": "3", "FRTRACE_TEST_JOB": tag}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    child = 0
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        found = find_rank_processes({"FRTRACE_TEST_JOB": tag})
        assert [(p.pid, p.rank, p.local_rank) for p in found] == [(proc.pid, 7, 3)]
    finally:
        if child:
            os.kill(child, signal.SIGKILL)
        proc.kill()
        proc.wait()


def test_multiprocessing_helpers_left_behind_are_not_ranks() -> None:
    """A rank's multiprocessing resource tracker (or forkserver) inherits RANK; once its rank
    is killed it has no rank parent to be told apart by, and is still no rank."""
    tag = uuid.uuid4().hex
    env = {**os.environ, "RANK": "0", "FRTRACE_TEST_JOB": tag}
    helpers = [
        subprocess.Popen(
            [
                sys.executable,
                "-B",
                "-c",
                f"from multiprocessing.{m} import main;"
                "import time; print(1, flush=True); time.sleep(60)",
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for m in ("resource_tracker", "forkserver")
    ]
    try:
        for h in helpers:
            assert h.stdout is not None and h.stdout.readline().strip() == "1"
        assert find_rank_processes({"FRTRACE_TEST_JOB": tag}) == []
    finally:
        for h in helpers:
            h.kill()
            h.wait()


def test_a_stopped_rank_is_read_as_it_is_and_left_stopped(tmp_path: Path) -> None:
    """A rank frozen by SIGSTOP (state T) before collect came: py-spy reads it without pausing
    it (its own pause fails on a stopped process), and collect never resumes it."""
    from frtrace.base.files import open_out_dir
    from frtrace.collect.mechanisms import pyspy
    from frtrace.collect.procs import RankProcess, proc_state

    exe = shutil.which("py-spy")
    if exe is None:
        pytest.skip("py-spy is not installed")
    code = "import time\ndef flush_logs():\n    time.sleep(120)\nflush_logs()\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while proc_state(proc.pid) not in ("T", "t") and time.monotonic() < deadline:
            time.sleep(0.05)
        rank = RankProcess(pid=proc.pid, rank=1, local_rank=1, cmdline="python")
        out = pyspy(rank, open_out_dir(tmp_path), 20.0, exe)
        if not out.ok and "ptrace" in out.detail:
            pytest.skip(f"py-spy cannot read processes here: {out.detail}")
        assert out.ok, out.detail
        assert "flush_logs" in (tmp_path / "pyspy_rank_1.txt").read_text()
        assert proc_state(proc.pid) in ("T", "t"), "collect resumed a rank stopped before it"
    finally:
        proc.kill()
        proc.wait()
