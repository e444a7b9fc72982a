"""torch's own words, from real Gloo jobs under torchrun (tests/fixtures/gloo_evidence, made by
scripts/make_evidence_fixtures.py; the truth is how each fault was built):

* ``detail_mismatch__exception``: TORCH_DISTRIBUTED_DEBUG=DETAIL, rank 1 broadcasts where the
  others all_reduce; torch's collective check raises on every rank, each naming itself and the
  first rank that differs. The verdict names rank 1 (a desync torch itself saw).
* ``detail_stall__exception``: TORCH_DISTRIBUTED_DEBUG=DETAIL, rank 2 stalls in host code;
  the wrapper's monitored barrier on rank 0 names it.
* ``size_abort__exception``: Gloo's size check aborted the rank that received too much and
  says not who sent it: a desync nobody is named for.

Without the lines that say so, each keeps the verdict it had before they were read.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

from frtrace.detail import GlooSizeHint, NamedByError, SaidMismatch
from frtrace.model import FindingKind, Report, Verdict
from frtrace.pipeline import analyze
from frtrace.report.html import render_html
from frtrace.report.json import render_json
from frtrace.report.markdown import render_markdown
from frtrace.report.text import render_text
from tests.conftest import FIXTURES

TREE = FIXTURES / "gloo_evidence"
MANIFEST = json.loads((TREE / "MANIFEST.json").read_text())
MISMATCH, STALL = "detail_mismatch__exception", "detail_stall__exception"


@cache
def report_of(name: str) -> Report:
    return analyze(TREE / name)


def _only(name: str, keep: Callable[[Path], bool], to: Path) -> Path:
    """A copy of the fixture with the files ``keep`` says (paths relative to it)."""
    src = TREE / name
    for p in src.rglob("*"):
        rel = p.relative_to(src)
        if p.is_file() and keep(rel):
            (to / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, to / rel)
    return to


def _dumps(rel: Path) -> bool:
    return rel.name.startswith("comm_lib_trace_rank_")


def test_the_fixtures_truth() -> None:
    assert MANIFEST[MISMATCH]["expect"] == {"verdict": "desync", "culprit_ranks": [1]}
    assert MANIFEST[STALL]["expect"] == {"verdict": "hang", "culprit_ranks": [2]}


def test_torchs_collective_check_names_the_rank_that_called_something_else() -> None:
    report = report_of(MISMATCH)
    assert (report.verdict, report.culprit_ranks) == (Verdict.DESYNC, (1,))
    (f,) = [f for f in report.findings if isinstance(f.detail, SaidMismatch)]
    assert (f.kind, f.culprit_ranks, f.waiting_ranks) == (FindingKind.OP_MISMATCH, (1,), (0, 2, 3))
    d = f.detail
    assert isinstance(d, SaidMismatch)
    assert (d.basis, d.shown, d.group_size, d.reference) == ("majority", 4, 4, 0)
    assert [(c.rank, c.op, c.shapes) for c in d.sides] == [
        (0, "all_reduce", "[64]"),
        (1, "broadcast", "[64]"),
    ]
    assert sorted({m.rank for m in d.messages}) == [0, 1, 2, 3]


def test_no_rank_raising_the_check_is_taken_for_the_cause() -> None:
    """Every rank raised RuntimeError: before, each was read as its own code failing."""
    report = report_of(MISMATCH)
    assert not [f for f in report.findings if f.kind == FindingKind.FIRST_FAILURE]


@pytest.mark.parametrize("name", [MISMATCH, STALL])
def test_without_the_lines_the_verdict_is_what_it_was(name: str, tmp_path: Path) -> None:
    """The dumps alone (the sidecars and logs hold torch's messages): cannot tell, as before
    they were read (every recorded op finished; the wrapper's send/recv are not recorded)."""
    report = analyze(_only(name, _dumps, tmp_path))
    assert (report.verdict, report.culprit_ranks) == (Verdict.CANNOT_TELL, ())
    assert [f.code for f in report.findings] == ["FR012"]


def _with_logs_of(*ranks: int) -> Callable[[Path], bool]:
    """The dumps and the stderr.log of ``ranks`` (torchrun --log-dir's)."""
    logs = tuple(f"attempt_0/{r}/stderr.log" for r in ranks)
    return lambda rel: _dumps(rel) or rel.as_posix().endswith(logs)


def test_one_ranks_message_alone_names_no_one(tmp_path: Path) -> None:
    """Rank 0's log alone shows two ranks' calls of four: the other two would decide it."""
    report = analyze(_only(MISMATCH, _with_logs_of(0), tmp_path))
    assert (report.verdict, report.culprit_ranks) == (Verdict.CANNOT_TELL, ())
    (f,) = [f for f in report.findings if isinstance(f.detail, SaidMismatch)]
    assert isinstance(f.detail, SaidMismatch) and f.detail.basis == "undecided"


def test_two_ranks_messages_name_the_culprit(tmp_path: Path) -> None:
    """Ranks 2 and 3 each compared rank 0 before rank 1: three calls of four alike."""
    report = analyze(_only(MISMATCH, _with_logs_of(2, 3), tmp_path))
    assert (report.verdict, report.culprit_ranks) == (Verdict.DESYNC, (1,))


def test_the_wrappers_monitored_barrier_names_the_rank_that_never_came() -> None:
    report = report_of(STALL)
    assert (report.verdict, report.culprit_ranks) == (Verdict.HANG, (2,))
    (f,) = [f for f in report.findings if isinstance(f.detail, NamedByError)]
    assert f.culprit_ranks == (2,) and 0 in f.waiting_ranks


def test_glooss_size_check_is_said_and_names_no_one() -> None:
    name = "size_abort__exception"
    report = analyze(TREE / name)
    assert (str(report.verdict), list(report.culprit_ranks)) == (
        MANIFEST[name]["expect"]["verdict"],
        MANIFEST[name]["expect"]["culprit_ranks"],
    )
    (f,) = [f for f in report.findings if isinstance(f.detail, GlooSizeHint)]
    assert f.kind == FindingKind.SIZE_MISMATCH and f.culprit_ranks == ()
    assert f.detail.received is not None and f.detail.expected is not None
    assert f.detail.received > f.detail.expected


@pytest.mark.parametrize("name", [MISMATCH, STALL, "size_abort__exception"])
def test_every_format_says_it(name: str) -> None:
    report = analyze(TREE / name)
    for render in (render_text, render_markdown, render_html, render_json):
        out = render(report)
        assert "#None" not in out and "at #None" not in out
    text = render_text(report)
    if name == MISMATCH:
        assert "rank 1 called a different collective: broadcast where 3 other ranks called " in (
            " ".join(text.split())
        )
        # rank 1's call site, as its traceback gives it, in the next steps
        (site,) = {f.where for f in report.timeline if f.rank == 1 and f.where}
        assert site is not None and "prog_detail_mismatch" in site
        assert f"rank 1 at {site}" in " ".join(text.split())
    jsonschema = pytest.importorskip("jsonschema")
    from frtrace.report.json_schema import report_schema

    jsonschema.Draft202012Validator(report_schema()).validate(json.loads(render_json(report)))
