"""What the ranks' Python stacks say of the verdict, in one sentence, from its typed reading
(``StackEvidence.reading``, ``frtrace.detail.stacks``)."""

from __future__ import annotations

from typing import assert_never

from frtrace.base.ranges import format_ranks
from frtrace.detail.stacks import (
    AlsoElsewhere,
    Corroborates,
    NoCulpritStack,
    NothingMore,
    NothingStandsOut,
    SharesWaitingStack,
    SinglesOut,
    StackReading,
)

__all__ = ["stack_statement"]


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"rank{'s' if len(ranks) != 1 else ''} {format_ranks(ranks)}"


def stack_statement(r: StackReading) -> str:
    """Whether the stacks corroborate the verdict or question it, and why."""
    if isinstance(r, NothingMore):
        return "The stacks show nothing the dumps do not."
    if isinstance(r, SinglesOut):
        return (
            f"The dumps name no culprit, but the stacks single out "
            f"rank{'s' if len(r.ranks) > 1 else ''} {format_ranks(r.ranks)} "
            f"({r.place}): look there first."
        )
    if isinstance(r, NothingStandsOut):
        return "The dumps name no culprit and no rank's stack stands out."
    if isinstance(r, NoCulpritStack):
        return (
            f"No stack sample for culprit {_ranks(r.culprits)}: collect one (py-spy dump, or "
            "frtrace collect) to see where it is."
        )
    if isinstance(r, SharesWaitingStack):
        return (
            f"The stacks question the verdict: culprit {_ranks(r.culprits)} has the same stack "
            f"as ranks waiting on it ({r.place}); check whether it is really behind."
        )
    if isinstance(r, AlsoElsewhere):
        return (
            f"The stacks partly question the verdict: culprit {_ranks(r.culprits)} is "
            f"elsewhere, as the dumps say, but so {'are' if len(r.others) > 1 else 'is'} "
            f"{_ranks(r.others)} ({r.place}), which no finding explains."
        )
    if isinstance(r, Corroborates):
        places = r.places
        where = "; ".join(places[:2]) + (f" (+{len(places) - 2})" if len(places) > 2 else "")
        one, rest = len(r.culprits) == 1, r.others
        return (
            f"The stacks corroborate the verdict: culprit {_ranks(r.culprits)} "
            f"{'is' if one else 'are'} elsewhere ({where}), while the "
            f"{rest:,} other rank{'s' if rest != 1 else ''} with a stack "
            f"{'are' if rest != 1 else 'is'} where the dumps say."
        )
    assert_never(r)
