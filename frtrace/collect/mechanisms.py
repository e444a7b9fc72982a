"""Each way to get one rank's evidence from outside its process, bounded in time.

Every function returns an ``Outcome``: what was written (a path in the output directory), or
why nothing was (not available here, refused, timed out). None raises for a rank that is
gone or unresponsive, and none waits longer than its time limit. Facts on each mechanism
(versions, paths, traps): ``FORMAT.md`` §10 in the project's shared notes.

* ``recorder``: ``frtrace.recorder`` dumps on SIGUSR1 from a helper thread (a rank blocked in
  a collective still dumps) and writes its stacks sidecar; its registry file says where.
  Sent only when the process has a SIGUSR1 handler: the default action would kill it.
* ``nccl_pipe``: ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE=<stem>``: a byte into ``<stem><rank>.pipe``
  makes the NCCL watchdog dump to its usual file, asynchronously: wait until it stops changing.
* ``worker_server``: ``TORCH_WORKER_SERVER_SOCKET`` (the script runs in
  ``torch.distributed.elastic.control_plane.worker_main()``): HTTP over the Unix socket,
  ``POST /handler/fr_trace_json`` and ``/handler/dump_traceback``.
* ``pyspy``: ``py-spy dump --pid`` (needs ptrace); never on a process in uninterruptible
  sleep (``D``), where py-spy can hang; killed at its time limit.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from frtrace.collect.procs import RankProcess, proc_state, signal_caught
from frtrace.job.env import DUMP_PREFIX
from frtrace.job.recorder import STACKS_PREFIX, registry_path

__all__ = [
    "Outcome",
    "nccl_pipe",
    "pyspy",
    "recorder",
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


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
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


def _copy(src: Path, out_dir: Path, name: str) -> Path:
    dst = out_dir / name
    if src.resolve() != dst.resolve():
        shutil.copyfile(src, dst)
    return dst


def recorder(proc: RankProcess, out_dir: Path, timeout_s: float) -> Outcome:
    """SIGUSR1 to a process where ``frtrace.recorder`` is enabled; fetch dump and sidecar."""
    reg = registry_path(proc.pid)
    try:
        info = json.loads(reg.read_text(encoding="utf-8"))
        dump_dir = Path(str(info["dump_dir"]))
        fmt = str(info.get("fmt", "pickle"))
        sigs = [int(s) for s in info.get("signals", [])]
    except (OSError, ValueError, KeyError, TypeError):
        return Outcome(
            mechanism="recorder",
            kind="dump",
            ok=False,
            skipped=True,
            detail="frtrace.recorder not enabled in it",
        )
    if signal.SIGUSR1 not in sigs or not signal_caught(proc.pid, signal.SIGUSR1):
        return Outcome(
            mechanism="recorder",
            kind="dump",
            ok=False,
            skipped=True,
            detail="recorder without a SIGUSR1 handler: not signalled (it would kill it)",
        )
    name = f"{DUMP_PREFIX}{proc.rank}" + (".json" if fmt == "json" else "")
    dump, side = dump_dir / name, dump_dir / f"{STACKS_PREFIX}{proc.rank}.json"
    before, side_before = _stamp(dump), _stamp(side)
    try:
        os.kill(proc.pid, signal.SIGUSR1)
    except OSError as exc:
        return Outcome(
            mechanism="recorder", kind="dump", ok=False, detail=f"SIGUSR1 failed: {exc.strerror}"
        )
    deadline = time.monotonic() + timeout_s
    if not _wait_new_and_stable(dump, before, deadline):
        return Outcome(
            mechanism="recorder",
            kind="dump",
            ok=False,
            detail=f"SIGUSR1 sent, no new {name} within {timeout_s:g} s",
        )
    paths = [_copy(dump, out_dir, name)]
    if info.get("stacks", True) and _wait_new_and_stable(
        side, side_before, time.monotonic() + min(5.0, timeout_s)
    ):
        paths.append(_copy(side, out_dir, side.name))
    return Outcome(
        mechanism="recorder",
        kind="dump",
        ok=True,
        detail="SIGUSR1" + (" (+ stacks sidecar)" if len(paths) > 1 else ""),
        paths=tuple(str(p) for p in paths),
    )


def _default_dump_prefix(env: dict[str, str] | object) -> str:
    get = env.get if isinstance(env, dict) else (lambda k: None)
    for key in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        value = get(key)
        if value:
            return str(value)
    cache = get("XDG_CACHE_HOME") or os.path.join(str(get("HOME") or "/tmp"), ".cache")
    return os.path.join(str(cache), "torch", DUMP_PREFIX)


def nccl_pipe(proc: RankProcess, out_dir: Path, timeout_s: float) -> Outcome:
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
    if not fifo.exists():
        return Outcome(
            mechanism="nccl_pipe",
            kind="dump",
            ok=False,
            skipped=True,
            detail=f"no FIFO {fifo.name} (NCCL process groups make it; not CPU/Gloo)",
        )
    target = Path(f"{_default_dump_prefix(dict(proc.env))}{proc.rank}")
    before = _stamp(target)
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        why = "no reader (rank gone?)" if exc.errno == errno.ENXIO else str(exc.strerror)
        return Outcome(mechanism="nccl_pipe", kind="dump", ok=False, detail=why)
    try:
        os.write(fd, b"1")
    finally:
        os.close(fd)
    if not _wait_new_and_stable(target, before, time.monotonic() + timeout_s):
        return Outcome(
            mechanism="nccl_pipe",
            kind="dump",
            ok=False,
            detail=f"written to the pipe, no new {target.name} within {timeout_s:g} s",
        )
    dst = _copy(target, out_dir, f"{DUMP_PREFIX}{proc.rank}")
    return Outcome(mechanism="nccl_pipe", kind="dump", ok=True, detail=fifo.name, paths=(str(dst),))


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def _post(path: str, handler: str, timeout_s: float) -> bytes:
    conn = _UnixHTTP(path, timeout_s)
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


def worker_server_dump(proc: RankProcess, out_dir: Path, timeout_s: float) -> Outcome:
    """``POST /handler/fr_trace_json``: the rank's Flight Recorder buffer as JSON."""
    return _worker_server_get(
        proc,
        ("worker_server", "dump", "fr_trace_json", "fr_trace_json"),
        out_dir / f"{DUMP_PREFIX}{proc.rank}.json",
        timeout_s,
    )


def worker_server_traceback(proc: RankProcess, out_dir: Path, timeout_s: float) -> Outcome:
    """``POST /handler/dump_traceback``: every thread's Python stack (faulthandler text)."""
    return _worker_server_get(
        proc,
        ("dump_traceback", "stacks", "dump_traceback", "worker server"),
        out_dir / f"traceback_rank_{proc.rank}.txt",
        timeout_s,
    )


def _worker_server_get(
    proc: RankProcess, what: tuple[str, str, str, str], dst: Path, timeout_s: float
) -> Outcome:
    """One worker-server handler's answer into ``dst``. ``what``: (mechanism, kind of
    evidence, handler, how the table says it was collected)."""
    mechanism, kind, handler, detail = what
    sock = _socket_of(proc, mechanism, kind)
    if isinstance(sock, Outcome):
        return sock
    try:
        body = _post(sock, handler, timeout_s)
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(mechanism=mechanism, kind=kind, ok=False, detail=f"{exc}"[:120])
    dst.write_bytes(body)
    return Outcome(mechanism=mechanism, kind=kind, ok=True, detail=detail, paths=(str(dst),))


def pyspy(proc: RankProcess, out_dir: Path, timeout_s: float, exe: str | None) -> Outcome:
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
    try:
        run = subprocess.run(
            [exe, "dump", "--pid", str(proc.pid)],
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):  # py-spy killed while the rank was paused
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
    dst = out_dir / f"pyspy_rank_{proc.rank}.txt"
    dst.write_bytes(run.stdout)
    return Outcome(mechanism="py-spy", kind="stacks", ok=True, detail="dump", paths=(str(dst),))
