"""The unrecorded rule alone (``rules.unrecorded``): Gloo's send/recv, counted by ``op_id``
but never written, make a rank blocked in one invisible in the entries."""

from __future__ import annotations

from frtrace.analysis.rules import unrecorded
from frtrace.detail import UnrecordedOps
from frtrace.model import Confidence, FindingKind, Severity
from tests.analysis.facts_builder import Job


def _pipeline(backend: str, hidden: int) -> Job:
    """Ranks 1 and 2 ran ``hidden`` send/recv ops on the default group before their #4."""
    job = Job(world=4, backend="gloo" if backend == "gloo" else "nccl")
    job.done("all_reduce", range(1, 4))
    job.enter("all_reduce", 4, ranks=(1, 2), unrecorded=hidden, state="completed")
    return job.enter("all_reduce", 4, ranks=(0, 3), state="completed")


def test_gloo_ops_counted_but_not_written_are_a_warning() -> None:
    """Gloo, op_id 3 ahead of the collective seq on ranks 1 and 2: one warning naming them
    (no culprit), 3 ops each on the default group."""
    (f,) = unrecorded.check(_pipeline("gloo", 3).facts())
    assert (f.kind, f.severity, f.confidence) == (
        FindingKind.UNRECORDED_OPS,
        Severity.WARNING,
        Confidence.MEDIUM,
    )
    assert f.culprit_ranks == ()
    assert isinstance(f.detail, UnrecordedOps)
    assert (f.detail.ranks, f.detail.total, f.detail.more) == ((1, 2), 6, 0)
    assert [(c.rank, c.group.name, c.ops) for c in f.detail.counts] == [(1, "0", 3), (2, "0", 3)]


def test_op_id_equal_to_the_seq_is_nothing_unrecorded() -> None:
    """Gloo without p2p: op_id and the collective seq go up together, no finding."""
    assert unrecorded.check(_pipeline("gloo", 0).facts()) == []


def test_nccl_records_its_p2p_ops() -> None:
    """NCCL writes every send/recv: op_id ahead of the seq says nothing unrecorded."""
    assert unrecorded.check(_pipeline("nccl", 3).facts()) == []


def test_only_the_first_eight_pairs_are_spelled_out() -> None:
    """Ten (rank, group) pairs ran unrecorded ops: eight listed, two counted in ``more``."""
    job = Job(world=10, backend="gloo")
    job.done("all_reduce", range(1, 3)).enter("all_reduce", 3, unrecorded=1, state="completed")
    (f,) = unrecorded.check(job.facts())
    assert isinstance(f.detail, UnrecordedOps)
    assert (len(f.detail.counts), f.detail.more, f.detail.total) == (8, 2, 10)
