"""``frtrace compare``'s answer in a few lines: stuck or slow, then per group which members
moved (``detail.motion.SnapshotComparison``, from ``analysis.compare``)."""

from __future__ import annotations

from typing import assert_never

from frtrace.base.ranges import format_ranks
from frtrace.detail.motion import Motion, SnapshotComparison

__all__ = ["comparison_statement", "render_comparison"]


def comparison_statement(c: SnapshotComparison) -> str:
    """The answer in one line."""
    if c.verdict == Motion.CANNOT_TELL:
        return "no rank has a readable dump in both snapshots"
    if c.verdict == Motion.HUNG:
        return f"HUNG: none of the {len(c.compared)} ranks moved between the snapshots"
    if c.verdict == Motion.SLOW:
        return (
            f"SLOW, NOT HUNG: ranks {format_ranks(c.moved)} moved; "
            f"rank{'s' if len(c.still) > 1 else ''} {format_ranks(c.still)} did not (look there)"
        )
    if c.verdict == Motion.PROGRESSING:
        return f"PROGRESSING: all {len(c.compared)} ranks moved between the snapshots"
    assert_never(c.verdict)


def render_comparison(c: SnapshotComparison, *, max_groups: int = 12) -> str:
    """A few lines: the verdict, then per group which members moved."""
    lines = [comparison_statement(c)]
    for g in c.groups[:max_groups]:
        if not g.moved and not g.still:
            continue
        state = "none moved" if not g.moved else f"moved {format_ranks(g.moved)}"
        if g.moved and g.still:
            state += f"; still {format_ranks(g.still)}"
        elif g.moved:
            state = "all moved"
        lines.append(f"  {g.group.label}: {state}")
    if len(c.groups) > max_groups:
        lines.append(f"  … {len(c.groups) - max_groups} more groups")
    return "\n".join(lines) + "\n"
