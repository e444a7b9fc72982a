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
SHORT_TIMEOUT_S = 4.0  # capture modes other than "blocked": every group's timeout from arm() on
DUMP_SIGNAL_KEY = "make_fixtures_dump"  # peer_signal: the TCPStore key the first failure sets
SIGNAL_AFTER_S = 3.0  # recorder: SIGUSR1 to ranks that have not dumped this long after the last
T_START = time.monotonic()


# --------------------------------------------------------------------------------------------
# Worker side: one instance per rank process.
# --------------------------------------------------------------------------------------------


class SimulatedCrash(RuntimeError):
    """Makes a rank die without writing a dump (fallback if Gloo does not kill it first)."""


class Rank:
    """The per-rank view a scenario program works with: collectives, stalls and dumping."""

    def __init__(self, rank: int, sc: Scenario, out: Path, scratch: Path) -> None:
        import torch
        import torch.distributed as dist

        self.torch: Any = torch
        self.dist: Any = dist
        self.rank = rank
        self.sc = sc
        self.mode = sc.mode
        self.world_size = sc.world_size
        self.scratch = scratch
        self.pickle_path = out / sc.tree / sc.name / f"{sc.file_stem}{rank}"
        self.json_path = out / f"{sc.tree}_json" / sc.name / f"{sc.file_stem}{rank}.json"
        self.dumped = False
        self.dumped_after_error = False
        self.step = 0
        self.state = "starting"
        self.delay_before_collective = 0.0
        self.groups: dict[str, Any] = {"world": None}
        self.group_ranks: dict[str, list[int]] = {"world": list(range(sc.world_size))}
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

    def all_reduce_tensor(self, t: Any, label: str = "world") -> None:
        """``all_reduce`` of a tensor the program computed (activations, gradients, a loss)."""
        self._run("all_reduce", label, lambda g: self.dist.all_reduce(t, group=g))

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
        """Block forever in host code (the main thread never reaches its next collective).

        Capture modes change this: ``after_timeout`` makes the stall *slow* instead of stuck
        (it returns once every peer has timed out and dumped, so this rank then runs into its
        next collective late); ``died`` kills the rank here without a dump.
        """
        self.state = f"host code: {reason} (step {self.step})"
        if self.mode == "died" and self.rank in self.sc.crashed_ranks:
            print(f"rank {self.rank}: killed in host code ({reason})", flush=True)
            os._exit(9)
        if self.mode == "after_timeout":
            others = [r for r in range(self.world_size) if r != self.rank]
            while not all((self.scratch / f"result_{r}.json").exists() for r in others):
                time.sleep(0.05)
            time.sleep(0.5)
            self.state = f"host code: {reason}; resumed late (step {self.step})"
            return
        while True:
            time.sleep(3600)

    def arm(self, delay: float = DUMP_DELAY_S) -> None:
        """Fault point reached: dump from a timer thread ``delay`` seconds from now.

        In the other capture modes nothing dumps on a timer: every group's timeout drops to
        ``SHORT_TIMEOUT_S`` (on the ``short_timeout_ranks`` in ``peer_signal``) so that a hung
        collective raises, and the exception handler (or frtrace.recorder) dumps.
        """
        self.armed = True
        print(f"rank {self.rank}: armed at {time.monotonic() - T_START:.1f}s", flush=True)
        if self.mode != "blocked":
            short = self.sc.short_timeout_ranks
            if short is None or self.rank in short:
                self._shorten_timeouts()
            if self.mode == "peer_signal" and short is not None and self.rank not in short:
                watcher = threading.Thread(target=self._watch_dump_signal, daemon=True)
                watcher.start()
            return
        timer = threading.Timer(delay, self.dump_and_exit)
        timer.daemon = True
        timer.start()

    def _shorten_timeouts(self) -> None:
        from datetime import timedelta

        c10d = self.dist.distributed_c10d
        for pg in list(c10d._world.pg_map):
            c10d._set_pg_timeout(timedelta(seconds=SHORT_TIMEOUT_S), pg)

    def _watch_dump_signal(self) -> None:
        """NCCL's dump-on-timeout propagation, by hand: dump when a peer's key is in the store."""
        store = self.dist.distributed_c10d._get_default_store()
        while not store.check([DUMP_SIGNAL_KEY]):
            time.sleep(0.05)
        print(f"rank {self.rank}: dump signal from the store", flush=True)
        self.dump_and_exit()

    def dump_after_error(self) -> None:
        """The exception handler's dump: the op that failed is in this rank's buffer."""
        self.dumped_after_error = True
        if self.mode == "peer_signal":
            self.dump_and_exit(then=self._signal_peers)
        self.dump_and_exit()

    def _signal_peers(self) -> None:
        store = self.dist.distributed_c10d._get_default_store()
        store.set(DUMP_SIGNAL_KEY, str(self.rank))

    def dump_and_exit(self, then: Callable[[], None] | None = None) -> None:
        """Write both dumps (same moment), report, wait for the harness's release, exit."""
        if self.rank in self.sc.crashed_ranks:  # dies before it can dump (node lost, OOM kill)
            others = [r for r in range(self.world_size) if r not in self.sc.crashed_ranks]
            while not all((self.scratch / f"result_{r}.json").exists() for r in others):
                time.sleep(0.05)
            print(f"rank {self.rank}: killed before its dump", flush=True)
            os._exit(9)
        try:
            self._dump()
            if then is not None:
                then()
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
            if self.dumped:  # one dump per rank: a later trigger waits for the release
                return
            self.dumped = True
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
        result: dict[str, Any] = {"outcome": outcome, "state_at_dump": state}
        result["group_names"] = names
        if self.mode != "blocked" or self.sc.tree != "gloo":
            result["dumped_after_error"] = self.dumped_after_error
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


# Capture modes in which frtrace.recorder is enabled and writes the dumps (and their sidecars).
RECORDER_MODES = ("recorder", "running", "running_timer")


def worker_main(name: str, rank: int, port: int, out: Path, scratch: Path) -> None:
    scenario = SCENARIOS[name]
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(scenario.buffer_size)  # also set by the harness
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    from datetime import timedelta

    r = Rank(rank, scenario, out, scratch)
    if scenario.mode in RECORDER_MODES:
        _enable_recorder(r)
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
        if r.mode in RECORDER_MODES:
            raise  # unhandled: frtrace.recorder's excepthook dumps, then the rank exits
        if r.mode == "died" and rank in scenario.crashed_ranks:
            print(f"rank {rank}: exits without a dump", flush=True)
            os._exit(1)
        if r.mode != "blocked":
            r.dump_after_error()
    # Hang scenarios never get here on a blocked rank; the others wait for their armed timer.
    while True:
        time.sleep(3600)


def _enable_recorder(r: Rank) -> None:
    """``frtrace.recorder.enable()`` as a job would call it, plus the harness's bookkeeping.

    The recorder writes ``comm_lib_trace_rank_<r>`` (pickle) into the fixture directory; the
    wrapper around its ``dump`` adds the JSON variant of the same moment (the recorder's own
    ``_trace_bytes("json")``), reports to the harness, and keeps the first dump: a rank that
    dumped on SIGUSR1 waits for the release like the timer does, a rank whose exception was
    unhandled exits (as the job would) once the recorder has written its dump.
    """
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    import frtrace.job.recorder as rec  # (the module itself: frtrace.recorder re-exports it)

    def excepthook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        traceback.print_exception(exc_type, exc, tb)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

    sys.excepthook = excepthook  # runs after the recorder's hook: the process exits
    original = rec.dump

    def dump(reason: str = "on demand", *, rank: int | None = None, **how: Any) -> Path:
        with r._dump_lock:
            first = not r.dumped
            r.dumped = True
        if first:
            state = r.state
            path = original(reason, rank=rank, **how)
            _write_atomic(r.json_path, rec._trace_bytes("json"))
            # the recorder writes its stacks sidecar (with the dump time) next to its own dump;
            # the JSON of a moment later gets one of its own, as a JSON-writing recorder would
            from frtrace.job.sidecar import capture_current_stacks, write_stacks

            sidecar = capture_current_stacks(
                how.get("trigger", "on_demand"), how.get("detail"), rank=r.rank
            )
            write_stacks(r.json_path.parent / f"stacks_rank_{r.rank}.json", sidecar)
            r.dumped_after_error = reason.startswith("unhandled")
            r.report("dumped", f"{state} [frtrace.recorder: {reason}]")
            print(f"rank {r.rank}: recorder dumped ({reason})", flush=True)
        else:
            path = r.pickle_path
        if reason.startswith("signal"):  # the watcher thread: wait for the release, then exit
            deadline = time.monotonic() + RELEASE_WAIT_S
            while not (r.scratch / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            os._exit(0)
        return path

    rec.dump = dump
    rec.enable(r.pickle_path.parent, buffer_size=r.sc.buffer_size, fmt="pickle", verbose=False)


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
# Training programs (gloo_capture): real training code on CPU Gloo, a few steps of a small model.
# --------------------------------------------------------------------------------------------

TRAIN_STEPS = 6


def _mlp(r: Rank) -> Any:
    import torch.nn as nn

    r.torch.manual_seed(0)  # the same initial weights on every rank
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def _loader(r: Rank, n_batches: int, shard: int | None = None) -> list[tuple[Any, Any]]:
    """This rank's shard of a fixed data set: ``n_batches`` batches of 4 samples."""
    g = r.torch.Generator().manual_seed(1000 + (r.rank if shard is None else shard))
    return [
        (r.torch.randn(4, 4, generator=g), r.torch.randn(4, 1, generator=g))
        for _ in range(n_batches)
    ]


def _ddp(r: Rank) -> tuple[Any, Any]:
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(_mlp(r))
    return model, r.torch.optim.SGD(model.parameters(), lr=0.05)


def _fsdp2(r: Rank) -> tuple[Any, Any]:
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (r.world_size,))
    model = _mlp(r)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, r.torch.optim.SGD(model.parameters(), lr=0.05)


def _train_step(r: Rank, model: Any, opt: Any, x: Any, y: Any, what: str) -> Any:
    r.state = f"in {what} forward step {r.step}"
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    r.state = f"in {what} backward (gradient reduction) step {r.step}"
    loss.backward()
    r.state = f"host code: optimizer step {r.step}"
    opt.step()
    r.state = f"host code after {what} step {r.step}"
    return loss


def prog_ddp_short_loader(r: Rank) -> None:
    model, opt = _ddp(r)
    n = TRAIN_STEPS - 1 if r.rank == 1 else TRAIN_STEPS  # rank 1's shard: one batch fewer
    for step, (x, y) in zip(r.steps(n), _loader(r, n), strict=True):
        if step == TRAIN_STEPS - 1:
            r.arm()
        _train_step(r, model, opt, x, y, "DDP")
    r.barrier()  # end of epoch: everybody syncs before the checkpoint


def _save_checkpoint(r: Rank, model: Any) -> None:
    r.state = f"host code: rank 0 writes the checkpoint (step {r.step})"
    r.torch.save(model.state_dict(), r.scratch / f"ckpt_{r.step}.pt")
    r.barrier()  # "wait until every rank can see the file", but only rank 0 runs this


def prog_ddp_ckpt_barrier(r: Rank) -> None:
    model, opt = _ddp(r)
    for step, (x, y) in zip(r.steps(TRAIN_STEPS), _loader(r, TRAIN_STEPS), strict=True):
        if step == 3:
            r.arm()
        _train_step(r, model, opt, x, y, "DDP")
        if r.rank == 0 and step % 3 == 0:
            _save_checkpoint(r, model)


def prog_ddp_rank0_log(r: Rank) -> None:
    model, opt = _ddp(r)
    for step, (x, y) in zip(r.steps(TRAIN_STEPS), _loader(r, TRAIN_STEPS), strict=True):
        if step == 3:
            r.arm()
        loss = _train_step(r, model, opt, x, y, "DDP")
        if r.rank == 0 and step % 3 == 0:  # log the mean loss over ranks: only rank 0 does
            t = loss.detach().reshape(1).clone()
            r.all_reduce_tensor(t)
            print(f"step {step}: loss {t.item() / r.world_size:.4f}", flush=True)


def prog_ddp_exception(r: Rank) -> None:
    model, opt = _ddp(r)
    for step, (x, y) in zip(r.steps(TRAIN_STEPS), _loader(r, TRAIN_STEPS), strict=True):
        if step == 3:
            r.arm()
            if r.rank == 2:
                r.state = f"host code: data pipeline (step {step})"
                raise ValueError("corrupt sample in batch 3: decode failed")
        _train_step(r, model, opt, x, y, "DDP")


def prog_fsdp2_exception(r: Rank) -> None:
    model, opt = _fsdp2(r)
    for step, (x, y) in zip(r.steps(TRAIN_STEPS), _loader(r, TRAIN_STEPS), strict=True):
        if step == 3:
            r.arm()
            if r.rank == 1:
                x = x[:, :3]  # a malformed batch (3 features): the first Linear raises
        _train_step(r, model, opt, x, y, "FSDP2")


def prog_mesh2d_short_loader(r: Rank) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    torch = r.torch
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):
        pg = mesh[dim].get_group()
        r.groups[dim] = pg
        r.group_ranks[dim] = list(r.dist.get_process_group_ranks(pg))
    dp, tp = mesh["dp"].get_local_rank(), mesh["tp"].get_local_rank()
    torch.manual_seed(0)
    cols = slice(4 * tp, 4 * tp + 4)
    w1 = torch.randn(4, 8)[:, cols].clone().requires_grad_()  # column-parallel
    w2 = torch.randn(8, 1)[cols].clone().requires_grad_()  # row-parallel
    n = TRAIN_STEPS - 1 if dp == 1 else TRAIN_STEPS  # dp replica 1 (ranks 2, 3): one batch fewer
    for step, (x, y) in zip(r.steps(n), _loader(r, n, shard=dp), strict=True):
        if step == TRAIN_STEPS - 1:
            r.arm()
        part = torch.relu(x @ w1) @ w2  # this tp rank's partial output
        full = part.detach().clone()
        r.all_reduce_tensor(full, "tp")  # row-parallel output: sum over tp
        loss = ((part + (full - part.detach()) - y) ** 2).mean()
        loss.backward()
        assert w1.grad is not None and w2.grad is not None
        grads = torch.cat([w1.grad.flatten(), w2.grad.flatten()])
        r.all_reduce_tensor(grads, "dp")  # data-parallel gradient reduction
        with torch.no_grad():
            w1 -= 0.05 * grads[:16].view_as(w1) / 2
            w2 -= 0.05 * grads[16:].view_as(w2) / 2
            w1.grad = w2.grad = None
    r.barrier()  # end of epoch


def prog_healthy_running(r: Rank) -> None:
    """A healthy job that keeps training until the harness releases it; dumped while running."""
    model, opt = _fsdp2(r) if r.sc.fault == "fsdp2_healthy" else _ddp(r)
    what = "FSDP2" if r.sc.fault == "fsdp2_healthy" else "DDP"
    if r.mode == "running_timer":
        threading.Thread(target=_dump_at_common_time, args=(r,), daemon=True).start()
    data = _loader(r, 8)
    step = 0
    while True:
        for x, y in data:  # epochs of 8 batches
            step += 1
            r.step = step
            _train_step(r, model, opt, x, y, what)
            r.state = f"host code: metrics and data loading (step {step})"
            time.sleep(0.02)
            if step == 5:
                r.armed = True
                (r.scratch / f"ready_{r.rank}").touch()
            if (r.scratch / "release").exists():
                os._exit(0)


def _dump_at_common_time(r: Rank) -> None:
    """Every rank's timer fires at the same wall-clock instant, chosen by the harness, and
    dumps through frtrace.recorder (on demand), which also writes the dump time."""
    import frtrace.job.recorder as rec

    path = r.scratch / "dump_at"
    while not path.exists():
        time.sleep(0.02)
    time.sleep(max(0.0, float(path.read_text()) - time.time()))
    rec.dump("on demand (timer)")
    deadline = time.monotonic() + RELEASE_WAIT_S
    while not (r.scratch / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(0)


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
    # capture modes (scenarios of tests/fixtures/gloo_capture, see CAPTURE_MODES)
    fault: str = ""  # the fault this captures, e.g. "never_joins" (gloo_capture only)
    mode: str = "blocked"
    tree: str = "gloo"  # gloo -> gloo/ + gloo_json/; gloo_capture -> gloo_capture(_json)/
    file_stem: str = "rank_"
    short_timeout_ranks: list[int] | None = None  # None: every rank (modes other than blocked)
    expect: dict[str, Any] | None = None  # what a correct analysis says: verdict, culprit_ranks

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


# --------------------------------------------------------------------------------------------
# Capture modes (tests/fixtures/gloo_capture): each fault as real jobs capture dumps.
# --------------------------------------------------------------------------------------------

CAPTURE_MODES: dict[str, str] = {
    "blocked": (
        "dumped while the ranks are blocked: a timer thread on every rank dumps "
        f"{DUMP_DELAY_S:.0f} s after the fault point (PG timeout {PG_TIMEOUT_S} s)"
    ),
    "after_timeout": (
        f"from the exception handler: every group's timeout drops to {SHORT_TIMEOUT_S:.0f} s at "
        "the fault point (_set_pg_timeout), the hung collective raises, the handler calls "
        "_dump_fr_trace()/_dump_fr_trace_json() at once. A rank stuck in host code is slow, "
        "not stuck: it resumes after its peers have dumped, runs into the collective late, "
        "gets an error and dumps from its handler too"
    ),
    "peer_signal": (
        f"the first failure tells the others: only the short_timeout_ranks get a "
        f"{SHORT_TIMEOUT_S:.0f} s timeout; the first to time out dumps from its handler and sets "
        f"the TCPStore key {DUMP_SIGNAL_KEY!r}; every other rank has a thread polling the store "
        "(NCCL's dump-on-timeout propagation, by hand) and dumps while its main thread is still "
        "blocked. Both race outcomes in one set: the signalling rank's hung op is retired, the "
        "others' is not"
    ),
    "recorder": (
        "frtrace.recorder.enable(<dir>) before init_process_group; short timeouts as in "
        "after_timeout; an exception nobody catches makes the recorder dump (excepthook), then "
        f"the rank exits; ranks that have not dumped {SIGNAL_AFTER_S:.0f} s after the last dump "
        "get SIGUSR1 from the harness (a rank stuck in host code never raises). Files are the "
        "recorder's comm_lib_trace_rank_<r> (pickle) plus the JSON of the same moment"
    ),
    "running": (
        "a healthy job dumped while running: frtrace.recorder enabled, the harness sends "
        "SIGUSR1 to every rank at once while they train"
    ),
    "running_timer": (
        "a healthy job dumped while running: every rank's timer thread calls "
        "frtrace.recorder.dump() at the same wall-clock instant (chosen by the harness) while "
        "they train (the recorder writes the dump time)"
    ),
    "died": (
        "a rank dies without a dump (os._exit: OOM kill, node lost, or a job without any dump "
        "hook); the survivors' collective then fails and they dump from the exception handler "
        "as in after_timeout"
    ),
    "waiter_died": (
        "dumped while blocked (as blocked), but a waiting rank, not the culprit, is killed just "
        "before its dump: its file is missing"
    ),
}

_NJ_DESC = (
    f"Rank 2 stops in host code (a stuck data loader) at step {FAULT_STEP} and never calls "
    "that step's all_reduce; ranks 0, 1, 3 block in it (scripts' never_joins program)."
)
_WC_DESC = (
    f"At step {FAULT_STEP} rank 1 calls broadcast(src=0) where ranks 0, 2, 3 call all_reduce "
    "(same shape, same collective_seq_id; scripts' wrong_collective program)."
)
_DDP = "DDP over nn.Sequential(Linear(4, 8), ReLU, Linear(8, 1)) (49 parameters, one bucket), "
FAULTS: dict[str, dict[str, Any]] = {
    "never_joins": {
        "program": prog_never_joins,
        "description": _NJ_DESC,
        "culprit_ranks": [2],
        "waiting_ranks": [0, 1, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce",
    },
    "wrong_collective": {
        "program": prog_wrong_collective,
        "description": _WC_DESC,
        "culprit_ranks": [1],
        "waiting_ranks": [0, 2, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce",
        "extra": {"culprit_op": "broadcast"},
    },
    "ddp_short_loader": {
        "program": prog_ddp_short_loader,
        "description": (
            _DDP + f"{TRAIN_STEPS} batches per rank, but rank 1's data shard has one batch "
            f"fewer: after step {TRAIN_STEPS - 1} rank 1 leaves the loop and calls the "
            "end-of-epoch dist.barrier() while ranks 0, 2, 3 run step "
            f"{TRAIN_STEPS}'s backward (DDP's gradient all_reduce): barrier against all_reduce "
            "at the same collective_seq_id."
        ),
        "culprit_ranks": [1],
        "waiting_ranks": [0, 2, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce",
        "extra": {"culprit_op": "barrier"},
    },
    "ddp_ckpt_barrier": {
        "program": prog_ddp_ckpt_barrier,
        "description": (
            _DDP + "every 3 steps rank 0 saves a checkpoint, and its save function ends "
            "with dist.barrier() ('wait until every rank sees the file') that only rank 0 "
            "runs: after step 3 rank 0 is in the barrier while ranks 1-3 run step 4's "
            "backward (gradient all_reduce)."
        ),
        "culprit_ranks": [0],
        "waiting_ranks": [1, 2, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce",
        "extra": {"culprit_op": "barrier"},
    },
    "ddp_rank0_log": {
        "program": prog_ddp_rank0_log,
        "description": (
            _DDP + "every 3 steps rank 0 logs the mean loss with dist.all_reduce(loss) (one "
            "element), a collective only rank 0 runs: ranks 1-3 are already in step 4's "
            "gradient all_reduce (49 elements). Gloo's transport on rank 0 receives more bytes "
            "than its 1-element op expects and aborts the process (SIGABRT): rank 0 never "
            "has a dump; ranks 1-3's all_reduce fails with a connection error."
        ),
        "culprit_ranks": [0],
        "waiting_ranks": [1, 2, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce",
        "extra": {"culprit_op": "all_reduce", "culprit_input_sizes": [[1]]},
    },
    "ddp_exception": {
        "program": prog_ddp_exception,
        "description": (
            _DDP + "at step 3 rank 2's data pipeline raises ValueError (a corrupt sample) "
            "before the forward pass; ranks 0, 1, 3 run step 3 and wait in its gradient "
            "all_reduce."
        ),
        "culprit_ranks": [2],
        "waiting_ranks": [0, 1, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_reduce",
    },
    "fsdp2_exception": {
        "program": prog_fsdp2_exception,
        "description": (
            "FSDP2 (fully_shard on each Linear and on the root, 1-D mesh of 4 CPU ranks) over "
            "nn.Sequential(Linear(4, 8), ReLU, Linear(8, 1)). At step 3 rank 1 gets a malformed "
            "batch (3 features): its first Linear raises RuntimeError (shape mismatch) inside "
            "forward, after that layer's parameter all_gather; ranks 0, 2, 3 go on into the "
            "next FSDP collective."
        ),
        "culprit_ranks": [1],
        "waiting_ranks": [0, 2, 3],
        "fault_group_ranks": [0, 1, 2, 3],
        "fault_op": "all_gather",
    },
    "mesh2d_short_loader": {
        "program": prog_mesh2d_short_loader,
        "description": (
            "2-D DeviceMesh init_device_mesh('cpu', (2, 2), mesh_dim_names=('dp', 'tp')): tp "
            "groups [0, 1], [2, 3], dp groups [0, 2], [1, 3]. A tensor-parallel MLP by hand "
            "(column- then row-parallel, tp all_reduce of the output) and a dp all_reduce of "
            f"the gradients each step. dp replica 1 (ranks 2, 3) has {TRAIN_STEPS - 1} batches, "
            f"replica 0 has {TRAIN_STEPS}: after step {TRAIN_STEPS - 1} ranks 2 and 3 call the "
            "end-of-epoch world barrier; ranks 0 and 1 finish step "
            f"{TRAIN_STEPS}'s tp all_reduce together and block in the dp all_reduce (0 waits "
            "on 2, 1 on 3)."
        ),
        "culprit_ranks": [2, 3],
        "waiting_ranks": [0, 1],
        "fault_group_ranks": [0, 2],
        "fault_op": "all_reduce",
    },
    "ddp_healthy": {
        "program": prog_healthy_running,
        "description": (
            _DDP + "a healthy job: it trains (20 ms of host work per step) until the harness "
            "releases it, and is dumped while it runs."
        ),
        "culprit_ranks": [],
        "waiting_ranks": [],
        "fault_group_ranks": [],
        "fault_op": None,
    },
    "fsdp2_healthy": {
        "program": prog_healthy_running,
        "description": (
            "FSDP2 (as in fsdp2_exception): a healthy job that trains until the harness "
            "releases it, dumped while it runs."
        ),
        "culprit_ranks": [],
        "waiting_ranks": [],
        "fault_group_ranks": [],
        "fault_op": None,
    },
}


def capture(fault: str, mode: str, expect: dict[str, Any], why: str = "", **kw: Any) -> Scenario:
    base = dict(FAULTS[fault])
    extra = dict(base.pop("extra", {}))
    extra.update(kw.pop("extra", {}))
    extra["capture_mode"] = mode
    if why:
        extra["why_expect"] = why
    behaviour = "blocked" if mode == "waiter_died" else mode
    kw.setdefault("notes", "")
    return Scenario(
        name=f"{fault}__{mode}",
        fault=fault,
        mode=behaviour,
        tree="gloo_capture",
        file_stem="comm_lib_trace_rank_" if mode in RECORDER_MODES else "rank_",
        expect=expect,
        extra=extra,
        **base,
        **kw,
    )


def _hang(*culprits: int) -> dict[str, Any]:
    return {"verdict": "hang", "culprit_ranks": list(culprits)}


def _desync(*culprits: int) -> dict[str, Any]:
    return {"verdict": "desync", "culprit_ranks": list(culprits)}


HEALTHY = {"verdict": "healthy", "culprit_ranks": []}
_LATE = (
    "every rank's all_reduce #12 is retired (the peers' timed out, rank 2's failed with "
    "'Connection closed by peer' when it arrived late): the buffers alone look finished; only "
    "time_created_ns tells: rank 2 created #12 seconds after its peers, more than timeout_ms "
    "after them"
)
_MISSING = "the culprit left no dump; the survivors' op on the fault group failed (retired)"
_SAME_SEQ_OP = "same collective_seq_id, different op on one rank"
_CYCLE = (
    "ranks 2, 3 are in the world barrier that 0, 1 never joined, 0 and 1 in the dp "
    "all_reduce that 2, 3 never joined: a cycle through two groups. 2 and 3 are the ranks "
    "that stopped training early (one tp all_reduce fewer than 0, 1); naming them takes "
    "that step count"
)

CAPTURE_LIST: list[Scenario] = [
    capture("never_joins", "after_timeout", _hang(2), _LATE),
    capture("never_joins", "peer_signal", _hang(2), short_timeout_ranks=[0]),
    capture("never_joins", "recorder", _hang(2)),
    capture("never_joins", "died", _hang(2), _MISSING, crashed_ranks=[2]),
    capture("never_joins", "waiter_died", _hang(2), crashed_ranks=[3], blocked_ranks=[0, 1]),
    capture("wrong_collective", "after_timeout", _desync(1), _SAME_SEQ_OP),
    capture("wrong_collective", "peer_signal", _desync(1), short_timeout_ranks=[0]),
    capture("ddp_short_loader", "blocked", _desync(1), blocked_ranks=[0, 1, 2, 3]),
    capture("ddp_short_loader", "after_timeout", _desync(1), _SAME_SEQ_OP),
    capture("ddp_short_loader", "peer_signal", _desync(1), short_timeout_ranks=[0]),
    capture("ddp_short_loader", "recorder", _desync(1), _SAME_SEQ_OP),
    capture("ddp_ckpt_barrier", "blocked", _desync(0), blocked_ranks=[0, 1, 2, 3]),
    capture("ddp_ckpt_barrier", "after_timeout", _desync(0), _SAME_SEQ_OP),
    capture("ddp_ckpt_barrier", "recorder", _desync(0), _SAME_SEQ_OP),
    capture("ddp_rank0_log", "after_timeout", _hang(0), _MISSING, crashed_ranks=[0]),
    capture("ddp_rank0_log", "recorder", _hang(0), _MISSING, crashed_ranks=[0]),
    capture("ddp_exception", "blocked", _hang(2), blocked_ranks=[0, 1, 3]),
    capture("ddp_exception", "recorder", _hang(2)),
    capture("ddp_exception", "died", _hang(2), _MISSING, crashed_ranks=[2]),
    capture("fsdp2_exception", "blocked", _hang(1), blocked_ranks=[0, 2, 3]),
    capture("fsdp2_exception", "recorder", _hang(1)),
    capture("fsdp2_exception", "died", _hang(1), _MISSING, crashed_ranks=[1]),
    capture("mesh2d_short_loader", "blocked", _hang(2, 3), _CYCLE, blocked_ranks=[0, 1, 2, 3]),
    capture("mesh2d_short_loader", "after_timeout", _hang(2, 3), _CYCLE),
    capture("mesh2d_short_loader", "recorder", _hang(2, 3), _CYCLE),
    capture("ddp_healthy", "running", HEALTHY, buffer_size=64),
    capture("fsdp2_healthy", "running_timer", HEALTHY, buffer_size=64),
]

SCENARIOS: dict[str, Scenario] = {s.name: s for s in SCENARIO_LIST + CAPTURE_LIST}


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
    for sub in (sc.tree, f"{sc.tree}_json"):
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
        n_reported, last_report, triggered = 0, time.monotonic(), False
        while time.monotonic() < deadline:
            if all(done(r) for r in range(sc.world_size)):
                break
            reported = [r for r in range(sc.world_size) if (scratch / f"result_{r}.json").exists()]
            if len(reported) != n_reported:
                n_reported, last_report = len(reported), time.monotonic()
            quiet = time.monotonic() - last_report > SIGNAL_AFTER_S
            if not triggered and sc.mode == "recorder" and reported and quiet:
                triggered = True  # SIGUSR1 to the ranks that never raise
                for r, p in procs.items():
                    if r not in reported and p.poll() is None:
                        print(f"{sc.name}: SIGUSR1 to rank {r}", file=sys.stderr)
                        p.send_signal(signal.SIGUSR1)
            ready = all((scratch / f"ready_{r}").exists() for r in range(sc.world_size))
            if not triggered and sc.mode == "running" and ready:
                triggered = True
                for p in procs.values():
                    p.send_signal(signal.SIGUSR1)
            if not triggered and sc.mode == "running_timer" and ready:
                triggered = True
                _write_atomic(scratch / "dump_at", f"{time.time() + 0.5:.6f}".encode())
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
            log = (scratch / f"log_{rank}.txt").read_text(errors="replace")
            if path.exists():
                results[rank] = json.loads(path.read_text())
            elif rank in sc.crashed_ranks:
                state = _crash_state(log, procs[rank].returncode)
                results[rank] = {"outcome": "crashed", "state_at_dump": state}
            if sc.tree != "gloo" and rank in results:
                results[rank]["returncode"] = procs[rank].returncode
                errs = re.findall(r"^rank \d+: raised (.*)$", log, flags=re.MULTILINE)
                if errs:
                    results[rank]["error"] = errs[0]
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
    want = {f"{sc.file_stem}{r}" for r in sc.ranks_with_dumps}
    # (the recorder also writes its stacks sidecar, stacks_rank_<r>.json, next to each dump)
    got = {p.name for p in (out / sc.tree / sc.name).iterdir() if not p.name.startswith("stacks_")}
    got_json = {
        p.name
        for p in (out / f"{sc.tree}_json" / sc.name).iterdir()
        if not p.name.startswith("stacks_")
    }
    if got != want:
        errors.append(f"pickle dumps {sorted(got)} != expected {sorted(want)}")
    if got_json != {f"{w}.json" for w in want}:
        errors.append(f"json dumps {sorted(got_json)} != expected")
    for r in sc.ranks_with_dumps:
        stem = f"{sc.file_stem}{r}"
        try:
            data = pickle.loads((out / sc.tree / sc.name / stem).read_bytes())
            json.loads((out / f"{sc.tree}_json" / sc.name / f"{stem}.json").read_bytes())
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
        if sc.tree != "gloo":  # ranks that raise exit non-zero in these modes, as jobs do
            continue
        if (procs[r].returncode == 0) != (r not in sc.crashed_ranks):
            errors.append(f"rank {r}: exit code {procs[r].returncode}")
    for r in sc.blocked_ranks:
        state = results.get(r, {}).get("state_at_dump", "")
        if not state.startswith("in "):
            errors.append(f"rank {r}: expected to be blocked in a collective, was {state!r}")
    return errors


def _newest_entries(path: Path) -> list[str]:
    """``pg '0' #12 all_reduce [[64]] retired`` for the newest entry of each group in a dump."""
    data = pickle.loads(path.read_bytes())
    newest: dict[str, dict[str, Any]] = {}
    for e in data.get("entries", []):
        newest[e["process_group"][0]] = e
    return [
        f"pg {name!r} #{e['collective_seq_id']} {e['profiling_name'].removeprefix('gloo:')} "
        f"{e['input_sizes']} {'retired' if e['retired'] else 'not retired'}"
        for name, e in sorted(newest.items())
    ]


def capture_manifest_entry(o: Outcome, out: Path) -> dict[str, Any]:
    """The gloo_capture manifest: truth, capture mode, what a correct analysis says, facts."""
    sc = o.scenario
    base = manifest_entry(o)
    after = [r for r in sorted(o.results) if o.results[r].get("dumped_after_error")]
    expect = sc.expect or {}
    extra_why: dict[str, str] = {}
    survivors = [r for r in sc.ranks_with_dumps if r not in sc.crashed_ranks]
    if sc.culprit_ranks and set(sc.culprit_ranks) <= set(sc.crashed_ranks) and survivors == after:
        # Every culprit died without a dump and every survivor's op failed (retired): Gloo
        # retires a failed op as it does a finished one, so the dumps cannot tell a death in
        # it from a job that finished it and lost a dump. The dead rank is the suspect.
        expect = {
            "verdict": "cannot_tell",
            "culprit_ranks": [],
            "suspected_ranks": sc.culprit_ranks,
        }
        extra_why["why_expect"] = (
            f"rank {sc.culprit_ranks[0]} left no dump and every other rank stopped in the same "
            "op, retired: Gloo retires a failed op as it does a finished one, so the dumps cannot "
            "tell a death in it from a job that finished it and lost one dump. The rank without "
            "a dump is named as the suspect (what settles it: its log or exit status)"
        )
        if sc.extra.get("capture_mode", sc.mode) == "recorder":
            # the recorder's sidecars say each survivor failed waiting (its connection closed
            # or reset), none with a cause: the dead rank is suspected for its silence
            expect = {
                "verdict": "hang",
                "culprit_ranks": sc.culprit_ranks,
                "suspected_ranks": sc.culprit_ranks,
            }
            extra_why["why_expect"] += (
                "; here the recorder's sidecars also say that every other rank failed waiting "
                "(its connection closed or reset by the dead rank) with no cause of its own: a "
                "hang, the rank without a dump suspected (rules/silent.py)"
            )
    entry: dict[str, Any] = {
        "fault": sc.fault,
        "capture_mode": sc.extra.get("capture_mode", sc.mode),
        "description": sc.description,
        "how_captured": CAPTURE_MODES[sc.extra.get("capture_mode", sc.mode)],
        "torch_version": base["torch_version"],
        "world_size": sc.world_size,
        "buffer_size": sc.buffer_size,
        "files": f"{sc.file_stem}<rank> (pickle), {sc.file_stem}<rank>.json (JSON)",
        "ranks_with_dumps": sc.ranks_with_dumps,
        "ranks_without_dump": sc.crashed_ranks,
        "ranks_dumped_after_failure": after,
        "culprit_ranks": sc.culprit_ranks,
        "waiting_ranks": sc.waiting_ranks,
        "fault_group_ranks": sc.fault_group_ranks,
        "fault_op": sc.fault_op,
        "expect": expect,
        **{k: v for k, v in sc.extra.items() if k != "capture_mode"},
        **extra_why,
        "groups": base["groups"],
        "state_at_dump": base["state_at_dump"],
        "newest_entries": {
            str(r): _newest_entries(out / sc.tree / sc.name / f"{sc.file_stem}{r}")
            for r in sc.ranks_with_dumps
        },
        "exit_codes": {str(r): o.results[r].get("returncode") for r in sorted(o.results)},
    }
    if sc.notes:
        entry["notes"] = sc.notes
    return entry


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
    ap.add_argument(
        "--set",
        choices=("all", "gloo", "capture"),
        default="all",
        help="without --only: the gloo/ fault set, the gloo_capture/ capture-mode set, or both",
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

    sets = {"all": SCENARIO_LIST + CAPTURE_LIST, "gloo": SCENARIO_LIST, "capture": CAPTURE_LIST}
    chosen = [SCENARIOS[n] for n in args.only] if args.only else sets[args.set]
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        outcomes = list(pool.map(lambda sc: run_scenario(sc, out), chosen))
    for i, o in enumerate(outcomes):
        for _ in range(args.retries):
            if not o.errors:
                break
            print(f"{o.scenario.name}: {'; '.join(o.errors)}; retrying", file=sys.stderr)
            outcomes[i] = o = run_scenario(o.scenario, out)

    failed = 0
    for o in outcomes:
        status = "ok" if not o.errors else "FAILED"
        print(f"{o.scenario.name:36s} {status:6s} {o.seconds:5.1f}s")
        for err in o.errors:
            print(f"    {err}")
        failed += bool(o.errors)
    for tree, listed in (("gloo", SCENARIO_LIST), ("gloo_capture", CAPTURE_LIST)):
        mine = [o for o in outcomes if o.scenario.tree == tree]
        if not mine:
            continue  # leave the other set's manifest untouched
        manifest_path = out / tree / "MANIFEST.json"
        manifest: dict[str, Any] = {}
        if manifest_path.exists():
            manifest = json.loads(manifest_path.read_text())
        for o in mine:
            if o.errors:
                manifest.pop(o.scenario.name, None)
            elif tree == "gloo":
                manifest[o.scenario.name] = manifest_entry(o)
            else:
                manifest[o.scenario.name] = capture_manifest_entry(o, out)
        order = {s.name: i for i, s in enumerate(listed)}
        manifest = dict(sorted(manifest.items(), key=lambda kv: order.get(kv[0], len(order))))
        manifest_path.write_text(_to_json(manifest) + "\n")
    print(f"{len(outcomes) - failed}/{len(outcomes)} scenarios ok in {time.monotonic() - t0:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
