"""The nothing-recorded rule alone (``rules.nothing_recorded``): dumps with empty buffers."""

from __future__ import annotations

from frtrace.analysis.rules import nothing_recorded
from frtrace.detail import NothingRecorded
from frtrace.model import Confidence, FindingKind, Severity
from tests.analysis.facts_builder import Job


def test_every_buffer_empty_is_a_warning() -> None:
    """Four ranks dumped, none recorded an op: a low-confidence warning naming no one."""
    (f,) = nothing_recorded.check(Job(world=4).facts())
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.NOTHING_RECORDED,
        Severity.WARNING,
        Confidence.LOW,
    )
    assert f.culprit_ranks == () and f.waiting_ranks == ()
    assert isinstance(f.detail, NothingRecorded) and f.detail.loaded == (0, 1, 2, 3)


def test_the_loaded_ranks_are_those_with_a_dump() -> None:
    """Rank 2 left no dump: the finding lists the three that did."""
    (f,) = nothing_recorded.check(Job(world=4, missing=(2,)).facts())
    assert isinstance(f.detail, NothingRecorded) and f.detail.loaded == (0, 1, 3)


def test_one_entry_anywhere_is_not_nothing() -> None:
    """A single op recorded by a single rank: the entries are not mute."""
    job = Job(world=4).enter("all_reduce", 1, ranks=(3,))
    assert nothing_recorded.check(job.facts()) == []


def test_a_one_rank_job_is_not_a_finding() -> None:
    """A world of one has no collective to wait in: an empty buffer says nothing."""
    assert nothing_recorded.check(Job(world=1).facts()) == []
