"""What the ranks' Python stacks say of the verdict, in one sentence, from its typed reading
(``StackEvidence.reading``, ``frtrace.detail.stacks``); and a stack outlier's summary (FR015)."""

from __future__ import annotations

from typing import assert_never

from frtrace.base.ranges import format_ranks
from frtrace.detail import StackOutlier
from frtrace.detail.stacks import (
    AlsoElsewhere,
    Corroborates,
    NoCulpritStack,
    NothingMore,
    NothingStandsOut,
    SharesWaitingStack,
    SinglesOut,
    StackReading,
    StacksAlone,
)

__all__ = ["outlier_summary", "stack_statement"]


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"rank{'s' if len(ranks) != 1 else ''} {format_ranks(ranks)}"


def outlier_summary(d: StackOutlier) -> str:
    """FR015 in one line: the ranks in host code and where the others wait; with no dump read
    (``stacks_only``), outside the one call all the others are in, on their stacks' word."""
    host = tuple(w.rank for w in d.host)
    many, waits = len(host) > 1, d.waiting != 1
    if d.stacks_only:
        return (
            f"{_ranks(host)} {'are' if many else 'is'} outside the {d.waiting_in} that the "
            f"{d.waiting} other rank{'s' if waits else ''} {'are' if waits else 'is'} all in "
            f"({'their stacks' if many else 'its stack'}; no dump read)"
        )
    return (
        f"{_ranks(host)} {'are' if many else 'is'} in host code while {d.waiting} "
        f"rank{'s' if waits else ''} wait in {d.waiting_in or 'torch.distributed calls'}"
    )


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
    if isinstance(r, StacksAlone):
        return _alone(r)
    assert_never(r)


def _alone(r: StacksAlone) -> str:
    """No dump was read: whom the stacks alone name and on what, or why they cannot tell."""
    if r.named:
        one = len(r.named) == 1
        return (
            f"No Flight Recorder dump was read: the stacks alone name {_ranks(r.named)} "
            f"({r.place}), outside the torch.distributed call the {r.others:,} other "
            f"rank{'s' if r.others != 1 else ''} with a stack {'are' if r.others != 1 else 'is'}"
            f" in ({r.waiting_in}). {'Its' if one else 'Their'} ring buffer would confirm "
            f"which op {'it' if one else 'they'} never joined."
        )
    if r.missing:
        return (
            "No Flight Recorder dump was read, and the stacks cannot tell: "
            f"{_ranks(r.missing)} of the job {'have' if len(r.missing) > 1 else 'has'} no "
            "stack (collect on every host of the job, then analyse the union)."
        )
    return (
        "No Flight Recorder dump was read, and the stacks cannot tell: they are in "
        f"{r.places:,} place{'s' if r.places != 1 else ''}, not one torch.distributed call "
        "that all but a few ranks are in."
    )
