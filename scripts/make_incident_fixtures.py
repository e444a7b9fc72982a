#!/usr/bin/env python3
"""Real folders that real jobs leave: restarts, reruns, copies, snapshots, pod and Ray logs.

Each fixture in ``tests/fixtures/incidents/<name>/`` is what one or more real CPU Gloo jobs
left in one folder, every rank a separate process started by real ``torchrun``, dumps written
by ``frtrace.recorder`` (on the exception a timed-out Gloo collective raises, or when
``frtrace collect`` asks). The fault is built into the job (a rank that never joins an
``all_reduce``, a rank that kills itself), so the truth in ``MANIFEST.json`` is how it was
built, never an analyzer's answer:

* ``restart``           ``torchrun --max-restarts 1``, dumps into one fixed folder: attempt 0
                        hangs (rank 1 never joins step 6) and is torn down, attempt 1 hangs
                        elsewhere (rank 3 never joins step 2). ``comm_lib_trace_rank_3`` is
                        left over from attempt 0; ``logs/<run>/attempt_{0,1}/``.
* ``rerun``             a finished run, then a second run into the same folders where rank 3
                        kills itself (SIGKILL) at step 2: ``comm_lib_trace_rank_3`` is the
                        first run's.
* ``recorder_collect``  ``frtrace.recorder.enable(DIR)`` in the job, rank 2 never joins step 3,
                        then ``frtrace collect DIR`` (into the recorder's own folder).
* ``snapshots``         the same kind of job, slower (a step a second; rank 2 never joins
                        step 8), ``frtrace collect DIR --twice 8`` from step 2: the first
                        snapshot while it runs, the second once it hangs, beside the
                        recorder's files (the second's twins).
* ``pod_logs``          a PyTorchJob as Kubernetes runs it: four one-rank pods
                        (``train-master-0``, ``train-worker-0..2``: ranks 0..3), each pod's
                        console saved as ``kubectl logs`` gives it (``<pod>.log``); rank 2
                        (``train-worker-1``) retries a failing fetch forever and never joins.
* ``ray_logs``          a Ray Train-style folder: ``session_<time>/logs/worker-<id>-<job>-<pid>
                        .out|.err`` per rank and the driver's output with Ray's prefixes
                        ``(RayTrainWorker pid=...)`` and its rank table; rank 1 never joins.
                        Written by this script as Ray writes them (Ray is not installed
                        here): the jobs, their dumps and the lines' text are real.

Usage::

    python3 scripts/make_incident_fixtures.py                   # all -> tests/fixtures
    python3 scripts/make_incident_fixtures.py --only restart    # one (repeatable)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import _free_port

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parent.parent
TREE = "incidents"
WORLD = 4
BUFFER = 64  # TORCH_FR_BUFFER_SIZE: every entry of these short jobs kept
PG_TIMEOUT_S = 30  # a hung all_reduce raises after this (a loaded machine is slow, not hung)
LONG_TIMEOUT_S = 90  # collect's fixtures: nothing times out before the collection
STEPS = 10
SLOW_MONITOR_S = 60  # torchrun notices a dead rank after the others have timed out and dumped
RERUN_PAUSE_S = 8  # between two runs into one folder (a real rerun is minutes later)


# --------------------------------------------------------------------------------------------
# Worker side: one process per rank.
# --------------------------------------------------------------------------------------------


def _plan(name: str, attempt: int, run: str) -> tuple[int | None, int, str]:
    """(the rank that misbehaves, at which step, how: 'hang' / 'kill' / 'fetch'), per job."""
    if name == "restart":
        return (1, 6, "hang") if attempt == 0 else (3, 2, "hang")
    if name == "rerun":
        return (None, 0, "") if run == "a" else (3, 2, "kill")
    if name == "recorder_collect":
        return 2, 3, "hang"
    if name == "snapshots":
        return 2, 8, "hang"
    if name == "pod_logs":
        return 2, 3, "fetch"
    if name == "ray_logs":
        return 1, 4, "hang"
    raise SystemExit(f"unknown fixture {name}")


def worker_main(name: str, folder: Path, run: str) -> None:
    from torch.distributed.elastic.multiprocessing.errors import record

    record(_worker)(name, folder, run)


def _worker(name: str, folder: Path, run: str) -> None:
    import frtrace.recorder

    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    frtrace.recorder.enable(folder, buffer_size=BUFFER)
    import torch
    import torch.distributed as dist

    long = name in ("recorder_collect", "snapshots")
    # (init waits for every rank's process, slow to start on a loaded machine; the steps'
    # group times out soon)
    # Each attempt's own keys in the job's store: torchrun's agent store outlives a restart,
    # and Gloo would connect to the last attempt's (dead) ranks at the same keys.
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        WORLD,
        is_master=not agent and rank == 0,
        timeout=timedelta(seconds=LONG_TIMEOUT_S),
    )
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore(f"attempt_{attempt}", store),
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=LONG_TIMEOUT_S),
    )
    timeout = timedelta(seconds=LONG_TIMEOUT_S if long else PG_TIMEOUT_S)
    group = dist.new_group(list(range(WORLD)), timeout=timeout)
    bad, at, how = _plan(name, attempt, run)
    if name == "ray_logs":
        print(f"Setting up process group for: env:// [rank={rank}, world_size={WORLD}]", flush=True)
    state = folder / ".state"
    state.mkdir(exist_ok=True)
    t = torch.ones(8)
    for step in range(STEPS):
        if name == "snapshots":
            (state / f"step{rank}").write_text(str(step))
            time.sleep(1.0)  # a step a second: the first snapshot sees it run
        if rank == bad and step == at:
            (state / f"rank{rank}").write_text(f"{how} at step {step}")
            if how == "kill":
                print(f"step {step}: exiting hard", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            n = 0
            while True:  # hang in Python: never joins the all_reduce of this step
                n += 1
                if how == "fetch":
                    print(
                        f"WARNING fetch https://data.internal/shard-{step} failed: "
                        f"[Errno 111] Connection refused; retrying ({n})",
                        flush=True,
                    )
                time.sleep(1.0)
        if step == at and rank != bad:
            (state / f"rank{rank}").write_text(f"in the all_reduce of step {step}")
        dist.all_reduce(t, group=group)
        print(f"step {step} done", flush=True)
    if bad is None:
        frtrace.recorder.dump()  # a finished run's last dump
    dist.destroy_process_group()


# --------------------------------------------------------------------------------------------
# Harness.
# --------------------------------------------------------------------------------------------


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "TORCH_FR_BUFFER_SIZE", "PYTHONFAULTHANDLER"):
        env.pop(key, None)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def _torchrun(
    name: str, folder: Path, run: str, *, extra: list[str], log_dir: bool = True
) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", *extra]
    if log_dir:
        cmd += ["--log-dir", "logs", "--redirects", "3", "--tee", "3"]
    return [*cmd, str(SCRIPT), "--worker", name, "--folder", str(folder), "--which", run]


def _wait(pred: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.2)
    return pred()


def _states(folder: Path) -> dict[int, str]:
    out = {}
    for r in range(WORLD):
        p = folder / ".state" / f"rank{r}"
        if p.exists():
            out[r] = p.read_text()
    return out


def _run(cmd: list[str], cwd: Path, log: Path, timeout: float = 150) -> int:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait()


def make_restart(folder: Path) -> dict[str, Any]:
    port = _free_port()
    # (the c10d rendezvous: each attempt is a new round, its store keys its own)
    extra = ["--nproc-per-node", str(WORLD), "--rdzv-backend", "c10d"]
    extra += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--max-restarts", "1", "--rdzv-id", "restart"]
    code = _run(_torchrun("restart", folder, "a", extra=extra), folder, folder / "torchrun.log")
    return {
        "description": "torchrun --max-restarts 1, dumps into one folder: attempt 0 hangs "
        "(rank 1 never joins the all_reduce of step 6; the others time out and dump), torchrun "
        "restarts; attempt 1 hangs (rank 3 never joins step 2; the others dump). "
        "comm_lib_trace_rank_3 (and stacks_rank_3.json) are attempt 0's.",
        "torchrun_exit": code,
        "verdict": "hang",
        "culprit_ranks": [3],
        "innocent_ranks": [0, 1, 2],
        "stale_ranks": [3],
        "attempts": {"0": {"culprit_ranks": [1], "dumped": [0, 2, 3]}, "1": {"culprit_ranks": [3]}},
    }


def make_rerun(folder: Path) -> dict[str, Any]:
    for run in ("a", "b"):
        port = _free_port()
        extra = ["--nproc-per-node", str(WORLD), "--master-port", str(port)]
        extra += ["--rdzv-id", "rerun", "--monitor-interval", str(SLOW_MONITOR_S)]
        _run(_torchrun("rerun", folder, run, extra=extra), folder, folder / "torchrun.log")
        if run == "a":
            time.sleep(RERUN_PAUSE_S)
    return {
        "description": "run a: 4 ranks, 10 all_reduce steps, every rank dumps at the end; run b "
        "into the same folder: rank 3 kills itself (SIGKILL) before the all_reduce of step 2, "
        "the others time out and dump. comm_lib_trace_rank_3 is run a's (finished, further "
        "along than anyone of run b).",
        "verdict": "hang",
        "culprit_ranks": [3],
        "innocent_ranks": [0, 1, 2],
        "stale_ranks": [3],
    }


def _collect_job(
    folder: Path, name: str, collect_args: list[str], ready: Callable[[], bool] | None = None
) -> dict[str, Any]:
    port = _free_port()
    extra = ["--nproc-per-node", str(WORLD), "--master-port", str(port), "--rdzv-id", name]
    extra += ["--monitor-interval", "60"]
    cmd = _torchrun(name, folder, "a", extra=extra, log_dir=False)
    log = open(folder / "torchrun.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        cmd, cwd=folder, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        if not _wait(ready or (lambda: len(_states(folder)) == WORLD), 60):
            raise SystemExit(f"{name}: never hung as built: {_states(folder)}")
        time.sleep(1.0)
        collect = [sys.executable, "-m", "frtrace", "collect", str(folder), "--no-analyze"]
        collect += ["--no-pyspy", "--env", f"MASTER_PORT={port}", *collect_args]
        out = subprocess.run(collect, env=_env(), capture_output=True, text=True, timeout=120)
        (folder / ".collect.txt").write_text(out.stdout + out.stderr)
        if out.returncode not in (0, 1):
            raise SystemExit(f"{name}: collect failed: {out.stderr}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    return {}


def make_recorder_collect(folder: Path) -> dict[str, Any]:
    _collect_job(folder, "recorder_collect", [])
    return {
        "description": "frtrace.recorder.enable(DIR) in a 4-rank job; rank 2 never joins the "
        "all_reduce of step 3; `frtrace collect DIR` while it hangs (into the recorder's own "
        "folder: DIR/<host>/ beside the recorder's DIR/comm_lib_trace_rank_*).",
        "verdict": "hang",
        "culprit_ranks": [2],
        "innocent_ranks": [0, 1, 3],
    }


def make_snapshots(folder: Path) -> dict[str, Any]:
    def running() -> bool:  # every rank past step 1 (the first snapshot: while it runs)
        steps = [folder / ".state" / f"step{r}" for r in range(WORLD)]
        return all(p.exists() and int(p.read_text() or 0) >= 2 for p in steps)

    _collect_job(folder, "snapshots", ["--twice", "8"], running)
    return {
        "description": "a 4-rank job, a step a second, rank 2 never joins the all_reduce of "
        "step 8; `frtrace collect DIR --twice 8` into the recorder's folder from step 2: "
        "DIR/snap1/<host>/ while it runs, DIR/snap2/<host>/ (and the recorder's own files) "
        "once it hangs: two snapshots of the same ranks, the newest the incident.",
        "verdict": "hang",
        "culprit_ranks": [2],
        "innocent_ranks": [0, 1, 3],
    }


PODS = ["train-master-0", "train-worker-0", "train-worker-1", "train-worker-2"]


def make_pod_logs(folder: Path) -> dict[str, Any]:
    port = _free_port()
    procs = []
    logs = []
    for node, pod in enumerate(PODS):  # PyTorchJob: master-0 is RANK 0, worker-i is i + 1
        extra = ["--nnodes", str(WORLD), "--node-rank", str(node), "--nproc-per-node", "1"]
        extra += ["--master-addr", "127.0.0.1", "--master-port", str(port)]
        extra += ["--monitor-interval", str(SLOW_MONITOR_S)]
        cmd = _torchrun("pod_logs", folder, "a", extra=extra, log_dir=False)
        log = open(folder / f"{pod}.log", "wb")  # noqa: SIM115  (kubectl logs <pod> > <pod>.log)
        logs.append(log)
        procs.append(
            subprocess.Popen(
                cmd,
                cwd=folder,
                env=_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    dumped = [folder / f"comm_lib_trace_rank_{r}" for r in (0, 1, 3)]  # (the waiting ranks)
    _wait(lambda: all(p.exists() for p in dumped), 180)
    time.sleep(2.0)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)  # the job's pods deleted
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    for log in logs:
        log.close()
    return {
        "description": "a PyTorchJob of four one-rank pods (train-master-0 = rank 0, "
        "train-worker-<i> = rank i + 1, as the training operator sets RANK), each pod's "
        "console as `kubectl logs <pod>` gives it; rank 2 (train-worker-1) retries a failing "
        "fetch forever and never joins the all_reduce of step 3; the others time out and dump.",
        "verdict": "hang",
        "culprit_ranks": [2],
        "innocent_ranks": [0, 1, 3],
    }


def make_ray_logs(folder: Path) -> dict[str, Any]:
    port = _free_port()
    extra = ["--nproc-per-node", str(WORLD), "--master-port", str(port), "--rdzv-id", "ray"]
    extra += ["--log-dir", str(folder / ".torchrun"), "--redirects", "3"]
    cmd = _torchrun("ray_logs", folder, "a", extra=extra, log_dir=False)
    _run(cmd, folder, folder / ".torchrun.txt")
    session = folder / "session_2026-11-27_03-00-00_000000_4242" / "logs"
    session.mkdir(parents=True)
    run_dirs = sorted((folder / ".torchrun").glob("*/attempt_0"))
    driver: list[str] = ["(TrainController pid=4242) Started training worker group of size 4: "]
    pids = {}
    for local in range(WORLD):
        src = run_dirs[0] / str(local)
        # the worker's pid: Ray names its files by it (it is never a rank)
        pid = 31000 + 17 * local + 3
        pids[local] = pid
        worker_id = f"{0xA1B2C3 + local:06x}" * 4
        for std in ("out", "err"):
            text = (src / f"std{std}.log").read_text(errors="replace")
            (session / f"worker-{worker_id}-01000000-{pid}.{std}").write_text(
                f":job_id:01000000\n:actor_name:RayTrainWorker\n{text}"
            )
            for line in text.splitlines():
                driver.append(f"(RayTrainWorker pid={pid}) {line}")
        driver.insert(
            1 + local,
            f"(TrainController pid=4242) - (ip=127.0.0.1, pid={pid}) world_rank={local}, "
            f"local_rank={local}, node_rank=0",
        )
    (folder / "driver.log").write_text("\n".join(driver) + "\n")
    shutil.rmtree(folder / ".torchrun")
    return {
        "description": "a 4-rank Gloo job whose rank 1 never joins the all_reduce of step 4; "
        "its workers' output laid out as Ray Train leaves it: "
        "session_*/logs/worker-<id>-<job>-<pid>.out|.err (the pid in the name), the driver's "
        "lines prefixed (RayTrainWorker pid=<pid>) and its table of pid -> world_rank. The "
        "pids are made up (31003...), the jobs' lines real.",
        "verdict": "hang",
        "culprit_ranks": [1],
        "innocent_ranks": [0, 2, 3],
        "pids": {str(pids[r]): r for r in pids},
    }


def file_times(folder: Path) -> dict[str, float]:
    """Each file's modification time as the jobs left it (git does not keep them; the tests
    put them back: a stale dump is told by its file time too)."""
    return {
        p.relative_to(folder).as_posix(): p.stat().st_mtime
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


FIXTURES: dict[str, Callable[[Path], dict[str, Any]]] = {
    "restart": make_restart,
    "rerun": make_rerun,
    "recorder_collect": make_recorder_collect,
    "snapshots": make_snapshots,
    "pod_logs": make_pod_logs,
    "ray_logs": make_ray_logs,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker")
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--which", default="a")
    parser.add_argument("--only", action="append", choices=sorted(FIXTURES))
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "fixtures")
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker, args.folder, args.which)
        return
    tree = args.out / TREE
    tree.mkdir(parents=True, exist_ok=True)
    manifest_path = tree / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in args.only or list(FIXTURES):
        folder = tree / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        started = time.monotonic()
        truth = FIXTURES[name](folder)
        truth["world_size"] = WORLD
        truth["states"] = {str(k): v for k, v in sorted(_states(folder).items())}
        shutil.rmtree(folder / ".state", ignore_errors=True)
        for junk in folder.rglob("*.tmp"):
            junk.unlink()
        truth["mtimes"] = file_times(folder)
        manifest[name] = truth
        print(f"{name}: {time.monotonic() - started:.0f} s", flush=True)
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
