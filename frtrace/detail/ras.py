"""What NCCL RAS's answers beside the dumps say of the job (``analysis.ras``): notes
(``Report.data_notes``) and its disagreement with the dumps (``Report.disagreements``). The
ranks, communicators and counts only; ``report.words_ras`` says them.

A communicator's ranks are the job's ranks only where RAS's processes could be matched to
them (``job_ranks``): else they are the communicator's own numbers, said so, never a rank of
the job.
"""

from __future__ import annotations

from dataclasses import dataclass

from frtrace.detail.values import GroupRef

__all__ = ["RasCommNote", "RasRead", "RasRunning", "RasSkew"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RasSkew:
    """One NCCL function that a communicator's ranks launched different numbers of times."""

    function: str  # "AllReduce"
    counts: tuple[tuple[int, tuple[int, ...]], ...]  # (launched, ranks), fewest first


@dataclass(frozen=True, slots=True, kw_only=True)
class RasRead:
    """NCCL RAS's answers were read: which, and what they add to the dumps."""

    files: tuple[str, ...]
    nccl_version: str | None
    comms: int  # communicators RAS listed (each once, however many answers list it)
    healthy: int  # of those, RUNNING with every rank answering and no error, in every answer
    unmatched: int  # whose ranks could not be matched to the job's
    hosts: tuple[int, ...]  # ranks whose host and pid only RAS gave
    dead: tuple[int, ...]  # ranks whose process RAS declared dead (its monitor's events)
    dead_processes: tuple[tuple[str, int], ...] = ()  # (host, pid) declared dead, no rank known
    more: int = 0  # communicators with something to say beyond those noted


@dataclass(frozen=True, slots=True, kw_only=True)
class RasCommNote:
    """One communicator of which RAS says something: ranks it cannot reach, errors, states
    other than RUNNING, launch counts that differ between its ranks."""

    hash: str  # "0xae94423cfbb2ef4a"
    size: int
    group: GroupRef | None  # the job's group with exactly its ranks (None: not known)
    job_ranks: bool  # the ranks below are the job's (else the communicator's own)
    dead: tuple[int, ...] = ()  # considered dead (unreachable for a minute: for good)
    unresponsive: tuple[int, ...] = ()  # not reached while RAS collected, never answered
    errors: tuple[int, ...] = ()  # an init or async error
    states: tuple[str, ...] = ()  # the states its ranks reported, where not all RUNNING
    skew: tuple[RasSkew, ...] = ()
    waiting: tuple[int, ...] = ()  # of the dead and unresponsive: ranks the dumps show waiting
    behind_named: bool = False  # the ranks behind in every count are the report's culprits


@dataclass(frozen=True, slots=True, kw_only=True)
class RasRunning:
    """RAS says a communicator (or, ``hash`` None, every one it lists) is RUNNING, every rank
    answering, no error, while the dumps show ``rank``'s ``op`` #``seq`` of ``group`` pending:
    RAS watches that processes answer, not that collectives complete (NVIDIA/nccl#1730)."""

    hash: str | None
    group: GroupRef
    rank: int
    op: str
    seq: int
