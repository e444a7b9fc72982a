"""Members that ran the same ops on a group in another order: two ops swapped (issue 50, item 7).

Two threads of one process that issue collectives on one group (a gradient all_reduce on the
main thread, a metrics all_reduce on another) get sequence numbers in the order they reach
the group, which is a race: where one rank's order differs, its op at seq N is its peers' op
at N + 1 and the reverse. Matching sees members that called different things at N (a desync,
or a "shifted" sequence); what it is: every member ran the same ops, in another order.

Where a group's members first disagree (``first``), the smallest window of seqs from there
(up to ``MAX_WINDOW``) over which the members that recorded every seq of it called the same
ops (the same multiset: op and signature), ordered differently, is a reorder, provided the
members agree again after it wherever they recorded the same seqs (a member that skipped or
added an op disagrees on, and is not a reorder). The members are sorted into classes by their
order; a member that recorded only the start of the window joins the one class it agrees
with. Which class is the odd one is the rule's to say (``rules.op_order``); this fact names
no one.

Each rank's ops carry the thread that issued them (``thread_id``, torch 2.8+): a group whose
ops came from several threads of one rank is said, since their interleaving is the race.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pandas as pd

from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import MatchResult
from frtrace.load.dumpset import DumpSet

__all__ = ["MAX_WINDOW", "Reorder", "reorders"]

# The longest run of seqs (from the first disagreement) searched for the same ops in another
# order, and how many seqs after it are checked for the members agreeing again
MAX_WINDOW = 4
AFTER = 4

Key = tuple[str, int]  # (op, signature) as matching compares them


@dataclass(frozen=True, slots=True, kw_only=True)
class Reorder:
    """The members of one group that ran the same ops at seqs ``first``..``last``, by order."""

    gid: int
    first: int
    last: int
    # members in the same order, each class's ranks sorted; the largest first (then the
    # lowest rank): ``classes[0]`` is the majority only where it outnumbers the others
    classes: tuple[tuple[int, ...], ...]
    rows: Mapping[int, tuple[int, ...]]  # rank -> its entries' rows at the seqs it recorded
    # members that recorded part of the window and fit no one class, or none: not counted
    unplaced: tuple[int, ...] = ()
    unseen: tuple[int, ...] = ()  # members without a dump
    # rank -> distinct threads that issued its ops on the group, where more than one
    threads: Mapping[int, int] = field(default_factory=dict)


def reorders(dumps: DumpSet, membership: Membership, matched: MatchResult) -> tuple[Reorder, ...]:
    """Every group whose first disagreement is a reorder (see the module docstring)."""
    consensus = matched.consensus
    if consensus.empty:
        return ()
    bad = consensus[~consensus["consistent"].astype(bool)]
    if bad.empty:
        return ()
    coll = matched.collectives
    loaded = frozenset(dumps.loaded_ranks)
    out: list[Reorder] = []
    firsts = bad.groupby("gid")["seq"].min()
    for gid, first in zip(firsts.index.tolist(), firsts.tolist(), strict=True):
        part = coll[
            (coll["gid"] == gid)
            & (coll["seq"] >= first)
            & (coll["seq"] < first + MAX_WINDOW + AFTER)
        ]
        found = _reorder(gid, first, part)
        if found is None:
            continue
        members = membership.groups[gid].members
        unseen = tuple(m for m in members if m not in loaded)
        threads = _threads(dumps, coll[coll["gid"] == gid])
        out.append(replace(found, unseen=unseen, threads=threads))
    return tuple(out)


def _reorder(gid: int, first: int, part: pd.DataFrame) -> Reorder | None:
    """The smallest window from ``first`` whose members ran the same ops in other orders."""
    ops: dict[int, dict[int, tuple[Key, int]]] = defaultdict(dict)
    for rank, seq, op, sig, row in zip(
        part["rank"].tolist(),
        part["seq"].tolist(),
        part["op"].tolist(),
        part["sig"].tolist(),
        part["row"].tolist(),
        strict=True,
    ):
        ops[int(rank)][int(seq)] = ((str(op), int(sig)), int(row))
    at_first = sorted(r for r, seqs in ops.items() if first in seqs)
    for last in range(first + 1, first + MAX_WINDOW):
        window = range(first, last + 1)
        full = [r for r in at_first if all(s in ops[r] for s in window)]
        orders: dict[tuple[Key, ...], list[int]] = defaultdict(list)
        for r in full:
            orders[tuple(ops[r][s][0] for s in window)].append(r)
        if len(orders) < 2:
            return None  # those who disagree at ``first`` did not all record the window
        if len({tuple(sorted(o)) for o in orders}) != 1:
            continue  # other ops, not only another order: a longer window may hold them
        if not _agree_after(ops, full, last):
            return None  # they go on disagreeing: a skipped or added op, not a reorder
        classes = {o: list(ranks) for o, ranks in orders.items()}
        unplaced = _place_partial(ops, at_first, full, window, classes)
        ranked = sorted(classes.values(), key=lambda rs: (-len(rs), min(rs)))
        rows = {
            r: tuple(ops[r][s][1] for s in window if s in ops[r])
            for r in at_first
            if r not in unplaced
        }
        return Reorder(
            gid=gid,
            first=first,
            last=last,
            classes=tuple(tuple(sorted(rs)) for rs in ranked),
            rows=rows,
            unplaced=tuple(unplaced),
        )
    return None


def _agree_after(
    ops: Mapping[int, Mapping[int, tuple[Key, int]]], ranks: list[int], last: int
) -> bool:
    """The members agree at every seq after the window that several of them recorded."""
    for seq in range(last + 1, last + 1 + AFTER):
        keys = {ops[r][seq][0] for r in ranks if seq in ops[r]}
        if len(keys) > 1:
            return False
    return True


def _place_partial(
    ops: Mapping[int, Mapping[int, tuple[Key, int]]],
    at_first: list[int],
    full: list[int],
    window: range,
    classes: dict[tuple[Key, ...], list[int]],
) -> list[int]:
    """Members that recorded only the start of the window join the one class they agree
    with; the others are returned (not counted on any side)."""
    unplaced: list[int] = []
    for r in at_first:
        if r in full:
            continue
        mine = [(i, ops[r][s][0]) for i, s in enumerate(window) if s in ops[r]]
        fits = [o for o in classes if all(o[i] == key for i, key in mine)]
        if len(fits) == 1:
            classes[fits[0]].append(r)
        else:
            unplaced.append(r)
    return unplaced


def _threads(dumps: DumpSet, part: pd.DataFrame) -> dict[int, int]:
    """rank -> how many threads issued its ops on the group, where more than one."""
    if part.empty or "thread_id" not in dumps.entries.column_names:
        return {}
    ids = dumps.entries.column("thread_id").take(part["row"].tolist()).to_pylist()
    seen: dict[int, set[str]] = defaultdict(set)
    for rank, tid in zip(part["rank"].tolist(), ids, strict=True):
        if tid:
            seen[int(rank)].add(str(tid))
    return {r: len(t) for r, t in sorted(seen.items()) if len(t) > 1}
