"""collect on a job started the README's step 1 way (issue 52): ``eval "$(frtrace env
--dir DIR)"``, then torchrun, 4 Gloo ranks, no ``enable()``, no watch. Nothing in the job
answers a request, so no rank's dump is got; collect analyses the py-spy stacks alone, names
the rank in ``load_batch`` on the basis of its stack, exits 1, and prints the one line that
makes the next collect get dumps, which, run as written, does. Real jobs
(``tests/collect/env_only_job.py``), each killed in ``finally``; the job is left unharmed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frtrace.cli import app
from frtrace.collect.procs import find_rank_processes, proc_state
from tests.collect.jobs import DEADLINE_S, free_port
from tests.conftest import SERIAL

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "collect" / "env_only_job.py"
STUCK_AT = next(
    f"load_batch (env_only_job.py:{n})"
    for n, line in enumerate(JOB.read_text().splitlines(), 1)
    if line.strip() == "time.sleep(0.05)"
)
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
    SERIAL,  # real 4- and 2-rank jobs
]


def _environment(tmp: Path) -> dict[str, str]:
    """This shell's environment without any recorder setting, ``frtrace`` on PATH."""
    shim = tmp / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "frtrace").write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m frtrace "$@"\n'
    )
    (shim / "frtrace").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_", "FRTRACE_"))}
    env.pop("OMP_NUM_THREADS", None)
    env.update(
        PATH=f"{shim}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        PYTHONUNBUFFERED="1",
    )
    return env


@contextmanager
def torchrun_job(
    tmp: Path, world: int, setup: str, *, stuck: int
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``setup`` (a shell line) then torchrun of ``world`` ranks in one shell, as a user starts
    a job; yields (its master port, torchrun) once every rank is where it will stay."""
    ready = tmp / "ready"
    ready.mkdir(parents=True)
    port = free_port()
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world)]
    run = shlex.join([*torchrun, "--master-port", str(port), str(JOB)])
    job = subprocess.Popen(
        ["bash", "-c", f"{setup} && READY_DIR={shlex.quote(str(ready))} exec {run}"],
        env={**_environment(tmp), "STUCK_RANK": str(stuck)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(list(ready.iterdir())) < world:
            if job.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the job never hung as built ({sorted(ready.iterdir())})")
            time.sleep(0.2)
        time.sleep(3.0)  # (the waiting ranks have waited a while in the all_reduce)
        yield port, job
    finally:  # (torchrun starts each rank in a session of its own: each is killed too)
        for rank in find_rank_processes({"MASTER_PORT": str(port)}):
            with contextlib.suppress(ProcessLookupError):
                os.kill(rank.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)


def _unharmed(job: subprocess.Popen[bytes], pids: list[int]) -> None:
    assert job.poll() is None, "collect must not end the job"
    for pid in pids:
        assert proc_state(pid) not in (None, "T", "t", "Z"), f"rank process {pid}"


def _pyspy_attaches(pid: int) -> str | None:
    exe = shutil.which("py-spy")
    if exe is None:
        return "py-spy is not installed"
    run = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, timeout=30)
    return None if run.returncode == 0 else f"py-spy cannot attach: {run.stderr[:200]!r}"


def test_collect_of_a_job_with_only_frtrace_env_names_the_culprit_from_its_stacks(
    tmp_path: Path,
) -> None:
    """No dump from any rank: the stacks alone name rank 2 in load_batch (its stack, no dump
    read), exit 1, and the next-time line for Gloo on this torch; run as written before the
    same job, the next collect gets every rank's dump from the recorder."""
    dumps = tmp_path / "fr_dumps"
    step1 = f'eval "$(frtrace env --dir {shlex.quote(str(dumps))})"'  # the README's step 1
    with torchrun_job(tmp_path / "first", 4, step1, stuck=2) as (port, job):
        ranks = find_rank_processes({"MASTER_PORT": str(port)})
        assert [p.rank for p in ranks] == [0, 1, 2, 3]
        why_not = _pyspy_attaches(ranks[0].pid)
        if why_not is not None:
            pytest.skip(why_not)
        args = ["collect", str(tmp_path / "incident"), "--env", f"MASTER_PORT={port}"]
        result = CliRunner().invoke(app, args)
        _unharmed(job, [p.pid for p in ranks])
    out = result.output
    lines = out.splitlines()
    assert result.exit_code == 1, out
    assert sum(" NONE " in f" {line} " and "py-spy (dump)" in line for line in lines) == 4, out
    start = next(i for i, line in enumerate(lines) if line.startswith(("HANG", "CANNOT")))
    assert lines[start] == "HANG: culprit rank 2 (its stack; no dump read); 3 ranks wait on it"
    assert f"rank 2: in host code at {STUCK_AT}" in " ".join(" ".join(lines[start:]).split())
    assert (
        "no rank's dump was got: the report above rests on the ranks' Python stacks alone." in out
    )
    said = next(i for i, line in enumerate(lines) if line.startswith("for every rank's dump next"))
    assert "Gloo (no GPU open), torch 2." in lines[said] and "(the ranks' own)" in lines[said]
    next_time = lines[said + 1].strip()
    assert next_time.startswith(f'eval "$(frtrace env --dir {shlex.quote(str(dumps))} --torch 2.')
    assert next_time.endswith(' --watch 300)"')

    with torchrun_job(tmp_path / "again", 2, next_time, stuck=1) as (port, job):
        ranks = find_rank_processes({"MASTER_PORT": str(port)})
        args = ["collect", str(tmp_path / "again_incident"), "--env", f"MASTER_PORT={port}"]
        again = CliRunner().invoke(app, [*args, "--no-pyspy"])
        _unharmed(job, [p.pid for p in ranks])
    assert again.exit_code == 1, again.output
    assert again.output.count("recorder (request (+ stacks sidecar))") == 2, again.output
    assert "HANG: culprit rank 1;" in again.output
    assert "next time" not in again.output
