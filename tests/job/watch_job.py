"""A small Gloo job for tests/job/test_watch.py and scripts/bench_watch.py: one rank of it.

    python3 tests/job/watch_job.py RANK WORLD PORT DUMP_DIR MODE WATCH \
        [PG_TIMEOUT_S [COMPUTE_S [LINGER_S]]]

``WATCH``: the seconds given to ``frtrace.recorder.enable(watch=...)``; ``env``: the job calls
no frtrace code at all (its environment holds ``frtrace env``'s recipe and ``$FRTRACE_WATCH``:
torch's import starts the watch, :mod:`frtrace.job.autowatch`). MODE ``hang``: a few
all_reduces, then rank ``STUCK_RANK`` stays in ``load_batch`` (host code, sleeping) while the
others block in the next all_reduce, until the file ``DUMP_DIR/release`` exists (then the stuck
rank goes on and every rank finishes: the job was never harmed). MODE ``healthy``: a few
steps, each with ``COMPUTE_S`` of compute (longer than the watch) between the collectives,
nothing pending. MODE ``checkpoint``: a few all_reduces, then rank 0 writes a checkpoint with
``torch.save`` to a disk that takes ``COMPUTE_S`` seconds (a slow step, not a hang; in
``frtrace.recorder.phase("checkpoint")`` but with ``env``) while the others wait in a barrier,
and prints ``checkpoint done <time.time()>``; then ``AFTER_STEPS`` steps of a second each
(training goes on), and on for up to ``LINGER_S`` until ``DUMP_DIR/release`` exists. Each rank
prints ``done`` when it ends, and ``hung: culprits [...]`` from ``on_hang`` (not with ``env``:
no code, no hook).
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

STUCK_RANK = 2
STEPS = 3
AFTER_STEPS = 3
RELEASE = "release"


class SlowDisk(io.RawIOBase):
    """A file whose first write takes ``seconds`` (a checkpoint to a slow filesystem)."""

    def __init__(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        while time.monotonic() < self.until:
            time.sleep(0.05)
        return len(memoryview(data))


def save_checkpoint(state: Any, seconds: float, *, mark: bool) -> None:
    """Rank 0's checkpoint: torch.save, ``seconds`` long (host code: nothing pending); ``mark``:
    in ``frtrace.recorder.phase("checkpoint")``."""
    import torch

    with contextlib.ExitStack() as stack:
        if mark:
            import frtrace.recorder

            stack.enter_context(frtrace.recorder.phase("checkpoint"))
        torch.save(state, SlowDisk(seconds))
    print(f"checkpoint done {time.time()}", flush=True)


def load_batch(dump_dir: Path, rank: int) -> None:
    """Host code that does not return until it is released (a data loader stuck)."""
    if rank != STUCK_RANK:
        return
    print("stuck", flush=True)
    while not (dump_dir / RELEASE).exists():
        time.sleep(0.05)


def checkpoint_job(
    rank: int, dump_dir: Path, *, mark: bool, seconds: float, linger_s: float
) -> None:
    """MODE ``checkpoint`` (the group made)."""
    import torch
    import torch.distributed as dist

    t = torch.ones(16)
    for step in range(STEPS + AFTER_STEPS):
        if step == STEPS:
            if rank == 0:
                save_checkpoint({"weights": t}, seconds, mark=mark)
            dist.barrier()  # the others wait here while rank 0 writes
        if step > STEPS:
            time.sleep(1.0)  # a step of compute
        dist.all_reduce(t)
    until = time.monotonic() + linger_s
    while True:  # and on, while rank 0 says so (every rank follows its answer)
        on = rank != 0 or (time.monotonic() < until and not (dump_dir / RELEASE).exists())
        flag = torch.tensor([float(on)])
        dist.broadcast(flag, 0)
        if not flag.item():
            break
        time.sleep(0.5)
    print("done", flush=True)
    dist.destroy_process_group()


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
    linger_s = float(sys.argv[9]) if len(sys.argv) > 9 else 0.0

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
    if mode == "checkpoint":
        checkpoint_job(rank, dump_dir, mark=watch != "env", seconds=compute_s, linger_s=linger_s)
        return
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
