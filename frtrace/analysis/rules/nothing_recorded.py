"""Dumps that hold no entry at all: no rank has recorded an op yet.

A job stuck before its first collective (a data loader at start-up, a rendezvous, a
checkpoint load), or one whose ops the recorder does not write (Gloo's send/recv: a pipeline
schedule), leaves dumps with empty buffers. That is never a healthy job's picture: something
was asked for the dumps, and nothing can be read from them. Where each rank is comes from its
stack (``stack_outlier``) or its logs (``first_failure``); this rule says the entries are mute.
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.detail import NothingRecorded
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    loaded = facts.dumps.loaded_ranks
    if facts.dumps.entries.num_rows or not loaded or facts.dumps.world.size <= 1:
        return []
    return [
        Finding(
            kind=FindingKind.NOTHING_RECORDED,
            severity=Severity.WARNING,
            culprit_ranks=(),
            waiting_ranks=(),
            confidence=Confidence.LOW,
            detail=NothingRecorded(loaded=tuple(loaded)),
        )
    ]
