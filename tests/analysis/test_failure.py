"""A failed op is not a finished op; a missing dump does not shrink a group (issue 10).

Synthetic Gloo dumps (no states; ``retired`` on failure too), each built to show one rule,
next to the real fixtures in tests/fixtures/gloo_capture that exercise the same rules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from frtrace.model import FindingKind, Verdict
from frtrace.pipeline import analyze
from frtrace.report.wording import evidence, summary
from tests.conftest import make_dump, make_entry, write_pickle

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def _gloo(rank: int, seqs: list[tuple[int, bool, int]], **over: Any) -> dict[str, Any]:
    """A Gloo entry per (seq, retired, created offset in ms) on the default group."""
    return make_dump(
        [
            make_entry(
                record_id=i,
                collective_seq_id=seq,
                op_id=seq,
                profiling_name="gloo:all_reduce",
                state="scheduled",
                time_discovered_completed_ns=None,
                retired=retired,
                time_created_ns=T0 + at * MS,
                timeout_ms=4000,
                **over,
            )
            for i, (seq, retired, at) in enumerate(seqs)
        ],
        world=4,
        comm_lib_version="",
        pg_config={"": {"name": "", "desc": "", "ranks": "[0, 1, 2, 3]"}},
    )


def _write(tmp_path: Path, dumps: dict[int, dict[str, Any]]) -> Path:
    for rank, dump in dumps.items():
        write_pickle(tmp_path / f"rank_{rank}", dump)
    return tmp_path


def test_retired_op_a_member_never_reached_failed(tmp_path: Path) -> None:
    """Everyone else's #3 is retired (it timed out), rank 2's newest is #2: rank 2 never
    joined, and the others are waiting in #3 as if dumped while blocked."""
    done = [(1, True, 0), (2, True, 10)]
    report = analyze(
        _write(
            tmp_path,
            {r: _gloo(r, [*done, (3, True, 20)]) for r in (0, 1, 3)} | {2: _gloo(2, done)},
        )
    )
    assert report.verdict == Verdict.HANG and report.culprit_ranks == (2,)
    (finding,) = report.findings
    assert finding.kind == FindingKind.NEVER_JOINED
    assert any("dumped after all_reduce #3" in e for e in evidence(finding))


def test_a_member_that_joined_after_the_timeout_is_named(tmp_path: Path) -> None:
    """Every member's #3 is retired, but rank 1 created it 9 s after the others, whose 4 s
    timeout had expired: the op failed, and rank 1 was held up before it."""
    done = [(1, True, 0), (2, True, 10)]
    report = analyze(
        _write(
            tmp_path,
            {r: _gloo(r, [*done, (3, True, 20 + r)]) for r in (0, 2, 3)}
            | {1: _gloo(1, [*done, (3, True, 9_000)])},
        )
    )
    assert report.verdict == Verdict.HANG and report.culprit_ranks == (1,)
    assert "after its peers, past their 4.0 s timeout" in summary(report.findings[0])


def test_late_within_the_timeout_is_not_a_failure(tmp_path: Path) -> None:
    """A member 2 s late against a 4 s timeout: slow, not failed."""
    done = [(1, True, 0), (2, True, 10)]
    report = analyze(
        _write(
            tmp_path,
            {r: _gloo(r, [*done, (3, True, 20)]) for r in (0, 2, 3)}
            | {1: _gloo(1, [*done, (3, True, 2_000)])},
        )
    )
    assert report.culprit_ranks == ()
    assert report.verdict in (Verdict.HEALTHY, Verdict.STRAGGLERS)


def test_a_job_that_stopped_with_a_dump_missing_is_never_healthy(tmp_path: Path) -> None:
    """Ranks 0, 1, 3 all stopped in a retired #3; rank 2 has no dump: cannot tell (a death in
    #3 or a finished job that lost a dump), with rank 2 as the suspect."""
    ops = [(1, True, 0), (2, True, 10), (3, True, 20)]
    report = analyze(_write(tmp_path, {r: _gloo(r, ops) for r in (0, 1, 3)}))
    assert report.verdict == Verdict.CANNOT_TELL
    assert report.culprit_ranks == () and report.suspected_ranks == (2,)


def test_a_missing_member_does_not_vanish_from_a_group_only_it_shares(tmp_path: Path) -> None:
    """Rank 1 alone recorded an all_gather on group '1' (of 2 members, by its output) and is
    stuck in it; rank 3, the other member, has no dump: the group is {1, 3}, not {1}."""
    default = [(1, True, 0), (2, True, 10)]
    dumps = {r: _gloo(r, default) for r in (0, 2)}
    stray = make_entry(
        record_id=2,
        pg_id=1,
        process_group=("1", ""),
        collective_seq_id=1,
        op_id=1,
        profiling_name="gloo:all_gather",
        input_sizes=[[4]],
        output_sizes=[[2, 4]],
        state="scheduled",
        time_discovered_completed_ns=None,
        retired=False,
        time_created_ns=T0 + 30 * MS,
    )
    one = _gloo(1, default)
    one["entries"].append(stray)
    dumps[1] = one
    report = analyze(_write(tmp_path, dumps))
    group = next(g for g in report.groups if g.name == "1")
    assert group.members == (1, 3)
    assert report.suspected_ranks == (3,)
    assert report.verdict in (Verdict.HANG, Verdict.CANNOT_TELL)


def _sidecar(path: Path, rank: int, dumped_at_ns: int) -> None:
    """The recorder's stack sidecar, as frtrace.job.sidecar writes it: the dump time."""
    doc = {
        "format": "frtrace-stacks",
        "version": 1,
        "rank": rank,
        "pid": 1000 + rank,
        "host": "node-0",
        "dumped_at_ns": dumped_at_ns,
        "trigger": {"kind": "signal", "detail": "SIGUSR1"},
        "threads": [
            {
                "id": "0x1",
                "name": "MainThread",
                "is_main": True,
                "frames": [{"name": "train_step", "filename": "/job/train.py", "line": 42}],
            }
        ],
    }
    path.write_text(json.dumps(doc))


def _between_ops(tmp_path: Path, dumped_after_ms: int) -> Path:
    """0, 1, 3 entered all_reduce #3 (not retired); rank 2 finished #2 and has not entered #3.
    Every rank dumped ``dumped_after_ms`` after the newest entry of the job (ops 10 ms apart)."""
    done = [(1, True, 0), (2, True, 10)]
    dumps = {r: _gloo(r, [*done, (3, False, 20 + r)]) for r in (0, 1, 3)} | {2: _gloo(2, done)}
    _write(tmp_path, dumps)
    for r in range(4):
        _sidecar(tmp_path / f"stacks_rank_{r}.json", r, T0 + (23 + dumped_after_ms) * MS)
    return tmp_path


def test_a_snapshot_of_a_running_job_is_not_a_hang(tmp_path: Path) -> None:
    """The recorder's dump times show every rank dumped within ms of its newest op: rank 2 is
    between ops, the others have just entered #3. In flight, no culprit."""
    report = analyze(_between_ops(tmp_path, dumped_after_ms=5))
    assert report.verdict == Verdict.HEALTHY and report.culprit_ranks == ()
    assert any(f.kind == FindingKind.IN_FLIGHT for f in report.findings)


def test_the_same_picture_dumped_seconds_later_is_a_hang(tmp_path: Path) -> None:
    """The same entries, dumped 30 s after the newest op: rank 2 is stuck before #3."""
    report = analyze(_between_ops(tmp_path, dumped_after_ms=30_000))
    assert report.verdict == Verdict.HANG and report.culprit_ranks == (2,)


def test_without_a_dump_time_the_picture_is_read_as_stuck_and_says_so(tmp_path: Path) -> None:
    """No sidecar: the dumps do not say when they were written; read as taken while stuck,
    and the finding says what would settle it."""
    done = [(1, True, 0), (2, True, 10)]
    dumps = {r: _gloo(r, [*done, (3, False, 20 + r)]) for r in (0, 1, 3)} | {2: _gloo(2, done)}
    report = analyze(_write(tmp_path, dumps))
    assert report.verdict == Verdict.HANG and report.culprit_ranks == (2,)
    assert any("a second snapshot" in e for e in evidence(report.findings[0]))


def test_nccl_members_that_dumped_after_the_timeout_are_named(tmp_path: Path) -> None:
    """NCCL: the hung #2 is retired without completing on 0, 1, 3 (the watchdog gave up on
    it); rank 2 never entered it. Rank 2 is the culprit and the evidence says who dumped
    after the timeout."""
    first = make_entry(record_id=0, collective_seq_id=1, op_id=1)
    hung = make_entry(
        record_id=1,
        collective_seq_id=2,
        op_id=2,
        state="scheduled",
        time_discovered_completed_ns=None,
        retired=True,
    )
    for r in range(4):
        entries = [first] if r == 2 else [first, hung]
        write_pickle(tmp_path / f"nccl_trace_rank_{r}", make_dump(entries, world=4))
    report = analyze(tmp_path)
    assert report.verdict == Verdict.HANG and report.culprit_ranks == (2,)
    assert any(
        "ranks 0-1,3 dumped after all_reduce #2" in e and "timed out" in e
        for e in evidence(report.findings[0])
    )


def test_hook_recorders_retire_at_issue_so_retired_is_not_done(tmp_path: Path) -> None:
    """torch's hook-based recorders (``nccl2:``, ``c10d:``) retire an entry when it is issued
    and complete it when the backend says so. Every rank issued the first all_reduce and none
    completed it: a hang below the recorder (cannot tell who), not a finished op."""
    hung = make_entry(
        profiling_name="nccl2:all_reduce",
        state="scheduled",
        time_discovered_completed_ns=None,
        retired=True,
    )
    for r in range(4):
        write_pickle(tmp_path / f"rank_{r}", make_dump([hung], world=4))
    report = analyze(tmp_path)
    assert report.verdict == Verdict.CANNOT_TELL
    assert [f.kind for f in report.findings] == [FindingKind.STUCK_IN_COLLECTIVE]


def test_a_rank_without_a_dump_time_is_read_at_its_peers_instant(tmp_path: Path) -> None:
    """Only 0, 1, 3 wrote a dump time, all at one instant (one signal to every rank): rank 2
    was dumped then too. Its newest op is 3 ms older than that instant: between ops."""
    done = [(1, True, 0), (2, True, 10)]
    dumps = {r: _gloo(r, [*done, (3, False, 20 + r)]) for r in (0, 1, 3)} | {2: _gloo(2, done)}
    _write(tmp_path, dumps)
    for r in (0, 1, 3):
        _sidecar(tmp_path / f"stacks_rank_{r}.json", r, T0 + 28 * MS)
    report = analyze(tmp_path)
    assert report.verdict == Verdict.HEALTHY and report.culprit_ranks == ()


def test_dump_times_far_apart_say_nothing_about_the_others(tmp_path: Path) -> None:
    """Dump times 40 s apart were not one capture: rank 2 (no dump time) is read as stuck."""
    done = [(1, True, 0), (2, True, 10)]
    dumps = {r: _gloo(r, [*done, (3, False, 20 + r)]) for r in (0, 1, 3)} | {2: _gloo(2, done)}
    _write(tmp_path, dumps)
    for r, at in ((0, 28), (1, 29), (3, 40_000)):
        _sidecar(tmp_path / f"stacks_rank_{r}.json", r, T0 + at * MS)
    report = analyze(tmp_path)
    assert report.verdict == Verdict.HANG and report.culprit_ranks == (2,)


def test_candidate_ops_are_read_in_order_and_none_from_no_rows() -> None:
    import pandas as pd

    from frtrace.analysis.facts.failure import _ops_of

    columns = ["gid", "seq", "state_rank", "rank", "done", "created_ns", "row", "last_row"]
    assert list(_ops_of(pd.DataFrame(columns=columns))) == []
    rows = pd.DataFrame(
        [
            (1, 5, 1, 3, True, 10, 7, 7),
            (0, 5, 2, 0, False, None, 1, 2),
            (1, 5, None, 2, False, 12, 4, 4),
        ],
        columns=columns,
    ).astype({"state_rank": "Int64", "created_ns": "Int64"})
    ops = list(_ops_of(rows))
    assert [key for key, _ in ops] == [(0, 5), (1, 5)]
    (_, first), (_, second) = ops
    assert first.completed and first.created == [None] and first.last_row == [2]
    assert not second.completed and second.ranks == [3, 2] and second.done == [True, False]
