"""The named rule alone (``rules.named``): ranks an error message names as the ones that
failed (monitored_barrier's "Ranks 3 failed to pass monitoredBarrier")."""

from __future__ import annotations

from frtrace.analysis.rules import named
from frtrace.detail import NamedByError
from frtrace.model import Confidence, FindingKind, Severity
from tests.analysis.facts_builder import Job, cause, naming, symptom


def test_a_message_naming_a_rank_makes_it_the_culprit() -> None:
    """Rank 0 says rank 3 failed to pass the barrier: rank 3 is named, rank 0 reported it."""
    facts = Job(world=4).facts(failures=[naming(0, [3])])
    (f,) = named.check(facts)
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.NAMED_BY_ERROR,
        Severity.ERROR,
        Confidence.HIGH,
    )
    assert (f.culprit_ranks, f.waiting_ranks) == ((3,), (0,))
    assert isinstance(f.detail, NamedByError)
    assert (f.detail.named, f.detail.reporters) == ((3,), (0,))


def test_every_named_rank_from_every_message_is_named_once() -> None:
    """Ranks 0 and 1 name 3, rank 0 also names 2: culprits 2 and 3; a rank both named and
    reporting (3 names 2) is not among the reporters."""
    failures = [naming(0, [3]), naming(1, [3, 2]), naming(3, [2])]
    (f,) = named.check(Job(world=4).facts(failures=failures))
    assert f.culprit_ranks == (2, 3) and f.waiting_ranks == (0, 1)


def test_failures_that_name_no_rank_give_nothing() -> None:
    """Causes and timeouts that name no other rank: not this rule's."""
    facts = Job(world=4).facts(failures=[cause(1, at_s=1.0), symptom(0, at_s=2.0)])
    assert named.check(facts) == []
