"""The typed evidence of the desync findings (FR002-FR004, FR011, FR003 on all_to_all splits;
the same codes from torch's own checks: its DETAIL collective check, Gloo's size check) and of
the cross-group deadlocks (FR007, FR006 from a send/recv cycle)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from frtrace.detail.values import GroupRef, OpSignature
from frtrace.evidence.model import Call, Failure

__all__ = [
    "CycleStep",
    "Deadlock",
    "DecidedBy",
    "GlooSizeHint",
    "Mismatch",
    "OrderConflict",
    "P2PPost",
    "PatternBroken",
    "RankSignature",
    "SaidMismatch",
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
    basis: Literal["majority", "size_rule", "siblings", "receiver", "no_majority", "undecided"]
    backers: int = 0  # members of sibling groups that did what the majority did
    # receiver: Gloo aborted (rank, received bytes, expected bytes), a member without an entry
    # at the seq: its op is the majority's side (its bytes are to the other's as expected to
    # received)
    receiver: tuple[int, int, int] | None = None
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


@dataclass(frozen=True, slots=True, kw_only=True)
class SaidMismatch:
    """FR002-FR004, FR011 from torch's own collective check (``TORCH_DISTRIBUTED_DEBUG=
    DETAIL``): before each collective every rank compares its call with every other's and
    raises on a difference, naming itself and the first rank that differs. What each rank
    called is read from those messages (and from torch's order of comparing: the ranks
    before the one named called what the reporter did), the majority is the expected call."""

    culprits: tuple[int, ...]  # the ranks whose call is not the majority's (none: every side)
    agreeing: tuple[int, ...]  # the majority (empty: none)
    differs_in: Literal["op", "sizes", "dtypes", "seq"]
    sides: tuple[Call, ...]  # the majority's call, then each culprit's; ranks the job's
    reference: int | None  # a rank of the majority (None: no majority)
    shown: int  # ranks whose call the messages show
    group_size: int  # the ranks of the op's process group
    # "majority": more than half the group called one thing; "no_majority": every rank's
    # call is shown and none has more than half (each side named); "undecided": the ranks
    # not shown would decide it (none named)
    basis: Literal["majority", "no_majority", "undecided"]
    messages: tuple[Failure, ...]  # torch's messages it rests on (a few)


@dataclass(frozen=True, slots=True, kw_only=True)
class GlooSizeHint:
    """FR003 from Gloo's size check alone: a rank received more bytes than its op expected
    ("Is there a distributed collective mismatch in your code?"); the sender is not said."""

    receivers: tuple[int, ...]  # the ranks Gloo aborted (empty: the lines name none)
    received: int | None  # bytes received, and expected, where the line says
    expected: int | None
    messages: tuple[Failure, ...]  # the lines it rests on (a few)
    # every other member of the group, each with a dump in one and the same op: the sender was
    # one of them, so the receiver (named) called another op or size
    others: tuple[int, ...] = ()
