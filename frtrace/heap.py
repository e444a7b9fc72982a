"""The command's heap: glibc's malloc told to give large blocks back to the system.

glibc serves a request of 128 KiB or more with a mapping of its own and unmaps it on free,
but every time it frees such a block it raises that threshold to the block's size (up to
32 MiB). After the first few numpy temporaries of a few MB are freed, the next ones come
from the heap, and a heap that such blocks have fragmented is not given back: the analysis
of 4,096 ranks peaked at 1,005 MB that way, and at 933 MB with the threshold fixed
(``docs/performance.md``). Setting the threshold explicitly (``mallopt``) also stops the
raising. The setting is the command's, made once in ``main`` and inherited by the forked
load workers; a library caller's process is left as it is. A threshold the user set in the
environment (``MALLOC_MMAP_THRESHOLD_``) is kept, and a C library without ``mallopt``
(musl, macOS) is left alone.
"""

from __future__ import annotations

import os
import sys

M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
THRESHOLD_BYTES = 128 * 1024  # glibc's default, now fixed


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
