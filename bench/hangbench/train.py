"""What every rank of a HangBench job runs: ``python train.py CASE`` (or under torchrun).

A small training job of the case's mechanism (``models.py``) whose rank(s) named by the case
run the faulty code, written the way such code is written: an ``if`` that only one rank takes
(a data shard one batch short, rank 0 alone logging, a sample that fails to decode, a mount
that hangs). ``bug(run, fault, variant)`` is that branch: true once, for the culprit, from the
case's step on. Everything the harness needs from the rank (its pid, that it reached its fault,
its step) goes to ``$HB_SCRATCH``, never into the training code's decisions.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cases import BY_NAME  # noqa: E402
from rank import Run, bug, init  # noqa: E402

HOST_WORK_S = 0.1  # the host work of a step in running jobs
SLOW_S = 0.15  # a straggler's extra time a step


# ---- the training code ---------------------------------------------------------------------


def wait_for_file(path: Path) -> None:
    while not path.exists():  # a marker another job was to write
        time.sleep(0.2)


VOCAB_LOCK = threading.Lock()


def refresh_vocab(run: Run) -> None:
    with VOCAB_LOCK:  # taken by a thread that died holding it
        run.note("vocab", "refreshed")


def sync_to_bucket(run: Run) -> None:
    subprocess.run(["sleep", "3600"], check=True)  # `aws s3 sync` that never returns


def flush_logs(run: Run) -> None:
    time.sleep(3.0)  # a slow flush; the harness freezes the rank (SIGSTOP) in it


def prepare_step(run: Run, step: int) -> None:
    if bug(run, "host_code", "poll"):
        wait_for_file(run.scratch / "config.ready")
    if bug(run, "host_code", "lock"):
        threading.Thread(target=VOCAB_LOCK.acquire, daemon=True).start()
        time.sleep(0.2)
        refresh_vocab(run)
    if bug(run, "host_code", "subprocess"):
        sync_to_bucket(run)
    if bug(run, "frozen"):
        flush_logs(run)
    if bug(run, "dead", "sigkill"):
        os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer
    if bug(run, "dead", "segv"):
        ctypes.string_at(0)  # a native image decoder dereferences NULL
    if bug(run, "dead", "exit"):
        os._exit(3)  # a library gives up
    if bug(run, "two_threads", "heartbeat"):
        threading.Thread(target=heartbeat, args=(run,), daemon=True).start()
    if bug(run, "two_threads", "metrics"):
        threading.Thread(target=report_metrics, args=(run,), daemon=True).start()


def heartbeat(run: Run) -> None:
    import torch.distributed as dist

    while True:  # "are all ranks alive?", on the training group, from another thread
        dist.barrier()
        time.sleep(0.5)


def report_metrics(run: Run) -> None:
    import torch
    import torch.distributed as dist

    while True:
        dist.all_reduce(torch.ones(3))  # throughput, on the training group, off the main thread
        time.sleep(0.5)


def read_shard(run: Run, step: int) -> None:
    if bug(run, "data_loading", "fifo"):
        with open(run.fifo("shard"), "rb") as f:
            f.read()
    if run.case.fault == "straggler" and run.rank in run.case.culprits:
        time.sleep(SLOW_S)  # a slow disk: every batch late, never stuck


def fetch_remote(run: Run) -> bytes:
    server = socket.socket()  # a server that accepts the connection and never answers
    server.bind(("127.0.0.1", 0))
    server.listen()
    with socket.create_connection(server.getsockname()) as conn:
        return conn.recv(1 << 16)


def decode_sample(run: Run, x: Any) -> Any:
    if bug(run, "exception") or bug(run, "p2p", "pp_exception"):
        raise ValueError(f"rank {run.rank}: corrupt sample in step {run.step}: cannot decode")
    return x


def check_microbatch(run: Run, x: Any) -> None:
    """A pipeline stage's own per-microbatch work (``models.Stage``)."""
    decode_sample(run, x)
    if bug(run, "p2p", "pp_stall"):
        wait_for_file(run.scratch / "config.ready")


class Samples:
    """A map-style data set, read in a DataLoader worker process."""

    def __init__(self, run: Run, out: int) -> None:
        self.run, self.out = run, out

    def __len__(self) -> int:
        return 4 * 100

    def __getitem__(self, i: int) -> Any:
        import torch

        run = self.run
        run.step = 1 + i // 4
        if bug(run, "data_loading", "worker"):
            with open(run.fifo("sample"), "rb") as f:
                f.read()
        g = torch.Generator().manual_seed(1000 * run.rank + i)
        return decode_sample(run, torch.randn(8, generator=g)), torch.randn(self.out, generator=g)


def batches(run: Run, job: Any) -> Any:
    import torch

    if job.kind == "dataloader":
        from torch.utils.data import DataLoader

        yield from DataLoader(Samples(run, job.out), batch_size=4, num_workers=1)
        return
    rows = 8 if job.kind == "pp" else 4
    g = torch.Generator().manual_seed(1000 + run.rank)
    while True:
        yield torch.randn(rows, 8, generator=g), torch.randn(rows, job.out, generator=g)


def next_batch(run: Run, job: Any, data: Any, step: int) -> Any:
    read_shard(run, step)
    if bug(run, "data_loading", "socket"):
        fetch_remote(run)
    if bug(run, "op_kind", "uneven"):
        return None  # this rank's shard is one batch short: its epoch ends here
    x, y = next(data)
    if job.kind in ("dataloader", "pp"):  # decoded in the loader's worker, or by the stage
        return x, y
    return decode_sample(run, x), y


def log_metrics(run: Run, loss: float) -> None:
    import torch
    import torch.distributed as dist

    metrics = torch.full((8,), loss)
    if bug(run, "op_size", "small"):
        metrics = metrics[:4]  # a metric list built from what this rank saw
    if bug(run, "op_size", "large"):
        metrics = torch.full((256,), loss)
    if bug(run, "op_dtype", "f64"):
        metrics = metrics.double()  # a numpy float64 mixed in
    if bug(run, "op_kind", "reduce"):
        dist.reduce(metrics, dst=0)  # "only rank 0 needs the sum"
        return
    if bug(run, "op_kind", "broadcast"):
        dist.broadcast(metrics, src=run.rank)
        return
    if bug(run, "stuck_inside"):
        pass  # the harness freezes this rank (SIGSTOP) inside the all_reduce below
    elif run.case.fault == "stuck_inside" and run.step == run.case.fault_step:
        time.sleep(3.0)  # the others compute more metrics: the culprit enters alone, first
    dist.all_reduce(metrics)


def make_groups(run: Run) -> Any:
    """The evaluation pairs, made on first use; the culprit makes them in another order."""
    import torch.distributed as dist

    firsts = list(range(0, run.world, 2))
    if bug(run, "group_creation"):
        firsts.reverse()  # iterated from a set: another order on this rank
    mine = None
    for first in firsts:
        group = dist.new_group([first, first + 1], timeout=run.timeout)
        if run.rank in (first, first + 1):
            mine = group
    return mine


def sync_groups(run: Run, job: Any) -> None:
    """The per-step syncs on the rank's two groups (a subgroup, then a larger one)."""
    import torch
    import torch.distributed as dist

    a, b = job.groups["a"], job.groups["b"]
    if bug(run, "op_group"):
        a = None  # the world group passed where the subgroup was meant
    order = [(a, 1), (b, 2)]
    if bug(run, "op_order"):
        order.reverse()
    for group, n in order:
        dist.all_reduce(torch.ones(n), group=group)


def exchange_halo(run: Run) -> None:
    """Each rank sends its boundary to the right and receives its left neighbour's."""
    import torch
    import torch.distributed as dist

    right, left = (run.rank + 1) % run.world, (run.rank - 1) % run.world
    send = dist.isend(torch.full((4,), float(run.rank)), dst=right)
    if not bug(run, "p2p", "ring"):  # the culprit "has it cached" and posts no recv
        dist.recv(torch.empty(4), src=left)
    send.wait()


def write_shard(run: Run, state: Any, path: Path) -> None:
    import torch

    if bug(run, "checkpoint_io", "shard"):
        path = run.fifo("shard_ckpt")  # the checkpoint mount hangs under this rank
    torch.save(state, path)


def save_checkpoint(run: Run, job: Any, step: int) -> None:
    import torch
    import torch.distributed as dist

    folder = run.scratch / "ckpt" / f"step{step}"
    folder.mkdir(parents=True, exist_ok=True)
    if job.kind == "dcp":
        import torch.distributed.checkpoint as dcp

        dcp.save(job.state(), storage_writer=uploading_writer(run, folder))
    elif job.saves_on_every_rank:
        write_shard(run, job.state(), folder / f"shard_{run.rank}.pt")
    elif run.rank == 0:
        path = folder / "model.pt"
        if bug(run, "checkpoint_io", "torch_save"):
            path = run.fifo("ckpt")
        torch.save(job.state(), path)
    dist.barrier()  # nobody goes on before the checkpoint is complete


def uploading_writer(run: Run, folder: Path) -> Any:
    from torch.distributed.checkpoint import FileSystemWriter

    class UploadingWriter(FileSystemWriter):
        """Writes the shard, then uploads it to object storage."""

        def write_data(self, plan: Any, planner: Any) -> Any:
            done = super().write_data(plan, planner)
            done.wait()
            upload_shard(run, folder)
            return done

    return UploadingWriter(folder)


def upload_shard(run: Run, folder: Path) -> None:
    if bug(run, "checkpoint_io", "dcp_upload"):
        with open(run.fifo("upload"), "wb") as f:  # the upload's connection hangs
            f.write(b"")


def load_checkpoint(run: Run, job: Any) -> None:
    """DCP: resume from the newest complete checkpoint (a restarted attempt has one)."""
    import torch.distributed.checkpoint as dcp

    saved = sorted((run.scratch / "ckpt").glob("step*/.metadata"))
    if saved:
        dcp.load(job.state(), checkpoint_id=saved[-1].parent)


def finish(run: Run) -> None:
    import torch.distributed as dist

    dist.barrier()  # the end of the epoch: everybody, before the final checkpoint


def train(run: Run, job: Any) -> None:
    data = batches(run, job)
    every = 2 if run.case.hangs else 10
    for step in range(1, run.steps + 1):
        run.step = step
        run.note("step", step)
        prepare_step(run, step)
        try:
            batch = next_batch(run, job, data, step)
        except ValueError as exc:
            if run.case.variant != "caught_skip":
                raise
            print(f"rank {run.rank}: skipping a corrupt batch: {exc}", flush=True)
            continue
        if batch is None:
            break
        loss = job.train_step(*batch)
        log_metrics(run, loss)
        sync_groups(run, job)
        if job.kind in ("plain", "ddp") and run.case.fault == "p2p":
            exchange_halo(run)
        if run.case.fault == "group_creation" and step == run.case.fault_step:
            job.groups["a"] = make_groups(run)
        if step % every == 0:
            save_checkpoint(run, job, step)
        if not run.case.hangs:
            time.sleep(HOST_WORK_S)
    finish(run)


def main() -> None:
    run = Run(BY_NAME[sys.argv[1]])
    init(run)
    import models

    job = models.build(run)
    if job.kind == "dcp":
        load_checkpoint(run, job)
    run.note("ready", 1)
    train(run, job)
    run.note("finished", 1)


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record

    record(main)()
