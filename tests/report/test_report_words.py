"""What the user reads: the words of a report say what is true, once, without Python reprs."""

from __future__ import annotations

import re
from functools import cache

import pytest

from frtrace.detail import NeverJoined, Waits
from frtrace.model import (
    Finding,
    FindingKind,
    GroupProgress,
    GroupRef,
    Report,
    Severity,
    Verdict,
)
from frtrace.pipeline import analyze
from frtrace.report.document import Table, build_document
from frtrace.report.nextsteps import next_steps
from frtrace.report.text import render_text
from frtrace.report.wording import summary
from tests.conftest import FIXTURES, GLOO


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


def _never_joined(culprit: int, group: GroupRef, progress: tuple[GroupProgress, ...]) -> Report:
    waiting = tuple(m for m in group.members if m != culprit)
    waits = Waits(
        culprits=(culprit,),
        waiting=waiting,
        blocked=len(waiting),
        last_seen=(),
        waiting_state="scheduled",
        call_site=None,
        failed=None,
        timed_out=(),
    )
    finding = Finding(
        kind=FindingKind.NEVER_JOINED,
        severity=Severity.ERROR,
        culprit_ranks=(culprit,),
        waiting_ranks=waiting,
        group=group,
        seq=5,
        op="all_reduce",
        detail=NeverJoined(waits=waits, basis="dumps"),
    )
    return Report(
        verdict=Verdict.HANG,
        culprit_ranks=(culprit,),
        findings=(finding,),
        stragglers=(),
        world_size=4,
        ranks_loaded=(0, 1, 2, 3),
        ranks_missing=(),
        ranks_unreadable=(),
        data_notes=(),
        groups=tuple(p.group for p in progress),
        wait_edges=(),
        progress=progress,
    )


_WORLD = GroupRef(name="0", desc="default_pg", members=(0, 1, 2, 3), inferred=False)
_PAIR = GroupRef(name="1", desc="pp", members=(2, 3), inferred=False)


def test_no_unfinished_op_is_claimed_of_a_rank_that_retired_every_op() -> None:
    """recorder_hang (one group; rank 2 retired every op, its stack says where it is): no
    "unfinished op of another group"."""
    steps = next_steps(analyze(FIXTURES / "stacks" / "recorder_hang"))
    assert not [s for s in steps if "unfinished" in s], steps
    assert steps[0].startswith("open hung_job.py:27 (`load_batch`)")
    one_group = (GroupProgress(group=_WORLD, entered=(5, 5, 4, 5), finished=(4, 4, 4, 4)),)
    steps = next_steps(_never_joined(2, _WORLD, one_group))
    assert not [s for s in steps if "unfinished" in s], steps
    assert "py-spy dump --pid" in steps[0]  # where it is: its stack tells


def test_an_unfinished_op_of_another_group_is_named() -> None:
    """Rank 2 entered #7 of pp and never finished it: that is the step, naming the op."""
    progress = (
        GroupProgress(group=_WORLD, entered=(5, 5, 4, 5), finished=(4, 4, 4, 4)),
        GroupProgress(group=_PAIR, entered=(7, 6), finished=(6, 6)),
    )
    steps = next_steps(_never_joined(2, _WORLD, progress))
    assert steps[0] == (
        "rank 2 still has an unfinished op of another group (#7 of pp (pg 1)): `frtrace show` "
        "with --ranks 2 shows it, and who that op waits on"
    )
    assert not [s for s in steps if "py-spy" in s]


def test_an_unfinished_earlier_op_of_the_same_group_is_said_so() -> None:
    """Rank 2's only unfinished op is #4 of the group it never joined #5 of: not "another"."""
    one_group = (GroupProgress(group=_WORLD, entered=(5, 5, 4, 5), finished=(4, 4, 3, 4)),)
    steps = next_steps(_never_joined(2, _WORLD, one_group))
    assert not [s for s in steps if "another group" in s], steps
    assert steps[0].startswith("rank 2 did not finish an earlier op of default_pg (pg 0)")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_culprit_table_has_two_identical_columns(scenario: str) -> None:
    """The majority's column and a culprit's never say the same thing in every row (mesh_stall's
    pg 4: the op rank 1 waits in, #4, and rank 5's newest entry, #3, were alike but for that)."""
    for block in build_document(_report(scenario)):
        if not isinstance(block, Table) or block.headers[:1] != ("",):
            continue
        columns = list(zip(*block.rows, strict=True))[1:]
        assert len(set(columns)) == len(columns), (scenario, block)
