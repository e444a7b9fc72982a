"""The first-failure rule alone (``rules.first_failure``): which rank failed first with a
cause of its own; causes within TOGETHER_NS (1 s) of the earliest are first too."""

from __future__ import annotations

import pytest

from frtrace.analysis.rules import first_failure
from frtrace.detail import FirstFailure
from frtrace.evidence.model import Failure
from frtrace.model import Confidence, Finding, FindingKind, Severity
from tests.analysis.facts_builder import Job, cause, naming, symptom


def _check(*failures: Failure, world: int = 4) -> list[Finding]:
    return first_failure.check(Job(world=world).facts(failures=failures))


def test_the_first_cause_is_the_culprit_and_later_symptoms_its_victims() -> None:
    """Rank 2 raised at 10 s, ranks 0 and 1 timed out after: rank 2 named with high
    confidence, 0 and 1 its victims."""
    (f,) = _check(cause(2, at_s=10.0), symptom(0, at_s=11.0), symptom(1, at_s=12.0))
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.FIRST_FAILURE,
        Severity.ERROR,
        Confidence.HIGH,
    )
    assert (f.culprit_ranks, f.waiting_ranks) == ((2,), (0, 1))
    assert isinstance(f.detail, FirstFailure)
    assert f.detail.sure and f.detail.victims == (0, 1) and f.detail.later_causes == ()


TOGETHER_S = first_failure.TOGETHER_NS / 1e9


@pytest.mark.parametrize(
    ("later_s", "together"),
    [(TOGETHER_S - 0.1, True), (TOGETHER_S, True), (TOGETHER_S + 0.1, False)],
)
def test_causes_within_a_second_of_the_first_are_first_too(later_s: float, together: bool) -> None:
    """Rank 1's cause comes ``later_s`` after rank 2's: up to TOGETHER_NS (1 s, included)
    both are first; past it, rank 1 is a later cause, not a culprit."""
    (f,) = _check(cause(2, at_s=10.0), cause(1, at_s=10.0 + later_s))
    assert isinstance(f.detail, FirstFailure)
    if together:
        assert f.culprit_ranks == (1, 2) and f.detail.later_causes == ()
    else:
        assert f.culprit_ranks == (2,) and f.detail.later_causes == (1,)
    assert f.confidence == Confidence.HIGH


def test_a_symptom_before_the_first_cause_is_not_its_victim() -> None:
    """Rank 0 timed out at 5 s, before rank 2's cause at 10 s: not a victim of it."""
    (f,) = _check(symptom(0, at_s=5.0), cause(2, at_s=10.0), symptom(1, at_s=11.0))
    assert f.waiting_ranks == (1,)


def test_causes_without_times_are_all_named_with_medium_confidence() -> None:
    """No cause says when: every rank with one is named, medium confidence, not sure."""
    (f,) = _check(cause(1), cause(3))
    assert f.culprit_ranks == (1, 3) and f.confidence == Confidence.MEDIUM
    assert isinstance(f.detail, FirstFailure) and not f.detail.sure


def test_an_untimed_cause_beside_a_timed_one_lowers_the_confidence() -> None:
    """Rank 2's cause has a time, rank 3's none: rank 2 named, rank 3 listed as untimed,
    medium confidence (rank 3 might have failed first)."""
    (f,) = _check(cause(2, at_s=10.0), cause(3))
    assert f.culprit_ranks == (2,) and f.confidence == Confidence.MEDIUM
    assert isinstance(f.detail, FirstFailure) and f.detail.untimed_others == (3,)


def test_every_rank_with_a_cause_singles_none_out() -> None:
    """All four ranks failed on their own: nothing singles one out, no finding."""
    assert _check(*(cause(r, at_s=10.0 + r) for r in range(4))) == []


def test_all_but_one_rank_with_a_cause_still_names_the_first() -> None:
    """Three of four ranks failed on their own: the first of them is named."""
    (f,) = _check(*(cause(r, at_s=10.0 + 2 * r) for r in range(3)))
    assert f.culprit_ranks == (0,)


def test_symptoms_alone_give_nothing() -> None:
    """Only timeouts and a message naming a rank: no cause, nothing here."""
    assert _check(symptom(0, at_s=1.0), symptom(1, at_s=2.0), naming(0, [3])) == []


def test_a_one_rank_job_with_a_cause_names_it() -> None:
    """A world of one that raised: its one rank is named (the all-failed rule needs two)."""
    (f,) = _check(cause(0, at_s=1.0), world=1)
    assert f.culprit_ranks == (0,)
