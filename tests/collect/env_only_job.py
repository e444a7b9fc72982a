"""A hung Gloo job started the README's step 1 way: torchrun with only the environment
``frtrace env`` prints (no ``frtrace.recorder.enable()``, no ``FRTRACE_WATCH``). Each rank
trains a tiny model and averages its gradients by hand (``dist.all_reduce`` per parameter,
after ``backward``); at step ``STUCK_STEP`` rank ``STUCK_RANK`` calls ``load_batch``, which
never returns, so the others wait in that step's first all_reduce.

    torchrun --nproc-per-node 4 tests/collect/env_only_job.py

``READY_DIR``: each rank writes ``READY_DIR/rank<r>`` once it is where it will stay (the
stuck rank inside ``load_batch``; the others just before the all_reduce they stay in).
``FRTRACE_WATCH`` set (``frtrace env --watch``) makes the same job dump on request (the
recorder's autowatch, frtrace installed in the job's environment).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

STUCK_RANK = int(os.environ.get("STUCK_RANK", "2"))
STUCK_STEP = 3
PG_TIMEOUT_S = 600  # nothing times out while the test or the fixture script collects


def _ready(rank: int, what: str) -> None:
    folder = os.environ.get("READY_DIR")
    if folder:
        (Path(folder) / f"rank{rank}").write_text(what)


def load_batch(rank: int, step: int) -> None:
    _ready(rank, f"in load_batch at step {step}")
    while True:  # a data loader that never returns (a file system read that hangs)
        time.sleep(0.05)


def average_gradients(model: object, world: int) -> None:
    import torch.distributed as dist

    for p in model.parameters():  # type: ignore[attr-defined]
        dist.all_reduce(p.grad)
        p.grad /= world


def train_step(model: object, rank: int, world: int, step: int) -> None:
    import torch

    if rank == STUCK_RANK and step == STUCK_STEP:
        load_batch(rank, step)
    x = torch.randn(8, 16)
    loss = model(x).square().mean()  # type: ignore[operator]
    loss.backward()
    if step == STUCK_STEP:
        _ready(rank, f"in the all_reduce of step {step}")
    average_gradients(model, world)


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=PG_TIMEOUT_S))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    for step in range(STUCK_STEP + 2):
        model.zero_grad()
        train_step(model, rank, world, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
