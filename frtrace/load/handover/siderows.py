"""The small tables beside the entries (files, groups, pg_status) and the load's problems,
gathered in file order: a dump at a time (``add_dump``, ``add_failed``), or a part made
elsewhere, a cluster task's dumps at once (``add_part``, see ``load.workers.bundle``).

A part is a few small tables, not a Python row a dump: at 100,000 ranks a coordinator that
added each dump's rows one by one spent most of its serial time there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from frtrace.incident.listing import Candidate
from frtrace.incident.problems import LoadProblem
from frtrace.load import schema
from frtrace.load.handover.members import MemberLists
from frtrace.load.handover.shipped import ShippedDump
from frtrace.load.read.filerows import failed_file_row, storable_rows
from frtrace.load.read.parse import ParsedDump

__all__ = ["GROUP_ROWS", "Part", "SideRows"]

_Tables = tuple[pa.Table, pa.Table, np.ndarray, pa.Table]  # files, groups, codes, pg_status

# The groups table without its member lists (a part's rows hold codes into its own lists).
GROUP_ROWS = pa.schema([f for f in schema.GROUPS if f.name != "ranks"])


@dataclasses.dataclass(frozen=True, slots=True)
class Part:
    """Some dumps' side rows: ``groups`` rows' member lists are ``codes`` (-1: none) into the
    lists of the ``MemberLists`` that made them; ``loaded``: how many of the files loaded."""

    files: pa.Table  # schema.FILES
    groups: pa.Table  # GROUP_ROWS
    codes: np.ndarray  # int32, a code a groups row
    pg_status: pa.Table  # schema.PG_STATUS
    problems: tuple[LoadProblem, ...]
    loaded: int


class SideRows:
    """The side tables of a load, as dumps (or parts) arrive in file order."""

    def __init__(self) -> None:
        self.members = MemberLists()
        self.problems: list[LoadProblem] = []
        self.loaded = 0
        self._files: list[dict[str, Any]] = []
        self._groups: list[dict[str, Any]] = []
        self._status: list[dict[str, Any]] = []
        self._parts: list[_Tables] = []  # rows already tables, in order (the rows above after)

    def add_failed(self, cand: Candidate, error: str) -> None:
        """A file that could not be read: a fatal problem and its files row."""
        path = str(cand.path)
        self.problems.append(LoadProblem(rank=cand.rank, path=path, message=error, fatal=True))
        self._files.append(failed_file_row(cand, error))

    def add_dump(self, dump: ParsedDump | ShippedDump) -> None:
        meta = dump.meta
        self.problems.extend(
            LoadProblem(rank=meta.rank, path=meta.path, message=f"{meta.path}: {p}", fatal=False)
            for p in meta.problems
        )
        self.loaded += 1
        self._groups.extend(map(self.members.intern, dump.groups))
        self._status.extend(dump.pg_status)
        self._files.append(
            {
                "rank": meta.rank,
                "path": meta.path,
                "size_bytes": meta.size_bytes,
                "loaded": True,
                "error": None,
                "encoding": meta.encoding,
                "format_version": meta.format_version,
                "layout": meta.layout,
                "backend": meta.backend,
                "comm_lib_version": meta.comm_lib_version,
                "entry_count": meta.entry_count,
                "record_id_min": meta.record_id_min,
                "record_id_max": meta.record_id_max,
                "wrapped": meta.wrapped,
                "has_stacks": meta.has_stacks,
                "problems": list(meta.problems),
            }
        )

    def add_part(self, part: Part, lists: Sequence[tuple[bytes, np.ndarray | None]]) -> None:
        """A part made by another ``SideRows`` (``part()``); ``lists``: that one's member
        lists by key, each here once (a list given as None is one this one holds already)."""
        self._flush()
        self.problems.extend(part.problems)
        self.loaded += part.loaded
        codes = part.codes
        if len(lists):
            mine = np.array([self.members.code(key, ranks) for key, ranks in lists] + [-1])
            codes = mine[codes].astype(np.int32)  # (-1 picks the -1 after them)
        self._parts.append((part.files, part.groups, codes, part.pg_status))

    def part(self) -> Part:
        """Everything added so far, as one part (its codes into ``members``)."""
        files, groups, codes, status = self._joined()
        return Part(files, groups, codes, status, tuple(self.problems), self.loaded)

    def tables(self) -> tuple[pa.Table, pa.Table, pa.Table]:
        """The files, groups and pg_status tables."""
        files, groups, codes, status = self._joined()
        ranks = self.members.array(codes)
        groups = groups.append_column(schema.GROUPS.field("ranks"), ranks)
        return files, groups.select(schema.GROUPS.names), status

    def _joined(self) -> _Tables:
        self._flush()
        parts, self._parts = self._parts, []
        if len(parts) == 1:
            return parts[0]
        files, groups, codes, status = zip(*parts, strict=True) if parts else ((), (), (), ())
        return (
            _concat(files, schema.FILES),
            _concat(groups, GROUP_ROWS),
            np.concatenate(codes) if codes else np.zeros(0, np.int32),
            _concat(status, schema.PG_STATUS),
        )

    def _flush(self) -> None:
        """The rows added one by one since the last part, as tables of their own."""
        if not (self._files or self._groups or self._status):
            return
        groups, self._groups = self._groups, []
        plain = {name: [r[name] for r in groups] for name in GROUP_ROWS.names}
        self._parts.append(
            (
                pa.Table.from_pylist(storable_rows(self._files), schema=schema.FILES),
                pa.table(plain, schema=GROUP_ROWS),
                np.array([r["ranks"] for r in groups], dtype=np.int32),
                pa.Table.from_pylist(self._status, schema=schema.PG_STATUS),
            )
        )
        self._files, self._status = [], []


def _concat(tables: Sequence[pa.Table], schema_: pa.Schema) -> pa.Table:
    """One table, one chunk a column, one dictionary a dictionary column (as a table read
    a dump at a time is: the cache's IPC file cannot hold a dictionary that changes)."""
    if not tables:
        return schema_.empty_table()
    return pa.concat_tables(tables).unify_dictionaries().combine_chunks()
