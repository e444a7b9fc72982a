"""Ops every member entered that did not finish: the cause is below the Flight Recorder."""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.analysis.stuck import stuck_findings
from frtrace.model import Finding

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    return stuck_findings(
        facts.dumps, facts.membership, facts.matched, facts.waits, facts.moments.running
    )
