"""Process groups and their members: read from pg_config where it is consistent, else inferred.

A group is its name plus its member ranks: ``split_group`` gives disjoint groups one name, so
two ranks that record the same name with different members are in different groups.

- NCCL (and every backend that records real ``pg_config``): each rank lists the groups it is a
  member of, with the global ranks in group-rank order.
- torch 2.3 (FR 1.x) names groups by a per-process pg_id: the member set identifies them.
- Gloo records every group under the name ``''`` with unusable ranks: membership is rebuilt
  from which ranks recorded entries in the group; the default group has every rank of the
  job. Inferred memberships are flagged, since a member whose buffer holds no entry of the
  group (never entered it, or its buffer wrapped) cannot be seen.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from frtrace.detail.notes import InferredFrom, MembershipInferred
from frtrace.load.dumpset import DumpSet
from frtrace.load.tables import recorded_groups
from frtrace.model import GroupRef

__all__ = ["Membership", "resolve_groups"]

DEFAULT_GROUP_NAME = "0"
DEFAULT_GROUP_DESC = "default_pg"


@dataclass(frozen=True, slots=True, kw_only=True)
class Membership:
    """Every process group of the job, and which one each (rank, group name) refers to."""

    groups: tuple[GroupRef, ...]  # index = group id used by matching
    of_rank: dict[tuple[int, str], int]  # (global rank, group name) -> index into groups
    notes: tuple[MembershipInferred, ...]  # what was inferred and why

    def siblings(self, gid: int) -> list[int]:
        """Other groups of the same kind: same description (when it says something) and size.

        In SPMD training siblings (every tp group, every pp pair) run the same ops at the same
        sequence numbers, which breaks ties inside two-rank groups.
        """
        me = self.groups[gid]
        kind = (me.desc if me.desc not in (None, "", "undefined") else None, len(me.members))
        return [
            other
            for other, g in enumerate(self.groups)
            if other != gid
            and (g.desc if g.desc not in (None, "", "undefined") else None, len(g.members)) == kind
        ]

    def group_of(self, rank: int, name: str) -> GroupRef | None:
        """The group a rank meant by ``name``."""
        gid = self.of_rank.get((rank, name))
        return None if gid is None else self.groups[gid]


# Rows taken at a time where each rank's groups are found: the codes of a batch, not of every
# entry, are in memory (8 million entries: a few int64 arrays of 2 MB, not of 64 MB)
_BLOCK_ROWS = 1 << 18


def _entry_groups(entries: pa.Table) -> dict[str, dict[int, str | None]]:
    """group name -> {rank: desc} for every rank that recorded an entry in the group (each
    distinct (rank, name, desc) found by sorting codes, a batch of rows at a time, each with
    its own dictionaries: no column is joined or copied whole. 1.6 million entries at
    16,384 ranks, 49,000 distinct)."""
    out: dict[str, dict[int, str | None]] = defaultdict(dict)
    columns = entries.select(["rank", "group_name", "group_desc"])
    for batch in columns.to_batches(max_chunksize=_BLOCK_ROWS):
        if not batch.num_rows:
            continue
        name, name_values = _codes(batch.column(1))
        desc, desc_values = _codes(batch.column(2))
        desc_list: list[str | None] = [*desc_values, None]  # (-1: a null desc)
        width = len(desc_values) + 1
        # (name, desc) pairs first (few), then (rank, pair): no product of three counts. The
        # distinct values found by hashing, then sorted (a few hundred), not every row sorted
        pair_key = name * width + desc + 1
        pairs = np.sort(pd.unique(pair_key))
        pair_of = np.searchsorted(pairs, pair_key)
        rank = batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64)
        keys = np.sort(pd.unique(rank * len(pairs) + pair_of))
        pair = pairs[keys % len(pairs)]
        for r, n, d in zip(
            (keys // len(pairs)).tolist(),
            (pair // width).tolist(),
            (pair % width - 1).tolist(),
            strict=True,
        ):
            if n >= 0:
                out[name_values[n]][r] = desc_list[d]
    return out


def _codes(column: pa.Array) -> tuple[np.ndarray, list[str]]:
    """A text column of a batch as int64 codes (-1: null) into its distinct values."""
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    codes = column.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    values: list[str] = column.dictionary.to_pylist()
    return codes, values


def resolve_groups(dumps: DumpSet) -> Membership:
    """Work out every group's members; see the module docstring for the rules."""
    by_entries = _entry_groups(dumps.entries)
    recorded: dict[str, dict[int, tuple[int, ...]]] = defaultdict(dict)  # name -> rank -> members
    recorded_desc: dict[str, Counter[str]] = defaultdict(Counter)
    rows = recorded_groups(dumps.groups)
    # Before torch 2.4 a group's only name is the per-process pg_id, which differs between
    # ranks (each counts the groups it is a member of): the members identify the group.
    found = _Found(local_names=any(row.pg_id is not None for row in rows))
    for row in rows:
        if row.trusted and row.ranks:
            recorded[row.name][row.rank] = row.ranks
            if row.desc:
                recorded_desc[row.name][row.desc] += 1
    for name in sorted(set(by_entries) | set(recorded), key=_name_order):
        users = by_entries.get(name, {})
        descs = Counter(d for d in users.values() if d) + recorded_desc.get(name, Counter())
        desc = descs.most_common(1)[0][0] if descs else None
        unresolved = found.recorded(name, desc, users, recorded.get(name, {}))
        if unresolved:
            found.inferred(dumps, name, desc, unresolved)
    return Membership(groups=tuple(found.groups), of_rank=found.of_rank, notes=tuple(found.notes))


@dataclass
class _Found:
    """The groups found so far, and each (rank, name)'s group."""

    local_names: bool
    keys: dict[tuple[str, tuple[int, ...]], int] = field(default_factory=dict)
    groups: list[GroupRef] = field(default_factory=list)
    of_rank: dict[tuple[int, str], int] = field(default_factory=dict)
    notes: list[MembershipInferred] = field(default_factory=list)
    placed: set[tuple[str, tuple[int, ...]]] = field(default_factory=set)  # in of_rank

    def key_for(self, name: str, members: tuple[int, ...], desc: str | None, inferred: bool) -> int:
        key = ("" if self.local_names else name, tuple(sorted(members)))
        if key not in self.keys:
            self.keys[key] = len(self.groups)
            self.groups.append(GroupRef(name=name, desc=desc, members=members, inferred=inferred))
        return self.keys[key]

    def place(self, name: str, members: tuple[int, ...], gid: int) -> None:
        """Members without dumps belong to the group too (the first group found wins).
        Every rank of a 4,096-rank job records the default group's 4,096 members: each
        distinct member list is placed once, not once per rank that recorded it."""
        if (name, members) in self.placed:
            return
        self.placed.add((name, members))
        for member in members:
            self.of_rank.setdefault((member, name), gid)

    def recorded(
        self,
        name: str,
        desc: str | None,
        users: dict[int, str | None],
        sets: dict[int, tuple[int, ...]],
    ) -> list[int]:
        """Place the ranks of group ``name`` whose members are recorded (their own, or the
        one recorded list that holds them); return the others, unresolved."""
        distinct = set({id(m): m for m in sets.values()}.values())  # (hashes each list once)
        unresolved: list[int] = []
        known: dict[tuple[int, ...], int] = {}  # members -> gid, for this name
        # The same by identity: rows that recorded the same list share one tuple (see
        # recorded_groups), and hashing a 32,768-member tuple once per rank is 10^9 steps.
        seen: dict[int, int] = {}
        for rank in sorted(set(users) | set(sets)):
            members = sets.get(rank)
            if members is None:
                containing = [m for m in distinct if rank in m]
                members = containing[0] if len(containing) == 1 else None
            if members is None:
                unresolved.append(rank)
                continue
            gid = seen.get(id(members), -1)
            if gid == -1:
                gid = known.get(members, -1)
                if gid == -1:
                    gid = known[members] = self.key_for(name, members, desc, inferred=False)
                self.place(name, members, gid)
                seen[id(members)] = gid
            self.of_rank[(rank, name)] = gid
        return unresolved

    def inferred(self, dumps: DumpSet, name: str, desc: str | None, unresolved: list[int]) -> None:
        """The group of ranks whose members no record gives: inferred, and said so."""
        world = dumps.world.size
        is_default = name == DEFAULT_GROUP_NAME and desc in (DEFAULT_GROUP_DESC, None)
        size: int | None = None
        unseen: tuple[int, ...] = ()
        if is_default:
            members, how = tuple(range(world)), InferredFrom.DEFAULT_GROUP
        else:
            unseen = tuple(r for r in dumps.missing_ranks if r not in unresolved)
            size = _group_size(dumps.entries, name) if unseen else None
            members, how = _with_unseen_members(tuple(unresolved), size, unseen)
        gid = self.key_for(name, members, desc, inferred=True)
        self.place(name, members, gid)
        added = tuple(r for r in unseen if r in members)
        self.notes.append(
            MembershipInferred(
                group=self.groups[gid],
                how=how,
                world_size=world,
                recorded=() if is_default else tuple(unresolved),
                unseen=added,
                size=size if how == InferredFrom.RECORDED_AND_SIZE else None,
            )
        )


def _name_order(name: str) -> tuple[int, int | str]:
    """Numeric group names in numeric order, then the others alphabetically."""
    return (0, int(name)) if name.isdigit() else (1, name)


def _with_unseen_members(
    seen: tuple[int, ...], size: int | None, missing: tuple[int, ...]
) -> tuple[tuple[int, ...], InferredFrom]:
    """An inferred group's members: the ranks that recorded it, plus ranks without a dump
    where the entries show the group is larger (a missing dump must not shrink a group).

    The group's size comes from its all_gathers (Gloo and NCCL record the output stacked,
    ``[[size, *shape]]``). When exactly as many ranks have no dump as the group lacks, they
    are its other members; a group only one rank recorded while ranks have no dump is taken
    to include all of them (a one-member group has nobody to disagree with its one member).
    """
    unseen = missing
    if not unseen:
        return seen, InferredFrom.RECORDED
    if size is not None and size > len(seen) and size - len(seen) == len(unseen):
        return tuple(sorted(seen + unseen)), InferredFrom.RECORDED_AND_SIZE
    if len(seen) == 1 and (size is None or size > 1):
        return tuple(sorted(seen + unseen)), InferredFrom.ONLY_ONE
    return seen, InferredFrom.RECORDED


def _group_size(entries: pa.Table, name: str) -> int | None:
    """A group's size from its all_gathers' outputs, stacked as ``[[size, *shape]]``, where
    they agree on it (a few entries are enough)."""
    mask = pc.and_(
        pc.equal(entries.column("group_name"), name), pc.equal(entries.column("op"), "all_gather")
    )
    rows = pc.indices_nonzero(mask).slice(0, 64)  # (sizes are detail: read only these)
    gathers = entries.select(["input_sizes", "output_sizes"]).take(rows)
    found: set[int] = set()
    for inputs, outputs in zip(
        gathers.column("input_sizes").to_pylist(),
        gathers.column("output_sizes").to_pylist(),
        strict=True,
    ):
        if not inputs or not outputs or len(outputs) != 1:
            continue
        out = outputs[0]
        if len(out) >= 1 and list(out[1:]) == list(inputs[0]) and out[0] > 0:
            found.add(int(out[0]))
    return next(iter(found)) if len(found) == 1 else None
