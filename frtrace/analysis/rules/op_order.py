"""Members of a group that ran the same ops in another order (FR020): two ops swapped.

``facts.reorder`` finds, where a group's members first disagree, the window of seqs over
which they ran the same ops in other orders, and sorts them into classes by order. Where one
order is held by more ranks than every other one could reach with the members whose order is
not known (no dump, or a partial window), the ranks of the other orders ran the group's ops in
another order than their peers: named, observed in their own entries. With two threads
issuing collectives on one group (the entries' ``thread_id``), that order is a race between
them, and said so. It is a desync: the mismatches and shifted sequences matching sees in that
window are its consequence (``analysis.verdict`` keeps those as warnings).

Where no order has such a majority (two ranks against two, the two members of a pair), who
cannot be told: every rank of every order is suspected, a warning that names no culprit.
"""

from __future__ import annotations

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.reorder import Reorder
from frtrace.analysis.facts.signatures import entry_at, signature_at
from frtrace.detail.order import IssuedOp, OpOrder, RankOrder
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]


def check(facts: Facts) -> list[Finding]:
    return [_finding(facts, found) for found in facts.reorders]


def _finding(facts: Facts, found: Reorder) -> Finding:
    big, *others = found.classes
    runner_up = max((len(c) for c in others), default=0)
    unknown = len(found.unseen) + len(found.unplaced)
    decided = len(big) >= 2 and len(big) > runner_up + unknown
    everyone = tuple(sorted(r for c in found.classes for r in c))
    odd = tuple(sorted(r for c in others for r in c)) if decided else everyone
    orders = tuple(_order(facts, found, ranks) for ranks in found.classes)
    expected = orders[0].ops[0].sig
    detail = OpOrder(
        first=found.first,
        last=found.last,
        orders=orders,
        majority=big if decided else (),
        odd=odd,
        threads=tuple(sorted(found.threads.items())),
        unseen=found.unseen,
    )
    return Finding(
        kind=FindingKind.OP_ORDER,
        severity=Severity.ERROR if decided else Severity.WARNING,
        culprit_ranks=odd if decided else (),  # (no majority: suspects, ``detail.odd``)
        waiting_ranks=big if decided else (),
        group=facts.membership.groups[found.gid],
        seq=found.first,
        op=expected.op,
        expected=expected if decided else None,
        actual={o.shown: o.ops[0].sig for o in orders[1:]} if decided else {},
        confidence=Confidence.HIGH if decided else Confidence.LOW,
        detail=detail,
    )


def _order(facts: Facts, found: Reorder, ranks: tuple[int, ...]) -> RankOrder:
    """One order, as the first of its ranks that recorded the whole window holds it."""
    size = found.last - found.first + 1
    shown = next((r for r in ranks if len(found.rows[r]) == size), ranks[0])
    ops = []
    for seq, row in zip(range(found.first, found.last + 1), found.rows[shown], strict=False):
        entry = entry_at(facts.dumps, row)
        thread = entry.get("thread_id") or None
        ops.append(IssuedOp(seq=seq, sig=signature_at(facts.dumps, row), thread=thread))
    return RankOrder(ranks=ranks, shown=shown, ops=tuple(ops))
