"""A restarted job's folder, written in a few lines, as ``torchrun --max-restarts`` with the
recorder leaves it (for the history tests):

    folder = restarted_job(tmp_path, dumps={0: {1: stopped_at(5)}, 1: {0: waited_in(3)}},
                           errors={0: {1: CUDA}, 1: {1: CUDA}}, hosts={1: "node-b"})

``dumps``: per attempt, the ranks whose dump of that attempt is left (one fixed folder: a
later attempt's file replaces an earlier one's; the caller says which is left), each a
``Job`` (``tests.analysis.facts_builder``) ending as the rank ended; the recorder's stack
sidecar beside each, with its host and pid. ``errors``: per attempt, per rank, the message of
its ``@record`` error file under ``logs/run/attempt_<N>/<rank>/`` (torchrun's ``--log-dir``);
every rank of an attempt with errors gets its ``stderr.log`` there. Attempt N runs ``N``
hours after attempt 0: its entries, files and messages carry those times.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.analysis.facts_builder import T0_NS, Job

__all__ = ["CUDA", "HOUR_S", "TIMEOUT", "restarted_job", "stopped_at", "waited_in"]

HOUR_S = 3600
CUDA = "RuntimeError: CUDA error: an illegal memory access was encountered"
TIMEOUT = "RuntimeError: [Rank {rank}] Timed out waiting 600000ms for the collective"
_C10D = "torch/distributed/distributed_c10d.py"


def waited_in(seq: int) -> Callable[[int, int], Job]:
    """A rank that finished all_reduce #1..#seq-1 and waits in #seq (it timed out)."""

    def make(world: int, attempt: int) -> Job:
        job = _job(world, attempt).done("all_reduce", range(1, seq))
        return job.enter("all_reduce", seq)

    return make


def stopped_at(seq: int) -> Callable[[int, int], Job]:
    """A rank that finished all_reduce #1..#seq-1 and never entered #seq (it failed first)."""

    def make(world: int, attempt: int) -> Job:
        return _job(world, attempt).done("all_reduce", range(1, seq))

    return make


def _job(world: int, attempt: int) -> Job:
    job = Job(world=world)
    job._clock_s = attempt * HOUR_S  # (the builder's clock: attempt N runs N hours later)
    return job


def restarted_job(
    root: Path,
    *,
    dumps: Mapping[int, Mapping[int, Callable[[int, int], Job]]],
    errors: Mapping[int, Mapping[int, str]] = {},
    hosts: Mapping[int, str] = {},
    world: int = 4,
) -> Path:
    """The folder (see the module docstring); ``hosts``: each rank's host (default node-a)."""
    root.mkdir(parents=True, exist_ok=True)
    t0 = T0_NS // 10**9
    for attempt, ranks in dumps.items():
        at = t0 + attempt * HOUR_S + 100
        for rank, make in ranks.items():
            dump = make(world, attempt).dump(rank)
            path = root / f"rank_{rank}"
            path.write_bytes(pickle.dumps(dump, protocol=2))
            side = root / f"stacks_rank_{rank}.json"
            host = hosts.get(rank, "node-a")
            side.write_text(json.dumps(_sidecar(rank, host, 1000 * (attempt + 1) + rank, at)))
            for p in (path, side):
                os.utime(p, (at, at))
    for attempt, failed in errors.items():
        for rank in range(world):
            folder = root / "logs" / "run" / f"attempt_{attempt}" / str(rank)
            folder.mkdir(parents=True, exist_ok=True)
            message = failed.get(rank, TIMEOUT).format(rank=rank)
            when = t0 + attempt * HOUR_S + (50 if rank in failed else 90)
            (folder / "stderr.log").write_text(f"[rank{rank}]: {message}\n")
            (folder / "error.json").write_text(json.dumps(_error_file(message, when)))
    return root


def _sidecar(rank: int, host: str, pid: int, at_s: int) -> dict[str, Any]:
    """The recorder's ``stacks_rank_<N>.json``: its host and pid, in all_reduce (it waited)."""
    frames = [
        {"name": "all_reduce", "filename": _C10D, "line": 2800},
        {"name": "train_step", "filename": "train.py", "line": 42},
    ]
    return {
        "format": "frtrace-stacks",
        "version": 1,
        "rank": rank,
        "pid": pid,
        "host": host,
        "dumped_at_ns": at_s * 10**9,
        "trigger": {"kind": "on_demand", "detail": "frtrace collect"},
        "threads": [
            {"id": "0x1", "name": "MainThread", "is_main": True, "native_id": pid, "frames": frames}
        ],
    }


def _error_file(message: str, when_s: int) -> dict[str, Any]:
    return {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": "Traceback ...", "timestamp": str(when_s)},
        }
    }
