"""Ranks that created their process groups in another order (issue 50, item 6).

torch names a group by a counter every rank advances at each ``new_group`` call, member or
not. A rank that makes the same groups in another order (it iterates a set of strings, whose
order follows ``PYTHONHASHSEED``; a dict built another way) gives its groups the names its
peers gave to others: one name, as each rank holds it, is another group, and Gloo connects
whichever ranks claim that name's places. What the dumps show of it:

- a name held as different groups (``NameConflict``): ranks recorded one name with different
  descriptions (``group_desc`` is an argument of the call that made the group), with
  different members where ``pg_config`` records them (NCCL; Gloo's is unusable), or ran
  different ops in it at one seq;
- where each rank holds a group: an entry's ``pg_id`` counts the groups its rank is a member
  of in the order it made them. In SPMD code every rank's k-th group plays one part (its tp
  group first, then its dp group), so a rank whose group at index k is what the majority of
  ranks hold at another index k' made its groups in another order (``Misplaced``). Parts are
  compared by description where a conflict is one of descriptions, else by the op each rank
  ran at each (index, seq). A majority is more than half of the ranks that hold the index,
  and two at least.

Which ranks that names is the rule's (``rules.group_order``): the misplaced ranks that hold a
conflicting name, each observed in its own dump. Nothing is computed unless a conflict can
exist (a name with two descriptions, a member list another member contradicts, members that
disagree at a seq).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np
import pandas as pd

from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import MatchResult, codes, filled
from frtrace.detail.order import GroupHeld, Misplaced, NameConflict
from frtrace.load.dumpset import DumpSet
from frtrace.load.tables import recorded_groups

__all__ = ["CreationOrder", "creation_order"]

# Descriptions that say nothing of a group's part: new_group without ``group_desc``
UNINFORMATIVE = frozenset({"", "undefined"})

Basis = Literal["desc", "ops", "none"]
V = TypeVar("V", str, tuple[str, int])


@dataclass(frozen=True, slots=True, kw_only=True)
class CreationOrder:
    """The names held as different groups, and the ranks whose creation order differs."""

    conflicts: tuple[NameConflict, ...] = ()
    misplaced: tuple[Misplaced, ...] = ()
    basis: Basis = "none"


def creation_order(dumps: DumpSet, membership: Membership, matched: MatchResult) -> CreationOrder:
    """See the module docstring."""
    by_desc = _desc_conflicts(dumps)
    by_members = _member_conflicts(dumps)
    by_ops = _op_conflicts(membership, matched)
    if not (by_desc or by_members or by_ops):
        return CreationOrder()
    held = _held(dumps)
    for (rank, name), members in by_members.items():
        view = held.get((rank, name)) or GroupHeld(rank=rank, name=name, pg_id=-1, desc=None)
        held[(rank, name)] = _with_members(view, members)  # (-1: it ran nothing there)
    sources: list[tuple[Literal["desc", "members", "ops"], set[str]]] = [
        ("desc", by_desc),
        ("members", {n for _, n in by_members}),
        ("ops", by_ops),
    ]
    conflicts: dict[str, NameConflict] = {}
    for how, names in sources:
        for name in sorted(names - set(conflicts)):
            views = tuple(v for (_, n), v in sorted(held.items()) if n == name)
            conflicts[name] = NameConflict(name=name, by=how, held=views)
    basis: Basis = "desc" if by_desc else "ops"
    named = set(conflicts)
    if basis == "desc":
        misplaced = _misplaced_by_desc(held, named)
    else:
        misplaced = _misplaced_by_ops(dumps, membership, matched, held, named)
    return CreationOrder(
        conflicts=tuple(conflicts[n] for n in sorted(conflicts)),
        misplaced=misplaced,
        basis=basis if misplaced else "none",
    )


def _with_members(view: GroupHeld, members: tuple[int, ...]) -> GroupHeld:
    return GroupHeld(
        rank=view.rank, name=view.name, pg_id=view.pg_id, desc=view.desc, members=members
    )


def _name_desc_codes(
    dumps: DumpSet,
) -> tuple[np.ndarray, list[str | None], np.ndarray, list[str | None]]:
    entries = dumps.entries
    names, name_values = codes(entries.column("group_name"))
    descs, desc_values = codes(entries.column("group_desc"))
    return names, name_values, descs, desc_values


def _desc_conflicts(dumps: DumpSet) -> set[str]:
    """Names recorded with two informative descriptions (by their codes: no string per entry)."""
    if not dumps.entries.num_rows:
        return set()
    names, name_values, descs, desc_values = _name_desc_codes(dumps)
    width = len(desc_values) + 1
    pairs = pd.unique(names.astype(np.int64) * width + descs.astype(np.int64) + 1)
    seen: dict[str, set[str]] = defaultdict(set)
    for pair in pairs.tolist():
        n, d = divmod(int(pair), width)
        desc = desc_values[d - 1] if d > 0 else None
        if n >= 0 and name_values[n] is not None and desc is not None and desc not in UNINFORMATIVE:
            seen[str(name_values[n])].add(desc)
    return {n for n, d in seen.items() if len(d) > 1}


def _member_conflicts(dumps: DumpSet) -> dict[tuple[int, str], tuple[int, ...]]:
    """(rank, name) -> its own members, where a member's own record of that name has other
    members than a rank's that lists it (disjoint groups of one name, from ``split_group``,
    never list each other's ranks: no conflict). Each distinct list is walked once: rows that
    recorded the same list share one tuple (``recorded_groups``)."""
    lists: dict[str, dict[int, tuple[int, ...]]] = defaultdict(dict)
    for row in recorded_groups(dumps.groups):
        if row.trusted and row.ranks:
            lists[row.name][row.rank] = row.ranks
    out: dict[tuple[int, str], tuple[int, ...]] = {}
    for name, own in lists.items():
        holders: dict[int, list[int]] = defaultdict(list)
        distinct: dict[int, tuple[int, ...]] = {}
        for q, members in own.items():
            holders[id(members)].append(q)
            distinct[id(members)] = members
        for key, members in distinct.items():
            for r in members:
                mine = own.get(r)
                if mine is not None and mine != members:
                    out[(r, name)] = mine
                    out.update({(q, name): members for q in holders[key]})
    return out


def _op_conflicts(membership: Membership, matched: MatchResult) -> set[str]:
    """Names whose members ran different ops (or signatures) at one seq."""
    consensus = matched.consensus
    if consensus.empty:
        return set()
    bad = consensus[~consensus["consistent"].astype(bool)]
    return {membership.groups[int(g)].name for g in set(bad["gid"].tolist())}


def _held(dumps: DumpSet) -> dict[tuple[int, str], GroupHeld]:
    """(rank, name) -> the group as the rank's entries hold it (its index and description)."""
    entries = dumps.entries
    names, name_values, descs, desc_values = _name_desc_codes(dumps)
    frame = pd.DataFrame(
        {
            "rank": filled(entries.column("rank"), -1),
            "pg_id": filled(entries.column("pg_id"), -1),
            "name": names,
            "desc": descs,
        }
    ).drop_duplicates(["rank", "name"])
    out: dict[tuple[int, str], GroupHeld] = {}
    for rank, pg_id, n, d in frame.itertuples(index=False, name=None):
        name = name_values[n] if n >= 0 else None
        if name is None or pg_id < 0:
            continue
        desc = desc_values[d] if d >= 0 else None
        out[(int(rank), str(name))] = GroupHeld(
            rank=int(rank), name=str(name), pg_id=int(pg_id), desc=desc
        )
    return out


def _majority(votes: Iterable[tuple[int, V]]) -> tuple[V, tuple[int, ...]] | None:
    """The value more than half of the voters (two at least) hold, and who holds it."""
    ranks_of: dict[V, list[int]] = defaultdict(list)
    total = 0
    for rank, value in votes:
        ranks_of[value].append(rank)
        total += 1
    if not ranks_of:
        return None
    value, ranks = max(ranks_of.items(), key=lambda kv: len(kv[1]))
    if len(ranks) < 2 or 2 * len(ranks) <= total:
        return None
    return value, tuple(sorted(ranks))


def _misplaced_by_desc(
    held: dict[tuple[int, str], GroupHeld], named: set[str]
) -> tuple[Misplaced, ...]:
    """Ranks whose group at an index holds the description the majority holds elsewhere."""
    at: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for view in held.values():
        if view.desc is not None and view.desc not in UNINFORMATIVE:
            at[view.pg_id].append((view.rank, view.desc))
    majority = {k: m for k, votes in at.items() if (m := _majority(votes)) is not None}
    out = []
    for (rank, name), view in sorted(held.items()):
        if name not in named or view.pg_id not in majority or view.desc is None:
            continue
        expected, ranks = majority[view.pg_id]
        if view.desc == expected:
            continue
        elsewhere = sorted(
            k for k, (d, _) in majority.items() if d == view.desc and k != view.pg_id
        )
        if elsewhere:
            out.append(
                Misplaced(
                    rank=rank,
                    pg_id=view.pg_id,
                    name=name,
                    role=view.desc,
                    expected=expected,
                    majority=ranks,
                    as_pg_id=elsewhere[0],
                )
            )
    return tuple(out)


def _misplaced_by_ops(
    dumps: DumpSet,
    membership: Membership,
    matched: MatchResult,
    held: dict[tuple[int, str], GroupHeld],
    named: set[str],
) -> tuple[Misplaced, ...]:
    """Ranks whose group at an index ran, at a seq, the op the majority ran at another index."""
    coll = matched.collectives
    gids = [g for g, group in enumerate(membership.groups) if group.name in named]
    mine = coll[coll["gid"].isin(gids)]
    if mine.empty:
        return ()
    seqs = set(mine["seq"].tolist())
    part = coll[coll["seq"].isin(seqs)]
    pg_ids = filled(dumps.entries.column("pg_id"), -1)[part["row"].to_numpy()]
    votes: dict[tuple[int, int], list[tuple[int, tuple[str, int]]]] = defaultdict(list)
    keys: dict[tuple[int, int, int], tuple[str, int]] = {}
    for rank, k, seq, op, sig in zip(
        part["rank"].tolist(),
        pg_ids.tolist(),
        part["seq"].tolist(),
        part["op"].tolist(),
        part["sig"].tolist(),
        strict=True,
    ):
        if k >= 0:
            key = (str(op), int(sig))
            votes[(int(k), int(seq))].append((int(rank), key))
            keys[(int(rank), int(k), int(seq))] = key
    majority = {at: m for at, v in votes.items() if (m := _majority(v)) is not None}
    found: dict[tuple[int, str], Misplaced] = {}
    for rank, gid, seq in zip(
        mine["rank"].tolist(), mine["gid"].tolist(), mine["seq"].tolist(), strict=True
    ):
        name = membership.groups[int(gid)].name
        view = held.get((int(rank), name))
        if view is None or (int(rank), name) in found:
            continue
        mine_key = keys.get((int(rank), view.pg_id, int(seq)))
        expected = majority.get((view.pg_id, int(seq)))
        if mine_key is None or expected is None or expected[0] == mine_key:
            continue
        elsewhere = sorted(
            k
            for (k, s), (m, _) in majority.items()
            if s == int(seq) and m == mine_key and k != view.pg_id
        )
        if elsewhere:
            found[(int(rank), name)] = Misplaced(
                rank=int(rank),
                pg_id=view.pg_id,
                name=name,
                role=mine_key[0],
                expected=expected[0][0],
                majority=expected[1],
                as_pg_id=elsewhere[0],
            )
    return tuple(found[k] for k in sorted(found))
