"""Does an analysis say what we expect? The CI gate of `frtrace check` and `frtrace.testing`.

An expectation is a small JSON object; every key is optional and only the keys given are
checked, so an expectation says as much or as little as a team cares about::

    {
      "verdict": "hang",                  # or a list of accepted verdicts
      "culprit_ranks": [5],               # or a range string: "4-5"; [] = nobody blamed
      "suspected_ranks": [],
      "victim_ranks": "0-4,6-7",
      "stragglers": [],
      "ranks_missing": [],
      "healthy": false,                   # true: no problem (stragglers allowed)
      "findings": [                       # each must match some finding, on the keys given
        {"code": "FR001", "culprit_ranks": [5], "group": "2", "seq": 7, "op": "all_reduce"}
      ]
    }

``group`` matches a group's name, description or label.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frtrace.base.ranges import format_ranks, parse_ranks
from frtrace.errors import ExpectationError
from frtrace.model import Finding, Report, Severity, Verdict

__all__ = [
    "EXPECT_KEYS",
    "FINDING_KEYS",
    "Difference",
    "ExpectationError",
    "compare",
    "expectation_from_flags",
    "expectation_from_report",
    "load_expectation",
    "validate_expectation",
]

EXPECT_KEYS = (
    "verdict",
    "culprit_ranks",
    "suspected_ranks",
    "victim_ranks",
    "stragglers",
    "ranks_missing",
    "healthy",
    "findings",
)
FINDING_KEYS = ("code", "kind", "culprit_ranks", "waiting_ranks", "group", "seq", "op")
_RANK_KEYS = ("culprit_ranks", "suspected_ranks", "victim_ranks", "stragglers", "ranks_missing")


@dataclass(frozen=True, slots=True, kw_only=True)
class Difference:
    """One way the analysis differs from the expectation."""

    field: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.field}: expected {self.expected}, got {self.actual}"


def _ranks(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, str):
        if value.strip().lower() in ("", "none", "-"):
            return ()
        try:
            return parse_ranks(value)
        except ValueError as exc:
            raise ExpectationError(f"{where}: {exc}") from None
    if isinstance(value, list) and all(
        isinstance(r, int) and not isinstance(r, bool) for r in value
    ):
        return tuple(sorted(set(value)))
    raise ExpectationError(f'{where}: expected a list of ranks or a range string like "0-3,8"')


def validate_expectation(raw: Any, *, source: str = "expectation") -> dict[str, Any]:
    """Check the keys and value types; returns the expectation with rank lists normalised."""
    if not isinstance(raw, Mapping):
        raise ExpectationError(
            f"{source}: expected a JSON object with keys {', '.join(EXPECT_KEYS)}"
        )
    _reject_unknown(raw, EXPECT_KEYS, source)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"{source}: {key}"
        if key in _RANK_KEYS:
            out[key] = _ranks(value, where)
        elif key == "verdict":
            values = [value] if isinstance(value, str) else value
            known = [str(v) for v in Verdict]
            if not isinstance(values, list) or not all(v in known for v in values):
                raise ExpectationError(f"{where}: expected one of {', '.join(known)} (or a list)")
            out[key] = tuple(values)
        elif key == "healthy":
            if not isinstance(value, bool):
                raise ExpectationError(f"{where}: expected true or false")
            out[key] = value
        else:
            if not isinstance(value, list):
                raise ExpectationError(f"{where}: expected a list of finding objects")
            out[key] = [_finding_pattern(f, f"{where}[{i}]") for i, f in enumerate(value)]
    return out


def _reject_unknown(raw: Mapping[str, Any], keys: Sequence[str], where: str) -> None:
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise ExpectationError(
            f"{where}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(keys)}"
        )


def _finding_pattern(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ExpectationError(f"{where}: expected an object")
    _reject_unknown(raw, FINDING_KEYS, where)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("culprit_ranks", "waiting_ranks"):
            out[key] = _ranks(value, f"{where}.{key}")
        elif key == "seq":
            if not isinstance(value, int) or isinstance(value, bool):
                raise ExpectationError(f"{where}.seq: expected an integer")
            out[key] = value
        else:
            if not isinstance(value, str):
                raise ExpectationError(f"{where}.{key}: expected a string")
            out[key] = value
    return out


def load_expectation(path: Path) -> dict[str, Any]:
    """Read and validate an expectation file."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExpectationError(f"{path}: no such expectation file") from None
    except OSError as exc:
        raise ExpectationError(f"{path}: cannot read it ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ExpectationError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    return validate_expectation(raw, source=str(path))


def _fmt(ranks: Sequence[int]) -> str:
    return format_ranks(ranks) if ranks else "none"


def _matches(f: Finding, pattern: Mapping[str, Any]) -> bool:
    for key, want in pattern.items():
        if key == "code" and f.code != want:
            return False
        if key == "kind" and str(f.kind) != want:
            return False
        if key == "culprit_ranks" and f.culprit_ranks != want:
            return False
        if key == "waiting_ranks" and f.waiting_ranks != want:
            return False
        if key == "seq" and f.seq != want:
            return False
        if key == "op" and f.op != want:
            return False
        if key == "group" and (
            f.group is None or want not in (f.group.name, f.group.desc, f.group.label)
        ):
            return False
    return True


def _describe(pattern: Mapping[str, Any]) -> str:
    parts = []
    for key, value in pattern.items():
        shown = _fmt(value) if isinstance(value, tuple) else value
        parts.append(f"{key}={shown}")
    return "{" + ", ".join(parts) + "}"


def compare(report: Report, expect: Mapping[str, Any]) -> list[Difference]:
    """Every difference between ``report`` and a validated expectation; [] when it matches."""
    diffs: list[Difference] = []
    if "verdict" in expect and str(report.verdict) not in expect["verdict"]:
        diffs.append(
            Difference(
                field="verdict", expected=" or ".join(expect["verdict"]), actual=str(report.verdict)
            )
        )
    if "healthy" in expect and expect["healthy"] == report.has_problems:
        diffs.append(
            Difference(
                field="healthy",
                expected="healthy" if expect["healthy"] else "a problem",
                actual=f"{report.verdict}"
                + (f" (culprits {_fmt(report.culprit_ranks)})" if report.culprit_ranks else ""),
            )
        )
    actual_ranks = {
        "culprit_ranks": report.culprit_ranks,
        "suspected_ranks": report.suspected_ranks,
        "victim_ranks": report.victim_ranks,
        "stragglers": tuple(sorted(s.rank for s in report.stragglers)),
        "ranks_missing": tuple(sorted(set(report.ranks_missing) | set(report.ranks_unreadable))),
    }
    for key in _RANK_KEYS:
        if key in expect and tuple(expect[key]) != actual_ranks[key]:
            diffs.append(
                Difference(field=key, expected=_fmt(expect[key]), actual=_fmt(actual_ranks[key]))
            )
    for pattern in expect.get("findings", []):
        if not any(_matches(f, pattern) for f in report.findings):
            have = "; ".join(
                f"{f.code} culprits {_fmt(f.culprit_ranks)}"
                + (f" {f.group.label}" if f.group else "")
                + (f" #{f.seq}" if f.seq is not None else "")
                for f in report.findings[:5]
            )
            diffs.append(
                Difference(
                    field="findings",
                    expected=f"a finding {_describe(pattern)}",
                    actual=have or "no findings",
                )
            )
    return diffs


def expectation_from_report(report: Report) -> dict[str, Any]:
    """An expectation that the same analysis meets: review it, prune it, commit it."""
    findings = [
        {
            k: v
            for k, v in {
                "code": f.code,
                "culprit_ranks": list(f.culprit_ranks),
                "group": f.group.label if f.group else None,
                "seq": f.seq,
                "op": f.op,
            }.items()
            if v is not None
        }
        for f in report.findings
        if f.severity >= Severity.WARNING
    ]
    return {
        "verdict": str(report.verdict),
        "culprit_ranks": list(report.culprit_ranks),
        "suspected_ranks": list(report.suspected_ranks),
        "victim_ranks": list(report.victim_ranks),
        "stragglers": sorted(s.rank for s in report.stragglers),
        "ranks_missing": sorted(set(report.ranks_missing) | set(report.ranks_unreadable)),
        "findings": findings,
    }


def expectation_from_flags(
    *,
    culprits: str | None = None,
    healthy: bool = False,
    verdict: str | None = None,
    stragglers: str | None = None,
) -> dict[str, Any]:
    """The expectation the ``--expect-*`` flags describe (validated; empty when none given)."""
    raw: dict[str, Any] = {}
    if culprits is not None:
        raw["culprit_ranks"] = culprits
    if healthy:
        raw["healthy"] = True
    if verdict is not None:
        raw["verdict"] = verdict
    if stragglers is not None:
        raw["stragglers"] = stragglers
    return validate_expectation(raw, source="--expect-*")
