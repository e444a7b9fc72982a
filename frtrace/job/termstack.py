"""Every thread's Python stack when the rank is told to stop (SIGTERM), written from C.

A launcher stops a hung job's ranks with SIGTERM: torchrun once one rank failed, SLURM at the
time limit, Kubernetes when the pod is deleted. The culprit, stuck in its own code, had often
written no dump (nothing it ran raised; no one asked), and its stack, where it is stuck, went
with it. ``faulthandler.register(SIGTERM, chain=True)`` writes every thread's stack from the C
signal handler (no GIL: a rank blocked in C writes it too), then puts the previous handler
back and raises the signal again: the rank stops exactly as it would have (SIG_DFL: by
SIGTERM; a handler of the job's own still runs). The file is ``traceback_rank_<rank>.txt`` in
the dump folder (0600, appended to: an earlier attempt's stays), which ``frtrace analyze``
reads as the rank's stack (faulthandler text); it is removed when the process ends without
writing to it, and an empty one a killed rank left says nothing (``frtrace.pystack``).

Nothing is armed where SIGTERM is ignored, or where this process cannot register it. A child
forked from the rank (a DataLoader worker) disarms it: its own stack is not the rank's.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from frtrace.job.env import TERM_STACKS_PREFIX

__all__ = ["Armed", "arm", "disarm", "term_stacks_name"]


def term_stacks_name(rank: int) -> str:
    return f"{TERM_STACKS_PREFIX}{rank}.txt"


@dataclass(frozen=True, slots=True)
class Armed:
    """What ``arm`` set up: the file faulthandler writes to."""

    path: Path
    fd: int
    pid: int


_armed: Armed | None = None


def arm(dump_dir: Path, rank: int | None) -> Armed | None:
    """Write every thread's stack to ``dump_dir`` when SIGTERM arrives (None: not armed)."""
    global _armed
    disarm()
    if rank is None or not hasattr(faulthandler, "register"):
        return None
    with contextlib.suppress(ValueError, OSError):
        if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
            return None  # (the job ignores it: no stop to record)
    path = dump_dir / term_stacks_name(rank)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError:
        return None  # (a link planted there, a full disk: no stack on stop, nothing else)
    try:
        faulthandler.register(signal.SIGTERM, file=fd, all_threads=True, chain=True)
    except (OSError, RuntimeError, ValueError):
        os.close(fd)
        _remove_if_empty(path)
        return None
    _armed = Armed(path=path, fd=fd, pid=os.getpid())
    return _armed


def disarm() -> None:
    """Undo ``arm`` (the file removed when nothing was written to it)."""
    global _armed
    armed, _armed = _armed, None
    if armed is None or armed.pid != os.getpid():
        return
    _release(armed)
    _remove_if_empty(armed.path)


def _release(armed: Armed) -> None:
    """faulthandler's registration undone, the file's descriptor closed."""
    with contextlib.suppress(Exception):
        faulthandler.unregister(signal.SIGTERM)
    with contextlib.suppress(OSError):
        os.close(armed.fd)


def _remove_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.lstat().st_size == 0:
            path.unlink()


def _forget_in_child() -> None:
    """A forked child: its stack on SIGTERM is not the rank's (nor its file's to write)."""
    global _armed
    if _armed is not None:
        _release(_armed)
        _armed = None


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(disarm)
