"""The committed NCCL-format fixtures (scripts/make_nccl_fixtures.py): every format, the truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frtrace.load.tables import load_dumps
from frtrace.model import Verdict
from frtrace.pipeline import analyze
from tests.conftest import FIXTURES

NCCL = FIXTURES / "nccl"
CASES = sorted(
    (scenario.name, variant.name)
    for scenario in NCCL.iterdir()
    if scenario.is_dir()
    for variant in scenario.iterdir()
    if variant.is_dir()
)


def test_the_fixtures_cover_every_format() -> None:
    """torch 2.2's list, FR 1.4, 2.1, 2.4, 2.9 and 2.10; pickle and JSON."""
    variants = {v for _, v in CASES}
    assert variants >= {
        "2.2-pickle",
        "1.4-pickle",
        "2.1-pickle",
        "2.4-pickle",
        "2.4-json",
        "2.9-pickle",
        "2.10-pickle",
        "2.10-json",
    }


@pytest.mark.parametrize(("scenario", "variant"), CASES)
def test_fixture_verdict_matches_the_simulators_truth(scenario: str, variant: str) -> None:
    """Culprits equal the truth in every format; the healthy job is healthy."""
    truth = json.loads((NCCL / scenario / "truth.json").read_text())
    directory: Path = NCCL / scenario / variant
    dumps = load_dumps(directory)
    assert not [p for p in dumps.problems if p.fatal]
    layout = {"2.2": "list", "1.4": "1.x"}.get(variant.split("-")[0], "2.x")
    assert set(dumps.files.column("layout").to_pylist()) == {layout}
    report = analyze(directory)
    if truth["hung"]:
        assert list(report.culprit_ranks) == truth["culprit_ranks"], report.findings
        assert report.has_problems
    else:
        assert report.verdict == Verdict.HEALTHY
    assert list(report.ranks_missing) == truth["missing_ranks"]
