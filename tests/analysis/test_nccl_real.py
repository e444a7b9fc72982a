"""Real NCCL dumps, written on a GPU (tests/fixtures/nccl_real/, by scripts/nccl_watch_check.py):
what CI's CPU-only machines cannot make, read the way every other dump is."""

from __future__ import annotations

from pathlib import Path

import frtrace
from frtrace.detail import StuckInCollective
from frtrace.model import FindingKind, Verdict
from frtrace.report.text import render_text

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_real"


def test_an_op_behind_a_busy_stream_is_stuck_before_the_gpu_started_it() -> None:
    """One rank's all_reduce #6 waited 20 s behind a kernel on its stream, NCCL's timing on:
    the dump has it ``scheduled`` (never ``started``) and ``pg_status.last_started`` 5. The
    verdict cannot name a rank; it says no GPU started the op and to look for the kernel
    before it (the stall watch's own report had said "healthy")."""
    dumps = frtrace.load_dumps(REAL / "stream_busy")
    assert (tuple(dumps.loaded_ranks), tuple(dumps.problems)) == ((0,), ())
    assert dumps.pg_status.to_pylist() == [
        {"rank": 0, "pg_id": 0, "last_enqueued": 6, "last_started": 5, "last_completed": 5}
    ]
    report = frtrace.analyze_dumps(dumps)
    assert report.verdict == Verdict.CANNOT_TELL
    (f,) = [f for f in report.findings if f.kind == FindingKind.STUCK_IN_COLLECTIVE]
    assert (f.culprit_ranks, f.waiting_ranks, f.seq, f.op) == ((), (0,), 6, "all_reduce")
    assert isinstance(f.detail, StuckInCollective) and f.detail.on_gpu == "not_started"
    text = render_text(report)
    assert "no member's GPU started it" in text
    assert "no GPU of rank 0 started the op" in text
