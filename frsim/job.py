"""`simulate(spec)`: run a whole job to the moment its dumps are taken."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from frsim.execute import TailTimes, run_tail
from frsim.mesh import Mesh
from frsim.program import EPILOGUE, PROLOGUE, Programs
from frsim.spec import FaultKind, JobSpec, Moment
from frsim.timing import PrefixTimes, simulate_prefix
from frsim.truth import Truth, derive_truth

Times = NDArray[np.float64]
EPOCH_S = 1_780_000_000  # 2026-05-28, the simulated jobs' era
FIRST_DUMP_DELAY_US = 20_000.0
"""The rank whose watchdog times out first dumps ~20 ms after its timeout."""
SIGNAL_DELAY_US = (50_000.0, 1_000_000.0)
"""Other ranks see the dump signal within TORCH_NCCL_COORD_CHECK_MILSEC (1 s)."""
CLOCK_SKEW_US = 2_000.0
"""Standard deviation of a host's wall-clock offset (NTP-synced hosts: a few ms)."""
WATCHDOG_TICK_US = 100_000.0
"""The watchdog checks its work list every 100 ms (kWatchdogThreadSleepMillis)."""
EARLY_DUMP = (0.05, 0.5)
"""MIXED: an early (pipe/API) dump falls this share of the way from the hang to the first
timeout."""


@dataclass(slots=True)
class Job:
    """A simulated job frozen at dump time: programs, per-unit times, truth."""

    spec: JobSpec
    mesh: Mesh
    programs: Programs
    prefix: PrefixTimes
    tail: TailTimes | None
    dump_us: NDArray[np.float64]
    """Per rank: when its dump was taken (job clock, microseconds)."""
    epoch_ns: int
    clock_offset_ns: NDArray[np.int64]
    """Per rank: its host's wall-clock offset."""
    thread_ids: NDArray[np.int64]
    """Per rank: (main thread id, autograd thread id)."""
    truth: Truth
    retired_head: NDArray[np.bool_]
    """Per rank: its watchdog timed out the tail work it waits in and retired it (without
    completion) before the dump."""


def _blocked(tail: TailTimes, rank: int) -> bool:
    """Whether `rank` waits in a posted, unfinished call (not stalled in host code)."""
    return tail.head[rank] < tail.posted(rank)


def _healthy_dump_times(spec: JobSpec, prefix: PrefixTimes, tail: TailTimes | None) -> Times:
    rng = np.random.default_rng([spec.seed, 13])
    ends = [float(d[-1].max()) for d in prefix.done]
    if tail is not None:
        ends += [max(d) for d in tail.done if d]
    base = max(ends) + 2_000_000.0
    times = base + rng.uniform(*SIGNAL_DELAY_US, spec.world_size)
    times[0] = base + FIRST_DUMP_DELAY_US
    return times


def _snapshot_times(spec: JobSpec, prefix: PrefixTimes) -> Times:
    """Every rank dumps at one instant `at` of the way through the snapshot step, plus skew."""
    capture = spec.capture
    rng = np.random.default_rng([spec.seed, 23])
    step = spec.snapshot_step()
    lo, hi = math.inf, -math.inf
    for s, units in enumerate(prefix.units):
        per_step = (len(units) - len(PROLOGUE) - len(EPILOGUE)) // prefix.steps
        row = len(PROLOGUE) + step * per_step
        lo = min(lo, float(prefix.post[s][row].min()))
        hi = max(hi, float(prefix.done[s][row + per_step - 1].max()))
    instant = lo + capture.at * (hi - lo)
    return instant + rng.uniform(0.0, capture.skew_us, spec.world_size)


def _hang_dump_times(spec: JobSpec, tail: TailTimes) -> tuple[Times, NDArray[np.bool_]]:
    """Dump times of a hung job and, per rank, whether its timed-out work was retired."""
    world, capture = spec.world_size, spec.capture
    rng = np.random.default_rng([spec.seed, 13])
    timeouts = [tail.post[r][tail.head[r]] if _blocked(tail, r) else math.inf for r in range(world)]
    first = int(np.argmin(timeouts))
    timeout_us = spec.timeout_ms * 1000.0
    base = timeouts[first] + timeout_us
    times = base + rng.uniform(*SIGNAL_DELAY_US, world)
    times[first] = base + FIRST_DUMP_DELAY_US
    timed_out = np.zeros(world, dtype=bool)
    timed_out[first] = True
    if capture.moment is not Moment.BLOCKED:
        late = np.random.default_rng([spec.seed, 19])
        own = np.array(timeouts) + timeout_us + FIRST_DUMP_DELAY_US
        own += late.uniform(0.0, WATCHDOG_TICK_US, world)
        blocked = np.isfinite(own)
        if capture.moment is Moment.MIXED:
            # the last thing that happened before the job froze
            hung_at = max(
                max((t for t in ts if math.isfinite(t)), default=0.0)
                for ts in (*tail.post, *tail.done)
            )
            early = hung_at + (base - hung_at) * late.uniform(*EARLY_DUMP, world)
            is_early = late.random(world) < 0.5
            times = np.where(is_early, early, np.where(blocked, own, times))
            timed_out = blocked & ~is_early
        else:
            times = np.where(blocked, own, times)
            timed_out = blocked
    coin = np.random.default_rng([spec.seed, 29]).random(world) < 0.5
    retire = {"before": np.zeros(world, dtype=bool), "after": np.ones(world, dtype=bool)}
    retired = timed_out & retire.get(capture.retired, coin)
    return times, retired


def simulate(spec: JobSpec) -> Job:
    """Simulate `spec` (deterministic for its seed) up to the moment dumps are written."""
    mesh = Mesh(spec)
    programs = Programs(spec, mesh)
    fault = spec.fault
    hangs = spec.hangs()
    prefix = simulate_prefix(programs, spec.fault_step() if hangs else spec.steps, not hangs)
    tail = run_tail(programs, prefix) if hangs else None
    missing: set[int] = set()
    if fault is not None:
        missing.update(fault.missing)
        if fault.kind is FaultKind.MISSING_DUMP:
            missing.add(fault.rank)
    world = spec.world_size
    retired = np.zeros(world, dtype=bool)
    timed_out: tuple[int, ...] = ()
    if tail is not None and tail.hung():
        dump_us, retired = _hang_dump_times(spec, tail)
        timeout_us = spec.timeout_ms * 1000.0
        timed_out = tuple(
            r
            for r in range(world)
            if _blocked(tail, r) and tail.post[r][tail.head[r]] + timeout_us <= dump_us[r]
        )
    elif spec.capture.moment is Moment.SNAPSHOT:
        dump_us = _snapshot_times(spec, prefix)
    else:
        dump_us = _healthy_dump_times(spec, prefix, tail)
    truth = derive_truth(
        programs,
        tail,
        tuple(sorted(missing)),
        timed_out=timed_out,
        retired=tuple(int(r) for r in np.flatnonzero(retired)),
    )
    rng = np.random.default_rng([spec.seed, 17])
    hosts = -(-world // spec.gpus_per_host)
    skew = np.round(rng.normal(0.0, CLOCK_SKEW_US * 1000.0, hosts)).astype(np.int64)
    offsets = skew[np.arange(world) // spec.gpus_per_host]
    # pthread_t values of glibc threads: 0x7f.. page-aligned, main thread TCB at +0x740
    pages = rng.integers(0x7F0000000, 0x7FFFFFFFF, (world, 2))
    thread_ids = (pages << 12) + np.array([0x740, 0x640])
    job = Job(
        spec=spec,
        mesh=mesh,
        programs=programs,
        prefix=prefix,
        tail=tail,
        dump_us=dump_us,
        epoch_ns=(EPOCH_S + (spec.seed % 997) * 86_400) * 1_000_000_000,
        clock_offset_ns=offsets,
        thread_ids=thread_ids.astype(np.int64),
        truth=truth,
        retired_head=retired,
    )
    if spec.capture.moment is Moment.SNAPSHOT:
        # what a snapshot's dumps can show depends on the entries they hold (record.py)
        from frsim.record import snapshot_truth

        job.truth = snapshot_truth(job)
    return job
