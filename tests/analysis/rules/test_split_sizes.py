"""The split-sizes rule alone (``rules.split_sizes``): all_to_all members whose recorded
per-peer split sizes disagree (FR 2.11)."""

from __future__ import annotations

from frtrace.analysis.rules import split_sizes
from frtrace.detail import SplitMismatch
from frtrace.model import FindingKind
from tests.analysis.facts_builder import Job


def _all_to_all(sends_to_2: int) -> Job:
    job = Job(world=4).done("all_reduce", range(1, 3))
    for rank in range(4):
        sends = [4, 4, 4, 4]
        if rank == 1:
            sends[2] = sends_to_2
        job.enter(
            "all_to_all_single",
            3,
            ranks=(rank,),
            at_s=1.0,
            sizes=(sum(sends),),
            input_split_sizes=sends,
            output_split_sizes=[4, 4, 4, 4],
        )
    return job


def test_all_to_all_splits_that_disagree_name_the_pair() -> None:
    """Rank 1 sends 8 elements to rank 2, which expects 4 from it: a size mismatch naming
    rank 1 (one pair: both of its ranks)."""
    found = split_sizes.check(_all_to_all(8).facts())
    (f,) = [f for f in found if isinstance(f.detail, SplitMismatch)]
    assert f.kind == FindingKind.SIZE_MISMATCH and 1 in f.culprit_ranks
    assert isinstance(f.detail, SplitMismatch) and f.detail.total == 1
    (pair,) = f.detail.pairs
    assert (pair.sender, pair.receiver, pair.sends, pair.expects) == (1, 2, 8, 4)


def test_all_to_all_splits_that_agree_give_nothing() -> None:
    """Every member sends each peer what it expects: uneven sizes are not a mismatch."""
    assert split_sizes.check(_all_to_all(4).facts()) == []
