"""Ties that are not ties (issue 10): a two-member group whose members called different ops."""

from __future__ import annotations

from pathlib import Path

from frtrace.model import Verdict
from frtrace.pipeline import analyze
from tests.conftest import make_dump, make_entry, write_pickle


def test_different_ops_in_a_two_member_group_name_both(tmp_path: Path) -> None:
    """Rank 0's all_gather has sizes that fit an all_gather of 2; rank 1's all_reduce has
    sizes that fit an all_reduce: no size rule can pick a side, so both are named."""
    first = make_entry(record_id=0, collective_seq_id=1, op_id=1)
    gather = make_entry(
        record_id=1,
        collective_seq_id=2,
        op_id=2,
        profiling_name="nccl:all_gather",
        input_sizes=[[4]],
        output_sizes=[[8]],
        state="scheduled",
        time_discovered_completed_ns=None,
        retired=False,
    )
    reduce = make_entry(
        record_id=1,
        collective_seq_id=2,
        op_id=2,
        state="scheduled",
        time_discovered_completed_ns=None,
        retired=False,
    )
    write_pickle(tmp_path / "nccl_trace_rank_0", make_dump([first, gather]))
    write_pickle(tmp_path / "nccl_trace_rank_1", make_dump([first, reduce]))
    report = analyze(tmp_path)
    assert report.verdict == Verdict.DESYNC
    assert report.culprit_ranks == (0, 1)
