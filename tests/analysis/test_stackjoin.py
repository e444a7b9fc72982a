"""Collected stacks joined with the verdict: the culprit's place, classes, agreement; two
snapshots compared; stack files never taken for dumps."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from frtrace.analysis.compare import compare_snapshots
from frtrace.analysis.facts import facts_of
from frtrace.analysis.stackjoin import Named, stack_evidence, with_stacks
from frtrace.incident.discover import discover
from frtrace.load.tables import load_dumps
from frtrace.pipeline import analyze, analyze_dumps
from frtrace.pystack.classes import group_stacks
from frtrace.pystack.discover import StackSet, load_stacks
from frtrace.pystack.model import Frame, ProcessStacks, ThreadStack
from frtrace.report.compare import render_comparison
from frtrace.report.json import report_to_dict
from frtrace.report.text import render_text
from frtrace.report.wording import evidence, summary
from frtrace.report.words_stacks import stack_statement
from tests.conftest import FIXTURES, GLOO, make_dump, make_entry, write_pickle

SAMPLES = FIXTURES / "pystack"


def _with_stacks(tmp: Path, culprit_sample: str = "pyspy_rank_1.txt") -> Path:
    """never_joins (rank 2 is the culprit) with a py-spy file per rank."""
    d = tmp / "never_joins"
    shutil.copytree(GLOO / "never_joins", d)
    for r in (0, 1, 3):
        shutil.copy(SAMPLES / "pyspy_rank_0.txt", d / f"pyspy_rank_{r}.txt")
    shutil.copy(SAMPLES / culprit_sample, d / "pyspy_rank_2.txt")
    return d


def test_stack_files_are_found_and_never_taken_for_dumps(tmp_path: Path) -> None:
    """By name (pyspy_rank_N.json, stacks_rank_N.json) and by content (rank_N.json holding
    py-spy --json): stacks for pystack, side files of the dump discovery."""
    d = _with_stacks(tmp_path)
    shutil.copy(SAMPLES / "pyspy_rank_0.json", d / "pyspy_rank_0.json")
    shutil.copy(SAMPLES / "stacks_rank_1.json", d / "stacks_rank_1.json")
    shutil.copy(SAMPLES / "pyspy_rank_1.json", d / "rank_3.json")  # by content only
    (d / "sub").mkdir()
    shutil.copy(SAMPLES / "traceback_rank_0.txt", d / "sub" / "traceback_rank_0.txt")
    found = discover(d)
    assert [c.path.name for c in found.candidates] == ["rank_0", "rank_1", "rank_2", "rank_3"]
    kinds = {f.path.name: f.kind for f in found.side_files}
    assert kinds["rank_3.json"] == kinds["stacks_rank_1.json"] == "stacks"
    stacks = load_stacks(d)
    assert not stacks.problems
    assert len(stacks.samples) == 8
    assert {r: s.source for r, s in stacks.by_rank.items()} == {
        0: "py-spy-json",  # preferred over text and faulthandler
        1: "recorder",  # the sidecar: it knows the trigger and the dump time
        2: "py-spy-text",
        3: "py-spy-json",
    }
    assert stacks.trigger(1) == "on_demand: hung_job.py after 2 s"
    assert stacks.taken_at_ns(1) is not None and stacks.taken_at_ns(2) is None


def test_culprit_where_in_summary_evidence_json_and_classes(tmp_path: Path) -> None:
    """The culprit's place is in its finding's one line, its evidence, the JSON; the stack
    classes corroborate the verdict."""
    report = analyze(_with_stacks(tmp_path))
    f = report.findings[0]
    assert f.culprit_ranks == (2,)
    assert summary(f).endswith("; rank 2: in host code at load_batch (hung_job.py:23)")
    (w,) = f.where
    assert (w.function, w.file, w.line, w.place, w.source) == (
        "load_batch",
        "hung_job.py",
        23,
        "host code",
        "py-spy-text",
    )
    assert evidence(f)[0].startswith("rank 2's Python stack (py-spy-text, pyspy_rank_2.txt)")
    assert report.stacks is not None and report.stacks.agreement == "corroborates"
    text = render_text(report)
    assert text.splitlines()[1].startswith("  1. rank 2 never joined all_reduce #12")
    assert "where:    rank 2: in host code at load_batch (hung_job.py:23)" in text
    assert "open hung_job.py:23 (`load_batch`)" in text  # the next step, not "run py-spy"
    doc = report_to_dict(report)
    assert doc["schema_version"] == "1.5"
    assert doc["findings"][0]["where"][0]["function"] == "load_batch"
    assert doc["stacks"]["classes"][1] == {
        "ranks": [2],
        "outlier": True,
        "description": "load_batch (hung_job.py:23)",
        "user_frame": {"function": "load_batch", "filename": "hung_job.py", "line": 23},
        "frames": doc["stacks"]["classes"][1]["frames"],
    }
    assert doc["stacks"]["tree"]["ranks"] == [0, 1, 2, 3]


def test_stacks_question_the_verdict_when_the_culprit_looks_like_its_waiters(
    tmp_path: Path,
) -> None:
    """A culprit with the same stack as the ranks waiting on it: the sentence says so."""
    report = analyze(_with_stacks(tmp_path, culprit_sample="pyspy_rank_0.txt"))
    assert report.stacks is not None
    assert report.stacks.agreement == "questions"
    assert "same stack as ranks waiting on it" in stack_statement(report.stacks.reading)
    assert report.findings[0].where[0].place == "collective"


def test_a_malformed_stack_file_costs_that_file_only(tmp_path: Path) -> None:
    """One line for the broken file; the other stacks and the verdict stand."""
    d = _with_stacks(tmp_path)
    (d / "pyspy_rank_1.txt").write_text("Process 12: python\nThread 7 (idle)\n    garbage\x00")
    (d / "stacks_rank_3.json").write_text('{"format": "frtrace-stacks", "version": 1, "thr')
    report = analyze(d)
    assert report.culprit_ranks == (2,)
    assert report.findings[0].where[0].function == "load_batch"
    assert report.stacks is not None
    problems = report.stacks.problems
    assert len(problems) == 2
    assert problems[0].startswith("pyspy_rank_1.txt: ") and "\n" not in problems[0]
    assert problems[1].startswith("stacks_rank_3.json: ")
    assert str(tmp_path) not in render_text(report)


def test_no_stack_files_leave_the_report_as_it_was() -> None:
    """A dump set without stack files: no where, no stacks section."""
    report = analyze(GLOO / "never_joins")
    assert report.stacks is None and all(not f.where for f in report.findings)
    assert "stacks" not in report_to_dict(report)


def _frames(*names: tuple[str, str, int]) -> tuple[Frame, ...]:
    return tuple(Frame(function=n, filename=f, line=ln) for n, f, ln in names)


def test_classes_at_4096_simulated_ranks_stay_a_few_lines_and_fast() -> None:
    """4,096 ranks, rank 1234 in load_batch: a few lines in text, every rank in the JSON."""
    report = analyze(GLOO / "never_joins")
    world = 4096
    waiting = _frames(
        ("all_reduce", "/site-packages/torch/distributed/distributed_c10d.py", 3252),
        ("train_step", "/job/train.py", 120),
        ("main", "/job/train.py", 200),
        ("<module>", "/job/train.py", 210),
    )
    stuck = _frames(
        ("load_batch", "/job/data.py", 88),
        ("train_step", "/job/train.py", 118),
        ("main", "/job/train.py", 200),
        ("<module>", "/job/train.py", 210),
    )

    def sample(r: int) -> ProcessStacks:
        frames = stuck if r == 1234 else waiting
        thread = ThreadStack(thread_id=str(r), name="MainThread", frames=frames, is_main=True)
        return ProcessStacks(
            rank=r,
            pid=r,
            host=None,
            source="py-spy-text",
            path=f"pyspy_rank_{r}.txt",
            threads=(thread,),
        )

    stacks = StackSet(directory="x", samples=(), by_rank={r: sample(r) for r in range(world)})
    big = replace(
        report,
        world_size=world,
        culprit_ranks=(1234,),
        ranks_loaded=tuple(range(world)),
        victim_ranks=tuple(r for r in range(world) if r != 1234),
        findings=(replace(report.findings[0], culprit_ranks=(1234,)),),
    )
    facts = facts_of(load_dumps(GLOO / "never_joins"))
    t0 = time.perf_counter()
    facts = replace(
        facts, stacks=stacks, sampled=stacks.by_rank, classes=group_stacks(stacks.by_rank)
    )
    named = Named(verdict=big.verdict, culprits=(1234,), suspected=(), victims=big.victim_ranks)
    joined = replace(
        big,
        findings=with_stacks(big.findings, big.culprit_ranks, facts),
        stacks=stack_evidence(facts, named),
    )
    text = render_text(joined)
    doc = json.dumps(report_to_dict(joined))
    elapsed = time.perf_counter() - t0
    assert elapsed < 5.0, f"{elapsed:.2f} s"
    section = text[text.index("Where each rank is") :].split("\n\n")[0:2]
    assert section[1].splitlines() == [
        "4,096 ranks, 2 stack classes (main thread; frames compared by function, file and line); "
        "read from py-spy-text ×4096:",
        "  - 4,095 ranks (0-1233,1235-4095): all_reduce <- train_step (train.py:120)",
        "  - rank 1234: load_batch (data.py:88)  [outlier]",
    ]
    assert "The stacks corroborate the verdict: culprit rank 1234" in " ".join(section[0].split())
    assert len(json.loads(doc)["stacks"]["classes"][0]["ranks"]) == 4095


def _snapshot(path: Path, record_ids: dict[int, int]) -> Path:
    for rank, top in record_ids.items():
        entries = [
            make_entry(record_id=i, collective_seq_id=i + 1, op_id=i + 1) for i in range(top + 1)
        ]
        write_pickle(path / f"rank_{rank}", make_dump(entries, world=len(record_ids)))
    return path


@pytest.mark.parametrize(
    ("after", "verdict", "text"),
    [
        ({0: 3, 1: 3}, "hung", "HUNG: none of the 2 ranks moved between the snapshots"),
        ({0: 5, 1: 3}, "slow", "SLOW, NOT HUNG: ranks 0 moved; rank 1 did not (look there)"),
        ({0: 5, 1: 6}, "progressing", "PROGRESSING: all 2 ranks moved between the snapshots"),
    ],
)
def test_two_snapshots_stuck_or_slow(
    tmp_path: Path, after: dict[int, int], verdict: str, text: str
) -> None:
    """A rank whose newest record moved is slow, not stuck; nothing moved: hung."""
    a = load_dumps(_snapshot(tmp_path / "a", {0: 3, 1: 3}))
    b = load_dumps(_snapshot(tmp_path / "b", after))
    result = compare_snapshots(a, analyze_dumps(a), b, analyze_dumps(b))
    assert result.verdict == verdict
    assert render_comparison(result).splitlines()[0] == text
