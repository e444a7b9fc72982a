"""A large set's entry columns handed from a worker to the parent through a file, not a message.

For a large set (one whose columns go to disk anyway: ``frtrace.load.spill``), each worker
appends every file's entry columns to a file of its own in the load's spill directory, one
``writev`` per dump, and sends the parent only where they are (``ShippedColumns``: file, offset,
rows), each column's validity where it has nulls, and each dictionary column's few values. The
parent neither unpickles nor copies a column per dump: it maps the workers' files once, at the
end, and gathers each column in file order into the table's column, the dictionary codes and
stack ids remapped to the shared ones on the way (``Gather``). Measured at 1,024 ranks, the
parent's share of the load was half its CPU (receiving, unpickling and appending ~35 column
chunks per dump, as many times as there are dumps), and on 2 cores the parent was the limit.

Layout of one dump in a writer's file: its columns one after another, in the schema's order,
each padded to 8 bytes: fixed-width values as their numpy type (a null holds 0), a dictionary
column's codes into its own values (a null holds the dictionary's length), booleans a byte each.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from frtrace.load import spill
from frtrace.load.parse import DumpMeta, ParsedDump
from frtrace.load.stacks import Stack

__all__ = ["ColumnWriter", "Gather", "ShippedColumns", "ShippedDump", "column_dtype"]

ALIGN = 8

# A column's validity in one dump: True (no null), False (all null), else a bool per row.
Validity = np.ndarray | bool


@dataclass(frozen=True, slots=True)
class ShippedColumns:
    """Where one dump's entry columns are in a writer's file."""

    path: str
    offset: int  # of the first column, in bytes
    rows: int
    valid: tuple[Validity, ...]  # per column
    dictionaries: tuple[list[Any] | None, ...]  # per column: a dictionary column's values


@dataclass(frozen=True, slots=True, kw_only=True)
class ShippedDump:
    """A ``ParsedDump`` whose entries are in a writer's file (``ShippedColumns``)."""

    meta: DumpMeta
    columns: ShippedColumns
    stacks: tuple[Stack, ...]
    groups: tuple[dict[str, Any], ...]
    pg_status: tuple[dict[str, Any], ...]


def column_dtype(type_: pa.DataType) -> np.dtype[Any]:
    """How a column of ``type_`` is laid out in a writer's file."""
    if pa.types.is_boolean(type_):
        return np.dtype(np.uint8)
    if pa.types.is_dictionary(type_):
        type_ = type_.index_type
    dtype: np.dtype[Any] = np.dtype(type_.to_pandas_dtype())
    return dtype


def _padded(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


class ColumnWriter:
    """Appends dumps' entry columns to one file (a worker's own, in the spill directory)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / name
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        self.fd: int | None = os.open(self.path, flags, 0o600)  # (the columns are the dumps')
        self.at = 0

    def ship(self, parsed: ParsedDump) -> ShippedDump:
        """Write the dump's columns; what the parent needs to find them. ``OSError``: not
        written (disk full, say), and this writer writes no more."""
        return ShippedDump(
            meta=parsed.meta,
            columns=self.put(parsed.entries),
            stacks=parsed.stacks,
            groups=parsed.groups,
            pg_status=parsed.pg_status,
        )

    def put(self, batch: pa.RecordBatch) -> ShippedColumns:
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
    batch: pa.RecordBatch,
) -> tuple[list[Any], tuple[Validity, ...], tuple[list[Any] | None, ...]]:
    """A batch as a writer's file holds it: its parts (bytes-like), each column's validity
    and each dictionary column's values."""
    parts: list[Any] = []
    valid: list[Validity] = []
    dictionaries: list[list[Any] | None] = []
    for column in batch.columns:
        values, ok, dictionary = _plain(column)
        parts.append(values.data.cast("B") if values.nbytes else b"")
        if pad := _padded(values.nbytes) - values.nbytes:
            parts.append(bytes(pad))
        valid.append(ok)
        dictionaries.append(dictionary)
    return parts, tuple(valid), tuple(dictionaries)


def _plain(column: pa.Array) -> tuple[np.ndarray, Validity, list[Any] | None]:
    """A column's values as a numpy array (nulls filled), its validity, its dictionary."""
    dictionary = None
    if isinstance(column, pa.DictionaryArray):
        dictionary = column.dictionary.to_pylist()
        array: pa.Array = column.indices
        fill: Any = len(dictionary)
    else:
        array = column
        fill = False if pa.types.is_boolean(column.type) else 0
    nulls = array.null_count
    ok: Validity = True
    if nulls:
        ok = False if nulls == len(array) else array.is_valid().to_numpy(zero_copy_only=False)
        array = array.fill_null(fill)
    values = array.to_numpy(zero_copy_only=False)
    if values.dtype == np.bool_:
        values = values.view(np.uint8)
    return np.ascontiguousarray(values), ok, dictionary


class Gather:
    """The parent's side: each dump's place in the writers' files, in file order, and the
    remaps of its dictionary codes and stack ids; ``column`` builds one table column."""

    def __init__(self, schema: pa.Schema, directory: Path | None) -> None:
        self.schema = schema
        self.directory = directory  # where the columns are built (None: in memory)
        self.dtypes = [column_dtype(f.type) for f in schema]
        self.chunks: list[ShippedColumns] = []
        self.remaps: dict[int, list[np.ndarray | None]] = {}  # column -> per dump
        self.rows = 0
        self.maps: dict[str, Any] = {}  # a writer's file, mapped (or a part kept in memory)

    def add(self, columns: ShippedColumns, remaps: dict[int, np.ndarray]) -> None:
        """A dump's columns, and for the columns whose values change on the way, the new
        value of each old one (indexed by the old)."""
        for i, remap in remaps.items():
            self.remaps.setdefault(i, [None] * len(self.chunks)).append(remap)
        self.chunks.append(columns)
        for listed in self.remaps.values():
            if len(listed) < len(self.chunks):
                listed.append(None)
        self.rows += columns.rows

    def keep(self, batch: pa.RecordBatch, remaps: dict[int, np.ndarray]) -> None:
        """A dump's columns kept in memory, laid out as in a writer's file (where no file
        can be written here)."""
        parts, valid, dictionaries = encode(batch)
        name = f"(in memory {len(self.chunks)})"
        self.maps[name] = b"".join(bytes(p) for p in parts)
        self.add(ShippedColumns(name, 0, batch.num_rows, valid, dictionaries), remaps)

    def column(self, i: int) -> pa.Array:
        """Column ``i`` of the table, every dump's part in order (a dictionary column: its
        codes, where a null is -1, for the caller to put the shared values on)."""
        type_ = self.schema.field(i).type
        dtype = self.dtypes[i]
        out, mapped = self._output(self.schema.field(i).name, dtype, pa.types.is_boolean(type_))
        remaps = self.remaps.get(i)
        zero_nulls = remaps is not None and not pa.types.is_dictionary(type_)
        rows = np.fromiter((c.rows for c in self.chunks), dtype=np.int64, count=len(self.chunks))
        starts = np.fromiter((c.offset for c in self.chunks), dtype=np.int64, count=len(rows))
        for j in range(i):  # the columns before this one in each dump's part
            starts += -(-(rows * self.dtypes[j].itemsize) // ALIGN) * ALIGN
        at = 0
        for k, chunk in enumerate(self.chunks):
            count = chunk.rows
            if not count:
                continue
            source = np.frombuffer(self._map(chunk.path), dtype, count, int(starts[k]))
            target = out[at : at + count]
            remap = remaps[k] if remaps is not None else None
            if remap is None:
                target[:] = source
            else:
                np.take(remap, source, out=target)
                ok = chunk.valid[i]
                if zero_nulls and ok is not True:  # (a null's value is 0, as elsewhere)
                    target[~np.asarray(ok, dtype=bool)] = 0
            at += count
        self._release()
        bitmap, nulls = _bitmap([(c.rows, c.valid[i]) for c in self.chunks], self.rows)
        if pa.types.is_boolean(type_):
            packed = pa.py_buffer(np.packbits(out.view(np.bool_), bitorder="little"))
            return pa.Array.from_buffers(type_, self.rows, [bitmap, packed], null_count=nulls)
        if pa.types.is_dictionary(type_):
            type_ = type_.index_type
        values = pa.py_buffer(mapped if mapped is not None else out)
        return pa.Array.from_buffers(type_, self.rows, [bitmap, values], null_count=nulls)

    def close(self) -> None:
        """Unmap the writers' files (the columns built from them are copies)."""
        for mapped in self.maps.values():
            if isinstance(mapped, mmap.mmap):
                with contextlib.suppress(BufferError, ValueError):
                    mapped.close()
        self.maps = {}

    def _release(self) -> None:
        """Drop the pages of the writers' files read so far from this process (clean pages of
        files: read again from the page cache for the next column)."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        for mapped in self.maps.values():
            if advice is not None and isinstance(mapped, mmap.mmap):
                with contextlib.suppress(OSError, ValueError):
                    mapped.madvise(advice)

    def _map(self, path: str) -> Any:
        mapped = self.maps.get(path)
        if mapped is None:
            with open(path, "rb") as f:
                mapped = self.maps[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return mapped

    def _output(
        self, name: str, dtype: np.dtype[Any], in_memory: bool
    ) -> tuple[np.ndarray, mmap.mmap | None]:
        """Where a column is built: a mapped file in the spill directory (its pages the
        kernel's to drop, as ``frtrace.load.spill``'s), else memory."""
        size = self.rows * dtype.itemsize
        if in_memory or self.directory is None or size == 0:
            return np.empty(self.rows, dtype=dtype), None
        path = self.directory / f"{name}.values"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)  # (a full disk says so here, not as SIGBUS)
                mapped = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
            finally:
                os.close(fd)
                path.unlink()  # the mapping keeps it while the column lives
        except (OSError, AttributeError):
            return np.empty(self.rows, dtype=dtype), None
        spill.track(mapped)
        return np.frombuffer(mapped, dtype=dtype), mapped


def _bitmap(valid: list[tuple[int, Validity]], rows: int) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap of parts' validity, and the null count (None, 0: no null)."""
    if all(v is True for _, v in valid):
        return None, 0
    joined = np.concatenate(
        [np.full(count, v, dtype=bool) if isinstance(v, bool) else v for count, v in valid]
    )
    nulls = int(rows - joined.sum())
    return pa.py_buffer(np.packbits(joined, bitorder="little")), nulls
