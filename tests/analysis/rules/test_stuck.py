"""The stuck rule alone (``rules.stuck``): an op every member entered and none finished (the
cause is below the Flight Recorder), or in flight when the dump times say the job ran."""

from __future__ import annotations

import pytest

from frtrace.analysis.rules import stuck
from frtrace.detail import InFlight, StuckInCollective
from frtrace.model import Confidence, FindingKind, Severity
from tests.analysis.facts_builder import Job


def _all_entered(backend: str = "nccl", ranks: tuple[int, ...] = (0, 1, 2, 3)) -> Job:
    job = Job(world=4, backend="gloo" if backend == "gloo" else "nccl")
    job.done("all_reduce", range(1, 7))
    return job.enter("all_reduce", 7, ranks=ranks, state="started")


def test_every_member_in_an_op_that_never_finished_is_stuck() -> None:
    """NCCL: all four ranks started #7 and none finished it: stuck, a warning blaming no
    rank, every member waiting."""
    (f,) = stuck.check(_all_entered().facts())
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.STUCK_IN_COLLECTIVE,
        Severity.WARNING,
        Confidence.MEDIUM,
    )
    assert (f.culprit_ranks, f.waiting_ranks, f.seq, f.op) == ((), (0, 1, 2, 3), 7, "all_reduce")
    assert isinstance(f.detail, StuckInCollective) and f.detail.entered == (0, 1, 2, 3)


def test_an_op_a_member_never_entered_is_not_stuck() -> None:
    """Rank 2 never entered #7: a hang (another rule's), not an op stuck below the recorder."""
    assert stuck.check(_all_entered(ranks=(0, 1, 3)).facts()) == []


# analysis.capture: ops STEP_S (10 ms) apart run up to 0.25 s after the newest entry.
@pytest.mark.parametrize(("idle_s", "kind"), [(0.2, "in_flight"), (0.3, "stuck")])
def test_dump_times_say_in_flight_or_stuck(idle_s: float, kind: str) -> None:
    """Every rank dumped ``idle_s`` after entering #7: within 0.25 s the op had only just
    got all its members (in flight, info); past it, stuck."""
    job = _all_entered()
    (f,) = stuck.check(job.facts(dumped_at_s=dict.fromkeys(range(4), job.newest_s + idle_s)))
    if kind == "in_flight":
        assert (f.kind, f.severity) == (FindingKind.IN_FLIGHT, Severity.INFO)
        assert isinstance(f.detail, InFlight) and f.detail.because == "running"
    else:
        assert f.kind == FindingKind.STUCK_IN_COLLECTIVE


def test_gloo_all_entered_is_in_flight() -> None:
    """Gloo entries never change state: every member in #7 is also a healthy dump taken a
    moment after it, so in flight (medium confidence), not stuck."""
    (f,) = stuck.check(_all_entered("gloo").facts())
    assert (f.kind, f.confidence) == (FindingKind.IN_FLIGHT, Confidence.MEDIUM)
    assert isinstance(f.detail, InFlight) and f.detail.because == "gloo"


def _scheduled(*, timed: bool) -> Job:
    """Every rank finished #1-#6 (with start times when ``timed``: NCCL's timing on) and
    entered #7, which is still ``scheduled`` on every rank."""
    job = Job(world=4, backend="nccl")
    for seq in range(1, 7):
        start = {"time_discovered_started_ns": 1} if timed else {}
        job.enter("all_reduce", seq, state="completed", **start)
    return job.enter("all_reduce", 7, state="scheduled")


@pytest.mark.parametrize(
    ("job", "on_gpu"),
    [
        (_all_entered(), "started"),  # a start recorded: it runs on the GPUs
        (_scheduled(timed=True), "not_started"),  # starts are timed, none of #7
        (_scheduled(timed=False), None),  # no timing: "scheduled" says nothing of the GPU
    ],
    ids=["started", "timed-never-started", "untimed"],
)
def test_where_the_stuck_op_is_on_the_gpus(job: Job, on_gpu: str | None) -> None:
    """With NCCL's timing on, a stuck op still ``scheduled`` on every member never started
    on their GPUs (earlier work on the stream has not ended: look at the GPU, not the
    network); one ``started`` runs and does not finish; without timing, nobody can tell."""
    (f,) = stuck.check(job.facts())
    assert f.kind == FindingKind.STUCK_IN_COLLECTIVE
    assert isinstance(f.detail, StuckInCollective) and f.detail.on_gpu == on_gpu
