"""The unseen rule alone (``rules.unseen``): a rank blocked in a group no other member
recorded (Gloo: members are read from the entries), named only when nobody is free."""

from __future__ import annotations

from frtrace.analysis.rules import unseen
from frtrace.detail import UnseenMembers
from frtrace.model import Confidence, FindingKind, Severity
from tests.analysis.facts_builder import Job


def _gloo(unreadable: tuple[int, ...] = ()) -> Job:
    """Gloo, four ranks that finished three all_reduces on the default group."""
    job = Job(world=4, backend="gloo", unreadable=unreadable)
    return job.done("all_reduce", range(1, 4))


def test_a_rank_alone_in_a_new_group_is_a_warning() -> None:
    """Rank 1 is blocked in group 1's first op, which its partner rank 3 never recorded: a
    low-confidence warning, rank 1 waiting, no culprit (who holds it up is unseen)."""
    job = _gloo()
    job.enter("all_reduce", 1, group=job.group("1", (1, 3)), ranks=(1,))
    (f,) = unseen.check(job.facts())
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.UNSEEN_MEMBERS,
        Severity.WARNING,
        Confidence.LOW,
    )
    assert (f.culprit_ranks, f.waiting_ranks) == ((), (1,))
    assert isinstance(f.detail, UnseenMembers) and not f.detail.nobody_free
    assert [(b.rank, b.op, b.seq, b.group.name) for b in f.detail.blocked] == [
        (1, "all_reduce", 1, "1")
    ]


def _crossed(unreadable: tuple[int, ...] = ()) -> Job:
    """Every rank entered a different new group first: 0 in {0, 1}, 1 in {1, 2}, 2 in
    {2, 3}, 3 in {3, 0}; each is alone in the group it recorded."""
    job = _gloo(unreadable)
    for r in range(4):
        group = job.group(str(r + 1), (r, (r + 1) % 4))
        job.enter("all_reduce", 1, group=group, ranks=(r,))
    return job


def test_every_rank_blocked_alone_names_them_all() -> None:
    """Every rank has a dump and is blocked alone: nobody is free to join, so they wait on
    each other (a cross-group deadlock): an error naming the four, medium confidence."""
    (f,) = unseen.check(_crossed().facts())
    assert (f.severity, f.confidence) == (Severity.ERROR, Confidence.MEDIUM)
    assert (f.culprit_ranks, f.waiting_ranks) == ((0, 1, 2, 3), ())
    assert isinstance(f.detail, UnseenMembers) and f.detail.nobody_free
    assert f.detail.loaded == 4


def test_a_rank_whose_dump_cannot_be_read_may_be_free() -> None:
    """The same, but rank 3's dump cannot be read: it may be free, so only a warning."""
    (f,) = unseen.check(_crossed(unreadable=(3,)).facts())
    assert f.severity == Severity.WARNING and f.culprit_ranks == ()
    assert f.waiting_ranks == (0, 1, 2)
    assert isinstance(f.detail, UnseenMembers) and not f.detail.nobody_free


def test_a_rank_without_a_dump_joins_the_groups_one_rank_recorded() -> None:
    """Rank 3 left no dump at all: a group only one rank recorded is taken to include it
    (``analysis.groups``), so no rank is alone in its group."""
    job = Job(world=4, backend="gloo", missing=(3,)).done(
        "all_reduce", range(1, 4), ranks=(0, 1, 2)
    )
    for r in range(3):
        job.enter("all_reduce", 1, group=job.group(str(r + 1), (r, r + 1)), ranks=(r,))
    assert unseen.check(job.facts()) == []


def test_a_free_rank_means_nobody_is_named() -> None:
    """Ranks 0-2 blocked alone, rank 3 finished everything: it is free, only a warning."""
    job = _gloo()
    for r in range(3):
        job.enter("all_reduce", 1, group=job.group(str(r + 1), (r, r + 1)), ranks=(r,))
    (f,) = unseen.check(job.facts())
    assert f.severity == Severity.WARNING and f.waiting_ranks == (0, 1, 2)


def test_a_running_rank_is_not_blocked_alone() -> None:
    """Rank 1 dumped 0.1 s after entering group 1's op: it is running, not blocked."""
    job = _gloo()
    job.enter("all_reduce", 1, group=job.group("1", (1, 3)), ranks=(1,))
    assert unseen.check(job.facts(dumped_at_s={1: job.newest_s + 0.1})) == []


def test_every_member_recorded_is_not_unseen() -> None:
    """Both members of group 1 recorded its op (rank 3 still in it too): not this rule's."""
    job = _gloo()
    job.enter("all_reduce", 1, group=job.group("1", (1, 3)))
    assert unseen.check(job.facts()) == []
