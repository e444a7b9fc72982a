"""What to simulate: the job's shape and the one fault injected into it.

Naming rule: an *axis* is a mesh dimension ("tp", "dp", "pp", or "world" for the default
process group); a *group* is one concrete process group on an axis (e.g. the tp group of
ranks 4-7). A *step* is one training iteration; *units* are the host calls a rank makes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

AXES = ("world", "pp", "dp", "tp")
GroupNaming = Literal["counter", "hashed"]
RetireOrder = Literal["before", "after", "either"]


class FaultKind(enum.StrEnum):
    """The root causes frsim can inject; each one's truth is derived by running the job."""

    HOST_STALL = "host_stall"
    """`rank` stops issuing collectives at a unit of `step` (stuck in Python/host code)."""
    WRONG_OP = "wrong_op"
    """`rank` issues a different collective where its group expects another (same seq)."""
    WRONG_SIZE = "wrong_size"
    """`rank` issues the expected collective with different tensor sizes."""
    WRONG_DTYPE = "wrong_dtype"
    """`rank` issues the expected collective with a different dtype."""
    OPPOSITE_ORDER = "opposite_order"
    """`rank` and `peer` enter two shared groups in opposite orders: a cross-group deadlock."""
    P2P_NO_PEER = "p2p_no_peer"
    """`rank` (a pipeline receiver) never posts one recv, so its sender's send never matches."""
    MISSING_DUMP = "missing_dump"
    """A healthy job whose `rank` wrote no dump file."""
    STRAGGLER = "straggler"
    """`rank` starts every step `delay_ms` late; the job is slow but healthy."""


HANGING_KINDS = frozenset(
    {
        FaultKind.HOST_STALL,
        FaultKind.WRONG_OP,
        FaultKind.WRONG_SIZE,
        FaultKind.WRONG_DTYPE,
        FaultKind.OPPOSITE_ORDER,
        FaultKind.P2P_NO_PEER,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """One injected fault. Fields a kind does not use are ignored."""

    kind: FaultKind
    rank: int
    """Global rank that misbehaves (the receiver for P2P_NO_PEER)."""
    step: int = -1
    """Training step where the fault strikes; -1 means the last step."""
    axis: str | None = None
    """Axis of the collective hit by WRONG_* (default: tp, else dp, else world) and the first
    group of OPPOSITE_ORDER."""
    op_index: int = 0
    """WRONG_*: which collective of `axis` in the step (0 = first). HOST_STALL: the unit of the
    step before which the host stalls (0 = before the step's first call)."""
    peer: int | None = None
    """OPPOSITE_ORDER: the second rank (default: `rank`'s neighbour in its `axis` group)."""
    delay_ms: float = 250.0
    """STRAGGLER: how late the rank starts each step."""
    missing: tuple[int, ...] = ()
    """Ranks whose dump file is missing, on top of the fault (MISSING_DUMP adds `rank`)."""
    gpu_unmarked: int = 0
    """HOST_STALL: a failing GPU. The rank's completion marks stop this many units of the step
    before its host stalls: its stream still runs those units (its peers complete them), but
    its own entries of them stay "scheduled" (never started, completed or retired) and its
    pg_status stops advancing; then its stream hangs, and its host, waiting on it, posts
    nothing more (FORMAT.md section 12). 0: the marks never stop."""
    also: tuple[int, ...] = ()
    """HOST_STALL: more ranks that stall the same way at the same unit (several culprits)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", FaultKind(self.kind))
        if self.rank < 0:
            raise ValueError(f"Fault.rank must be >= 0, got {self.rank}")
        if self.delay_ms < 0:
            raise ValueError(f"Fault.delay_ms must be >= 0, got {self.delay_ms}")
        if self.op_index < 0:
            raise ValueError(f"Fault.op_index must be >= 0, got {self.op_index}")
        if self.axis is not None and self.axis not in AXES:
            raise ValueError(f"Fault.axis must be one of {AXES}, got {self.axis!r}")
        object.__setattr__(self, "missing", tuple(sorted(set(self.missing))))
        if self.gpu_unmarked < 0:
            raise ValueError(f"Fault.gpu_unmarked must be >= 0, got {self.gpu_unmarked}")
        object.__setattr__(self, "also", tuple(sorted(set(self.also))))
        if (self.gpu_unmarked or self.also) and self.kind is not FaultKind.HOST_STALL:
            raise ValueError("Fault.gpu_unmarked and Fault.also are for HOST_STALL only")
        if self.rank in self.also or any(r < 0 for r in self.also):
            raise ValueError(f"Fault.also must be other ranks >= 0, got {list(self.also)}")


class Moment(enum.StrEnum):
    """When the ranks' dumps were taken (FORMAT.md sections 1, 8 and 9)."""

    BLOCKED = "blocked"
    """A hung job: the rank whose watchdog times out first dumps ~20 ms after its timeout,
    before retiring the timed-out work; the others dump on the store's dump signal, within
    1 s, while still blocked. A healthy job: every rank dumps 2 s after its last call."""
    TIMEOUT = "timeout"
    """A hung job: every blocked rank dumps after its own watchdog timed out the work it waits
    in (dump time >= that work's creation + timeout_ms). Whether the dump came before or after
    the watchdog retired the timed-out work is `Capture.retired`. Ranks not blocked in a call
    (a host-stalled culprit) dump on the first rank's signal."""
    MIXED = "mixed"
    """A hung job whose ranks dumped at different moments: each rank (seeded coin) either
    dumped early, while blocked and before any timeout (a debug-pipe or API dump), or after its
    own watchdog timed out, as in TIMEOUT. Ranks that died without a dump: `Fault.missing`."""
    SNAPSHOT = "snapshot"
    """A healthy job caught while running: every rank dumps at (nearly) the same instant,
    `Capture.at` of the way through step `Capture.step`, each up to `Capture.skew_us` later."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Capture:
    """How and when the dumps were taken: the moment, the watchdog race, the dump options."""

    moment: Moment = Moment.BLOCKED
    retired: RetireOrder = "before"
    """TIMEOUT/MIXED: the watchdog wrote the dump "before" retiring the timed-out work
    (retired=False), or "after" it (retired=True without completed state or
    time_discovered_completed_ns), or "either", a seeded coin per rank."""
    only_active: bool = False
    """Dumped with onlyActive=True: entries whose completion was discovered are left out."""
    stacks: bool = True
    """includeStackTraces: entries carry `frames` (pickle only). False: no `frames` key."""
    step: int = -1
    """SNAPSHOT: the step the snapshot falls in; -1 means the last step."""
    at: float = 0.5
    """SNAPSHOT: how far through that step (0: its first call, 1: its last completion)."""
    skew_us: float = 500.0
    """SNAPSHOT: each rank dumps up to this much after the snapshot instant."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "moment", Moment(self.moment))
        if self.retired not in ("before", "after", "either"):
            raise ValueError(f"Capture.retired must be before, after or either: {self.retired}")
        if not 0.0 <= self.at <= 1.0:
            raise ValueError(f"Capture.at must be within [0, 1], got {self.at}")
        if self.skew_us < 0:
            raise ValueError(f"Capture.skew_us must be >= 0, got {self.skew_us}")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """A simulated training job: mesh, schedule, recorder settings and an optional fault.

    Global rank = (pp_index * dp + dp_index) * tp + tp_index (tp innermost, like torchtitan's
    ["pp", "dp", "tp"] device mesh).
    """

    world_size: int
    tp: int = 1
    pp: int = 1
    dp: int | None = None
    """Data-parallel degree; derived as world_size // (tp * pp) when None."""
    steps: int = 20
    microbatches: int = 2
    """Pipeline microbatches per step (forward and backward each)."""
    layers: int = 2
    """Transformer layers per pipeline stage (each does a tp all_gather + reduce_scatter)."""
    buffer_size: int | tuple[int, ...] = 2000
    """Ring-buffer entries per rank (TORCH_FR_BUFFER_SIZE), one value or one per rank."""
    coalesced: bool = True
    """Use coalesced collectives: fast path (one entry, several shapes) for the dp sync and a
    slow-path uneven all_gather (_broadcast_oop entries + ALLGATHER_coalesced) on tp."""
    batched_p2p: bool = True
    """Pipeline sends/recvs via batch_isend_irecv (else standalone send/recv)."""
    all_to_all: bool = True
    """An uneven all_to_all_single on the tp group per microbatch (MoE token routing)."""
    timing: bool = True
    """TORCH_NCCL_ENABLE_TIMING: 'started' states, duration_ms, last_started_collective."""
    stack_depth: int = 9
    """Python frames per entry, innermost first."""
    lookahead: int = 2
    """How many calls a rank's host enqueues past its oldest unfinished one before blocking."""
    group_naming: GroupNaming = "counter"
    """"counter": new_group names "1", "2", ...; "hashed": split_group sha1 names."""
    timeout_ms: int = 600_000
    gpus_per_host: int = 8
    seed: int = 0
    fault: Fault | None = None
    capture: Capture = Capture()
    """When and how the dumps were taken (default: hung ranks dump while blocked)."""

    def __post_init__(self) -> None:
        for name in ("world_size", "tp", "pp", "steps", "microbatches", "layers", "gpus_per_host"):
            if getattr(self, name) < 1:
                raise ValueError(f"JobSpec.{name} must be >= 1, got {getattr(self, name)}")
        if self.world_size % (self.tp * self.pp):
            raise ValueError(
                f"JobSpec.world_size ({self.world_size}) must be divisible by tp * pp "
                f"({self.tp} * {self.pp})"
            )
        derived = self.world_size // (self.tp * self.pp)
        if self.dp is None:
            object.__setattr__(self, "dp", derived)
        elif self.dp != derived:
            raise ValueError(
                f"JobSpec.dp ({self.dp}) must equal world_size / (tp * pp) = {derived}"
            )
        if self.lookahead < 0:
            raise ValueError(f"JobSpec.lookahead must be >= 0, got {self.lookahead}")
        if self.stack_depth < 0:
            raise ValueError(f"JobSpec.stack_depth must be >= 0, got {self.stack_depth}")
        if self.group_naming not in ("counter", "hashed"):
            raise ValueError(f"JobSpec.group_naming must be counter or hashed: {self.group_naming}")
        if isinstance(self.buffer_size, int):
            if self.buffer_size < 0:
                raise ValueError(f"JobSpec.buffer_size must be >= 0, got {self.buffer_size}")
        else:
            sizes = tuple(self.buffer_size)
            if len(sizes) != self.world_size or min(sizes) < 0:
                raise ValueError(
                    "JobSpec.buffer_size must be one int >= 0 or world_size of them, got "
                    f"{len(sizes)} values"
                )
            object.__setattr__(self, "buffer_size", sizes)
        if self.fault is not None:
            self._check_fault(self.fault)
        self._check_capture(self.capture)

    @property
    def dp_size(self) -> int:
        """dp as an int (it is always set after construction)."""
        assert self.dp is not None
        return self.dp

    def buffer_of(self, rank: int) -> int:
        """Ring-buffer size of `rank`."""
        if isinstance(self.buffer_size, int):
            return self.buffer_size
        return self.buffer_size[rank]

    def fault_step(self) -> int:
        """The step the fault strikes (resolving -1), or `steps` when there is no fault."""
        if self.fault is None:
            return self.steps
        return self.fault.step if self.fault.step >= 0 else self.steps - 1

    def axis_size(self, axis: str) -> int:
        """Number of ranks in one group of `axis`."""
        return {"world": self.world_size, "pp": self.pp, "dp": self.dp_size, "tp": self.tp}[axis]

    def hangs(self) -> bool:
        """Whether the fault is one that hangs the job."""
        return self.fault is not None and self.fault.kind in HANGING_KINDS

    def snapshot_step(self) -> int:
        """The step a SNAPSHOT falls in (resolving -1)."""
        step = self.capture.step
        return step if step >= 0 else self.steps - 1

    def _check_capture(self, capture: Capture) -> None:
        moment = capture.moment
        if moment is Moment.SNAPSHOT:
            if self.hangs():
                raise ValueError(
                    "Capture.moment snapshot is a healthy running job: its fault must not hang "
                    f"the job (got {self.fault.kind if self.fault else None})"
                )
            if capture.step >= self.steps:
                raise ValueError(f"Capture.step {capture.step} is outside steps {self.steps}")
        elif moment in (Moment.TIMEOUT, Moment.MIXED) and not self.hangs():
            raise ValueError(f"Capture.moment {moment} needs a fault that hangs the job")

    def _check_fault(self, fault: Fault) -> None:
        if fault.rank >= self.world_size:
            raise ValueError(f"Fault.rank {fault.rank} is outside world_size {self.world_size}")
        if fault.step >= self.steps:
            raise ValueError(f"Fault.step {fault.step} is outside steps {self.steps}")
        bad = [r for r in (*fault.missing, *fault.also) if r >= self.world_size]
        if bad:
            raise ValueError(f"Fault.missing or Fault.also has ranks outside the world: {bad}")
        if fault.axis is not None and self.axis_size(fault.axis) < 2:
            raise ValueError(f"Fault.axis {fault.axis!r} has groups of size 1 in this mesh")
        if fault.kind is FaultKind.P2P_NO_PEER:
            if self.pp < 2:
                raise ValueError("P2P_NO_PEER needs pp >= 2 (pipeline sends/recvs)")
            if fault.rank < self.world_size // self.pp:
                raise ValueError("P2P_NO_PEER: Fault.rank must be a receiver, not in stage 0")
        if fault.kind is FaultKind.OPPOSITE_ORDER:
            if self.tp < 2 and self.dp_size < 2:
                raise ValueError("OPPOSITE_ORDER needs a tp or dp group of size >= 2")
            if fault.peer is not None and not 0 <= fault.peer < self.world_size:
                raise ValueError(f"Fault.peer {fault.peer} is outside the world")
            if fault.peer == fault.rank:
                raise ValueError("OPPOSITE_ORDER: Fault.peer must differ from Fault.rank")
        mismatch = (FaultKind.WRONG_OP, FaultKind.WRONG_SIZE, FaultKind.WRONG_DTYPE)
        if fault.kind in mismatch and fault.axis is None and self.world_size < 2:
            raise ValueError(f"{fault.kind} needs at least 2 ranks")
