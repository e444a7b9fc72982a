"""The desync rule alone (``rules.desync``): members that called different things at one
(group, seq), a rank that skipped or added collectives."""

from __future__ import annotations

import pytest

from frtrace.analysis.rules import desync
from frtrace.detail import Mismatch
from frtrace.model import Confidence, FindingKind, Severity
from tests.analysis.facts_builder import Job

MAX_SHIFT = desync.MAX_SHIFT  # how many skipped or added collectives a shifted rank is searched for


def _one_rank_differs(op: str, sizes: tuple[int, ...], dtype: str) -> Job:
    job = Job(world=4).done("all_reduce", range(1, 7))
    job.enter("all_reduce", 7, ranks=(0, 1, 3))
    return job.enter(op, 7, ranks=(2,), sizes=sizes, dtype=dtype)


def test_agreeing_members_give_nothing() -> None:
    """Every member called the same op with the same sizes and dtypes: no finding."""
    job = Job(world=4).done("all_reduce", range(1, 7)).enter("all_reduce", 7)
    assert desync.check(job.facts()) == []


@pytest.mark.parametrize(
    ("different", "kind", "differs_in"),
    [
        (("broadcast", (4,), "Float"), FindingKind.OP_MISMATCH, "op"),
        (("all_reduce", (8,), "Float"), FindingKind.SIZE_MISMATCH, "sizes"),
        (("all_reduce", (4,), "Half"), FindingKind.DTYPE_MISMATCH, "dtypes"),
    ],
    ids=["op", "sizes", "dtypes"],
)
def test_the_minority_is_named_by_what_differs(
    different: tuple[str, tuple[int, ...], str], kind: FindingKind, differs_in: str
) -> None:
    """Rank 2 alone called #7 differently: it is the culprit, the three others wait, and the
    finding says what differs (op before sizes before dtypes)."""
    (f,) = desync.check(_one_rank_differs(*different).facts())
    assert (f.kind, f.severity, f.confidence) == (kind, Severity.ERROR, Confidence.HIGH)
    assert (f.culprit_ranks, f.waiting_ranks, f.seq) == ((2,), (0, 1, 3), 7)
    assert isinstance(f.detail, Mismatch)
    assert f.detail.differs_in == differs_in and f.detail.basis == "majority"
    assert f.detail.recorded == 4 and f.detail.group_size == 4


def test_a_two_member_tie_names_both_with_low_confidence() -> None:
    """Two members disagree with nothing to break the tie: both named, no majority."""
    job = Job(world=2).enter("all_reduce", 1, ranks=(0,)).enter("broadcast", 1, ranks=(1,))
    (f,) = desync.check(job.facts())
    assert f.culprit_ranks == (0, 1) and f.waiting_ranks == ()
    assert f.confidence == Confidence.LOW
    assert isinstance(f.detail, Mismatch) and f.detail.basis == "no_majority"


def test_a_tie_that_members_without_a_dump_would_settle_names_no_one() -> None:
    """Ranks 2 and 3 of a 4-rank group disagree at #7, ranks 0 and 1 left no dump: their
    calls would make the majority, so the rule cannot tell which of the two is wrong. It names
    no one (a warning), keeps both as candidates and says whose dumps would settle it."""
    job = Job(world=4, missing=(0, 1)).done("all_reduce", range(1, 7), ranks=(2, 3))
    job.enter("all_reduce", 7, ranks=(2,), sizes=(8,)).enter("all_reduce", 7, ranks=(3,))
    (f,) = desync.check(job.facts())
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.SIZE_MISMATCH,
        Severity.WARNING,
        Confidence.LOW,
    )
    assert f.culprit_ranks == () and f.waiting_ranks == ()
    assert isinstance(f.detail, Mismatch) and f.detail.basis == "undecided"
    assert f.detail.culprits == (2, 3) and f.detail.unseen == (0, 1)
    assert {s.rank for s in f.detail.sides} == {2, 3}


def test_a_tie_with_every_member_recorded_still_names_both() -> None:
    """A 4-rank group split 2 against 2 with every member's dump: no member is unseen, so the
    tie is the dumps' last word: both sides named, low confidence (as a two-member tie)."""
    job = Job(world=4).done("all_reduce", range(1, 7))
    job.enter("all_reduce", 7, ranks=(0, 1), sizes=(8,)).enter("all_reduce", 7, ranks=(2, 3))
    (f,) = desync.check(job.facts())
    assert f.culprit_ranks == (0, 1, 2, 3) and f.severity == Severity.ERROR
    assert isinstance(f.detail, Mismatch) and f.detail.basis == "no_majority"


def test_a_sibling_group_breaks_a_two_member_tie() -> None:
    """Group {0, 1} disagrees at #1; its sibling {2, 3} ran all_reduce there: rank 1, which
    called broadcast, is the culprit (medium confidence, decided by the siblings)."""
    job = Job(world=4)
    job.group("1", (0, 1), desc="mesh_tp")
    job.group("2", (2, 3), desc="mesh_tp")
    job.enter("all_reduce", 1, group="2", state="completed")
    job.enter("all_reduce", 1, group="1", ranks=(0,))
    job.enter("broadcast", 1, group="1", ranks=(1,))
    (f,) = desync.check(job.facts())
    assert f.culprit_ranks == (1,) and f.waiting_ranks == (0,)
    assert f.confidence == Confidence.MEDIUM
    assert isinstance(f.detail, Mismatch)
    assert f.detail.basis == "siblings" and f.detail.backers == 2


def _skipped(skip: int, after: int) -> Job:
    """Ranks 0, 1, 3 ran all_reduce #1.. with k elements at #k; rank 2 skipped ``skip`` of
    them after #1 and ran ``after`` more, each matching the others' ``skip`` later."""
    job = Job(world=4)
    total = 1 + skip + after
    for seq in range(1, total + 1):
        job.enter("all_reduce", seq, ranks=(0, 1, 3), sizes=(seq,), state="completed")
    job.enter("all_reduce", 1, ranks=(2,), sizes=(1,), state="completed")
    for i in range(after):
        job.enter("all_reduce", 2 + i, ranks=(2,), sizes=(2 + skip + i,), state="completed")
    return job


@pytest.mark.parametrize("skip", [1, MAX_SHIFT])
def test_a_skipped_collective_is_one_sequence_shift(skip: int) -> None:
    """Rank 2 skipped up to MAX_SHIFT (3) collectives and its next two ops line up with the
    others' shifted by that many: one sequence shift at the first disagreement."""
    (f,) = desync.check(_skipped(skip, after=2).facts())
    assert f.kind == FindingKind.SEQUENCE_SHIFT and f.culprit_ranks == (2,) and f.seq == 2
    assert isinstance(f.detail, Mismatch) and f.detail.shift == skip


def test_a_shift_past_max_shift_is_a_plain_mismatch() -> None:
    """Skipped 4 (> MAX_SHIFT 3) collectives: not searched that far, a size mismatch."""
    (f,) = desync.check(_skipped(MAX_SHIFT + 1, after=2).facts())
    assert f.kind == FindingKind.SIZE_MISMATCH and f.culprit_ranks == (2,)
    assert isinstance(f.detail, Mismatch) and f.detail.shift is None


def test_one_op_lined_up_is_not_enough_for_a_shift() -> None:
    """Only one op after the skip lines up (MIN_SHIFT_RUN is 2): a plain mismatch."""
    (f,) = desync.check(_skipped(1, after=1).facts())
    assert f.kind == FindingKind.SIZE_MISMATCH
    assert isinstance(f.detail, Mismatch) and f.detail.shift is None
