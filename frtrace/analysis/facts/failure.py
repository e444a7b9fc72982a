"""A failed op is not a finished op: which retired collectives could not have completed.

Gloo marks an op ``retired`` when it *fails* or times out, exactly as when it finishes, and
the dumps that real hangs leave are mostly written after that (from an exception handler, the
recorder's excepthook, a watchdog on timeout). Read as "finished", such an op hides the hang.
A collective cannot complete unless every member entered it, so a retired op at (group, seq)
``k`` failed when the dumps show any of:

- ``absent``: a member with a dump never reached ``k`` (its newest seq in the group is lower;
  the newest entries are never the ones a ring buffer drops);
- ``late``: a member entered ``k`` after another member's op had already timed out (its
  ``time_created_ns`` is more than the other's ``timeout_ms`` later; clocks of different hosts
  are allowed a margin);
- ``stopped``: a member has no dump, and every member with a dump stopped in ``k``: it is the
  newest entry of each of them, in every group. Nothing vouches for the missing member, and a
  job that stopped in an op whose members cannot all be seen is where to look first.

None of this applies once any member shows ``k`` ``completed`` (NCCL's CUDA-event state): then
it did complete, and a member without it has a dump older than its peers'. Nor when a member
moved past ``k`` in the group (a later seq): the op returned there. On NCCL a timed-out op is
``retired`` without ``completed`` and is not counted as done in the first place; it is still
reported here when a member joined it late, so that the late rank is named.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from frtrace.analysis.facts.groups import Membership
from frtrace.analysis.facts.segments import locate_ops, per_row
from frtrace.load.dumpset import DumpSet

__all__ = ["FailedOp", "find_failed"]

# Clocks of different hosts may disagree by this much before a late entry counts as "after
# the timeout" (NTP keeps them within milliseconds; a second is generous).
_SKEW_NS = 1_000_000_000
_SKEW_FRACTION = 0.05  # ... or this share of the timeout, whichever is larger


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedOp:
    """A collective that was retired on some members but cannot have completed."""

    gid: int
    seq: int
    reason: str  # "absent" | "late" | "stopped"
    absent: tuple[int, ...]  # members with a dump that never reached it
    late: tuple[int, ...]  # members that entered it after a peer's timeout had expired
    missing: tuple[int, ...]  # members without a readable dump
    retired_on: tuple[int, ...]  # members whose dump shows it retired: dumped after it failed
    late_by_s: float | None  # how long after the earliest member the latest one entered
    timeout_s: float | None  # the earliest member's timeout for it


def find_failed(
    dumps: DumpSet,
    membership: Membership,
    collectives: pd.DataFrame,
    consensus: pd.DataFrame,
    spans: pd.DataFrame,
) -> dict[tuple[int, int], FailedOp]:
    """Failed collectives by (gid, seq); see the module docstring.

    ``collectives`` are the logical collectives before completion is settled (``done`` is
    each member's own: retired on Gloo, completed on NCCL); ``spans`` their
    ``segments.rank_group_spans``.
    """
    if collectives.empty:
        return {}
    tops: dict[int, dict[int, int]] = {}
    for r, g, s in zip(
        spans["rank"].tolist(), spans["gid"].tolist(), spans["max"].tolist(), strict=True
    ):
        tops.setdefault(int(g), {})[int(r)] = int(s)
    candidates = _candidates(membership, tops)
    if not candidates:
        return {}
    at = locate_ops(
        consensus["gid"].to_numpy(), consensus["seq"].to_numpy(dtype=np.int64), candidates
    )
    is_candidate = np.zeros(len(consensus), dtype=bool)
    is_candidate[at] = True
    rows = collectives[per_row(is_candidate, consensus["n_present"].to_numpy())]
    seen = _Seen.of(dumps, tops)
    out: dict[tuple[int, int], FailedOp] = {}
    for (g, k), op in _ops_of(rows):
        failed = _failed(seen, membership.groups[g].members, g, k, op)
        if failed is not None:
            out[(g, k)] = failed
    return out


@dataclass(frozen=True, slots=True)
class _Op:
    """One candidate op: whether a member shows it completed, and its members' rows."""

    completed: bool
    ranks: list[int]
    done: list[bool]
    created: list[int | None]  # time_created_ns
    first_row: list[int]  # its first entry's row
    last_row: list[int]  # its last entry's row (coalesced ops span several)


def _ops_of(rows: pd.DataFrame) -> Iterator[tuple[tuple[int, int], _Op]]:
    """Each (gid, seq) of ``rows`` in order, with its rows as plain values (a pandas slice
    per op was most of a 4,096-rank analysis: there is an op per group)."""
    rows = rows[rows["gid"].notna() & rows["seq"].notna()]
    rows = rows.sort_values(["gid", "seq"], kind="stable")
    if rows.empty:
        return
    gid = rows["gid"].to_numpy(dtype=np.int64)
    seq = rows["seq"].to_numpy(dtype=np.int64)
    completed = rows["state_rank"].eq(2).fillna(False).to_numpy(dtype=bool)
    ranks = [int(r) for r in rows["rank"].tolist()]
    done = rows["done"].astype(bool).tolist()
    created = [None if pd.isna(t) else int(t) for t in rows["created_ns"].tolist()]
    first, last = rows["row"].tolist(), rows["last_row"].tolist()
    starts = np.flatnonzero(np.r_[True, (gid[1:] != gid[:-1]) | (seq[1:] != seq[:-1])])
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(gid)], strict=True):
        op = _Op(
            bool(completed[a:b].any()), ranks[a:b], done[a:b], created[a:b], first[a:b], last[a:b]
        )
        yield (int(gid[a]), int(seq[a])), op


def _candidates(membership: Membership, tops: dict[int, dict[int, int]]) -> list[tuple[int, int]]:
    """Only ops above some member's newest seq, or a group's newest op, can be failed ones:
    a handful per group, whatever the size of the buffers."""
    candidates: list[tuple[int, int]] = []
    for g, by_rank in tops.items():
        members = membership.groups[g].members
        present = [by_rank[m] for m in members if m in by_rank]
        if not present:
            continue  # (damaged dumps: entries of a group none of whose members recorded them)
        highest = max(present)
        lowest = min(present) if len(present) == len(members) else highest
        start = max(min(lowest, highest - 1), highest - 64) + 1
        candidates.extend((g, s) for s in range(start, highest + 1))
    return candidates


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the dumps say of every rank, for judging one op."""

    loaded: set[int]
    wrapped: set[int]  # ranks whose buffer wrapped (older entries dropped)
    timeout: np.ndarray  # each entry's timeout_ms
    newest_row: dict[int, int]  # each rank's newest entry row
    tops: dict[int, dict[int, int]]  # gid -> rank -> highest seq it entered

    @classmethod
    def of(cls, dumps: DumpSet, tops: dict[int, dict[int, int]]) -> _Seen:
        files = dumps.files
        wrapped = {
            int(r)
            for r, w in zip(
                files.column("rank").to_pylist(), files.column("wrapped").to_pylist(), strict=True
            )
            if w
        }
        # each rank's newest entry row: "stopped" means an op's last entry is the rank's last
        rank_col = dumps.entries.column("rank").to_numpy()
        newest_row: dict[int, int] = {}
        if len(rank_col):
            ends = np.flatnonzero(np.r_[rank_col[1:] != rank_col[:-1], True])
            newest_row = {int(rank_col[i]): int(i) for i in ends}
        return cls(
            loaded=set(dumps.loaded_ranks),
            wrapped=wrapped,
            timeout=dumps.entries.column("timeout_ms").to_numpy(zero_copy_only=False),
            newest_row=newest_row,
            tops=tops,
        )


def _failed(seen: _Seen, members: tuple[int, ...], g: int, k: int, op: _Op) -> FailedOp | None:
    """Whether op ``k`` of group ``g`` (its members' rows: ``op``) failed, and how."""
    if op.completed:
        return None  # completed on a member (NCCL): it did complete
    tops = seen.tops[g]
    if tops and max(tops.values()) > k:
        return None  # a member moved past it: it returned there
    ranks = op.ranks
    done = dict(zip(ranks, op.done, strict=True))
    created = dict(zip(ranks, op.created, strict=True))
    first_row = dict(zip(ranks, op.first_row, strict=True))
    last_row = dict(zip(ranks, op.last_row, strict=True))
    absent = tuple(
        m
        for m in members
        if m in seen.loaded
        and m not in done
        and (tops.get(m, -1) < k if m in tops else m not in seen.wrapped)
    )
    missing = tuple(m for m in members if m not in seen.loaded)
    late, late_by, limit = _late_joiners(created, first_row, seen.timeout)
    stopped = bool(missing) and all(seen.newest_row.get(r) == last_row[r] for r in ranks)
    retired_on = tuple(sorted(r for r, d in done.items() if d))
    if absent and retired_on:
        reason = "absent"
    elif late:
        reason = "late"
    elif stopped and retired_on and len(retired_on) == len(ranks):
        reason = "stopped"
    else:
        return None
    return FailedOp(
        gid=g,
        seq=k,
        reason=reason,
        absent=absent,
        late=late,
        missing=missing,
        retired_on=retired_on,
        late_by_s=late_by,
        timeout_s=limit,
    )


def _late_joiners(
    created: dict[int, int | None], first_row: dict[int, int], timeout: np.ndarray
) -> tuple[tuple[int, ...], float | None, float | None]:
    """Members that entered after the earliest member's op had timed out."""
    times = {r: t for r, t in created.items() if t is not None}
    if len(times) < 2:
        return (), None, None
    earliest = min(times, key=lambda r: (times[r], r))
    limit_ms = timeout[first_row[earliest]]
    if limit_ms is None or pd.isna(limit_ms) or int(limit_ms) <= 0:
        return (), None, None
    limit_ns = int(limit_ms) * 1_000_000
    margin = max(_SKEW_NS, int(limit_ns * _SKEW_FRACTION))
    start = times[earliest]
    late = tuple(sorted(r for r, t in times.items() if t - start > limit_ns + margin))
    spread = (max(times.values()) - start) / 1e9
    return late, spread, limit_ns / 1e9
