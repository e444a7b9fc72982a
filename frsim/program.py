"""Per-rank programs: the ordered host calls each rank makes, built from the mesh.

Every rank of a pipeline stage runs the same step template (only its groups differ):

    tp  broadcast of the batch from tp rank 0                 (Megatron get_batch)
    dp  all_gather_into_tensor_coalesced of the params        (FSDP unshard, fast path)
    forward, per microbatch: [recv act from stage-1], per layer tp all_gather +
        reduce_scatter (sequence parallel), a tp all_to_all (MoE, uneven), then one p2p unit
        [send act to stage+1, recv next act from stage-1]
    backward: the same mirrored (grads flow to stage-1); tp calls come from the autograd thread
    tp  uneven all_gather of vocab shards                      (slow path: _broadcast_oop
        per rank + ALLGATHER_coalesced)
    dp  reduce_scatter_tensor_coalesced of the grads          (or all_reduce buckets)
    world all_reduce of the grad norm

The job starts with a barrier on the default group and ends with another. A p2p unit is one
batch_isend_irecv (batched_p2p) or one standalone send/recv per op. Steps are closed: every
call of a step matches calls of the same step on other ranks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from frsim.mesh import Mesh
from frsim.spec import FaultKind, JobSpec

Shape = tuple[int, ...]
Sizes = tuple[Shape, ...]

HIDDEN = 4096
TOKENS = 4096  # tokens per microbatch
VOCAB = 50257  # GPT-2 vocabulary: uneven shards for any tp > 1
DDP_BUCKET = 26_214_400  # 100 MB of fp32 gradients


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


def _coll(
    axis: str,
    op: str,
    in_sizes: Sizes,
    dtype: str,
    out_sizes: Sizes | None = None,
    *,
    api: str,
    context: str,
    cost: float,
    gpu_gap: float = 50.0,
    host_gap: float = 40.0,
    out_dtype: str | None = None,
    mb: int = 0,
    a2a: bool = False,
) -> Unit:
    outs = in_sizes if out_sizes is None else out_sizes
    call = Call(
        op,
        in_sizes,
        (dtype,) * len(in_sizes),
        outs,
        (out_dtype or dtype,) * len(outs),
        api,
        mb=mb,
        a2a=a2a,
    )
    return Unit(UnitKind.COLL, axis, (call,), context, cost_us=cost, gpu_gap_us=gpu_gap,
                host_gap_us=host_gap)  # fmt: skip


def barrier(context: str) -> Unit:
    """A c10d barrier on the default group: an all_reduce of one float."""
    return _coll("world", "all_reduce_barrier", ((1,),), "Float", api="barrier",
                 context=context, cost=50.0, host_gap=200.0)  # fmt: skip


def _p2p_units(spec: JobSpec, ops: list[Call], context: str) -> list[Unit]:
    if not ops:
        return []
    if spec.batched_p2p:
        return [
            Unit(UnitKind.BATCH, "pp", tuple(ops), context, end_op="coalesced",
                 end_api="batch_end", cost_us=250.0, gpu_gap_us=30.0, host_gap_us=60.0)
        ]  # fmt: skip
    return [
        Unit(UnitKind.P2P, "pp", (op,), context, cost_us=250.0, gpu_gap_us=30.0, host_gap_us=40.0)
        for op in ops
    ]


def _p2p(spec: JobSpec, op: str, peer: int, tag: str, mb: int) -> Call:
    shape = ((TOKENS // spec.tp, HIDDEN),)
    api = ("batch_" if spec.batched_p2p else "") + op
    return Call(op, shape, ("BFloat16",), shape, ("BFloat16",), api, peer=peer, tag=tag, mb=mb)


def _layer_calls(spec: JobSpec, backward: bool, mb: int) -> list[Unit]:
    if spec.tp < 2:
        return []
    shard = ((TOKENS // spec.tp, HIDDEN),)
    full = ((TOKENS, HIDDEN),)
    scale = 2.0 if backward else 1.0
    ctx = "layer_bwd" if backward else "layer_fwd"
    units: list[Unit] = []
    for _ in range(spec.layers):
        units.append(_coll("tp", "_all_gather_base", shard, "BFloat16", full,
                           api="all_gather_into_tensor", context=ctx, cost=350.0,
                           gpu_gap=1800.0 * scale))  # fmt: skip
        units.append(_coll("tp", "_reduce_scatter_base", full, "BFloat16", shard,
                           api="reduce_scatter_tensor", context=ctx, cost=350.0,
                           gpu_gap=2500.0 * scale))  # fmt: skip
    if spec.all_to_all:
        units.append(_coll("tp", "all_to_all", full, "BFloat16", full, api="all_to_all_single",
                           context="moe_bwd" if backward else "moe_fwd", cost=500.0,
                           gpu_gap=300.0 * scale, mb=mb, a2a=True))  # fmt: skip
    return units


def _dp_buckets(spec: JobSpec) -> list[int]:
    per_layer = 12 * HIDDEN * HIDDEN // spec.tp
    dp = spec.dp_size
    return [-(-per_layer // dp) * dp for _ in range(spec.layers)]


def step_template(spec: JobSpec, stage: int) -> tuple[Unit, ...]:
    """The units of one training step on a rank of pipeline `stage`."""
    pp, micro = spec.pp, spec.microbatches
    first, last = stage == 0, stage == pp - 1
    units: list[Unit] = []
    if spec.tp > 1:
        units.append(_coll("tp", "broadcast", ((micro, TOKENS + 1),), "Long", api="broadcast",
                           context="data", cost=40.0, host_gap=5000.0))  # fmt: skip
    if spec.dp_size > 1 and spec.coalesced:
        buckets = _dp_buckets(spec)
        shards = tuple((n // spec.dp_size,) for n in buckets)
        fulls = tuple((n,) for n in buckets)
        units.append(_coll("dp", "all_gather_into_tensor_coalesced", shards, "BFloat16", fulls,
                           api="coalescing_manager", context="param_gather",
                           cost=25_000.0, host_gap=300.0))  # fmt: skip
    for backward in (False, True):
        tag, towards, source = ("grad", -1, +1) if backward else ("act", +1, -1)
        sends = not (first if backward else last)
        recvs = not (last if backward else first)
        ctx = "pp_bwd" if backward else "pp_fwd"
        if pp > 1 and recvs:
            units += _p2p_units(spec, [_p2p(spec, "recv", source, tag, 0)], ctx)
        for mb in range(micro):
            units += _layer_calls(spec, backward, mb)
            ops: list[Call] = []
            if pp > 1 and sends:
                ops.append(_p2p(spec, "send", towards, tag, mb))
            if pp > 1 and recvs and mb + 1 < micro:
                ops.append(_p2p(spec, "recv", source, tag, mb + 1))
            units += _p2p_units(spec, ops, ctx)
    if spec.tp > 1 and spec.coalesced:
        parts = []
        for i in range(spec.tp):
            rows = VOCAB // spec.tp + (1 if i < VOCAB % spec.tp else 0)
            shape = ((rows, HIDDEN),)
            parts.append(Call("_broadcast_oop", shape, ("BFloat16",), shape, ("BFloat16",),
                              "all_gather"))  # fmt: skip
        units.append(Unit(UnitKind.SLOW, "tp", tuple(parts), "vocab_gather",
                          end_op="ALLGATHER_coalesced", end_api="all_gather", cost_us=300.0,
                          gpu_gap_us=200.0, host_gap_us=120.0))  # fmt: skip
    if spec.dp_size > 1:
        if spec.coalesced:
            buckets = _dp_buckets(spec)
            fulls = tuple((n,) for n in buckets)
            shards = tuple((n // spec.dp_size,) for n in buckets)
            units.append(_coll("dp", "reduce_scatter_tensor_coalesced", fulls, "Float", shards,
                               api="coalescing_manager", context="grad_sync",
                               cost=40_000.0, gpu_gap=400.0))  # fmt: skip
        else:
            for _ in range(max(1, spec.layers)):
                units.append(_coll("dp", "all_reduce", ((DDP_BUCKET,),), "Float",
                                   api="all_reduce", context="grad_sync", cost=15_000.0,
                                   gpu_gap=300.0))  # fmt: skip
    units.append(_coll("world", "all_reduce", ((1,),), "Float", api="all_reduce",
                       context="grad_norm", cost=60.0, gpu_gap=100.0))  # fmt: skip
    return tuple(units)


PROLOGUE: tuple[Unit, ...] = (barrier("setup"),)
EPILOGUE: tuple[Unit, ...] = (barrier("teardown"),)


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """How the fault changes programs: replaced fault-step units and host stalls."""

    step: int
    overrides: dict[int, tuple[Unit, ...]]
    """rank -> its units for the fault step."""
    stall: dict[int, int]
    """rank -> index of the fault-step unit before which its host stops posting."""
    target: dict[int, int]
    """rank -> index in its fault-step units of the unit the fault is about."""
    partners: tuple[int, ...] = ()
    """Other ranks the fault involves (OPPOSITE_ORDER peer, P2P_NO_PEER sender)."""


class Programs:
    """All ranks' programs: prologue, per-stage step template, fault plan, epilogue."""

    def __init__(self, spec: JobSpec, mesh: Mesh) -> None:
        self.spec, self.mesh = spec, mesh
        self.templates = tuple(step_template(spec, s) for s in range(spec.pp))
        self.plan = plan_fault(spec, mesh, self.templates)

    def step_units(self, rank: int, step: int) -> tuple[Unit, ...]:
        """Units of `rank` in `step`."""
        if step == self.plan.step and rank in self.plan.overrides:
            return self.plan.overrides[rank]
        return self.templates[self.mesh.stage(rank)]


def _default_axis(spec: JobSpec) -> str:
    for axis in ("tp", "dp", "world"):
        if spec.axis_size(axis) > 1:
            return axis
    return "world"


def _wrong(call: Call, kind: FaultKind) -> Call:
    if kind is FaultKind.WRONG_SIZE:

        def grow(sizes: Sizes) -> Sizes:
            return tuple((s[0] * 2, *s[1:]) for s in sizes)

        return replace(call, in_sizes=grow(call.in_sizes), out_sizes=grow(call.out_sizes))
    if kind is FaultKind.WRONG_DTYPE:
        other = {"BFloat16": "Float", "Float": "BFloat16", "Long": "Int"}
        return replace(
            call,
            in_dtypes=tuple(other.get(d, "Float") for d in call.in_dtypes),
            out_dtypes=tuple(other.get(d, "Float") for d in call.out_dtypes),
        )
    swapped = {
        "_all_gather_base": ("_reduce_scatter_base", "reduce_scatter_tensor"),
        "_reduce_scatter_base": ("_all_gather_base", "all_gather_into_tensor"),
        "all_gather_into_tensor_coalesced": ("reduce_scatter_tensor_coalesced", ""),
        "reduce_scatter_tensor_coalesced": ("all_gather_into_tensor_coalesced", ""),
    }
    if call.op in swapped:  # the other half of a pair: sizes swap too
        op, api = swapped[call.op]
        return replace(call, op=op, api=api or call.api, in_sizes=call.out_sizes,
                       out_sizes=call.in_sizes)  # fmt: skip
    if call.op == "all_reduce":
        return replace(call, op="broadcast", api="broadcast")
    return replace(call, op="all_reduce", api="all_reduce")


def _nth(units: tuple[Unit, ...], axis: str, n: int) -> int:
    """Index of the n-th (clamped) plain collective of `axis` in `units`."""
    found = [
        i
        for i, u in enumerate(units)
        if u.kind is UnitKind.COLL and u.axis == axis and not u.calls[0].a2a
    ]
    if not found:
        raise ValueError(f"the step has no collective on axis {axis!r} to inject the fault into")
    return found[min(n, len(found) - 1)]


def plan_fault(spec: JobSpec, mesh: Mesh, templates: tuple[tuple[Unit, ...], ...]) -> FaultPlan:
    """Turn `spec.fault` into per-rank program changes at the fault step."""
    fault, step = spec.fault, spec.fault_step()
    if fault is None or fault.kind in (FaultKind.MISSING_DUMP, FaultKind.STRAGGLER):
        return FaultPlan(step, {}, {}, {})
    rank = fault.rank
    units = templates[mesh.stage(rank)]
    if fault.kind is FaultKind.HOST_STALL:
        at = min(fault.op_index, len(units) - 1)
        return FaultPlan(step, {}, {rank: at}, {rank: at})
    if fault.kind in (FaultKind.WRONG_OP, FaultKind.WRONG_SIZE, FaultKind.WRONG_DTYPE):
        at = _nth(units, fault.axis or _default_axis(spec), fault.op_index)
        unit = units[at]
        bad = replace(unit, calls=(_wrong(unit.calls[0], fault.kind),), corrupt=True)
        return FaultPlan(step, {rank: units[:at] + (bad,) + units[at + 1 :]}, {}, {rank: at})
    if fault.kind is FaultKind.OPPOSITE_ORDER:
        axis = fault.axis or ("tp" if spec.tp > 1 else "dp")
        group = mesh.group(rank, axis)
        peer = fault.peer
        if peer is None:
            peer = group.ranks[(group.ranks.index(rank) + 1) % len(group.ranks)]
        elif peer not in group.ranks:
            raise ValueError(
                f"OPPOSITE_ORDER: Fault.peer {peer} is not in rank {rank}'s {axis} group "
                f"{list(group.ranks)}; pick a rank of that group or another Fault.axis"
            )
        at = _nth(units, axis, fault.op_index)
        world_at = max(i for i, u in enumerate(units) if u.axis == "world")
        moved = units[world_at]
        rest = units[:world_at] + units[world_at + 1 :]
        swapped = rest[:at] + (moved,) + rest[at:]
        return FaultPlan(step, {peer: swapped}, {}, {rank: at, peer: at}, partners=(peer,))
    # P2P_NO_PEER: drop the receiver's recv of the last forward microbatch.
    last_mb = spec.microbatches - 1
    new_units: list[Unit] = []
    target = -1
    for unit in units:
        kept = tuple(
            c for c in unit.calls if not (c.op == "recv" and c.tag == "act" and c.mb == last_mb)
        )
        if len(kept) != len(unit.calls):
            target = len(new_units)
        if kept:
            new_units.append(replace(unit, calls=kept))
    sender = rank - mesh.dp * mesh.tp
    return FaultPlan(step, {rank: tuple(new_units)}, {}, {rank: target}, partners=(sender,))
