"""Capture a started job the case's way, and run one case from start to stop (``run_case``).

A hung job is captured once it is where it will stay: the culprit past its fault (its marker)
and every live rank idle for ``QUIET_S`` (a blocked rank uses no CPU). A rank frozen by the
case (``stuck_inside``, ``frozen``) gets SIGSTOP ``FREEZE_AFTER_S`` after its marker. A job that
is not hung is captured while it trains (rank 0 past ``RUNNING_CAPTURE_STEP``), then finishes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from cases import Case
from harness import (
    DUMP_STEM,
    FREEZE_AFTER_S,
    HOST_NAMES,
    LAUNCH,
    QUIET_S,
    RUNNING_CAPTURE_STEP,
    SETTLE_S,
    Job,
    clock_env,
    stop,
    wait_for,
)

REPORT = "frtrace-report.json"  # what the stall watch writes where it fires


def reached(job: Job) -> bool:
    if not job.case.hangs:
        step = job.read("step", 0)
        return step is not None and int(step) >= RUNNING_CAPTURE_STEP
    return any(job.read("fault", r) for r in job.case.culprits)


def quiet(job: Job) -> bool:
    ranks = [r for r in job.live() if r not in job.stopped]
    before = {r: job.cpu(r) for r in ranks}
    time.sleep(QUIET_S)
    return all(job.cpu(r) - before[r] < 0.05 for r in ranks)


def settle(job: Job) -> None:
    """Until the job is where it stays: the fault reached, the frozen frozen, all idle."""
    if not wait_for(job, lambda: reached(job), 180):
        job.errors.append("the culprit never reached its fault")
        return
    if job.case.fault in ("stuck_inside", "frozen"):
        time.sleep(FREEZE_AFTER_S)
        for r in job.case.culprits:
            pid = job.pid(r)
            if pid:
                os.kill(pid, signal.SIGSTOP)
                job.stopped.append(r)
        job.note(
            f"SIGSTOP to ranks {job.case.culprits} ({job.read('fault', job.case.culprits[0])})"
        )
    if job.case.hangs and job.case.capture not in ("exception", "periodic"):
        if not wait_for(job, lambda: quiet(job), 90, step=0.0):
            job.errors.append("the job never went quiet")
        time.sleep(SETTLE_S)


def signal_all(job: Job) -> None:
    ranks = [r for r in job.live() if r not in job.stopped]
    for r in ranks:
        pid = job.pid(r)
        if pid:
            os.kill(pid, signal.SIGUSR1)
    job.note(f"SIGUSR1 to ranks {ranks}")

    def written() -> bool:
        return all(
            (job.dump_dir(r) / f"stacks_rank_{r}.json").exists() or not job.alive(r) for r in ranks
        )

    if not wait_for(job, written, 40):
        silent = [
            r
            for r in ranks
            if job.alive(r) and not (job.dump_dir(r) / f"stacks_rank_{r}.json").exists()
        ]
        if len(silent) == len(ranks):
            job.errors.append("no live rank wrote a dump on SIGUSR1")
        else:  # (a rank blocked in C that holds the GIL: the recorder's thread cannot run)
            job.note(f"ranks {silent} wrote no dump on SIGUSR1")
    time.sleep(0.5)


def collect(job: Job, store: bool) -> None:
    base = [sys.executable, "-m", "frtrace", "collect", str(job.dir), "--no-analyze"]
    if store:
        runs = [([*base, "--store", f"127.0.0.1:{job.port}", "--timeout", "30"], None, 0)]
    elif job.case.folder == "hosts":  # on each host, as a user runs it there
        runs = []
        for node, host in enumerate(HOST_NAMES):
            ranks = [r for r in range(job.case.world) if job.dump_dir(r).name == host]
            pid = job.pid(ranks[0])
            enter = ["nsenter", "-t", str(pid), "-u"]
            only = ["--env", f"HB_CASE={job.case.name}", "--env", f"HB_HOST={host}"]
            runs.append(([*enter, *base, *only], host, node))
    else:
        runs = [([*base, "--env", f"HB_CASE={job.case.name}"], None, 0)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_", "FRTRACE_"))}
    for cmd, host, node in runs:
        out = subprocess.run(
            cmd,
            env=clock_env(job, env, node),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        (job.scratch / f"collect_{host or 'this'}.txt").write_text(out.stdout + out.stderr)
        job.note(f"{' '.join(cmd[cmd.index('collect') :])}: exit {out.returncode}")
        if out.returncode not in (0, 1):
            job.errors.append(f"collect failed: {out.stderr.strip()[-300:]}")


def wait_report(job: Job) -> None:
    dirs = {job.dump_dir(r) for r in range(job.case.world)}
    if not wait_for(job, lambda: any((d / REPORT).exists() for d in dirs), 90):
        job.errors.append("the watch wrote no report")
    time.sleep(2.0)  # (every rank's dump of the alarm)


def wait_exit(job: Job) -> None:
    def ended() -> bool:
        return all(not job.alive(r) or r in job.stopped for r in range(job.case.world))

    if not wait_for(job, ended, 200, step=0.5):
        job.errors.append("the job did not end by itself")


def capture(job: Job) -> None:
    cap = job.case.capture
    if cap == "signal":
        signal_all(job)
    elif cap in ("collect", "store"):
        collect(job, store=cap == "store")
    elif cap in ("watch_env", "watch_api"):
        wait_report(job)
    else:
        wait_exit(job)
    if not job.case.hangs:  # a job that is not hung goes on to its end
        if not wait_for(job, lambda: not job.running(), 180, step=0.5):
            job.errors.append("the running job did not finish")
        codes = [p.poll() for p in job.procs]
        if any(code != 0 for code in codes):
            job.errors.append(f"a job that is not hung exited {codes}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_case(case: Case, folder: Path, scratch: Path) -> Job:
    folder.mkdir(parents=True)
    scratch.mkdir(parents=True)
    job = Job(case, folder, scratch, port=free_port(), debug_port=free_port())
    job.note(f"{case.name}: launching ({case.launcher})")
    LAUNCH[case.launcher](job)
    try:
        settle(job)
        if not job.errors:
            capture(job)
    finally:
        stop(job)
        job.note(f"stopped: exit codes {[p.returncode for p in job.procs]}")
    return job


def dumps_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob(f"{DUMP_STEM}*") if p.is_file())
