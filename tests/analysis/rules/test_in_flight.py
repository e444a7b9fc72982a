"""The in-flight rule alone (``rules.in_flight``): in a running job's dumps (known dump
times), waits on members that had not entered the op yet are ops in flight, not hangs."""

from __future__ import annotations

import pytest

from frtrace.analysis.rules import in_flight
from frtrace.detail import RunningOps
from frtrace.model import Confidence, FindingKind, Severity
from tests.analysis.facts_builder import Job


def _rank_2_between_ops() -> Job:
    job = Job(world=4).done("all_reduce", range(1, 7))
    return job.enter("all_reduce", 7, ranks=(0, 1, 3))


def test_no_dump_time_no_in_flight() -> None:
    """Without dump times nothing says the job was running: no finding."""
    assert in_flight.check(_rank_2_between_ops().facts()) == []


# analysis.capture: ops STEP_S (10 ms) apart run up to 0.25 s after the newest entry.
@pytest.mark.parametrize(("idle_s", "running"), [(0.05, True), (0.24, True), (0.26, False)])
def test_waits_in_a_running_job_are_in_flight(idle_s: float, running: bool) -> None:
    """Every rank dumped ``idle_s`` after the newest entry: up to 0.25 s, ranks 0, 1, 3 wait
    in #7 for rank 2, which is between ops (info, naming no culprit); past it, nothing here
    (the hang rule's)."""
    job = _rank_2_between_ops()
    found = in_flight.check(job.facts(dumped_at_s=dict.fromkeys(range(4), job.newest_s + idle_s)))
    if not running:
        assert found == []
        return
    (f,) = found
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.IN_FLIGHT,
        Severity.INFO,
        Confidence.HIGH,
    )
    assert (f.culprit_ranks, f.waiting_ranks, f.seq, f.op) == ((), (0, 1, 3), 7, "all_reduce")
    assert isinstance(f.detail, RunningOps) and f.detail.behind == (2,)
    assert f.detail.idle_s == pytest.approx(idle_s)
    assert [d.rank for d in f.detail.dumped] == [0, 1, 3]
    assert {d.limit_s for d in f.detail.dumped} == {0.25}


def test_a_rank_that_dumped_late_keeps_its_peers_waiting() -> None:
    """Ranks 0, 1, 3 dumped 0.1 s after entering #7, rank 2 3 s after its newest entry (#6)
    without entering #7: it was not between ops, so the waits on it are not in flight."""
    job = _rank_2_between_ops()
    at = dict.fromkeys((0, 1, 3), job.newest_s + 0.1) | {2: job.newest_s + 3.0}
    assert in_flight.check(job.facts(dumped_at_s=at)) == []


# analysis.capture: known dump times within 1 s of each other were one capture (a signal to
# every rank at once), so the ranks without one were dumped at that instant (the median) too.
@pytest.mark.parametrize(("spread_s", "waiting"), [(0.9, (0, 1, 3)), (1.1, (0, 1, 3))])
def test_a_rank_without_a_dump_time_shares_its_capture(
    spread_s: float, waiting: tuple[int, ...]
) -> None:
    """Ranks 0 and 3 dumped 0.1 s after the newest entry, rank 2 ``spread_s`` earlier (before
    the others entered #7: it was not kept waiting), rank 1 says nothing: within 1 s the
    three were one capture, and rank 1, dumped then too, is running. Past it, rank 1's moment
    is unknown, but rank 2's dump was written, running, before rank 1 entered #7: it cannot
    show #7, so rank 1's wait on it is in flight all the same (``DumpMoments.dumped_before``)."""
    job = _rank_2_between_ops()
    at = dict.fromkeys((0, 3), job.newest_s + 0.1) | {2: job.newest_s + 0.1 - spread_s}
    (f,) = in_flight.check(job.facts(dumped_at_s=at))
    assert f.waiting_ranks == waiting
