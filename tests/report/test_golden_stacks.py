"""Golden reports of a real hung job collected with ``frtrace collect`` (dumps, recorder
sidecars, py-spy text): the culprit's place and the stack classes in every format."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import pytest

from frtrace.analysis.findings import Report
from frtrace.pipeline import analyze
from frtrace.report.html import render_html
from frtrace.report.json import render_json
from frtrace.report.markdown import render_markdown
from frtrace.report.text import render_text
from tests.conftest import FIXTURES

STACKS = FIXTURES / "stacks"
GOLDEN = FIXTURES / "golden"
SCENARIOS = sorted(p.name for p in STACKS.iterdir() if p.is_dir())
RENDERERS: dict[str, Callable[[Report], str]] = {
    "txt": render_text,
    "json": render_json,
    "md": render_markdown,
}


@cache
def report_of(scenario: str) -> Report:
    return analyze(STACKS / scenario)


@pytest.mark.parametrize("ext", sorted(RENDERERS))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_stacks_report_matches_golden(scenario: str, ext: str, update_golden: bool) -> None:
    """The report equals tests/fixtures/golden/stacks_<scenario>.<ext>."""
    actual = RENDERERS[ext](report_of(scenario))
    assert str(STACKS.resolve()) not in actual
    golden = GOLDEN / f"stacks_{scenario}.{ext}"
    if update_golden:
        golden.write_text(actual, encoding="utf-8")
    assert golden.exists(), f"no golden file {golden.name}: run pytest --update-golden"
    assert actual == golden.read_text(encoding="utf-8")


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
