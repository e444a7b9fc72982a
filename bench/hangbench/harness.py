"""Start a case's job with its launcher, capture it the case's way, stop it.

``run_case(case, folder, scratch)`` starts the job (``launch``), waits until it is where it will
stay (the culprit past its fault and every live rank idle: no CPU time for ``QUIET_S``) or, for
a job that is not hung, until it has trained a while, captures it (``capture``), and stops it.
The folder is what a user would analyse; ``scratch`` holds what only the harness reads (each
rank's pid, its step, the fault marker) and what the job wrote elsewhere (checkpoints, the
FIFOs its faulty branch opens). Nothing the harness does decides the truth: that is the case's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from cases import Case

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
TRAIN = HERE / "train.py"
DUMP_STEM = "comm_lib_trace_rank_"
QUIET_S = 2.5  # no rank used CPU for this long: it is where it will stay
SETTLE_S = 5.0  # then this long: a hang a few seconds old, not one caught as it forms
FREEZE_AFTER_S = 0.6  # SIGSTOP this long after the culprit reached its fault
RUNNING_CAPTURE_STEP = 15  # a job that is not hung is captured at this step
HOST_NAMES = ("node-a", "node-b")
CLOCK_AHEAD_S = 180  # the second host's clock, in folders of several hosts
SLURM_JOB = "73012"


@dataclass
class Job:
    case: Case
    dir: Path
    scratch: Path
    port: int
    debug_port: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # each launcher process's host
    logs: list[IO[bytes]] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    def note(self, what: str) -> None:
        self.actions.append(what)
        print(f"  {time.monotonic() - self.t0:5.1f}s {what}", file=sys.stderr, flush=True)

    def read(self, what: str, rank: int) -> str | None:
        path = self.scratch / f"{what}_{rank}"
        return path.read_text() if path.exists() else None

    def pid(self, rank: int) -> int | None:
        text = self.read("pid", rank)
        return int(text) if text else None

    def alive(self, rank: int) -> bool:
        pid = self.pid(rank)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text() if pid else ""
        except OSError:
            return False
        return bool(stat) and stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")

    def cpu(self, rank: int) -> float:
        try:
            fields = Path(f"/proc/{self.pid(rank)}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def live(self) -> list[int]:
        return [r for r in range(self.case.world) if self.alive(r)]

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def dump_dir(self, rank: int) -> Path:
        """Where rank's own dumps go: the case folder, or its host's folder in it."""
        if self.case.launcher == "k8s":
            return self.dir / pod_name(rank, self.case.world)
        if self.case.folder == "hosts":
            return self.dir / HOST_NAMES[rank * 2 // self.case.world]
        return self.dir


def pod_name(rank: int, world: int) -> str:
    return "train-master-0" if rank == 0 else f"train-worker-{rank - 1}"


def wait_for(job: Job, pred: Callable[[], bool], timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        if not job.running():
            return pred()
        time.sleep(step)
    return False


# ---- the environment and the launchers -------------------------------------------------------


def base_env(job: Job, rank_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_", "FRTRACE_"))}
    for key in ("OMP_NUM_THREADS", "PYTHONFAULTHANDLER", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    env.update(
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(HERE)]),
        HB_SCRATCH=str(job.scratch),
        HB_DUMP_DIR=str(rank_dir),
        HB_DEBUG_PORT=str(job.debug_port),
        HB_CASE=job.case.name,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(job.port),
    )
    if job.case.capture in ("store", "watch_env"):
        env["TORCH_FR_BUFFER_SIZE"] = "64"
    if job.case.capture == "watch_env":  # the recipe `frtrace env --dir DIR --watch 4` prints
        env.update(FRTRACE_WATCH="4", TORCH_FR_DUMP_TEMP_FILE=f"{rank_dir}/{DUMP_STEM}")
    return env


def host_wrapped(cmd: list[str], host: str | None) -> list[str]:
    """Run ``cmd`` as on another machine: its own host name (a UTS namespace)."""
    if host is None:
        return cmd
    inner = f'hostname {host} && exec "$@"'
    return ["unshare", "--uts", "sh", "-c", inner, "sh", *cmd]


def clock_env(job: Job, env: dict[str, str], node: int) -> dict[str, str]:
    """The second host's clock runs ahead (a preloaded shim shifts CLOCK_REALTIME)."""
    if job.case.folder == "hosts" and node >= 1:
        shim = job.scratch.parent / "clockshift.so"
        env = {**env, "LD_PRELOAD": str(shim), "HB_CLOCK_OFFSET_S": str(CLOCK_AHEAD_S)}
    return env


def start(job: Job, cmd: list[str], env: dict[str, str], out: Path, host: str | None) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    log = open(out, "ab")  # noqa: SIM115  (closed in stop())
    job.logs.append(log)
    proc = subprocess.Popen(
        host_wrapped(cmd, host),
        cwd=job.dir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    job.procs.append(proc)
    job.nodes.append(host or "")


def torchrun_args(job: Job, nodes: int, node: int, host: str | None) -> list[str]:
    c = job.case
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(c.world // nodes)]
    if c.launcher == "torchrun_restart":
        cmd += ["--max-restarts", "1", "--rdzv-backend", "c10d"]
        cmd += ["--rdzv-endpoint", f"127.0.0.1:{job.port}"]
    else:
        cmd += ["--nnodes", str(nodes), "--node-rank", str(node)]
        cmd += ["--master-addr", "127.0.0.1", "--master-port", str(job.port)]
    cmd += ["--rdzv-id", "hangbench"]
    if c.capture not in ("exception", "periodic"):
        cmd += ["--monitor-interval", "60"]  # the capture comes first, then the operator
    if c.launcher != "k8s":  # (each host its own log folder, as on its own disk)
        logs = f"{host}/logs" if host else "logs"
        cmd += ["--log-dir", logs, "--redirects", "3", "--tee", "3"]
    return [*cmd, str(TRAIN), c.name]


def launch_torchrun(job: Job) -> None:
    nodes = 2 if job.case.folder == "hosts" else 1
    for node in range(nodes):
        host = HOST_NAMES[node] if nodes > 1 else None
        rank_dir = job.dir / host if host else job.dir
        env = clock_env(job, base_env(job, rank_dir), node)
        env["HB_HOST"] = host or ""  # (what tells a host's processes apart: one /proc here)
        where = job.dir / host if host else job.dir
        start(job, torchrun_args(job, nodes, node, host), env, where / "torchrun.log", host)


def launch_k8s(job: Job) -> None:
    """A PyTorchJob: one pod a rank, each pod its own host, `kubectl logs <pod>` saved."""
    world = job.case.world
    for rank in range(world):
        pod = pod_name(rank, world)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(world)]
        cmd += ["--node-rank", str(rank), "--nproc-per-node", "1", "--master-addr", "127.0.0.1"]
        cmd += ["--master-port", str(job.port), "--rdzv-id", "hangbench"]
        if job.case.capture not in ("exception", "periodic"):
            cmd += ["--monitor-interval", "60"]
        env = clock_env(job, base_env(job, job.dir / pod), rank * 2 // world)
        start(job, [*cmd, str(TRAIN), job.case.name], env, job.dir / f"{pod}.log", pod)


def prefixed(
    job: Job, proc: subprocess.Popen[bytes], out: IO[bytes], tag: Callable[[str], str]
) -> None:
    """srun -l / mpirun --tag-output: every line of a task's streams, tagged, into one file."""
    lock = job.__dict__.setdefault("_lock", threading.Lock())

    def pump(stream: IO[bytes] | None, which: str) -> None:
        assert stream is not None
        for line in iter(stream.readline, b""):
            with lock:
                out.write(tag(which).encode() + line)
                out.flush()

    for stream, which in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
        t = threading.Thread(target=pump, args=(stream, which), daemon=True)
        t.start()
        job.threads.append(t)


def launch_tasks(job: Job) -> None:
    """SLURM (srun -l), Open MPI (mpirun --tag-output) and Ray Train start every rank's
    process themselves, with their own environment; emulated here (not installed)."""
    c = job.case
    launcher = c.launcher
    out_name = {"slurm": f"slurm-{SLURM_JOB}.out", "mpirun": "mpirun.log"}.get(launcher)
    out = open(job.dir / out_name, "ab") if out_name else None  # noqa: SIM115
    if out is not None:
        job.logs.append(out)
    for rank in range(c.world):
        env = base_env(job, job.dir)
        if launcher == "slurm":
            env.update(
                SLURM_JOB_ID=SLURM_JOB, SLURM_PROCID=str(rank), SLURM_NTASKS=str(c.world),
                SLURM_LOCALID=str(rank), SLURM_NODEID="0", SLURM_JOB_NODELIST="node-a",
            )  # fmt: skip
        elif launcher == "mpirun":
            env.update(
                OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(c.world),
                OMPI_COMM_WORLD_LOCAL_RANK=str(rank),
            )  # fmt: skip
        else:  # Ray Train's TorchConfig sets the torch variables in each worker
            env.update(RANK=str(rank), WORLD_SIZE=str(c.world), LOCAL_RANK=str(rank))
        cmd = [sys.executable, str(TRAIN), c.name]
        if out is None:  # Ray: each worker's own files, named by its pid once it has one
            ray = job.scratch / "ray"
            ray.mkdir(exist_ok=True)
            streams = [open(ray / f"worker_{rank}.{s}", "wb") for s in ("out", "err")]  # noqa: SIM115
            job.logs += streams
            proc = subprocess.Popen(
                cmd, cwd=job.dir, env=env, stdout=streams[0], stderr=streams[1],
                start_new_session=True,
            )  # fmt: skip
            job.procs.append(proc)
            job.nodes.append("")
            continue
        proc = subprocess.Popen(
            cmd, cwd=job.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        job.procs.append(proc)
        job.nodes.append("")
        tag = (lambda w, r=rank: f"{r}: ") if launcher == "slurm" else (
            lambda w, r=rank: f"[1,{r}]<{w}>:"
        )  # fmt: skip
        prefixed(job, proc, out, tag)


LAUNCH: dict[str, Callable[[Job], None]] = {
    "torchrun": launch_torchrun,
    "torchrun_restart": launch_torchrun,
    "k8s": launch_k8s,
    "slurm": launch_tasks,
    "mpirun": launch_tasks,
    "ray": launch_tasks,
}


def own_rank(job: Job, pid: int) -> bool:
    """``pid`` is still this case's rank and leads its process group (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        pgrp = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return False
    return pgrp == pid and job.case.name.encode() in cmdline


def stop(job: Job, grace: float = 10.0) -> None:
    """The operator cancels the job: SIGTERM to every launcher's process group, then SIGKILL."""
    for proc in job.procs:
        if proc.poll() is None:
            # (a rank frozen by SIGSTOP stays frozen: it dies with SIGKILL, dumping nothing)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while job.running() and time.monotonic() < deadline:
        time.sleep(0.2)
    for proc in job.procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for rank in range(job.case.world):  # torchrun's workers lead sessions of their own
        pid = job.pid(rank)
        if pid and own_rank(job, pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    for t in job.threads:
        t.join(timeout=5)
    for log in job.logs:
        log.close()
    shutil.rmtree(job.scratch / "ckpt", ignore_errors=True)
