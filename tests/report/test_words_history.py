"""A restarted job's history in words: the line of each attempt, the repeat offenders said
plainly, and every format drawing them alike (HTML and markdown escaped)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from frtrace.evidence.model import FailureKind
from frtrace.model import (
    AttemptSummary,
    FindingKind,
    GroupRef,
    History,
    RepeatOffender,
    Verdict,
)
from frtrace.report.html import render_html
from frtrace.report.json import report_to_dict
from frtrace.report.markdown import render_markdown
from frtrace.report.text import render_text
from frtrace.report.words_history import attempt_line, left_out_line, repeat_line
from tests.analysis.test_history import report

PG0 = GroupRef(name="0", desc="default_pg", members=(0, 1, 2, 3), inferred=False)
NEVER = AttemptSummary(
    attempt=0,
    verdict=Verdict.HANG,
    culprit_ranks=(1,),
    hosts=((1, "node-1"),),
    kind=FindingKind.NEVER_JOINED,
    group=PG0,
    op="all_reduce",
    seq=9,
    world_size=4,
    ranks_loaded=3,
    evidence_files=7,
)

LINES = [
    (
        NEVER,
        False,
        "attempt 0: hang; rank 1 (on node-1): never joined all_reduce #9 of default_pg (pg 0) "
        "(from 3 of 4 dumps and 7 logs and error files)",
    ),
    (
        replace(NEVER, attempt=2, later=True, evidence_files=1),
        False,
        "attempt 2 (later): hang; rank 1 (on node-1): never joined all_reduce #9 of default_pg "
        "(pg 0) (from 3 of 4 dumps and 1 log or error file)",
    ),
    (
        replace(NEVER, culprit_ranks=(), suspected_ranks=(0, 2), hosts=(), kind=None),
        True,
        "attempt 0 (this report): hang; suspected (no dump) ranks 0,2 (from 3 of 4 dumps and 7 "
        "logs and error files)",
    ),
    (
        replace(
            NEVER,
            culprit_ranks=(1, 3),
            hosts=((1, "a"), (3, "b")),
            kind=FindingKind.FIRST_FAILURE,
            cause=FailureKind.OOM,
            op=None,
            seq=None,
            group=None,
            evidence_files=0,
        ),
        False,
        "attempt 0: hang; ranks 1,3 (1 on a, 3 on b): failed first (oom) (from 3 of 4 dumps)",
    ),
    (
        replace(NEVER, verdict=Verdict.HEALTHY, culprit_ranks=(), hosts=(), kind=None),
        False,
        "attempt 0: healthy (from 3 of 4 dumps and 7 logs and error files)",
    ),
]


@pytest.mark.parametrize(("summary", "this", "said"), LINES)
def test_an_attempts_line(summary: AttemptSummary, this: bool, said: str) -> None:
    assert attempt_line(summary, this=this) == said


def test_every_finding_kind_has_its_words() -> None:
    for kind in FindingKind:
        assert attempt_line(replace(NEVER, kind=kind)).startswith("attempt 0: hang; rank 1")


REPEATS = [
    (
        RepeatOffender(attempts=(0, 1), rank=1, hosts=("node-1",)),
        "rank 1 (node-1) was the culprit in attempts 0 and 1 (this one): suspect the machine, "
        "not the code",
    ),
    (
        RepeatOffender(attempts=(0, 1, 3), rank=1),
        "rank 1 was the culprit in attempts 0, 1 (this one) and 3: suspect its machine, not the "
        "code",
    ),
    (
        RepeatOffender(attempts=(0, 1), rank=1, hosts=("a", "b")),
        "rank 1 was the culprit in attempts 0 and 1 (this one), on a and b: the same rank on "
        "different machines points at what rank 1 does (its data, its shard), not at one machine",
    ),
    (
        RepeatOffender(attempts=(0, 1), hosts=("node-1",), ranks=(1, 5)),
        "host node-1 held the culprit in attempts 0 and 1 (this one) (ranks 1,5): suspect the "
        "machine, not the code",
    ),
]


@pytest.mark.parametrize(("repeat", "said"), REPEATS)
def test_a_repeat_offender_is_said_plainly(repeat: RepeatOffender, said: str) -> None:
    assert repeat_line(repeat, this=1) == said


def test_the_attempts_left_out_are_counted() -> None:
    history = History(this=replace(NEVER, attempt=12), others=(NEVER,), left_out=(1, 2, 3))
    assert left_out_line(history) == (
        "3 other attempts not analysed (1-3): --attempt N analyses one"
    )
    assert left_out_line(replace(history, left_out=())) is None


def test_every_format_draws_the_history_escaped() -> None:
    """A host is what a sidecar says: markup in it is shown, never run."""
    evil = "<img src=x onerror=alert(1)>](http://x)"
    this = replace(NEVER, attempt=1, hosts=((1, evil),))
    repeat = RepeatOffender(attempts=(0, 1), rank=1, hosts=(evil,))
    history = History(this=this, others=(replace(NEVER, hosts=((1, evil),)),), repeats=(repeat,))
    shown = replace(report((1,), world=4), history=history)
    text = render_text(shown)
    assert text.index("attempt 1 (this report)") < text.index("attempt 0: hang")
    assert "was the culprit in attempts 0 and 1 (this one)" in " ".join(text.split())
    html = render_html(shown)
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    md = render_markdown(shown)
    assert "<img" not in md and "](http" not in md.replace("\\](http", "")  # (no link)
    doc = report_to_dict(shown)["history"]
    assert [a["attempt"] for a in doc["attempts"]] == [1, 0]
    assert doc["repeat_offenders"][0]["hosts"] == [evil]
    assert "history" not in report_to_dict(report((1,), world=4))
