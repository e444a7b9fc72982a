"""``--pg`` and ``--ranks``: narrow what a report shows, never what was analysed.

The analysis always sees every rank: analysing a subset would make the ranks left out look
as if they never joined. A selection then keeps the findings, stragglers, groups and wait
edges that touch the chosen group or ranks. The verdict, the culprits and the exit code stay
those of the whole job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from frtrace.base.ranges import format_ranks
from frtrace.errors import UnknownGroup
from frtrace.model import Finding, GroupRef, Report

__all__ = ["Selection", "UnknownGroup", "matches_group", "select"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Selection:
    """What the user asked to see; ``None`` fields select everything."""

    pg: str | None = None  # group name ("3"), description ("tp") or label ("tp (pg 3)")
    ranks: tuple[int, ...] | None = None

    @property
    def active(self) -> bool:
        """True when anything is filtered out."""
        return self.pg is not None or self.ranks is not None

    def describe(self) -> str:
        """``pg tp, ranks 0-7``."""
        parts = []
        if self.pg is not None:
            parts.append(f"process group {self.pg}")
        if self.ranks is not None:
            parts.append(f"ranks {format_ranks(self.ranks)}")
        return ", ".join(parts)


def matches_group(group: GroupRef, key: str) -> bool:
    """Does ``--pg key`` mean this group? By name, description or label."""
    return key in (group.name, group.desc, group.label)


def select(report: Report, selection: Selection) -> Report:
    """The report restricted to ``selection``; raises UnknownGroup for a ``--pg`` never seen."""
    if not selection.active:
        return report
    groups = report.groups
    if selection.pg is not None:
        key = selection.pg
        groups = tuple(g for g in report.groups if matches_group(g, key))
        if not groups:
            known = ", ".join(g.label for g in report.groups[:12])
            more = f" and {len(report.groups) - 12} more" if len(report.groups) > 12 else ""
            raise UnknownGroup(
                f"--pg {key!r} names no process group of this job; the groups are {known}{more}. "
                "Give a name, a description or a label as listed."
            )
    names = {(g.name, g.members) for g in groups}
    members = {m for g in groups for m in g.members}
    wanted = set(selection.ranks) if selection.ranks is not None else None

    def keep_ranks(ranks: set[int]) -> bool:
        return wanted is None or bool(ranks & wanted)

    def keep_finding(f: Finding) -> bool:
        if selection.pg is not None and (
            f.group is None or (f.group.name, f.group.members) not in names
        ):
            return False
        return keep_ranks({*f.culprit_ranks, *f.waiting_ranks, *f.cycle})

    in_pg = members if selection.pg is not None else None
    stragglers = tuple(
        s
        for s in report.stragglers
        if keep_ranks({s.rank})
        and (selection.pg is None or any(g.name in s.groups for g in groups))
    )
    edges = tuple(
        e
        for e in report.wait_edges
        if keep_ranks({e[0], e[1]}) and (in_pg is None or e[0] in in_pg or e[1] in in_pg)
    )
    if wanted is not None:
        groups = tuple(g for g in groups if not wanted.isdisjoint(g.members))
    kept = set(groups)
    progress = tuple(p for p in report.progress if p.group in kept)
    return replace(
        report,
        findings=tuple(f for f in report.findings if keep_finding(f)),
        stragglers=stragglers,
        wait_edges=edges,
        groups=groups,
        progress=progress,
    )
