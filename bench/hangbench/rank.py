"""The rank's side of the harness: who the rank is, its case, its bookkeeping files, and how
the case's capture wants recording and the process group set up (``init``). The training code
(``train.py``) asks it one thing: ``bug(run, fault, variant)``, whether this rank runs the
faulty branch now.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from pathlib import Path

from cases import Case

BUFFER = 64  # TORCH_FR_BUFFER_SIZE: small dumps
SHORT_TIMEOUT_S = 10  # captures that wait for the hung op to raise
LONG_TIMEOUT_S = 150  # captures of a live job: nothing times out first
WATCH_S = 4.0  # the stall watch's threshold
RUNNING_STEPS = 80  # healthy jobs and stragglers: long enough to be caught running


class Run:
    """The rank as the harness sees it: who it is, its case, its bookkeeping files."""

    def __init__(self, case: Case) -> None:
        self.rank, self.world = who_am_i()
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        if case.launcher == "torchrun_restart" and self.attempt == 0:
            decoy = (case.culprits[0] + 2) % case.world  # attempt 0 hangs elsewhere
            case = dataclasses.replace(
                case, fault="host_code", variant="poll", culprits=(decoy,), fault_step=2
            )
        self.case = case
        self.scratch = Path(os.environ["HB_SCRATCH"])
        self.dump_dir = Path(os.environ["HB_DUMP_DIR"])
        self.step = 0
        self.fired = False
        self.timeout = timedelta(seconds=self.timeout_s)
        self.note("pid", os.getpid())
        self.note("attempt", self.attempt)

    @property
    def timeout_s(self) -> int:
        if self.case.launcher == "torchrun_restart" and self.attempt == 0:
            return SHORT_TIMEOUT_S
        return LONG_TIMEOUT_S if self.case.long_timeout else SHORT_TIMEOUT_S

    @property
    def steps(self) -> int:
        return RUNNING_STEPS if not self.case.hangs else self.case.steps

    def note(self, what: str, value: object) -> None:
        path = self.scratch / f"{what}_{self.rank}"
        path.with_suffix(".tmp").write_text(str(value))
        path.with_suffix(".tmp").rename(path)

    def reached(self, what: str) -> None:
        self.note("fault", f"{what} (step {self.step})")

    def fifo(self, name: str) -> Path:
        """A path whose open() never returns: a FIFO nobody opens from the other end (a
        hung network mount behaves so)."""
        path = self.scratch / f"{name}_{self.rank}"
        if not path.exists():
            os.mkfifo(path)
        return path


def who_am_i() -> tuple[int, int]:
    """The rank and world size, as each launcher tells them."""
    for rank, size in (
        ("RANK", "WORLD_SIZE"),
        ("SLURM_PROCID", "SLURM_NTASKS"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ):
        if rank in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    raise SystemExit("no rank in the environment")


def bug(run: Run, fault: str, variant: str | None = None) -> bool:
    """The faulty branch: this rank is the case's culprit, at or past the fault's step, once."""
    c = run.case
    if c.fault != fault or (variant is not None and c.variant != variant):
        return False
    if run.rank not in c.culprits or run.step < c.fault_step or run.fired:
        return False
    run.fired = True
    run.reached(f"{fault}/{c.variant}")
    return True


def init(run: Run) -> None:
    """Recording and the process group, the way each capture wants them."""
    cap = run.case.capture
    if cap in ("signal", "exception", "collect", "periodic", "watch_api"):
        import frtrace.recorder

        watch = WATCH_S if cap == "watch_api" else None
        frtrace.recorder.enable(run.dump_dir, buffer_size=BUFFER, watch=watch)
    import torch.distributed as dist

    if run.case.launcher == "torchrun_restart":  # each attempt's own keys in the agent's store
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            run.world,
            is_master=False,
            timeout=timedelta(seconds=60),
        )
        store = dist.PrefixStore(f"attempt_{run.attempt}", store)
        dist.init_process_group(
            "gloo", store=store, rank=run.rank, world_size=run.world, timeout=run.timeout
        )
    else:
        address = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        dist.init_process_group(
            "gloo", init_method=address, rank=run.rank, world_size=run.world, timeout=run.timeout
        )
    if cap in ("store", "periodic"):
        from torch.distributed.debug import start_debug_server

        periodic = str(run.dump_dir / "periodic") if cap == "periodic" else None
        start_debug_server(
            port=int(os.environ["HB_DEBUG_PORT"]),
            start_method="spawn",
            dump_dir=periodic,
            dump_interval=1.0,
            enabled_dumps={"stacks"},
        )
