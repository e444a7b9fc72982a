"""The hang rule in a pipeline whose send/recv Gloo does not record (issue 29, item 5).

Two pipelines of 4 stages (ranks 0-3 and 4-7), data parallel across them: dp groups {s, s+4}
run all_reduce #k at the end of step k. At step 5 stage 1 of the first pipeline (rank 1) stops
in host code; stages 0, 2 and 3 block in their recv (never recorded), so none of ranks 0-3
joins dp all_reduce #5, which ranks 4-7 wait in. Only rank 1 is the culprit: a stage whose
stack is in a send/recv (or in a pipeline schedule's p2p wait) waits; one with nothing to show
where it is, beside stages that wait in p2p behind a rank stuck in host code, may wait too
(cannot tell, never named); one with nothing that explains its absence, and no such pipeline
around it, stays named.
"""

from __future__ import annotations

from frtrace.analysis.diagnose import diagnose_facts
from frtrace.analysis.facts import Facts
from frtrace.analysis.rules import hang
from frtrace.detail import NeverJoined
from frtrace.model import Finding, FindingKind, Report, Severity, Verdict
from frtrace.pystack.model import Frame
from tests.analysis.facts_builder import Frames, Job, cause, host, in_call

STALLED = 1  # the stage stuck in host code
DUMPED_AT = dict.fromkeys(range(8), 60.0)  # long after the newest entry: a stall


def schedule_wait() -> Frames:
    """A main thread in torch.distributed.pipelining's schedule, waiting on its batched p2p
    (as py-spy shows a stage of ScheduleGPipe blocked in its recv)."""
    lib = "/venv/lib/python3.11/site-packages/torch/distributed/pipelining/schedules.py"
    return (
        Frame(function="_wait_batch_p2p", filename=lib, line=683),
        Frame(function="ScheduleGPipe._step_microbatches", filename=lib, line=938),
        Frame(function="PipelineScheduleSingle.step", filename=lib, line=785),
        Frame(function="train", filename="train.py", line=51),
    )


def _pipelines(unrecorded: int = 0) -> Job:
    """Steps 1-4 done everywhere; ranks 4-7 in dp all_reduce #5, ranks 0-3 never joined it.
    ``unrecorded``: send/recv per step on a pp group whose loss all_reduce Gloo records (its
    op_id shows them); 0: the pp groups record nothing (torch.distributed.pipelining)."""
    job = Job(world=8, backend="gloo")
    for s in range(4):
        job.group(f"dp{s}", (s, s + 4), desc="dp")
    if unrecorded:
        job.group("pp0", (0, 1, 2, 3), desc="pp")
        job.group("pp1", (4, 5, 6, 7), desc="pp")
    for step in range(1, 5):
        if unrecorded:
            for g in ("pp0", "pp1"):
                job.enter(
                    "all_reduce", step, group=g, state="completed", unrecorded=unrecorded * step
                )
        for s in range(4):
            job.done("all_reduce", [step], group=f"dp{s}")
    for s in range(4):
        job.enter("all_reduce", 5, ranks=(s + 4,), group=f"dp{s}")
    return job


def _facts(job: Job, stacks: dict[int, Frames]) -> Facts:
    return job.facts(dumped_at_s=DUMPED_AT, stacks=stacks)


def _by_culprit(found: list[Finding]) -> dict[int, Finding]:
    out = {}
    for f in found:
        if f.kind == FindingKind.NEVER_JOINED:
            for r in f.culprit_ranks:
                out[r] = f
    return out


def _report(job: Job, stacks: dict[int, Frames]) -> Report:
    return diagnose_facts(_facts(job, stacks))


def test_stages_waiting_in_the_pipeline_schedule_are_not_named() -> None:
    """Ranks 0, 2, 3 are in the schedule's p2p wait (torch.distributed.pipelining), rank 1 in
    host code: rank 1 alone is named; the others' findings are warnings saying they wait."""
    stacks = {0: schedule_wait(), 1: host(), 2: schedule_wait(), 3: schedule_wait()}
    job = _pipelines()
    by = _by_culprit(hang.check(_facts(job, stacks)))
    assert by[STALLED].severity == Severity.ERROR
    for r in (0, 2, 3):
        assert by[r].severity == Severity.WARNING
        assert isinstance(by[r].detail, NeverJoined)
        (doubt,) = by[r].detail.doubts
        assert doubt.rank == r and doubt.in_call is not None
    report = _report(job, stacks)
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (STALLED,))


def test_stages_waiting_in_recv_with_counted_p2p_are_not_named() -> None:
    """The pp groups record a loss all_reduce each step, so Gloo's op_id shows the send/recv
    every stage ran; rank 1's stack is in host code, the others' in recv or none: rank 1."""
    stacks = {1: host(), 2: in_call("recv")}
    report = _report(_pipelines(unrecorded=4), stacks)
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (STALLED,))


def test_a_stage_without_a_stack_among_stages_waiting_in_p2p_is_not_named() -> None:
    """Rank 2 has no stack and Gloo counted no p2p of it (the pp groups record nothing), but
    ranks 0 and 3, absent from #5 of the other dp groups, wait in the schedule's p2p and rank
    1 is stuck in host code: rank 2 may be a stage blocked behind it, so it is not named (a
    warning that says why), and rank 1 is."""
    stacks = {0: schedule_wait(), 1: host(), 3: schedule_wait()}
    job = _pipelines()
    by = _by_culprit(hang.check(_facts(job, stacks)))
    assert by[2].severity == Severity.WARNING and isinstance(by[2].detail, NeverJoined)
    (doubt,) = by[2].detail.doubts
    assert (doubt.rank, doubt.in_call, doubt.unrecorded) == (2, None, 0)
    assert doubt.neighbours == (0, 3) and doubt.behind == (STALLED,)
    report = _report(job, stacks)
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (STALLED,))


def test_the_stage_nothing_explains_is_named_where_no_one_is_seen_stuck() -> None:
    """Ranks 0, 2, 3 wait in the schedule's p2p, rank 1 has no stack: nothing shows another
    rank stuck, so rank 1 (the only absence nothing explains) is the culprit."""
    stacks = {0: schedule_wait(), 2: schedule_wait(), 3: schedule_wait()}
    report = _report(_pipelines(), stacks)
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (STALLED,))


def test_absences_nothing_explains_are_all_named() -> None:
    """No stack, no counted p2p: nothing says any of ranks 0-3 waits in a send/recv, so each
    absence stands (four ranks that never joined their dp all_reduce)."""
    job = _pipelines()
    by = _by_culprit(hang.check(_facts(job, {})))
    assert all(by[r].severity == Severity.ERROR for r in range(4))
    assert _report(job, {}).culprit_ranks == (0, 1, 2, 3)


def test_a_culprit_named_with_waiting_stages_in_one_finding_stays_named() -> None:
    """One world all_reduce that ranks 4-7 never joined: rank 5 stuck in host code, ranks 4,
    6, 7 in recv. The finding is split: rank 5 never joined (an error), ranks 4, 6, 7 a
    warning that they wait in a send/recv."""
    job = Job(world=8, backend="gloo")
    job.done("all_reduce", range(1, 5))
    job.enter("all_reduce", 5, ranks=(0, 1, 2, 3))
    stacks = {5: host(), 4: in_call("recv"), 6: in_call("recv"), 7: in_call("recv")}
    found = [f for f in hang.check(_facts(job, stacks)) if f.kind == FindingKind.NEVER_JOINED]
    assert sorted((f.culprit_ranks, f.severity) for f in found) == [
        ((4, 6, 7), Severity.WARNING),
        ((5,), Severity.ERROR),
    ]
    assert all(f.waiting_ranks == (0, 1, 2, 3) and f.seq == 5 for f in found)
    report = _report(job, stacks)
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (5,))


def test_a_stage_the_job_reports_failing_is_one_the_others_may_wait_behind() -> None:
    """Rank 1 has no stack but its log says it failed with a cause of its own; ranks 0 and 3
    wait in the schedule's p2p: rank 2 (no stack) may wait behind rank 1 too."""
    facts = _pipelines().facts(
        dumped_at_s=DUMPED_AT,
        stacks={0: schedule_wait(), 3: schedule_wait()},
        failures=[cause(STALLED)],
    )
    doubt = facts.elsewhere[2]
    assert doubt.neighbours == (0, 3) and doubt.behind == (STALLED,)
    assert STALLED not in facts.elsewhere  # nothing says it waits: its absence stands
