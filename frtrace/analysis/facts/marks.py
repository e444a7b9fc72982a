"""A rank's own completion marks against its peers': a member that ran ops its marks never
completed.

A collective completes on no member unless every member ran it, and the ops of one group run
in order on each member's stream. So where the other members of a group completed its op #F
by their own marks (an entry's ``state``, their ``pg_status``), every member ran every op of
the group up to #F. A member whose own entries of the group stay ``scheduled`` (or
``started``) from #N <= #F on ran #N..#F all the same: only its completion marks stopped (its
GPU failed, its watchdog stopped looking), and it is not held up before anything at #N. An
onlyActive dump shows exactly this where a rank's GPU fails: the peers' entries of those ops
are gone (completed), their ``pg_status`` says how far they got.

It is read only where it cannot be something else:

- from the peers' own marks alone: never from the member's own entries or ``pg_status``, nor
  from the completion that matching settles across members (in which the member's own
  entries take part);
- only where states mean something (NCCL): a Gloo rank's entries never change state and its
  ``pg_status`` counts a failed op as completed (``stateless``), so neither the member nor a
  peer of Gloo is read;
- from a peer's ``pg_status`` only where its value counts collectives: joined through the
  peer's own entries of the group (a pg_id is per process), on a group where no p2p entry is
  seen (p2p work counts the p2p sequence in the same value), and no higher than the member's
  own newest op of the group (no member completes an op another never enqueued);
- only where every other member with a dump shows #N or later completed by its own marks: one
  still inside an op of the group at or before #N means the op is in flight (a broadcast's
  root finishes before its receivers), and one whose marks say nothing of the group (no entry
  of it left, so no pg_status to read) may be there too. Where several members' marks stop in
  one group, the others must have completed an op after every one of theirs (#F > #N):
  members inside one op together look so while it runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa

from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.ops import COLLECTIVE, MatchResult, OpRef
from frtrace.detail import MarksStopped
from frtrace.load.dumpset import DumpSet

__all__ = ["stopped_marks"]

_BY = 8  # the peers named as the ones whose marks show it


@dataclass(slots=True)
class _Marks:
    """What one member's own marks say of one group."""

    completed: int | None = None  # its highest seq of the group marked completed (entries)
    unfinished: int | None = None  # its lowest seq of the group not marked completed
    newest: int | None = None  # its highest seq of the group
    pg_ids: set[int] = field(default_factory=set)  # its own pg_ids of the group


def stopped_marks(
    dumps: DumpSet,
    membership: Membership,
    matched: MatchResult,
    stateless: frozenset[int],
    ranks: Iterable[int],
) -> dict[int, MarksStopped]:
    """Of ``ranks``, those blocked in a collective their own marks never completed although
    the group's other members completed it, or a later op of the group (see the module
    docstring): what shows it, per rank."""
    suspects: dict[int, OpRef] = {}
    for r in ranks:
        op = matched.blocked.get(r)
        if (
            op is not None
            and op.kind == COLLECTIVE
            and op.seq is not None
            and op.state_rank < 2
            and r not in stateless
        ):
            suspects[r] = op
    if not suspects:
        return {}
    gids = {op.gid for op in suspects.values()}
    marks = _marks_of(dumps, matched, gids)
    mixed = _with_p2p(matched, gids)
    status = _status_of(dumps, marks, gids - mixed)
    loaded = set(dumps.loaded_ranks)
    out: dict[int, MarksStopped] = {}
    for r, op in suspects.items():
        found = _stopped(r, op, suspects, marks, status, loaded, stateless, membership)
        if found is not None:
            out[r] = found
    return out


def _stopped(
    r: int,
    op: OpRef,
    suspects: dict[int, OpRef],
    marks: dict[tuple[int, int], _Marks],
    status: dict[tuple[int, int], int],
    loaded: set[int],
    stateless: frozenset[int],
    membership: Membership,
) -> MarksStopped | None:
    """What shows that ``r``'s marks stopped at ``op`` (None: nothing, or not beyond doubt)."""
    gid, n = op.gid, op.seq
    assert n is not None
    mine = marks.get((r, gid))
    if mine is None or mine.newest is None:
        return None
    group = membership.groups[gid]
    beside = [v for v, o in suspects.items() if v != r and o.gid == gid]
    progressed: dict[int, tuple[int, str]] = {}  # peer -> (its frontier, from where)
    for v in group.members:
        if v == r or v not in loaded or v in stateless or v in beside:
            continue
        theirs = marks.get((v, gid))
        by_entries = theirs.completed if theirs is not None else None
        if by_entries is not None and by_entries > mine.newest:
            return None  # a peer completed what r never enqueued: r's dump is not of now
        by_status = status.get((v, gid))
        if by_status is not None and by_status > mine.newest:
            by_status = None  # not a count of collectives r's entries can be held against
        if theirs is not None and theirs.unfinished is not None and theirs.unfinished <= n:
            return None  # v is inside an op at or before #n itself: in flight, not stopped
        best = max((x for x in (by_entries, by_status) if x is not None), default=None)
        if best is None or best < n:
            return None  # v's own marks do not show #n completed: the others did not all
        if by_entries == best:
            progressed[v] = (best, "both" if by_status == best else "entries")
        else:
            progressed[v] = (best, "pg_status")
    if not progressed:
        return None
    frontier = max(f for f, _ in progressed.values())
    if beside and frontier <= max(n, *(suspects[v].seq or 0 for v in beside)):
        return None  # several members inside one op together: it may be running
    by = sorted(v for v, (f, _) in progressed.items() if f == frontier)
    sources = {progressed[v][1] for v in by}
    where: Literal["entries", "pg_status", "both"] = "both"
    if sources == {"entries"} or sources == {"pg_status"}:
        where = "entries" if sources == {"entries"} else "pg_status"
    return MarksStopped(
        rank=r,
        group=group,
        op=op.op,
        first_unmarked=n,
        last_marked=n - 1,
        peers_completed=frontier,
        by=tuple(by[:_BY]),
        source=where,
    )


def _marks_of(
    dumps: DumpSet, matched: MatchResult, gids: set[int]
) -> dict[tuple[int, int], _Marks]:
    """Each member's own marks of the groups ``gids``: its logical collectives' own states
    (never the completion matching settled across members), and its pg_ids there."""
    ops = matched.collectives
    at = ops["gid"].isin(sorted(gids)).to_numpy()
    if not at.any():
        return {}
    rank = ops["rank"].to_numpy()[at]
    gid = ops["gid"].to_numpy()[at]
    seq = ops["seq"].to_numpy(dtype=np.int64)[at]
    state = ops["state_rank"].to_numpy()[at]
    rows = pa.array(ops["row"].to_numpy()[at], type=pa.int64())
    pg_ids = dumps.entries.column("pg_id").take(rows).to_pylist()
    out: dict[tuple[int, int], _Marks] = {}
    for r, g, q, s, pg in zip(
        rank.tolist(), gid.tolist(), seq.tolist(), state.tolist(), pg_ids, strict=True
    ):
        m = out.setdefault((r, g), _Marks())
        m.newest = q if m.newest is None else max(m.newest, q)
        if s == 2:
            m.completed = q if m.completed is None else max(m.completed, q)
        else:
            m.unfinished = q if m.unfinished is None else min(m.unfinished, q)
        if pg is not None:
            m.pg_ids.add(int(pg))
    return out


def _with_p2p(matched: MatchResult, gids: set[int]) -> set[int]:
    """The groups of ``gids`` where some rank recorded a send or recv."""
    p2p = matched.p2p
    if p2p.empty:
        return set()
    return {int(g) for g in p2p["gid"].unique().tolist()} & gids


def _status_of(
    dumps: DumpSet, marks: dict[tuple[int, int], _Marks], gids: set[int]
) -> dict[tuple[int, int], int]:
    """Each member's ``pg_status.last_completed`` of the groups ``gids``, joined through the
    pg_ids of its own entries there (one value: two that differ are not read)."""
    table = dumps.pg_status
    if table.num_rows == 0 or not gids:
        return {}
    wanted: dict[tuple[int, int], tuple[int, int]] = {}  # (rank, pg_id) -> (rank, gid)
    for (r, g), m in marks.items():
        if g in gids:
            for pg in m.pg_ids:
                wanted[(r, pg)] = (r, g)
    values: dict[tuple[int, int], set[int]] = {}
    for r, pg, last in zip(
        table.column("rank").to_pylist(),
        table.column("pg_id").to_pylist(),
        table.column("last_completed").to_pylist(),
        strict=True,
    ):
        key = wanted.get((r, pg))
        if key is not None and last is not None and last >= 0:
            values.setdefault(key, set()).add(int(last))
    return {key: next(iter(v)) for key, v in values.items() if len(v) == 1}
