"""A log line naming a rank outside the job (issue 53, item 10): dropped and said, the verdict
unchanged. Round 2 kept such a rank from being named the culprit, but the line became a
failure of no rank: a healthy set with stragglers turned "cannot tell", and no line said why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from frtrace.evidence.logs import parse_log
from frtrace.model import Verdict
from frtrace.pipeline import analyze
from frtrace.report.json import render_json
from tests.conftest import FIXTURES

LATE_RANK = FIXTURES / "gloo" / "late_rank"  # healthy with stragglers (rank 3), four ranks

_SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_10:00:03
  host      : node-0
  rank      : {rank} (local_rank: 3)
  exitcode  : 1 (pid: 4244)
  error_file: <N/A>
  traceback : Traceback (most recent call last):
    File "/job/train.py", line 30, in step
      raise KeyError("lr")
  KeyError: 'lr'
============================================================
"""


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[rank1000000000]: RuntimeError: boom\n", "rank 1000000000"),  # past MAX_WORLD_SIZE
        ("[rank7]: RuntimeError: boom\n", "rank 7"),  # a rank, but not of this 4-rank job
        (_SUMMARY.format(rank=7), "rank 7"),  # torchelastic's summary entry
        ("[rank" + "9" * 40 + "]: RuntimeError: boom\n", "rank 99999999999999999..."),
    ],
    ids=["past-max-world", "past-world", "summary", "forty-digits"],
)
def test_a_log_line_naming_a_rank_outside_the_job_is_dropped_and_said(
    tmp_path: Path, text: str, named: str
) -> None:
    here = tmp_path / "job"
    shutil.copytree(LATE_RANK, here)
    (here / "train.log").write_text(text)
    report = analyze(here)
    assert report.verdict == Verdict.STRAGGLERS  # as without the log ("cannot tell" before)
    assert report.timeline == ()  # no failure of no rank
    assert report.evidence_problems == (
        f"train.log: names {named}, outside the job's 4 ranks; not used",
    )
    doc = json.loads(render_json(report))
    assert doc["evidence_problems"] == list(report.evidence_problems)


def test_a_log_line_of_a_rank_inside_the_job_is_still_read(tmp_path: Path) -> None:
    here = tmp_path / "job"
    shutil.copytree(LATE_RANK, here)
    (here / "train.log").write_text("[rank1000000000]: RuntimeError: boom\n[rank2]: oops\n")
    (here / "rank2.err").write_text("[rank2]: RuntimeError: real trouble\n")
    report = analyze(here)
    assert {f.rank for f in report.timeline} == {2}
    assert any("rank 1000000000" in p for p in report.evidence_problems)


def test_the_log_reader_says_which_ranks_it_left_out() -> None:
    outside: set[str] = set()
    text = "[rank5000000]: RuntimeError: x\n[rank1]: RuntimeError: y\nRuntimeError: z\n"
    found = parse_log(text, "a.log", rank=None, year=None, outside=outside)
    assert outside == {"5000000"}
    assert sorted((f.rank is None, f.message) for f in found) == [
        (False, "RuntimeError: y"),
        (True, "RuntimeError: z"),  # a line with no prefix is still a failure of no known rank
    ]


def test_the_text_report_says_the_line_it_did_not_use(tmp_path: Path) -> None:
    """Where nothing else failed, the line set aside still reaches the person reading the
    report (not only the JSON)."""
    from frtrace.report.text import render_text

    here = tmp_path / "job"
    shutil.copytree(LATE_RANK, here)
    (here / "train.log").write_text("[rank7]: RuntimeError: boom\n")
    text = render_text(analyze(here), None)
    assert "train.log: names rank 7, outside the job's 4 ranks; not used" in text
