"""Parse many dump files at once: worker processes for large sets, a progress line on a TTY."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from frtrace.discover import Candidate
from frtrace.errors import DumpFormatError
from frtrace.load import ParsedDump, try_parse

__all__ = ["default_jobs", "parse_candidates"]

# Below this many bytes in total, starting worker processes costs more than it saves
# (a fork and the transfer of results is a few ms per worker; parsing 8 MB takes ~50 ms).
PARALLEL_MIN_BYTES = 8 << 20
# A progress line appears only once loading has taken this long, so quick runs stay quiet.
PROGRESS_AFTER_S = 1.0


def default_jobs() -> int:
    """Worker processes to use: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class _Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled and sys.stderr.isatty()
        self.start = time.monotonic()
        self.shown = False

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        if elapsed < PROGRESS_AFTER_S and done < self.total:
            return
        width = 30
        filled = int(width * done / max(1, self.total))
        bar = "#" * filled + "-" * (width - filled)
        sys.stderr.write(f"\rloading dumps [{bar}] {done}/{self.total} {elapsed:5.1f}s")
        self.shown = True
        if done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def parse_candidates(
    candidates: Sequence[Candidate], *, jobs: int | None = None, progress: bool = False
) -> list[ParsedDump | DumpFormatError]:
    """Parse each candidate, in the given order; failures come back as DumpFormatError."""
    jobs = default_jobs() if jobs is None else max(1, jobs)
    total_bytes = sum(c.size_bytes for c in candidates)
    bar = _Progress(len(candidates), progress)
    if jobs == 1 or len(candidates) < 2 or total_bytes < PARALLEL_MIN_BYTES:
        out: list[ParsedDump | DumpFormatError] = []
        for cand in candidates:
            out.append(try_parse(cand))
            bar.update(len(out))
        return out
    # fork: workers inherit the imported modules, so they start in milliseconds.
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    chunk = max(1, min(16, len(candidates) // (jobs * 8)))
    results: list[ParsedDump | DumpFormatError] = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        for result in pool.map(try_parse, candidates, chunksize=chunk):
            results.append(result)
            bar.update(len(results))
    return results
