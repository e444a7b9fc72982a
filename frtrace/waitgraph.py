"""Who waits on whom: a networkx DiGraph of ranks built from each rank's oldest unfinished op.

Edge ``u -> v`` means rank u is blocked in an op that cannot finish until rank v does
something. For u blocked in collective (group, seq), member v is waited on when:

- ``never_joined``: v's buffer shows it never reached that seq (its newest seq in the group is
  lower; a buffer that wrapped can still say this, since the newest entries are kept);
- ``blocked_elsewhere``: v enqueued the op but is itself blocked in an older op;
- ``mismatch``: v entered the seq with another op, size or dtype than the majority;
- ``not_started``: every member enqueued it, u's GPU started it, v's did not (NCCL timing);
- ``no_dump``: v has no readable dump and nothing else explains u's wait (inferred).

For u blocked in a send/recv, the peer is waited on if it never posted the matching op
(``p2p_unmatched``) or is blocked elsewhere.

Root causes are the ranks others wait on that wait on no one (sinks), and the ranks of a cycle
that waits on no one outside it (a cross-group deadlock). Everyone upstream is a victim.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum

import networkx as nx
import pandas as pd

from frtrace.groups import Membership
from frtrace.match import MatchResult
from frtrace.tables import DumpSet

__all__ = ["Edge", "EdgeKind", "WaitGraph", "build_wait_graph"]


class EdgeKind(StrEnum):
    """Why the waiter waits on the target."""

    NEVER_JOINED = "never_joined"
    BLOCKED_ELSEWHERE = "blocked_elsewhere"
    MISMATCH = "mismatch"
    NOT_STARTED = "not_started"
    P2P_UNMATCHED = "p2p_unmatched"
    NO_DUMP = "no_dump"


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

    graph: nx.DiGraph
    edges: tuple[Edge, ...]
    roots: tuple[int, ...]  # sinks that others wait on, and members of sink cycles
    cycles: tuple[tuple[int, ...], ...]  # each in wait order, starting at its lowest rank
    co_waiting: dict[tuple[int, int], tuple[int, ...]]  # (gid, seq) -> ranks all inside it


def _pending_lookup(match: MatchResult) -> tuple[dict[tuple[int, int, int], pd.Series], set[tuple[int, int]]]:
    """Logical collectives at (group, seq)s that no member finished, keyed (rank, gid, seq)."""
    pending = match.consensus[~match.consensus["done_any"].astype(bool)][["gid", "seq"]]
    rows = match.collectives.merge(pending, on=["gid", "seq"], how="inner")
    lookup = {
        (int(r.rank), int(r.gid), int(r.seq)): r for r in rows.itertuples(index=False)
    }
    return lookup, {(int(g), int(s)) for g, s in zip(pending["gid"], pending["seq"], strict=True)}


def _majority(members: list[tuple[int, object]]) -> set[int] | None:
    """Ranks holding the most common signature, None when the top is tied."""
    counts: dict[object, list[int]] = defaultdict(list)
    for rank, sig in members:
        counts[sig].append(rank)
    ranked = sorted(counts.values(), key=len, reverse=True)
    if len(ranked) > 1 and len(ranked[0]) == len(ranked[1]):
        return None
    return set(ranked[0])


def build_wait_graph(dumps: DumpSet, membership: Membership, match: MatchResult) -> WaitGraph:
    """Edges from every blocked rank; see the module docstring."""
    loaded = set(dumps.loaded_ranks)
    wrapped = {
        r for r, w in zip(dumps.files.column("rank").to_pylist(),
                          dumps.files.column("wrapped").to_pylist(), strict=True) if w
    }
    pending, _pending_keys = _pending_lookup(match)
    extent = {
        (int(r), int(g)): (int(lo), int(hi))
        for r, g, lo, hi in zip(match.extent["rank"], match.extent["gid"],
                                match.extent["seq_min"], match.extent["seq_max"], strict=True)
    }
    blocked = {int(b.rank): b for b in match.blocked.itertuples(index=False)}
    pending_p2p = match.p2p[~match.p2p["done"].astype(bool)]
    p2p_by_rank: dict[int, list[tuple[int, str, int | None, int | None, int]]] = defaultdict(list)
    for r in pending_p2p.itertuples(index=False):
        peer = None if pd.isna(r.peer) else int(r.peer)
        p2p_seq = None if pd.isna(r.p2p_seq) else int(r.p2p_seq)
        p2p_by_rank[int(r.rank)].append((int(r.gid), str(r.kind), peer, p2p_seq, int(r.row)))

    def blocked_key(rank: int) -> tuple[str, int, int | None] | None:
        b = blocked.get(rank)
        if b is None:
            return None
        if b.kind == "collective":
            return ("collective", int(b.gid), int(b.seq))
        return ("p2p", int(b.gid), None if pd.isna(b.p2p_seq) else int(b.p2p_seq))

    edges: list[Edge] = []
    co_waiting: dict[tuple[int, int], tuple[int, ...]] = {}
    for u in sorted(blocked):
        b = blocked[u]
        gid = int(b.gid)
        if b.kind == "collective":
            seq = int(b.seq)
            edges.extend(
                _collective_edges(u, gid, seq, int(b.row), membership, pending, extent,
                                  loaded, wrapped, blocked_key, co_waiting)
            )
        else:
            p2p_seq = None if pd.isna(b.p2p_seq) else int(b.p2p_seq)
            edges.extend(
                _p2p_edges(u, gid, p2p_seq, p2p_by_rank, loaded, blocked_key)
            )
    return _analyse(edges, co_waiting)


def _collective_edges(
    u: int,
    gid: int,
    seq: int,
    row: int,
    membership: Membership,
    pending: dict[tuple[int, int, int], pd.Series],
    extent: dict[tuple[int, int], tuple[int, int]],
    loaded: set[int],
    wrapped: set[int],
    blocked_key: object,
    co_waiting: dict[tuple[int, int], tuple[int, ...]],
) -> list[Edge]:
    members = membership.groups[gid].members
    mine = pending.get((u, gid, seq))
    present = [(m, pending[(m, gid, seq)]) for m in members if (m, gid, seq) in pending]
    majority = _majority([(m, (p.op, p.sig)) for m, p in present]) if present else None
    out: list[Edge] = []
    unknown_no_dump: list[int] = []
    here = ("collective", gid, seq)

    def edge(v: int, kind: EdgeKind) -> None:
        out.append(Edge(waiter=u, target=v, kind=kind, gid=gid, seq=seq, p2p_seq=None, row=row))

    if majority is not None and u not in majority:
        return out  # u is the odd one out: it is a culprit, not a waiter
    for v in members:
        if v == u:
            continue
        if v not in loaded:
            unknown_no_dump.append(v)
            continue
        theirs = pending.get((v, gid, seq))
        if theirs is not None:
            if majority is not None and v not in majority:
                edge(v, EdgeKind.MISMATCH)
            elif majority is None and mine is not None and (theirs.op, theirs.sig) != (mine.op, mine.sig):
                edge(v, EdgeKind.MISMATCH)  # no majority: each side waits on the other
            elif blocked_key(v) != here:  # type: ignore[operator]
                edge(v, EdgeKind.BLOCKED_ELSEWHERE)
            elif mine is not None and mine.state_rank == 1 and theirs.state_rank == 0:
                edge(v, EdgeKind.NOT_STARTED)
            continue
        span = extent.get((v, gid))
        if span is None:
            if v not in wrapped:  # its whole history is there: it never used this group
                edge(v, EdgeKind.NEVER_JOINED)
        elif seq > span[1]:
            edge(v, EdgeKind.NEVER_JOINED)
        # else: seq inside or below v's window without an entry: a gap or a wrapped-out op
    if not out and unknown_no_dump:
        for v in unknown_no_dump:
            edge(v, EdgeKind.NO_DUMP)
    if not out:
        co_waiting[(gid, seq)] = tuple(sorted({*co_waiting.get((gid, seq), ()), u}))
    return out


def _p2p_edges(
    u: int,
    gid: int,
    p2p_seq: int | None,
    p2p_by_rank: dict[int, list[tuple[int, str, int | None, int | None, int]]],
    loaded: set[int],
    blocked_key: object,
) -> list[Edge]:
    """Edges for u blocked in a send/recv (or a batch of them sharing one p2p_seq)."""
    mine = [op for op in p2p_by_rank.get(u, []) if op[0] == gid and op[3] == p2p_seq]
    out: list[Edge] = []
    for _, kind, peer, _, row in mine:
        if peer is None or peer == u:
            continue
        want = "recv" if kind == "send" else "send"

        def edge(v: int, k: EdgeKind, row: int = row) -> None:
            out.append(Edge(waiter=u, target=v, kind=k, gid=gid, seq=None, p2p_seq=p2p_seq,
                            row=row))

        if peer not in loaded:
            edge(peer, EdgeKind.NO_DUMP)
            continue
        theirs = [op for op in p2p_by_rank.get(peer, []) if op[0] == gid and op[1] == want
                  and op[2] == u]
        if not theirs:
            edge(peer, EdgeKind.P2P_UNMATCHED)
            continue
        their_key = blocked_key(peer)  # type: ignore[operator]
        if their_key is None or their_key[0] != "p2p" or their_key[1] != gid or their_key[2] not in {
            op[3] for op in theirs
        }:
            edge(peer, EdgeKind.BLOCKED_ELSEWHERE)
    return out


def _analyse(edges: list[Edge], co_waiting: dict[tuple[int, int], tuple[int, ...]]) -> WaitGraph:
    graph = nx.DiGraph()
    kept: list[Edge] = []
    for e in sorted(edges, key=lambda e: (e.waiter, e.target, e.kind, e.gid, e.seq or -1)):
        if e.waiter == e.target:
            continue
        kept.append(e)
        if not graph.has_edge(e.waiter, e.target):
            graph.add_edge(e.waiter, e.target, kind=str(e.kind), gid=e.gid, seq=e.seq)
    roots: set[int] = {n for n in graph.nodes if graph.out_degree(n) == 0 and graph.in_degree(n) > 0}
    cycles: list[tuple[int, ...]] = []
    for scc in nx.strongly_connected_components(graph):
        if len(scc) < 2:
            continue
        sub = graph.subgraph(scc)
        cycle = _one_cycle(sub)
        cycles.append(cycle)
        leaves_scc = any(t not in scc for n in scc for t in graph.successors(n))
        if not leaves_scc:
            roots.update(scc)
    return WaitGraph(
        graph=graph,
        edges=tuple(kept),
        roots=tuple(sorted(roots)),
        cycles=tuple(sorted(cycles)),
        co_waiting=co_waiting,
    )


def _one_cycle(sub: nx.DiGraph) -> tuple[int, ...]:
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
