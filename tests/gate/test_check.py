"""Expectations (frtrace.gate.check) and the pytest helpers built on them (frtrace.testing)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from frtrace.gate.check import (
    ExpectationError,
    compare,
    expectation_from_report,
    validate_expectation,
)
from frtrace.pipeline import analyze
from frtrace.testing import assert_culprits, assert_expected, assert_healthy
from tests.conftest import FIXTURES, GLOO

HANG = GLOO / "never_joins"


def test_an_empty_expectation_always_matches() -> None:
    """No keys, nothing checked."""
    assert compare(analyze(HANG), validate_expectation({})) == []


def test_rank_lists_accept_lists_and_range_strings() -> None:
    """[0, 1, 3] and "0-1,3" mean the same; "none" is no ranks."""
    a = validate_expectation({"victim_ranks": [3, 0, 1]})
    b = validate_expectation({"victim_ranks": "0-1,3"})
    assert a == b == {"victim_ranks": (0, 1, 3)}
    assert validate_expectation({"culprit_ranks": "none"}) == {"culprit_ranks": ()}


def test_verdict_may_be_a_list_of_accepted_verdicts() -> None:
    """["hang", "desync"] accepts either."""
    expect = validate_expectation({"verdict": ["desync", "hang"]})
    assert compare(analyze(HANG), expect) == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "expected a JSON object"),
        ({"culprit": [1]}, "unknown key(s) culprit"),
        ({"verdict": "stuck"}, "expected one of healthy"),
        ({"culprit_ranks": "2-x"}, "culprit_ranks"),
        ({"healthy": "yes"}, "expected true or false"),
        ({"findings": [{"code": "FR001", "rank": 2}]}, "findings[0]: unknown key(s) rank"),
        ({"findings": [{"seq": "12"}]}, "findings[0].seq: expected an integer"),
    ],
)
def test_invalid_expectations_name_the_key(raw: object, message: str) -> None:
    """A typo in an expectation is an error naming the key, not a silent pass."""
    with pytest.raises(ExpectationError, match=re.escape(message)):
        validate_expectation(raw)


def test_findings_match_on_the_keys_given() -> None:
    """A finding pattern matches by code, culprits, group (name or description) and seq."""
    report = analyze(HANG)
    seq = report.findings[0].seq
    good = {"findings": [{"code": "FR001", "culprit_ranks": [2], "group": "default_pg"}]}
    assert compare(report, validate_expectation(good)) == []
    bad = {"findings": [{"code": "FR001", "seq": (seq or 0) + 100}]}
    (diff,) = compare(report, validate_expectation(bad))
    assert diff.field == "findings" and "FR001 culprits 2" in diff.actual


def test_expectation_from_report_round_trips_through_json() -> None:
    """What --write records, the same analysis meets."""
    for scenario in ("mesh_stall", "healthy", "late_rank", "opposite_order"):
        report = analyze(GLOO / scenario)
        recorded = json.loads(json.dumps(expectation_from_report(report)))
        assert compare(report, validate_expectation(recorded)) == [], scenario


def test_assert_culprits_passes_and_returns_the_report() -> None:
    """assert_culprits returns the Report for more checks."""
    report = assert_culprits(HANG, [2], verdict="hang")
    assert report.victim_ranks == (0, 1, 3)


def test_assert_culprits_fails_with_every_difference() -> None:
    """A wrong culprit: AssertionError listing the difference and the findings."""
    with pytest.raises(AssertionError) as info:
        assert_culprits(HANG, "3")
    text = str(info.value)
    assert "culprit_ranks: expected 3, got 2" in text
    assert "[FR001] rank 2 never joined" in text


def test_assert_healthy(tmp_path: Path) -> None:
    """Healthy dumps pass; a hang fails; a partial set fails unless allowed."""
    assert_healthy(GLOO / "healthy")
    with pytest.raises(AssertionError, match="healthy: expected healthy, got hang"):
        assert_healthy(HANG)
    for src in sorted((FIXTURES / "nccl" / "healthy" / "2.10-pickle").iterdir())[:7]:
        shutil.copy(src, tmp_path / src.name)
    with pytest.raises(AssertionError, match="no readable dump for ranks 7"):
        assert_healthy(tmp_path)
    assert_healthy(tmp_path, allow_partial=True)


def test_assert_expected_reads_an_expectation_file(tmp_path: Path) -> None:
    """An expectation file kept next to incident dumps."""
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"verdict": "hang", "culprit_ranks": [5]}))
    assert_expected(GLOO / "mesh_stall", expect)
