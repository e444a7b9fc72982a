"""How glibc's malloc keeps memory, set per process: the command's, and a load worker's.

glibc serves a request of 128 KiB or more with a mapping of its own and unmaps it on free,
but every time it frees such a block it raises that threshold to the block's size (up to
32 MiB). Setting the threshold explicitly (``mallopt``) stops the raising; a C library
without ``mallopt`` (musl, macOS) is left alone.

- **The command** (``give_large_blocks_back``, from ``cli.run``): blocks under 256 MiB come
  from the heap and stay there once freed (free memory at its top is handed back only past
  1 GiB; ``trim``, between the analysis's steps, hands all of it back), so that temporaries of
  tens of MB are reused rather than mapped and faulted in anew; larger blocks (a column of 32
  million entries and more) are still mapped and given back on free. New memory is what the
  analysis pays for most on a VM whose freed pages go back to the host: at 4,096 ranks the
  first run took 19.4, 22.3, 18.3 s with a threshold of 4 MiB and 17.5, 20.9, 17.0 s with
  these (interleaved), the analysis 6.2, 7.4, 5.2 -> 5.2, 6.1, 4.9 s, the peak 819-840 ->
  870-907 MB (``CHANGELOG.md``, stop 42). Before the analysis's entry frame shrank
  (stop 42), the same thresholds peaked at 1,010-1,022 MB, and a threshold that glibc raised
  itself (to each freed block's size) at 994-1,013 MB, which is why it is fixed. A library
  caller's process is left as it is, and thresholds the user set in the environment
  (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) are kept.
- **A load worker** (``keep_freed_memory``, from ``load.workers.worker.serve``): its own threshold
  and trim, so that file after file reuses the same memory (below).
- **Trimming** (``trim``, from ``load.tables.give_back_memory``): the free memory of the
  heap handed back to the kernel after the load and between the analysis's steps, once it is
  more than ``KEEP_FREED_BYTES`` (64 MiB); less stays, for the next step to reuse. At 1,024
  ranks each of the six trims handed 20-33 MB back only for the next step to fault it in
  again (the heap held 33-122 MB free at each); at 4,096 ranks, where the trims keep the
  peak down, it held 65-256 MB free, and each is still made. A small gain: at 1,024 ranks,
  6 interleaved first runs on a busy host, always trimming 4.40-6.02 s (median 5.25), now
  4.21-5.87 s (median 5.18), the same peak (``CHANGELOG.md``, stop 45).
- **The command's garbage collector** (``collect_less_often``, from ``cli.run``): with
  Python's thresholds (700 allocations, then 10 and 10), a first run at 1,024 ranks collected
  407 times for 0.38-0.44 s, three full passes over the ~100,000 objects of the imported
  modules among them; at 10,000, 20 and 20 it collected 52 times for 0.13 s.
- **numpy, before it is imported** (``before_numpy``, from ``cli.main``), where the user did not
  set these: no BLAS thread besides the command's own (numpy's OpenBLAS starts one per CPU as
  it is imported, which spin for ~0.1 s of CPU: on 2 CPUs, 0.1 s of a 1,024-rank first run's
  6.2, beside the load's workers; no command does linear algebra); and, on a VM whose freed
  memory goes back to its host (a virtio balloon device that reports free pages), no huge
  pages asked for its arrays. numpy asks the kernel for them on every array of 4 MiB or more;
  the kernel reports to the host the free blocks of a huge page's size, and the host discards
  them, so a new huge page there is memory the host must find again: on this project's VM
  (no compaction counted), 300 MB of a new array took 645-767 ms with huge pages and 107-182
  ms without; a 1,024-rank first run, 6 interleaved pairs, median 2.93 -> 2.84 s, 4,096 ranks
  11.23 -> 11.04 s (stop 47). Where the host's memory stays (bare metal; a VM whose memory is
  pinned, as a GPU passed through pins it), a huge page is the faster: 58 ms against 107-132
  ms for the same array right after another process freed its memory. So numpy's default
  stands there.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "before_numpy",
    "collect_less_often",
    "free_heap_bytes",
    "free_pages_reported",
    "give_large_blocks_back",
    "keep_freed_memory",
    "libc_function",
    "trim",
]

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
COMMAND_MMAP_BYTES = 256 << 20
COMMAND_TRIM_BYTES = 1 << 30
WORKER_MMAP_BYTES = 32 << 20
WORKER_TRIM_BYTES = 128 << 20
GC_THRESHOLDS = (10_000, 20, 20)
# Freed heap memory ``trim`` leaves to be reused (see the module's notes)
KEEP_FREED_BYTES = 64 << 20
# glibc's ``struct mallinfo2``, in order: every field a size_t
_MALLINFO2_FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"


@functools.cache
def libc_function(name: str, *argtypes: str) -> Any:
    """The function ``int name(argtypes...)`` of this process's C library (ctypes; each
    argument type named as ctypes names it: "c_int"), or None where it has none of that name
    (not glibc) or this is not Linux."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # (already loaded by the analysis path's libraries; not at import time)

    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):  # no glibc
        return None
    function.argtypes = [getattr(ctypes, t) for t in argtypes]
    function.restype = ctypes.c_int
    return function


def _mallopt(param: int, value: int) -> bool:
    """glibc's ``mallopt``; False where there is none, or it refused."""
    mallopt = libc_function("mallopt", "c_int", "c_int")
    return mallopt is not None and bool(mallopt(param, value))


def trim() -> None:
    """glibc's ``malloc_trim(0)``: the free memory at the top of the heap and the free pages
    within it back to the kernel (freed numpy and Arrow buffers stay in the process
    otherwise), once the heap holds more than ``KEEP_FREED_BYTES`` free; nothing where there
    is no glibc."""
    malloc_trim = libc_function("malloc_trim", "c_size_t")
    if malloc_trim is None:
        return
    free = free_heap_bytes()
    if free is None or free > KEEP_FREED_BYTES:
        malloc_trim(0)


def free_heap_bytes() -> int | None:
    """The bytes free in glibc's heap (``mallinfo2().fordblks``: freed, not yet handed
    back), or None where it cannot say (no glibc, or one older than 2.33)."""
    mallinfo2 = _mallinfo2()
    return None if mallinfo2 is None else int(mallinfo2().fordblks)


@functools.cache
def _mallinfo2() -> Any:
    """glibc's ``mallinfo2`` (2.33 and later), returning its ``struct mallinfo2``; None where
    there is none."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS.split()]

    try:
        function = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    function.argtypes = []
    function.restype = MallInfo2
    return function


def give_large_blocks_back() -> bool:
    """The command's: glibc's mmap threshold fixed at 256 MiB (larger blocks mapped, and
    given back on free) and its trim threshold at 1 GiB; True when the first was set here."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    if not _mallopt(M_MMAP_THRESHOLD, COMMAND_MMAP_BYTES):
        return False
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        _mallopt(M_TRIM_THRESHOLD, COMMAND_TRIM_BYTES)
    return True


def keep_freed_memory() -> None:
    """A load worker's: keep the memory it frees instead of handing it back to the kernel.

    A worker decodes one file after another, each needing about as much memory as the last.
    By default glibc serves large blocks from fresh mappings and gives the top of its heap
    back once free, so every file faulted the same pages in again: ~400 page faults per file,
    10-20% of its time. Blocks under 32 MiB now come from the heap, and up to 128 MiB of free
    heap is kept (the memory limit, RLIMIT_AS, counts it all the same).
    """
    if _mallopt(M_MMAP_THRESHOLD, WORKER_MMAP_BYTES):
        _mallopt(M_TRIM_THRESHOLD, WORKER_TRIM_BYTES)


def collect_less_often() -> None:
    """The command's: the cyclic garbage collector's thresholds raised (``GC_THRESHOLDS``)."""
    gc.set_threshold(*GC_THRESHOLDS)


def before_numpy() -> None:
    """The console command's numpy settings, made before numpy is imported (it reads them
    then), where the user did not make them: ``OPENBLAS_NUM_THREADS=1``, and
    ``NUMPY_MADVISE_HUGEPAGE=0`` where freed memory goes back to the host
    (``free_pages_reported``; see the module's notes). They reach only our own helpers'
    processes (py-spy, the store client), never the user's job; a library caller's process is
    left as it is."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        if "NUMPY_MADVISE_HUGEPAGE" not in os.environ and free_pages_reported():
            os.environ["NUMPY_MADVISE_HUGEPAGE"] = "0"


# Where Linux lists a VM's virtio devices; a balloon's device id, and the feature bit by which
# it takes the guest's free pages back (VIRTIO_BALLOON_F_REPORTING, virtio spec 5.5.3).
VIRTIO_DEVICES = Path("/sys/bus/virtio/devices")
_BALLOON = "0x0005"
_REPORTING_BIT = 5


def free_pages_reported(devices: Path = VIRTIO_DEVICES) -> bool:
    """Whether this machine hands its free memory back to a host: a virtio balloon device
    that negotiated free page reporting (its ``features``: one character a bit, '1' set)."""
    try:
        listed = list(devices.iterdir())
    except OSError:
        return False
    for device in listed:
        try:
            if (device / "device").read_text().strip() != _BALLOON:
                continue
            features = (device / "features").read_text().strip()
        except OSError:
            continue
        if len(features) > _REPORTING_BIT and features[_REPORTING_BIT] == "1":
            return True
    return False
