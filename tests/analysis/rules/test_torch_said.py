"""The torch_said rule alone (``rules.torch_said``), and the verdict it leads to: what torch's
own checks saw. Its DETAIL collective check (each rank names itself and the first rank that
differs) names the ranks whose call is not the majority's; Gloo's size check is a desync nobody
is named for; a message in a subgroup's numbering names the job's ranks only where the job's
groups say which; and the named rule (monitoredBarrier) reads the same numbering."""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.analysis.rules import named, torch_said
from frtrace.analysis.rules.desync import check as desync_check
from frtrace.analysis.verdict import verdict
from frtrace.detail import GlooSizeHint, NamedByError, SaidMismatch
from frtrace.evidence.messages import classify
from frtrace.evidence.model import Failure
from frtrace.model import Confidence, FindingKind, Severity, Verdict
from tests.analysis.facts_builder import Job
from tests.evidence.test_torch_checks import mismatch

AR, BC = "ALLREDUCE", "BROADCAST"


def said(rank: int | None, text: str, line: int = 1) -> Failure:
    """The failure the log reader makes of ``text`` on ``rank``'s log."""
    found = classify(text)
    assert found is not None
    return found.failure(rank=rank, message=text, source=f"rank_{rank}.log:{line}", at_ns=None)


def job(world: int = 4) -> Job:
    return Job(world=world).done("all_reduce", range(1, 3))


# What each rank of a 4-rank job says when rank 1 broadcasts and the others all_reduce
SAYS = {
    0: mismatch(0, AR, 1, BC),
    1: mismatch(1, BC, 0, AR),
    2: mismatch(2, AR, 1, BC),
    3: mismatch(3, AR, 1, BC),
}


def _decide(facts: Facts) -> tuple[Verdict, tuple[int, ...]]:
    found = torch_said.check(facts) + named.check(facts)
    d = verdict(found, facts, ())
    return d.verdict, d.culprits


def test_every_ranks_message_names_the_rank_that_called_something_else() -> None:
    facts = job().facts(failures=[said(r, SAYS[r]) for r in range(4)])
    (f,) = torch_said.check(facts)
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.OP_MISMATCH,
        Severity.ERROR,
        Confidence.HIGH,
    )
    assert (f.culprit_ranks, f.waiting_ranks, f.op) == ((1,), (0, 2, 3), "all_reduce")
    d = f.detail
    assert isinstance(d, SaidMismatch)
    assert (d.basis, d.differs_in, d.reference, d.shown, d.group_size) == (
        "majority",
        "op",
        0,
        4,
        4,
    )
    assert [(c.rank, c.op) for c in d.sides] == [(0, "all_reduce"), (1, "broadcast")]
    assert f.expected is not None and f.expected.op == "all_reduce"
    assert f.actual[1].op == "broadcast" and f.actual[1].input_sizes == ((64,),)
    assert _decide(facts) == (Verdict.DESYNC, (1,))


def test_the_ranks_before_the_one_named_called_what_the_reporter_did() -> None:
    """Ranks 2 and 3 alone: each compared rank 0 first and found it alike, so rank 0's call
    is known too: three of four all_reduce."""
    facts = job().facts(failures=[said(2, SAYS[2]), said(3, SAYS[3])])
    (f,) = torch_said.check(facts)
    assert f.culprit_ranks == (1,) and f.waiting_ranks == (0, 2, 3)


def test_one_message_alone_cannot_tell_which_side_is_wrong() -> None:
    """Rank 0's message shows ranks 0 and 1 only: ranks 2 and 3 would decide it."""
    for reporter in (0, 1):
        facts = job().facts(failures=[said(reporter, SAYS[reporter])])
        (f,) = torch_said.check(facts)
        assert (f.severity, f.culprit_ranks) == (Severity.WARNING, ())
        assert isinstance(f.detail, SaidMismatch) and f.detail.basis == "undecided"
        assert f.detail.culprits == (0, 1)  # (the candidates: every side)
        assert _decide(facts) == (Verdict.CANNOT_TELL, ())


def test_a_tie_with_every_call_shown_names_both_sides() -> None:
    facts = job(world=2).facts(
        failures=[said(0, mismatch(0, AR, 1, BC)), said(1, mismatch(1, BC, 0, AR))]
    )
    (f,) = torch_said.check(facts)
    assert (f.severity, f.confidence, f.culprit_ranks) == (
        Severity.ERROR,
        Confidence.LOW,
        (0, 1),
    )
    assert isinstance(f.detail, SaidMismatch) and f.detail.basis == "no_majority"


def test_a_rank_that_passed_other_sizes_is_a_size_mismatch() -> None:
    texts = {
        0: mismatch(0, AR, 2, AR, shape="256"),
        1: mismatch(1, AR, 2, AR, shape="256"),
        3: mismatch(3, AR, 2, AR, shape="256"),
    }
    facts = job().facts(failures=[said(r, t) for r, t in texts.items()])
    (f,) = torch_said.check(facts)
    assert (f.kind, f.culprit_ranks) == (FindingKind.SIZE_MISMATCH, (2,))


def test_a_subgroups_numbering_is_read_from_the_jobs_groups() -> None:
    """Group [1, 2, 3]: the job's rank 1 is its rank 0, rank 3 its rank 2; both say the
    group's rank 1 (the job's 2) broadcasts."""
    j = job()
    j.group("1", (1, 2, 3), desc="workers")
    j.done("all_reduce", range(1, 3), group="1")
    failures = [said(1, mismatch(0, AR, 1, BC)), said(3, mismatch(2, AR, 1, BC))]
    (f,) = torch_said.check(j.facts(failures=failures))
    assert (f.culprit_ranks, f.waiting_ranks) == ((2,), (1, 3))
    assert isinstance(f.detail, SaidMismatch) and f.detail.group_size == 3


def test_a_subgroup_no_dump_shows_names_no_one() -> None:
    """The job's rank 1 says it is "Rank 0": a group no dump shows; its numbers are not the
    job's (rank 1 named as broadcasting would be the reporter itself)."""
    facts = job().facts(failures=[said(1, mismatch(0, AR, 1, BC))])
    assert torch_said.check(facts) == []


def test_messages_that_disagree_on_a_rank_name_no_one() -> None:
    """Rank 0 says rank 1 broadcasts, rank 2 says rank 1 all_gathers: not one event."""
    failures = [said(0, SAYS[0]), said(2, mismatch(2, AR, 1, "ALLGATHER"))]
    assert torch_said.check(job().facts(failures=failures)) == []


def test_the_same_message_twice_counts_once() -> None:
    """A log and its --tee copy: the same failure read twice."""
    facts = job().facts(failures=[said(r, SAYS[r], line) for r in range(4) for line in (1, 2)])
    (f,) = torch_said.check(facts)
    assert f.culprit_ranks == (1,)
    assert isinstance(f.detail, SaidMismatch)
    assert [m.rank for m in f.detail.messages] == [0, 1, 2, 3]


GLOO_SIZE = (
    "terminate called after throwing an instance of 'gloo::EnforceNotMet' what():  [enforce "
    "fail at pair.cc:456] op.preamble.length <= op.nbytes. 128 vs 32. Received data size "
    "doesn't match expected size. Is there a distributed collective mismatch in your code?"
)


def test_glooss_size_check_is_a_desync_nobody_is_named_for() -> None:
    facts = job().facts(failures=[said(3, GLOO_SIZE)])
    (f,) = torch_said.check(facts)
    assert (f.kind, f.severity, f.culprit_ranks, f.waiting_ranks) == (
        FindingKind.SIZE_MISMATCH,
        Severity.WARNING,
        (),
        (3,),
    )
    assert isinstance(f.detail, GlooSizeHint)
    assert (f.detail.received, f.detail.expected) == (128, 32)
    assert _decide(facts) == (Verdict.CANNOT_TELL, ())


def test_glooss_size_check_gives_way_to_entries_that_show_who() -> None:
    """The entries show rank 2 passing other sizes: the desync rule names it, no hint."""
    j = job()
    j.enter("all_reduce", 3, ranks=(0, 1, 3))
    j.enter("all_reduce", 3, ranks=(2,), sizes=(16,))
    facts = j.facts(failures=[said(3, GLOO_SIZE)])
    assert torch_said.check(facts) == []
    assert [f.culprit_ranks for f in desync_check(facts)] == [(2,)]


def test_the_nccl_watchdog_names_no_culprit() -> None:
    """Every rank's watchdog timed out waiting in broadcast #7: waiters, nobody named."""
    text = (
        "[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
        "OpType=BROADCAST, NumelIn=64, NumelOut=64, Timeout(ms)=600000) ran for 600012 "
        "milliseconds before timing out."
    )
    facts = job().facts(failures=[said(r, text.format(r=r)) for r in range(4)])
    assert torch_said.check(facts) == [] and named.check(facts) == []
    assert all(f.op == "broadcast" and f.seq == 7 for f in facts.evidence.failures)


# ---- monitoredBarrier's numbering (the named rule) -----------------------------------------


def test_a_barrier_of_the_default_group_names_the_jobs_rank() -> None:
    text = "RuntimeError: [Rank 0]: Ranks 2 failed to pass monitoredBarrier in 6000 ms"
    (f,) = named.check(job().facts(failures=[said(0, text)]))
    assert (f.culprit_ranks, f.waiting_ranks) == ((2,), (0,))


def test_a_subgroups_barrier_names_the_jobs_rank_its_groups_say() -> None:
    """monitored_barrier(group=[1, 2, 3]) raised on the job's rank 1 (its rank 0): "Rank 1"
    is the job's rank 2, never rank 1 itself."""
    j = job()
    j.group("1", (1, 2, 3), desc="workers")
    j.done("all_reduce", range(1, 3), group="1")
    text = "RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 4000 ms"
    (f,) = named.check(j.facts(failures=[said(1, text)]))
    assert (f.culprit_ranks, f.waiting_ranks) == ((2,), (1,))
    assert isinstance(f.detail, NamedByError) and f.detail.named == (2,)


def test_a_subgroups_barrier_no_dump_shows_names_no_one() -> None:
    text = "RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 4000 ms"
    assert named.check(job().facts(failures=[said(1, text)])) == []
