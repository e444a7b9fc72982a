"""A rank that created its process groups in another order than its peers (FR019).

Every rank advances torch's group counter at each ``new_group`` call, so a rank that makes
the same groups in another order (a set iterated under another ``PYTHONHASHSEED``) holds its
groups under names its peers gave to others. ``facts.creation`` finds the names ranks hold as
different groups (another description or other members, from the call that made them; other
ops at one seq) and the ranks whose group at a creation index is what the majority of ranks
hold at another index. Such a rank, where it holds a conflicting name, is named: observed in
its own dump (its entries carry each group's index and description). It is a desync of the
groups themselves: every mismatched op and every group "no other member recorded" that
follows is its consequence (``analysis.verdict`` keeps those as warnings).

Where names are held as different groups (by description or members) and no rank's order
differs from a majority's (two ranks against two, or nothing to compare), who cannot be told:
the ranks that hold those names are suspected, a warning that names no culprit. Conflicts of
ops alone, with no rank out of order, are the desync rule's.
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.detail.order import GroupOrder
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    order = facts.creation
    if not order.conflicts:
        return []
    loaded = facts.loaded
    culprits = tuple(sorted({m.rank for m in order.misplaced if m.rank in loaded}))
    declared = [c for c in order.conflicts if c.by != "ops"]  # made by different calls
    if not culprits and not declared:
        return []
    shown = order.conflicts if culprits else tuple(declared)
    holders = tuple(sorted({h.rank for c in shown for h in c.held}))
    # ranks blocked in a group no other member recorded: where a name joins other ranks than
    # each member thinks, a member waits alone for a peer that holds the name elsewhere
    groups = facts.membership.groups
    alone = {r for r, ref in facts.matched.blocked.items() if len(groups[ref.gid].members) <= 1}
    first = shown[0]
    anchor = culprits[0] if culprits else min(holders, default=None)
    group = None if anchor is None else facts.membership.group_of(anchor, first.name)
    if culprits:
        return [
            Finding(
                kind=FindingKind.GROUP_ORDER,
                severity=Severity.ERROR,
                culprit_ranks=culprits,
                waiting_ranks=tuple(sorted((set(holders) | alone) - set(culprits))),
                group=group,
                confidence=Confidence.HIGH if order.basis == "desc" else Confidence.MEDIUM,
                detail=GroupOrder(
                    conflicts=shown,
                    misplaced=tuple(m for m in order.misplaced if m.rank in culprits),
                    basis=order.basis,
                ),
            )
        ]
    return [
        Finding(
            kind=FindingKind.GROUP_ORDER,
            severity=Severity.WARNING,
            culprit_ranks=(),  # (suspects: ``detail.suspects``)
            group=group,
            confidence=Confidence.LOW,
            detail=GroupOrder(conflicts=shown, misplaced=(), suspects=holders, basis="none"),
        )
    ]
