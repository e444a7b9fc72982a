"""Folders and files of frtrace's own (the caches, the spill folder) in places others may share:
used only where they are this user's and nobody else may write them, each opened from the
folder above without following a link (``O_NOFOLLOW``) and checked by its ``fstat``. Anything
else is not ours: never read, never written through.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

__all__ = [
    "exists_at",
    "mine",
    "open_dir",
    "open_private",
    "private_directory",
    "private_file",
    "read_private",
]

_CHUNK = 16 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def private_directory(path: Path, *, narrow: Path | None = None) -> bool:
    """Make ``path`` and its missing parents, each 0700 (``mkdir(parents=True)`` would make
    the parents 0777 less the umask); narrow ``narrow`` (frtrace's folder in the cache) to 0700
    where it is this user's and open to others (as earlier versions left it). True where
    ``path`` is a directory of this user's (not a link: another user's name is never used)."""
    missing = []
    at = path
    while not os.path.lexists(at) and at.parent != at:
        missing.append(at)
        at = at.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    if narrow is not None:
        with contextlib.suppress(OSError):
            info = os.lstat(narrow)
            mine = stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
            if mine and stat.S_IMODE(info.st_mode) & 0o077:
                os.chmod(narrow, 0o700)
    info = os.lstat(path)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()


def mine(fd: int, *, narrow: bool = False) -> os.stat_result:
    """The ``fstat`` of what ``fd`` holds where it is this user's and no one else's to write;
    where ``narrow``, a folder of this user's open to others is narrowed to 0700 first.
    ``PermissionError`` for anything else."""
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        raise PermissionError(errno.EPERM, "not this user's")
    if stat.S_IMODE(info.st_mode) & 0o022:
        if not (narrow and stat.S_ISDIR(info.st_mode)):
            raise PermissionError(errno.EPERM, "writable by other users")
        os.fchmod(fd, 0o700)
    return info


def open_dir(name: str, dir_fd: int, *, narrow: bool = False) -> int:
    """The folder ``name`` of the folder ``dir_fd``, opened (never through a link) where it is
    this user's alone (``mine``); ``OSError`` otherwise."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        mine(fd, narrow=narrow)
    except OSError:
        os.close(fd)
        raise
    return fd


def open_private(name: str, dir_fd: int) -> tuple[int, os.stat_result]:
    """The file ``name`` of the folder ``dir_fd``, opened for reading where it is a regular
    file of this user's alone (never a link, a FIFO: ``O_NONBLOCK``), and its ``fstat``."""
    fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    try:
        info = mine(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", name)
    except OSError:
        os.close(fd)
        raise
    return fd, info


def read_private(name: str, dir_fd: int, limit: int) -> bytes:
    """All of the file ``name`` of the folder ``dir_fd`` (``open_private``), at most
    ``limit`` bytes (a larger one: ``OSError``)."""
    fd, info = open_private(name, dir_fd)
    try:
        if info.st_size > limit:
            raise OSError(errno.EFBIG, "larger than the cache holds", name)
        chunks, left = [], info.st_size
        while left > 0 and (chunk := os.read(fd, min(left, _CHUNK))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def private_file(path: Path) -> int:
    """A new file only this user can read (0600, whatever the umask), open for writing."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)


def exists_at(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True
