"""The evidence readers against hostile input (issue 30): each side file is untrusted, with a
budget of time, memory, nesting and digits; a bad one costs that file, never the analysis;
no rank outside the job is ever named."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from frtrace.errors import FrtraceError
from frtrace.evidence.discover import load_evidence
from frtrace.evidence.logs import parse_log
from frtrace.incident.layout import walk
from frtrace.load import tables
from frtrace.model import Verdict
from frtrace.pipeline import analyze
from frtrace.pystack.discover import load_stacks
from frtrace.report.json import render_json
from frtrace.report.words_notes import note
from tests.conftest import FIXTURES

NEVER_JOINS = FIXTURES / "gloo" / "never_joins"  # HANG: culprit rank 2, four ranks


def _copy(tmp_path: Path) -> Path:
    here = tmp_path / "job"
    shutil.copytree(NEVER_JOINS, here)
    return here


# --- 2: linear time ------------------------------------------------------------------------


def test_a_line_of_repeated_assertions_is_read_in_linear_time() -> None:
    text = "Assertion " * (100 * 1024) + "error\n"  # ~1 MiB on one line: was ~100 s
    started = time.monotonic()
    parse_log(text, "rank0.log", rank=0, year=None)
    assert time.monotonic() - started < 3


def test_many_lines_of_repeated_assertions_stay_within_the_time_budget() -> None:
    text = ("Assertion " * 800 + "error\n") * 2000  # 16 MiB of 8 KB lines
    started = time.monotonic()
    parse_log(text, "rank0.log", rank=0, year=None)
    assert time.monotonic() - started < 15


# --- 4, 5: ranks outside the job ------------------------------------------------------------


def test_a_log_naming_a_rank_outside_the_job_names_no_such_culprit(tmp_path: Path) -> None:
    here = _copy(tmp_path)
    (here / "train.log").write_text("[rank1000000000]: RuntimeError: boom\n[rank3]: hi\n")
    report = analyze(here)
    assert report.culprit_ranks == (2,)
    assert all(f.rank is None or 0 <= f.rank < 4 for f in report.timeline)
    assert all(r < 4 for r in report.suspected_ranks)


@pytest.mark.parametrize("rank", [-5, 10**30, 7])
def test_a_sidecar_with_a_rank_outside_the_job_is_refused(tmp_path: Path, rank: int) -> None:
    here = _copy(tmp_path)
    sidecar = {
        "format": "frtrace-stacks",
        "version": 1,
        "rank": rank,
        "trigger": {"kind": "exception", "detail": "RuntimeError: boom"},
        "threads": [{"frames": [{"name": "f", "filename": "a.py", "line": 1}], "is_main": True}],
    }
    (here / "stacks_rank_1.json").write_text(json.dumps(sidecar))
    report = analyze(here)
    assert report.culprit_ranks == (2,)
    named = {f.rank for f in report.timeline} | set(report.processes)
    assert all(r is None or 0 <= r < 4 for r in named)
    doc = json.loads(render_json(report))
    assert all(r is None or 0 <= r < 4 for r in (f.get("rank") for f in doc.get("timeline", [])))


def test_a_tiny_log_naming_a_huge_rank_does_not_size_the_world(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("[rank9999999]: RuntimeError: x\n")  # 37 bytes
    started = time.monotonic()
    try:
        report = analyze(tmp_path)
    except FrtraceError as exc:  # no dump and no rank in the job: the usual "no dumps" error
        assert "no Flight Recorder dumps" in str(exc)
    else:
        assert report.world_size <= 1 << 20
    assert time.monotonic() - started < 10


def test_a_log_rank_just_inside_the_limit_costs_no_memory_per_rank(tmp_path: Path) -> None:
    import tracemalloc

    (tmp_path / "train.log").write_text("[rank1000000]: RuntimeError: x\n")
    tracemalloc.start()
    try:
        with contextlib.suppress(FrtraceError):  # (refused: fine; the memory is the point)
            analyze(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024


# --- 6: one bad side file costs that file ---------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "[rank" + "9" * 5000 + "]: RuntimeError: x",
        "Fatal: Signal " + "9" * 5000 + " (SIGSEGV) Segmentation fault",
        "RuntimeError: Watchdog caught collective operation timeout: WorkNCCL(SeqNum="
        + "9" * 5000
        + ", OpType=ALLREDUCE) timed out",
        "Ranks " + "1" * 5000 + " failed to pass monitoredBarrier",
        "failed (exitcode: -" + "9" * 5000 + ") local_rank: 0 (pid: 1)",
        '  File "a.py", line ' + "9" * 5000 + ", in f",
    ],
    ids=["rank", "signal", "seqnum", "ranks-failed", "exitcode", "frame-line"],
)
def test_huge_numbers_in_a_log_cost_nothing_but_that_number(tmp_path: Path, line: str) -> None:
    (tmp_path / "rank_0.log").write_text(line + "\n")
    parse_log(line + "\n", "rank_0.log", rank=0, year=None)  # no ValueError


def test_a_huge_rank_in_torchelastics_summary_is_no_crash() -> None:
    text = (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "Failures:\n  <NO_OTHER_FAILURES>\nRoot Cause (first observed failure):\n[0]:\n"
        "  time      : 2026-11-25_10:00:00\n  host      : n1\n"
        "  rank      : " + "9" * 5000 + " (local_rank: 0)\n"
        "  exitcode  : -" + "9" * 5000 + " (pid: 1)\n"
        "  error_file: <N/A>\n  traceback : To enable traceback see: ...\n"
    )
    found = parse_log(text, "log.out", rank=None, year=None)
    assert all(f.rank is None or f.rank < 1 << 20 for f in found)


@pytest.mark.parametrize(
    "doc",
    [
        '{"message": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"message": {"message": "ValueError: x", "extraInfo": {"timestamp": "inf"}}}',
        '{"message": {"message": "ValueError: x", "extraInfo": {"timestamp": 1e300}}}',
        '{"message": "ValueError: x", "timestamp": "' + "9" * 5000 + '"}',
    ],
    ids=["nested", "inf", "1e300", "digits"],
)
def test_a_hostile_error_file_is_one_problem_line(tmp_path: Path, doc: str) -> None:
    (tmp_path / "error_0.json").write_text(doc)
    (tmp_path / "rank_1.log").write_text("ValueError: the other file is still read\n")
    found = load_evidence(tmp_path)
    assert [f.rank for f in found.failures if f.rank == 1] == [1]
    for f in found.failures:
        assert f.at_ns is None or 0 <= f.at_ns < 2**63


def test_a_deeply_nested_manifest_costs_that_manifest(tmp_path: Path) -> None:
    here = _copy(tmp_path)
    (here / "frtrace-collect.json").write_text("[" * 100_000 + "]" * 100_000)
    report = analyze(here)
    assert report.culprit_ranks == (2,)
    assert any("frtrace-collect.json" in p for p in report.evidence_problems)


def test_a_huge_pyspy_process_number_costs_that_file(tmp_path: Path) -> None:
    (tmp_path / "pyspy_rank_0.txt").write_text(
        "Process " + "9" * 5000 + ": python train.py\nPython v3.11.7\n\n"
        'Thread 0x1 (active): "MainThread"\n    f (a.py:1)\n'
    )
    (tmp_path / "pyspy_rank_1.txt").write_text(
        'Process 12: python train.py\nPython v3.11.7\n\nThread 0x1 (active): "MainThread"\n'
        "    f (a.py:1)\n"
    )
    stacks = load_stacks(tmp_path)
    assert 1 in stacks.by_rank


# --- 7: deep folders --------------------------------------------------------------------------


def test_a_thousand_nested_folders_beside_the_dumps_are_no_crash(tmp_path: Path) -> None:
    here = _copy(tmp_path)
    deep = here
    for _ in range(1000):  # (not mkdir(parents=True): pathlib's own recursion)
        deep = deep / "d"
        os.mkdir(deep)
    (deep / "rank_9.log").write_text("RuntimeError: deep\n")
    try:
        dumps, _side, skipped = walk(here)
        assert len(dumps) == 4
        assert any("nested deeper than" in s.reason for s in skipped)
        assert analyze(here).culprit_ranks == (2,)
    finally:  # (pytest's own clean-up of old temporary folders recurses: leave none this deep)
        (deep / "rank_9.log").unlink()
        while deep != here:
            os.rmdir(deep)
            deep = deep.parent


# --- 8: a FIFO in place of a stack file -------------------------------------------------------


def _swap_for_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def test_a_stack_file_swapped_for_a_fifo_after_the_listing_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyspy_rank_0.txt").write_text(
        'Process 12: python train.py\nPython v3.11.7\n\nThread 0x1 (active): "MainThread"\n'
        "    f (a.py:1)\n"
    )
    (tmp_path / "rank5.txt").write_text("Process 13: x\n")
    _dumps, side, _ = walk(tmp_path)
    for file in side:
        _swap_for_fifo(file.path)
    done: list[object] = []
    reader = threading.Thread(target=lambda: done.append(load_stacks(tmp_path, side)), daemon=True)
    reader.start()
    reader.join(10)
    assert done, "load_stacks blocked on a FIFO"


def test_the_first_bytes_sniff_does_not_open_a_fifo(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from frtrace.incident import layout

    (tmp_path / "rank5.txt").write_text("x")
    real = os.lstat

    def swapped(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        info = real(path, *args, **kwargs)
        if str(path).endswith("rank5.txt") and not stat_is_fifo(path):
            _swap_for_fifo(Path(path))
        return info

    monkeypatch.setattr(layout.os, "lstat", swapped)
    done: list[object] = []
    reader = threading.Thread(target=lambda: done.append(walk(tmp_path)), daemon=True)
    reader.start()
    reader.join(10)
    assert done, "the sniff blocked on a FIFO"


def stat_is_fifo(path: str | Path) -> bool:
    import stat

    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


# --- 3: a manifest is a claim -----------------------------------------------------------------


def _manifest(here: Path, names: dict[int, str], sizes: dict[int, int] | None = None) -> None:
    d = tables.load_dumps(NEVER_JOINS)
    ranks = []
    for r in range(4):
        t = d.entries.filter(pc.equal(d.entries["rank"], r))
        newest = pc.max(t["time_created_ns"]).as_py()
        ranks.append({"rank": r, "dumped_at_ns": newest + 50_000_000, "dump": names[r]})
        if sizes is not None:
            ranks[-1]["size_bytes"] = sizes[r]
    doc = {"format": "frtrace-collect", "version": 1, "ranks": ranks}
    (here / "frtrace-collect.json").write_text(json.dumps(doc))


def test_a_manifest_naming_files_not_there_does_not_flip_the_verdict(tmp_path: Path) -> None:
    here = _copy(tmp_path)
    _manifest(here, {r: f"nope_{r}" for r in range(4)})
    report = analyze(here)
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (2,))
    assert any("nope_0" in p for p in report.evidence_problems)


def test_a_manifest_naming_another_ranks_file_is_not_believed(tmp_path: Path) -> None:
    here = _copy(tmp_path)
    _manifest(here, {r: f"rank_{(r + 1) % 4}" for r in range(4)})
    report = analyze(here)
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (2,))


def test_a_manifest_giving_another_size_than_the_dumps_is_not_believed(tmp_path: Path) -> None:
    here = _copy(tmp_path)
    sizes = {r: (here / f"rank_{r}").stat().st_size + 1 for r in range(4)}
    _manifest(here, {r: f"rank_{r}" for r in range(4)}, sizes)
    report = analyze(here)
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (2,))
    assert any("bytes, not the" in p for p in report.evidence_problems)


def test_the_report_names_the_manifest_as_the_source_of_dump_times(tmp_path: Path) -> None:
    here = _copy(tmp_path)
    _manifest(here, {r: f"rank_{r}" for r in range(4)})
    report = analyze(here)
    said = [note(n) for n in report.data_notes]
    assert any("frtrace-collect.json" in n and "dump time" in n for n in said)


def test_a_log_over_its_time_budget_is_cut_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from frtrace.evidence import discover

    monkeypatch.setattr(discover, "LOG_SECONDS", 0.0)
    (tmp_path / "rank_0.log").write_text("step\n" * 100_000 + "ValueError: late\n")
    found = load_evidence(tmp_path)
    assert not found.failures
    assert any("rank_0.log: read for 0 s, up to line" in p for p in found.problems)


def test_a_manifest_in_an_archive_is_checked_against_its_members(tmp_path: Path) -> None:
    import tarfile

    here = _copy(tmp_path)
    _manifest(here, {r: f"rank_{r}" for r in range(4)})
    with tarfile.open(tmp_path / "job.tgz", "w:gz") as tar:
        tar.add(here, arcname="job")
    report = analyze(tmp_path / "job.tgz")
    assert not report.evidence_problems, report.evidence_problems
    assert any(
        "frtrace-collect.json" in n and "dump time" in n for n in map(note, report.data_notes)
    )
