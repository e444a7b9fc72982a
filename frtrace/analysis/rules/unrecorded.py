"""Ops the recorder counted but did not write (Gloo's send/recv): a rank blocked in one
cannot be seen in the entries."""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.analysis.unrecorded import unrecorded_finding
from frtrace.model import Finding

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    found = unrecorded_finding(facts.membership, dict(facts.unrecorded))
    return [] if found is None else [found]
