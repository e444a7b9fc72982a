"""A small Gloo job for tests/job/test_watch.py and scripts/bench_watch.py: one rank of it.

    python3 tests/job/watch_job.py RANK WORLD PORT DUMP_DIR MODE WATCH [PG_TIMEOUT_S [COMPUTE_S]]

``WATCH``: the seconds given to ``frtrace.recorder.enable(watch=...)``; ``env``: the job calls
no frtrace code at all (its environment holds ``frtrace env``'s recipe and ``$FRTRACE_WATCH``:
torch's import starts the watch, :mod:`frtrace.job.autowatch`). MODE ``hang``: a few
all_reduces, then rank ``STUCK_RANK`` stays in ``load_batch`` (host code, sleeping) while the
others block in the next all_reduce, until the file ``DUMP_DIR/release`` exists (then the stuck
rank goes on and every rank finishes: the job was never harmed). MODE ``healthy``: a few
steps, each with ``COMPUTE_S`` of compute (longer than the watch) between the collectives,
nothing pending. Each rank prints ``done`` when it ends, and ``hung: culprits [...]`` from
``on_hang`` (not with ``env``: no code, no hook).
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

STUCK_RANK = 2
STEPS = 3
RELEASE = "release"


def load_batch(dump_dir: Path, rank: int) -> None:
    """Host code that does not return until it is released (a data loader stuck)."""
    if rank != STUCK_RANK:
        return
    print("stuck", flush=True)
    while not (dump_dir / RELEASE).exists():
        time.sleep(0.05)


def main() -> None:
    rank, world, port, dump_dir, mode, watch = (
        int(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        Path(sys.argv[4]),
        sys.argv[5],
        sys.argv[6],
    )
    pg_timeout = float(sys.argv[7]) if len(sys.argv) > 7 else 600.0
    compute_s = float(sys.argv[8]) if len(sys.argv) > 8 else 0.0

    def on_hang(report: Any) -> None:
        print(f"hung: culprits {list(report.culprit_ranks)}", flush=True)

    if watch != "env":
        import frtrace.recorder

        frtrace.recorder.enable(dump_dir, watch=float(watch), on_hang=on_hang)

    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timedelta(60))
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=pg_timeout)
    )
    t = torch.ones(16)
    for step in range(STEPS + 1):
        if mode == "hang" and step == STEPS:
            load_batch(dump_dir, rank)
        if mode == "healthy":
            time.sleep(compute_s)  # compute: nothing pending
        dist.all_reduce(t)
    dist.barrier()
    print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
