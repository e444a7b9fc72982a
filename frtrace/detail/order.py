"""The typed evidence of the order findings (issue 50, items 6 and 7): ranks that created
their process groups in another order (FR019), members that ran a group's ops in another
order (FR020)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from frtrace.detail.values import OpSignature

__all__ = [
    "GroupHeld",
    "GroupOrder",
    "IssuedOp",
    "Misplaced",
    "NameConflict",
    "OpOrder",
    "RankOrder",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupHeld:
    """What one rank's dump says of one group it holds: its name, its place in the rank's
    creation order (``pg_id``: the rank's own count of the groups it is a member of), its
    description, and its members where the dump records them (``()``: Gloo does not); -1: a
    group its ``pg_config`` lists that it ran nothing in (its index is not recorded)."""

    rank: int
    name: str
    pg_id: int
    desc: str | None
    members: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NameConflict:
    """One group name that ranks hold as different groups: made by different ``new_group``
    calls (another description, other members) or used for different ops at one seq."""

    name: str
    by: Literal["desc", "members", "ops"]
    held: tuple[GroupHeld, ...]  # each rank's view of it, by rank


@dataclass(frozen=True, slots=True, kw_only=True)
class Misplaced:
    """A rank whose group at creation index ``pg_id`` is what the other ranks hold at another
    index (``as_pg_id``): it created its groups in another order."""

    rank: int
    pg_id: int
    name: str  # its group's name there
    role: str  # what its group there is (its description, or the op it ran)
    expected: str  # what the majority's group at ``pg_id`` is
    majority: tuple[int, ...]  # the ranks that agree at ``pg_id``
    as_pg_id: int  # where the majority holds ``role``


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupOrder:
    """FR019: group names that ranks hold as different groups, and the ranks whose creation
    order differs from the others' (observed in their own dumps); none found: who cannot be
    told, and ``suspects`` are the ranks on every side."""

    conflicts: tuple[NameConflict, ...]
    misplaced: tuple[Misplaced, ...]
    suspects: tuple[int, ...] = ()
    # what a rank's groups are compared by: their descriptions, or the ops they ran
    basis: Literal["desc", "ops", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class IssuedOp:
    """One op of a rank at one seq, and the thread that issued it (torch 2.8+)."""

    seq: int
    sig: OpSignature
    thread: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RankOrder:
    """The ops of one order's ranks in the window, as one of them (``shown``) recorded them."""

    ranks: tuple[int, ...]
    shown: int
    ops: tuple[IssuedOp, ...]  # by seq


@dataclass(frozen=True, slots=True, kw_only=True)
class OpOrder:
    """FR020: members of a group ran the same ops at seqs ``first``..``last`` in other orders.
    ``odd``: the ranks whose order differs from the majority's (culprits), or, with no
    majority, every rank of every order (suspects)."""

    first: int
    last: int
    orders: tuple[RankOrder, ...]  # the majority's (or the largest) first
    majority: tuple[int, ...]  # () : no order has a majority
    odd: tuple[int, ...]
    threads: tuple[tuple[int, int], ...] = ()  # (rank, threads that issued ops on the group)
    unseen: tuple[int, ...] = ()  # members without a dump (their order would count)
