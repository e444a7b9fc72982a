"""Find the job's rank processes on this host from ``/proc``.

A rank process has ``RANK`` in its environment (torchrun, torch.distributed.launch and most
launchers set it; ``LOCAL_RANK`` too). Data loader workers and other children inherit that
environment: a process whose parent has the same ``RANK`` is one of those and is skipped. So
is this process and its ancestors (``frtrace collect`` run from a shell inside the job).
Only the environment a process started with is visible (``/proc/PID/environ``), which is
where launchers put these variables.

Only the invoking user's processes are taken (real, effective, saved and file-system uids all
the real uid of ``collect``): root sees every user's environment, and another user's job is
not root's to stir. ``any_user`` takes them all (root collecting another user's job); the
mechanisms then hold each process to its own uid (``collect/safety.py``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from frtrace.job.registry import process_start_time

__all__ = [
    "JOB_VARIABLES",
    "PROC",
    "RankProcess",
    "find_rank_processes",
    "gpu_open",
    "job_of",
    "proc_state",
    "scan_rank_processes",
    "signal_caught",
    "started_at_ns",
]

PROC = Path("/proc")
# The variables the collection mechanisms read; the rest of the environment is not kept.
KEPT = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "HOME",
    "XDG_CACHE_HOME",
    "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
    "TORCH_WORKER_SERVER_SOCKET",
    "FRTRACE_RUNTIME_DIR",  # where frtrace.recorder registers (job/registry.py)
    "FRTRACE_WATCH",  # the stall watch asked for (the next collect's line: collect/nextdump.py)
    # which job a rank belongs to (two jobs on one host: ``job_of``)
    "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TMPDIR",
    "TEMP",
    "TMP",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankProcess:
    """One rank's process on this host."""

    pid: int
    rank: int
    local_rank: int | None
    cmdline: str
    env: Mapping[str, str] = field(default_factory=dict)  # only the KEPT variables
    uid: int = -1  # its effective uid: the owner its files must have (-1: unknown)
    start_time: str | None = None  # /proc/<pid>/stat field 22: this process, not its pid


JOB_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
# How multiprocessing starts its helpers (``python -c 'from multiprocessing.resource_tracker
# import main;main(8)'``): children of a rank that outlive it when it is killed.
_MP_HELPER = re.compile(
    r" -c from multiprocessing\.(?:resource_tracker|semaphore_tracker|forkserver) "
)


def job_of(proc: RankProcess) -> tuple[tuple[str, str], ...]:
    """The job a rank process belongs to: its rendezvous (``MASTER_ADDR``/``MASTER_PORT``)
    and torchelastic's run id, those it has. Ranks of one job share them; two jobs on one
    host cannot share a master port."""
    return tuple((k, proc.env[k]) for k in JOB_VARIABLES if k in proc.env)


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's process
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _ppid(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the command name may hold spaces and ')'
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def _uids(pid: int) -> tuple[int, ...] | None:
    """(real, effective, saved, file-system) uids of the process (``Uid:`` in status)."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return tuple(int(u) for u in line.split()[1:5])
    except (OSError, ValueError):
        return None
    return None


def proc_state(pid: int) -> str | None:
    """The process's state letter (``R``, ``S``, ``D``...), None when it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[0] if fields else None


def started_at_ns(proc: RankProcess) -> int | None:
    """When the process started, on this host's clock (ns; to 1/CLK_TCK s): the boot time
    (``btime`` in /proc/stat) plus its start (clock ticks after boot); None where unknown."""
    if proc.start_time is None:
        return None
    try:
        btime = next(
            int(line.split()[1])
            for line in (PROC / "stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return None
    return btime * 1_000_000_000 + int(proc.start_time) * 1_000_000_000 // ticks


_GPU_DEVICES = ("/dev/nvidia", "/dev/kfd")  # CUDA's, ROCm's
_MAX_FDS = 4096  # a rank's open files looked at for one


def gpu_open(pid: int) -> bool | None:
    """Does the process hold a GPU device open (CUDA or ROCm initialised: NCCL is possible)?
    None where its open files cannot be seen (another user's, without root)."""
    folder = PROC / str(pid) / "fd"
    try:
        fds = os.listdir(folder)[:_MAX_FDS]
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(folder / fd).startswith(_GPU_DEVICES):
                return True
        except OSError:
            continue
    return False


def signal_caught(pid: int, signum: int) -> bool:
    """Does the process have a handler for ``signum`` (``SigCgt`` in /proc/PID/status)?

    A signal with no handler takes its default action: for SIGUSR1, that kills the process.
    """
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        return False
    return False


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _ancestors(pid: int) -> set[int]:
    out: set[int] = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        parent = _ppid(pid)
        if parent is None:
            break
        pid = parent
    return out


def find_rank_processes(
    match_env: Mapping[str, str] | None = None,
    pids: tuple[int, ...] | None = None,
    *,
    any_user: bool = False,
) -> list[RankProcess]:
    """Rank processes of this user on this host, by rank (``any_user``: of every user);
    ``match_env``: only those whose environment has these values (``MASTER_PORT=29500``
    picks one job among several)."""
    return scan_rank_processes(match_env, pids, any_user=any_user)[0]


def scan_rank_processes(
    match_env: Mapping[str, str] | None = None,
    pids: tuple[int, ...] | None = None,
    *,
    any_user: bool = False,
) -> tuple[list[RankProcess], list[RankProcess]]:
    """(the rank processes to collect, those of other users left alone), each by rank."""
    me = os.getuid()
    mine = _ancestors(os.getpid())
    candidates: dict[int, tuple[int, dict[str, str]]] = {}
    listing = (
        pids if pids is not None else [int(p.name) for p in PROC.iterdir() if p.name.isdigit()]
    )
    for pid in listing:
        if pid in mine:
            continue
        env = _environ(pid)
        if env is None:
            continue
        rank = _int(env.get("RANK"))
        if rank is None:
            continue
        if match_env and any(env.get(k) != v for k, v in match_env.items()):
            continue
        candidates[pid] = (rank, env)
    found: list[RankProcess] = []
    others: list[RankProcess] = []
    for pid, (rank, env) in candidates.items():
        parent = _ppid(pid)
        if parent in candidates and candidates[parent][0] == rank:
            continue  # a data loader worker (or another child) of the rank process
        uids = _uids(pid)
        try:
            cmd = (
                (PROC / str(pid) / "cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
        except OSError:
            continue
        if uids is None or _MP_HELPER.search(cmd):
            continue  # (multiprocessing's tracker or forkserver: inherits RANK, is no rank)
        proc = RankProcess(
            pid=pid,
            rank=rank,
            local_rank=_int(env.get("LOCAL_RANK")),
            cmdline=cmd.strip()[:200],
            env={k: env[k] for k in KEPT if k in env},
            uid=uids[1],
            start_time=process_start_time(pid),
        )
        (found if any_user or set(uids) == {me} else others).append(proc)
    return sorted(found, key=lambda p: (p.rank, p.pid)), sorted(
        others, key=lambda p: (p.rank, p.pid)
    )
