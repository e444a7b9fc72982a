"""Waits in a running job's snapshot: ops in flight, not hangs (from the dump times)."""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.analysis.stuck import in_flight_findings
from frtrace.model import Finding

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    return in_flight_findings(facts.membership, facts.matched, facts.waits, facts.moments)
