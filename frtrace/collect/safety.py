"""The only ways ``collect`` touches a rank's files, and writes its own: safe as root on a
machine other users share.

Everything a rank's environment names (its debug pipe, its dump, its registry, its worker
socket) is under the control of that rank's user, who may not be the user running collect:

* a file is read only when it is a regular file owned by the rank's uid, opened without
  following a link (``O_NOFOLLOW``; a link swapped in after the dump was written is refused,
  and so is a file of another user moved there): never more than the rank's user could read;
* the debug pipe is written only when it is a real FIFO of the rank's uid (``lstat``, then
  ``O_NOFOLLOW|O_NONBLOCK`` and ``fstat`` on what was opened);
* a Unix socket is spoken to only when the process serving it is the rank itself
  (``SO_PEERCRED``, checked before a byte is sent);
* what collect writes is 0600 in folders it makes 0700 (dumps hold the job's data), each
  folder made and entered without following a link and held open (``frtrace/base/files.py``:
  a link at ``DIR/<host>`` is refused), each file written to a new temporary file and renamed
  into place, so a link planted under the final name is replaced, never followed.

A refusal is an :class:`~frtrace.errors.UnsafePathError`, one line that names the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from pathlib import Path

from frtrace.base.files import OutDir, write_file
from frtrace.errors import UnsafePathError
from frtrace.job.registry import peer_credentials

__all__ = [
    "connect_to_process",
    "copy_private",
    "open_fifo",
    "open_owned",
]

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _owner_problem(st: os.stat_result, uid: int) -> str | None:
    return None if st.st_uid == uid else f"owned by uid {st.st_uid}, not the rank's {uid}"


def open_owned(path: Path, uid: int) -> int:
    """A read-only descriptor of ``path``: a regular file owned by ``uid``, not a link."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"{path.name} is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        why = "is not a regular file" if not stat.S_ISREG(st.st_mode) else _owner_problem(st, uid)
    except BaseException:
        os.close(fd)
        raise
    if why is not None:
        os.close(fd)
        raise UnsafePathError(f"{path.name} {why}")
    return fd


def copy_private(src: Path, uid: int, out_dir: OutDir, name: str) -> Path:
    """A rank's file ``src`` (see :func:`open_owned`) copied to ``out_dir/name``, 0600;
    left as it is when it already is that file (the job dumps into the output folder)."""
    fd = open_owned(src, uid)
    try:
        st = os.fstat(fd)
        with contextlib.suppress(OSError):
            there = os.lstat(name, dir_fd=out_dir.fd)
            if (there.st_dev, there.st_ino) == (st.st_dev, st.st_ino):
                return out_dir.path / name
        return write_file(out_dir, name, fd)
    finally:
        os.close(fd)


def open_fifo(path: Path, uid: int) -> int:
    """A write-only, non-blocking descriptor of the FIFO ``path`` of ``uid``; OSError ENXIO
    when nobody reads it, FileNotFoundError when it is not there."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{path.name} is a symbolic link, not a FIFO")
    if not stat.S_ISFIFO(st.st_mode):
        raise UnsafePathError(f"{path.name} is not a FIFO")
    why = _owner_problem(st, uid)
    if why is not None:
        raise UnsafePathError(f"{path.name} {why}")
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    opened = os.fstat(fd)
    if not stat.S_ISFIFO(opened.st_mode) or (opened.st_dev, opened.st_ino) != (
        st.st_dev,
        st.st_ino,
    ):
        os.close(fd)
        raise UnsafePathError(f"{path.name} was replaced while it was opened")
    return fd


def connect_to_process(address: str, pid: int, timeout_s: float) -> socket.socket:
    """A Unix socket connected to ``address``, once the process serving it is ``pid``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect(address)
        peer, _, _ = peer_credentials(sock)
    except BaseException:
        sock.close()
        raise
    if peer != pid:
        sock.close()
        name = os.path.basename(address)
        raise UnsafePathError(f"{name} is served by pid {peer}, not by the rank ({pid})")
    return sock
