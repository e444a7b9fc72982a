"""A verdict's fingerprint: a short stable hash of what was found, so that the same hang seen
twice (two attempts of a job, two incidents, two reports the stall watch wrote) is known for
one ("same hang as attempt 0").

What it hashes (``VERSION`` 1): the verdict; the finding that stands for it (the most severe
naming one of the named ranks, else the most severe worth a line): its kind, its group (name,
description and members), its op, and where the job called that op (the innermost frame of
its own code in the entries' stack: the function and the file's base name); and each rank
named as a culprit or a suspect, with that role.

What it never hashes, so that none of it changes the answer: a time of any kind (file times,
entry times, when the ranks dumped, any host's clock), a path (the folder, an archive, a
compressed file, where the job's code lies), a sequence number or count (the same hang five
seconds later, or in the next attempt at another step), the ranks that wait (more of them
give up as time passes), stragglers, the Python stack samples, a basis (evidence added later
does not make it another hang), NCCL RAS, the line of the frame (a one-line edit of the
script).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import replace
from typing import Any

from frtrace.model import Finding, NamedAs, Report, Severity
from frtrace.pystack.where import call_site

__all__ = ["VERSION", "fingerprint", "with_fingerprint"]

VERSION = 1
_ROLES = frozenset({NamedAs.CULPRIT, NamedAs.SUSPECTED})


def with_fingerprint(report: Report) -> Report:
    """``report`` with its ``fingerprint``."""
    return replace(report, fingerprint=fingerprint(report))


def fingerprint(report: Report) -> str:
    """16 hex digits of SHA-256 over what was found (see the module docstring)."""
    lead = _lead(report)
    found: dict[str, Any] = {
        "v": VERSION,
        "verdict": str(report.verdict),
        "named": sorted([n.rank, str(n.role)] for n in report.named_ranks if n.role in _ROLES),
    }
    if lead is not None:
        group = lead.group
        found["kind"] = str(lead.kind)
        found["group"] = None if group is None else [group.name, group.desc, list(group.members)]
        found["op"] = lead.op
        found["where"] = _where(lead)
    text = json.dumps(found, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _lead(report: Report) -> Finding | None:
    """The finding that stands for the verdict: the most severe naming one of its ranks, else
    the most severe worth a line (the findings are sorted, most severe first)."""
    named = set(report.culprit_ranks) | set(report.suspected_ranks)
    shown = [f for f in report.findings if f.severity >= Severity.WARNING]
    return next((f for f in shown if named & set(f.culprit_ranks)), shown[0] if shown else None)


def _where(f: Finding) -> str | None:
    """``main (train.py)``: the op's call site in the job's code, from the entries' stack (the
    majority's, else the lowest culprit's), without its folder or line."""
    stacks = [] if f.expected is None else [f.expected.stack]
    stacks += [f.actual[r].stack for r in sorted(f.actual)]
    for stack in stacks:
        site = call_site(stack)
        if site is None:
            continue
        name, _, rest = site.partition(" (")
        path = rest.removesuffix(")").rpartition(":")
        file = path[0] if path[1] and path[2].isdigit() else rest.removesuffix(")")
        return f"{name} ({posixpath.basename(file.replace(chr(92), '/'))})"
    return None
