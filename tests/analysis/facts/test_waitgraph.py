"""The wait graph (``facts.waitgraph``) on built facts: who waits on whom, the root causes and
the cross-group cycles, for scenarios stated with the Facts builder (no dump on disk).

Each scenario is written over logical ranks 0-3 and built through a relabelling ``p`` (logical
rank i is global rank ``p[i]``), so one scenario pins the answer (identity) and the invariants:
relabelling the ranks relabels the answer, the order of the rows (each dump's entries, the
matcher's dicts, a group's member list) changes nothing, and no rank outside the job's world
ever appears.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import pytest

from frtrace.analysis.facts import Facts
from frtrace.analysis.facts.waitgraph import EdgeKind, WaitGraph, build_wait_graph, victims_of
from tests.analysis.facts_builder import Job

Perm = tuple[int, ...]
IDENTITY: Perm = (0, 1, 2, 3)
# relabellings of the 4 ranks: reversed, a rotation, one with no fixed point and no pattern
PERMS: tuple[Perm, ...] = ((3, 2, 1, 0), (1, 2, 3, 0), (2, 0, 3, 1))

NJ, NO_DUMP, MISMATCH, P2P = (
    EdgeKind.NEVER_JOINED,
    EdgeKind.NO_DUMP,
    EdgeKind.MISMATCH,
    EdgeKind.P2P_UNMATCHED,
)


class _ReversedEntries(Job):
    """The same job, each rank's dump listing its entries newest first."""

    def dump(self, rank: int) -> dict[str, Any]:
        d = super().dump(rank)
        return d | {"entries": list(reversed(d["entries"]))}


# --- the scenarios, over logical ranks 0-3 (``p[i]`` is logical rank i's global rank) -------


def _never_joined(job_type: type[Job], p: Perm) -> Job:
    """Ranks 0, 1, 3 entered all_reduce #6; rank 2 finished #5 and never entered #6."""
    job = job_type(world=4).done("all_reduce", range(1, 6))
    return job.enter("all_reduce", 6, ranks=(p[0], p[1], p[3]))


def _no_dump(job_type: type[Job], p: Perm) -> Job:
    """Rank 2 left no dump; ranks 0, 1, 3 entered all_reduce #6."""
    job = job_type(world=4, missing=(p[2],))
    job.done("all_reduce", range(1, 6), ranks=(p[0], p[1], p[3]))
    return job.enter("all_reduce", 6, ranks=(p[0], p[1], p[3]))


def _chain(job_type: type[Job], p: Perm) -> Job:
    """Groups {0,1}, {1,2}, {2,3}: rank 0 waits in the first for 1, which waits in the second
    for 2, which waits in the third for 3, which never entered it."""
    job = job_type(world=4).done("all_reduce", range(1, 3))
    for name, (a, b) in (("1", (0, 1)), ("2", (1, 2)), ("3", (2, 3))):
        job.group(name, (p[a], p[b]))
        job.enter("all_reduce", 1, group=name, ranks=(p[a],))
    return job


def _two_groups(job_type: type[Job], p: Perm) -> Job:
    """Two independent hangs: rank 0 waits for 1 in group {0,1}, rank 3 for 2 in {2,3}."""
    job = job_type(world=4).done("all_reduce", range(1, 3))
    job.group("1", (p[0], p[1]))
    job.group("2", (p[2], p[3]))
    job.enter("all_reduce", 1, group="1", ranks=(p[0],))
    return job.enter("all_reduce", 1, group="2", ranks=(p[3],))


def _deadlock(job_type: type[Job], p: Perm) -> Job:
    """A cycle across groups: 0 waits for 1 in {0,1}, 1 for 2 in {1,2}, 2 for 0 in {2,0}; rank 3
    waits for 0 in {3,0} (held up by the cycle, not part of it)."""
    job = job_type(world=4).done("all_reduce", range(1, 3))
    for name, (a, b) in (("1", (0, 1)), ("2", (1, 2)), ("3", (2, 0)), ("4", (3, 0))):
        job.group(name, (p[a], p[b]))
        job.enter("all_reduce", 1, group=name, ranks=(p[a],))
    return job


def _p2p(job_type: type[Job], p: Perm) -> Job:
    """Rank 1 sends to rank 2 on the default group; rank 2 never posts the recv."""
    job = job_type(world=4).done("all_reduce", range(1, 3))
    return job.enter(f"send {p[1]}->{p[2]}", 0, ranks=(p[1],), is_p2p=True, p2p_seq_id=1)


def _mismatch(job_type: type[Job], p: Perm) -> Job:
    """At #6 ranks 0, 1, 3 called all_reduce, rank 2 broadcast: rank 2 is the odd one out."""
    job = job_type(world=4).done("all_reduce", range(1, 6))
    job.enter("all_reduce", 6, ranks=(p[0], p[1], p[3]))
    return job.enter("broadcast", 6, ranks=(p[2],))


def _moved_on(job_type: type[Job], p: Perm) -> Job:
    """At #6 rank 2 called broadcast and finished it while 0, 1, 3 wait in all_reduce; rank 2
    went on to #7, which nobody else entered: it waits on them there, but as the odd one out
    of #6 it is the root, and not in a cycle with them."""
    job = job_type(world=4).done("all_reduce", range(1, 6))
    job.enter("all_reduce", 6, ranks=(p[0], p[1], p[3]))
    job.enter("broadcast", 6, ranks=(p[2],), state="completed")
    return job.enter("all_reduce", 7, ranks=(p[2],))


def _all_inside(job_type: type[Job], p: Perm) -> Job:
    """Every rank entered all_reduce #6 and it did not finish: nobody waits on anybody."""
    return job_type(world=4).done("all_reduce", range(1, 6)).enter("all_reduce", 6)


Scenario = Callable[[type[Job], Perm], Job]
SCENARIOS: dict[str, Scenario] = {
    "never_joined": _never_joined,
    "no_dump": _no_dump,
    "chain": _chain,
    "two_groups": _two_groups,
    "deadlock": _deadlock,
    "p2p": _p2p,
    "mismatch": _mismatch,
    "moved_on": _moved_on,
    "all_inside": _all_inside,
}


@cache
def _facts(name: str, p: Perm = IDENTITY, reversed_entries: bool = False) -> Facts:
    job_type = _ReversedEntries if reversed_entries else Job
    return SCENARIOS[name](job_type, p).facts()


# --- the answer, in terms that survive a relabelling ----------------------------------------

EdgeKey = tuple[int, int, EdgeKind, str, int | None, int | None]


@dataclass(frozen=True)
class Answer:
    """A wait graph without its entries-table rows and group indices (both move when the
    ranks are relabelled or the rows reordered): edges by group name, cycles rotated to start
    at their lowest rank."""

    edges: frozenset[EdgeKey]  # (waiter, target, kind, group name, seq, p2p_seq)
    graph: frozenset[tuple[int, int]]
    roots: frozenset[int]
    sinks: frozenset[frozenset[int]]
    cycles: frozenset[tuple[int, ...]]
    co_waiting: frozenset[tuple[str, int, frozenset[int]]]
    in_flight: frozenset[EdgeKey]

    def ranks(self) -> set[int]:
        out = {r for e in self.edges | self.in_flight for r in e[:2]}
        out |= {r for e in self.graph for r in e} | set(self.roots)
        out |= {r for s in self.sinks for r in s} | {r for c in self.cycles for r in c}
        return out | {r for _, _, ranks in self.co_waiting for r in ranks}


def _rotated(cycle: Iterable[int]) -> tuple[int, ...]:
    c = tuple(cycle)
    i = c.index(min(c))
    return c[i:] + c[:i]


def _answer(facts: Facts, waits: WaitGraph | None = None) -> Answer:
    w = facts.waits if waits is None else waits
    names = [g.name for g in facts.membership.groups]

    def keys(edges: Iterable[Any]) -> frozenset[EdgeKey]:
        return frozenset(
            (e.waiter, e.target, e.kind, names[e.gid], e.seq, e.p2p_seq) for e in edges
        )

    return Answer(
        edges=keys(w.edges),
        graph=frozenset(w.graph.edges),
        roots=frozenset(w.roots),
        sinks=frozenset(frozenset(s) for s in w.sink_components),
        cycles=frozenset(_rotated(c) for c in w.cycles),
        co_waiting=frozenset(
            (names[gid], seq, frozenset(ranks)) for (gid, seq), ranks in w.co_waiting.items()
        ),
        in_flight=keys(w.in_flight),
    )


def _relabelled(a: Answer, p: Perm) -> Answer:
    def edges(es: frozenset[EdgeKey]) -> frozenset[EdgeKey]:
        return frozenset((p[e[0]], p[e[1]], *e[2:]) for e in es)

    return Answer(
        edges=edges(a.edges),
        graph=frozenset((p[u], p[v]) for u, v in a.graph),
        roots=frozenset(p[r] for r in a.roots),
        sinks=frozenset(frozenset(p[r] for r in s) for s in a.sinks),
        cycles=frozenset(_rotated(p[r] for r in c) for c in a.cycles),
        co_waiting=frozenset((g, s, frozenset(p[r] for r in rs)) for g, s, rs in a.co_waiting),
        in_flight=edges(a.in_flight),
    )


# --- what each scenario's graph is ----------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    edges: set[tuple[int, int, EdgeKind]]  # (waiter, target, why)
    roots: tuple[int, ...]
    cycles: tuple[tuple[int, ...], ...] = ()
    co_waiting: dict[tuple[str, int], tuple[int, ...]] | None = None


EXPECTED: dict[str, Expected] = {
    "never_joined": Expected(edges={(0, 2, NJ), (1, 2, NJ), (3, 2, NJ)}, roots=(2,)),
    "no_dump": Expected(edges={(0, 2, NO_DUMP), (1, 2, NO_DUMP), (3, 2, NO_DUMP)}, roots=(2,)),
    "chain": Expected(edges={(0, 1, NJ), (1, 2, NJ), (2, 3, NJ)}, roots=(3,)),
    "two_groups": Expected(edges={(0, 1, NJ), (3, 2, NJ)}, roots=(1, 2)),
    "deadlock": Expected(
        edges={(0, 1, NJ), (1, 2, NJ), (2, 0, NJ), (3, 0, NJ)}, roots=(0, 1, 2), cycles=((0, 1, 2),)
    ),
    "p2p": Expected(edges={(1, 2, P2P)}, roots=(2,)),
    "mismatch": Expected(edges={(0, 2, MISMATCH), (1, 2, MISMATCH), (3, 2, MISMATCH)}, roots=(2,)),
    "moved_on": Expected(edges={(0, 2, MISMATCH), (1, 2, MISMATCH), (3, 2, MISMATCH)}, roots=(2,)),
    "all_inside": Expected(edges=set(), roots=(), co_waiting={("0", 6): (0, 1, 2, 3)}),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_graph_of_each_scenario(name: str) -> None:
    """Each scenario's edges (who waits on whom, and why), roots and cycles, exactly; the
    networkx graph holds exactly the edges; nothing is in flight (no dump times)."""
    facts, want = _facts(name), EXPECTED[name]
    w = facts.waits
    assert {(e.waiter, e.target, e.kind) for e in w.edges} == want.edges
    assert set(w.graph.edges) == {(u, v) for u, v, _ in want.edges}
    assert w.roots == want.roots
    assert w.cycles == want.cycles
    assert w.sink_components == tuple(tuple(sorted(c)) for c in want.cycles)
    assert w.in_flight == () and w.running == frozenset()
    if want.co_waiting is not None:
        names = [g.name for g in facts.membership.groups]
        assert {(names[g], s): r for (g, s), r in w.co_waiting.items()} == want.co_waiting


@pytest.mark.parametrize("name", ["never_joined", "no_dump", "mismatch", "moved_on"])
def test_one_rank_missing_from_the_op_is_the_root_everyone_else_waits_on(name: str) -> None:
    """Rank 2 never entered #6 (or left no dump, or called another op): it is the one root,
    every other rank waits on it directly, and it waits on no one."""
    w = _facts(name).waits
    assert w.roots == (2,)
    assert {e.waiter for e in w.edges} == {0, 1, 3}
    assert {e.target for e in w.edges} == {2}
    assert w.graph.out_degree(2) == 0
    assert victims_of(w, (2,)) == {0, 1, 3}


def test_a_chain_has_one_root_at_its_end_and_every_rank_upstream_is_its_victim() -> None:
    """0 -> 1 -> 2 -> 3: only 3 is a root (1 and 2 are waited on but wait themselves); the
    victims of each rank are exactly the ranks before it in the chain."""
    w = _facts("chain").waits
    assert w.roots == (3,)
    assert [victims_of(w, (r,)) for r in range(4)] == [set(), {0}, {0, 1}, {0, 1, 2}]
    assert w.cycles == () and w.sink_components == ()


def test_two_independent_hangs_give_two_roots_each_with_its_own_victims() -> None:
    """Group {0,1} and group {2,3} hang apart: roots 1 and 2, and neither's victims include
    the other group's ranks."""
    w = _facts("two_groups").waits
    assert w.roots == (1, 2)
    assert (victims_of(w, (1,)), victims_of(w, (2,))) == ({0}, {3})
    assert victims_of(w, (1, 2)) == {0, 3}


def test_a_cycle_across_groups_is_a_deadlock_and_its_waiter_a_victim() -> None:
    """0 -> 1 -> 2 -> 0 across three groups: one sink component {0,1,2}, its cycle in wait
    order from its lowest rank, all three roots; rank 3 (waiting on 0) is a victim, not a
    root, and not in the cycle."""
    w = _facts("deadlock").waits
    assert w.sink_components == ((0, 1, 2),)
    assert w.cycles == ((0, 1, 2),)
    cycle = w.cycles[0]
    assert all(w.graph.has_edge(a, b) for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True))
    assert w.roots == (0, 1, 2) and 3 not in w.roots
    assert victims_of(w, w.roots) == {3}


def test_a_cycle_that_waits_on_a_rank_outside_it_is_no_deadlock() -> None:
    """0 waits for 1 in group {0,1}; 1 waits in group {0,1,2} for 0 and for 2, which never
    entered it: 0 and 1 wait on each other, but 2 is a way out, so no sink component, no
    cycle named, and 2 is the one root (0 and 1 its victims)."""
    job = Job(world=3).done("all_reduce", range(1, 3))
    job.group("1", (0, 1))
    job.group("2", (0, 1, 2))
    job.enter("all_reduce", 1, group="1", ranks=(0,))
    job.enter("all_reduce", 1, group="2", ranks=(1,))
    w = job.facts().waits
    assert {(e.waiter, e.target) for e in w.edges} == {(0, 1), (1, 0), (1, 2)}
    assert w.sink_components == () and w.cycles == ()
    assert w.roots == (2,)
    assert victims_of(w, (2,)) == {0, 1}


# --- invariants -------------------------------------------------------------------------------


@pytest.mark.parametrize("p", PERMS, ids=[",".join(map(str, p)) for p in PERMS])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_relabelling_the_ranks_relabels_the_answer(name: str, p: Perm) -> None:
    """The same scenario with its ranks permuted gives the permuted graph: edges (with their
    kind, group and seq), roots, deadlocks, cycles (up to where they start) and co-waiting."""
    assert _answer(_facts(name, p)) == _relabelled(_answer(_facts(name)), p)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_dump_listing_its_entries_in_another_order_changes_nothing(name: str) -> None:
    """Every dump's entries listed newest first: the same graph (rows differ, nothing else)."""
    assert _answer(_facts(name, reversed_entries=True)) == _answer(_facts(name))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_order_of_the_matchers_rows_and_the_members_changes_nothing(name: str) -> None:
    """``build_wait_graph`` fed the same blocked ops, pending ops, p2p ops and extents in
    reverse order, and every group's members listed in reverse: the very same edges (rows
    included), roots, cycles, sink components and co-waiting as the facts' own graph."""
    facts = _facts(name)
    m = facts.matched

    def rev(d: dict[Any, Any]) -> dict[Any, Any]:
        return dict(reversed(d.items()))

    matched = replace(
        m,
        blocked=rev(m.blocked),
        pending=rev(m.pending),
        pending_p2p={r: list(reversed(ops)) for r, ops in reversed(m.pending_p2p.items())},
        extent=rev(m.extent),
        failed=rev(m.failed),
        p2p_partners=rev(m.p2p_partners),
    )
    groups = tuple(replace(g, members=g.members[::-1]) for g in facts.membership.groups)
    membership = replace(facts.membership, groups=groups)
    again = build_wait_graph(facts.dumps, membership, matched, facts.moments.running, facts.moments)
    w = facts.waits
    assert again.edges == w.edges
    assert (again.roots, again.cycles, again.sink_components) == (
        w.roots,
        w.cycles,
        w.sink_components,
    )
    assert again.co_waiting == w.co_waiting and again.in_flight == w.in_flight
    assert set(again.graph.edges) == set(w.graph.edges)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_no_rank_outside_the_world_appears(name: str) -> None:
    """Every rank the graph names (nodes, edges, roots, cycles, co-waiting) is a rank of the
    job's world."""
    facts = _facts(name)
    world = set(range(facts.dumps.world.size))
    assert facts.dumps.world.size == 4
    assert _answer(facts).ranks() <= world
    assert set(facts.waits.graph.nodes) <= world


@pytest.mark.parametrize("peer", [4, 7, 1000])
def test_a_send_to_a_rank_past_the_world_names_no_one(peer: int) -> None:
    """Rank 1 is blocked sending to "rank" ``peer`` of a world of 4 (no such member of the
    group): no edge, no node, no root for it, and no rank past the world anywhere."""
    job = Job(world=4).done("all_reduce", range(1, 3))
    facts = job.enter(f"send 1->{peer}", 0, ranks=(1,), is_p2p=True, p2p_seq_id=1).facts()
    w = facts.waits
    assert 1 in facts.matched.blocked
    assert w.edges == () and w.roots == () and w.graph.number_of_nodes() == 0
    assert _answer(facts).ranks() <= set(range(4))


def test_the_edges_are_stated_once_and_in_order() -> None:
    """In every scenario the graph's edge list is sorted by waiter and target, holds no edge
    twice, and no waiter waits on itself."""
    for name in SCENARIOS:
        edges = _facts(name).waits.edges
        keys = [(e.waiter, e.target) for e in edges]
        assert keys == sorted(keys), name
        assert all(e.waiter != e.target for e in edges), name
        assert len(set(edges)) == len(edges), name


def test_victims_of_no_one_or_of_a_rank_not_in_the_graph_is_empty() -> None:
    """``victims_of`` never returns the culprits themselves, nor anything for a rank the
    graph does not hold."""
    w = _facts("deadlock").waits
    assert victims_of(w, ()) == set()
    assert victims_of(w, (9,)) == set()
    assert victims_of(w, (0,)) == {1, 2, 3}  # 2 and 3 wait on 0, 1 on 2
    assert not set(victims_of(w, (0, 1))) & {0, 1}
