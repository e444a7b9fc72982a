"""Ground truth of a simulated job, read off its execution (never guessed)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from frsim.execute import TailTimes
from frsim.mesh import Group
from frsim.program import PROLOGUE, Programs
from frsim.spec import FaultKind, Moment
from frsim.units import Unit, UnitKind

SeqKind = Literal["collective", "p2p"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Truth:
    """What went wrong, who caused it and who is left waiting."""

    kind: FaultKind | None
    """The injected fault, None for a healthy job."""
    hung: bool
    culprit_ranks: tuple[int, ...]
    """Ranks that caused the hang (sorted); empty when nothing hangs."""
    waiting_ranks: tuple[int, ...]
    """Other ranks left blocked in an unfinished call when the dumps are taken."""
    straggler_ranks: tuple[int, ...] = ()
    missing_ranks: tuple[int, ...] = ()
    """Ranks whose dump file is missing."""
    group_name: str | None = None
    """process_group name of the call the fault is about (e.g. "3")."""
    group_desc: str | None = None
    group_ranks: tuple[int, ...] = ()
    seq: int | None = None
    """collective_seq_id (seq_kind "collective") or p2p_seq_id ("p2p") of that call, as
    recorded by torch >= 2.4 (FR versions 2.x)."""
    seq_kind: SeqKind | None = None
    op: str | None = None
    """The op the group expected there, e.g. "all_reduce" (profiling name without "nccl:")."""
    culprit_op: str | None = None
    """WRONG_*: the op the culprit issued instead (same as `op` for WRONG_SIZE/DTYPE)."""
    step: int | None = None
    cycle: tuple[tuple[int, str, int], ...] = ()
    """OPPOSITE_ORDER: (waiting rank, group name, rank it waits for) edges of the deadlock."""
    detectable: bool = True
    """False when no dump holds evidence of the fault (see `reason`). For a SNAPSHOT: False
    when no dump shows the instant it was taken, so nothing tells the running job from a
    hang whose dumps were taken while blocked."""
    reason: str = ""
    description: str = ""
    moment: Moment = Moment.BLOCKED
    """When the dumps were taken (JobSpec.capture.moment)."""
    timed_out_ranks: tuple[int, ...] = ()
    """Ranks that dumped after their own watchdog timed out the call they wait in."""
    retired_ranks: tuple[int, ...] = ()
    """Of those, the ranks whose timed-out call was already retired (not completed) when
    they dumped."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (enums as strings, tuples as lists)."""
        data = asdict(self)
        data["kind"] = None if self.kind is None else str(self.kind)
        data["moment"] = str(self.moment)
        return data


def _seq(programs: Programs, rank: int, unit_index: int, tail: TailTimes) -> tuple[int, int]:
    """(collective_seq_id, p2p_seq_id) of the tail unit `unit_index` on its group of `rank`."""
    unit = tail.programs[rank].unit(unit_index)
    axis = unit.axis
    template = programs.templates[programs.mesh.stage(rank)]
    first = tail.programs[rank].first_step

    def count(units: tuple[Unit, ...] | list[Unit]) -> tuple[int, int]:
        coll = sum(1 for u in units if u.axis == axis and u.kind in (UnitKind.COLL, UnitKind.SLOW))
        p2p = sum(1 for u in units if u.axis == axis and u.kind in (UnitKind.P2P, UnitKind.BATCH))
        return coll, p2p

    pro, step = count(PROLOGUE), count(template)
    upto = count([tail.programs[rank].unit(j) for j in range(unit_index + 1)])
    return (
        pro[0] + first * step[0] + upto[0],
        pro[1] + first * step[1] + upto[1],
    )


def _call_site(
    programs: Programs, rank: int, unit_index: int, tail: TailTimes
) -> tuple[Group, int, SeqKind, str]:
    unit = tail.programs[rank].unit(unit_index)
    group = programs.mesh.group(rank, unit.axis)
    coll, p2p = _seq(programs, rank, unit_index, tail)
    if unit.kind in (UnitKind.P2P, UnitKind.BATCH):
        return group, p2p, "p2p", unit.calls[0].op
    op = unit.end_op if unit.kind is UnitKind.SLOW else unit.calls[0].op
    return group, coll, "collective", op


# A straggler late in fewer steps than this is not expected to be called one (one or two late
# arrivals look like a GC pause).
MIN_SLOW_STEPS = 3


def derive_truth(
    programs: Programs,
    tail: TailTimes | None,
    missing: tuple[int, ...],
    *,
    timed_out: tuple[int, ...] = (),
    retired: tuple[int, ...] = (),
) -> Truth:
    """Read the truth off the execution of the job (and of its watchdogs: `timed_out` ranks
    dumped after their own timeout, `retired` ones after retiring the timed-out call)."""
    spec = programs.spec
    present = [r not in missing and spec.buffer_of(r) > 0 for r in range(spec.world_size)]
    if spec.fault is None or tail is None or not tail.hung():
        truth = _quiet_truth(programs, tail, missing, present)
    else:
        truth = _hang_truth(programs, tail, missing, present)
    return replace(
        truth, moment=spec.capture.moment, timed_out_ranks=timed_out, retired_ranks=retired
    )


def _quiet_truth(
    programs: Programs, tail: TailTimes | None, missing: tuple[int, ...], present: list[bool]
) -> Truth:
    """A job that did not hang: healthy, a straggler, missing files, or a fault that healed."""
    fault = programs.spec.fault
    kind = None if fault is None else fault.kind
    detectable, reason = True, ""
    if programs.spec.capture.moment is Moment.SNAPSHOT:
        description = "healthy job, dumped while running (snapshot)"
        if fault is not None:
            description += f"; no dump from ranks {list(missing)}"
    elif fault is None:
        description = "healthy job: every call completed"
    elif tail is not None:
        detectable, reason = False, "the injected fault did not hang the job"
        description = f"{fault.kind} on rank {fault.rank} did not hang the job"
    elif fault.kind is FaultKind.STRAGGLER:
        description = (
            f"rank {fault.rank} starts every step {fault.delay_ms:g} ms late; "
            "the job is slow but completes"
        )
        slow_steps = programs.spec.steps - max(fault.step, 0)
        if not present[fault.rank] or sum(present) < 2:
            detectable, reason = False, "the straggler's or all its peers' dumps are missing"
        elif slow_steps < MIN_SLOW_STEPS:
            detectable, reason = (
                False,
                (f"only {slow_steps} slow step(s): too few late arrivals to tell from noise"),
            )
    else:
        description = f"healthy job; no dump from ranks {list(missing)}"
    stragglers = (fault.rank,) if fault is not None and kind is FaultKind.STRAGGLER else ()
    return Truth(
        kind=kind,
        hung=False,
        culprit_ranks=(),
        waiting_ranks=(),
        straggler_ranks=stragglers,
        missing_ranks=missing,
        detectable=detectable,
        reason=reason,
        description=description,
    )


def _hang_truth(
    programs: Programs, tail: TailTimes, missing: tuple[int, ...], present: list[bool]
) -> Truth:
    """A hung job: culprits from the fault, waiting ranks and the call from the fixpoint."""
    spec, mesh, plan = programs.spec, programs.mesh, programs.plan
    fault = spec.fault
    assert fault is not None
    blocked = [r for r in range(spec.world_size) if tail.head[r] < len(tail.programs[r])]
    rank = fault.rank
    culprits: tuple[int, ...] = tuple(sorted({rank, *fault.also}))
    cycle: tuple[tuple[int, str, int], ...] = ()
    culprit_op: str | None = None
    expected_op: str | None = None
    site_rank, site_index = rank, plan.target[rank]
    if fault.kind is FaultKind.OPPOSITE_ORDER:
        peer = plan.partners[0]
        # Only `peer` runs a swapped program; `rank` keeps the order every other rank uses,
        # so the root cause is the rank that changed its order (both are in the cycle).
        culprits = (peer,)
        g1 = mesh.group(rank, tail.programs[rank].unit(plan.target[rank]).axis)
        g2 = mesh.group(peer, "world")
        cycle = ((rank, g1.name, peer), (peer, g2.name, rank))
    elif fault.kind is FaultKind.P2P_NO_PEER:
        site_rank = plan.partners[0]
        site_index = tail.head[site_rank]
    elif fault.kind in (FaultKind.WRONG_OP, FaultKind.WRONG_SIZE, FaultKind.WRONG_DTYPE):
        culprit_op = tail.programs[rank].unit(site_index).calls[0].op
        # the op the group expected: the untouched template's call at that place
        expected_op = programs.templates[mesh.stage(rank)][site_index].calls[0].op
    group, seq, seq_kind, op = _call_site(programs, site_rank, site_index, tail)
    if expected_op is not None:
        op = expected_op
    waiting = tuple(r for r in blocked if r not in culprits)
    detectable, reason = _detectable(fault.kind, culprits, group, waiting, present, site_rank)
    step = spec.fault_step()
    description = _describe(
        fault.kind, culprits, group, seq, seq_kind, op, culprit_op, len(waiting), step, site_rank
    )
    if rank in plan.unmarked:  # a failing GPU: its marks stopped before its host did
        _, first, _, first_op = _call_site(programs, rank, plan.unmarked[rank], tail)
        description = (
            f"the GPU of {_ranks(culprits)} stopped marking completions at {first_op} "
            f"#{first} of its {tail.programs[rank].unit(plan.unmarked[rank]).axis} group (its "
            f"stream still ran the calls up to the stall); " + description
        )
    return Truth(
        kind=fault.kind,
        hung=True,
        culprit_ranks=culprits,
        waiting_ranks=waiting,
        missing_ranks=missing,
        group_name=group.name,
        group_desc=group.desc,
        group_ranks=group.ranks,
        seq=seq,
        seq_kind=seq_kind,
        op=op,
        culprit_op=culprit_op,
        step=step,
        cycle=cycle,
        detectable=detectable,
        reason=reason,
        description=description,
    )


def _detectable(
    kind: FaultKind,
    culprits: tuple[int, ...],
    group: Group,
    waiting: tuple[int, ...],
    present: list[bool],
    site_rank: int,
) -> tuple[bool, str]:
    if not any(present):
        return False, "no rank left a dump with entries (missing files or buffer_size 0)"
    if kind is FaultKind.HOST_STALL:
        witnesses = [r for r in group.ranks if r in waiting and present[r]]
        if not witnesses:
            return False, f"no dump of a rank waiting in group {group.name} for the stalled rank"
    elif kind in (FaultKind.WRONG_OP, FaultKind.WRONG_SIZE, FaultKind.WRONG_DTYPE):
        if not present[culprits[0]]:
            return False, f"the mismatched call is only in rank {culprits[0]}'s dump, missing"
        if not any(present[r] for r in group.ranks if r != culprits[0]):
            return False, f"no other member of group {group.name} left a dump to compare with"
    elif kind is FaultKind.OPPOSITE_ORDER:
        gone = [r for r in culprits if not present[r]]
        if gone:
            return False, f"the deadlock needs both culprits' dumps; missing {gone}"
    elif kind is FaultKind.P2P_NO_PEER and not present[site_rank]:
        return False, f"the unmatched send is only in rank {site_rank}'s dump, missing"
    return True, ""


def _describe(
    kind: FaultKind,
    culprits: tuple[int, ...],
    group: Group,
    seq: int,
    seq_kind: SeqKind,
    op: str,
    culprit_op: str | None,
    n_waiting: int,
    step: int,
    site_rank: int,
) -> str:
    where = f"group {group.name} ({group.desc}) {seq_kind}_seq_id {seq} ({op})"
    if kind is FaultKind.HOST_STALL:
        what = (
            f"{_ranks(culprits)} stopped issuing calls in step {step}; {where} was never "
            f"entered by {_ranks(culprits[:1])}"
            if len(culprits) > 1
            else f"rank {culprits[0]} stopped issuing calls in step {step}; it never entered "
            f"{where}"
        )
    elif kind is FaultKind.OPPOSITE_ORDER:
        what = (
            f"rank {culprits[0]} entered two groups it shares with rank {site_rank} in the "
            f"opposite order in step {step}; deadlock starting at {where}"
        )
    elif kind is FaultKind.P2P_NO_PEER:
        what = (
            f"rank {culprits[0]} never posted the recv for rank {site_rank}'s send at {where} "
            f"(step {step})"
        )
    else:
        what = f"rank {culprits[0]} issued {culprit_op} where its group expected {where}"
        if kind is FaultKind.WRONG_SIZE:
            what = f"rank {culprits[0]} issued {op} with wrong sizes at {where}"
        elif kind is FaultKind.WRONG_DTYPE:
            what = f"rank {culprits[0]} issued {op} with a wrong dtype at {where}"
    return f"{what}; {n_waiting} other ranks wait"


def _ranks(ranks: tuple[int, ...]) -> str:
    """``rank 3`` / ``ranks 3, 5``."""
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
