"""A real hung job collected with ``frtrace collect`` (dumps, recorder sidecars, py-spy text):
the culprit's place first, and the stack tree in HTML. Its golden reports are checked with
the others in test_golden.py."""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path

from frtrace.model import Report
from frtrace.pipeline import analyze
from frtrace.report.html import render_html
from frtrace.report.text import render_text
from tests.conftest import FIXTURES

STACKS = FIXTURES / "stacks"


@cache
def report_of(scenario: str) -> Report:
    return analyze(STACKS / scenario)


def test_recorder_hang_names_rank_and_function_first() -> None:
    """The first lines: the culprit, and the user function it is stuck in."""
    lines = render_text(report_of("recorder_hang")).splitlines()
    assert lines[0] == "HANG: culprit rank 2; 3 ranks wait on it"
    assert "rank 2: in host code at load_batch (hung_job.py:27)" in " ".join(
        " ".join(lines[1:3]).split()
    )


def test_html_draws_the_stack_tree() -> None:
    """HTML: the classes as a small tree, the culprit's branch marked."""
    html = render_html(report_of("recorder_hang"))
    assert '<ul class="stacktree">' in html
    assert '<span class="culprit"><b>1</b> [2]</span>' in html
    assert "load_batch (hung_job.py:27)" in html


def _finding_table(text: str) -> dict[str, list[str]]:
    """The first finding's side-by-side table of a text report: row label -> cells."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("----"))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells = [c for c in line.strip().split("  ") if c.strip()]
        rows[cells[0].strip()] = [c.strip() for c in cells[1:]]
    return rows


def test_collect_store_dumps_without_frames_show_each_rank_s_live_stack() -> None:
    """``collect --store``: JSON dumps (no frames in any entry) beside the stacks collect took
    (py-spy and dump_traceback). Where an entry has no frames the table shows each column's
    live stack, labelled as such, and never passes it off as where the op was called."""
    rows = _finding_table(render_text(report_of("store_hang")))
    assert rows["now (live stack)"] == [
        "train_step (hung_job.py:49)",  # the waiting ranks 0-2, in work.wait()
        "load_batch (hung_job.py:36)",  # culprit rank 3
    ]
    assert rows["op called from"] == ["(not in the dump)", "(not in the dump)"]


def test_dump_traceback_alone_gives_the_live_stack(tmp_path: Path) -> None:
    """Where py-spy is not in the job's environment collect keeps dump_traceback's text only:
    the live stacks come from it."""
    folder = tmp_path / "store_hang"
    shutil.copytree(STACKS / "store_hang", folder)
    for pyspy in folder.glob("*/pyspy_rank_*.txt"):
        pyspy.unlink()
    text = render_text(analyze(folder))
    assert "read from dump_traceback ×4" in text, text
    rows = _finding_table(text)
    live = ["train_step (hung_job.py:49)", "load_batch (hung_job.py:36)"]
    assert rows["now (live stack)"] == live


def test_an_entry_with_frames_keeps_its_call_site_and_no_live_stack_for_the_waiting() -> None:
    """A pickle dump's entries carry frames: where the op was called is known, and the
    waiting ranks' column shows no live stack in its place."""
    rows = _finding_table(render_text(report_of("recorder_hang")))
    assert rows["now (live stack)"] == ["-", "load_batch (hung_job.py:27)"]
    assert rows["op called from"] == ["train_step (hung_job.py:37)"] * 2


def test_waiting_ranks_in_several_places_show_the_most_shared_one_and_count_the_rest() -> None:
    """The live stack of a column of many ranks is the place most of them share; the others
    are counted, never listed (4,096 waiting ranks are one cell)."""
    from dataclasses import replace

    from frtrace.pystack.classes import group_stacks
    from frtrace.pystack.model import Frame
    from frtrace.report.common import compare_rows, finding_columns

    report = report_of("store_hang")
    assert report.stacks is not None

    def at(function: str, line: int) -> tuple[Frame, ...]:
        return (Frame(function=function, filename="/job/train.py", line=line),)

    frames = {0: at("train_step", 49), 1: at("train_step", 49), 2: at("eval_step", 7)}
    stacks = replace(report.stacks, classes=group_stacks(frames | {3: at("load_batch", 36)}))
    columns, _ = finding_columns(report.findings[0], report.processes, stacks)
    rows = {r[0]: r[1:] for r in compare_rows(columns)}
    assert rows["now (live stack)"][0] == "train_step (train.py:49) (+1 other place)"
    # no stacks at all: no live row, and the entry's missing frames said as such
    columns, _ = finding_columns(replace(report.findings[0], where=()), report.processes, None)
    rows = {r[0]: r[1:] for r in compare_rows(columns)}
    assert "now (live stack)" not in rows
    assert rows["called from"] == ["(not in the dump)", "(not in the dump)"]
