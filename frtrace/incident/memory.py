"""How much memory loading may use: bounded by this machine's, shared by everything that reads.

Reading a file needs about 10 times its size; a damaged or crafted one can ask for far more (a
memo index or a length claimed in a few bytes). Every bound on what reading may take comes
from here, and from this machine's memory, so no file can take the machine down:

- ``machine_bytes``: what this process may use at most: the least of the physical memory, the
  cgroup's limit (a container, a SLURM job) and the memory available now, or
  ``FRTRACE_MEMORY_MAX_BYTES`` where set;
- ``file_allowance``: what reading one file may add (``FILE_MEMORY_BYTES`` plus
  ``FILE_MEMORY_PER_BYTE`` per byte of it), never more than an even share of half the machine's
  memory among the workers reading at once; the watched workers get it as their address-space
  limit (``frtrace.load.workers.parallel``), and a file read in this process (no workers: the
  library
  in a daemon, a Dask worker) is checked against it before it is unpickled
  (``frtrace.load.read.unpickle``);
- ``archive_bytes``: what the members of an archive held in memory may take in all: at most
  ``MAX_ARCHIVE_BYTES`` (``frtrace.incident.archive``) and a quarter of the machine's memory.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from pathlib import Path

__all__ = [
    "FILE_MEMORY_BYTES",
    "FILE_MEMORY_PER_BYTE",
    "address_space",
    "archive_bytes",
    "default_jobs",
    "file_allowance",
    "held_to",
    "machine_bytes",
]

# Memory reading one file may add (address space): real dumps need about 10 times their size.
FILE_MEMORY_BYTES = 512 << 20
FILE_MEMORY_PER_BYTE = 64
# Never less than this for one file (the interpreter and Arrow need some room to read anything)
MIN_FILE_BYTES = 64 << 20
# Where Linux says how much memory is available, and a cgroup's limit (v2, then v1).
MEMINFO = Path("/proc/meminfo")
CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def machine_bytes() -> int:
    """The memory this process may use at most, in bytes (see the module docstring)."""
    with contextlib.suppress(ValueError):
        given = int(os.environ.get("FRTRACE_MEMORY_MAX_BYTES", ""))
        if given > 0:
            return given
    bounds = [b for b in (_physical(), _cgroup_limit(), _available()) if b is not None]
    return min(bounds) if bounds else 1 << 62


def file_allowance(size_bytes: int, workers: int = 1) -> int:
    """What reading a file of ``size_bytes`` may add to a process, with ``workers`` reading at
    once: ``FILE_MEMORY_BYTES + FILE_MEMORY_PER_BYTE * size``, at most a ``workers``-th of half
    the machine's memory (and never below ``MIN_FILE_BYTES``)."""
    wanted = FILE_MEMORY_BYTES + FILE_MEMORY_PER_BYTE * size_bytes
    share = machine_bytes() // (2 * max(1, workers))
    return max(MIN_FILE_BYTES, min(wanted, share))


def archive_bytes(most: int) -> int:
    """What an archive's members held in memory may take in all: ``most``, at most a quarter
    of the machine's memory."""
    return min(most, machine_bytes() // 4)


def address_space() -> int | None:
    """This process's virtual memory size in bytes (Linux), else None. Read with ``os.read``:
    a worker asks before every file, and a text file object took ~65 us of a file's ~2.3 ms
    (the bytes read: ~5 us)."""
    try:
        fd = os.open("/proc/self/statm", os.O_RDONLY)
        try:
            data = os.read(fd, 256)
        finally:
            os.close(fd)
        return int(data.split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def held_to(allowance: int) -> bool:
    """Does an address-space limit (RLIMIT_AS, as a watched worker sets one) keep this
    process from growing by more than ``allowance``? False where unknown."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return False
    now = address_space()
    return soft != resource.RLIM_INFINITY and now is not None and soft - now <= allowance


@functools.cache
def _physical() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


@functools.cache
def _cgroup_limit() -> int | None:
    for path in CGROUP_LIMITS:
        with contextlib.suppress(OSError, ValueError):
            text = path.read_text().strip()
            if text != "max" and int(text) < 1 << 60:  # (v1 says "no limit" with a huge number)
                return int(text)
    return None


# How long the memory available, once read, is taken as it was: a worker asks before every
# file (4,096 files: /proc/meminfo read and parsed 4,096 times, 2% of the workers' time).
AVAILABLE_FOR_S = 0.5
_AVAILABLE: list[tuple[float, int | None]] = []  # (when read, what it said), the latest


def _available() -> int | None:
    now = time.monotonic()
    if _AVAILABLE and now - _AVAILABLE[0][0] < AVAILABLE_FOR_S:
        return _AVAILABLE[0][1]
    found: int | None = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
                break
    _AVAILABLE[:] = [(now, found)]
    return found


def default_jobs() -> int:
    """Worker processes to use: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
