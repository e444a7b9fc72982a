"""Each way to get one rank's evidence from outside its process, bounded in time.

Every function returns an ``Outcome``: what was written (a path in the output directory), or
why nothing was (not available here, refused, timed out). None raises for a rank that is
gone or unresponsive, and none waits longer than its time limit. Facts on each mechanism
(versions, paths, traps): ``FORMAT.md`` §10 in the project's shared notes.

* ``recorder`` (in ``ask.py``): ``frtrace.recorder`` is asked through its registry's socket,
  never signalled; it dumps from its helper thread (a rank blocked in a collective still
  dumps), writes its stacks sidecar and says where.
* ``nccl_pipe``: ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE=<stem>``: a byte into ``<stem><rank>.pipe``
  makes the NCCL watchdog dump to its usual file, asynchronously: wait until it stops changing.
* ``worker_server``: ``TORCH_WORKER_SERVER_SOCKET`` (the script runs in
  ``torch.distributed.elastic.control_plane.worker_main()``): HTTP over the Unix socket,
  ``POST /handler/fr_trace_json`` and ``/handler/dump_traceback``.
* ``pyspy``: ``py-spy dump --pid`` (needs ptrace); never on a process in uninterruptible
  sleep (``D``), where py-spy can hang; killed at its time limit. A stopped process (``T``:
  frozen by SIGSTOP) is read with ``--nonblocking`` and left stopped.

Every file of a rank's is read, and its pipe and socket used, through ``safety.py``: as root
on a shared machine, collect never follows a link of another user's, never copies a file the
rank's user does not own, and writes its copies 0600.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from frtrace.base.files import OutDir, write_file
from frtrace.collect.keep import OwnDump, answered, own_dump
from frtrace.collect.procs import RankProcess, proc_state
from frtrace.collect.safety import connect_to_process, copy_private, open_fifo
from frtrace.errors import UnsafePathError
from frtrace.job.env import DUMP_PREFIX
from frtrace.job.registry import process_start_time

__all__ = [
    "Outcome",
    "copied",
    "nccl_pipe",
    "pyspy",
    "worker_server_dump",
    "worker_server_traceback",
]

_POLL_S = 0.05
_STABLE_S = 0.5  # an asynchronous dump is complete when it has not changed for this long


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What one mechanism did for one rank."""

    mechanism: str  # "recorder", "nccl_pipe", "worker_server", "py-spy", "dump_traceback"
    kind: str  # "dump" or "stacks"
    ok: bool
    detail: str  # what was written, or why not (one short phrase)
    paths: tuple[str, ...] = ()  # files written into the output directory
    skipped: bool = False  # not available here (as opposed to tried and failed)
    written_ns: int | None = None  # a dump the rank had written by itself: when (else now)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.lstat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _wait_new_and_stable(path: Path, before: tuple[int, int] | None, deadline: float) -> bool:
    """Wait until ``path`` differs from ``before`` and then stays the same for a while."""
    last: tuple[int, int] | None = None
    since = 0.0
    while time.monotonic() < deadline:
        now = _stamp(path)
        if now is not None and now != before and now[1] > 0:
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= _STABLE_S:
                return True
        time.sleep(_POLL_S)
    return False


def _default_dump_prefix(env: dict[str, str] | object) -> str:
    get = env.get if isinstance(env, dict) else (lambda k: None)
    for key in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        value = get(key)
        if value:
            return str(value)
    cache = get("XDG_CACHE_HOME") or os.path.join(str(get("HOME") or "/tmp"), ".cache")
    return os.path.join(str(cache), "torch", DUMP_PREFIX)


def nccl_pipe(proc: RankProcess, out_dir: OutDir, timeout_s: float) -> Outcome:
    """A byte into ``<stem><rank>.pipe``; wait for ``<prefix><rank>`` to be rewritten."""
    stem = proc.env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    if not stem:
        return Outcome(
            mechanism="nccl_pipe",
            kind="dump",
            ok=False,
            skipped=True,
            detail="TORCH_NCCL_DEBUG_INFO_PIPE_FILE not set",
        )
    fifo = Path(f"{stem}{proc.rank}.pipe")
    target = Path(f"{_default_dump_prefix(dict(proc.env))}{proc.rank}")
    before = _stamp(target)
    kept = own_dump(target, proc)  # (the job's own dump there: not asked over)
    try:
        fd = open_fifo(fifo, proc.uid)
    except FileNotFoundError:
        return Outcome(
            mechanism="nccl_pipe",
            kind="dump",
            ok=False,
            skipped=True,
            detail=f"no FIFO {fifo.name} (NCCL process groups make it; not CPU/Gloo)",
        )
    except UnsafePathError as exc:
        return Outcome(mechanism="nccl_pipe", kind="dump", ok=False, detail=f"{exc}: not written")
    except OSError as exc:
        why = "no reader (rank gone?)" if exc.errno == errno.ENXIO else str(exc.strerror)
        return Outcome(mechanism="nccl_pipe", kind="dump", ok=False, detail=why)
    try:
        if kept is None:
            os.write(fd, b"1")
    finally:
        os.close(fd)
    if kept is not None:
        return copied("nccl_pipe", kept, proc, out_dir, f"{DUMP_PREFIX}{proc.rank}")
    if not _wait_new_and_stable(target, before, time.monotonic() + timeout_s):
        return Outcome(
            mechanism="nccl_pipe",
            kind="dump",
            ok=False,
            detail=f"written to the pipe, no new {target.name} within {timeout_s:g} s",
        )
    try:
        dst = copy_private(target, proc.uid, out_dir, f"{DUMP_PREFIX}{proc.rank}")
    except UnsafePathError as exc:
        return Outcome(mechanism="nccl_pipe", kind="dump", ok=False, detail=f"{exc}: not copied")
    except OSError as exc:
        why = f"{target.name}: {exc.strerror or exc}"
        return Outcome(mechanism="nccl_pipe", kind="dump", ok=False, detail=why)
    answered(target)
    return Outcome(mechanism="nccl_pipe", kind="dump", ok=True, detail=fifo.name, paths=(str(dst),))


def copied(mechanism: str, kept: OwnDump, proc: RankProcess, out_dir: OutDir, name: str) -> Outcome:
    """The dump the rank wrote by itself (and its stacks sidecar), copied as it is."""
    try:
        paths = [copy_private(kept.path, proc.uid, out_dir, name)]
    except UnsafePathError as exc:
        return Outcome(mechanism=mechanism, kind="dump", ok=False, detail=f"{exc}: not copied")
    except OSError as exc:
        why = f"{kept.path.name}: {exc.strerror or exc}"
        return Outcome(mechanism=mechanism, kind="dump", ok=False, detail=why)
    if kept.sidecar is not None:
        with contextlib.suppress(UnsafePathError, OSError):
            paths.append(copy_private(kept.sidecar, proc.uid, out_dir, kept.sidecar.name))
    return Outcome(
        mechanism=mechanism,
        kind="dump",
        ok=True,
        detail=kept.said(),
        paths=tuple(str(p) for p in paths),
        written_ns=kept.written_ns,
    )


class _UnixHTTP(http.client.HTTPConnection):
    """HTTP over the rank's Unix socket, once the process serving it is the rank."""

    def __init__(self, path: str, pid: int, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self._path, self._pid, self._timeout_s = path, pid, timeout_s

    def connect(self) -> None:
        self.sock: socket.socket = connect_to_process(self._path, self._pid, self._timeout_s)


def _post(path: str, pid: int, handler: str, timeout_s: float) -> bytes:
    conn = _UnixHTTP(path, pid, timeout_s)
    try:
        conn.request("POST", f"/handler/{handler}")
        resp = conn.getresponse()
        body = resp.read(256 * 1024 * 1024)
        if resp.status != 200:
            raise OSError(f"HTTP {resp.status}: {body[:120].decode(errors='replace')}")
        return body
    finally:
        conn.close()


def _socket_of(proc: RankProcess, mechanism: str, kind: str) -> str | Outcome:
    path = proc.env.get("TORCH_WORKER_SERVER_SOCKET")
    if not path:
        return Outcome(
            mechanism=mechanism,
            kind=kind,
            ok=False,
            skipped=True,
            detail="TORCH_WORKER_SERVER_SOCKET not set",
        )
    if not os.path.exists(path):
        return Outcome(
            mechanism=mechanism,
            kind=kind,
            ok=False,
            skipped=True,
            detail=f"no socket {os.path.basename(path)} (script not in worker_main()?)",
        )
    return path


def worker_server_dump(proc: RankProcess, out_dir: OutDir, timeout_s: float) -> Outcome:
    """``POST /handler/fr_trace_json``: the rank's Flight Recorder buffer as JSON."""
    return _worker_server_get(
        proc,
        ("worker_server", "dump", "fr_trace_json", "fr_trace_json"),
        (out_dir, f"{DUMP_PREFIX}{proc.rank}.json"),
        timeout_s,
    )


def worker_server_traceback(proc: RankProcess, out_dir: OutDir, timeout_s: float) -> Outcome:
    """``POST /handler/dump_traceback``: every thread's Python stack (faulthandler text)."""
    return _worker_server_get(
        proc,
        ("dump_traceback", "stacks", "dump_traceback", "worker server"),
        (out_dir, f"traceback_rank_{proc.rank}.txt"),
        timeout_s,
    )


def _worker_server_get(
    proc: RankProcess,
    what: tuple[str, str, str, str],
    dst: tuple[OutDir, str],
    timeout_s: float,
) -> Outcome:
    """One worker-server handler's answer into ``dst``. ``what``: (mechanism, kind of
    evidence, handler, how the table says it was collected)."""
    mechanism, kind, handler, detail = what
    sock = _socket_of(proc, mechanism, kind)
    if isinstance(sock, Outcome):
        return sock
    try:
        body = _post(sock, proc.pid, handler, timeout_s)
    except UnsafePathError as exc:
        return Outcome(mechanism=mechanism, kind=kind, ok=False, detail=f"{exc}: not asked")
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(mechanism=mechanism, kind=kind, ok=False, detail=f"{exc}"[:120])
    written = write_file(*dst, body)
    return Outcome(mechanism=mechanism, kind=kind, ok=True, detail=detail, paths=(str(written),))


def pyspy(proc: RankProcess, out_dir: OutDir, timeout_s: float, exe: str | None) -> Outcome:
    """``py-spy dump --pid``, killed at ``timeout_s``; never on a process in ``D`` state."""
    if exe is None:
        return Outcome(
            mechanism="py-spy",
            kind="stacks",
            ok=False,
            skipped=True,
            detail="py-spy not installed (pip install 'frtrace[stacks]')",
        )
    state = proc_state(proc.pid)
    if state is None:
        return Outcome(mechanism="py-spy", kind="stacks", ok=False, detail="process gone")
    if state == "D":
        return Outcome(
            mechanism="py-spy",
            kind="stacks",
            ok=False,
            detail="in uninterruptible sleep (D): py-spy would hang on it",
        )
    # A stopped rank (SIGSTOP, a frozen job: ``T``) is read as it is, never paused by py-spy:
    # ``--nonblocking`` (py-spy's own pause fails on it: "Failed to get stack traces"), and
    # never resumed below: it was stopped before collect came, by someone else.
    stopped = state in ("T", "t")
    command = [exe, "dump", *(("--nonblocking",) if stopped else ()), "--pid", str(proc.pid)]
    try:
        run = subprocess.run(command, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        # py-spy killed while the rank was paused: resume it, if it is still that process
        if (
            not stopped
            and proc_state(proc.pid) in ("T", "t")
            and process_start_time(proc.pid) == proc.start_time
        ):
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGCONT)
        return Outcome(
            mechanism="py-spy", kind="stacks", ok=False, detail=f"timed out after {timeout_s:g} s"
        )
    except OSError as exc:
        return Outcome(mechanism="py-spy", kind="stacks", ok=False, detail=str(exc.strerror))
    if run.returncode != 0 or not run.stdout.strip():
        err = (run.stderr or run.stdout).decode(errors="replace").strip().splitlines()
        text = err[-1] if err else f"exit code {run.returncode}"
        low = text.lower()
        if "permission" in low or "not permitted" in low or "ptrace" in low:
            text = f"ptrace not permitted ({text[:80]})"
        return Outcome(mechanism="py-spy", kind="stacks", ok=False, detail=text[:120])
    dst = write_file(out_dir, f"pyspy_rank_{proc.rank}.txt", run.stdout)
    return Outcome(mechanism="py-spy", kind="stacks", ok=True, detail="dump", paths=(str(dst),))
