"""The deadlock rule alone (``rules.deadlock``): ranks that wait on each other in a cycle
across groups."""

from __future__ import annotations

from frtrace.analysis.rules import deadlock
from frtrace.detail import Deadlock
from frtrace.model import Confidence, FindingKind, Severity
from tests.analysis.facts_builder import Job


def _two_groups() -> Job:
    """Ranks 0 and 1 share groups "1" and "2" and finished three all_reduces on the default
    group."""
    job = Job(world=2).done("all_reduce", range(1, 4))
    job.group("1", (0, 1))
    job.group("2", (0, 1))
    return job


def test_opposite_order_across_two_groups_is_a_deadlock() -> None:
    """Rank 0 entered group 1's #1, rank 1 group 2's #1: each waits on the other. With two
    ranks nothing tells who changed the order: both named, medium confidence."""
    job = _two_groups()
    job.enter("all_reduce", 1, group="1", ranks=(0,))
    job.enter("all_reduce", 1, group="2", ranks=(1,))
    (f,) = deadlock.check(job.facts())
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.DEADLOCK,
        Severity.ERROR,
        Confidence.MEDIUM,
    )
    assert f.culprit_ranks == (0, 1)
    assert isinstance(f.detail, Deadlock)
    assert f.detail.component == (0, 1) and f.detail.deviators == ()
    assert [(s.rank, s.group.name, s.waits_for) for s in f.detail.steps] == [
        (0, "1", 1),
        (1, "2", 0),
    ]


def test_a_wait_that_does_not_come_back_is_no_deadlock() -> None:
    """Rank 0 waits in group 1's #1 for rank 1, which finished everything it entered: a chain
    that ends (a hang), not a cycle."""
    job = _two_groups().enter("all_reduce", 1, group="1", ranks=(0,))
    assert deadlock.check(job.facts()) == []


def test_the_rank_against_the_majority_order_is_the_deviator() -> None:
    """Four ranks in groups "1" and "2": ranks 0, 1, 2 entered group 1 first, rank 3 group 2
    first: rank 3 changed the order, decided by a vote of 1 against 3."""
    job = Job(world=4).done("all_reduce", range(1, 4))
    job.group("1", (0, 1, 2, 3))
    job.group("2", (0, 1, 2, 3))
    job.enter("all_reduce", 1, group="1", ranks=(0, 1, 2))
    job.enter("all_reduce", 1, group="2", ranks=(3,))
    (f,) = deadlock.check(job.facts())
    assert isinstance(f.detail, Deadlock)
    assert f.culprit_ranks == (3,) and f.detail.deviators == (3,)
    (how,) = f.detail.decided_by
    assert (how.how, how.fewer, how.more) == ("majority", 1, 3)
