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
