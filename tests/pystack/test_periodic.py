"""torch's debug server's periodic dumps (``stacks_<time>.txt``): every rank's sample in one
file, with its host; several files a time series (which ranks moved)."""

from __future__ import annotations

import time
from pathlib import Path

from frtrace.analysis.series import stack_series
from frtrace.detail.series import RankMotion, StackSeries
from frtrace.pystack.discover import load_stacks
from frtrace.pystack.periodic import is_periodic_name, parse_periodic, periodic_time_ns
from frtrace.report.stacks import series_lines

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "debug_server"
FIRST, SECOND = FIXTURE / "stacks_20261126_003738.txt", FIXTURE / "stacks_20261126_003741.txt"


def test_one_file_holds_every_rank_with_its_host_and_moment() -> None:
    samples = parse_periodic(FIRST.read_bytes(), FIRST)
    assert [(s.rank, s.host, s.source) for s in samples] == [
        (0, "vm", "dump_traceback"),
        (1, "vm", "dump_traceback"),
    ]
    at = time.mktime(time.strptime("20261126_003738", "%Y%m%d_%H%M%S"))
    assert {s.taken_at_ns for s in samples} == {int(at) * 1_000_000_000}
    main = {s.rank: s.main_thread for s in samples}
    assert main[1] is not None and main[1].frames[0].function == "<module>"
    assert main[0] is not None and main[0].frames[0].function == "all_reduce"


def test_the_time_in_a_name_is_never_a_rank() -> None:
    """``stacks_20261126_003741.txt`` ends in digits: read as a rank's file it was rank
    3741 with both ranks' threads as one process."""
    stacks = load_stacks(FIXTURE)
    assert stacks.ranks == (0, 1) and not stacks.problems and not stacks.unranked
    assert {s.path.rsplit("/", 1)[-1] for s in stacks.samples} == {FIRST.name, SECOND.name}
    assert stacks.by_rank[0].path.endswith(SECOND.name)  # the latest moment is read
    assert stacks.taken_at_ns(0) is None  # a stack snapshot's time is not a dump's


def test_ranks_that_did_not_answer_have_no_sample(tmp_path: Path) -> None:
    body = FIRST.read_text().split("=== Rank 1:")[0]
    text = (
        "PARTIAL DATA: 1/2 workers responded\n"
        "  Rank 1: Timeout: HTTPConnectionPool(host='vm', port=43013): Read timed out.\n\n"
        + body
        + "=== Rank 1: http://vm:43013/handler/dump_traceback? ===\nError: 408"
    )
    path = tmp_path / "stacks_20261126_010000.txt"
    assert [s.rank for s in parse_periodic(text.encode(), path)] == [0]


def test_names() -> None:
    assert is_periodic_name("stacks_20261126_003741.txt")
    assert is_periodic_name("/x/pyspy_dump_20261126_003741.txt")
    assert not is_periodic_name("stacks_rank_3.json") and not is_periodic_name("stacks_3.txt")
    assert periodic_time_ns("fr_trace_20261126_003741.txt") is None


def test_two_snapshots_of_a_hung_job_show_no_rank_moved() -> None:
    samples = tuple(s for f in (FIRST, SECOND) for s in parse_periodic(f.read_bytes(), f))
    series = stack_series(samples)
    assert series is not None and series.moments == 2 and series.span_s == 3.0
    assert series.moved == () and series.still == (0, 1)
    said, lines = series_lines(series)
    assert "no rank's stack moved: stuck, not slow" in said
    assert lines == [
        "rank 0: the same for 3 s, at <module> (job.py:11), in all_reduce "
        "(torch/distributed/distributed_c10d.py:3252)",
        "rank 1: the same for 3 s, at <module> (job.py:10)",
    ]
    assert stack_series(samples[:2]) is None  # one moment: no series


def test_some_moved_some_did_not() -> None:
    def motion(rank: int, moved: bool) -> RankMotion:
        return RankMotion(
            rank=rank, samples=3, moved=moved, place="f (t.py:1)", still_s=0 if moved else 4.0
        )

    series = StackSeries(
        moments=3,
        first_ns=0,
        last_ns=4_000_000_000,
        files=("stacks_20261126_000000.txt",),
        ranks=(motion(0, True), motion(1, True), motion(2, False)),
    )
    said, lines = series_lines(series)
    assert "ranks 0-1 moved (progressing), rank 2 did not" in said
    assert lines == [
        "rank 2: the same for 4 s, at f (t.py:1)",
        "ranks 0-1: moved between snapshots",
    ]
