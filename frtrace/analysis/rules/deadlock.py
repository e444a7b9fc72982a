"""Ranks that wait on each other in a cycle across groups (``analysis.deadlock``)."""

from __future__ import annotations

from frtrace.analysis.deadlock import find_deadlocks
from frtrace.analysis.facts import Facts
from frtrace.model import Finding

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    return find_deadlocks(facts.dumps, facts.membership, facts.matched, facts.waits)
