"""A rank that retried a failing step to the end of its log (frtrace.evidence.retries), read
from the log as parse_log reads it: a cause only when the retries are the last of its own."""

from __future__ import annotations

import pytest

from frtrace.evidence.logs import parse_log
from frtrace.evidence.model import FailureKind, Role

RETRY = "WARNING fetch s3://bucket/shard-3 failed: connection refused; retrying ({n})"
STOPPED = [
    "W1127 03:59:15.345000 10592 api.py:753] Received 15 death signal, shutting down workers",
    "Traceback (most recent call last):",
    '  File "run.py", line 10, in <module>',
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 1 got signal: 15",
]


def _retrying(lines: list[str]) -> list[tuple[int | None, str]]:
    found = parse_log("\n".join(lines), "w.log", rank=2, year=2026)
    return [(f.rank, f.source) for f in found if f.kind == FailureKind.RETRYING]


def test_retries_to_the_end_are_the_ranks_cause() -> None:
    lines = ["step 2 done", *(RETRY.format(n=n) for n in range(1, 6)), *STOPPED]
    found = parse_log("\n".join(lines), "w.log", rank=2, year=2026)
    (f,) = [f for f in found if f.kind == FailureKind.RETRYING]
    assert (f.rank, f.role, f.source) == (2, Role.CAUSE, "w.log:2")
    assert "retried 5 times, to the end of its log" in f.message


@pytest.mark.parametrize(
    "lines",
    [
        [RETRY.format(n=1), RETRY.format(n=2), "step 3 done"] * 3,  # each time it went on
        [RETRY.format(n=1), RETRY.format(n=2), *STOPPED],  # two: a hiccup
        ["retry policy: 5 attempts, backoff 2 s"] * 6,  # no failure said
    ],
    ids=["went-on", "two-retries", "not-a-failure"],
)
def test_retries_that_end_or_say_no_failure_are_nothing(lines: list[str]) -> None:
    assert _retrying(lines) == []


def test_each_rank_of_a_tee_log_is_its_own() -> None:
    """torchrun --tee: rank 1 retried to the end, rank 0 got past its retries."""
    lines = [
        *(f"[default0]:{RETRY.format(n=n)}" for n in range(3)),
        "[default0]:step 4 done",
        *(f"[default1]:{RETRY.format(n=n)}" for n in range(4)),
    ]
    found = parse_log("\n".join(lines), "tee.log", rank=None, year=2026)
    assert [f.rank for f in found if f.kind == FailureKind.RETRYING] == [1]
