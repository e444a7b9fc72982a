"""The snapshot rule alone (``rules.snapshot``): with no dump time, two or more ranks each one
op behind in a group of its own, holding up no one outside it, all within WINDOW_S (2 s) of
the newest entry, read as a running job caught at one instant."""

from __future__ import annotations

import pytest

from frtrace.analysis.rules import snapshot
from frtrace.detail import RunningSnapshot
from frtrace.model import Confidence, FindingKind, Severity
from tests.analysis.facts_builder import Job


def _pairs(pairs: int = 2, *, lag_s: float = 0.0) -> Job:
    """Pairs {0, 1}, {2, 3}, ...: each pair's first rank entered its #5, the second is done
    with #4. The last pair's ops are ``lag_s`` older than the others'."""
    job = Job(world=2 * pairs)
    for p in range(pairs):
        job.group(str(p + 1), (2 * p, 2 * p + 1), desc="pair")
    newest = 10.0
    for p in range(pairs):
        at = newest - (lag_s if p == pairs - 1 else 0.0)
        group = str(p + 1)
        job.done("all_reduce", range(1, 5), group=group, at_s=at - 0.05)
        job.enter("all_reduce", 5, group=group, ranks=(2 * p,), at_s=at)
    return job


def test_several_groups_one_op_behind_at_once_are_a_snapshot() -> None:
    """Two pairs each caught between ops at the same instant: one warning per group, no
    culprit, the rank behind and the one ahead in each."""
    found = snapshot.check(_pairs().facts())
    assert [(f.kind, f.severity, f.confidence) for f in found] == [
        (FindingKind.RUNNING_SNAPSHOT, Severity.WARNING, Confidence.LOW)
    ] * 2
    assert [f.culprit_ranks for f in found] == [(), ()]
    assert [(f.group.name if f.group else None, f.seq) for f in found] == [("1", 5), ("2", 5)]
    details = [f.detail for f in found]
    assert all(isinstance(d, RunningSnapshot) for d in details)
    assert [
        (d.behind, d.ahead, d.groups, d.window_s) for d in details if isinstance(d, RunningSnapshot)
    ] == [
        (1, (0,), 2, snapshot.WINDOW_S),
        (3, (2,), 2, snapshot.WINDOW_S),
    ]


def test_one_group_behind_is_a_hang_not_a_snapshot() -> None:
    """A single rank one op behind: a stall is as likely, nothing here."""
    assert snapshot.check(_pairs(pairs=1).facts()) == []


@pytest.mark.parametrize(
    ("lag_s", "found"), [(snapshot.WINDOW_S - 0.1, True), (snapshot.WINDOW_S + 0.1, False)]
)
def test_every_wait_within_the_window(lag_s: float, found: bool) -> None:
    """The second pair's ops are ``lag_s`` older than the newest entry: within WINDOW_S the
    picture is one instant; past it, independent stalls."""
    assert len(snapshot.check(_pairs(lag_s=lag_s).facts())) == (2 if found else 0)


def test_a_known_dump_time_leaves_it_to_the_dump_times() -> None:
    """A dump time is known: the capture moments say running or stalled, not this rule."""
    job = _pairs()
    assert snapshot.check(job.facts(dumped_at_s={0: job.newest_s + 5.0})) == []


def test_two_laggards_in_one_group_are_not_a_snapshot() -> None:
    """Ranks 1 and 2 are both behind in the same group {0, 1, 2, 3}: not one op behind in a
    group of their own each."""
    job = Job(world=4)
    job.group("1", (0, 1, 2, 3))
    job.done("all_reduce", range(1, 5), group="1")
    job.enter("all_reduce", 5, group="1", ranks=(0, 3))
    assert snapshot.check(job.facts()) == []


def test_two_laggards_in_one_group_beside_a_third_are_not_a_snapshot() -> None:
    """Ranks 1 and 2 are behind in group {0, 1, 2}, rank 4 in pair {3, 4}: two laggards
    share a group, which one instant of a running job does not explain."""
    job = Job(world=5)
    job.group("1", (0, 1, 2))
    job.group("2", (3, 4))
    for group, first in (("1", 0), ("2", 3)):
        job.done("all_reduce", range(1, 5), group=group, at_s=9.95)
        job.enter("all_reduce", 5, group=group, ranks=(first,), at_s=10.0)
    assert snapshot.check(job.facts()) == []


def test_a_laggard_holding_up_ranks_outside_its_group_is_a_chain() -> None:
    """Rank 1 is behind in pair {0, 1}, and rank 4 waits on rank 0 in a default-group op:
    rank 1 holds up a rank outside its pair, a real chain of waits, not a snapshot."""
    job = Job(world=5)
    job.group("1", (0, 1), desc="pair")
    job.group("2", (2, 3), desc="pair")
    job.enter("all_reduce", 1, ranks=(4,), at_s=9.9)
    for p, group in enumerate(("1", "2")):
        job.done("all_reduce", range(1, 5), group=group, at_s=9.95)
        job.enter("all_reduce", 5, group=group, ranks=(2 * p,), at_s=10.0)
    assert snapshot.check(job.facts()) == []
