"""The stack-outlier rule alone (``rules.stack_outlier``): the others wait in
torch.distributed calls while a few ranks (at most a quarter of those with a stack, at least
one) are in host code."""

from __future__ import annotations

import pytest

from frtrace.analysis.rules import stack_outlier
from frtrace.detail import StackOutlier
from frtrace.model import Confidence, FindingKind, Severity
from tests.analysis.facts_builder import Frames, Job, host, in_call


def _stacks(world: int, in_host: int) -> dict[int, Frames]:
    """The last ``in_host`` ranks in host code, the others in all_reduce."""
    return {r: host() if r >= world - in_host else in_call("all_reduce") for r in range(world)}


@pytest.mark.parametrize(
    ("world", "in_host", "found"),
    [(8, 2, True), (8, 3, False), (4, 1, True), (4, 2, False), (2, 1, True)],
)
def test_at_most_a_quarter_in_host_code(world: int, in_host: int, found: bool) -> None:
    """``in_host`` of ``world`` ranks with a stack are in host code: named while they are at
    most a quarter of them (at least one: 1 of 2 counts), else nothing."""
    findings = stack_outlier.check(Job(world=world).facts(stacks=_stacks(world, in_host)))
    if not found:
        assert findings == []
        return
    (f,) = findings
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.STACK_OUTLIER,
        Severity.ERROR,
        Confidence.MEDIUM,
    )
    host_ranks = tuple(range(world - in_host, world))
    assert f.culprit_ranks == host_ranks
    assert f.waiting_ranks == tuple(range(world - in_host))
    assert isinstance(f.detail, StackOutlier)
    assert [w.rank for w in f.detail.host] == list(host_ranks) == [w.rank for w in f.where]
    assert f.detail.waiting == world - in_host
    assert f.detail.waiting_in is not None and f.detail.waiting_in.startswith("all_reduce")
    assert {w.function for w in f.detail.host} == {"load_batch"}


def test_waiting_in_several_calls_names_none() -> None:
    """The waiting ranks are in all_reduce and barrier: ``waiting_in`` is None."""
    stacks = {0: in_call("all_reduce"), 1: in_call("barrier"), 2: in_call("all_reduce")}
    (f,) = stack_outlier.check(Job(world=4).facts(stacks={**stacks, 3: host()}))
    assert isinstance(f.detail, StackOutlier) and f.detail.waiting_in is None


def test_the_quarter_counts_ranks_with_a_stack_not_the_world() -> None:
    """8 ranks, 4 with a stack, 1 of them in host code: a quarter of 4, named."""
    stacks = {0: in_call(), 1: in_call(), 2: in_call(), 3: host()}
    (f,) = stack_outlier.check(Job(world=8).facts(stacks=stacks))
    assert f.culprit_ranks == (3,)


@pytest.mark.parametrize(
    "stacks",
    [{}, {0: host()}, {0: host(), 1: host()}, {0: in_call(), 1: in_call()}],
    ids=["none", "one-stack", "all-host", "all-waiting"],
)
def test_no_outlier_without_both_sides(stacks: dict[int, Frames]) -> None:
    """Fewer than two stacks, nobody waiting, or nobody in host code: nothing."""
    assert stack_outlier.check(Job(world=4).facts(stacks=stacks)) == []
