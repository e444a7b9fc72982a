"""A large set's entry columns handed from a worker to the parent through a file, not a message.

For a large set (one whose columns go to disk anyway: ``frtrace.load.handover.spill``), each worker
appends every file's entry columns to a file of its own in the load's spill directory, one
``writev`` per dump, and sends the parent only where they are (``ShippedColumns``: file, offset,
rows), each column's validity where it has nulls, and each dictionary column's few values. The
parent neither unpickles nor copies a column per dump as it arrives: once every dump is in, it
reads the workers' files in file order into the table, the dictionary codes and stack ids
remapped to the shared ones on the way (``frtrace.load.handover.gather``). Measured at 1,024 ranks,
the
parent's share of the load was half its CPU (receiving, unpickling and appending ~35 column
chunks per dump, as many times as there are dumps), and on 2 cores the parent was the limit.
The worker's columns come laid out already (``frtrace.load.read.plain.PlainBatch``, read without
Arrow); a batch made in Arrow (a dump the parent reads itself) is read from its buffers.

Layout of one dump in a writer's file: its columns one after another, in the schema's order,
each padded to 8 bytes: fixed-width values as their numpy type (a null holds 0), a dictionary
column's codes into its own values (a null holds the dictionary's length), booleans a byte each.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from frtrace.load.read.interning import Stack
from frtrace.load.read.parse import DumpMeta, ParsedDump, PlainDump
from frtrace.load.read.plain import PlainBatch, Validity, of_arrow

__all__ = [
    "ALIGN",
    "ColumnWriter",
    "ShippedColumns",
    "ShippedDump",
    "encode",
    "padded",
]

ALIGN = 8


@dataclass(frozen=True, slots=True)
class ShippedColumns:
    """Where one dump's entry columns are in a writer's file."""

    path: str
    offset: int  # of the first column, in bytes
    rows: int
    valid: tuple[Validity, ...]  # per column
    dictionaries: tuple[list[Any] | None, ...]  # per column: a dictionary column's values

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its values in order (a slots dataclass's own way looks up its fields
        for every object: the parent unpickles one per dump)."""
        return (ShippedColumns, (self.path, self.offset, self.rows, self.valid, self.dictionaries))


@dataclass(frozen=True, slots=True, kw_only=True)
class ShippedDump:
    """A ``ParsedDump`` whose entries are in a writer's file (``ShippedColumns``)."""

    meta: DumpMeta
    columns: ShippedColumns
    stacks: tuple[Stack, ...]
    groups: tuple[dict[str, Any], ...]
    pg_status: tuple[dict[str, Any], ...]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its values in order (as ``ShippedColumns``)."""
        return (_shipped_dump, (self.meta, self.columns, self.stacks, self.groups, self.pg_status))


def _shipped_dump(
    meta: DumpMeta,
    columns: ShippedColumns,
    stacks: tuple[Stack, ...],
    groups: tuple[dict[str, Any], ...],
    pg_status: tuple[dict[str, Any], ...],
) -> ShippedDump:
    return ShippedDump(
        meta=meta, columns=columns, stacks=stacks, groups=groups, pg_status=pg_status
    )


def padded(nbytes: int) -> int:
    """``nbytes`` rounded up to ``ALIGN``: where the next column of a dump starts."""
    return -(-nbytes // ALIGN) * ALIGN


class ColumnWriter:
    """Appends dumps' entry columns to one file (a worker's own, in the spill directory)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / name
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        self.fd: int | None = os.open(self.path, flags, 0o600)  # (the columns are the dumps')
        self.at = 0

    def ship(self, parsed: ParsedDump | PlainDump) -> ShippedDump:
        """Write the dump's columns; what the parent needs to find them. ``OSError``: not
        written (disk full, say), and this writer writes no more."""
        return ShippedDump(
            meta=parsed.meta,
            columns=self.put(parsed.entries),
            stacks=parsed.stacks,
            groups=parsed.groups,
            pg_status=parsed.pg_status,
        )

    def put(self, batch: pa.RecordBatch | PlainBatch) -> ShippedColumns:
        if self.fd is None:
            raise OSError("this column file failed before")
        parts, valid, dictionaries = encode(batch)
        total = sum(len(p) for p in parts)
        try:
            done = os.writev(self.fd, parts) if parts else 0
            if done < total:  # (a write may take part of it)
                rest = b"".join(bytes(p) for p in parts)[done:]
                while rest:
                    taken = os.write(self.fd, rest)
                    if not taken:
                        raise OSError("nothing written")
                    rest = rest[taken:]
        except OSError:
            self.close()
            raise
        offset, self.at = self.at, self.at + total
        rows = batch.num_rows
        return ShippedColumns(str(self.path), offset, rows, valid, dictionaries)

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = None


def encode(
    batch: pa.RecordBatch | PlainBatch,
) -> tuple[list[Any], tuple[Validity, ...], tuple[list[Any] | None, ...]]:
    """A batch as a writer's file holds it: its parts (bytes-like), each column's validity
    and each dictionary column's values."""
    parts: list[Any] = []
    valid: list[Validity] = []
    dictionaries: list[list[Any] | None] = []
    plain = batch.columns if isinstance(batch, PlainBatch) else map(of_arrow, batch.columns)
    for column in plain:
        values = column.values
        parts.append(values.data.cast("B") if values.nbytes else b"")
        if pad := padded(values.nbytes) - values.nbytes:
            parts.append(bytes(pad))
        valid.append(column.valid)
        dictionaries.append(column.dictionary)
    return parts, tuple(valid), tuple(dictionaries)
