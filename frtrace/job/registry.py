"""The recorder's registry: how ``frtrace collect`` finds an enabled ``frtrace.recorder`` and
asks it for a dump, without a signal.

While enabled, a recorder keeps two entries in its registry directory
(``$FRTRACE_RUNTIME_DIR``, else ``<tempdir>/frtrace-<uid>``):

* ``recorder-<pid>.json``: which process it is (pid, its start time: field 22 of
  ``/proc/<pid>/stat``, which a later process with the same pid does not share, and
  ``RANK``) and where it dumps;
* ``recorder-<pid>.sock``: a Unix socket its helper thread listens on. ``frtrace collect``
  connects, checks that the process at the other end is that very pid (``SO_PEERCRED``),
  writes ``dump\\n`` and reads one JSON line back: ``{"ok": true, "dump": PATH, "stacks":
  PATH or null}`` once both files are written, or ``{"ok": false, "error": TEXT}``. The
  recorder answers only its own user and root.

Why not SIGUSR1, as people do by hand: a script may install its own SIGUSR1 handler after
``enable()`` (Lightning's SLURM requeue exits on it), and a process killed with SIGKILL leaves
its entry behind for the next process that gets its pid. A signal cannot be taken back; the
request is answered only by the recorder itself, so collect never signals at all.

The directory is trusted only when it is a real directory (not a link) of the user's, that
group and others cannot write: anyone who can write there could name any dump directory.
The recorder creates it 0700 and refuses (warns, does not register) otherwise; collect does
not read it either. The module is shared by both sides and imports nothing of frtrace.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import stat
import struct
import tempfile
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frtrace.base.files import OutDir, write_file
from frtrace.errors import UnsafeDirectory

__all__ = [
    "REGISTRY_ENV",
    "REGISTRY_FORMAT",
    "REGISTRY_VERSION",
    "REQUEST",
    "Registration",
    "UnsafeDirectory",
    "answer_request",
    "at",
    "candidate_dirs",
    "clean",
    "entry_name",
    "listen",
    "open_private_dir",
    "peer_credentials",
    "process_start_time",
    "register",
    "registry_dir",
    "registry_path",
    "remove_stale",
    "socket_name",
    "write_entry",
]

REGISTRY_ENV = "FRTRACE_RUNTIME_DIR"  # where recorder-<pid>.* go (default: <tempdir>/frtrace-<uid>)
REGISTRY_FORMAT = "frtrace-recorder"
REGISTRY_VERSION = 2  # 1 (no "format" key): pid, dump_dir, signals; collect signalled it
REQUEST = b"dump\n"
MAX_ENTRY_BYTES = 64 * 1024


def registry_dir() -> Path:
    """This process's registry directory: ``$FRTRACE_RUNTIME_DIR``, else
    ``<tempdir>/frtrace-<uid>``."""
    base = os.environ.get(REGISTRY_ENV)
    if base:
        return Path(base)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"frtrace-{uid}"


def registry_path(pid: int) -> Path:
    """This process's registry entry for ``pid``: ``recorder-<pid>.json`` in
    :func:`registry_dir`."""
    return registry_dir() / entry_name(pid)


def candidate_dirs(uid: int, env: Mapping[str, str]) -> list[Path]:
    """Where a process of ``uid`` with environment ``env`` (as it started) registers, most
    likely first: ``tempfile.gettempdir()``'s order, seen from outside the process."""
    if env.get(REGISTRY_ENV):
        return [Path(env[REGISTRY_ENV])]
    bases = [env[k] for k in ("TMPDIR", "TEMP", "TMP") if env.get(k)]
    bases += ["/tmp", "/var/tmp", "/usr/tmp"]
    return [Path(b) / f"frtrace-{uid}" for b in dict.fromkeys(bases)]


def entry_name(pid: int) -> str:
    return f"recorder-{pid}.json"


def socket_name(pid: int) -> str:
    return f"recorder-{pid}.sock"


def process_start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks after boot): with the pid, it names one
    process; None when the process is gone or there is no /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()  # fields[0] is field 3; the name may hold ')'
    return fields[19] if len(fields) > 19 and fields[19].isdigit() else None


def _problem(st: os.stat_result, uid: int) -> str | None:
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def open_private_dir(path: Path, uid: int, *, create: bool) -> int:
    """A file descriptor of ``path`` once it is known to be a directory of ``uid`` that group
    and others cannot write (``create``: made 0700 when missing). Raises
    :class:`UnsafeDirectory` (one line naming it) or OSError."""
    created = False
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
            created = True
        except FileExistsError:
            pass
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeDirectory(f"{path} is a symbolic link or not a directory") from None
        raise
    try:
        if created:
            os.fchmod(fd, 0o700)  # exactly, whatever the umask
        why = _problem(os.fstat(fd), uid)
    except BaseException:
        os.close(fd)
        raise
    if why is not None:
        os.close(fd)
        raise UnsafeDirectory(f"{path} {why}")
    return fd


def at(dir_fd: int, name: str) -> str:
    """A path to ``name`` in the directory ``dir_fd`` that cannot be redirected and fits a
    Unix socket address (108 bytes) however deep the directory is."""
    return f"/proc/self/fd/{dir_fd}/{name}"


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket (Linux)."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return int(pid), int(uid), int(gid)


def write_entry(dir_fd: int, pid: int, doc: Mapping[str, Any]) -> None:
    """``recorder-<pid>.json`` in ``dir_fd``, 0600, atomically (never through a link)."""
    folder = OutDir(Path(f"/proc/self/fd/{dir_fd}"), dir_fd)  # (held by the caller: not closed)
    write_file(folder, entry_name(pid), (json.dumps(dict(doc)) + "\n").encode())


def listen(dir_fd: int, pid: int) -> socket.socket:
    """The request socket ``recorder-<pid>.sock`` in ``dir_fd`` (a stale one replaced)."""
    name = socket_name(pid)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(at(dir_fd, name))
        sock.listen(8)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def answer_request(
    conn: socket.socket, do_dump: Callable[[], tuple[Path, Path | None]], timeout_s: float = 5.0
) -> None:
    """Serve one connection to the request socket: ``dump`` from this user or root dumps
    (``do_dump``: the dump and the sidecar written, or None) and says where."""
    with conn:
        conn.setblocking(True)
        conn.settimeout(timeout_s)
        try:
            _, uid, _ = peer_credentials(conn)
            if uid not in (os.geteuid(), 0):
                return  # another user: not a word
            request = conn.recv(len(REQUEST))
            if request != REQUEST:
                reply: dict[str, Any] = {"ok": False, "error": "unknown request"}
            else:
                try:
                    dump, side = do_dump()
                    reply = {"ok": True, "dump": str(dump), "stacks": side and str(side)}
                except Exception as exc:  # the job goes on; collect says why
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
            conn.sendall(json.dumps(reply).encode() + b"\n")
        except OSError:
            return  # collect gave up (its time limit) or went away


@dataclass(slots=True, kw_only=True)
class Registration:
    """An enabled recorder's entry and request socket; ``close()`` removes both."""

    entry: Path
    socket_path: Path
    listener: socket.socket

    def close(self) -> None:
        self.listener.close()
        for path in (self.entry, self.socket_path):
            with contextlib.suppress(OSError):
                path.unlink()


def register(about: Mapping[str, Any]) -> Registration | None:
    """Register this process (``about``: where and how it dumps) and listen for requests.

    None when it cannot: not Linux (no way to tell who asks), the directory not the user's
    own (one warning: the job runs on, unregistered), or an OSError."""
    if not hasattr(socket, "SO_PEERCRED") or not hasattr(os, "geteuid"):
        return None
    folder, pid = registry_dir(), os.getpid()
    try:
        dir_fd = open_private_dir(folder, os.geteuid(), create=True)
    except UnsafeDirectory as exc:
        warnings.warn(
            f"frtrace.recorder: {exc}: not registering for frtrace collect (anyone who can "
            f"write there could redirect it); remove it, or set {REGISTRY_ENV} to a "
            "directory of yours that only you can write",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
    except OSError:
        return None
    with contextlib.suppress(OSError):
        remove_stale(dir_fd)  # a killed job's entries go when the next one registers
    doc = {
        "format": REGISTRY_FORMAT,
        "version": REGISTRY_VERSION,
        "pid": pid,
        "start_time": process_start_time(pid),
        "rank_env": os.environ.get("RANK"),
        "uid": os.geteuid(),
        **about,
        "socket": socket_name(pid),
    }
    listener: socket.socket | None = None
    try:
        listener = listen(dir_fd, pid)
        done = Registration(
            entry=folder / entry_name(pid), socket_path=folder / socket_name(pid), listener=listener
        )
        write_entry(dir_fd, pid, doc)
    except OSError:
        if listener is not None:
            listener.close()
        with contextlib.suppress(OSError):
            os.unlink(socket_name(pid), dir_fd=dir_fd)
        return None
    finally:
        os.close(dir_fd)
    return done


_ENTRY_FILE = re.compile(r"recorder-(\d+)\.(json|sock)")


def _entry_start_time(dir_fd: int, name: str) -> str | None:
    """The start time an entry recorded, None when it has none or cannot be read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(MAX_ENTRY_BYTES)
    try:
        value = json.loads(raw).get("start_time")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _listening(dir_fd: int, pid: int) -> bool:
    """Someone listens on ``recorder-<pid>.sock`` (a recorder in another pid namespace that
    shares this directory): its entry is not stale whatever ``/proc`` says."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(at(dir_fd, socket_name(pid)))
        except OSError:
            return False
    return True


def remove_stale(dir_fd: int) -> list[str]:
    """Remove the entries and sockets of recorders that are gone (their pid has no process,
    or a process that started later: the pid was reused) and that nobody listens for, from
    the checked directory ``dir_fd``; returns the names removed. A live recorder's files are
    never touched."""
    pids: dict[int, set[str]] = {}
    for name in os.listdir(dir_fd):
        match = _ENTRY_FILE.fullmatch(name)
        if match is not None:
            pids.setdefault(int(match[1]), set()).add(name)
    removed: list[str] = []
    for pid, names in sorted(pids.items()):
        if pid == os.getpid():
            continue
        now = process_start_time(pid)
        if now is not None:
            then = _entry_start_time(dir_fd, entry_name(pid))
            if then is None or then == now:
                continue  # alive (or not known to be another process): kept
        if socket_name(pid) in names and _listening(dir_fd, pid):
            continue
        for name in sorted(names):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
                removed.append(name)
    return removed


def clean(folder: Path | None = None) -> list[str]:
    """:func:`remove_stale` in this user's registry directory (default :func:`registry_dir`),
    when it is a safe one; nothing (an empty list) otherwise."""
    if not hasattr(os, "geteuid"):
        return []
    try:
        dir_fd = open_private_dir(folder or registry_dir(), os.geteuid(), create=False)
    except (OSError, UnsafeDirectory):
        return []
    try:
        return remove_stale(dir_fd)
    except OSError:
        return []
    finally:
        os.close(dir_fd)
