"""A cluster task's dumps as one result: their entries in one table, their file, group and
pg_status rows as small tables, made on the worker (``bundle``). The coordinator adds a
task's in one step (``tables._Assembler``), not each dump's Python rows: at 100,000 ranks
those rows, unpickled and added one by one, were most of its serial time.

A dump's large member lists (the default group's, thousands of ranks in every dump) stay
on the workers where the coordinator holds them already (``load.workers.cluster``): the bundle
names them by digest. Paths are the worker's; ``relocated`` spells them as given here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from frtrace.base.printable import utf8_text
from frtrace.errors import DumpFormatError
from frtrace.incident.listing import Candidate
from frtrace.incident.problems import LoadProblem
from frtrace.load import schema
from frtrace.load.handover.merging import EntryColumns, remap_stacks
from frtrace.load.handover.siderows import Part, SideRows
from frtrace.load.read.interning import Stack
from frtrace.load.read.parse import ParsedDump
from frtrace.load.read.wire import Wire, batch_from_wire, batch_to_wire, empty_batch

__all__ = ["Bundle", "bundle"]

Lists = tuple[tuple[bytes, np.ndarray | None], ...]  # a member list by digest; None: held there


@dataclasses.dataclass(frozen=True, slots=True)
class Bundle:
    """``count`` consecutive files, read: handed over at the index of the first."""

    count: int
    paths: tuple[str, ...]  # each file's path as it was read
    rows: Part  # their side rows, the groups' member lists as codes into ``lists``
    lists: Lists
    entries: pa.RecordBatch  # schema.ENTRIES, every file's in order; stack ids into ``stacks``
    stacks: tuple[Stack, ...]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its entries as plain buffers (``load.read.wire``)."""
        wire = batch_to_wire(self.entries)
        return (_from_wire, (self.count, self.paths, self.rows, self.lists, *wire, self.stacks))

    def relocated(self, local: Sequence[Candidate]) -> Bundle:
        """The bundle as if its files had been read at the paths spelled here (maybe
        relative): in the files table, and in the problems that name them."""
        paths = tuple(str(c.path) for c in local)
        if paths == self.paths:
            return self
        moved = dict(zip(self.paths, paths, strict=True))
        files = self.rows.files
        errors = [
            None if e is None else e.replace(utf8_text(old), utf8_text(new))
            for e, old, new in zip(
                files.column("error").to_pylist(), self.paths, paths, strict=True
            )
        ]
        for name, values in (("path", [utf8_text(p) for p in paths]), ("error", errors)):
            at = files.schema.get_field_index(name)
            files = files.set_column(at, files.schema.field(at), pa.array(values, pa.string()))
        problems = tuple(
            LoadProblem(
                rank=p.rank,
                path=moved.get(p.path, p.path),
                message=p.message.replace(p.path, moved.get(p.path, p.path)),
                fatal=p.fatal,
            )
            for p in self.rows.problems
        )
        rows = dataclasses.replace(self.rows, files=files, problems=problems)
        return dataclasses.replace(self, paths=paths, rows=rows)


def _from_wire(
    count: int,
    paths: tuple[str, ...],
    rows: Part,
    lists: Lists,
    entries_schema: pa.Schema,
    columns: list[Wire],
    stacks: tuple[Stack, ...],
) -> Bundle:
    entries = batch_from_wire(entries_schema, columns)
    return Bundle(count, paths, rows, lists, entries, stacks)


def bundle(
    candidates: Sequence[Candidate],
    results: Sequence[ParsedDump | DumpFormatError],
    held: frozenset[bytes] | set[bytes] = frozenset(),
) -> Bundle:
    """The files' results as one bundle; the member lists whose digests are in ``held`` are
    left out (the coordinator has them)."""
    side, merged = SideRows(), EntryColumns()
    interned: dict[Stack, int] = {}
    paths, rows = [], 0
    for cand, result in zip(candidates, results, strict=True):
        if isinstance(result, DumpFormatError):
            side.add_failed(cand, str(result))
            paths.append(str(cand.path))
            continue
        side.add_dump(result)
        paths.append(result.meta.path)
        if result.entries.num_rows:
            merged.add(remap_stacks(result.entries, result.stacks, interned))
            rows += result.entries.num_rows
    if rows:
        columns = [merged.column(i) for i in range(len(schema.ENTRIES))]
        entries = pa.RecordBatch.from_arrays(columns, schema=schema.ENTRIES)
    else:
        entries = empty_batch(schema.ENTRIES)
    members = side.members
    lists = tuple(
        (key, None if key in held else ranks)
        for key, ranks in zip(members.keys, members.lists, strict=True)
    )
    return Bundle(len(paths), tuple(paths), side.part(), lists, entries, tuple(interned))
