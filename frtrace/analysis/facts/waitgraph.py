"""Who waits on whom: a networkx DiGraph of ranks built from each rank's oldest unfinished op.

Edge ``u -> v`` means rank u is blocked in an op that cannot finish until rank v does
something. For u blocked in collective (group, seq), member v is waited on when:

- ``never_joined``: v's buffer shows it never reached that seq (its newest seq in the group is
  lower; a buffer that wrapped can still say this, since the newest entries are kept);
- ``joined_late``: v entered the seq only after u's op had timed out (``failure``): the op
  failed, and v was held up before it;
- ``blocked_elsewhere``: v enqueued the op but is itself blocked in an older op;
- ``mismatch``: v entered the seq with another op, size or dtype than the majority;
- ``not_started``: every member enqueued it, u's GPU started it, v's did not (NCCL timing);
- ``no_dump``: v has no readable dump and nothing else explains u's wait (inferred);
- ``in_flight``: u's dump was written moments after it entered the op (``running``, from
  the dump time: ``capture``): u has not waited long, so whatever it waits on is an op in
  flight in a running job, not a hang (a mismatch stays a mismatch), unless v's own dump
  came long after u entered the op (longer than v ever pauses when running) without v
  joining it: v was not on its way (``DumpMoments.kept_waiting``). So is a wait on v whose
  dump caught it running, and was written before u entered the op
  (``DumpMoments.dumped_before``): v's dump cannot show an op that did not exist yet,
  whatever happened to the op. Without the dump time
  the same picture is read as taken while stuck. Not a root cause: such edges are kept apart
  from the graph (``WaitGraph.in_flight``).

For u blocked in a send/recv, the peer is waited on if it never posted the matching op
(``p2p_unmatched``) or is blocked elsewhere; the matching op is the one counted in posting
order (``p2ppairs``: a peer that finished its half holds no one), else any pending op of the
other kind with u.

Root causes are the ranks others wait on that wait on no one (sinks), and the ranks of a cycle
that waits on no one outside it (a cross-group deadlock). Everyone upstream is a victim.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import networkx as nx

from frtrace.analysis.facts.capture import DumpMoments
from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import COLLECTIVE, MatchResult, OpRef
from frtrace.load.dumpset import DumpSet

__all__ = ["Edge", "EdgeKind", "WaitGraph", "build_wait_graph", "victims_of"]


class EdgeKind(StrEnum):
    """Why the waiter waits on the target."""

    NEVER_JOINED = "never_joined"
    JOINED_LATE = "joined_late"
    BLOCKED_ELSEWHERE = "blocked_elsewhere"
    MISMATCH = "mismatch"
    NOT_STARTED = "not_started"
    P2P_UNMATCHED = "p2p_unmatched"
    NO_DUMP = "no_dump"
    IN_FLIGHT = "in_flight"


@dataclass(frozen=True, slots=True, kw_only=True)
class Edge:
    """Rank ``waiter`` is blocked in an op that waits on rank ``target``."""

    waiter: int
    target: int
    kind: EdgeKind
    gid: int
    seq: int | None  # collective seq; None for p2p
    p2p_seq: int | None  # the waiter's p2p_seq for p2p
    row: int  # entries-table row of the waiter's op


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitGraph:
    """The graph, its root causes and its cycles."""

    graph: nx.DiGraph[int]
    edges: tuple[Edge, ...]
    roots: tuple[int, ...]  # sinks that others wait on, and members of sink components
    # Deadlocks: sets of ranks that wait on each other and on no one outside (sorted), and
    # one shortest cycle through each (in wait order, from its lowest rank), same order.
    sink_components: tuple[tuple[int, ...], ...]
    cycles: tuple[tuple[int, ...], ...]
    co_waiting: dict[tuple[int, int], tuple[int, ...]]  # (gid, seq) -> ranks all inside it
    in_flight: tuple[Edge, ...] = ()  # waits on a member on its way (a running job)
    running: frozenset[int] = frozenset()  # ranks dumped moments after their newest entry


def _majority(members: list[tuple[int, object]]) -> set[int] | None:
    """Ranks holding the most common signature, None when the top is tied."""
    if not members:
        return None
    counts: dict[object, list[int]] = defaultdict(list)
    for rank, sig in members:
        counts[sig].append(rank)
    ranked = sorted(counts.values(), key=len, reverse=True)
    if len(ranked) > 1 and len(ranked[0]) == len(ranked[1]):
        return None
    return set(ranked[0])


def build_wait_graph(
    dumps: DumpSet,
    membership: Membership,
    match: MatchResult,
    running: frozenset[int] = frozenset(),
    moments: DumpMoments | None = None,
) -> WaitGraph:
    """Edges from every blocked rank; see the module docstring. ``running``: ranks whose dump
    was written moments after their newest entry (a snapshot of a running job)."""
    ctx = _Context(
        membership=membership,
        match=match,
        running=running,
        loaded=set(dumps.loaded_ranks),
        wrapped={
            r
            for r, w in zip(
                dumps.files.column("rank").to_pylist(),
                dumps.files.column("wrapped").to_pylist(),
                strict=True,
            )
            if w
        },
    )
    edges: list[Edge] = []
    created = dumps.entries.column("time_created_ns")
    co_waiting: dict[tuple[int, int], set[int]] = defaultdict(set)
    inside: dict[tuple[int, int], bool] = {}
    for u, op in match.blocked.items():
        found: list[Edge]
        if op.kind == COLLECTIVE:
            found = _collective_edges(ctx, op)
            assert op.seq is not None
            if not found:
                key = (op.gid, op.seq)
                if key not in inside:  # the same for every rank blocked in it
                    inside[key] = _everyone_inside(ctx, op)
                if inside[key]:
                    co_waiting[key].add(u)
        else:
            found = _p2p_edges(ctx, op)
        failed = op.seq is not None and (op.gid, op.seq) in match.failed
        timed = moments is not None and bool(moments.dumped_at_ns) and bool(found)
        began = int(created[op.row].as_py() or 0) if timed or u in running else 0
        if timed and moments is not None:  # (a dump older than the op)
            found = [
                replace(e, kind=EdgeKind.IN_FLIGHT)
                if e.kind == EdgeKind.NEVER_JOINED
                and e.target in running
                and moments.dumped_before(e.target, began, u)
                else e
                for e in found
            ]
        if u in running and not failed:  # u entered its op moments before its dump
            found = [
                e
                if e.kind == EdgeKind.MISMATCH
                or (moments is not None and moments.kept_waiting(e.target, began))
                else replace(e, kind=EdgeKind.IN_FLIGHT)
                for e in found
            ]
        edges.extend(found)
    waits = _analyse(edges, {k: tuple(sorted(v)) for k, v in co_waiting.items()})
    return replace(waits, running=running)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Context:
    membership: Membership
    match: MatchResult
    loaded: set[int]
    wrapped: set[int]
    running: frozenset[int]
    # What the members of one collective are to a waiter, which depends only on the
    # collective and the waiter's own op: worked out once for the ~10^3 ranks of a large
    # group that block in the same collective (see _collective_edges).
    targets: dict[tuple[Any, ...], tuple[list[tuple[int, EdgeKind]], list[int]]] = field(
        default_factory=dict
    )
    majorities: dict[tuple[int, int], set[int] | None] = field(default_factory=dict)

    def same_op(self, rank: int, op: OpRef) -> bool:
        """Is ``rank`` blocked in exactly this (group, seq) or p2p batch?"""
        b = self.match.blocked.get(rank)
        if b is None or b.kind != op.kind or b.gid != op.gid:
            return False
        return b.seq == op.seq if op.kind == COLLECTIVE else b.p2p_seq == op.p2p_seq


def _everyone_inside(ctx: _Context, op: OpRef) -> bool:
    """Every member with a dump is blocked in this very collective."""
    members = ctx.membership.groups[op.gid].members
    return all(m not in ctx.loaded or ctx.same_op(m, op) for m in members)


def _collective_edges(ctx: _Context, mine: OpRef) -> list[Edge]:
    u, gid, seq = mine.rank, mine.gid, mine.seq
    assert seq is not None
    majority = _collective_majority(ctx, gid, seq)
    if majority is not None and u not in majority:
        return []  # u is the odd one out: a culprit, not a waiter
    failed = ctx.match.failed.get((gid, seq))
    late = failed is not None and u in failed.late
    key = (gid, seq, mine.op, mine.sig, mine.state_rank, late)
    known = ctx.targets.get(key)
    if known is None:
        known = ctx.targets[key] = _collective_targets(ctx, mine, majority)
    targets, no_dump = known

    def edge(v: int, kind: EdgeKind) -> Edge:
        return Edge(waiter=u, target=v, kind=kind, gid=gid, seq=seq, p2p_seq=None, row=mine.row)

    out = [edge(v, kind) for v, kind in targets if v != u]
    if not out:
        out = [edge(v, EdgeKind.NO_DUMP) for v in no_dump if v != u]
    elif all(e.kind == EdgeKind.IN_FLIGHT for e in out) and no_dump:
        out += [edge(v, EdgeKind.NO_DUMP) for v in no_dump if v != u]
    return out


def _collective_majority(ctx: _Context, gid: int, seq: int) -> set[int] | None:
    key = (gid, seq)
    if key not in ctx.majorities:
        pending = ctx.match.pending
        members = ctx.membership.groups[gid].members
        present = [pending[(m, gid, seq)] for m in members if (m, gid, seq) in pending]
        ctx.majorities[key] = _majority([(p.rank, (p.op, p.sig)) for p in present])
    return ctx.majorities[key]


def _collective_targets(
    ctx: _Context, mine: OpRef, majority: set[int] | None
) -> tuple[list[tuple[int, EdgeKind]], list[int]]:
    """Whom a rank blocked in ``mine`` waits on (and why), and the members without a dump."""
    gid, seq = mine.gid, mine.seq
    assert seq is not None
    pending = ctx.match.pending
    failed = ctx.match.failed.get((gid, seq))
    late = set(failed.late) if failed is not None and mine.rank not in failed.late else set()
    out: list[tuple[int, EdgeKind]] = []
    no_dump: list[int] = []
    for v in ctx.membership.groups[gid].members:
        if v not in ctx.loaded:
            no_dump.append(v)
            continue
        theirs = pending.get((v, gid, seq))
        if theirs is not None:
            if (majority is not None and v not in majority) or (
                majority is None and (theirs.op, theirs.sig) != (mine.op, mine.sig)
            ):
                out.append((v, EdgeKind.MISMATCH))  # without a majority each waits on the other
            elif theirs.done:
                pass  # v finished its part: it holds nobody here
            elif v in late:
                out.append((v, EdgeKind.JOINED_LATE))
            elif not ctx.same_op(v, mine):
                out.append((v, EdgeKind.BLOCKED_ELSEWHERE))
            elif mine.state_rank == 1 and theirs.state_rank == 0:
                out.append((v, EdgeKind.NOT_STARTED))
            continue
        span = ctx.match.extent.get((v, gid))
        if span is None:
            if v not in ctx.wrapped:  # its whole history is there: it never used this group
                out.append((v, EdgeKind.NEVER_JOINED))
        elif seq > span[1]:
            out.append((v, EdgeKind.NEVER_JOINED))
        # else: seq inside or below v's window without an entry: a gap or a wrapped-out op
    return out, no_dump


def _p2p_edges(ctx: _Context, first: OpRef) -> list[Edge]:
    """Edges for a rank blocked in a send/recv, or a batch of them sharing one p2p_seq."""
    u = first.rank
    batch = [
        op
        for op in ctx.match.pending_p2p.get(u, [])
        if op.gid == first.gid and op.p2p_seq == first.p2p_seq
    ]
    out: list[Edge] = []
    for op in batch:
        peer = op.peer
        if peer is None or peer == u:
            continue
        want = "recv" if op.op == "send" else "send"

        def edge(v: int, kind: EdgeKind, row: int = op.row) -> None:
            out.append(
                Edge(
                    waiter=u,
                    target=v,
                    kind=kind,
                    gid=first.gid,
                    seq=None,
                    p2p_seq=first.p2p_seq,
                    row=row,
                )
            )

        if peer not in ctx.loaded:
            edge(peer, EdgeKind.NO_DUMP)
            continue
        partner = ctx.match.p2p_partners.get(op.row)
        pending = ctx.match.pending_p2p.get(peer, [])
        if partner is None:  # not counted: any pending op of the other kind with u
            theirs = [o for o in pending if o.gid == op.gid and o.op == want and o.peer == u]
        elif partner < 0:  # the peer has not posted the one this op meets
            theirs = []
        else:  # posted: finished on its side (it holds no one), or pending there
            theirs = [o for o in pending if o.row == partner]
            if not theirs:
                continue
        if not theirs:
            edge(peer, EdgeKind.P2P_UNMATCHED)
        elif not any(ctx.same_op(peer, o) for o in theirs):
            edge(peer, EdgeKind.BLOCKED_ELSEWHERE)
    return out


def _analyse(edges: list[Edge], co_waiting: dict[tuple[int, int], tuple[int, ...]]) -> WaitGraph:
    graph: nx.DiGraph[int] = nx.DiGraph()
    in_flight = tuple(e for e in edges if e.kind == EdgeKind.IN_FLIGHT)
    edges = [e for e in edges if e.kind != EdgeKind.IN_FLIGHT]
    # The odd one out of a mismatch is a root cause: whatever it waits on afterwards (its
    # peers never join the op it moved on to) is a consequence, not a cause.
    odd = {e.target for e in edges if e.kind == EdgeKind.MISMATCH}
    odd -= {e.waiter for e in edges if e.kind == EdgeKind.MISMATCH}  # no majority: keep both
    ordered = sorted(edges, key=lambda e: (e.waiter, e.target, e.kind, e.gid, e.seq or -1))
    ordered = [e for e in ordered if e.waiter != e.target and e.waiter not in odd]
    # Roots come from what the dumps show first; an edge to a rank without a dump is only a
    # guess, used where the confirmed edges leave a blocked rank unexplained.
    confirmed = [e for e in ordered if e.kind != EdgeKind.NO_DUMP]
    for e in confirmed:
        if not graph.has_edge(e.waiter, e.target):
            graph.add_edge(e.waiter, e.target, kind=str(e.kind), gid=e.gid, seq=e.seq)
    # a rank whose only wait is on a rank without a dump is not a root, whatever it looks like
    unknown = {e.waiter for e in ordered if e.kind == EdgeKind.NO_DUMP} - {
        e.waiter for e in confirmed
    }
    roots, cycles, sinks = _roots(graph, exclude=unknown)
    explained = set(roots)
    for r in roots:
        explained |= nx.ancestors(graph, r)
    kept = list(confirmed)
    for e in ordered:
        if e.kind == EdgeKind.NO_DUMP and e.waiter not in explained:
            kept.append(e)
            roots.add(e.target)  # a suspect: only a rank without a dump is left to blame
            if not graph.has_edge(e.waiter, e.target):
                graph.add_edge(e.waiter, e.target, kind=str(e.kind), gid=e.gid, seq=e.seq)
    return WaitGraph(
        graph=graph,
        edges=tuple(kept),
        roots=tuple(sorted(roots)),
        cycles=tuple(sorted(cycles)),
        sink_components=tuple(sorted(sinks)),
        co_waiting=co_waiting,
        in_flight=in_flight,
    )


def _roots(
    graph: nx.DiGraph[int], exclude: set[int] | None = None
) -> tuple[set[int], list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Sinks others wait on, plus every rank of a set that waits only within itself."""
    roots: set[int] = {
        n
        for n in graph.nodes
        if graph.out_degree(n) == 0 and graph.in_degree(n) > 0 and n not in (exclude or set())
    }
    cycles: list[tuple[int, ...]] = []
    sinks: list[tuple[int, ...]] = []
    for scc in nx.strongly_connected_components(graph):
        if len(scc) < 2:
            continue
        # waiting on a rank that itself waits only on a rank without a dump is no way out
        leaves_scc = any(
            t not in scc and t not in (exclude or set()) for n in scc for t in graph.successors(n)
        )
        if not leaves_scc:  # a deadlock: they wait on each other and on no one else
            roots.update(scc)
            sinks.append(tuple(sorted(scc)))
            cycles.append(_one_cycle(graph.subgraph(scc)))
    return roots, cycles, sinks


def _one_cycle(sub: nx.DiGraph[int]) -> tuple[int, ...]:
    """A shortest cycle through the lowest rank of a strongly connected set, in wait order."""
    start = min(sub.nodes)
    best: list[int] | None = None
    for nxt in sorted(sub.successors(start)):
        try:
            path = nx.shortest_path(sub, nxt, start)
        except nx.NetworkXNoPath:
            continue
        candidate = [start, *path[:-1]]
        if best is None or len(candidate) < len(best):
            best = candidate
    return tuple(best or sorted(sub.nodes))


def victims_of(waits: WaitGraph, culprits: tuple[int, ...]) -> set[int]:
    """Every rank that waits, directly or through others, on one of ``culprits``."""
    # one walk up the wait edges from all culprits at once (one nx.ancestors per culprit
    # costs ~10 us each: seconds when 10^5 ranks without a dump are suspects)
    seen = {c for c in culprits if waits.graph.has_node(c)}
    todo = list(seen)
    pred = waits.graph.pred
    while todo:
        for waiter in pred[todo.pop()]:
            if waiter not in seen:
                seen.add(waiter)
                todo.append(waiter)
    return seen - set(culprits)
