#!/usr/bin/env python3
"""Produce real PyTorch Flight Recorder dumps with the Gloo backend on CPU, one per fault scenario.

Every rank of every scenario is a separate OS process running this file with ``--worker``. The
per-rank program of a scenario is one small function below; the harness launches the ranks,
waits until every rank that should dump has written its files, then releases them all at once
(so no rank's exit disturbs a peer that has not dumped yet).

Gloo has no dump-on-timeout in torch 2.13, so a hang is captured the way an operator would do
it by hand: at the fault point every rank arms a timer thread which, ``DUMP_DELAY_S`` later and
while the main thread is still blocked in the collective (Gloo releases the GIL in
``work.wait()``) or stuck in host code, writes

* ``<out>/gloo/<scenario>/rank_<r>``            ``_dump_fr_trace()`` (pickle, torch's file name)
* ``<out>/gloo_json/<scenario>/rank_<r>.json``  ``_dump_fr_trace_json()``, taken right after

and ``<out>/gloo/MANIFEST.json`` holds the ground truth of each scenario (from its construction,
plus the state each rank's main thread was in when its dump was taken).

Usage::

    python3 scripts/make_fixtures.py                      # all scenarios -> tests/fixtures
    python3 scripts/make_fixtures.py --only never_joins   # just one (repeatable)
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parent.parent

PG_TIMEOUT_S = 60  # long enough that nothing times out before the dump
DUMP_DELAY_S = 3.0  # from the fault point to the dump
SETTLE_S = 0.5  # end-of-job dumps wait this long after the last collective returned
SCENARIO_TIMEOUT_S = 120.0  # harness gives up on a scenario after this
RELEASE_WAIT_S = 60.0  # a dumped worker waits this long for the release signal
DEFAULT_BUFFER = 256  # TORCH_FR_BUFFER_SIZE unless a scenario says otherwise
FAULT_STEP = 5  # the step at which most scenarios inject their fault
T_START = time.monotonic()


# --------------------------------------------------------------------------------------------
# Worker side: one instance per rank process.
# --------------------------------------------------------------------------------------------


class SimulatedCrash(RuntimeError):
    """Makes a rank die without writing a dump (fallback if Gloo does not kill it first)."""


class Rank:
    """The per-rank view a scenario program works with: collectives, stalls and dumping."""

    def __init__(self, rank: int, world_size: int, out: Path, scratch: Path, name: str) -> None:
        import torch
        import torch.distributed as dist

        self.torch: Any = torch
        self.dist: Any = dist
        self.rank = rank
        self.world_size = world_size
        self.scratch = scratch
        self.pickle_path = out / "gloo" / name / f"rank_{rank}"
        self.json_path = out / "gloo_json" / name / f"rank_{rank}.json"
        self.step = 0
        self.state = "starting"
        self.delay_before_collective = 0.0
        self.groups: dict[str, Any] = {"world": None}
        self.group_ranks: dict[str, list[int]] = {"world": list(range(world_size))}
        self._dump_lock = threading.Lock()
        self.armed = False

    # ---- groups ----------------------------------------------------------------------------

    def new_group(self, label: str, ranks: list[int]) -> None:
        """``dist.new_group``; every rank must call it, in the same order."""
        pg = self.dist.new_group(ranks)
        self.groups[label] = pg
        self.group_ranks[label] = list(ranks)

    def new_subgroups(self, group_size: int) -> str:
        """``dist.new_subgroups``; registers this rank's own subgroup and returns its label."""
        pg, _ = self.dist.new_subgroups(group_size=group_size)
        ranks = self.dist.get_process_group_ranks(pg)
        label = "sub" + "".join(str(x) for x in ranks)
        self.groups[label] = pg
        self.group_ranks[label] = ranks
        return label

    def member(self, label: str) -> bool:
        return self.rank in self.group_ranks[label]

    def _group_size(self, label: str) -> int:
        return len(self.group_ranks[label])

    # ---- collectives -----------------------------------------------------------------------

    def _run(self, op: str, label: str, fn: Callable[[Any], object]) -> None:
        if self.delay_before_collective:
            self.state = f"host code before {op}[{label}] step {self.step}"
            time.sleep(self.delay_before_collective)
        self.state = f"in {op}[{label}] step {self.step}"
        if self.armed:  # after the fault point, log every call (a crash leaves no other trace)
            print(f"rank {self.rank}: {self.state}", flush=True)
        fn(self.groups[label])
        self.state = f"host code after {op}[{label}] step {self.step}"

    def _tensor(self, numel: int) -> Any:
        return self.torch.full((numel,), float(self.rank + 1))

    def all_reduce(self, label: str = "world", numel: int = 64) -> None:
        t = self._tensor(numel)
        self._run("all_reduce", label, lambda g: self.dist.all_reduce(t, group=g))

    def all_gather(self, label: str = "world", numel: int = 16) -> None:
        t = self._tensor(numel)
        out = self.torch.empty(numel * self._group_size(label))
        self._run("all_gather", label, lambda g: self.dist.all_gather_single(out, t, group=g))

    def reduce_scatter(self, label: str = "world", numel_out: int = 8) -> None:
        t = self._tensor(numel_out * self._group_size(label))
        out = self.torch.empty(numel_out)
        self._run(
            "reduce_scatter", label, lambda g: self.dist.reduce_scatter_single(out, t, group=g)
        )

    def broadcast(self, label: str = "world", numel: int = 8, src: int = 0) -> None:
        t = self._tensor(numel)
        self._run("broadcast", label, lambda g: self.dist.broadcast(t, src=src, group=g))

    def all_to_all(self, label: str = "world", numel_per_peer: int = 4) -> None:
        t = self._tensor(numel_per_peer * self._group_size(label))
        out = self.torch.empty_like(t)
        self._run("all_to_all", label, lambda g: self.dist.all_to_all_single(out, t, group=g))

    def send(self, dst: int, numel: int = 16) -> None:
        t = self._tensor(numel)
        self._run(f"send to {dst}", "world", lambda g: self.dist.send(t, dst=dst, group=g))

    def recv(self, src: int, numel: int = 16) -> None:
        t = self.torch.empty(numel)
        self._run(f"recv from {src}", "world", lambda g: self.dist.recv(t, src=src, group=g))

    def barrier(self, label: str = "world") -> None:
        self._run("barrier", label, lambda g: self.dist.barrier(group=g))

    # ---- control flow ----------------------------------------------------------------------

    def steps(self, n: int) -> Iterator[int]:
        """Training steps 1..n (``self.step`` tracks the current one for the state strings)."""
        for step in range(1, n + 1):
            self.step = step
            yield step

    def stall(self, reason: str) -> None:
        """Block forever in host code (the main thread never reaches its next collective)."""
        self.state = f"host code: {reason} (step {self.step})"
        while True:
            time.sleep(3600)

    def arm(self, delay: float = DUMP_DELAY_S) -> None:
        """Fault point reached: dump from a timer thread ``delay`` seconds from now."""
        self.armed = True
        print(f"rank {self.rank}: armed at {time.monotonic() - T_START:.1f}s", flush=True)
        timer = threading.Timer(delay, self.dump_and_exit)
        timer.daemon = True
        timer.start()

    def dump_and_exit(self) -> None:
        """Write both dumps (same moment), report, wait for the harness's release, exit."""
        try:
            self._dump()
        except BaseException:
            traceback.print_exc()
            sys.stdout.flush()
            os._exit(3)
        deadline = time.monotonic() + RELEASE_WAIT_S
        while not (self.scratch / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os._exit(0)

    def _dump(self) -> None:
        with self._dump_lock:
            c10d = self.torch._C._distributed_c10d
            state = self.state
            pkl: bytes = c10d._dump_fr_trace(
                includeCollectives=True, includeStackTraces=True, onlyActive=False
            )
            js: bytes = c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
            _write_atomic(self.pickle_path, pkl)
            _write_atomic(self.json_path, js)
            self.report("dumped", state)
            print(f"rank {self.rank}: dumped at {time.monotonic() - T_START:.1f}s", flush=True)

    def report(self, outcome: str, state: str) -> None:
        names = {
            label: (pg or self.dist.group.WORLD).group_name
            for label, pg in self.groups.items()
            if self.member(label)
        }
        result = {"outcome": outcome, "state_at_dump": state, "group_names": names}
        result["torch_version"] = self.torch.__version__
        result["group_ranks"] = self.group_ranks
        _write_atomic(self.scratch / f"result_{self.rank}.json", json.dumps(result).encode())


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _short_error(exc: BaseException) -> str:
    """``RuntimeError: Connection closed by peer`` from a long Gloo message."""
    msg = str(exc).splitlines()[0] if str(exc) else ""
    msg = re.sub(r"^\[[^\]]*\]\s*", "", msg)  # [/path/pair.cc:553]
    msg = re.sub(r"\s*\[[0-9.:]+\]:\d+", "", msg)  # [127.0.0.1]:34714
    msg = re.split(r"\. ", msg)[0]
    return f"{type(exc).__name__}: {msg}"


def worker_main(name: str, rank: int, port: int, out: Path, scratch: Path) -> None:
    scenario = SCENARIOS[name]
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(scenario.buffer_size)  # also set by the harness
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    from datetime import timedelta

    r = Rank(rank, scenario.world_size, out, scratch, name)
    r.dist.init_process_group(
        "gloo",
        rank=rank,
        world_size=scenario.world_size,
        timeout=timedelta(seconds=PG_TIMEOUT_S),
    )
    # The first dump in a process takes ~1 s (lazy initialisation); pay it now, not at the fault.
    r.torch._C._distributed_c10d._dump_fr_trace()
    print(f"rank {rank}: process group ready after {time.monotonic() - T_START:.1f}s", flush=True)
    try:
        scenario.program(r)
    except SimulatedCrash as exc:
        r.report("crashed", f"crashed in host code: {exc} (step {r.step})")
        print(f"rank {rank}: simulated crash: {exc}", flush=True)
        os._exit(1)
    except Exception as exc:
        if not r.armed:  # not a fault we injected: a bug in this script
            raise
        # A collective failed (e.g. a peer died): stay alive so the armed timer still dumps.
        r.state = f"raised {_short_error(exc)} in {r.state.removeprefix('in ')}"
        print(f"rank {rank}: {r.state}", flush=True)
    # Hang scenarios never get here on a blocked rank; the others wait for their armed timer.
    while True:
        time.sleep(3600)


# --------------------------------------------------------------------------------------------
# Scenario programs (run on every rank; ``r.rank`` decides who misbehaves).
# --------------------------------------------------------------------------------------------


def train_step(r: Rank, label: str = "world", grads: bool = True) -> None:
    """One step of a data-parallel job: gradient all_reduce, then a mix of other collectives."""
    if grads:
        r.all_reduce(label, 64)
    r.all_gather(label, 16)
    if r.step % 2 == 0:
        r.reduce_scatter(label, 8)
    if r.step % 3 == 0:
        r.broadcast(label, 8, src=0)


def prog_healthy(r: Rank) -> None:
    r.new_group("pair01", [0, 1])
    for _ in r.steps(6):
        train_step(r)
        if r.member("pair01"):
            r.all_reduce("pair01", 32)
    r.all_to_all("world", 4)
    r.barrier()
    time.sleep(SETTLE_S)  # Gloo retires an entry shortly *after* wait() returns
    r.dump_and_exit()


def prog_never_joins(r: Rank) -> None:
    for step in r.steps(FAULT_STEP):
        if step == FAULT_STEP:
            r.arm()
            if r.rank == 2:
                r.stall("stuck in the data loader, never calls all_reduce")
        train_step(r)


def prog_wrong_collective(r: Rank) -> None:
    for step in r.steps(FAULT_STEP):
        if step == FAULT_STEP:
            r.arm()
            if r.rank == 1:
                r.broadcast("world", 64, src=0)  # everybody else calls all_reduce here
            else:
                r.all_reduce("world", 64)
            train_step(r, grads=False)
        else:
            train_step(r)


def prog_size_mismatch(r: Rank) -> None:
    # Tiny buffers (<= 32 bytes): Gloo does not notice the mismatch; the smaller side completes.
    for step in r.steps(FAULT_STEP + 1):  # only rank 3 gets to step 6
        if step == FAULT_STEP:
            r.arm()
        train_step(r)
        r.all_reduce("world", 4 if step == FAULT_STEP and r.rank == 3 else 8)  # metrics


def prog_size_mismatch_crashed(r: Rank) -> None:
    # Larger buffers: rank 3 receives more bytes than it expects and Gloo aborts the process.
    for step in r.steps(FAULT_STEP):
        if step == FAULT_STEP:
            r.arm()
            if r.rank == 3:
                r.all_reduce("world", 32)  # the others reduce 64 elements
                raise SimulatedCrash("all_reduce returned; crash by hand")  # not seen in 2.13
        train_step(r)


def prog_opposite_order(r: Rank) -> None:
    r.new_group("A", [0, 1])
    r.new_group("B", [0, 1])
    # 0 and 1 deadlock in step 5; 2 and 3 then block in step 6's all_reduce.
    arm_at = FAULT_STEP if r.member("A") else FAULT_STEP + 1
    for step in r.steps(FAULT_STEP + 1):
        if step == arm_at:
            r.arm()
        r.all_reduce("world", 64)
        if r.member("A"):
            order = ["B", "A"] if step == FAULT_STEP and r.rank == 1 else ["A", "B"]
            for label in order:
                r.all_reduce(label, 32)


def prog_mesh_stall(r: Rank) -> None:
    tp = [[0, 1, 2, 3], [4, 5, 6, 7]]
    dp = [[0, 4], [1, 5], [2, 6], [3, 7]]
    for i, ranks in enumerate(tp):
        r.new_group(f"tp{i}", ranks)
    for i, ranks in enumerate(dp):
        r.new_group(f"dp{i}", ranks)
    my_tp = next(f"tp{i}" for i, ranks in enumerate(tp) if r.rank in ranks)
    my_dp = next(f"dp{i}" for i, ranks in enumerate(dp) if r.rank in ranks)
    fault_step = 4
    for step in r.steps(fault_step):
        if step == fault_step:
            r.arm()
            if r.rank == 5:
                r.stall("stalled in host code before the tp all_reduce")
        r.all_reduce(my_tp, 64)  # tensor-parallel activations
        r.all_gather(my_tp, 8)
        r.all_reduce(my_dp, 32)  # data-parallel gradients


def prog_wrapped_buffer(r: Rank) -> None:
    r.new_group("pair01", [0, 1])
    r.new_group("pair23", [2, 3])
    for _ in r.steps(20):
        r.all_reduce("world", 64)
        if r.member("pair01"):
            r.all_reduce("pair01", 16)
            r.all_gather("pair01", 8)
        elif r.step % 2 == 0:
            r.all_reduce("pair23", 16)
    r.step += 1
    r.arm()
    if r.rank == 1:
        r.stall("writing a checkpoint, never calls the final all_reduce")
    r.all_reduce("world", 64)


def prog_late_rank(r: Rank) -> None:
    if r.rank == 3:
        r.delay_before_collective = 0.2
    for _ in r.steps(8):
        train_step(r)
    r.delay_before_collective = 0.0
    r.barrier()
    time.sleep(SETTLE_S)
    r.dump_and_exit()


def prog_disjoint_subgroups(r: Rank) -> None:
    sub = r.new_subgroups(2)  # [0, 1] and [2, 3]: same pg_id on every rank, different names
    # 2 and 3 stop in step 5's subgroup ops; 0 and 1 then block in step 6's all_reduce.
    arm_at = FAULT_STEP if sub == "sub23" else FAULT_STEP + 1
    for step in r.steps(FAULT_STEP + 1):
        if step == arm_at:
            r.arm()
        r.all_reduce("world", 64)
        if step == FAULT_STEP and r.rank == 3:
            r.stall("stalled in host code before the subgroup all_reduce")
        r.all_reduce(sub, 32)
        r.all_gather(sub, 8)


def prog_cyclic_deadlock(r: Rank) -> None:
    # A=[0, 1], B=[1, 2], C=[0, 2]; every rank enters its two groups in the order A, B, C
    # (no cycle) until rank 0 enters C before A: 0 waits on 2 in C, 2 on 1 in B, 1 on 0 in A.
    r.new_group("A", [0, 1])
    r.new_group("B", [1, 2])
    r.new_group("C", [0, 2])
    mine = [g for g in ("A", "B", "C") if r.member(g)]
    arm_at = FAULT_STEP if r.rank != 3 else FAULT_STEP + 1
    for step in r.steps(FAULT_STEP + 1):
        if step == arm_at:
            r.arm()
        r.all_reduce("world", 64)
        order = list(mine)
        if step == FAULT_STEP and r.rank == 0:
            order.reverse()
        for label in order:
            r.all_reduce(label, 32)


def prog_broadcast_root(r: Rank) -> None:
    for step in r.steps(FAULT_STEP + 1):
        if step == FAULT_STEP:
            r.arm()
        r.all_reduce("world", 64)
        src = 1 if (step == FAULT_STEP and r.rank == 2) else 0
        r.broadcast("world", 8, src=src)
        r.all_gather("world", 16)


def prog_p2p_hidden(r: Rank) -> None:
    # A pipeline 0 -> 1 -> 2 -> 3 of send/recv after a default-group all_reduce every step.
    for step in r.steps(FAULT_STEP):
        if step == FAULT_STEP:
            r.arm()
        r.all_reduce("world", 64)
        if step == FAULT_STEP and r.rank == 2:
            r.stall("never posts the recv from rank 1")
        if r.rank > 0:
            r.recv(r.rank - 1, 16)
        if r.rank < r.world_size - 1:
            r.send(r.rank + 1, 16)


# --------------------------------------------------------------------------------------------
# Scenario table: program + ground truth.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    program: Callable[[Rank], None]
    description: str
    culprit_ranks: list[int]
    waiting_ranks: list[int]
    fault_group_ranks: list[int]
    fault_op: str | None
    notes: str
    world_size: int = 4
    buffer_size: int = DEFAULT_BUFFER
    crashed_ranks: list[int] = field(default_factory=list)
    # ranks whose main thread must be inside a collective when the dump is taken
    blocked_ranks: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ranks_with_dumps(self) -> list[int]:
        return [r for r in range(self.world_size) if r not in self.crashed_ranks]


SCENARIO_LIST: list[Scenario] = [
    Scenario(
        name="healthy",
        program=prog_healthy,
        description=(
            "6 steps of all_reduce/all_gather/reduce_scatter/broadcast on the default group plus "
            "an all_reduce per step on subgroup [0, 1], one all_to_all, a barrier; every rank "
            "dumps after the barrier. Nothing is wrong."
        ),
        culprit_ranks=[],
        waiting_ranks=[],
        fault_group_ranks=[],
        fault_op=None,
        notes=(
            "All entries retired=True, state 'scheduled', no duration_ms. Subgroup [0, 1] is "
            "pg_id 1, process_group ('1', 'undefined'), timeout_ms 1800000 (new_group does not "
            "inherit the 60 s init timeout of default_pg). pg_config is {'': ranks '[]'} on ranks "
            "0 and 1 (the last Gloo PG they created is the subgroup) and {'': ranks '[0, 1, 2, "
            "3]'} on ranks 2 and 3. reduce_scatter_single is recorded as gloo:all_reduce with "
            "input and output [[32]] (its 8-element output is not recorded); all_gather_single "
            "as gloo:all_gather with output [[4, 16]]; all_to_all_single as gloo:all_to_all; "
            "barrier as gloo:barrier with [] sizes. Dumped 0.5 s after the barrier: Gloo retires "
            "an entry on its worker thread after wait() has returned, so an immediate dump can "
            "show the last collective retired=False (seen once, with pickle and JSON taken ms "
            "apart disagreeing on pg_status). pg_status last_completed_collective can lag the "
            "highest retired seq by 1-2: it is the seq retired *last in time*, and Gloo's two "
            "worker threads retire out of order."
        ),
    ),
    Scenario(
        name="never_joins",
        program=prog_never_joins,
        description=(
            f"Rank 2 stops in host code (time.sleep, a stuck data loader) at step {FAULT_STEP} "
            "and never calls that step's all_reduce; ranks 0, 1, 3 block in it."
        ),
        culprit_ranks=[2],
        waiting_ranks=[0, 1, 3],
        fault_group_ranks=[0, 1, 2, 3],
        fault_op="all_reduce",
        blocked_ranks=[0, 1, 3],
        notes=(
            "Ranks 0, 1, 3: last entry collective_seq_id 12, gloo:all_reduce [[64]], "
            "retired=False, pg_status last_enqueued 12 / last_completed 11. Rank 2: last entry "
            "seq 11, all retired, last_enqueued 11. Gloo raises nothing within the dump window "
            "(PG timeout 60 s); rank 2's main thread is in time.sleep, so its dump is current."
        ),
    ),
    Scenario(
        name="wrong_collective",
        program=prog_wrong_collective,
        description=(
            f"At step {FAULT_STEP} rank 1 calls broadcast(src=0) on a 64-element tensor while "
            "ranks 0, 2, 3 call all_reduce on the same shape (same collective_seq_id)."
        ),
        culprit_ranks=[1],
        waiting_ranks=[0, 2, 3],
        fault_group_ranks=[0, 1, 2, 3],
        fault_op="all_reduce",
        blocked_ranks=[0, 1, 2, 3],
        extra={"culprit_op": "broadcast"},
        notes=(
            "Gloo neither errors nor completes: all four ranks hang at collective_seq_id 12, "
            "retired=False everywhere. Rank 1's entry is gloo:broadcast [[64]], the others "
            "gloo:all_reduce [[64]]: same seq, same sizes, only profiling_name differs. The "
            "culprit is blocked too (in its broadcast)."
        ),
    ),
    Scenario(
        name="size_mismatch_crashed",
        program=prog_size_mismatch_crashed,
        description=(
            f"At step {FAULT_STEP} rank 3 calls the gradient all_reduce with 32 elements while "
            "the others use 64. Gloo's transport on rank 3 receives more bytes than it expects "
            "and aborts the process (SIGABRT) before any dump: rank 3 has no files. Ranks 0-2 "
            "are left in that all_reduce (some see a connection error); dumps of ranks 0-2."
        ),
        culprit_ranks=[3],
        waiting_ranks=[0, 1, 2],
        fault_group_ranks=[0, 1, 2, 3],
        fault_op="all_reduce",
        crashed_ranks=[3],
        extra={"culprit_input_sizes": [[32]], "expected_input_sizes": [[64]]},
        notes=(
            "Rank 3 is killed by std::terminate on a Gloo transport thread (gloo::EnforceNotMet "
            "'op.preamble.length <= op.nbytes. 32 vs 16. Received data size doesn't match "
            "expected size'): a C++ abort (SIGABRT), not a Python exception, so nothing in the "
            "process could have dumped. Its ring neighbours 0 and 2 then get RuntimeError "
            "('Read error: Connection reset by peer' or 'Connection closed by peer') and their "
            "seq-12 all_reduce entry is retired=True and counted in pg_status "
            "last_completed_collective=12: an op that failed looks exactly like one that "
            "completed. Rank 1 is still blocked: seq 12 retired=False, last_completed 11. Probe "
            "runs: the rank that receives more bytes than it expects aborts, so a larger tensor "
            "on rank 3 kills a peer instead."
        ),
    ),
    Scenario(
        name="size_mismatch",
        program=prog_size_mismatch,
        description=(
            "Each step ends with a small 'metrics' all_reduce of 8 elements; at step "
            f"{FAULT_STEP} rank 3 passes 4 elements. With buffers this small Gloo does not "
            "detect the mismatch: rank 3's all_reduce returns (garbage) and rank 3 blocks in "
            f"step {FAULT_STEP + 1}'s all_reduce, while ranks 0-2 stay blocked in the metrics "
            "all_reduce. Nobody crashes; all four ranks dump."
        ),
        culprit_ranks=[3],
        waiting_ranks=[0, 1, 2],
        fault_group_ranks=[0, 1, 2, 3],
        fault_op="all_reduce",
        blocked_ranks=[0, 1, 2, 3],
        extra={"culprit_input_sizes": [[4]], "expected_input_sizes": [[8]]},
        notes=(
            "With tiny tensors (8 vs 4 float32) Gloo does not notice: rank 3's metrics all_reduce "
            "(seq 18, input [[4]]) returns garbage and is retired; rank 3 then blocks in step 6's "
            "gradient all_reduce (seq 19, [[64]], retired=False). Ranks 0-2 stay blocked at seq "
            "18 ([[8]], retired=False). The culprit is the only rank that got *ahead*. Probe "
            "runs: with 16 or more elements on the larger side the rank that receives more bytes "
            "than expected aborts (see size_mismatch_crashed); 8 vs 4, 8 vs 2, 4 vs 2 and 4 vs 8 "
            "were silent, the smaller side completing."
        ),
    ),
    Scenario(
        name="opposite_order",
        program=prog_opposite_order,
        description=(
            "Subgroups A=[0, 1] and B=[0, 1] (created in that order). Every step: all_reduce on "
            f"the default group, then ranks 0 and 1 all_reduce on A then B. At step {FAULT_STEP} "
            "rank 1 enters B before A: rank 0 waits in A for rank 1, rank 1 waits in B for rank "
            f"0 (a cross-group deadlock); ranks 2 and 3 block in step {FAULT_STEP + 1}'s "
            "default-group all_reduce."
        ),
        culprit_ranks=[1],
        waiting_ranks=[0, 2, 3],
        fault_group_ranks=[0, 1],
        fault_op="all_reduce",
        blocked_ranks=[0, 1, 2, 3],
        extra={"deadlock_cycle": [0, 1]},
        notes=(
            "A is pg_id 1 / name '1', B is pg_id 2 / name '2' on ranks 0 and 1; both have ranks "
            "[0, 1], so only the name (or pg_id) tells them apart. Rank 0: A seq 5 retired=False, "
            "last B entry seq 4. Rank 1: B seq 5 retired=False, last A entry seq 4. Both finished "
            "default-group seq 5; ranks 2 and 3 have default seq 6 retired=False. The cycle is "
            "symmetric in the final state; rank 1's record order (A before B in steps 1-4, B "
            "first in step 5) shows it is the one that deviated. pg_config "
            "is {'': ranks '[]'} on ranks 0 and 1."
        ),
    ),
    Scenario(
        name="mesh_stall",
        program=prog_mesh_stall,
        world_size=8,
        description=(
            "World 8 as a 2x4 mesh: tp groups [0-3], [4-7] and dp groups [0,4], [1,5], [2,6], "
            "[3,7], all created with new_group on every rank in that order. Each step: tp "
            "all_reduce, tp all_gather, dp all_reduce. At step 4 rank 5 stalls in host code "
            "before the tp all_reduce: 4, 6, 7 block in the tp all_reduce; 0-3 finish their tp "
            "ops and block in the dp all_reduce (1 directly on 5, 0/2/3 on 4/6/7)."
        ),
        culprit_ranks=[5],
        waiting_ranks=[0, 1, 2, 3, 4, 6, 7],
        fault_group_ranks=[4, 5, 6, 7],
        fault_op="all_reduce",
        blocked_ranks=[0, 1, 2, 3, 4, 6, 7],
        notes=(
            "pg_id is a per-process index over the groups the rank belongs to: pg_id 1 is the "
            "tp group on every rank (name '1' on 0-3, '2' on 4-7) and pg_id 2 the dp group "
            "(names '3'-'6'), so pg_id is not a group identity across ranks; the name is. The "
            "default PG never runs a collective: no entry has pg_id 0 and pg_status has no '0' "
            "key. pg_config is {'': ranks '[]'} on every rank. Ranks 4, 6, 7: tp seq 7 "
            "retired=False, dp last seq 3; rank 5: tp last seq 6, dp last seq 3; ranks 0-3: tp "
            "seq 8 retired, dp seq 4 retired=False."
        ),
    ),
    Scenario(
        name="wrapped_buffer",
        program=prog_wrapped_buffer,
        buffer_size=16,
        description=(
            "TORCH_FR_BUFFER_SIZE=16. 20 steps: default-group all_reduce every step; ranks 0, 1 "
            "also all_reduce + all_gather on [0, 1] every step (60 collectives in all); ranks 2, "
            "3 all_reduce on [2, 3] every other step (30 in all). Every ring buffer wrapped, at "
            "different points. Then rank 1 stalls in host code and never calls the final "
            "default-group all_reduce; 0, 2, 3 block in it."
        ),
        culprit_ranks=[1],
        waiting_ranks=[0, 2, 3],
        fault_group_ranks=[0, 1, 2, 3],
        fault_op="all_reduce",
        blocked_ranks=[0, 2, 3],
        notes=(
            "Every dump holds exactly 16 entries. Ranks 0/1 recorded 61/60 collectives and keep "
            "record_id 45-60 / 44-59 (default group seq 16-21 / 16-20, pair01 seq 31-40 / "
            "30-40); ranks 2/3 recorded 31 and keep record_id 15-30 (default seq 11-21, pair23 "
            "seq 6-10). pg_status still counts everything (pair01 last_enqueued 40). On ranks 2 "
            "and 3 pair23 is pg_id 1 (name '2'), like pair01 (name '1') on ranks 0 and 1. "
            "Ranks 0, 2, 3: default seq 21 retired=False; rank 1: last default seq 20."
        ),
    ),
    Scenario(
        name="late_rank",
        program=prog_late_rank,
        description=(
            "Healthy 8-step job (same collectives as healthy, default group only) but rank 3 "
            "sleeps 200 ms before every collective; everything completes; all ranks dump after "
            "a final barrier."
        ),
        culprit_ranks=[3],
        waiting_ranks=[],
        fault_group_ranks=[0, 1, 2, 3],
        fault_op=None,
        extra={"late_by_ms": 200},
        notes=(
            "All entries retired. Rank 3's time_created_ns is ~200 ms after the other ranks' for "
            "every collective but the final barrier. In the recorded run the non-root ranks of "
            "a broadcast only returned once rank 3 joined, so rank 1's next entry after each "
            "broadcast is also ~200 ms late: lateness leaks to peers. Nothing hangs; "
            "culprit_ranks names the slow rank, waiting_ranks is empty."
        ),
    ),
    Scenario(
        name="disjoint_subgroups",
        program=prog_disjoint_subgroups,
        description=(
            "Stand-in for split_group (unsupported on CPU Gloo): dist.new_subgroups(2) gives "
            "disjoint subgroups [0, 1] and [2, 3]. Each step: default-group all_reduce, then "
            f"subgroup all_reduce and all_gather. At step {FAULT_STEP} rank 3 stalls in host "
            "code before the subgroup all_reduce: rank 2 blocks in it, ranks 0 and 1 finish "
            f"their subgroup ops and block in step {FAULT_STEP + 1}'s default-group all_reduce."
        ),
        culprit_ranks=[3],
        waiting_ranks=[0, 1, 2],
        fault_group_ranks=[2, 3],
        fault_op="all_reduce",
        blocked_ranks=[0, 1, 2],
        notes=(
            "dist.split_group is not usable with Gloo on CPU in torch 2.13: it raises "
            "RuntimeError('No device associated with the default pg, not safe to split any "
            "process groups'), and init_process_group(device_id=torch.device('cpu')) is rejected "
            "('device_id parameter must be an accelerator with an index'). new_subgroups names "
            "the subgroups '1' ([0, 1]) and '2' ([2, 3]) and both are pg_id 1 on their members: "
            "same pg_id, different names, pg_config {'': ranks '[]'} everywhere. Rank 2: sub seq "
            "9 retired=False; rank 3: last sub seq 8; ranks 0, 1: sub seq 10 retired, default "
            "seq 6 retired=False."
        ),
    ),
    Scenario(
        name="cyclic_deadlock",
        program=prog_cyclic_deadlock,
        description=(
            "Groups A=[0, 1], B=[1, 2], C=[0, 2] (rank 3 only in the default group). Every "
            "step: default-group all_reduce, then each of ranks 0-2 all_reduces on its two "
            f"groups in the order A, B, C. At step {FAULT_STEP} rank 0 enters C before A: 0 "
            "waits on 2 in C, 2 on 1 in B, 1 on 0 in A, a cycle through three groups; rank 3 "
            f"blocks in step {FAULT_STEP + 1}'s default-group all_reduce."
        ),
        culprit_ranks=[0],
        waiting_ranks=[1, 2, 3],
        fault_group_ranks=[0, 1, 2],
        fault_op="all_reduce",
        blocked_ranks=[0, 1, 2, 3],
        extra={"deadlock_cycle": [0, 2, 1]},
        notes=(
            "No two of the three groups share a blocked rank, so no pair of groups can vote on "
            "the order; each rank's buffer shows its order at step 4 (rank 0: A then C)."
        ),
    ),
    Scenario(
        name="broadcast_root",
        program=prog_broadcast_root,
        description=(
            "Every step: all_reduce, broadcast from rank 0, all_gather on the default group. At "
            f"step {FAULT_STEP} rank 2 broadcasts from root 1 instead: ranks 1 and 3 finish "
            "the broadcast, ranks 0 (the real root) and 2 stay inside it, and 1 and 3 block in "
            "the next all_gather."
        ),
        culprit_ranks=[2],
        waiting_ranks=[1, 3],
        fault_group_ranks=[0, 1, 2, 3],
        fault_op="broadcast",
        blocked_ranks=[0, 1, 2, 3],
        extra={
            "expect": {"verdict": "hang", "culprit_ranks": [0, 2], "waiting_ranks": [1, 3]},
            "why_expect": (
                "the recorder does not record a broadcast's root: ranks 0 and 2 look the same "
                "(inside a broadcast the others finished), so both are named"
            ),
        },
        notes="Ranks 0 and 2: broadcast seq 14 retired=False; ranks 1 and 3: all_gather 15.",
    ),
    Scenario(
        name="p2p_hidden",
        program=prog_p2p_hidden,
        description=(
            "Every step: default-group all_reduce, then a send/recv chain 0 -> 1 -> 2 -> 3. At "
            f"step {FAULT_STEP} rank 2 stalls in host code and never posts its recv: rank 1 "
            "blocks in its send to 2, rank 3 in its recv from 2, rank 0 finishes."
        ),
        culprit_ranks=[2],
        waiting_ranks=[1, 3],
        fault_group_ranks=[1, 2],
        fault_op="recv",
        extra={
            "expect": {"verdict": "cannot_tell", "culprit_ranks": [], "waiting_ranks": []},
            "why_expect": (
                "Gloo records no send/recv: every recorded op finished on every rank; only "
                "op_id running ahead of collective_seq_id shows ops the buffers do not hold"
            ),
        },
        notes=(
            "Every entry retired; pg_status last_enqueued = last_completed = the newest "
            "entry's op_id (9 on ranks 0 and 3, 13 on 1 and 2) while collective_seq_id is 5."
        ),
    ),
]
SCENARIOS: dict[str, Scenario] = {s.name: s for s in SCENARIO_LIST}


# --------------------------------------------------------------------------------------------
# Harness side.
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Outcome:
    scenario: Scenario
    errors: list[str]
    results: dict[int, dict[str, Any]]
    seconds: float


def run_scenario(sc: Scenario, out: Path) -> Outcome:
    t0 = time.monotonic()
    for sub in ("gloo", "gloo_json"):
        d = out / sub / sc.name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix=f"fr_{sc.name}_") as tmp:
        scratch = Path(tmp)
        port = _free_port()
        env = dict(os.environ)
        env.update(
            TORCH_FR_BUFFER_SIZE=str(sc.buffer_size),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        procs: dict[int, subprocess.Popen[bytes]] = {}
        for rank in range(sc.world_size):
            cmd = [sys.executable, str(SCRIPT), "--worker", sc.name, "--rank", str(rank)]
            cmd += ["--port", str(port), "--scratch", str(scratch), "--out", str(out)]
            with open(scratch / f"log_{rank}.txt", "wb") as log:
                procs[rank] = subprocess.Popen(
                    cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
                )

        def done(rank: int) -> bool:
            if rank in sc.crashed_ranks:  # may die without a word (Gloo aborts the process)
                return procs[rank].poll() is not None
            return (scratch / f"result_{rank}.json").exists()

        deadline = time.monotonic() + SCENARIO_TIMEOUT_S
        while time.monotonic() < deadline:
            if all(done(r) for r in range(sc.world_size)):
                break
            dead = [r for r, p in procs.items() if p.poll() is not None and not done(r)]
            if dead:
                errors.append(f"ranks {dead} exited without reporting")
                break
            time.sleep(0.1)
        else:
            missing = [r for r in range(sc.world_size) if not done(r)]
            errors.append(f"timed out waiting for ranks {missing}")
        (scratch / "release").touch()
        for rank, p in procs.items():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                errors.append(f"rank {rank} did not exit after release; killed")
        results: dict[int, dict[str, Any]] = {}
        for rank in range(sc.world_size):
            path = scratch / f"result_{rank}.json"
            if path.exists():
                results[rank] = json.loads(path.read_text())
            elif rank in sc.crashed_ranks:
                log = (scratch / f"log_{rank}.txt").read_text(errors="replace")
                state = _crash_state(log, procs[rank].returncode)
                results[rank] = {"outcome": "crashed", "state_at_dump": state}
        errors += _check(sc, out, results, procs)
        if errors or os.environ.get("MAKE_FIXTURES_VERBOSE"):
            for rank in range(sc.world_size):
                tail = (scratch / f"log_{rank}.txt").read_text(errors="replace")[-2000:]
                print(f"--- {sc.name} rank {rank} log tail ---\n{tail}", file=sys.stderr)
    return Outcome(sc, errors, results, time.monotonic() - t0)


def _crash_state(log: str, returncode: int | None) -> str:
    """How a rank that died without reporting died, from its exit status and its log."""
    how = f"exit code {returncode}"
    if returncode is not None and returncode < 0:
        how = signal.Signals(-returncode).name
    what = re.search(r"instance of '([^']+)'\n\s*what\(\):\s*(.*)", log)
    detail = ""
    if what:
        msg = re.sub(r"^\[[^\]]*\]\s*", "", what.group(2).strip())
        detail = f" ({what.group(1)}: {msg})"
    last_op = re.findall(r"^rank \d+: in (.*)$", log, flags=re.MULTILINE)
    where = f" in {last_op[-1]}" if last_op else ""
    return f"died with {how}{where}{detail}; no dump"


def _check(
    sc: Scenario,
    out: Path,
    results: dict[int, dict[str, Any]],
    procs: dict[int, subprocess.Popen[bytes]],
) -> list[str]:
    """The scenario produced exactly the expected files, and ran the way it was built to."""
    errors: list[str] = []
    want = {f"rank_{r}" for r in sc.ranks_with_dumps}
    got = {p.name for p in (out / "gloo" / sc.name).iterdir()}
    got_json = {p.name for p in (out / "gloo_json" / sc.name).iterdir()}
    if got != want:
        errors.append(f"pickle dumps {sorted(got)} != expected {sorted(want)}")
    if got_json != {f"{w}.json" for w in want}:
        errors.append(f"json dumps {sorted(got_json)} != expected")
    for r in sc.ranks_with_dumps:
        try:
            data = pickle.loads((out / "gloo" / sc.name / f"rank_{r}").read_bytes())
            json.loads((out / "gloo_json" / sc.name / f"rank_{r}.json").read_bytes())
        except (OSError, pickle.UnpicklingError, ValueError) as exc:
            errors.append(f"rank {r}: unreadable dump: {exc}")
            continue
        if not isinstance(data, dict) or not data.get("entries"):
            errors.append(f"rank {r}: dump has no entries")
    for r in range(sc.world_size):
        outcome = results.get(r, {}).get("outcome")
        expected = "crashed" if r in sc.crashed_ranks else "dumped"
        if outcome != expected:
            errors.append(f"rank {r}: outcome {outcome!r}, expected {expected!r}")
        if (procs[r].returncode == 0) != (r not in sc.crashed_ranks):
            errors.append(f"rank {r}: exit code {procs[r].returncode}")
    for r in sc.blocked_ranks:
        state = results.get(r, {}).get("state_at_dump", "")
        if not state.startswith("in "):
            errors.append(f"rank {r}: expected to be blocked in a collective, was {state!r}")
    return errors


def manifest_entry(o: Outcome) -> dict[str, Any]:
    sc = o.scenario
    groups: dict[str, dict[str, Any]] = {}
    for rank in sorted(o.results):
        res = o.results[rank]
        for label, name in res.get("group_names", {}).items():
            groups.setdefault(label, {"ranks": res["group_ranks"][label], "name": name})
    entry: dict[str, Any] = {
        "description": sc.description,
        "torch_version": next(
            (res["torch_version"] for res in o.results.values() if "torch_version" in res), None
        ),
        "world_size": sc.world_size,
        "buffer_size": sc.buffer_size,
        "ranks_with_dumps": sc.ranks_with_dumps,
        "culprit_ranks": sc.culprit_ranks,
        "waiting_ranks": sc.waiting_ranks,
        "fault_group_ranks": sc.fault_group_ranks,
        "fault_op": sc.fault_op,
        "crashed_ranks": sc.crashed_ranks,
        **sc.extra,
        "groups": dict(sorted(groups.items())),
        "state_at_dump": {
            str(r): o.results[r]["state_at_dump"] for r in sorted(o.results) if o.results[r]
        },
        "notes": sc.notes,
    }
    return entry


def _to_json(obj: Any, level: int = 0) -> str:
    """Indented JSON, but lists (ranks, sizes) on one line."""
    if isinstance(obj, dict) and obj:
        pad = "  " * (level + 1)
        items = [f"{pad}{json.dumps(k)}: {_to_json(v, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    return json.dumps(obj, ensure_ascii=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "tests" / "fixtures",
        help="root of gloo/ and gloo_json/ (default: tests/fixtures)",
    )
    ap.add_argument(
        "--only",
        action="append",
        choices=sorted(SCENARIOS),
        metavar="SCENARIO",
        help=f"run just this scenario (repeatable): {', '.join(SCENARIOS)}",
    )
    ap.add_argument("--jobs", type=int, default=4, help="scenarios run in parallel")
    ap.add_argument("--retries", type=int, default=1, help="reruns of a failed scenario")
    ap.add_argument("--worker", choices=sorted(SCENARIOS), help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out: Path = args.out.resolve()

    if args.worker:
        worker_main(args.worker, args.rank, args.port, out, args.scratch)
        return 0

    chosen = [SCENARIOS[n] for n in args.only] if args.only else SCENARIO_LIST
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        outcomes = list(pool.map(lambda sc: run_scenario(sc, out), chosen))
    for i, o in enumerate(outcomes):
        for _ in range(args.retries):
            if not o.errors:
                break
            print(f"{o.scenario.name}: {'; '.join(o.errors)}; retrying", file=sys.stderr)
            outcomes[i] = o = run_scenario(o.scenario, out)

    manifest_path = out / "gloo" / "MANIFEST.json"
    manifest: dict[str, Any] = {}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
    failed = 0
    for o in outcomes:
        status = "ok" if not o.errors else "FAILED"
        print(f"{o.scenario.name:24s} {status:6s} {o.seconds:5.1f}s")
        for err in o.errors:
            print(f"    {err}")
        if o.errors:
            failed += 1
            manifest.pop(o.scenario.name, None)
        else:
            manifest[o.scenario.name] = manifest_entry(o)
    order = {s.name: i for i, s in enumerate(SCENARIO_LIST)}
    manifest = dict(sorted(manifest.items(), key=lambda kv: order.get(kv[0], len(order))))
    manifest_path.write_text(_to_json(manifest) + "\n")
    print(f"{len(outcomes) - failed}/{len(outcomes)} scenarios ok in {time.monotonic() - t0:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
