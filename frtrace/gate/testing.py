"""Assertions for a team's own tests: a directory of dumps is healthy, or names these culprits.

Keep the dumps of a past incident next to a test, and the test fails the day a change to the
training code or to frtrace changes the answer::

    from frtrace.gate.testing import assert_culprits, assert_healthy

    def test_incident_2024_05_rank5_hang():
        assert_culprits("incidents/2024-05-rank5", [5], verdict="hang")

    def test_smoke_run_dumps_are_healthy(tmp_path):
        run_smoke_job(dump_dir=tmp_path)          # e.g. with frtrace.recorder
        assert_healthy(tmp_path)

Each helper returns the ``Report`` for further checks and raises ``AssertionError`` with every
difference listed. pytest is not imported; these work under any test runner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from frtrace.base.ranges import format_ranks
from frtrace.gate.check import compare, load_expectation, validate_expectation
from frtrace.gate.exitcodes import incomplete_ranks
from frtrace.model import Report
from frtrace.pipeline import analyze
from frtrace.report.wording import summary

__all__ = ["assert_culprits", "assert_expected", "assert_healthy"]


def _fail(directory: Path, report: Report, problems: list[str]) -> AssertionError:
    lines = "\n".join(f"  {p}" for p in problems)
    findings = "\n".join(f"  [{f.code}] {summary(f)}" for f in report.findings[:10])
    return AssertionError(
        f"{directory}: the analysis differs from the expectation:\n{lines}\n"
        f"verdict {report.verdict}; findings:\n{findings or '  none'}"
    )


def assert_expected(
    directory: str | Path,
    expect: Mapping[str, Any] | str | Path,
    *,
    allow_partial: bool = True,
) -> Report:
    """The analysis of ``directory`` meets ``expect`` (a dict or an expectation file).

    The keys are those of ``frtrace check`` (see ``frtrace.gate.check``). With
    ``allow_partial=False``, ranks without a readable dump fail the assertion as well.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this one
    path = Path(directory)
    if isinstance(expect, (str, Path)):
        wanted = load_expectation(Path(expect))
    else:
        wanted = validate_expectation(expect)
    report = analyze(path)
    problems = [str(d) for d in compare(report, wanted)]
    if not allow_partial and incomplete_ranks(report):
        problems.append(f"no readable dump for ranks {format_ranks(incomplete_ranks(report))}")
    if problems:
        raise _fail(path, report, problems)
    return report


def assert_healthy(directory: str | Path, *, allow_partial: bool = False) -> Report:
    """No hang, desync or stuck ranks (stragglers are allowed), and every rank dumped."""
    __tracebackhide__ = True
    return assert_expected(directory, {"healthy": True}, allow_partial=allow_partial)


def assert_culprits(
    directory: str | Path,
    ranks: Iterable[int] | str,
    *,
    verdict: str | None = None,
    allow_partial: bool = True,
) -> Report:
    """The analysis names exactly ``ranks`` (a list, or ``"4-5"``) as culprits."""
    __tracebackhide__ = True
    expect: dict[str, Any] = {"culprit_ranks": ranks if isinstance(ranks, str) else list(ranks)}
    if verdict is not None:
        expect["verdict"] = verdict
    return assert_expected(directory, expect, allow_partial=allow_partial)
