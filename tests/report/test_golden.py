"""The text, JSON and markdown reports of every fixture scenario equal their golden files.

Golden files change only when asked:
``python3 -m pytest tests/report/test_golden.py --update-golden``, then review the diff like code.
They pin the report layout and the JSON schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

from frtrace.model import Report
from frtrace.pipeline import analyze
from frtrace.report.json import SCHEMA_VERSION, render_json
from frtrace.report.markdown import render_markdown
from frtrace.report.text import render_text
from tests.conftest import FIXTURES, GLOO

GOLDEN = FIXTURES / "golden"
STACKS = FIXTURES / "stacks"  # real hung jobs collected with `frtrace collect` (with stacks)
SCENARIOS = sorted(p.name for p in GLOO.iterdir() if p.is_dir() and any(p.iterdir()))
# every set with golden reports: (its directory, the golden files' stem)
GOLDEN_SETS = {s: (GLOO / s, s) for s in SCENARIOS} | {
    f"stacks/{p.name}": (p, f"stacks_{p.name}") for p in sorted(STACKS.iterdir()) if p.is_dir()
}
RENDERERS: dict[str, Callable[[Report], str]] = {
    "txt": render_text,
    "json": render_json,
    "md": render_markdown,
}


@cache
def report_of(scenario: str) -> Report:
    return analyze(GOLDEN_SETS[scenario][0])


@pytest.mark.parametrize("ext", sorted(RENDERERS))
@pytest.mark.parametrize("scenario", sorted(GOLDEN_SETS))
def test_report_matches_golden(scenario: str, ext: str, update_golden: bool) -> None:
    """The report equals tests/fixtures/golden/<stem>.<ext>."""
    actual = RENDERERS[ext](report_of(scenario))
    assert str(FIXTURES.resolve()) not in actual  # never the path of the dumps on this machine
    golden = GOLDEN / f"{GOLDEN_SETS[scenario][1]}.{ext}"
    if update_golden:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(actual, encoding="utf-8")
    assert golden.exists(), f"no golden file {golden.name}: run pytest --update-golden"
    assert actual == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_report_is_deterministic(scenario: str) -> None:
    """Two analyses of the same dumps render the same bytes."""
    assert render_text(analyze(GLOO / scenario)) == render_text(report_of(scenario))


def test_every_golden_json_has_the_current_schema_version() -> None:
    """Golden JSON files carry schema_version and the documented top-level fields."""
    documented = {
        "schema_version", "verdict", "has_problems", "headline", "fingerprint", "culprit_ranks",
        "suspected_ranks", "victim_ranks", "named_ranks", "world_size", "ranks_loaded",
        "ranks_missing", "ranks_unreadable", "selection", "findings", "stragglers", "data_notes",
        "next_steps", "groups", "progress", "wait_edges",
    }  # fmt: skip
    files = sorted(f for f in GOLDEN.glob("*.json") if not f.stem.startswith("stacks_"))
    assert {f.stem for f in files} == set(SCENARIOS)  # stacks_*: test_golden_stacks.py
    for path in files:
        data = json.loads(path.read_text())
        assert data["schema_version"] == SCHEMA_VERSION
        assert set(data) == documented, path.name


def test_the_docs_list_every_finding_code() -> None:
    """The finding-code table of docs/json-report.md is frtrace.model.KIND_CODES, row for row."""
    from frtrace.model import KIND_CODES

    page = (Path(__file__).parents[2] / "docs" / "json-report.md").read_text()
    rows = {
        line.split(" | ")[0].lstrip("| ") for line in page.splitlines() if line.startswith("| FR")
    }
    assert rows == set(KIND_CODES.values())
    for kind, code in KIND_CODES.items():
        assert f"| {code} | `{kind}` |" in page, code
