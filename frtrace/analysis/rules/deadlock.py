"""Cross-group deadlocks: ranks that wait on each other, and on no one else.

Rank 0 blocked in group A waiting for rank 1, rank 1 blocked in group B waiting for rank 0:
they entered A and B in different orders. Which rank is wrong is decided, in this order, by:

1. the majority: for two groups whose ops block ranks of the deadlock, every member of both
   that is blocked in one of the two ops "votes" for the order it used; the smaller side
   changed the order (with async NCCL, one rank that enqueued the default group's all_reduce
   early holds up a whole mesh of ranks that all kept the usual order);
2. history, when the vote is a tie (two ranks) or there is no vote (a cycle through three or
   more groups, each pair sharing one rank): a rank whose buffer shows it entered the same
   two groups in the other order at the previous step is the one that changed;
3. for ranks blocked in send/recv with each other (a pipeline where one rank skipped a recv),
   the rank whose pending op breaks the pattern it repeated with that peer every step, or,
   without enough history, differs from what the same stage of the other pipelines did;
4. otherwise every rank of the deadlock is named, with medium confidence.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import COLLECTIVE, MatchResult, OpRef
from frtrace.analysis.facts.signatures import signature_at
from frtrace.analysis.facts.waitgraph import EdgeKind, WaitGraph, victims_of
from frtrace.detail import CycleStep, Deadlock, DecidedBy, OrderConflict, P2PPost, PatternBroken
from frtrace.model import Confidence, Finding, FindingKind, Severity

__all__ = ["check"]

OpKey = tuple[int, int]  # (gid, seq)


def _pairs(cycle: tuple[int, ...]) -> list[tuple[int, int]]:
    return list(zip(cycle, (*cycle[1:], cycle[0]), strict=True))


def _row_of(matched: MatchResult, rank: int, gid: int, seq: int) -> int | None:
    coll = matched.collectives
    hit = coll[(coll["rank"] == rank) & (coll["gid"] == gid) & (coll["seq"] == seq)]
    return None if hit.empty else int(hit["row"].iloc[0])


def _changed_order(matched: MatchResult, rank: int, mine: OpKey, other: OpKey) -> bool | None:
    """Did ``rank`` enter ``other`` before ``mine`` at the previous step (seq - 1 of each)?

    True: last time it used the other order (it changed now); False: the same order as now;
    None: its buffer does not hold both.
    """
    prev_mine = _row_of(matched, rank, mine[0], mine[1] - 1)
    prev_other = _row_of(matched, rank, other[0], other[1] - 1)
    if prev_mine is None or prev_other is None:
        return None
    return prev_other < prev_mine


def _key(op: OpRef) -> OpKey | None:
    return (op.gid, op.seq) if op.kind == COLLECTIVE and op.seq is not None else None


def _order_conflicts(
    membership: Membership, matched: MatchResult, component: tuple[int, ...]
) -> list[tuple[OpKey, OpKey, list[int], list[int]]]:
    """(X, Y, ranks blocked in X that are members of Y's group, and vice versa)."""
    blocked_in: dict[OpKey, list[int]] = defaultdict(list)
    for rank, op in matched.blocked.items():
        key = _key(op)
        if key is not None:
            blocked_in[key].append(rank)
    involved = {k for r in component if (k := _key(matched.blocked[r])) is not None}
    out = []
    for x, y in combinations(sorted(involved), 2):
        if x[0] == y[0]:
            continue
        in_x = set(membership.groups[x[0]].members)
        in_y = set(membership.groups[y[0]].members)
        x_first = sorted(r for r in blocked_in[x] if r in in_y)
        y_first = sorted(r for r in blocked_in[y] if r in in_x)
        if x_first and y_first:
            out.append((x, y, x_first, y_first))
    return out


def _deviators(
    membership: Membership,
    matched: MatchResult,
    component: tuple[int, ...],
    cycle: tuple[int, ...] = (),
) -> tuple[tuple[int, ...], tuple[DecidedBy, ...], list[OrderConflict]]:
    """Ranks that changed the order, how that was decided, and the conflicts."""
    culprits: set[int] = set()
    reasons: list[DecidedBy] = []
    conflicts: list[OrderConflict] = []
    for x, y, x_first, y_first in _order_conflicts(membership, matched, component):
        conflicts.append(
            OrderConflict(
                first_here=tuple(x_first),
                seq_here=x[1],
                group_here=membership.groups[x[0]],
                first_there=tuple(y_first),
                seq_there=y[1],
                group_there=membership.groups[y[0]],
            )
        )
        if len(x_first) != len(y_first):
            fewer = x_first if len(x_first) < len(y_first) else y_first
            culprits.update(fewer)
            more = len(x_first) + len(y_first) - len(fewer)
            reasons.append(DecidedBy(how="majority", fewer=len(fewer), more=more))
            continue
        changed = {r: _changed_order(matched, r, x, y) for r in x_first}
        changed |= {r: _changed_order(matched, r, y, x) for r in y_first}
        moved = [r for r, c in changed.items() if c]
        kept = [r for r, c in changed.items() if c is False]
        if moved and kept:
            culprits.update(moved)
            reasons.append(DecidedBy(how="previous_step"))
    if not culprits:
        culprits = _cycle_history(matched, cycle)
        if culprits:
            reasons.append(DecidedBy(how="cycle_history"))
    if not culprits:
        culprits = _early_movers(membership, matched, component)
        if culprits:
            reasons.append(DecidedBy(how="early_movers"))
    if not culprits:
        culprits = _habit_breakers(matched, component)
        if culprits:
            reasons.append(DecidedBy(how="habit"))
    if not culprits:
        return (), (), conflicts
    return tuple(sorted(culprits)), tuple(reasons), conflicts


def _cycle_history(matched: MatchResult, cycle: tuple[int, ...]) -> set[int]:
    """History along the cycle, for cycles through three or more groups (A=[0,1], B=[1,2],
    C=[2,0]), where no two groups share a blocked rank, so no pair of groups can vote.

    Each rank b of the cycle is blocked in its op while the rank a before it waits for b in
    another op: b entered its own op before a's. If b's buffer shows the other order at the
    previous step (seq - 1 of each), b changed its order; the ranks that kept theirs confirm
    it. Empty when no rank changed, or none kept its order to compare with.
    """
    moved: set[int] = set()
    kept: set[int] = set()
    for a, b in _pairs(cycle):
        waiting = matched.blocked.get(a)
        holding = matched.blocked.get(b)
        if waiting is None or holding is None:
            continue
        other, mine = _key(waiting), _key(holding)
        if other is None or mine is None or other[0] == mine[0]:
            continue
        changed = _changed_order(matched, b, mine, other)
        if changed:
            moved.add(b)
        elif changed is False:
            kept.add(b)
    return moved if moved and kept else set()


def _habit_breakers(matched: MatchResult, component: tuple[int, ...]) -> set[int]:
    """Ranks whose blocked op breaks the order they kept at every earlier step.

    A training step repeats its collectives in one order: if, at every earlier step, the
    group a rank used just before its blocked op was followed by the same other group, and
    now it is followed by the blocked op's group instead, that rank left the loop (a data
    loader with fewer batches, a rank-dependent branch). The ranks that kept their order
    confirm it; without them nothing is decided.
    """
    coll = matched.collectives
    mine = coll[coll["rank"].isin(component)][["rank", "gid", "row"]].sort_values(["rank", "row"])
    broke: set[int] = set()
    kept: set[int] = set()
    for rank in sorted(component):
        rows = mine[mine["rank"] == rank]
        blocked = matched.blocked.get(rank)
        if blocked is None or blocked.kind != COLLECTIVE:
            continue
        gids = rows["gid"].tolist()
        order = rows["row"].tolist()
        at = order.index(blocked.row) if blocked.row in order else -1
        if at < 1:
            continue
        before = gids[at - 1]
        followers = {gids[i + 1] for i in range(at - 1) if gids[i] == before}
        if len(followers) != 1 or sum(1 for i in range(at - 1) if gids[i] == before) < 2:
            continue  # no habit to break: too little history, or no single order
        (usual,) = followers
        if usual == blocked.gid:
            kept.add(rank)
        else:
            broke.add(rank)
    return broke if broke and kept else set()


def _early_movers(
    membership: Membership, matched: MatchResult, component: tuple[int, ...]
) -> set[int]:
    """Pairwise ties, added up per op: one rank that put op X ahead of *several* other ops,
    each of which another rank kept first, is the one that moved X (e.g. a rank that entered
    the step's last all_reduce before its tp and dp collectives)."""
    early: dict[OpKey, set[int]] = defaultdict(set)
    late: dict[OpKey, set[int]] = defaultdict(set)
    for x, y, x_first, y_first in _order_conflicts(membership, matched, component):
        early[x].update(x_first)
        late[x].update(y_first)
        early[y].update(y_first)
        late[y].update(x_first)
    out: set[int] = set()
    for op, movers in early.items():
        if len(movers) < len(late[op]):
            out |= movers
    return out


def _conflict_ranks(
    membership: Membership, matched: MatchResult, component: tuple[int, ...]
) -> tuple[int, ...]:
    """Every rank on either side of an undecided order conflict."""
    ranks: set[int] = set()
    for _, _, x_first, y_first in _order_conflicts(membership, matched, component):
        ranks.update(x_first)
        ranks.update(y_first)
    return tuple(sorted(ranks))


# A pipeline's op pattern between two ranks repeats every step: up to this many ops long.
MAX_P2P_PERIOD = 16


def _broke_p2p_pattern(matched: MatchResult, op: OpRef) -> bool | None:
    """Does this pending send/recv break the rank's own repeating pattern with that peer?

    Pipeline schedules repeat per step (stage 0: send, send, recv, recv; stage 1 the mirror).
    A rank that skipped a recv posts a send where its history says a recv comes next.
    None when the history is too short to show a period.
    """
    p2p = matched.p2p
    mine = p2p[(p2p["rank"] == op.rank) & (p2p["gid"] == op.gid) & (p2p["peer"] == op.peer)]
    kinds = mine.sort_values("row")["kind"].tolist()
    rows = mine.sort_values("row")["row"].tolist()
    if op.row not in rows:
        return None
    n = rows.index(op.row)
    for period in range(1, min(MAX_P2P_PERIOD, n // 2) + 1):
        window = range(max(period, n - 3 * period), n)
        if all(kinds[i] == kinds[i - period] for i in window):
            return bool(kinds[n] != kinds[n - period])
    return None


def _differs_from_siblings(membership: Membership, matched: MatchResult, op: OpRef) -> bool | None:
    """Did the same position in sibling groups (other pipeline pairs) post the other kind?

    In a two-rank group ``p2p_seq_id`` counts a rank's ops with its one peer, so it lines up
    across sibling pairs running the same schedule.
    """
    members = membership.groups[op.gid].members
    if op.rank not in members or op.p2p_seq is None:
        return None
    position = members.index(op.rank)
    p2p = matched.p2p
    votes: dict[str, int] = defaultdict(int)
    for other in membership.siblings(op.gid):
        peer_rank = membership.groups[other].members[position]
        same = p2p[
            (p2p["gid"] == other) & (p2p["rank"] == peer_rank) & (p2p["p2p_seq"] == op.p2p_seq)
        ]
        for kind in set(same["kind"].tolist()):
            votes[str(kind)] += 1
    if not votes:
        return None
    ranked = sorted(votes.items(), key=lambda kv: -kv[1])
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None
    return ranked[0][0] != op.op


def _p2p_deviators(
    membership: Membership, matched: MatchResult, component: tuple[int, ...]
) -> tuple[int, ...]:
    """Ranks of the deadlock whose pending p2p op breaks their own pattern, if others don't."""
    verdicts: dict[int, bool | None] = {}
    for r in component:
        op = matched.blocked[r]
        if op.kind == COLLECTIVE or op.peer not in component:
            continue
        verdict = _broke_p2p_pattern(matched, op)
        if verdict is None:
            verdict = _differs_from_siblings(membership, matched, op)
        verdicts[r] = verdict
    broke = tuple(sorted(r for r, v in verdicts.items() if v))
    kept = [r for r, v in verdicts.items() if v is False]
    return broke if broke and kept else ()


def _p2p_finding(
    membership: Membership,
    matched: MatchResult,
    waits: WaitGraph,
    component: tuple[int, ...],
    culprits: tuple[int, ...],
) -> Finding:
    """A send/recv cycle where the culprits posted the wrong direction of their pattern."""

    def post(rank: int) -> P2PPost:
        op = matched.blocked[rank]
        return P2PPost(rank=rank, posted=op.op, peer=op.peer, group=membership.groups[op.gid])

    held = victims_of(waits, component)
    first = matched.blocked[culprits[0]]
    return Finding(
        kind=FindingKind.P2P_UNMATCHED,
        severity=Severity.ERROR,
        culprit_ranks=culprits,
        waiting_ranks=tuple(sorted(held | (set(component) - set(culprits)))),
        group=membership.groups[first.gid],
        op=first.op,
        confidence=Confidence.MEDIUM,
        detail=PatternBroken(
            broke=tuple(post(r) for r in culprits),
            component=component,
            held=len(held),
            blocked=tuple(post(r) for r in component),
        ),
    )


def check(facts: Facts) -> list[Finding]:
    """One finding per deadlock (a set of ranks waiting on each other and no one else)."""
    dumps, membership, matched, waits = facts.dumps, facts.membership, facts.matched, facts.waits
    findings = []
    for component, cycle in zip(waits.sink_components, waits.cycles, strict=True):
        edges = {(a, b): waits.graph.edges[a, b] for a, b in _pairs(cycle)}
        if {d["kind"] for d in edges.values()} == {str(EdgeKind.MISMATCH)}:
            continue  # two sides of a mismatch without a majority: the mismatch finding tells
        steps: list[CycleStep] = []
        for a, b in _pairs(cycle):
            data = edges[(a, b)]
            blocked = matched.blocked.get(a)
            steps.append(
                CycleStep(
                    rank=a,
                    op=signature_at(dumps, blocked.row).op if blocked is not None else "?",
                    seq=data["seq"],
                    group=membership.groups[data["gid"]],
                    waits_for=b,
                )
            )
        deviators, decided_by, conflicts = _deviators(membership, matched, component, cycle)
        if not deviators:
            p2p_culprits = _p2p_deviators(membership, matched, component)
            if p2p_culprits:
                findings.append(_p2p_finding(membership, matched, waits, component, p2p_culprits))
                continue
        if deviators:
            culprits, confidence = deviators, Confidence.HIGH
        else:
            culprits = _conflict_ranks(membership, matched, component) or component
            confidence = Confidence.MEDIUM
        held = victims_of(waits, component)
        victims = held | (set(component) - set(culprits))
        findings.append(
            Finding(
                kind=FindingKind.DEADLOCK,
                severity=Severity.ERROR,
                culprit_ranks=tuple(culprits),
                waiting_ranks=tuple(sorted(victims)),
                confidence=confidence,
                detail=Deadlock(
                    component=component,
                    deviators=deviators,
                    decided_by=decided_by,
                    steps=tuple(steps),
                    conflicts=tuple(conflicts),
                    held=len(held),
                ),
                cycle=cycle,
            )
        )
    return findings
