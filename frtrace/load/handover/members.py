"""The groups table: each rank's ``pg_config`` rows, with every distinct member list stored once.

Every rank records the default group's world-size member list (and each data-parallel group's
thousands): kept per row, a 32,768-rank job's lists would take 4 GB and grow with the square of
the job. Rows hold an index into the distinct lists instead (``schema.GROUPS.ranks`` is
dictionary-encoded), keyed by a digest worked out where the file is read (``formats``).
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from frtrace.load.read.formats import members_key

__all__ = ["MemberLists", "RecordedGroup", "recorded_groups"]


class MemberLists:
    """Distinct group member lists, each stored once: rows keep an index into them."""

    def __init__(self) -> None:
        self.index: dict[bytes, int] = {}
        self.lists: list[np.ndarray] = []
        self.keys: list[bytes] = []  # each list's digest

    def intern(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row with ``ranks`` replaced by the index of its list (-1: none)."""
        ranks = row["ranks"]
        code = -1
        if ranks is not None:
            code = self.code(row.get("ranks_key") or members_key(ranks) or b"", ranks)
        return {**row, "ranks": code}

    def code(self, key: bytes, ranks: Any) -> int:
        """The index of the list of digest ``key`` (``ranks`` stored where it is new; -1 for
        a new one given as None)."""
        code = self.index.get(key, -1)
        if code == -1 and ranks is not None:
            code = self.index[key] = len(self.lists)
            self.keys.append(key)
            self.lists.append(np.asarray(ranks, dtype=np.int32))
        return code

    def array(self, codes: list[int] | np.ndarray) -> pa.DictionaryArray:
        lengths = np.array([len(x) for x in self.lists], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = np.concatenate(self.lists) if self.lists else np.zeros(0, dtype=np.int32)
        distinct = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int32()))
        indices = np.array(codes, dtype=np.int32)
        return pa.DictionaryArray.from_arrays(
            pa.array(indices, type=pa.int32(), mask=indices < 0), distinct
        )


class RecordedGroup(NamedTuple):
    """One row of the groups table, with its member tuple shared by identical rows (a tuple:
    a large job has a row per rank and group, and a frozen dataclass is slow to make)."""

    rank: int
    name: str
    desc: str | None
    ranks: tuple[int, ...] | None
    pg_id: int | None
    trusted: bool


def recorded_groups(groups: pa.Table) -> tuple[RecordedGroup, ...]:
    """The groups table as rows; each distinct member list is parsed once and shared by the
    rows that recorded it (rank lists repeat: every rank records the default group's
    thousands of members). The rows of the table asked for last are kept (the load and the
    analysis both read them: 65,000 rows at 16,384 ranks)."""
    for table, rows in _LAST:
        if table() is groups:
            return rows
    rows = tuple(_rows(groups))
    _LAST[:] = [(weakref.ref(groups), rows)]
    return rows


_LAST: list[tuple[weakref.ref[pa.Table], tuple[RecordedGroup, ...]]] = []  # (one, or none)


def _rows(groups: pa.Table) -> list[RecordedGroup]:
    out: list[RecordedGroup] = []
    if not groups.num_rows:
        return out
    column = groups.column("ranks").combine_chunks()
    if isinstance(column, pa.ChunkedArray):  # (pyarrow < 15 returns one)
        column = column.chunk(0) if column.num_chunks == 1 else pa.concat_arrays(column.chunks)
    if pa.types.is_dictionary(column.type):
        values, picks = column.dictionary, column.indices
    else:  # a plain list column (tables written by hand)
        values, picks = column, pa.array(np.arange(len(column), dtype=np.int32))
    offsets = values.offsets.to_numpy()
    flat = values.values.to_numpy(zero_copy_only=False)
    interned: dict[bytes, tuple[int, ...]] = {}
    distinct: list[tuple[int, ...] | None] = []
    valid = values.is_valid().to_numpy(zero_copy_only=False).tolist()
    for i in range(len(values)):
        if not valid[i]:
            distinct.append(None)
            continue
        raw = flat[offsets[i] : offsets[i + 1]].astype(np.int32)
        key = raw.tobytes()
        members = interned.get(key)
        if members is None:
            members = interned[key] = tuple(raw.tolist())
        distinct.append(members)
    codes = picks.fill_null(-1).to_numpy(zero_copy_only=False)
    meta = zip(
        *(
            groups.column(c).to_pylist()
            for c in ("rank", "group_name", "group_desc", "pg_id", "trusted")
        ),
        codes.tolist(),
        strict=True,
    )
    return [
        RecordedGroup(
            rank=rank,
            name=name,
            desc=desc,
            ranks=None if code < 0 else distinct[code],
            pg_id=pg_id,
            trusted=trusted,
        )
        for rank, name, desc, pg_id, trusted, code in meta
    ]
