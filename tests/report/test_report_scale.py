"""At 4,096 ranks the reports stay readable and fast: ranges and counts, no walls of ranks."""

from __future__ import annotations

import json
import re
import time

import pytest

from frtrace.detail import NeverJoined, PgStatus, StuckInCollective, Waits
from frtrace.detail.notes import NoDumpFor, StragglerBasis
from frtrace.model import (
    Confidence,
    Finding,
    FindingKind,
    GroupProgress,
    GroupRef,
    OpSignature,
    Report,
    Severity,
    Straggler,
    Verdict,
)
from frtrace.report.common import MAX_DETAILED_FINDINGS, compact_ranks, shorten_rank_lists
from frtrace.report.heatmap import MIN_ODD_PX
from frtrace.report.html import render_html
from frtrace.report.json import render_json
from frtrace.report.markdown import render_markdown
from frtrace.report.text import render_text

WORLD = 4096
TP = 8
CULPRIT = 1234
SEQ = 40


def _sig(op: str, stack: tuple[str, ...] = ()) -> OpSignature:
    return OpSignature(
        op=op,
        input_sizes=((1024, 4096),),
        output_sizes=((1024, 4096),),
        input_dtypes=("BFloat16",),
        output_dtypes=("BFloat16",),
        state="started",
        stack=stack,
    )


def big_report() -> Report:
    """A 4,096-rank job: 512 tp groups, 8 dp groups of 512 (strided), rank 1234 stuck.

    Its tp peers wait on it directly, every other rank waits through dp; 300 other findings
    and 200 stragglers test the caps.
    """
    default = GroupRef(name="0", desc="default_pg", members=tuple(range(WORLD)), inferred=False)
    tp = [
        GroupRef(
            name=str(1 + i), desc="tp", members=tuple(range(i * TP, (i + 1) * TP)), inferred=False
        )
        for i in range(WORLD // TP)
    ]
    dp = [
        GroupRef(name=str(600 + j), desc="dp", members=tuple(range(j, WORLD, TP)), inferred=False)
        for j in range(TP)
    ]
    groups = (default, *tp, *dp)
    progress = []
    for g in groups:
        entered = tuple(SEQ - 1 if m == CULPRIT else SEQ for m in g.members)
        finished = tuple(SEQ - 1 for _ in g.members)
        progress.append(GroupProgress(group=g, entered=entered, finished=finished))
    own_tp = tp[CULPRIT // TP]
    waiting = tuple(m for m in own_tp.members if m != CULPRIT)
    stack = tuple(f"frame_{i} (/workspace/llm/train/module_{i}.py:{10 * i})" for i in range(20))
    main = Finding(
        kind=FindingKind.NEVER_JOINED,
        severity=Severity.ERROR,
        culprit_ranks=(CULPRIT,),
        waiting_ranks=waiting,
        group=own_tp,
        seq=SEQ,
        op="all_reduce",
        expected=_sig("all_reduce", stack),
        actual={CULPRIT: _sig("all_gather", stack[3:])},
        confidence=Confidence.HIGH,
        detail=NeverJoined(
            waits=Waits(
                culprits=(CULPRIT,),
                waiting=tuple(range(0, WORLD, 2)),  # a rank list that must be cut in the text
                blocked=WORLD - 1,
                last_seen=(),
                waiting_state="started",
                call_site=None,
                failed=None,
                timed_out=(),
            ),
            basis="dumps",
            pg_status=tuple(  # 41 evidence lines in all
                PgStatus(rank=r, last_enqueued=SEQ - 1, last_completed=SEQ - 1) for r in range(40)
            ),
        ),
    )
    others = [
        Finding(
            kind=FindingKind.STUCK_IN_COLLECTIVE,
            severity=Severity.WARNING,
            detail=StuckInCollective(entered=g.members, held=0),
            culprit_ranks=(),
            waiting_ranks=g.members,
            group=g,
            seq=SEQ,
            op="all_reduce",
            expected=_sig("all_reduce"),
        )
        for g in tp[:300]
    ]
    edges = tuple(
        sorted(
            [(w, CULPRIT, "never_joined") for w in waiting]
            + [
                (r, r - r % TP + CULPRIT % TP, "blocked_elsewhere")
                for r in range(WORLD)
                if r // TP != CULPRIT // TP and r % TP != CULPRIT % TP
            ]
            + [(r, CULPRIT, "never_joined") for r in range(CULPRIT % TP, WORLD, TP) if r != CULPRIT]
        )
    )
    stragglers = tuple(
        Straggler(
            rank=r,
            collectives=50,
            last_share=0.8,
            median_late_ms=12.5,
            groups=("0", "1", "600", "601", "602"),
            corroborated=True,
            basis=StragglerBasis.CORROBORATED,
            shorter_wait_ms=float(r),  # (a sentence per rank: the report says at most 5)
        )
        for r in range(0, 400, 2)
    )
    return Report(
        verdict=Verdict.HANG,
        culprit_ranks=(CULPRIT,),
        findings=(main, *others),
        stragglers=stragglers,
        world_size=WORLD,
        ranks_loaded=tuple(range(WORLD)),
        ranks_missing=(),
        ranks_unreadable=(),
        data_notes=(NoDumpFor(ranks=tuple(range(1, 3000, 3)), world_size=WORLD),),
        groups=groups,
        wait_edges=edges,
        victim_ranks=tuple(r for r in range(WORLD) if r != CULPRIT),
        progress=tuple(progress),
    )


@pytest.fixture(scope="module")
def report() -> Report:
    return big_report()


def _timed(fn: object, report: Report) -> tuple[str, float]:
    assert callable(fn)
    start = time.perf_counter()
    out = fn(report)
    assert isinstance(out, str)
    return out, time.perf_counter() - start


@pytest.mark.parametrize("renderer", [render_text, render_markdown])
def test_text_and_markdown_stay_short_at_4096_ranks(report: Report, renderer: object) -> None:
    """A few hundred lines, no line that lists thousands of ranks, rendered in well under 1 s."""
    out, seconds = _timed(renderer, report)
    lines = out.splitlines()
    assert seconds < 1.0
    assert len(lines) < 400, len(lines)
    assert max(len(line) for line in lines) < 400
    assert lines[0].lstrip("# ") == "HANG: culprit rank 1234; 4095 ranks wait on it"
    assert "+271 more (FR009 ×271)" in out  # findings past the caps are counted, not listed
    assert "… +190 more stragglers" in out
    assert "… +29 more (see the JSON report)" in out  # evidence past the cap


def test_text_lists_at_most_the_capped_number_of_detailed_findings(report: Report) -> None:
    """Detailed finding sections are capped; the rest are one-line rows."""
    out = render_text(report)
    assert len(re.findall(r"^── FR", out, flags=re.MULTILINE)) == MAX_DETAILED_FINDINGS


def test_html_stays_small_and_marks_the_culprit(report: Report) -> None:
    """The page is well under 2 MB; the culprit's cell is drawn at least MIN_ODD_PX wide."""
    page, seconds = _timed(render_html, report)
    assert seconds < 2.0
    assert len(page.encode()) < 2_000_000
    cells = re.findall(
        r'<rect x="[\d.]+" y="[\d.]+" width="([\d.]+)"[^>]*><title>tp: rank 1234: ', page
    )
    assert cells and all(float(w) >= MIN_ODD_PX for w in cells)
    assert 'class="culprit">1234</text>' in page
    assert page.count('<rect x="') < 3000  # runs of equal cells, not one rect per cell


def test_json_keeps_everything_and_stays_compact(report: Report) -> None:
    """JSON has every finding and edge; lists of ranks stay on one line each."""
    out, seconds = _timed(render_json, report)
    assert seconds < 3.0
    data = json.loads(out)
    assert len(data["findings"]) == 301 and len(data["wait_edges"]) == len(report.wait_edges)
    per_rank = [line for line in out.splitlines() if line.strip().rstrip(",").isdigit()]
    assert per_rank == []  # a list of ranks is one line, never one line per rank


def test_compact_ranks_cuts_long_lists_and_counts_the_rest() -> None:
    """Ranges first; past the limit the list is cut at a comma with a count."""
    assert compact_ranks([0, 1, 2, 3, 8, 10, 11, 12, 13, 14, 15]) == "0-3,8,10-15"
    cut = compact_ranks(range(0, 4096, 2), max_chars=20)
    assert cut.endswith("(+2040 more)") and cut.startswith("0,2,4,")


def test_shorten_rank_lists_leaves_short_lists_alone() -> None:
    """Only long lists inside prose are cut."""
    assert shorten_rank_lists("ranks 0-3,8 wait") == "ranks 0-3,8 wait"
    long = "ranks " + ",".join(str(r) for r in range(0, 2000, 2)) + " wait"
    short = shorten_rank_lists(long)
    assert short.endswith(" more) wait") and len(short) < 100
