"""The command's heap: glibc's malloc told to give large blocks back to the system.

glibc serves a request of 128 KiB or more with a mapping of its own and unmaps it on free,
but every time it frees such a block it raises that threshold to the block's size (up to
32 MiB). After the first numpy temporaries of tens of MB are freed, the next ones come from
the heap, and a heap that such blocks have fragmented is not given back: the analysis of
4,096 ranks peaked at 994-1,013 MB that way. Setting the threshold explicitly (``mallopt``)
stops the raising. At 128 KiB every sort's 2 MB temporaries were mapped and faulted in anew
(1,024 ranks: 0.6 s slower); at 4 MiB they are reused from the heap, while the blocks of a
whole column are still mapped and given back: 939 MB at 4,096 ranks, and no slower
(``docs/performance.md``). The setting is the command's, made once in ``main`` and inherited
by the forked load workers; a library caller's process is left as it is. A threshold the
user set in the environment (``MALLOC_MMAP_THRESHOLD_``) is kept, and a C library without
``mallopt`` (musl, macOS) is left alone.
"""

from __future__ import annotations

import os
import sys

M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
THRESHOLD_BYTES = 4 << 20


def give_large_blocks_back() -> bool:
    """Fix glibc's mmap threshold; True when it was set here."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    import ctypes  # (already loaded by the analysis path's libraries; not at import time)

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES))
