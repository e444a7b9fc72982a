"""A rank whose own completion marks stopped (issue 50, item 3; ``facts.marks``): its entries of
a group stay scheduled from #N on while its peers' own marks show #N, or a later op of the
group, completed. No member completes a collective unless every member ran it, so it ran
them: it is not "held up before the op" its peers wait in (``Waits.held``), but the culprit
the job hung on, named with what shows it (``Waits.stopped``).

And where that is not beyond doubt, the rank stays held: Gloo (no states), another member
still inside the op (in flight), a member whose marks say nothing of the group, progress seen
only in the suspect's own marks, a ``pg_status`` that cannot be a count of collectives, a job
whose dump times show it running."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from frtrace.analysis.diagnose import diagnose_facts
from frtrace.analysis.facts import Facts
from frtrace.analysis.rules import hang
from frtrace.detail import MarksStopped, NeverJoined
from frtrace.model import Confidence, Finding, FindingKind, Severity, Verdict
from frtrace.report.text import render_text
from tests.analysis.facts_builder import Job


class _Dumped(Job):
    """Dumps as a job's tooling takes them: ``active`` ranks' dumps drop their completed
    entries (onlyActive); ``status`` sets a rank's ``pg_status`` of a group as its watchdog
    saw it, (last enqueued, last completed), over what the builder works out."""

    def __init__(self, world: int = 4, *, active: tuple[int, ...] | None = None, **kw: Any):
        super().__init__(world, **kw)
        self.active = set(range(world)) if active is None else set(active)
        self.status: dict[tuple[int, str], tuple[int, int]] = {}

    def dump(self, rank: int) -> dict[str, Any]:
        d = super().dump(rank)
        if rank in self.active:
            d["entries"] = [e for e in d["entries"] if e["state"] != "completed"]
        for pg_id, name in enumerate(self._groups):
            if (rank, name) in self.status:
                enqueued, completed = self.status[(rank, name)]
                d["pg_status"][str(pg_id)] = {
                    "last_enqueued_collective": enqueued,
                    "last_started_collective": -1,
                    "last_completed_collective": completed,
                }
        return d


def _gpu_stopped(
    backend: Literal["nccl", "gloo"] = "nccl",
    peers_completed: int = 9,
    inside: tuple[int, ...] = (),
    **kw: Any,
) -> _Dumped:
    """Rank 3's marks stopped after all_reduce #4: its entries #5-#9 stay scheduled. Ranks
    0-2 completed up to #``peers_completed`` (their pg_status; onlyActive dropped their
    entries of it) and wait in #10, which rank 3 never enqueued; ranks ``inside`` show #5
    started too (their own entry of it open)."""
    job = _Dumped(backend=backend, **kw)
    job.done("all_reduce", range(1, 5))
    for seq in range(5, 10):
        job.enter("all_reduce", seq, ranks=(3,))
    if inside:
        job.enter("all_reduce", 5, ranks=inside, state="started")
    job.enter("all_reduce", 10, ranks=(0, 1, 2))
    for r in (0, 1, 2):
        job.status[(r, "0")] = (10, peers_completed)
    job.status[(3, "0")] = (9, 4)
    return job


def _finding_on(found: list[Finding], rank: int) -> Finding:
    (f,) = [f for f in found if rank in f.culprit_ranks and f.kind == FindingKind.NEVER_JOINED]
    assert isinstance(f.detail, NeverJoined)
    return f


def _stopped(f: Finding) -> tuple[MarksStopped, ...]:
    assert isinstance(f.detail, NeverJoined)
    return f.detail.waits.stopped


def _held(f: Finding) -> tuple[int, ...]:
    assert isinstance(f.detail, NeverJoined)
    return tuple(h.rank for h in f.detail.waits.held)


def test_a_rank_whose_peers_completed_what_it_never_marked_is_the_culprit() -> None:
    """Rank 3's own entries stay scheduled from #5; ranks 0-2 completed #9 (their pg_status):
    it ran #5-#9, its completion marks stopped. Its "never joined" #10 stands, an error with
    high confidence, and the verdict names it, saying its marks stopped after #4."""
    facts = _gpu_stopped().facts()
    f = _finding_on(hang.check(facts), 3)
    assert (f.waiting_ranks, f.seq, f.severity, f.confidence) == (
        (0, 1, 2),
        10,
        Severity.ERROR,
        Confidence.HIGH,
    )
    assert _held(f) == ()
    (m,) = _stopped(f)
    assert (m.rank, m.op, m.first_unmarked, m.last_marked, m.peers_completed) == (
        3,
        "all_reduce",
        5,
        4,
        9,
    )
    assert (m.by, m.source, m.group.name) == ((0, 1, 2), "pg_status", "0")
    report = diagnose_facts(facts)
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (3,))
    text = " ".join(render_text(report).split())
    assert "rank 3's GPU stopped reporting completions after #4 of default_pg (pg 0)" in text
    assert "ranks 0-2 completed #9 of that group (their pg_status)" in text


def test_peers_that_completed_exactly_the_op_it_sits_in_are_enough() -> None:
    """The others completed #5 itself, the op rank 3 is blocked in: it ran it."""
    f = _finding_on(hang.check(_gpu_stopped(peers_completed=5).facts()), 3)
    assert f.severity == Severity.ERROR and _held(f) == ()
    assert [(m.first_unmarked, m.peers_completed) for m in _stopped(f)] == [(5, 5)]


def test_peers_short_of_the_op_leave_it_held() -> None:
    """The others completed #4 only (by their pg_status): nothing says rank 3 ran #5; it
    may be held up there, so the finding stays a warning (cannot tell)."""
    facts = _gpu_stopped(peers_completed=4).facts()
    f = _finding_on(hang.check(facts), 3)
    assert (f.severity, _held(f), _stopped(f)) == (Severity.WARNING, (3,), ())
    assert diagnose_facts(facts).verdict == Verdict.CANNOT_TELL


def test_peers_completed_entries_count_as_their_marks() -> None:
    """Full dumps (no onlyActive), the others' entries of #5-#8 gone but #9 kept completed:
    their entries show #9 completed (and their pg_status agrees)."""
    job = _Dumped(active=())
    job.done("all_reduce", range(1, 5))
    for seq in range(5, 10):
        job.enter("all_reduce", seq, ranks=(3,))
    job.done("all_reduce", [9], ranks=(0, 1, 2))
    job.enter("all_reduce", 10, ranks=(0, 1, 2))
    job._entries.update(  # (their #1-#4, as a wrapped buffer would have dropped them)
        {r: [e for e in job._entries[r] if e["collective_seq_id"] >= 9] for r in (0, 1, 2)}
    )
    facts = job.facts()
    f = _finding_on(hang.check(facts), 3)
    (m,) = _stopped(f)
    assert (m.first_unmarked, m.peers_completed, m.source) == (5, 9, "both")
    text = " ".join(render_text(diagnose_facts(facts)).split())
    assert "ranks 0-2 completed #9 of that group (their entries and pg_status)" in text


def test_gloo_records_no_states_so_nothing_is_read() -> None:
    """The same shape on Gloo (the others' buffers holding #10 alone): its entries never
    change state and its pg_status counts a failed op as completed. Nothing is read from
    them: rank 3 stays held."""
    job = _gpu_stopped("gloo")
    job._entries.update(
        {r: [e for e in job._entries[r] if e["collective_seq_id"] == 10] for r in (0, 1, 2)}
    )
    facts = job.facts()
    f = _finding_on(hang.check(facts), 3)
    assert (_held(f), _stopped(f)) == ((3,), ())
    assert f.severity == Severity.WARNING


def test_members_inside_one_op_together_are_not_read_as_stopped() -> None:
    """A broadcast in flight: rank 0 (its root) finished #5 and entered #6; ranks 1-3 are
    still inside #5 (scheduled). #5 completed on a member, but the others are not past it:
    the op is running, nobody's marks stopped."""
    job = _Dumped()
    job.done("broadcast", range(1, 5))
    job.enter("broadcast", 5, ranks=(1, 2, 3))
    job.enter("broadcast", 6, ranks=(0,))
    job.status[(0, "0")] = (6, 5)
    for r in (1, 2, 3):
        job.status[(r, "0")] = (5, 4)
    found = hang.check(job.facts())
    assert found and all(_stopped(f) == () for f in found)
    assert {r for f in found for r in _held(f)} == {1, 2, 3}


def test_a_peer_whose_own_marks_disagree_is_not_read() -> None:
    """Rank 2's pg_status says #9 completed, but its own entry of #5 is still open (started,
    waiting for rank 3 to start it too): one member is still inside #5, so the others have
    not all gone past it. Rank 3 stays held."""
    f = _finding_on(hang.check(_gpu_stopped(inside=(2,)).facts()), 3)
    assert (_held(f), _stopped(f)) == ((3,), ())


def test_members_stopped_together_are_named_once_the_others_went_past_them() -> None:
    """Ranks 2 and 3 both stay scheduled from #5; ranks 0-1 completed #9 (an op after theirs,
    which needs both to have finished #5): both ran it, both are named."""
    job = _Dumped()
    job.done("all_reduce", range(1, 5))
    for seq in range(5, 10):
        job.enter("all_reduce", seq, ranks=(2, 3))
    job.enter("all_reduce", 10, ranks=(0, 1))
    for r in (0, 1):
        job.status[(r, "0")] = (10, 9)
    facts = job.facts()
    stopped = {m.rank for f in hang.check(facts) for m in _stopped(f)}
    assert stopped == {2, 3}
    assert diagnose_facts(facts).culprit_ranks == (2, 3)


def test_a_member_that_says_nothing_of_the_group_leaves_it_held() -> None:
    """Rank 3 is blocked in all_reduce #5 of group 1 (ranks 2, 3), whose other member left
    no entry of it (all completed, dropped): its pg_status of the group cannot be joined
    (a pg_id is per process), so nothing shows whether it completed #5. Ranks 0-2 wait on
    rank 3 in #3 of the default group (it enqueued #2, after #5 of group 1): it stays held."""
    job = _Dumped()
    job.group("1", (2, 3))
    job.done("all_reduce", range(1, 2))
    job.done("all_reduce", range(1, 5), group="1")
    job.enter("all_reduce", 5, ranks=(3,), group="1")
    job.enter("all_reduce", 2, ranks=(3,))
    job.done("all_reduce", [2], ranks=(0, 1, 2))
    job.enter("all_reduce", 3, ranks=(0, 1, 2))
    job.status[(2, "1")] = (7, 7)
    f = _finding_on(hang.check(job.facts()), 3)
    assert (_held(f), _stopped(f)) == ((3,), ())


def test_one_peer_past_the_op_is_not_enough_while_another_says_nothing() -> None:
    """Group 1 is ranks 1-3: rank 1 completed #5 (its pg_status) and waits in #6, which rank
    3 (inside #5) has not enqueued; rank 2 left nothing of the group (no entry, so no
    pg_status to read). A running job dumped a moment apart looks so (rank 2 inside #5 as
    well, or past it): not every other member shows #5 completed, rank 3 stays held."""
    job = _Dumped()
    job.group("1", (1, 2, 3))
    job.done("all_reduce", range(1, 2))
    job.done("all_reduce", range(1, 5), group="1")
    job.enter("all_reduce", 5, ranks=(3,), group="1")
    job.enter("all_reduce", 6, ranks=(1,), group="1")
    job.enter("all_reduce", 2, ranks=(3,))
    job.done("all_reduce", [2], ranks=(0, 1, 2))
    job.enter("all_reduce", 3, ranks=(0, 2))
    job.status[(1, "1")] = (6, 5)
    job.status[(2, "1")] = (5, 5)
    on_3 = [f for f in hang.check(job.facts()) if 3 in f.culprit_ranks]
    assert len(on_3) == 2  # (never joined #6 of group 1, and #3 of the default group)
    assert all((_held(f), _stopped(f)) == ((3,), ()) for f in on_3)


def test_progress_seen_only_in_the_suspects_own_marks_is_not_read() -> None:
    """Rank 3 (full dump) shows #5 scheduled but #6 completed, and its own pg_status says
    #9; its partner in group 1 left nothing of the group. Only the suspect's own marks say
    the group went past #5: not read, it stays held."""
    job = _Dumped(active=(0, 1, 2))
    job.group("1", (2, 3))
    job.done("all_reduce", range(1, 2))
    job.done("all_reduce", range(1, 5), group="1")
    job.enter("all_reduce", 5, ranks=(3,), group="1")
    job.done("all_reduce", [6], ranks=(3,), group="1")
    job.enter("all_reduce", 2, ranks=(3,))
    job.done("all_reduce", [2], ranks=(0, 1, 2))
    job.enter("all_reduce", 3, ranks=(0, 1, 2))
    job.status[(3, "1")] = (9, 9)
    f = _finding_on(hang.check(job.facts()), 3)
    assert (_held(f), _stopped(f)) == ((3,), ())


@pytest.mark.parametrize("counted", [11986, 10], ids=["past-its-ops", "beyond-its-newest"])
def test_a_pg_status_that_cannot_count_these_collectives_is_not_read(counted: int) -> None:
    """The others' pg_status says #11986 (the p2p sequence of a pipeline group counts in the
    same value), or #10, past rank 3's newest op (#9): no member completes an op another
    never enqueued, so the value is not a count of these collectives. Rank 3 stays held."""
    f = _finding_on(hang.check(_gpu_stopped(peers_completed=counted).facts()), 3)
    assert (_held(f), _stopped(f)) == ((3,), ())


def test_a_group_with_p2p_entries_is_not_read_from_pg_status() -> None:
    """A send of the group is in a dump: its pg_status mixes the p2p sequence with the
    collectives' in one value, so it is not read."""
    job = _gpu_stopped()
    job.enter("send", 0, ranks=(1,), is_p2p=True, profiling_name="nccl:send 1->0")
    f = _finding_on(hang.check(job.facts()), 3)
    assert _stopped(f) == ()


def test_a_job_dumped_while_running_names_no_one() -> None:
    """The same entries, but the waiting ranks dumped moments after entering #10 (their dump
    times): a running job, rank 3 mid-op behind them. No culprit, no marks read."""
    job = _gpu_stopped()
    at = job.newest_s + 0.05
    facts: Facts = job.facts(dumped_at_s=dict.fromkeys(range(4), at))
    found = hang.check(facts)
    assert not [f for f in found if 3 in f.culprit_ranks and f.severity == Severity.ERROR]
    assert all(_stopped(f) == () for f in found if isinstance(f.detail, NeverJoined))
    assert diagnose_facts(facts).culprit_ranks == ()
