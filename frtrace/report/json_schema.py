"""The JSON Schema of the JSON report (``report.schema.json``, shipped in the package).

``frtrace schema`` prints it; CI consumers validate ``frtrace analyze -f json`` against it.
It describes exactly this version's report (no unknown fields allowed), so tests check every
golden JSON report against it: a field added to the report without the schema fails them.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

__all__ = ["report_schema", "schema_text"]


def schema_text() -> str:
    """The schema file's text, as shipped."""
    return resources.files("frtrace.report").joinpath("report.schema.json").read_text("utf-8")


def report_schema() -> dict[str, Any]:
    """The schema as a dict (JSON Schema draft 2020-12)."""
    value: dict[str, Any] = json.loads(schema_text())
    return value
