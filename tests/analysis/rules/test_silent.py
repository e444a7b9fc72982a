"""The silent rule alone (``rules.silent``): every rank with a dump failed waiting and none
with a cause; the ranks without a dump, which said nothing, are suspected (low confidence)."""

from __future__ import annotations

from frtrace.analysis.rules import silent
from frtrace.detail import WaitedOnTheSilent
from frtrace.model import Confidence, FindingKind, Severity
from tests.analysis.facts_builder import Job, cause, naming, symptom


def _gloo_job() -> Job:
    """Gloo, rank 3 left no dump; ranks 0-2 finished #1-#4 (retired, as Gloo marks a failed
    op too): their entries say nothing of whom they waited on."""
    job = Job(world=4, backend="gloo", missing=[3])
    return job.done("all_reduce", range(1, 5), ranks=[0, 1, 2])


def test_every_rank_with_a_dump_failed_waiting_suspects_the_silent_one() -> None:
    (f,) = silent.check(_gloo_job().facts(failures=[symptom(r) for r in (0, 1, 2)]))
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.MISSING_DUMP,
        Severity.ERROR,
        Confidence.LOW,
    )
    assert (f.culprit_ranks, f.waiting_ranks) == ((3,), (0, 1, 2))
    assert isinstance(f.detail, WaitedOnTheSilent) and len(f.detail.symptoms) == 3


def test_nothing_when_any_evidence_names_or_a_rank_did_not_say_it_waited() -> None:
    """A cause (first_failure speaks), a message naming ranks (named speaks), a rank with a
    dump that never said it waited, the missing rank's own words: no suspicion from silence."""
    job = _gloo_job()
    waited = [symptom(r) for r in (0, 1, 2)]
    assert silent.check(job.facts(failures=[*waited, cause(1)])) == []
    assert silent.check(job.facts(failures=[*waited, naming(0, [3])])) == []
    assert silent.check(job.facts(failures=waited[:2])) == []
    assert silent.check(job.facts(failures=[*waited, symptom(3)])) == []
    assert silent.check(Job(world=4).facts(failures=waited)) == []  # nobody is missing
