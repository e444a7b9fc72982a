"""The building blocks of programs: calls (one flight-recorder entry each) and units (one
host call the GPU runs as one kernel, i.e. one watchdog work item)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

Shape = tuple[int, ...]
Sizes = tuple[Shape, ...]


class UnitKind(enum.Enum):
    """How a unit is recorded (see record.py)."""

    COLL = "coll"
    """One collective entry (fast-path coalesced ops: one entry with several shapes)."""
    P2P = "p2p"
    """One standalone send or recv entry."""
    BATCH = "batch"
    """batch_isend_irecv: one entry per op (same p2p_seq_id) + a `coalesced` end entry."""
    SLOW = "slow"
    """Slow-path coalesced collectives: one entry per op (same collective_seq_id) + end entry."""


@dataclass(frozen=True, slots=True)
class Call:
    """One c10d call that makes one flight-recorder entry."""

    op: str
    """Profiling op without the backend: "all_reduce", "send", "_broadcast_oop", ..."""
    in_sizes: Sizes
    in_dtypes: tuple[str, ...]
    out_sizes: Sizes
    out_dtypes: tuple[str, ...]
    api: str
    """Key of frames.API: the Python function that issued the call."""
    peer: int = 0
    """p2p only: pipeline-stage offset of the peer (+1 next stage, -1 previous)."""
    tag: str = ""
    """p2p only: "act" (forward activations) or "grad" (backward gradients)."""
    mb: int = 0
    """Microbatch index (p2p matching, all_to_all split sizes)."""
    a2a: bool = False
    """Sizes are per-rank uneven all_to_all splits, filled in at record time."""


@dataclass(frozen=True, slots=True)
class Unit:
    """One host call that the GPU runs as one kernel (one watchdog work item)."""

    kind: UnitKind
    axis: str
    calls: tuple[Call, ...]
    context: str
    """Key of frames.CONTEXT: where in the training step the call happens."""
    end_op: str = ""
    """BATCH/SLOW: op of the end entry ("coalesced", "ALLGATHER_coalesced")."""
    end_api: str = ""
    cost_us: float = 100.0
    """Kernel time once every peer has arrived."""
    gpu_gap_us: float = 50.0
    """GPU compute between the previous unit and this one."""
    host_gap_us: float = 40.0
    """Host time between posting the previous unit and this one."""
    corrupt: bool = False
    """Injected fault: this unit can never match its peers."""
