"""Faults as program changes: which units of the fault step a rank replaces, reorders or
never posts. Every change keeps steps closed, so ranks not involved run unchanged."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from frsim.mesh import Mesh
from frsim.spec import FaultKind, JobSpec
from frsim.units import Call, Sizes, Unit, UnitKind


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
    unmarked: dict[int, int] = field(default_factory=dict)
    """rank -> index of the fault-step unit from which its completion marks stop (a failing
    GPU: the units still run, its entries of them stay scheduled)."""


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
        return replace(
            call, op=op, api=api or call.api, in_sizes=call.out_sizes, out_sizes=call.in_sizes
        )
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
        ranks = (rank, *fault.also)
        unmarked = {}
        if fault.gpu_unmarked:  # (from the step's first unit at the earliest)
            unmarked = dict.fromkeys(ranks, max(0, at - fault.gpu_unmarked))
        return FaultPlan(
            step, {}, dict.fromkeys(ranks, at), dict.fromkeys(ranks, at), unmarked=unmarked
        )
    if fault.kind in (FaultKind.WRONG_OP, FaultKind.WRONG_SIZE, FaultKind.WRONG_DTYPE):
        at = _nth(units, fault.axis or _default_axis(spec), fault.op_index)
        unit = units[at]
        bad = replace(unit, calls=(_wrong(unit.calls[0], fault.kind),), corrupt=True)
        return FaultPlan(step, {rank: (*units[:at], bad, *units[at + 1 :])}, {}, {rank: at})
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
        swapped = (*rest[:at], moved, *rest[at:])
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
