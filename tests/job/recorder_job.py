"""A tiny Gloo job for tests/job/test_recorder.py: one rank of it, configured by the command line.

    python3 tests/job/recorder_job.py RANK WORLD PORT DUMP_DIR MODE

MODE ``hang``: every rank runs a few all_reduces; at step 3 rank ``STUCK_RANK`` stops in host
code (sleeps) while the others block in the all_reduce. Each rank prints ``ready`` once it is
where it will stay, and dumps when it gets SIGUSR1 (frtrace.recorder).
MODE ``raise``: a single-rank job that runs two all_reduces and dies of an exception; the
recorder's excepthook writes the dump.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path

import frtrace.recorder

STUCK_RANK = 2
STEPS = 3


def main() -> None:
    rank, world, port, dump_dir, mode = (
        int(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        Path(sys.argv[4]),
        sys.argv[5],
    )
    frtrace.recorder.enable(dump_dir)  # before torch.distributed is even imported
    assert "torch" not in sys.modules

    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timedelta(60))
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=120)
    )
    t = torch.ones(16)
    if mode == "raise":
        dist.all_reduce(t)
        dist.all_reduce(t)
        raise RuntimeError("the training step failed")
    for step in range(STEPS + 1):
        if step == STEPS and rank == STUCK_RANK:
            print("ready", flush=True)
            while True:  # stuck in host code: a data loader that never returns
                time.sleep(0.05)
        work = dist.all_reduce(t, async_op=True)  # recorded when enqueued
        if step == STEPS:
            print("ready", flush=True)  # inside the all_reduce the stuck rank never joins
        work.wait()


if __name__ == "__main__":
    main()
