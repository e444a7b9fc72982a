"""The hang rule alone (``rules.hang``): the roots of the wait graph (a member never joined,
joined past the timeout, never started the op, left no dump), kept a warning where the rank
may be blocked in an op its buffer does not show, and silent where the dump times say the
job was running."""

from __future__ import annotations

import pytest

from frtrace.analysis.rules import hang
from frtrace.detail import NeverJoined, NoDump, NotStarted
from frtrace.model import Confidence, Finding, FindingKind, Severity
from tests.analysis.facts_builder import Frames, Job, cause, host, in_call, symptom


def _rank_2_never_joins(backend: str = "nccl", unrecorded: int = 0) -> Job:
    """Ranks 0, 1, 3 entered all_reduce #7; rank 2 last finished #6 (after ``unrecorded``
    Gloo send/recv ops the recorder counted but did not write)."""
    job = Job(world=4, backend="gloo" if backend == "gloo" else "nccl")
    job.done("all_reduce", range(1, 6))
    job.enter("all_reduce", 6, ranks=(2,), unrecorded=unrecorded, state="completed")
    job.enter("all_reduce", 6, ranks=(0, 1, 3), state="completed")
    return job.enter("all_reduce", 7, ranks=(0, 1, 3))


def _never_joined(found: list[Finding]) -> Finding:
    (f,) = found
    assert f.kind == FindingKind.NEVER_JOINED and isinstance(f.detail, NeverJoined)
    assert (f.culprit_ranks, f.waiting_ranks, f.seq) == ((2,), (0, 1, 3), 7)
    return f


def test_a_member_that_never_joined_is_the_culprit() -> None:
    """All dumps present, no stacks: rank 2 never joined #7, an error with high confidence."""
    f = _never_joined(hang.check(_rank_2_never_joins().facts()))
    assert (f.severity, f.confidence) == (Severity.ERROR, Confidence.HIGH)
    assert isinstance(f.detail, NeverJoined) and f.detail.doubts == ()


@pytest.mark.parametrize("call", ["send", "recv", "barrier"])
def test_a_culprit_whose_stack_is_in_a_p2p_call_is_only_a_warning(call: str) -> None:
    """Rank 2's stack is inside torch.distributed's send/recv/barrier, which Gloo does not
    record: it may be waiting too, so the finding is demoted to a low-confidence warning
    with the call as its doubt."""
    f = _never_joined(hang.check(_rank_2_never_joins().facts(stacks={2: in_call(call)})))
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.LOW)
    assert isinstance(f.detail, NeverJoined)
    (doubt,) = f.detail.doubts
    assert doubt.rank == 2 and doubt.in_call is not None
    assert (doubt.in_call.library_call or "").startswith(call)


@pytest.mark.parametrize(
    "stack", [host(), in_call("all_reduce")], ids=["host-code", "other-collective"]
)
def test_a_culprit_in_host_code_or_another_collective_stays_an_error(stack: Frames) -> None:
    """Rank 2's stack is in host code, or in a collective call (not send/recv/barrier) and it
    ran no unrecorded op: nothing suggests a hidden wait, the error stands."""
    f = _never_joined(hang.check(_rank_2_never_joins().facts(stacks={2: stack})))
    assert f.severity == Severity.ERROR
    assert isinstance(f.detail, NeverJoined) and f.detail.doubts == ()


def test_unrecorded_ops_and_no_stack_demote_the_culprit() -> None:
    """Gloo: rank 2 ran 2 send/recv ops its buffer does not hold and has no stack: it may be
    blocked in one, so a low-confidence warning that says how many it ran."""
    f = _never_joined(hang.check(_rank_2_never_joins("gloo", unrecorded=2).facts()))
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.LOW)
    assert isinstance(f.detail, NeverJoined)
    (doubt,) = f.detail.doubts
    assert (doubt.in_call, doubt.unrecorded) == (None, 2)


def test_unrecorded_ops_and_a_collective_stack_demote_the_culprit() -> None:
    """Gloo: rank 2 ran unrecorded ops and its stack is in a torch.distributed call (any):
    demoted, the call and the count as its doubt."""
    job = _rank_2_never_joins("gloo", unrecorded=2)
    f = _never_joined(hang.check(job.facts(stacks={2: in_call("all_reduce")})))
    assert f.severity == Severity.WARNING and isinstance(f.detail, NeverJoined)
    (doubt,) = f.detail.doubts
    assert doubt.unrecorded == 2 and doubt.in_call is not None


def test_unrecorded_ops_with_a_host_stack_stay_an_error() -> None:
    """Gloo: rank 2 ran unrecorded ops but its stack is in host code, not in any
    torch.distributed call: it is not waiting, the error stands."""
    job = _rank_2_never_joins("gloo", unrecorded=2)
    f = _never_joined(hang.check(job.facts(stacks={2: host()})))
    assert f.severity == Severity.ERROR and isinstance(f.detail, NeverJoined)
    assert f.detail.doubts == ()


def test_gloo_without_unrecorded_ops_or_stack_stays_an_error() -> None:
    """Gloo, rank 2 ran no unrecorded op and has no stack: nothing to doubt."""
    f = _never_joined(hang.check(_rank_2_never_joins("gloo").facts()))
    assert f.severity == Severity.ERROR and isinstance(f.detail, NeverJoined)
    assert f.detail.doubts == ()


def test_a_member_without_a_dump_is_the_culprit() -> None:
    """Rank 2 left no dump and the others wait in #7: a missing-dump finding naming it."""
    job = Job(world=4, missing=(2,)).done("all_reduce", range(1, 7), ranks=(0, 1, 3))
    (f,) = hang.check(job.enter("all_reduce", 7, ranks=(0, 1, 3)).facts())
    assert f.kind == FindingKind.MISSING_DUMP and isinstance(f.detail, NoDump)
    assert (f.culprit_ranks, f.waiting_ranks) == ((2,), (0, 1, 3))


def test_a_member_without_a_dump_whose_log_says_it_waited_is_not_the_culprit() -> None:
    """Ranks 1 and 2 left no dump (of this attempt: a restart overwrote them); rank 1's own log
    says it timed out waiting, rank 2 said nothing: rank 2 is suspected, rank 1 waits. Where
    every missing rank said it waited, nobody is cleared (the dumps still wait on them)."""
    job = Job(world=4, missing=(1, 2)).done("all_reduce", range(1, 7), ranks=(0, 3))
    job.enter("all_reduce", 7, ranks=(0, 3))
    (f,) = hang.check(job.facts(failures=[symptom(0), symptom(1), symptom(3)]))
    assert f.kind == FindingKind.MISSING_DUMP
    assert (f.culprit_ranks, f.waiting_ranks) == ((2,), (0, 1, 3))
    (f,) = hang.check(job.facts(failures=[symptom(1), symptom(2)]))
    assert (f.culprit_ranks, f.waiting_ranks) == ((1, 2), (0, 3))
    (f,) = hang.check(job.facts(failures=[symptom(1), cause(1)]))  # rank 1's own fault too
    assert (f.culprit_ranks, f.waiting_ranks) == ((1, 2), (0, 3))


def test_a_member_whose_gpu_never_started_the_op_is_the_culprit() -> None:
    """NCCL with timing: ranks 0, 1, 3 started #7, rank 2 only enqueued it."""
    job = Job(world=4).done("all_reduce", range(1, 7))
    job.enter("all_reduce", 7, ranks=(0, 1, 3), state="started")
    (f,) = hang.check(job.enter("all_reduce", 7, ranks=(2,)).facts())
    assert f.kind == FindingKind.NOT_STARTED and isinstance(f.detail, NotStarted)
    assert (f.culprit_ranks, f.waiting_ranks) == ((2,), (0, 1, 3))


def _joined_at(late_s: float) -> Job:
    """Gloo, 4 s timeout: ranks 0, 2, 3 created #3 at 1 s, rank 1 ``late_s`` after them;
    every member retired it."""
    job = Job(world=4, backend="gloo").done("all_reduce", range(1, 3))
    job.enter("all_reduce", 3, ranks=(0, 2, 3), at_s=1.0, state="completed", timeout_ms=4000)
    return job.enter(
        "all_reduce", 3, ranks=(1,), at_s=1.0 + late_s, state="completed", timeout_ms=4000
    )


def test_a_member_that_joined_past_the_timeout_is_the_culprit() -> None:
    """Rank 1 joined #3 9 s after its peers, whose 4 s timeout had expired: it was late."""
    (f,) = hang.check(_joined_at(9.0).facts())
    assert f.kind == FindingKind.NEVER_JOINED and f.culprit_ranks == (1,)
    assert isinstance(f.detail, NeverJoined) and f.detail.late
    assert f.detail.late_by_s == pytest.approx(9.0) and f.detail.timeout_s == pytest.approx(4.0)


def test_a_member_late_within_the_timeout_is_not_a_hang() -> None:
    """Rank 1 joined 2 s after its peers, inside their 4 s timeout: slow, not a hang."""
    assert hang.check(_joined_at(2.0).facts()) == []


# When each dump was written says whether the job was running (``analysis.capture``): a rank
# dumped within max(0.25 s, 3 x its longest gap between ops), never more than 2 s, after its
# newest entry was running. Ops here are STEP_S (10 ms) apart: the limit is 0.25 s.
@pytest.mark.parametrize(("idle_s", "hung"), [(0.2, False), (0.3, True), (2.5, True)])
def test_dump_times_tell_a_running_job_from_a_hang(idle_s: float, hung: bool) -> None:
    """Every rank dumped ``idle_s`` after the newest entry: within 0.25 s the job was
    running (no hang finding: the op is in flight), past it rank 2 never joined."""
    job = _rank_2_never_joins()
    facts = job.facts(dumped_at_s=dict.fromkeys(range(4), job.newest_s + idle_s))
    assert [f.culprit_ranks for f in hang.check(facts)] == ([(2,)] if hung else [])


def _cadence(gap_s: float) -> Job:
    """Ops ``gap_s`` apart: a rank is running up to min(2 s, 3 x gap_s) after its newest."""
    job = Job(world=4)
    for seq in range(1, 7):
        job.enter("all_reduce", seq, at_s=seq * gap_s, state="completed")
    return job.enter("all_reduce", 7, ranks=(0, 1, 3), at_s=7 * gap_s)


@pytest.mark.parametrize(
    ("gap_s", "idle_s", "hung"),
    [(0.5, 1.4, False), (0.5, 1.6, True), (1.0, 1.9, False), (1.0, 2.1, True)],
)
def test_a_slow_cadence_runs_longer_up_to_two_seconds(
    gap_s: float, idle_s: float, hung: bool
) -> None:
    """Ops 0.5 s apart run up to 1.5 s (3 gaps) after the newest entry; ops 1 s apart up to
    the 2 s ceiling, not 3 s: past that, a hang."""
    job = _cadence(gap_s)
    facts = job.facts(dumped_at_s=dict.fromkeys(range(4), job.newest_s + idle_s))
    assert [f.culprit_ranks for f in hang.check(facts)] == ([(2,)] if hung else [])


def test_a_rank_that_dumped_because_it_failed_is_never_running() -> None:
    """Dumped 0.1 s after its newest entry, but because something failed there: a hang."""
    job = _rank_2_never_joins()
    facts = job.facts(dumped_at_s=dict.fromkeys(range(4), job.newest_s + 0.1), failed=range(4))
    assert [f.culprit_ranks for f in hang.check(facts)] == [(2,)]
