#!/usr/bin/env python3
"""Real hung Gloo jobs under real ``torchrun``, with every artifact such a job leaves behind.

Each fixture (``<scenario>__<capture>``) is one real job: ``python -m torch.distributed.run
--nproc-per-node N --log-dir logs --redirects 3 --tee 3 ...`` runs this file with ``--worker``
in ``tests/fixtures/gloo_evidence/<fixture>/`` (the working directory of the job), every rank
a separate process on CPU Gloo, its main wrapped in torchelastic's ``@record``. A real fault is
injected (an exception in a pipeline stage, a stage leaving its schedule, a stall before a
``monitored_barrier``, a segfault, a wrong tensor size, a killed rank, a cross-group deadlock;
under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, a rank calling another collective and a rank stalled
before one: torch's own check says so), and the job is captured one way or another
(``CAPTURES``). What the job leaves is kept:

* ``comm_lib_trace_rank_<r>``         Flight Recorder dump (pickle), from frtrace.recorder or
                                      from torch's ``_dump_fr_trace()`` on a timer
* ``stacks_rank_<r>.json``            frtrace.recorder's sidecar (stacks, dump time, trigger)
* ``pyspy_rank_<r>.txt``              ``py-spy dump --pid`` of a live, hung rank
* ``logs/<run_id>/attempt_0/<local_rank>/{stdout,stderr}.log`` and ``error.json``: torchrun's
* ``torchrun.log``                    torchrun's own console (with the ``--tee`` lines)
* ``../../gloo_evidence_json/<fixture>/comm_lib_trace_rank_<r>.json``: JSON twin (some fixtures)

``tests/fixtures/gloo_evidence/MANIFEST.json`` holds the truth of every fixture, from how it
was built (never from an analyzer), and what each rank was doing when it was captured.

Usage::

    python3 scripts/make_evidence_fixtures.py                         # all -> tests/fixtures
    python3 scripts/make_evidence_fixtures.py --only pp_1f1b_skip__signal  # one (repeatable)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import _free_port, _to_json, _write_atomic

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parent.parent
TREE = "gloo_evidence"
JSON_TREE = "gloo_evidence_json"
DUMP_STEM = "comm_lib_trace_rank_"  # torch's TORCH_FR_DUMP_TEMP_FILE default prefix

BUFFER = 16  # TORCH_FR_BUFFER_SIZE: small dumps
PG_TIMEOUT_LONG_S = 60  # signal captures: nothing times out before the harness has captured
PG_TIMEOUT_SHORT_S = 6  # exception / timer captures: the hung collectives raise after this
MB_TIMEOUT_S = 4  # monitored_barrier(timeout=...)
TIMER_DELAY_S = 2.0  # timer capture: from the fault point to torch's _dump_fr_trace()
SLOW_MONITOR_S = 60  # torchrun --monitor-interval where the harness captures live ranks first
NOTICE_MONITOR_S = 20  # --monitor-interval where torchrun notices a dead rank after the capture
SETTLE_S = 1.5  # from "every rank is where it will stay" to the capture
FIXTURE_TIMEOUT_S = 150.0


# --------------------------------------------------------------------------------------------
# Worker side: one process per rank, started by torchrun in the fixture directory.
# --------------------------------------------------------------------------------------------


class Job:
    """What a rank's program needs: its rank, a state the harness can read, the capture."""

    def __init__(self, fx: Fixture, scratch: Path) -> None:
        self.fx = fx
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.scratch = scratch
        self.dir = Path.cwd()
        self.step = 0
        self.state = "starting"
        _write_atomic(scratch / f"pid_{self.rank}", str(os.getpid()).encode())
        self.torch: Any = None
        self.dist: Any = None

    # ---- bookkeeping the harness reads (never what an analysis reads) ----------------------

    def set_state(self, state: str, marker: str | None = None) -> None:
        self.state = state
        _write_atomic(self.scratch / f"state_{self.rank}", state.encode())
        if marker:
            _write_atomic(self.scratch / f"{marker}_{self.rank}", state.encode())

    # ---- setup -----------------------------------------------------------------------------

    @property
    def timeout(self) -> timedelta:
        long = self.fx.capture in ("signal", "instant", "running_signal") or self.fx.pg_timeout_long
        return timedelta(seconds=PG_TIMEOUT_LONG_S if long else PG_TIMEOUT_SHORT_S)

    def init(self) -> None:
        if self.fx.capture in RECORDER_CAPTURES:
            import frtrace.recorder

            frtrace.recorder.enable(self.dir, buffer_size=BUFFER)
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", timeout=self.timeout)
        if self.rank == 0:
            _write_atomic(self.scratch / "torch_version", torch.__version__.encode())
        if self.fx.capture in ("timer", "instant"):
            # the first _dump_fr_trace() of a process takes ~1 s (lazy init): pay it now
            torch._C._distributed_c10d._dump_fr_trace()
        print(f"rank {self.rank}: process group ready (world {self.world})", flush=True)

    def new_group(self, ranks: list[int]) -> Any:
        return self.dist.new_group(ranks, timeout=self.timeout)

    # ---- capture ---------------------------------------------------------------------------

    def arm_timer(self, delay: float = TIMER_DELAY_S) -> None:
        """Timer capture: dump through torch's API ``delay`` s from now, from a thread."""
        if self.fx.capture != "timer":
            return
        timer = threading.Timer(delay, self.dump_now, args=("timer",))
        timer.daemon = True
        timer.start()

    def dump_now(self, why: str) -> None:
        c10d = self.torch._C._distributed_c10d
        state = self.state
        pkl = c10d._dump_fr_trace(
            includeCollectives=True, includeStackTraces=True, onlyActive=False
        )
        _write_atomic(self.dir / f"{DUMP_STEM}{self.rank}", pkl)
        if self.fx.json_twin:
            js = c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
            twin = self.dir.parent.parent / JSON_TREE / self.dir.name
            _write_atomic(twin / f"{DUMP_STEM}{self.rank}.json", js)
        _write_atomic(self.scratch / f"dumped_{self.rank}", state.encode())
        print(f"rank {self.rank}: wrote Flight Recorder dump ({why})", flush=True)

    def recorder_dumped(self) -> bool:
        import frtrace.recorder

        st = frtrace.recorder.state()
        return bool(st and st.written)


RECORDER_CAPTURES = ("signal", "exception", "running_signal")


def worker_main(name: str, scratch: Path) -> None:
    fx = FIXTURES[name]
    job = Job(fx, scratch)
    job.init()
    try:
        PROGRAMS[fx.scenario](job)
    except BaseException as exc:  # the state says so; the exception goes on to the top
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        job.set_state(f"raised {type(exc).__name__}: {first[:120]} (was: {job.state})")
        raise
    job.set_state("finished", marker="finished")
    print(f"rank {job.rank}: done", flush=True)


# --------------------------------------------------------------------------------------------
# Scenario programs.
# --------------------------------------------------------------------------------------------


def _block(job: Job, index: int) -> Any:
    import torch.nn as nn

    job.torch.manual_seed(100 + index)  # the same weights for a stage whoever builds it
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU())


def prog_pp_gpipe_exception(job: Job) -> None:
    """torch.distributed.pipelining, 4 stages, GPipe; stage 2's forward raises in step 2."""
    torch = job.torch
    import torch.nn as nn
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    n_mb, culprit = 4, 2

    class Stage(nn.Module):
        def __init__(self, block: nn.Module) -> None:
            super().__init__()
            self.block = block
            self.calls = 0

        def forward(self, x: Any) -> Any:
            mb = self.calls % n_mb
            self.calls += 1
            if job.rank == culprit and job.step == 2 and mb == 2:
                job.set_state(
                    f"raised ValueError in Stage.forward, step 2 microbatch {mb}", "fault"
                )
                raise ValueError(f"stage {job.rank}: bad activations in microbatch {mb}")
            return self.block(x)

    module = Stage(_block(job, job.rank))
    stage = PipelineStage(module, job.rank, job.world, torch.device("cpu"))
    sched = ScheduleGPipe(stage, n_microbatches=n_mb, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.SGD(module.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(7)
    for step in range(1, 4):
        job.step = step
        x, y = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
        job.set_state(f"in ScheduleGPipe.step() step {step}", "stuck" if step == 2 else None)
        opt.zero_grad()
        if job.rank == 0:
            sched.step(x)
        elif job.rank == job.world - 1:
            losses: list[Any] = []
            sched.step(target=y, losses=losses)
            print(f"step {step}: loss {sum(float(v) for v in losses) / n_mb:.4f}", flush=True)
        else:
            sched.step()
        opt.step()


class LossNotFinite(FloatingPointError):
    pass


def prog_pp_1f1b_skip(job: Job) -> None:
    """Hand-written 1F1B over dist.send/recv; the last stage catches a NaN loss and skips on to
    the step's grad-norm all_reduce, leaving its peers in send/recv."""
    torch, dist = job.torch, job.dist
    stages, n_mb, culprit = job.world, 4, job.world - 1
    rank, last = job.rank, job.rank == job.world - 1
    block = _block(job, rank)
    opt = torch.optim.SGD(block.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(11)
    acts: dict[int, tuple[Any, Any]] = {}
    sends: list[Any] = []  # isend works: blocking sends both ways would deadlock 1F1B

    def forward(mb: int, x0: Any, y: Any) -> None:
        if rank == 0:
            x = x0
        else:
            x = torch.empty(2, 8)
            job.set_state(f"in recv from {rank - 1} (forward mb {mb}) step {job.step}")
            dist.recv(x, src=rank - 1)
            x.requires_grad_()
        out = block(x)
        if last:
            loss = nn_mse(out, y)
            if not torch.isfinite(loss):
                raise LossNotFinite(f"loss is {loss.item()} at step {job.step} microbatch {mb}")
            acts[mb] = (x, loss)
        else:
            sends.append(dist.isend(out.detach(), dst=rank + 1))
            acts[mb] = (x, out)

    def backward(mb: int) -> None:
        x, out = acts.pop(mb)
        if last:
            out.backward()
        else:
            grad = torch.empty_like(out)
            job.set_state(f"in recv from {rank + 1} (backward mb {mb}) step {job.step}")
            dist.recv(grad, src=rank + 1)
            out.backward(grad)
        if rank > 0:
            sends.append(dist.isend(x.grad, dst=rank - 1))

    import torch.nn.functional as nnf

    nn_mse = nnf.mse_loss
    for step in range(1, 4):
        job.step = step
        xs = [torch.randn(2, 8, generator=g) for _ in range(n_mb)]
        ys = [torch.randn(2, 8, generator=g) for _ in range(n_mb)]
        if step == 2:
            ys[1][0, 0] = float("nan")  # one bad sample in microbatch 1's targets
            job.arm_timer()
        warm = min(stages - 1 - rank, n_mb)
        order = ["F"] * warm + ["F", "B"] * (n_mb - warm) + ["B"] * warm
        fwd = bwd = 0
        opt.zero_grad()
        try:
            for op in order:
                if op == "F":
                    forward(fwd, xs[fwd], ys[fwd])
                    fwd += 1
                else:
                    backward(bwd)
                    bwd += 1
        except LossNotFinite as exc:
            assert rank == culprit
            job.set_state(f"caught LossNotFinite at step {step}; skipped the rest of 1F1B", "fault")
            print(f"rank {rank}: {exc}; skipping the rest of this step", flush=True)
            acts.clear()
        else:
            job.set_state(f"in isend wait step {step}")
            for work in sends:
                work.wait()
        sends.clear()
        norm = torch.stack([p.grad.norm() for p in block.parameters() if p.grad is not None])
        total = (norm**2).sum().reshape(1)
        job.set_state(f"in all_reduce (grad norm) step {step}", "stuck" if step == 2 else None)
        dist.all_reduce(total)
        print(f"rank {rank}: step {step} grad norm {total.sqrt().item():.4f}", flush=True)
        opt.step()


def _monitored_barrier(job: Job, stallers: list[int], wait_all: bool) -> None:
    torch, dist = job.torch, job.dist
    for step in range(1, 4):
        job.step = step
        grads = torch.full((64,), float(job.rank))
        job.set_state(f"in all_reduce step {step}")
        dist.all_reduce(grads)
        if step == 3:
            job.arm_timer()
            if job.rank in stallers:
                job.set_state("host code: writing a checkpoint shard (time.sleep), step 3", "fault")
                print(f"rank {job.rank}: writing checkpoint shard", flush=True)
                time.sleep(3600)
            job.set_state("in monitored_barrier step 3", "stuck")
            dist.monitored_barrier(timeout=timedelta(seconds=MB_TIMEOUT_S), wait_all_ranks=wait_all)


def prog_monitored_barrier(job: Job) -> None:
    _monitored_barrier(job, [3], wait_all=False)


def prog_monitored_barrier_wait_all(job: Job) -> None:
    _monitored_barrier(job, [2, 3], wait_all=True)


def _augment_batch(job: Job, batch: Any) -> Any:
    """Stands in for a native data-augmentation extension that dereferences a null pointer."""
    if job.rank == 1 and job.step == 3:
        job.set_state("crashed (SIGSEGV) in _augment_batch, step 3", "fault")
        ctypes.string_at(0)
    return batch * 1.0


def prog_crash_segfault(job: Job) -> None:
    torch, dist = job.torch, job.dist
    for step in range(1, 5):
        job.step = step
        batch = _augment_batch(job, torch.full((64,), float(job.rank)))
        job.set_state(f"in all_reduce step {step}", "stuck" if step == 3 else None)
        dist.all_reduce(batch)


def prog_size_abort(job: Job) -> None:
    torch, dist = job.torch, job.dist
    for step in range(1, 5):
        job.step = step
        n = 256 if (job.rank == 2 and step == 3) else 64
        if job.rank == 2 and step == 3:
            job.set_state("in all_reduce step 3 with 256 elements (peers: 64)", "fault")
        else:
            job.set_state(f"in all_reduce step {step}", "stuck" if step == 3 else None)
        dist.all_reduce(torch.full((n,), float(job.rank)))


def prog_victim_killed(job: Job) -> None:
    torch, dist = job.torch, job.dist
    for step in range(1, 5):
        job.step = step
        if step == 3:
            job.arm_timer(delay=TIMER_DELAY_S + 1.5)  # after the harness has killed rank 3
            if job.rank == 2:
                job.set_state("host code: waiting on a file lock (time.sleep), step 3", "fault")
                print(f"rank {job.rank}: waiting for the dataset lock", flush=True)
                time.sleep(3600)
        job.set_state(f"in all_reduce step {step}", "stuck" if step == 3 else None)
        dist.all_reduce(torch.full((64,), float(job.rank)))


def prog_cycle_new_group(job: Job) -> None:
    torch, dist = job.torch, job.dist
    groups = {"A": [0, 1], "B": [1, 2], "C": [0, 2]}
    pgs = {label: job.new_group(ranks) for label, ranks in groups.items()}
    # each rank starts with "its" group: 0 -> A, 1 -> B, 2 -> C, then its other group
    first = "ABC"[job.rank]
    second = next(lb for lb, ranks in groups.items() if job.rank in ranks and lb != first)
    job.arm_timer()
    for label in (first, second):
        job.set_state(f"in all_reduce[{label}={groups[label]}]", "stuck")
        dist.all_reduce(torch.full((32,), float(job.rank)), group=pgs[label])


def prog_healthy_pairs(job: Job) -> None:
    """8 ranks in four 2-rank groups, many small collectives; dumped at one instant."""
    torch, dist = job.torch, job.dist
    pairs = [job.new_group([2 * i, 2 * i + 1]) for i in range(job.world // 2)]
    mine = pairs[job.rank // 2]
    store = dist.distributed_c10d._get_default_store()
    dumped = threading.Event()
    if job.fx.capture == "instant":

        def at_instant() -> None:
            while not store.check(["dump_at"]):  # store.get() would block holding the GIL
                time.sleep(0.05)
            when = float(store.get("dump_at").decode())
            time.sleep(max(0.0, when - time.time()))
            job.dump_now(f"timer at {when:.3f}")
            dumped.set()

        threading.Thread(target=at_instant, daemon=True).start()
    step, stop_after = 0, None
    while True:
        step += 1
        job.step = step
        if step == 10:
            if job.rank == 0:
                store.set("dump_at", f"{time.time() + 1.5:.6f}")
            job.set_state(f"training step {step}", "ready")
        done = dumped.is_set() or (job.fx.capture == "running_signal" and job.recorder_dumped())
        if done and stop_after is None:
            stop_after = step + 20
        x = torch.full((8,), float(job.rank))
        x[0] = 1.0 if stop_after is not None and step >= stop_after else 0.0
        job.set_state(f"in all_reduce[pair] step {step}")
        dist.all_reduce(x, group=mine)
        if step % 3 == 0:
            out = torch.empty(8)
            job.set_state(f"in all_gather[pair] step {step}")
            dist.all_gather_single(out, torch.full((4,), float(step)), group=mine)
        job.set_state(f"host code step {step}")
        time.sleep(0.01)
        if x[0] > 0 or step > 3000:
            break
    job.set_state("in barrier[world] (end)")
    dist.barrier()


def prog_detail_mismatch(job: Job) -> None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: in step 3 rank 1 broadcasts where the others
    all_reduce; torch's collective check (ProcessGroupWrapper) raises on every rank."""
    torch, dist = job.torch, job.dist
    for step in range(1, 4):
        job.step = step
        t = torch.full((64,), float(job.rank))
        if job.rank == 1 and step == 3:
            job.set_state("in broadcast(src=0) step 3 (peers: all_reduce)", "fault")
            dist.broadcast(t, src=0)
        else:
            job.set_state(f"in all_reduce step {step}")
            dist.all_reduce(t)


def prog_detail_stall(job: Job) -> None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: in step 3 rank 2 stalls in host code; the others'
    all_reduce first runs torch's monitored barrier (waitAllRanks), which names rank 2."""
    torch, dist = job.torch, job.dist
    for step in range(1, 4):
        job.step = step
        if step == 3 and job.rank == 2:
            job.set_state("host code: waiting on a data shard (time.sleep), step 3", "fault")
            print(f"rank {job.rank}: waiting for the next data shard", flush=True)
            time.sleep(3600)
        job.set_state(f"in all_reduce step {step}", "stuck" if step == 3 else None)
        dist.all_reduce(torch.full((64,), float(job.rank)))


PROGRAMS: dict[str, Callable[[Job], None]] = {
    "pp_gpipe_exception": prog_pp_gpipe_exception,
    "pp_1f1b_skip": prog_pp_1f1b_skip,
    "monitored_barrier": prog_monitored_barrier,
    "monitored_barrier_wait_all": prog_monitored_barrier_wait_all,
    "crash_segfault": prog_crash_segfault,
    "size_abort": prog_size_abort,
    "victim_killed": prog_victim_killed,
    "cycle_new_group": prog_cycle_new_group,
    "healthy_pairs": prog_healthy_pairs,
    "detail_mismatch": prog_detail_mismatch,
    "detail_stall": prog_detail_stall,
}


# --------------------------------------------------------------------------------------------
# Fixture table: scenario x capture, with the truth from how each was built.
# --------------------------------------------------------------------------------------------

CAPTURES: dict[str, str] = {
    "signal": (
        "frtrace.recorder.enable(<fixture>) before init_process_group (PG timeout "
        f"{PG_TIMEOUT_LONG_S} s, so nothing times out first); torchrun --monitor-interval "
        f"{SLOW_MONITOR_S} so it does not tear the job down at the first failure. Once every "
        f"rank is where it stays (+{SETTLE_S} s) the harness runs `py-spy dump --pid` on every "
        "live rank, sends each SIGUSR1 (the recorder dumps and writes its sidecar), then sends "
        "SIGTERM to torchrun (the operator cancels the job). A rank whose exception was not "
        "caught has dumped through the recorder's excepthook before"
    ),
    "exception": (
        "frtrace.recorder enabled, PG timeout "
        f"{PG_TIMEOUT_SHORT_S} s, torchrun defaults (--monitor-interval 0.1): nobody "
        "intervenes. A rank dumps when an exception reaches the top (its own user error, or a "
        "collective that timed out or lost its peer); torchrun stops the other workers (SIGTERM) "
        "right after the first one fails, so ranks that have not raised by then leave no dump"
    ),
    "timer": (
        "no recorder: at the fault point every rank starts a threading.Timer that "
        f"{TIMER_DELAY_S:.0f} s later calls torch._C._distributed_c10d._dump_fr_trace() (and "
        "_dump_fr_trace_json() for the JSON twin) while the main thread is blocked; the harness "
        "then runs py-spy on the live ranks. PG timeout "
        f"{PG_TIMEOUT_SHORT_S} s: afterwards the hung collectives raise and torchrun reports"
    ),
    "instant": (
        "no recorder, nothing wrong: every rank's thread sleeps until one wall-clock instant "
        "(rank 0 publishes it in the TCPStore) and calls _dump_fr_trace()/_dump_fr_trace_json() "
        "while the job trains; the job then finishes normally (no dump time is recorded)"
    ),
    "running_signal": (
        "frtrace.recorder enabled, nothing wrong: the harness sends SIGUSR1 to every rank at "
        "once while they train; the job then finishes normally"
    ),
}


def _ff(rank: int, kind: str, role: str, detail: str) -> dict[str, Any]:
    return {"rank": rank, "kind": kind, "role": role, "detail": detail}


def _expect(verdict: str, *culprits: int) -> dict[str, Any]:
    return {"verdict": verdict, "culprit_ranks": list(culprits)}


@dataclass(frozen=True)
class Fixture:
    scenario: str
    capture: str
    world_size: int
    description: str
    culprit_ranks: list[int]
    waiting_ranks: list[int]
    fault_group_ranks: list[int]
    fault_op: str | None
    first_failure: dict[str, Any] | None
    expect: dict[str, Any]
    why_expect: str
    crashed_ranks: list[int] = field(default_factory=list)  # died without a dump, by design
    # harness: wait for these markers / exits before capturing
    stuck: list[int] = field(default_factory=list)
    faulted: list[int] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)
    min_dead: int = 0
    kill: list[int] = field(default_factory=list)  # SIGKILLed by the harness once ready
    slow_monitor: bool = False
    # signal captures: after the capture, let torchrun notice the failed rank itself (True) or
    # cancel the job with SIGTERM to torchrun (False: nobody has failed, all ranks hang)
    wait_for_torchrun: bool = False
    json_twin: bool = False
    pg_timeout_long: bool = False
    env: dict[str, str] = field(default_factory=dict)
    # what the run must have left ("as built"): rank lists per artifact
    require: dict[str, list[int]] = field(default_factory=dict)
    # (rank or -1 for torchrun.log, regex) that must appear in that rank's stderr.log
    log_checks: list[tuple[int, str]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.scenario}__{self.capture}"


_PP_A = (
    "torch.distributed.pipelining: a 4-layer nn.Sequential split into 4 stages (Linear(8, 8) + "
    "ReLU each, one per rank), PipelineStage + ScheduleGPipe with 4 microbatches, mse_loss on "
    "the last stage, 3 steps. In step 2 stage 2's forward raises ValueError (user code) at "
    "microbatch index 2: stage 2 leaves the schedule, stages 0, 1 and 3 stay blocked in the "
    "schedule's p2p (irecv/isend), which Gloo does not record in the Flight Recorder."
)
_PP_B = (
    "Hand-written 1F1B over dist.send/dist.recv: 4 stages (Linear(8, 8) + ReLU each), 4 "
    "microbatches, then an all_reduce of the squared grad norm on the default group ending "
    "each step. In step 2 microbatch 1's targets hold a NaN; the last stage (rank 3) raises "
    "LossNotFinite from its loss check, catches it, skips the rest of its schedule and goes to "
    "the grad-norm all_reduce, where it waits; ranks 0-2 stay blocked in send/recv (not "
    "recorded by Gloo)."
)
_MB = (
    "3 steps of a default-group all_reduce; in step 3 rank 3 stalls in host code "
    "(time.sleep, a checkpoint write) and the others call dist.monitored_barrier(timeout="
    f"{MB_TIMEOUT_S} s). Rank 0's monitored_barrier raises RuntimeError naming rank 3."
)
_MBA = (
    "As monitored_barrier, but ranks 2 and 3 stall and the barrier is called with "
    "wait_all_ranks=True: rank 0's RuntimeError names both."
)
_SEGV = (
    "4 steps of a default-group all_reduce of a 64-element batch; in step 3 rank 1's "
    "_augment_batch (standing in for a native extension) reads address 0 via "
    "ctypes.string_at(0): SIGSEGV, no Python exception, no dump, no error.json. Ranks 0, 2, 3 "
    "are in step 3's all_reduce."
)
_SIZE = (
    "4 steps of a default-group all_reduce of 64 float32; in step 3 rank 2 passes 256 "
    "elements. A peer that receives more bytes than it expects is aborted by Gloo "
    "(gloo::EnforceNotMet, 'Received data size doesn't match expected size', SIGABRT): the "
    "victim dies, the culprit (rank 2) does not."
)
_VICTIM = (
    "4 steps of a default-group all_reduce; in step 3 rank 2 stalls in host code (time.sleep, "
    "a file lock) and never enters the all_reduce; ranks 0, 1, 3 block in it. The harness then "
    "SIGKILLs rank 3 (standing in for the OOM killer): a victim dies without a dump while the "
    "culprit, alive and dumped, never entered the op."
)
_CYCLE = (
    "World 3; groups A=[0, 1], B=[1, 2], C=[0, 2] made with new_group and never used before. "
    "Each rank all_reduces first on 'its' group (0 on A, 1 on B, 2 on C), then on its other "
    "one: 0 waits in A for 1, 1 in B for 2, 2 in C for 0, a true deadlock. No entry is ever "
    "retired in any of the groups; each group's op is recorded by one rank only."
)
_HEALTHY = (
    "World 8 in four 2-rank groups ([0, 1], [2, 3], [4, 5], [6, 7], new_group): each step an "
    "8-element all_reduce in the pair, every 3rd step an all_gather_single, 10 ms of host "
    "work. Dumped mid-training; 20 steps later each pair agrees (a flag in its all_reduce) to "
    "stop; a world barrier; exit 0. Nothing is wrong."
)

_DETAIL_MM = (
    "TORCH_DISTRIBUTED_DEBUG=DETAIL (every collective checked by torch's ProcessGroupWrapper), "
    "3 steps of a default-group all_reduce of 64 float32; in step 3 rank 1 calls "
    "dist.broadcast(src=0) where ranks 0, 2, 3 call all_reduce. torch's check raises "
    "RuntimeError 'Detected mismatch between collectives on ranks' on every rank before the op "
    "reaches Gloo: nothing hangs, every rank dies naming itself and the first rank that differs."
)
_DETAIL_STALL = (
    "TORCH_DISTRIBUTED_DEBUG=DETAIL, 3 steps of a default-group all_reduce; in step 3 rank 2 "
    "stalls in host code (time.sleep, waiting on a data shard) and never calls the all_reduce. "
    "Before each collective torch's ProcessGroupWrapper runs a monitored barrier "
    "(waitAllRanks) with the PG timeout: rank 0's raises naming rank 2, ranks 1 and 3 fail "
    "waiting on rank 0."
)

_WHY_PP_A = (
    "rank 2 raised in user code (its error.json and its recorder sidecar say ValueError in "
    "Stage.forward); every other rank waits on p2p that Gloo never records"
)
_WHY_PP_B = (
    "rank 3 left the 1F1B schedule (its log says so, its stack is in the grad-norm "
    "all_reduce that nobody else reached); the others' send/recv are not recorded"
)
_WHY_MB = "the monitored_barrier error on rank 0 names the ranks that never arrived"
_WHY_SEGV = (
    "rank 1 died of SIGSEGV in user code (torchrun: 'Signal 11'); the others' failures "
    "(connection closed, timeouts, SIGTERM) are symptoms"
)
_WHY_SIZE = (
    "rank 2 passed 256 elements where its peers passed 64 (its dump's input_sizes); the rank "
    "Gloo aborted only received the wrong size"
)
_WHY_VICTIM = (
    "rank 2 never entered step 3's all_reduce (its stack: time.sleep in host code; its dump: "
    "one all_reduce fewer); rank 3's death (SIGKILL) came later and is not the cause"
)
_WHY_CYCLE = (
    "a true deadlock: every rank of the job is blocked in a different group whose other "
    "member is blocked elsewhere; no rank deviates from a common order, so all three are named"
)

_DETAIL_MONITOR = (
    "torchrun --monitor-interval 20 (not the default 0.1): every rank that raises has written "
    "its dump, sidecar and error.json before torchrun notices and stops the others, so which "
    "ranks left them does not depend on who raised first"
)
_WHY_DETAIL_MM = (
    "rank 1 called broadcast where its three peers called all_reduce at the same point: "
    "torch's own check says so on every rank (each names itself and the first rank that "
    "differs; three of four call all_reduce)"
)
_WHY_DETAIL_STALL = (
    "rank 2 never reached step 3's all_reduce (host code); torch's monitored barrier on rank "
    "0 names it as the rank that did not arrive"
)

_SEGV_FF = _ff(1, "crash", "cause", "SIGSEGV in _augment_batch (ctypes.string_at(0)), step 3")


def _fx(scenario: str, capture: str, **kw: Any) -> Fixture:
    return Fixture(scenario=scenario, capture=capture, **{**BASE[scenario], **kw})


BASE: dict[str, dict[str, Any]] = {
    "pp_gpipe_exception": {
        "world_size": 4,
        "description": _PP_A,
        "culprit_ranks": [2],
        "waiting_ranks": [0, 1, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "pipeline p2p (irecv/isend)",
        "first_failure": _ff(2, "exception", "cause", "ValueError in Stage.forward, step 2"),
        "expect": _expect("hang", 2),
        "why_expect": _WHY_PP_A,
        "faulted": [2],
        "exits": [2],
        "stuck": [0, 1, 3],
    },
    "pp_1f1b_skip": {
        "world_size": 4,
        "description": _PP_B,
        "culprit_ranks": [3],
        "waiting_ranks": [0, 1, 2],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "send/recv (1F1B), then all_reduce",
        "first_failure": _ff(
            3,
            "left_schedule",
            "cause",
            "caught LossNotFinite, skipped to the grad-norm all_reduce, step 2",
        ),
        "expect": _expect("hang", 3),
        "why_expect": _WHY_PP_B,
        "faulted": [3],
        "stuck": [3],
    },
    "monitored_barrier": {
        "world_size": 4,
        "description": _MB,
        "culprit_ranks": [3],
        "waiting_ranks": [0, 1, 2],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "monitored_barrier",
        "first_failure": _ff(
            3, "stall", "cause", "host code (time.sleep) before monitored_barrier"
        ),
        "expect": _expect("hang", 3),
        "why_expect": _WHY_MB,
        "faulted": [3],
        "stuck": [0, 1, 2],
        "log_checks": [(0, r"Rank 3 failed to pass monitoredBarrier")],
    },
    "monitored_barrier_wait_all": {
        "world_size": 4,
        "description": _MBA,
        "culprit_ranks": [2, 3],
        "waiting_ranks": [0, 1],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "monitored_barrier",
        "first_failure": _ff(
            2, "stall", "cause", "ranks 2, 3 in host code before monitored_barrier"
        ),
        "expect": _expect("hang", 2, 3),
        "why_expect": _WHY_MB,
        "faulted": [2, 3],
        "stuck": [0, 1],
        "log_checks": [(0, r"Ranks 2, 3 failed to pass monitoredBarrier")],
    },
    "crash_segfault": {
        "world_size": 4,
        "description": _SEGV,
        "culprit_ranks": [1],
        "waiting_ranks": [0, 2, 3],
        "crashed_ranks": [1],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce",
        "first_failure": _SEGV_FF,
        "expect": _expect("hang", 1),
        "why_expect": _WHY_SEGV,
        "faulted": [1],
        "exits": [1],
        "stuck": [0, 2, 3],
        "log_checks": [(-1, r"Signal 11 \(SIGSEGV\)")],
    },
    "size_abort": {
        "world_size": 4,
        "description": _SIZE,
        "culprit_ranks": [2],
        "waiting_ranks": [0, 1, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce",
        "first_failure": None,  # the victim, found from the run (see _observe)
        "expect": _expect("desync", 2),
        "why_expect": _WHY_SIZE,
        "faulted": [2],
        "stuck": [0, 1, 3],
        "min_dead": 1,
        "extra": {"culprit_input_sizes": [[256]], "expected_input_sizes": [[64]]},
    },
    "victim_killed": {
        "world_size": 4,
        "description": _VICTIM,
        "culprit_ranks": [2],
        "waiting_ranks": [0, 1, 3],
        "crashed_ranks": [3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce",
        "first_failure": _ff(
            3,
            "killed",
            "symptom",
            "SIGKILL from outside while waiting in step 3's all_reduce (not the cause)",
        ),
        "expect": _expect("hang", 2),
        "why_expect": _WHY_VICTIM,
        "faulted": [2],
        "stuck": [0, 1, 3],
        "kill": [3],
    },
    "cycle_new_group": {
        "world_size": 3,
        "description": _CYCLE,
        "culprit_ranks": [0, 1, 2],
        "waiting_ranks": [],
        "fault_group_ranks": [0, 1, 2],
        "fault_op": "all_reduce",
        "first_failure": None,
        "expect": _expect("hang", 0, 1, 2),
        "why_expect": _WHY_CYCLE,
        "stuck": [0, 1, 2],
        "extra": {"deadlock_cycle": [0, 1, 2], "groups": {"A": [0, 1], "B": [1, 2], "C": [0, 2]}},
    },
    "detail_mismatch": {
        "world_size": 4,
        "description": _DETAIL_MM,
        "culprit_ranks": [1],
        "waiting_ranks": [0, 2, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "broadcast where the others all_reduce",
        "first_failure": _ff(1, "wrong_call", "cause", "broadcast(src=0) where peers all_reduce"),
        "expect": _expect("desync", 1),
        "why_expect": _WHY_DETAIL_MM,
        "faulted": [1],
        "env": {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        "log_checks": [
            (
                0,
                r"Rank 0 is running collective: CollectiveFingerPrint\(SequenceNumber=\d+, "
                r"OpType=ALLREDUCE.*but Rank 1 is running collective: "
                r"CollectiveFingerPrint\(SequenceNumber=\d+, OpType=BROADCAST",
            ),
            (1, r"Rank 1 is running collective: CollectiveFingerPrint\([^)]*OpType=BROADCAST"),
        ],
    },
    "detail_stall": {
        "world_size": 4,
        "description": _DETAIL_STALL,
        "culprit_ranks": [2],
        "waiting_ranks": [0, 1, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce (torch's monitored barrier before it)",
        "first_failure": _ff(2, "stall", "cause", "host code (time.sleep) before all_reduce"),
        "expect": _expect("hang", 2),
        "why_expect": _WHY_DETAIL_STALL,
        "faulted": [2],
        "env": {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        "log_checks": [(0, r"Ranks 2 failed to pass monitoredBarrier")],
    },
    "healthy_pairs": {
        "world_size": 8,
        "description": _HEALTHY,
        "culprit_ranks": [],
        "waiting_ranks": [],
        "fault_group_ranks": [],
        "fault_op": None,
        "first_failure": None,
        "expect": _expect("healthy"),
        "why_expect": "nothing is wrong; pairs caught mid-op are a race of the dump instant",
    },
}

_ALL4 = [0, 1, 2, 3]
FIXTURE_LIST: list[Fixture] = [
    _fx(
        "pp_gpipe_exception", "exception", require={"dump": [2], "sidecar": [2], "error_json": [2]}
    ),
    _fx(
        "pp_gpipe_exception",
        "signal",
        wait_for_torchrun=True,
        require={"dump": _ALL4, "sidecar": _ALL4, "error_json": [2]},
    ),
    _fx("pp_1f1b_skip", "signal", require={"dump": _ALL4, "sidecar": _ALL4, "pyspy": _ALL4}),
    _fx("pp_1f1b_skip", "timer", json_twin=True, require={"dump": _ALL4, "pyspy": _ALL4}),
    _fx("monitored_barrier", "exception", require={"dump": [0], "sidecar": [0], "error_json": [0]}),
    _fx(
        "monitored_barrier",
        "signal",
        wait_for_torchrun=True,
        require={"dump": _ALL4, "sidecar": _ALL4, "error_json": [0], "pyspy": [3]},
    ),
    _fx(
        "monitored_barrier_wait_all",
        "exception",
        require={"dump": [0], "sidecar": [0], "error_json": [0]},
    ),
    _fx(
        "monitored_barrier_wait_all",
        "signal",
        wait_for_torchrun=True,
        require={"dump": _ALL4, "sidecar": _ALL4, "error_json": [0], "pyspy": [2, 3]},
    ),
    _fx("crash_segfault", "exception", require={"no_dump": [1]}),
    _fx("crash_segfault", "signal", wait_for_torchrun=True, require={"no_dump": [1]}),
    _fx("size_abort", "exception", require={}),
    _fx("size_abort", "signal", wait_for_torchrun=True, require={"dump": [2]}),
    _fx(
        "victim_killed",
        "signal",
        wait_for_torchrun=True,
        require={"dump": [2], "sidecar": [2], "no_dump": [3], "pyspy": [2]},
    ),
    _fx(
        "victim_killed",
        "timer",
        json_twin=True,
        wait_for_torchrun=True,
        require={"dump": [2], "no_dump": [3], "pyspy": [2]},
    ),
    _fx(
        "cycle_new_group",
        "signal",
        require={"dump": [0, 1, 2], "sidecar": [0, 1, 2], "pyspy": [0, 1, 2]},
    ),
    _fx(
        "cycle_new_group",
        "timer",
        json_twin=True,
        require={"dump": [0, 1, 2], "pyspy": [0, 1, 2], "error_json": []},
    ),
    _fx(
        "detail_mismatch",
        "exception",
        wait_for_torchrun=True,
        require={"dump": _ALL4, "sidecar": _ALL4, "error_json": _ALL4},
        extra={"monitor_interval_s": NOTICE_MONITOR_S, "why_monitor": _DETAIL_MONITOR},
    ),
    _fx(
        "detail_stall",
        "exception",
        wait_for_torchrun=True,
        require={"dump": [0, 1, 3], "sidecar": [0, 1, 3], "error_json": [0, 1, 3], "no_dump": [2]},
        extra={"monitor_interval_s": NOTICE_MONITOR_S, "why_monitor": _DETAIL_MONITOR},
    ),
    _fx("healthy_pairs", "instant", json_twin=True, require={"dump": list(range(8))}),
    _fx(
        "healthy_pairs",
        "running_signal",
        require={"dump": list(range(8)), "sidecar": list(range(8))},
    ),
]
FIXTURES: dict[str, Fixture] = {f.name: f for f in FIXTURE_LIST}


# --------------------------------------------------------------------------------------------
# Harness side.
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    fx: Fixture
    dir: Path
    scratch: Path
    proc: subprocess.Popen[bytes] | None = None
    t0: float = field(default_factory=time.monotonic)
    errors: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    at_capture: dict[int, str] = field(default_factory=dict)
    live_at_capture: list[int] = field(default_factory=list)
    pyspy_refused: str = ""
    seconds: float = 0.0

    def note(self, what: str) -> None:
        line = f"{time.monotonic() - self.t0:5.1f}s {what}"
        self.actions.append(what)
        print(f"{self.fx.name}: {line}", file=sys.stderr, flush=True)

    def pid(self, rank: int) -> int | None:
        path = self.scratch / f"pid_{rank}"
        return int(path.read_text()) if path.exists() else None

    def alive(self, rank: int) -> bool:
        pid = self.pid(rank)
        if pid is None:
            return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")

    def has(self, marker: str, rank: int) -> bool:
        return (self.scratch / f"{marker}_{rank}").exists()

    def state(self, rank: int) -> str:
        path = self.scratch / f"state_{rank}"
        return path.read_text() if path.exists() else "not started"

    def wait_for(self, pred: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            if self.proc is not None and self.proc.poll() is not None:
                return pred()
            time.sleep(0.05)
        return False

    def ready(self) -> bool:
        fx = self.fx
        if not all(self.has("stuck", r) for r in fx.stuck):
            return False
        if not all(self.has("fault", r) for r in fx.faulted):
            return False
        if not all(self.pid(r) and not self.alive(r) for r in fx.exits):
            return False
        dead = [r for r in range(fx.world_size) if self.pid(r) and not self.alive(r)]
        return len(dead) >= fx.min_dead

    def live(self) -> list[int]:
        return [r for r in range(self.fx.world_size) if self.alive(r)]

    def pyspy(self, ranks: list[int]) -> None:
        exe = shutil.which("py-spy")
        if exe is None:
            self.pyspy_refused = "py-spy not installed"
            return
        for r in ranks:
            pid = self.pid(r)
            res = subprocess.run(
                [exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
            )
            if res.returncode != 0:
                if "ptrace" in res.stderr.lower() or "permission" in res.stderr.lower():
                    self.pyspy_refused = res.stderr.strip().splitlines()[0]
                self.note(f"py-spy on rank {r} failed: {res.stderr.strip()[:200]}")
                continue
            (self.dir / f"pyspy_rank_{r}.txt").write_text(res.stdout)
        self.note(f"py-spy dump --pid on ranks {ranks}")

    def signal_torchrun(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.note(f"{sig.name} to torchrun")


def _torchrun_cmd(fx: Fixture, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    cmd += ["--nproc-per-node", str(fx.world_size), "--master-port", str(port)]
    cmd += ["--rdzv-id", fx.scenario]
    cmd += ["--log-dir", "logs", "--redirects", "3", "--tee", "3"]
    if fx.wait_for_torchrun:
        cmd += ["--monitor-interval", str(NOTICE_MONITOR_S)]
    elif fx.slow_monitor or fx.capture == "signal":
        cmd += ["--monitor-interval", str(SLOW_MONITOR_S)]
    cmd += [str(SCRIPT), "--worker", fx.name, "--scratch", ".scratch"]
    return cmd


def _capture(run: Run) -> None:
    fx = run.fx
    hung = fx.capture in ("signal", "timer") or fx.kill
    if hung:
        if not run.wait_for(run.ready, 40):
            run.errors.append(f"never ready: states {[run.state(r) for r in range(fx.world_size)]}")
            return
        time.sleep(0.5 if fx.kill else SETTLE_S)
        for r in fx.kill:
            pid = run.pid(r)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            run.note(f"SIGKILL to rank {r} (pid {pid}) in: {run.state(r)}")
        if fx.kill:
            time.sleep(SETTLE_S)
    if fx.capture == "signal":
        live = run.live()
        run.live_at_capture = live
        run.at_capture = {r: run.state(r) for r in range(fx.world_size)}
        run.pyspy(live)
        for r in live:
            pid = run.pid(r)
            assert pid is not None
            os.kill(pid, signal.SIGUSR1)
        run.note(f"SIGUSR1 to ranks {live}")
        sidecars = lambda: all(  # noqa: E731
            (run.dir / f"stacks_rank_{r}.json").exists() or not run.alive(r) for r in live
        )
        if not run.wait_for(sidecars, 30):
            run.errors.append("sidecars missing after SIGUSR1")
        time.sleep(0.5)
        if not fx.wait_for_torchrun:
            run.signal_torchrun(signal.SIGTERM)
    elif fx.capture == "timer":
        dumps = lambda: all(run.has("dumped", r) or not run.alive(r) for r in range(fx.world_size))  # noqa: E731
        if not run.wait_for(dumps, 30):
            run.errors.append("timer dumps missing")
        live = run.live()
        run.live_at_capture = live
        run.at_capture = {
            r: (run.scratch / f"dumped_{r}").read_text() if run.has("dumped", r) else run.state(r)
            for r in range(fx.world_size)
        }
        run.pyspy(live)
        if fx.slow_monitor:
            time.sleep(0.5)
            run.signal_torchrun(signal.SIGTERM)
    elif fx.capture == "running_signal":
        if not run.wait_for(lambda: all(run.has("ready", r) for r in range(fx.world_size)), 90):
            run.errors.append("never ready")
            return
        live = run.live()
        run.live_at_capture = live
        run.at_capture = {r: run.state(r) for r in range(fx.world_size)}
        for r in live:
            pid = run.pid(r)
            assert pid is not None
            os.kill(pid, signal.SIGUSR1)
        run.note(f"SIGUSR1 to ranks {live} while training")


def run_fixture(fx: Fixture, out: Path) -> Run:
    fdir = out / TREE / fx.name
    shutil.rmtree(fdir, ignore_errors=True)
    fdir.mkdir(parents=True)
    twin = out / JSON_TREE / fx.name
    shutil.rmtree(twin, ignore_errors=True)
    if fx.json_twin:
        twin.mkdir(parents=True)
    scratch = fdir / ".scratch"
    scratch.mkdir()
    run = Run(fx, fdir, scratch)
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "TORCH_FR_BUFFER_SIZE", "PYTHONFAULTHANDLER"):
        env.pop(key, None)
    env.update(PYTHONUNBUFFERED="1", **fx.env)
    if fx.capture not in RECORDER_CAPTURES:
        env["TORCH_FR_BUFFER_SIZE"] = str(BUFFER)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = _torchrun_cmd(fx, _free_port())
    with open(fdir / "torchrun.log", "wb") as log:
        run.proc = subprocess.Popen(
            cmd, cwd=fdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            _capture(run)
            run.proc.wait(timeout=FIXTURE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            run.errors.append("torchrun did not finish")
        finally:
            if run.proc.poll() is None:
                os.killpg(run.proc.pid, signal.SIGKILL)
                run.proc.wait()
    run.note(f"torchrun exited with {run.proc.returncode}")
    run.seconds = time.monotonic() - run.t0
    if not run.at_capture:  # exception / instant: where each rank was when it stopped
        run.at_capture = {r: run.state(r) for r in range(fx.world_size)}
    return run


def _stabilise(run: Run) -> str:
    """``logs/<run_id>_<random>`` -> ``logs/<run_id>``, absolute fixture paths -> relative."""
    logs = run.dir / "logs"
    made = [p for p in logs.iterdir() if p.is_dir()] if logs.exists() else []
    if len(made) != 1:
        run.errors.append(f"expected one torchrun log dir, found {[p.name for p in made]}")
        return ""
    old = made[0].name
    new = run.fx.scenario
    made[0].rename(logs / new)
    for path in [run.dir / "torchrun.log", *(logs / new).rglob("*")]:
        if path.is_file() and path.suffix in (".log", ".json"):
            text = path.read_text(errors="replace")
            fixed = text.replace(str(run.dir) + "/", "").replace(str(run.dir), ".")
            fixed = fixed.replace(f"logs/{old}", f"logs/{new}").replace(old, new)
            if fixed != text:
                path.write_text(fixed)
    return old


def _error_json(run: Run, rank: int) -> dict[str, Any] | None:
    path = run.dir / "logs" / run.fx.scenario / "attempt_0" / str(rank) / "error.json"
    return json.loads(path.read_text()) if path.exists() else None


def _worker_log(run: Run, rank: int, which: str = "stderr") -> str:
    path = run.dir / "logs" / run.fx.scenario / "attempt_0" / str(rank) / f"{which}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _observe(run: Run) -> dict[str, Any]:
    """What the run left, file by file (existence and the recorder's trigger), plus the states
    the ranks reported to the harness; never an analysis of the dumps."""
    fx, n = run.fx, run.fx.world_size
    dumps = [r for r in range(n) if (run.dir / f"{DUMP_STEM}{r}").exists()]
    twin = run.dir.parent.parent / JSON_TREE / fx.name
    dumps_json = [r for r in range(n) if (twin / f"{DUMP_STEM}{r}.json").exists()]
    sidecars: dict[str, Any] = {}
    for r in range(n):
        path = run.dir / f"stacks_rank_{r}.json"
        if path.exists():
            sidecars[str(r)] = json.loads(path.read_text()).get("trigger")
    errors = {r: _error_json(run, r) for r in range(n)}
    aborted = [r for r in range(n) if "EnforceNotMet" in _worker_log(run, r)]
    return {
        "dumps": dumps,
        "dumps_json": dumps_json,
        "sidecars": sidecars,
        "error_json": [r for r in range(n) if errors[r] is not None],
        "pyspy": [r for r in range(n) if (run.dir / f"pyspy_rank_{r}.txt").exists()],
        "gloo_aborted": aborted,
    }


def _check(run: Run, seen: dict[str, Any]) -> None:
    fx = run.fx
    have = {
        "dump": set(seen["dumps"]),
        "sidecar": {int(r) for r in seen["sidecars"]},
        "error_json": set(seen["error_json"]),
        "pyspy": set(seen["pyspy"]),
    }
    for what, ranks in fx.require.items():
        if what == "no_dump":
            if set(ranks) & have["dump"]:
                run.errors.append(f"ranks {ranks} should have no dump, have {sorted(have['dump'])}")
            continue
        if what == "pyspy" and run.pyspy_refused:
            continue
        missing = set(ranks) - have[what]
        if missing:
            run.errors.append(f"{what} missing for ranks {sorted(missing)}")
    if fx.capture in ("signal", "timer") and not run.pyspy_refused:
        missing = set(run.live_at_capture) - have["pyspy"]
        if missing:
            run.errors.append(f"no py-spy file for live ranks {sorted(missing)}")
    for r in fx.faulted:
        if not run.has("fault", r):
            run.errors.append(f"rank {r} never reached its fault point")
    if fx.json_twin and seen["dumps_json"] != seen["dumps"]:
        run.errors.append(f"JSON twins {seen['dumps_json']} != dumps {seen['dumps']}")
    checks = list(fx.log_checks)
    if fx.wait_for_torchrun:  # torchrun noticed the failed rank itself, after the capture
        checks.append((-1, r"Root Cause \(first observed failure\)"))
    for rank, pattern in checks:
        text = (
            (run.dir / "torchrun.log").read_text(errors="replace")
            if rank < 0
            else json.dumps(_error_json(run, rank)) + _worker_log(run, rank)
        )
        if not re.search(pattern, text):
            run.errors.append(f"{pattern!r} not in {'torchrun.log' if rank < 0 else rank}")
    if fx.scenario == "size_abort" and (not seen["gloo_aborted"] or 2 in seen["gloo_aborted"]):
        run.errors.append(f"Gloo aborted {seen['gloo_aborted']}, expected a peer of rank 2")
    if fx.expect["verdict"] == "healthy" and run.proc is not None and run.proc.returncode != 0:
        run.errors.append(f"healthy job exited {run.proc.returncode}")
    for r in fx.culprit_ranks:  # a culprit that crashes by design leaves no dump
        if r in fx.crashed_ranks and r in have["dump"]:
            run.errors.append(f"crashed rank {r} has a dump")


def _end_of_rank(run: Run, seen: dict[str, Any], rank: int) -> str:
    """How a rank's process ended, from the harness's own actions and the files it left."""
    fx = run.fx
    err = _error_json(run, rank)
    if rank in fx.kill:
        return "killed by the harness (SIGKILL); no dump"
    if rank in seen["gloo_aborted"]:
        return "aborted by Gloo (gloo::EnforceNotMet, SIGABRT); no dump"
    if fx.scenario == "crash_segfault" and rank in fx.crashed_ranks:
        return "crashed (SIGSEGV); no dump"
    if err is not None:
        msg = err.get("message", {})
        text = msg.get("message", "") if isinstance(msg, dict) else str(msg)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return f"raised (error.json): {' '.join(lines[:2])[:200] if lines else '?'}"
    if run.has("finished", rank):
        return "finished normally"
    return "stopped by torchrun (SIGTERM) while: " + run.state(rank)


def manifest_entry(run: Run, seen: dict[str, Any], torch_version: str) -> dict[str, Any]:
    fx = run.fx
    crashed = sorted(set(fx.crashed_ranks) | set(seen["gloo_aborted"]))
    first = fx.first_failure
    if fx.scenario == "size_abort":
        victim = seen["gloo_aborted"][0]
        first = _ff(
            victim,
            "crash",
            "symptom",
            "aborted by Gloo: received more bytes than its "
            "all_reduce expected (rank 2 sent 256 elements)",
        )
    files = sorted(str(p.relative_to(run.dir)) for p in run.dir.rglob("*") if p.is_file())
    expect, why = fx.expect, fx.why_expect
    missing = [r for r in fx.culprit_ranks if r not in seen["dumps"]]
    if fx.scenario == "size_abort" and missing:
        expect = _expect("cannot_tell")
        why = (
            "rank 2's dump, the only artifact with its 256 elements, was not written (torchrun "
            "stopped it first); the victim's abort says it received more bytes than it expected, "
            "not from whom, and both its ring neighbours (0 and 2) lost the connection alike"
        )
    twin = run.dir.parent.parent / JSON_TREE / fx.name
    json_files = sorted(p.name for p in twin.iterdir()) if twin.exists() else []
    entry: dict[str, Any] = {
        "scenario": fx.scenario,
        "capture": fx.capture,
        "description": fx.description,
        "how_captured": CAPTURES[fx.capture],
        "torch_version": torch_version,
        "launcher": " ".join(["torchrun", *_torchrun_cmd(fx, 0)[3:]])
        .replace(str(SCRIPT), "scripts/make_evidence_fixtures.py")
        .replace("--master-port 0", "--master-port <free port>"),
        "world_size": fx.world_size,
        "buffer_size": BUFFER,
        "culprit_ranks": fx.culprit_ranks,
        "waiting_ranks": fx.waiting_ranks,
        "crashed_ranks": crashed,
        "fault_group_ranks": fx.fault_group_ranks,
        "fault_op": fx.fault_op,
        "first_failure": first,
        "expect": expect,
        "why_expect": why,
        **fx.extra,
        "evidence": {
            "flight_recorder_pickle": seen["dumps"],
            "flight_recorder_json": seen["dumps_json"],
            "recorder_sidecars": seen["sidecars"],
            "error_json": seen["error_json"],
            "pyspy": seen["pyspy"],
            "torchrun_log": "torchrun.log",
            "worker_logs": f"logs/{fx.scenario}/attempt_0/<rank>/{{stdout,stderr}}.log",
            "files": files,
            "json_files": json_files,
        },
        "live_at_capture": run.live_at_capture,
        "state_at_capture": {
            str(r): (
                f"dead ({_end_of_rank(run, seen, r)}); last state: {run.at_capture.get(r, '')}"
                if r in crashed and r not in run.live_at_capture
                else run.at_capture.get(r, "")
            )
            for r in range(fx.world_size)
        },
        "end_of_rank": {str(r): _end_of_rank(run, seen, r) for r in range(fx.world_size)},
        "harness_actions": run.actions,
    }
    if run.pyspy_refused:
        entry["pyspy_refused"] = run.pyspy_refused
    return entry


def build(fx: Fixture, out: Path) -> tuple[Run, dict[str, Any] | None]:
    run = run_fixture(fx, out)
    version_file = run.scratch / "torch_version"
    version = version_file.read_text() if version_file.exists() else "?"
    if not run.errors:
        _stabilise(run)
    seen = _observe(run)
    if not run.errors:
        _check(run, seen)
    entry = manifest_entry(run, seen, version) if not run.errors else None
    if not os.environ.get("KEEP_SCRATCH"):
        shutil.rmtree(run.scratch, ignore_errors=True)
    if entry is not None:  # the file list without the harness's scratch
        entry["evidence"]["files"] = [f for f in entry["evidence"]["files"] if ".scratch" not in f]
    return run, entry


def with_retries(
    make: Callable[[Fixture, Path], tuple[Run, dict[str, Any] | None]],
    fx: Fixture,
    out: Path,
    retries: int,
) -> tuple[Fixture, Run, dict[str, Any] | None]:
    """``make(fx, out)``, run again up to ``retries`` times while it fails."""
    run, entry = make(fx, out)
    for _ in range(retries):
        if entry is not None:
            break
        print(f"{fx.name}: {'; '.join(run.errors)}; retrying", file=sys.stderr)
        run, entry = make(fx, out)
    return fx, run, entry


def record_manifest(
    manifest_path: Path,
    results: list[tuple[Fixture, Run, dict[str, Any] | None]],
    fixture_list: list[Fixture],
    t0: float,
) -> int:
    """Each fixture's outcome printed, the made ones' truth written into ``manifest_path``
    (in ``fixture_list``'s order, the failed ones dropped); 1 if any failed."""
    manifest: dict[str, Any] = {}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
    failed = 0
    for fx, run, entry in results:
        status = "ok" if entry is not None else "FAILED"
        print(f"{fx.name:40s} {status:6s} {run.seconds:5.1f}s")
        for err in run.errors:
            print(f"    {err}")
        if entry is None:
            failed += 1
            manifest.pop(fx.name, None)
        else:
            manifest[fx.name] = entry
    order = {f.name: i for i, f in enumerate(fixture_list)}
    manifest = dict(sorted(manifest.items(), key=lambda kv: order.get(kv[0], len(order))))
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(_to_json(manifest) + "\n")
    print(f"{len(results) - failed}/{len(results)} fixtures ok in {time.monotonic() - t0:.1f}s")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "fixtures")
    ap.add_argument("--only", action="append", choices=sorted(FIXTURES), metavar="FIXTURE")
    ap.add_argument("--jobs", type=int, default=1, help="fixtures run in parallel (1: timing)")
    ap.add_argument("--retries", type=int, default=1, help="reruns of a failed fixture")
    ap.add_argument("--worker", choices=sorted(FIXTURES), help=argparse.SUPPRESS)
    ap.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        from torch.distributed.elastic.multiprocessing.errors import record

        record(worker_main)(args.worker, args.scratch.resolve())
        return 0

    out: Path = args.out.resolve()
    chosen = [FIXTURES[n] for n in args.only] if args.only else FIXTURE_LIST
    t0 = time.monotonic()

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda fx: with_retries(build, fx, out, args.retries), chosen))
    return record_manifest(out / TREE / "MANIFEST.json", results, FIXTURE_LIST, t0)


if __name__ == "__main__":
    sys.exit(main())
