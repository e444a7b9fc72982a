"""Stuck or slow, from two snapshots of one job (``analysis.compare``): which ranks moved,
per group and for the job, never the sentence (``report.compare`` says it)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from frtrace.detail.values import GroupRef

__all__ = ["GroupMotion", "Motion", "SnapshotComparison"]


class Motion(StrEnum):
    """The job between the snapshots."""

    HUNG = "hung"  # no rank moved
    SLOW = "slow"  # some ranks moved, the others did not (they are where to look)
    PROGRESSING = "progressing"  # every rank moved
    CANNOT_TELL = "cannot_tell"  # no rank has a readable dump in both snapshots


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMotion:
    """One group's members that moved between the snapshots, and those that did not."""

    group: GroupRef
    moved: tuple[int, ...]
    still: tuple[int, ...]
    before: tuple[int | None, ...]  # highest seq entered per member, first snapshot
    after: tuple[int | None, ...]  # the same, second snapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotComparison:
    """Which ranks moved from the first snapshot to the second."""

    verdict: Motion
    moved: tuple[int, ...]
    still: tuple[int, ...]
    compared: tuple[int, ...]  # ranks with a dump in both snapshots
    groups: tuple[GroupMotion, ...]
    gap_s: float | None  # seconds between the snapshots' newest entries, if known
