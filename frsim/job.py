"""`simulate(spec)`: run a whole job to the moment its dumps are taken."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from frsim.execute import TailTimes, run_tail
from frsim.mesh import Mesh
from frsim.program import Programs
from frsim.spec import HANGING_KINDS, FaultKind, JobSpec
from frsim.timing import PrefixTimes, simulate_prefix
from frsim.truth import Truth, derive_truth

EPOCH_S = 1_780_000_000  # 2026-05-28, the simulated jobs' era
FIRST_DUMP_DELAY_US = 20_000.0
"""The rank whose watchdog times out first dumps ~20 ms after its timeout."""
SIGNAL_DELAY_US = (50_000.0, 1_000_000.0)
"""Other ranks see the dump signal within TORCH_NCCL_COORD_CHECK_MILSEC (1 s)."""
CLOCK_SKEW_US = 2_000.0
"""Standard deviation of a host's wall-clock offset (NTP-synced hosts: a few ms)."""


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


def _dump_times(spec: JobSpec, prefix: PrefixTimes, tail: TailTimes | None) -> NDArray[np.float64]:
    rng = np.random.default_rng([spec.seed, 13])
    world = spec.world_size
    first = 0
    if tail is not None and tail.hung():
        timeouts = [
            tail.post[r][tail.head[r]] if tail.head[r] < tail.posted(r) else math.inf
            for r in range(world)
        ]
        first = int(np.argmin(timeouts))
        base = timeouts[first] + spec.timeout_ms * 1000.0
    else:
        ends = [float(d[-1].max()) for d in prefix.done]
        if tail is not None:
            ends += [max(d) for d in tail.done if d]
        base = max(ends) + 2_000_000.0
    times = base + rng.uniform(*SIGNAL_DELAY_US, world)
    times[first] = base + FIRST_DUMP_DELAY_US
    return times


def simulate(spec: JobSpec) -> Job:
    """Simulate `spec` (deterministic for its seed) up to the moment dumps are written."""
    mesh = Mesh(spec)
    programs = Programs(spec, mesh)
    fault = spec.fault
    hangs = fault is not None and fault.kind in HANGING_KINDS
    prefix = simulate_prefix(programs, spec.fault_step() if hangs else spec.steps, not hangs)
    tail = run_tail(programs, prefix) if hangs else None
    missing: set[int] = set()
    if fault is not None:
        missing.update(fault.missing)
        if fault.kind is FaultKind.MISSING_DUMP:
            missing.add(fault.rank)
    truth = derive_truth(programs, tail, tuple(sorted(missing)))
    rng = np.random.default_rng([spec.seed, 17])
    hosts = -(-spec.world_size // spec.gpus_per_host)
    skew = np.round(rng.normal(0.0, CLOCK_SKEW_US * 1000.0, hosts)).astype(np.int64)
    offsets = skew[np.arange(spec.world_size) // spec.gpus_per_host]
    # pthread_t values of glibc threads: 0x7f.. page-aligned, main thread TCB at +0x740
    pages = rng.integers(0x7F0000000, 0x7FFFFFFFF, (spec.world_size, 2))
    thread_ids = (pages << 12) + np.array([0x740, 0x640])
    return Job(
        spec=spec,
        mesh=mesh,
        programs=programs,
        prefix=prefix,
        tail=tail,
        dump_us=_dump_times(spec, prefix, tail),
        epoch_ns=(EPOCH_S + (spec.seed % 997) * 86_400) * 1_000_000_000,
        clock_offset_ns=offsets,
        thread_ids=thread_ids.astype(np.int64),
        truth=truth,
    )
