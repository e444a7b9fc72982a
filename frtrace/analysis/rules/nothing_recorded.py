"""Dumps that hold no entry at all: no rank has recorded an op yet.

A job stuck before its first collective (a data loader at start-up, a rendezvous, a
checkpoint load), or one whose ops the recorder does not write (Gloo's send/recv: a pipeline
schedule), leaves dumps with empty buffers. That is never a healthy job's picture: something
was asked for the dumps, and nothing can be read from them. Where each rank is comes from its
stack (``stack_outlier``) or its logs (``first_failure``); this rule says the entries are mute.
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.model import Confidence, Finding, FindingKind, Severity
from frtrace.ranges import format_ranks

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    loaded = facts.dumps.loaded_ranks
    if facts.dumps.entries.num_rows or not loaded or facts.dumps.world.size <= 1:
        return []
    return [
        Finding(
            kind=FindingKind.NOTHING_RECORDED,
            severity=Severity.WARNING,
            summary=(
                f"no rank recorded any op (dumps of rank{'s' if len(loaded) > 1 else ''} "
                f"{format_ranks(loaded)} are empty): the job is stuck before its first "
                "collective, or runs only ops the recorder does not write (Gloo's send/recv)"
            ),
            culprit_ranks=(),
            waiting_ranks=(),
            confidence=Confidence.LOW,
            why="an empty ring buffer says nothing of where a rank is",
            evidence=(
                "each rank's Python stack (py-spy dump, or frtrace.recorder's sidecar) and its "
                "log say where it is",
            ),
        )
    ]
