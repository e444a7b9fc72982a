"""Cross-group deadlocks: ranks that wait on each other in a cycle.

Rank 0 blocked in group A waiting for rank 1, rank 1 blocked in group B waiting for rank 0:
each entered the groups in a different order. The cycle itself is symmetric, but history
usually is not: a rank whose buffer shows it entered the same two groups in the *other* order
at the previous step changed its order, and is named as the culprit; the ranks that kept their
order are victims. Without such history every rank of the cycle is named.
"""

from __future__ import annotations

from frtrace.findings import Confidence, Finding, FindingKind, Severity
from frtrace.groups import Membership
from frtrace.match import MatchResult
from frtrace.ranges import format_ranks
from frtrace.signatures import signature_at
from frtrace.tables import DumpSet
from frtrace.waitgraph import EdgeKind, WaitGraph, victims_of

__all__ = ["find_deadlocks"]


def _pairs(cycle: tuple[int, ...]) -> list[tuple[int, int]]:
    return list(zip(cycle, (*cycle[1:], cycle[0]), strict=True))


def _row_of(matched: MatchResult, rank: int, gid: int, seq: int) -> int | None:
    coll = matched.collectives
    hit = coll[(coll["rank"] == rank) & (coll["gid"] == gid) & (coll["seq"] == seq)]
    return None if hit.empty else int(hit["row"].iloc[0])


def _changed_order(
    matched: MatchResult, rank: int, mine: tuple[int, int], needed: tuple[int, int]
) -> bool | None:
    """Did ``rank`` enter ``needed``'s group before ``mine``'s group at the previous step?

    ``mine`` = (gid, seq) the rank is blocked in; ``needed`` = (gid, seq) a peer waits for it
    to join. True: last time it entered them in the other order (it changed); False: same
    order as before; None: no history to tell.
    """
    prev_mine = _row_of(matched, rank, mine[0], mine[1] - 1)
    prev_needed = _row_of(matched, rank, needed[0], needed[1] - 1)
    if prev_mine is None or prev_needed is None:
        return None
    return prev_needed < prev_mine


def find_deadlocks(
    dumps: DumpSet, membership: Membership, matched: MatchResult, waits: WaitGraph
) -> list[Finding]:
    """One finding per cycle of the wait graph (mismatch-only cycles excluded)."""
    findings = []
    for cycle in waits.cycles:
        edges = {(a, b): waits.graph.edges[a, b] for a, b in _pairs(cycle)}
        if {d["kind"] for d in edges.values()} == {str(EdgeKind.MISMATCH)}:
            continue  # two sides of a mismatch without a majority: the mismatch finding tells
        steps: list[str] = []
        changed: dict[int, bool | None] = {}
        for a, b in _pairs(cycle):
            data = edges[(a, b)]
            group = membership.groups[data["gid"]]
            blocked = matched.blocked.get(a)
            op = signature_at(dumps, blocked.row).op if blocked is not None else "?"
            seq = f" #{data['seq']}" if data["seq"] is not None else ""
            steps.append(f"rank {a} is in {op}{seq} of {group.label}, waiting for rank {b}")
            # b must join a's op; b is blocked in its own op: did b swap the two?
            b_blocked = matched.blocked.get(b)
            if data["seq"] is not None and b_blocked is not None and b_blocked.seq is not None:
                changed[b] = _changed_order(
                    matched, b, (b_blocked.gid, b_blocked.seq), (data["gid"], data["seq"])
                )
        sink = all(r in waits.roots for r in cycle)
        deviators = tuple(sorted(r for r, c in changed.items() if c))
        keepers = [r for r, c in changed.items() if c is False]
        if deviators and keepers:
            culprits = deviators
            why = (
                f"rank(s) {format_ranks(deviators)} entered these groups in the other order "
                "at the previous step; the others kept their order"
            )
            confidence = Confidence.HIGH
        else:
            culprits = tuple(sorted(cycle))
            why = "the buffers do not show which rank changed its order: all are named"
            confidence = Confidence.MEDIUM
        victims = victims_of(waits, cycle) | (set(cycle) - set(culprits))
        who = f"rank{'s' if len(culprits) > 1 else ''} {format_ranks(culprits)}"
        lead = (
            f"{who} entered the groups in a different order than before: "
            if deviators and keepers
            else ""
        )
        findings.append(
            Finding(
                kind=FindingKind.DEADLOCK,
                severity=Severity.ERROR,
                summary=(
                    f"cross-group deadlock: {lead}ranks {format_ranks(cycle)} wait on each "
                    f"other ({'; '.join(steps)})"
                    + (
                        f"; {len(victims_of(waits, cycle))} more ranks wait on them"
                        if victims_of(waits, cycle)
                        else ""
                    )
                ),
                culprit_ranks=culprits if sink else (),
                waiting_ranks=tuple(sorted(victims)),
                confidence=confidence,
                why=why,
                evidence=(*steps, "every rank must enter shared groups in the same order"),
                cycle=cycle,
            )
        )
    return findings
