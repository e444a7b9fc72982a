"""Write one dump file per rank, the way torch's DebugInfoWriter names them."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from frsim.job import Job
from frsim.layout import layout_of
from frsim.serialize import dump_bytes

# Set in the parent before forking the pool: workers read the job without unpickling it.
_JOB: Job | None = None
_ARGS: tuple[str, str, str, str, bool] = ("", "", "", "", True)
IN_PROCESS_BELOW = 64
"""Jobs with fewer ranks are written without a pool (forking costs more than it saves)."""


def _write_ranks(ranks: Sequence[int]) -> int:
    assert _JOB is not None
    out_dir, version, fmt, prefix, share_frames = _ARGS
    written = 0
    for rank in ranks:
        data = dump_bytes(_JOB, rank, version, fmt, share_frames=share_frames)
        (Path(out_dir) / f"{prefix}{rank}").write_bytes(data)
        written += len(data)
    return written


def _chunks(ranks: list[int], n: int) -> Iterable[list[int]]:
    size = max(1, min(16, len(ranks) // (4 * n) or 1))
    for i in range(0, len(ranks), size):
        yield ranks[i : i + size]


def write_dumps(
    job: Job,
    out_dir: str | os.PathLike[str],
    *,
    version: str = "2.10",
    fmt: str = "pickle",
    prefix: str = "nccl_trace_rank_",
    missing_ranks: Iterable[int] | None = None,
    processes: int | None = None,
    share_frames: bool = True,
) -> list[Path]:
    """Write `<out_dir>/<prefix><rank>` for every rank except the missing ones.

    `missing_ranks` defaults to the job's truth (MISSING_DUMP and Fault.missing). Returns the
    paths written. Uses a fork-based process pool for large jobs (`processes`: default all
    CPUs); the output does not depend on the number of processes. `share_frames=False` stops
    entries sharing frame dicts (real dumps share them; see record.py).
    """
    global _JOB, _ARGS
    layout_of(version)  # fail early on a bad version
    if fmt not in ("pickle", "json"):
        raise ValueError(f"fmt must be 'pickle' or 'json', got {fmt!r}")
    if fmt == "json" and not layout_of(version).json:
        dump_bytes(job, 0, version, fmt)  # raises the explanatory error
    missing = set(job.truth.missing_ranks if missing_ranks is None else missing_ranks)
    ranks = [r for r in range(job.spec.world_size) if r not in missing]
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    _JOB, _ARGS = job, (str(directory), version, fmt, prefix, share_frames)
    n = processes or os.cpu_count() or 1
    try:
        if n <= 1 or len(ranks) < IN_PROCESS_BELOW or "fork" not in mp.get_all_start_methods():
            _write_ranks(ranks)
        else:
            with mp.get_context("fork").Pool(n) as pool:
                for _ in pool.imap_unordered(_write_ranks, _chunks(ranks, n)):
                    pass
    finally:
        _JOB = None
    return [directory / f"{prefix}{r}" for r in ranks]
