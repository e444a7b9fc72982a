"""What identifies a file's content cheaply, for the caches (``load.cache``,
``diagnosis_cache``): absolute path, size, mtime, inode change time and identity, ends of it.

A dump's fingerprint is taken before the dump is read, by whoever reads it: on a first run
(nothing stored to compare with) each load worker takes its file's from the file it opens,
the ``fstat`` first, the ends from the bytes it then reads (``load.workers.worker``), not the parent
for every file before any worker starts (a third of a second at 1,024 ranks, on one core);
where an entry is stored, the parent takes them all first, to compare.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from typing import Any

from frtrace.incident.listing import Candidate

__all__ = [
    "HASH_BYTES",
    "Fingerprint",
    "content_fingerprint",
    "file_fingerprint",
    "path_fingerprint",
    "taken",
]

# Bytes hashed at each end of a dump (size and mtime_ns catch most changes; this catches a
# rewrite that kept both). Measured on 1,024 dumps of 430 KB: 64 KiB costs 0.45 s, 16 KiB
# 0.12 s (then opening the files dominates), against ~6 s to unpickle them.
HASH_BYTES = 16 << 10

# [path as given, absolute path, rank, size, mtime_ns, [ctime_ns, dev, ino], blake2b]
Fingerprint = list[Any]


def path_fingerprint(path: str | os.PathLike[str]) -> list[Any]:
    """What identifies one file's content cheaply: absolute path, size, mtime, inode change
    time, device and inode, ends of it.

    mtime can be set back (``cp -p``, ``rsync -t``, ``tar x``, ``os.utime``), so an edit
    between the ends that keeps the size would pass; the inode change time cannot be set by
    a user and moves with every write (and with the ``utime`` that puts mtime back), and a
    file replaced by another has another inode. All from the one ``fstat`` taken anyway.
    """
    path = os.path.abspath(path)
    # O_NONBLOCK: a FIFO swapped in for a listed file does not block the open; it is refused by
    # its fstat (OSError: no fingerprint, nothing cached), as any file but a regular one.
    # (A link is followed: the listing and the loader follow a dump's or a stack file's.)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with open(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        head = f.read(HASH_BYTES)
        tail = b""
        if info.st_size > HASH_BYTES:
            f.seek(_tail_at(info.st_size))
            tail = f.read(HASH_BYTES)
    return _described(path, info, head, tail)


def content_fingerprint(cand: Candidate, info: os.stat_result, data: bytes) -> Fingerprint | None:
    """``file_fingerprint`` of a dump from what its reader holds: the ``fstat`` of the file
    it opened, taken before reading, and all of its bytes, read after (None where they are
    not the whole file the ``fstat`` saw: it changed meanwhile)."""
    size = info.st_size
    if len(data) != size:
        return None
    view = memoryview(data)
    tail = view[_tail_at(size) : _tail_at(size) + HASH_BYTES] if size > HASH_BYTES else b""
    return _of_dump(cand, _described(os.path.abspath(cand.path), info, view[:HASH_BYTES], tail))


def _tail_at(size: int) -> int:
    """Where the bytes hashed at the end of a file of ``size`` bytes start."""
    return max(HASH_BYTES, size - HASH_BYTES)


def _described(path: str, info: os.stat_result, head: Any, tail: Any) -> list[Any]:
    digest = hashlib.blake2b(str(info.st_size).encode(), digest_size=16)
    digest.update(head)
    digest.update(tail)
    changed = [info.st_ctime_ns, info.st_dev, info.st_ino]
    return [path, info.st_size, info.st_mtime_ns, changed, digest.hexdigest()]


def file_fingerprint(cand: Candidate) -> Fingerprint:
    """What identifies one dump's content cheaply: paths, size, mtime, inode change time and
    identity, ends of the file (``path_fingerprint``)."""
    return _of_dump(cand, path_fingerprint(cand.path))


def _of_dump(cand: Candidate, described: list[Any]) -> Fingerprint:
    """A file's fingerprint as a dump's: its path as given and its rank put in."""
    path, size, mtime_ns, changed, digest = described
    return [str(cand.path), path, cand.rank, size, mtime_ns, changed, digest]


def taken(cand: Candidate) -> Fingerprint | None:
    """``file_fingerprint``, or None where the file cannot be opened (vanished, unreadable:
    its reader says so; nothing is cached under an identity that lacks it)."""
    try:
        return file_fingerprint(cand)
    except OSError:
        return None
