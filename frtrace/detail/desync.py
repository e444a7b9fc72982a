"""The typed evidence of the desync findings (FR002-FR004, FR011, FR003 on all_to_all splits)
and of the cross-group deadlocks (FR007, FR006 from a send/recv cycle)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from frtrace.detail.values import GroupRef, OpSignature

__all__ = [
    "CycleStep",
    "Deadlock",
    "DecidedBy",
    "Mismatch",
    "OrderConflict",
    "P2PPost",
    "PatternBroken",
    "RankSignature",
    "SplitMismatch",
    "SplitPair",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RankSignature:
    """What one rank called."""

    rank: int
    sig: OpSignature


@dataclass(frozen=True, slots=True, kw_only=True)
class Mismatch:
    """FR002-FR004, FR011: members called different things at one (group, seq)."""

    culprits: tuple[int, ...]
    waiting: tuple[int, ...]  # the majority (empty: none)
    differs_in: Literal["op", "sizes", "dtypes"]
    sides: tuple[RankSignature, ...]  # the reference and each culprit, by rank
    reference: int  # the rank whose signature is the expected one
    recorded: int  # members that recorded the seq
    group_size: int
    # how the majority was decided: by count, by the op's size rule, by sibling groups;
    # none (every side named), or none while members without a dump would decide it
    # (``undecided``: ``culprits`` are the candidates, the finding names no one)
    basis: Literal["majority", "size_rule", "siblings", "no_majority", "undecided"]
    backers: int = 0  # members of sibling groups that did what the majority did
    shift: int | None = None  # FR011: >0 skipped this many collectives, <0 made extra calls
    later: int = 0  # later seqs of the group that disagree on the same ranks
    unseen: tuple[int, ...] = ()  # undecided: the members without a dump that would settle it


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitPair:
    """All_to_all: ``sender`` sends ``sends`` elements to ``receiver``, which expects
    ``expects`` from it."""

    sender: int
    receiver: int
    sends: int
    expects: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitMismatch:
    """FR003 on all_to_all split sizes: the mismatched pairs (the first few), and how many."""

    culprits: tuple[int, ...]
    pairs: tuple[SplitPair, ...]
    total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleStep:
    """A rank of a deadlock: the op it is blocked in, and whom it waits for."""

    rank: int
    op: str
    seq: int | None
    group: GroupRef
    waits_for: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderConflict:
    """Two ops of two groups that ranks entered in opposite orders."""

    first_here: tuple[int, ...]  # ranks that entered this one first
    seq_here: int
    group_here: GroupRef
    first_there: tuple[int, ...]
    seq_there: int
    group_there: GroupRef


@dataclass(frozen=True, slots=True, kw_only=True)
class DecidedBy:
    """How a deadlock's deviators were told: a vote (``fewer`` against ``more``), their order at
    the previous step, along the cycle, one op moved early, or each rank's habit."""

    how: Literal["majority", "previous_step", "cycle_history", "early_movers", "habit"]
    fewer: int = 0
    more: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Deadlock:
    """FR007: ranks wait on each other in a cycle across groups."""

    component: tuple[int, ...]
    deviators: tuple[int, ...]  # the ranks that changed the order (empty: not decided)
    decided_by: tuple[DecidedBy, ...]
    steps: tuple[CycleStep, ...]
    conflicts: tuple[OrderConflict, ...]
    held: int  # more ranks that wait on them


@dataclass(frozen=True, slots=True, kw_only=True)
class P2PPost:
    """A rank blocked in a send or recv with its peer."""

    rank: int
    posted: str
    peer: int | None
    group: GroupRef


@dataclass(frozen=True, slots=True, kw_only=True)
class PatternBroken:
    """FR006 from a send/recv cycle: the culprits posted the wrong direction of their
    repeating pattern."""

    broke: tuple[P2PPost, ...]  # the culprits
    component: tuple[int, ...]
    held: int
    blocked: tuple[P2PPost, ...]  # each rank of the cycle
