"""The silent rule alone (``rules.silent``): every rank with a dump failed waiting and none
with a cause; the ranks without a dump, which said nothing, are suspected (low confidence)."""

from __future__ import annotations

from dataclasses import replace

from frtrace.analysis.rules import silent
from frtrace.detail import WaitedOnTheSilent
from frtrace.evidence.model import FailureKind
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


def test_a_missing_rank_the_launcher_stopped_is_still_silent() -> None:
    """torchrun's summary 'exitcode: -15 (SIGTERM)' for the missing rank is what the agent did
    to it once another rank failed, not a word of its own (the restart fixture's attempt 1:
    rank 3 hung and was stopped); a missing rank that exited by itself (exit code 1) spoke."""
    waited = [symptom(r) for r in (0, 1, 2)]
    stopped = replace(symptom(3), kind=FailureKind.TERMINATED, message="exit code -15")
    (f,) = silent.check(_gloo_job().facts(failures=[*waited, stopped]))
    assert f.culprit_ranks == (3,)
    exited = replace(stopped, kind=FailureKind.EXITED, message="exit code 1")
    assert silent.check(_gloo_job().facts(failures=[*waited, exited])) == []


def test_a_missing_rank_whose_log_says_it_waited_waited_with_the_others() -> None:
    """Ranks 1 and 3 left no dump of this attempt (a restart overwrote them, the restart
    fixture's attempt 0); rank 1's log says it timed out waiting, then the launcher saw it exit
    (its own timeout's exit, no word of its own): rank 3 alone is suspected, rank 1 waited."""
    job = Job(world=4, backend="gloo", missing=[1, 3]).done("all_reduce", range(1, 5), ranks=[0, 2])
    exited = replace(symptom(1), kind=FailureKind.EXITED, message="exit code 1")
    failures = [symptom(0), symptom(1), exited, symptom(2)]
    (f,) = silent.check(job.facts(failures=failures))
    assert (f.culprit_ranks, f.waiting_ranks) == ((3,), (0, 1, 2))
    assert isinstance(f.detail, WaitedOnTheSilent) and f.detail.lost == (1,)
    # every missing rank said it waited: nobody silent is left to suspect
    assert silent.check(job.facts(failures=[*failures, symptom(3)])) == []
    # a rank with a dump that never said it waited: still nothing
    assert silent.check(job.facts(failures=[symptom(1), symptom(2)])) == []
