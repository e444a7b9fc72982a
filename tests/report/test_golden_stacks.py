"""A real hung job collected with ``frtrace collect`` (dumps, recorder sidecars, py-spy text):
the culprit's place first, and the stack tree in HTML. Its golden reports are checked with
the others in test_golden.py."""

from __future__ import annotations

from functools import cache

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
