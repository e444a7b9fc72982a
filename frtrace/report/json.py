"""The machine-readable report: one JSON object, versioned by ``schema_version``."""

from __future__ import annotations

import json
from typing import Any

from frtrace.findings import Finding, GroupRef, OpSignature, Report, Straggler

__all__ = ["SCHEMA_VERSION", "render_json", "report_to_dict"]

# Bump the major on a breaking change (a field removed or its meaning changed), the minor
# when fields are added.
SCHEMA_VERSION = "1.0"


def _group(g: GroupRef | None) -> dict[str, Any] | None:
    if g is None:
        return None
    return {
        "name": g.name,
        "desc": g.desc,
        "members": list(g.members),
        "membership_inferred": g.inferred,
    }


def _sig(s: OpSignature | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "op": s.op,
        "input_sizes": [list(x) for x in s.input_sizes],
        "output_sizes": [list(x) for x in s.output_sizes],
        "input_dtypes": list(s.input_dtypes),
        "output_dtypes": list(s.output_dtypes),
        "state": s.state,
        "stack": list(s.stack),
    }


def _finding(f: Finding) -> dict[str, Any]:
    return {
        "code": f.code,
        "kind": str(f.kind),
        "severity": f.severity.name.lower(),
        "summary": f.summary,
        "culprit_ranks": list(f.culprit_ranks),
        "waiting_ranks": list(f.waiting_ranks),
        "group": _group(f.group),
        "seq": f.seq,
        "op": f.op,
        "expected": _sig(f.expected),
        "actual": {str(r): _sig(s) for r, s in sorted(f.actual.items())},
        "confidence": str(f.confidence),
        "why": f.why,
        "evidence": list(f.evidence),
        "cycle": list(f.cycle),
    }


def _straggler(s: Straggler) -> dict[str, Any]:
    return {
        "rank": s.rank,
        "collectives": s.collectives,
        "last_share": s.last_share,
        "median_late_ms": s.median_late_ms,
        "groups": list(s.groups),
        "corroborated": s.corroborated,
        "note": s.note,
    }


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON-ready data."""
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": str(report.verdict),
        "culprit_ranks": list(report.culprit_ranks),
        "suspected_ranks": list(report.suspected_ranks),
        "victim_ranks": list(report.victim_ranks),
        "findings": [_finding(f) for f in report.findings],
        "stragglers": [_straggler(s) for s in report.stragglers],
        "world_size": report.world_size,
        "ranks_loaded": len(report.ranks_loaded),
        "ranks_missing": list(report.ranks_missing),
        "ranks_unreadable": list(report.ranks_unreadable),
        "data_notes": list(report.data_notes),
        "wait_edges": [{"waiter": a, "target": b, "why": k} for a, b, k in report.wait_edges],
        "groups": [_group(g) for g in report.groups],
    }


def render_json(report: Report) -> str:
    """Deterministic, indented JSON with a trailing newline."""
    return json.dumps(report_to_dict(report), indent=2, sort_keys=False) + "\n"
