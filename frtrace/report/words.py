"""What every finding's wording shares (``report.wording``): the three parts of a finding
said, and how ranks, ops and durations are written in them."""

from __future__ import annotations

from typing import NamedTuple

from frtrace.base.ranges import format_ranks
from frtrace.model import Finding

__all__ = ["Words", "held_too", "op_at", "seconds", "who"]


class Words(NamedTuple):
    """A finding said: one line, what it rests on, the facts to check."""

    summary: str
    why: str
    evidence: tuple[str, ...]


def who(listed: tuple[int, ...] | list[int]) -> str:
    """``rank 3`` / ``ranks 3,5``."""
    return f"rank{'s' if len(listed) > 1 else ''} {format_ranks(listed)}"


def held_too(n: int) -> str:
    """``; 2 more ranks of the job wait on them``: ranks outside those named that wait on them,
    anywhere in the job (``""`` for none)."""
    if not n:
        return ""
    return f"; {n} more rank{'s' if n != 1 else ''} of the job wait{'' if n != 1 else 's'} on them"


def op_at(f: Finding) -> str:
    """``all_reduce #7 of tp (pg 3)``; ``send in pp (pg 4)`` without a sequence number."""
    label = f.group.label if f.group is not None else "?"
    return f"{f.op} #{f.seq} of {label}" if f.seq is not None else f"{f.op} in {label}"


def seconds(value: float | None) -> str:
    """``4.0 s``, ``12 min``; ``?`` when unknown."""
    if value is None:
        return "?"
    return f"{value:.1f} s" if value < 600 else f"{value / 60:.0f} min"
