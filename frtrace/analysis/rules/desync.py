"""Members that called different things at the same (group, seq): op, sizes, dtypes, a shifted
sequence (``analysis.mismatch``), and all_to_all split sizes (``analysis.alltoall``)."""

from __future__ import annotations

from frtrace.analysis.alltoall import split_mismatches
from frtrace.analysis.facts import Facts
from frtrace.analysis.mismatch import find_mismatches
from frtrace.model import Finding

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    found = find_mismatches(facts.dumps, facts.membership, facts.matched)
    return found + split_mismatches(facts.dumps, facts.membership, facts.matched)
