"""Entry columns on disk, memory-mapped: the page cache, not the process, holds a large set.

For a large set, every fixed-width entry column (all but the booleans, a bit per entry: the
codes of the dictionary columns, ids, seqs, times, fingerprints) is appended file by file, as
each result arrives, to one flat file, and memory-mapped back as the table's column. The
analysis scans a dozen columns of every entry once, while matching, and then reads the rows a
finding cites; ``show`` and ``export`` read the rows they print or write. Pages read are
dropped from the process afterwards (``release_pages``, from
``frtrace.load.tables.give_back_memory``): the process holds what it is working on (the
matched ops), not the table, and the kernel keeps the pages in its cache while memory allows.
The files are unlinked as soon as they are mapped (the mapping keeps them until the table is
gone), so nothing is left behind.

Where: ``$XDG_CACHE_HOME/frtrace/spill``, else ``frtrace-spill-<uid>`` in ``/var/tmp`` or the
temporary directory (one name per user: a name shared by all would be the first user's, and
everyone else's columns would stay in memory): the first on a disk (on a tmpfs the columns
would be memory all the same; where every candidate is one, the columns stay in memory).
Any failure to write keeps the column in memory, as for small sets (below ``SPILL_MIN_BYTES``
of dumps, or ``FRTRACE_SPILL_MIN_BYTES``), so spilling never changes a result.

The columns hold what the dumps hold: each load's directory is 0700 and its files 0600, in a
base directory this user owns (another user's, or a link, is passed over). The directory is
named ``<host>-<pid>-<random>`` and holds a lock file that the load keeps locked (``flock``)
until it removes the directory. Directories of loads that died (killed mid-load) are removed by
the next load on the same host, and only where their process is gone and nobody holds their
lock: a cache directory shared between hosts (NFS) never loses a live load's columns.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import secrets
import shutil
import socket
import tempfile
import threading
import weakref
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from frtrace.base.heap import libc_function
from frtrace.base.owned import private_directory
from frtrace.errors import InputError

__all__ = [
    "SPILL_MIN_BYTES",
    "SpilledColumn",
    "drop_range",
    "fallback_name",
    "finish_removing",
    "release_pages",
    "remove_spill_directory",
    "reserve",
    "spill_directory",
    "spill_min_bytes",
    "track",
]

# Bytes of a column gathered in memory before they are written: one write per MiB, not one per
# file (a file's chunk of a column is ~16 KB)
WRITE_BYTES = 1 << 20
# Below this many bytes of dumps (~600 ranks of 2,000 entries) every column stays in memory:
# the columns of a small set are a few tens of MB, and a file per column would cost more than
# it saves.
# ``FRTRACE_SPILL_MIN_BYTES`` sets another threshold (0: always; the tests use it).
SPILL_MIN_BYTES = 256 << 20


# Every mapping a column lives in, to drop its pages from this process once they are read.
_MAPPED: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()


def release_pages() -> None:
    """Drop the resident pages of every mapped column from this process.

    A scan of a mapped column (matching reads a dozen columns of every entry) leaves its pages
    in the process's resident set, where they would count as much as the columns held in
    memory. They are clean copies of the file: dropped, they are read again from the page
    cache (or the disk, if the kernel reclaimed them) where something looks again.
    """
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if advice is None:  # (no madvise here: the kernel reclaims the pages under pressure)
        return
    for mapped in list(_MAPPED):
        with contextlib.suppress(OSError, ValueError):
            mapped.madvise(advice)


# Linux's <linux/falloc.h>: free a range of a file's pages and blocks, its size kept
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02


def reserve(fd: int, length: int) -> bool:
    """Give the first ``length`` bytes of a file open for writing their blocks on disk now
    (Linux's ``fallocate``; holes read as zeros still), so that writing them cannot fail for
    room. False where there is no room, or no way to reserve it here (never written out as
    zeros, as ``posix_fallocate`` would where the filesystem cannot)."""
    return _fallocate(fd, 0, 0, length)


def drop_range(fd: int, start: int, length: int) -> bool:
    """Let go of bytes [start, start + length) of a file open for writing, that nothing will
    read again: its pages in the page cache (written or not) and its blocks on disk are freed
    now, and the range reads as zeros (Linux's ``fallocate`` punching a hole). False, and
    nothing done, where the filesystem or the C library cannot (the range then stays until the
    file is removed)."""
    return _fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start, length)


def _fallocate(fd: int, mode: int, start: int, length: int) -> bool:
    """The C library's ``fallocate`` (the system call, never emulated); False where there is
    none, the range is empty, or it refused."""
    fallocate = libc_function("fallocate64", "c_int", "c_int", "c_int64", "c_int64")
    return fallocate is not None and length > 0 and bool(fallocate(fd, mode, start, length) == 0)


def track(mapped: mmap.mmap) -> None:
    """Have ``release_pages`` drop the pages of a column mapped elsewhere
    (``frtrace.load.handover.shipped``)."""
    _MAPPED.add(mapped)


def spill_min_bytes() -> int:
    """The threshold in force: ``FRTRACE_SPILL_MIN_BYTES`` where set to a number, else
    ``SPILL_MIN_BYTES``."""
    try:
        return max(0, int(os.environ.get("FRTRACE_SPILL_MIN_BYTES", SPILL_MIN_BYTES)))
    except ValueError:
        return SPILL_MIN_BYTES


# Where spill files go when the cache directory cannot take them (or is a tmpfs).
FALLBACK_BASES = (Path("/var/tmp"), Path(tempfile.gettempdir()))


def fallback_name() -> str:
    """This user's spill base in each of ``FALLBACK_BASES``: ``frtrace-spill-<uid>``."""
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    return "frtrace-spill" + ("" if uid is None else f"-{uid}")


# Where the kernel says what each mount is (Linux); filesystems whose files are memory.
MOUNTS = Path("/proc/self/mounts")
_MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


# The lock file each load's directory holds, locked while the load runs.
LOCK_NAME = ".lock"
# Opened and locked lock files of this process's directories (closed when they are removed).
_LOCKS: dict[Path, int] = {}


def spill_directory(cache_root: Path) -> Path | None:
    """A new private directory for this load's column files, or None where none can be made.

    ``cache_root`` is the table cache's root; spill files go beside it, else under /var/tmp or
    the temporary directory: the first of those on a disk (columns on a tmpfs are memory all
    the same, so none there) that this user owns. Directories of this host's loads that are
    gone (killed mid-load) are removed first. The directory stays locked until
    ``remove_spill_directory``.
    """
    name = fallback_name()
    for base in (cache_root.parent / "spill", *(b / name for b in FALLBACK_BASES)):
        try:
            if not private_directory(base, narrow=cache_root.parent) or _in_memory(base):
                continue
            _remove_orphans(base)
            path = base / f"{_host()}-{os.getpid()}-{secrets.token_hex(4)}"
            path.mkdir(mode=0o700)
        except OSError:
            continue
        try:
            _lock(path)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
            continue
        return path
    return None


def remove_spill_directory(path: Path, *, background: bool = False) -> None:
    """Remove a directory made by ``spill_directory`` (its mapped files live on unlinked) and
    let go of its lock. ``background``: in a thread (freeing the page cache of the workers'
    files, 1.5 GB at 4,096 ranks, took a second), which ``finish_removing`` waits for, as a
    fork does (``frtrace.load.workers.parallel``) and the interpreter's exit."""
    if background:
        thread = threading.Thread(target=remove_spill_directory, args=(path,), name="frtrace-rm")
        thread.start()
        _REMOVING.append(thread)
        return
    shutil.rmtree(path, ignore_errors=True)
    fd = _LOCKS.pop(path, None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


# Directories being removed in the background.
_REMOVING: list[threading.Thread] = []


def finish_removing() -> None:
    """Wait until the directories being removed in the background are removed."""
    while _REMOVING:
        _REMOVING.pop().join()


def _host() -> str:
    """This host's name as a directory name part (no ``-``, no ``/``)."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64] or "host"


def _lock(path: Path) -> None:
    """Create the directory's lock file and hold an exclusive lock on it for the load."""
    import fcntl

    fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    _LOCKS[path] = fd


def _in_memory(path: Path) -> bool:
    """Is ``path`` on a filesystem held in memory (tmpfs, ramfs)? False where unknown."""
    try:
        mounts = MOUNTS.read_text(errors="replace").splitlines()
        target = str(path.resolve())
    except OSError:
        return False
    best, kind = "", ""
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, fields[2]
    return kind in _MEMORY_FILESYSTEMS


def _remove_orphans(base: Path) -> None:
    """Remove the directories of this host's loads that died: their process is gone and
    their lock is free. Another host's are never touched (its processes are not seen here)."""
    host = _host()
    for entry in base.iterdir():
        parts = entry.name.split("-")
        if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
            continue  # another host's (or not a load's)
        if _alive(int(parts[1])) or _locked(entry):
            continue
        shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Is process ``pid`` running on this host? (True where it cannot be told.)"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):  # (PermissionError: another user's, alive)
        return pid > 0
    return True


def _locked(entry: Path) -> bool:
    """Does a load hold ``entry``'s lock? (True where it cannot be told.)"""
    import fcntl

    try:
        fd = os.open(entry / LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False  # (its process is gone, and it never took the lock)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # (releases the lock taken)
    return False


class SpilledColumn:
    """One fixed-width column (values and validity) written chunk by chunk to a file.

    ``append`` takes each file's values as a numpy array and where they are valid; ``finish``
    gives the whole column, memory-mapped. On any write error the column falls back to
    memory (what was written is read back) and goes on there.
    """

    def __init__(self, directory: Path, name: str, dtype: np.dtype[np.generic]) -> None:
        self.dtype = np.dtype(dtype)
        self.path = directory / f"{name}.values"
        self.rows = 0
        self.memory: list[np.ndarray] | None = None  # the fallback
        # per chunk: its row count and where it is valid (True: everywhere, as in most chunks;
        # False: nowhere, as for a column the file does not record; else a bool per row),
        # packed at the end
        self.valid: list[tuple[int, np.ndarray | bool]] = []
        self.out: BinaryIO | None = None
        self.pending: list[np.ndarray] = []  # appended, not written yet
        self.pending_bytes = 0
        self.written = 0  # rows in the file
        try:
            # only this user may read it (the columns hold what the dumps hold)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            self.out = open(fd, "wb", buffering=0)  # noqa: SIM115 (closed in finish)
        except OSError:
            self.memory = []

    def append(self, values: np.ndarray, valid: np.ndarray | None) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        count = len(values)
        if valid is None or valid.all():
            self.valid.append((count, True))
        elif not valid.any():
            self.valid.append((count, False))
        else:
            self.valid.append((count, valid.astype(bool)))
        self.rows += count
        if self.memory is not None:
            self.memory.append(values)
            return
        self.pending.append(values)
        self.pending_bytes += values.nbytes
        if self.pending_bytes >= WRITE_BYTES:
            self._write_pending()

    def _write_pending(self) -> None:
        """Write what is pending in one go; on a write error the column goes on in memory."""
        pending, self.pending, self.pending_bytes = self.pending, [], 0
        if not pending or self.memory is not None:
            if self.memory is not None:
                self.memory.extend(pending)
            return
        assert self.out is not None
        data = np.concatenate(pending).data.cast("B")
        try:
            while data:  # (a raw file may take part of it at a time)
                taken = self.out.write(data)
                if not taken:
                    raise OSError("nothing written")
                data = data[taken:]
        except OSError:
            self._to_memory(self.written).extend(pending)  # (a part written is read no further)
            return
        self.written += sum(map(len, pending))

    def _to_memory(self, written_rows: int) -> list[np.ndarray]:
        """A write failed (disk full, say): the column goes on in memory."""
        with contextlib.suppress(OSError):
            if self.out is not None:
                self.out.close()
        self.out = None
        try:
            written = np.fromfile(self.path, dtype=self.dtype, count=written_rows)
        except OSError as exc:
            raise InputError(
                f"{self.path}: the loaded column written here cannot be read back "
                f"({exc.strerror}); set XDG_CACHE_HOME to a writable disk and run again."
            ) from exc
        with contextlib.suppress(OSError):
            self.path.unlink()
        self.memory = [written]
        return self.memory

    def finish(self, type_: pa.DataType) -> pa.Array:
        """The column as an Arrow array of ``type_`` (fixed width, as ``dtype``)."""
        bitmap = None
        nulls = 0
        if any(v is not True for _, v in self.valid):
            valid = np.concatenate(
                [
                    np.full(count, v, dtype=bool) if isinstance(v, bool) else v
                    for count, v in self.valid
                ]
            )
            nulls = int(self.rows - valid.sum())
            bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
            del valid
        self.valid = []
        values = self._values()
        return pa.Array.from_buffers(type_, self.rows, [bitmap, values], null_count=nulls)

    def _values(self) -> pa.Buffer:
        self._write_pending()
        if self.memory is None and self.out is not None:
            try:
                self.out.close()
                if self.rows == 0:
                    raise OSError("empty")  # (a zero-length file cannot be mapped)
                with open(self.path, "rb") as f:
                    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self.path.unlink()  # the mapping keeps the data while the column lives
                _MAPPED.add(mapped)
                return pa.py_buffer(mapped)  # (the buffer keeps the mapping open)
            except OSError:
                self._to_memory(self.written)
        assert self.memory is not None
        parts, self.memory = self.memory, None
        joined = np.concatenate(parts) if parts else np.zeros(0, dtype=self.dtype)
        return pa.py_buffer(joined)
