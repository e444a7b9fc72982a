"""The JSON report's JSON Schema: every golden report validates; its enums are the code's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frtrace.model import Confidence, FindingKind, Verdict
from frtrace.report.json import SCHEMA_VERSION
from frtrace.report.json_schema import report_schema

jsonschema = pytest.importorskip("jsonschema")
GOLDEN = Path(__file__).parents[1] / "fixtures" / "golden"


def test_the_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(report_schema())


@pytest.mark.parametrize("golden", sorted(p.name for p in GOLDEN.glob("*.json")))
def test_every_golden_report_validates(golden: str) -> None:
    """Each golden JSON report is valid against the shipped schema."""
    report = json.loads((GOLDEN / golden).read_text())
    jsonschema.Draft202012Validator(report_schema()).validate(report)


def test_a_report_with_an_unknown_field_does_not_validate() -> None:
    """The schema is exact: a field added to the report must be added to the schema too."""
    report = json.loads((GOLDEN / "never_joins.json").read_text())
    report["new_field"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, report_schema())


def test_the_schema_enums_are_the_code_enums() -> None:
    """Finding kinds, verdicts and confidences in the schema are exactly the code's."""
    schema = report_schema()
    finding = schema["$defs"]["finding"]["properties"]
    assert finding["kind"]["enum"] == [k.value for k in FindingKind]
    assert finding["confidence"]["enum"] == [c.value for c in Confidence]
    assert schema["properties"]["verdict"]["enum"] == [v.value for v in Verdict]
    assert schema["properties"]["schema_version"]["pattern"] == "^1\\.[0-9]+$"
    assert SCHEMA_VERSION.startswith("1.")


def test_the_history_enums_are_the_code_enums() -> None:
    """An attempt's verdict, leading finding kind and cause are exactly the code's."""
    from frtrace.evidence.model import FailureKind

    attempt = report_schema()["$defs"]["attempt"]["properties"]
    assert attempt["verdict"]["enum"] == [v.value for v in Verdict]
    assert attempt["kind"]["enum"] == [k.value for k in FindingKind] + [None]
    assert attempt["cause"]["enum"] == [k.value for k in FailureKind] + [None]


def test_a_report_with_a_history_validates() -> None:
    """A restarted job's report (every field of the history) is valid; a field more is not."""
    from dataclasses import replace

    from frtrace.model import History, RepeatOffender
    from frtrace.report.json import report_to_dict
    from tests.analysis.test_history import report
    from tests.report.test_words_history import NEVER

    history = History(
        this=replace(NEVER, attempt=1),
        others=(NEVER, replace(NEVER, attempt=2, later=True, kind=None, group=None)),
        left_out=(5,),
        repeats=(
            RepeatOffender(attempts=(0, 1), rank=1, hosts=("node-1",)),
            RepeatOffender(attempts=(0, 2), hosts=("node-1",), ranks=(1, 3)),
        ),
    )
    doc = report_to_dict(replace(report((1,), world=4), history=history))
    jsonschema.Draft202012Validator(report_schema()).validate(doc)
    doc["history"]["attempts"][1]["new_field"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, report_schema())
