"""What the ranks' Python stacks say of the verdict (``StackEvidence.reading``): which ranks
stand out and where, never the sentence (``report.words_stacks`` says it).

``place`` and ``places`` are stack classes' descriptions (``pystack.classes``), as the reader
wrote them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AlsoElsewhere",
    "Corroborates",
    "NoCulpritStack",
    "NothingMore",
    "NothingStandsOut",
    "SharesWaitingStack",
    "SinglesOut",
    "StackReading",
    "StacksAlone",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class NothingMore:
    """No culprit, a healthy verdict, and no stack that stands out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SinglesOut:
    """No culprit, but these ranks' stacks stand out (the first's place given)."""

    ranks: tuple[int, ...]
    place: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NothingStandsOut:
    """No culprit, and no rank's stack stands out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NoCulpritStack:
    """No stack sample for any culprit."""

    culprits: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SharesWaitingStack:
    """Culprits with the same stack as ranks waiting on them (the first's place given)."""

    culprits: tuple[int, ...]
    place: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AlsoElsewhere:
    """The culprits are elsewhere, but so are ranks no finding explains (the first's place)."""

    culprits: tuple[int, ...]
    others: tuple[int, ...]
    place: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Corroborates:
    """The culprits are elsewhere; every other rank with a stack is where the dumps say."""

    culprits: tuple[int, ...]
    places: tuple[str, ...]  # the culprits' places, sorted, each once
    others: int  # the other ranks with a stack


@dataclass(frozen=True, slots=True, kw_only=True)
class StacksAlone:
    """No dump was read: what the stacks alone say. ``named``: the ranks they observe outside
    the one torch.distributed call every other rank is in (the first's ``place``; the others'
    ``waiting_in``), else none, and why: the ranks of the job without a stack (``missing``),
    or the stacks' ``places`` (their classes)."""

    named: tuple[int, ...]
    place: str | None
    waiting_in: str | None
    others: int  # the other ranks with a stack
    missing: tuple[int, ...]
    places: int


# What the stacks say of the verdict; ``StackEvidence.agreement`` names its family
StackReading = (
    NothingMore
    | SinglesOut
    | NothingStandsOut
    | NoCulpritStack
    | SharesWaitingStack
    | AlsoElsewhere
    | Corroborates
    | StacksAlone
)
