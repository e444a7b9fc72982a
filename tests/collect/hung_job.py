"""A hung 4-rank Gloo job for tests/collect: rank STUCK sleeps in ``load_batch`` while the
others block in ``all_reduce``. One rank of it, configured by the command line:

    python3 tests/collect/hung_job.py RANK WORLD PORT DUMP_DIR MODE

MODE ``recorder``: ``frtrace.recorder.enable(DUMP_DIR)`` (dumps on SIGUSR1, with its stacks
sidecar). MODE ``server``: no recorder; the script runs inside torch's ``worker_main()``, so
``TORCH_WORKER_SERVER_SOCKET`` (set by the test) serves ``fr_trace_json`` and
``dump_traceback``. MODE ``debug_server``: torch's debug server
(``torch.distributed.debug.start_debug_server``; its frontend on rank 0 at ``DEBUG_PORT``)
registers each rank's worker server in the job's store, for ``collect --store``. Each rank
prints ``ready`` once it is where it will stay.

``DEBUG_DUMP_DIR``: the frontend also writes every rank's stacks there every second (its
periodic dumps). ``SLOW_JOB``: no rank is stuck; every step is slow (a job progressing).
``FRTRACE_TEST_HOSTNAME``: the rank first names its host so (run it in a UTS namespace of its
own: ``unshare --uts``), so ranks of one machine play several hosts.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

STUCK = int(os.environ.get("STUCK_RANK", "2"))


def load_batch(step: int) -> None:
    print("ready", flush=True)
    while True:  # a data loader that never returns (a file system read that hangs)
        time.sleep(0.05)


def train_step(step: int, rank: int) -> None:
    import torch
    import torch.distributed as dist

    t = torch.ones(16)
    if step == 3 and rank == STUCK:
        load_batch(step)
    work = dist.all_reduce(t, async_op=True)
    if step == 3:
        print("ready", flush=True)
    work.wait()


def read_shard(step: int) -> None:
    time.sleep(0.3)  # slow data, three ways: where a sample finds a rank changes every step


def decode_batch(step: int) -> None:
    time.sleep(0.3)


def augment_batch(step: int) -> None:
    time.sleep(0.3)


def slow_steps(rank: int) -> None:
    print("ready", flush=True)
    next_step(0)


def next_step(step: int) -> None:
    """One slow step, then the next one a frame deeper: the stack is one frame deeper at every
    step, so two samples a step apart never look alike. (A loop cycling through the three
    calls could alias with the 1 s sampler: three steps of 0.33 s under load on CI made every
    sample land in augment_batch.)"""
    import torch
    import torch.distributed as dist

    (read_shard, decode_batch, augment_batch)[step % 3](step)
    dist.all_reduce(torch.ones(16))
    next_step(step + 1)  # ~1,000 steps (330 s) before the recursion limit; the test takes 20


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    dump_dir, mode = Path(sys.argv[4]), sys.argv[5]
    if host := os.environ.get("FRTRACE_TEST_HOSTNAME"):
        socket.sethostname(host)
    if mode == "recorder":
        import frtrace.recorder

        frtrace.recorder.enable(dump_dir, verbose=False)
    import torch.distributed as dist
    from torch.distributed.elastic.control_plane import worker_main

    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timedelta(60))
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=300)
    )
    if mode == "debug_server":
        from torch.distributed.debug import start_debug_server

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        periodic = os.environ.get("DEBUG_DUMP_DIR")  # the frontend's periodic dumps, every 1 s
        start_debug_server(
            port=int(os.environ["DEBUG_PORT"]),
            start_method="spawn",
            dump_dir=periodic,
            dump_interval=1.0,
            enabled_dumps={"stacks"},
        )
    ctx = worker_main() if mode == "server" else contextlib.nullcontext()
    with ctx:
        if os.environ.get("SLOW_JOB"):  # no rank stuck: every step slow, the job progressing
            slow_steps(rank)
        for step in range(4):
            train_step(step, rank)


if __name__ == "__main__":
    main()
