"""What the user reads: the words of a report say what is true, once, without Python reprs."""

from __future__ import annotations

from functools import cache

from frtrace.model import Report
from frtrace.pipeline import analyze
from frtrace.report.text import render_text
from tests.conftest import GLOO


@cache
def _report(scenario: str) -> Report:
    return analyze(GLOO / scenario)


def test_dtypes_are_names_not_python_lists() -> None:
    """``dtypes=Float``, never ``dtypes=['Float']``."""
    text = render_text(_report("size_mismatch"))
    assert "dtypes=Float state=" in text
    assert "['" not in text and '["' not in text
