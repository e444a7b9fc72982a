"""What the user reads: the words of a report say what is true, once, without Python reprs."""

from __future__ import annotations

import re
from functools import cache

import pytest

from frtrace.model import Report
from frtrace.pipeline import analyze
from frtrace.report.text import render_text
from frtrace.report.wording import summary
from tests.conftest import GLOO


@cache
def _report(scenario: str) -> Report:
    return analyze(GLOO / scenario)


def test_dtypes_are_names_not_python_lists() -> None:
    """``dtypes=Float``, never ``dtypes=['Float']``."""
    text = render_text(_report("size_mismatch"))
    assert "dtypes=Float state=" in text
    assert "['" not in text and '["' not in text


SCENARIOS = sorted(p.name for p in GLOO.iterdir() if p.is_dir() and any(p.iterdir()))
_WAITERS = re.compile(r"(?<!more )\b(\d+) ranks? waits? on (?:it|them)")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_finding_counts_the_waiters_of_its_own_group(scenario: str) -> None:
    """A finding's "N ranks wait on it" counts members of its group, never the job's."""
    for f in _report(scenario).findings:
        if f.group is None:
            continue
        members = set(f.group.members)
        most = len(members - set(f.culprit_ranks))
        for n in _WAITERS.findall(summary(f)):
            assert int(n) <= most, (scenario, summary(f))


def test_a_two_member_group_has_one_waiter() -> None:
    """mesh_stall: rank 5 holds up pg 2 (4 ranks) and pg 4 (ranks 1,5); the job has 7 waiting."""
    report = _report("mesh_stall")
    lines = render_text(report).splitlines()
    assert lines[0] == "HANG: culprit rank 5; 7 ranks wait on it"  # the job
    assert "rank 5 never joined all_reduce #7 of pg 2; 3 ranks wait on it" in lines[1]
    assert "rank 5 never joined all_reduce #4 of pg 4; 1 rank waits on it" in lines[2]


def test_ranks_held_outside_a_deadlock_are_counted_in_the_job() -> None:
    """The ranks held up by a deadlock are anywhere in the job, and said so (one: 'waits')."""
    (deadlock,) = (f for f in _report("cyclic_deadlock").findings if f.code == "FR007")
    assert summary(deadlock).endswith("; 1 more rank of the job waits on them")
