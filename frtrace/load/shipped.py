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
    """A column's values as a numpy array (nulls filled), its validity, its dictionary: read
    from its buffers (Arrow's fill_null, to_numpy and is_valid were most of what shipping a
    dump cost)."""
    dictionary = None
    if isinstance(column, pa.DictionaryArray):
        dictionary = column.dictionary.to_pylist()
        array: pa.Array = column.indices
        fill: Any = len(dictionary)
    else:
        array = column
        fill = 0
    n, offset, nulls = len(array), array.offset, array.null_count
    bitmap, data = array.buffers()[:2]
    if pa.types.is_boolean(array.type):
        values = _bits(data, offset, n).view(np.uint8)
    else:
        dtype = column_dtype(array.type)
        values = np.frombuffer(data, dtype, n, offset * dtype.itemsize) if n else np.zeros(0, dtype)
    ok: Validity = True
    if nulls == n and n:
        return np.full(n, fill, dtype=values.dtype), False, dictionary
    if nulls:
        ok = _bits(bitmap, offset, n)
        values = np.where(ok, values, np.array(fill, dtype=values.dtype))
    return np.ascontiguousarray(values), ok, dictionary


def _bits(buffer: pa.Buffer | None, offset: int, n: int) -> np.ndarray:
    """A bit per row (Arrow's, least significant first) as a bool per row."""
    if buffer is None or not n:
        return np.zeros(n, dtype=np.bool_)
    packed = np.frombuffer(buffer, dtype=np.uint8)
    bits = np.unpackbits(packed, count=offset + n, bitorder="little")[offset:]
    return bits.view(np.bool_)


class Gather:
    """The parent's side: each dump's place in the writers' files, in file order, and the
    remaps of its dictionary codes and stack ids; ``columns`` builds the table's columns.

    They are built in one pass over the dumps, in file order, each dump's part read once
    (``pread`` into a buffer kept for the next) and its columns appended to theirs, each
    column's file written a MiB at a time: no page of a writer's file or of a column is
    faulted into this process (building column by column from mapped writers' files faulted
    every page of them in again for each of the 35 columns: most of the parent's gather)."""

    def __init__(self, schema: pa.Schema, directory: Path | None) -> None:
        self.schema = schema
        self.directory = directory  # where the columns are built (None: in memory)
        self.dtypes = [column_dtype(f.type) for f in schema]
        self.chunks: list[ShippedColumns] = []
        self.remaps: dict[int, list[np.ndarray | None]] = {}  # column -> per dump
        self.rows = 0
        self.kept: dict[str, bytes] = {}  # the parts kept in memory (no writer's file)
        self.built: list[pa.Array] | None = None

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
        self.kept[name] = b"".join(bytes(p) for p in parts)
        self.add(ShippedColumns(name, 0, batch.num_rows, valid, dictionaries), remaps)

    def column(self, i: int) -> pa.Array:
        """Column ``i`` of the table (see ``columns``)."""
        return self.columns()[i]

    def columns(self) -> list[pa.Array]:
        """The table's columns, every dump's part in order (a dictionary column: its codes,
        where a null is -1, for the caller to put the shared values on)."""
        if self.built is None:
            self.built = self._build()
        return self.built

    def _build(self) -> list[pa.Array]:
        fields = list(self.schema)
        outs = [
            _Output(self.directory, f.name, dtype, self.rows, pa.types.is_boolean(f.type))
            for f, dtype in zip(fields, self.dtypes, strict=True)
        ]
        widths = [dtype.itemsize for dtype in self.dtypes]
        zero_nulls = [
            i in self.remaps and not pa.types.is_dictionary(f.type) for i, f in enumerate(fields)
        ]
        remaps = [self.remaps.get(i) for i in range(len(fields))]
        source = _Sources(self.kept)
        try:
            for k, chunk in enumerate(self.chunks):
                count = chunk.rows
                if not count:
                    continue
                part = source.read(chunk.path, chunk.offset, _part_bytes(widths, count))
                at = 0
                for i, out in enumerate(outs):
                    values = np.frombuffer(part, self.dtypes[i], count, at)
                    at += _padded(count * widths[i])
                    target = out.next(count)
                    listed = remaps[i]
                    remap = listed[k] if listed is not None else None
                    if remap is None:
                        target[:] = values
                        continue
                    np.take(remap, values, out=target)
                    ok = chunk.valid[i]
                    if zero_nulls[i] and ok is not True:  # (a null's value is 0, as elsewhere)
                        target[~np.asarray(ok, dtype=bool)] = 0
            columns = []
            for i, (field, out) in enumerate(zip(fields, outs, strict=True)):
                columns.append(self._array(field.type, out.finish(), i))
        finally:
            source.close()
            for out in outs:
                out.close()
        return columns

    def _array(self, type_: pa.DataType, values: Any, i: int) -> pa.Array:
        bitmap, nulls = _bitmap([(c.rows, c.valid[i]) for c in self.chunks], self.rows)
        if pa.types.is_boolean(type_):
            bits = np.frombuffer(values, dtype=np.bool_) if self.rows else np.zeros(0, np.bool_)
            packed = pa.py_buffer(np.packbits(bits, bitorder="little"))
            return pa.Array.from_buffers(type_, self.rows, [bitmap, packed], null_count=nulls)
        if pa.types.is_dictionary(type_):
            type_ = type_.index_type
        buffer = pa.py_buffer(values)
        return pa.Array.from_buffers(type_, self.rows, [bitmap, buffer], null_count=nulls)

    def close(self) -> None:
        """Forget the parts kept in memory (the columns built hold what they need)."""
        self.kept = {}


def _part_bytes(widths: list[int], rows: int) -> int:
    """The bytes of one dump's part in a writer's file: every column, each padded."""
    return sum(_padded(rows * width) for width in widths)


class _Sources:
    """The writers' files, opened once, each dump's part read into one reused buffer."""

    def __init__(self, kept: dict[str, bytes]) -> None:
        self.kept = kept
        self.fds: dict[str, int] = {}
        self.buffer = bytearray()

    def read(self, path: str, offset: int, size: int) -> Any:
        kept = self.kept.get(path)
        if kept is not None:
            return memoryview(kept)[offset : offset + size]
        fd = self.fds.get(path)
        if fd is None:
            fd = self.fds[path] = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        if len(self.buffer) < size:
            self.buffer = bytearray(size)
        view = memoryview(self.buffer)[:size]
        done = 0
        while done < size:
            got = os.preadv(fd, [view[done:]], offset + done)
            if not got:
                raise OSError(f"{path}: ends before the columns it was said to hold")
            done += got
        return view

    def close(self) -> None:
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = {}


class _Output:
    """One column being built: appended a MiB at a time to a file of its own in the spill
    directory, mapped once complete (its pages the kernel's to drop, as
    ``frtrace.load.spill``'s); in memory where there is no directory, for booleans (packed
    afterwards), or where the file cannot be written."""

    def __init__(
        self, directory: Path | None, name: str, dtype: np.dtype[Any], rows: int, in_memory: bool
    ) -> None:
        self.dtype = dtype
        self.rows = rows
        self.fd: int | None = None
        self.filled = 0  # rows handed out so far
        self.written = 0  # rows in the file
        self.array: np.ndarray | None = None
        size = rows * dtype.itemsize
        if not in_memory and directory is not None and size:
            path = directory / f"{name}.values"
            fd = None
            try:
                # (not fallocated: writing into allocated but unwritten blocks took twice as
                # long; a disk that fills says so on a write, and the column goes on in memory)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                path.unlink()  # (the descriptor, then the mapping, keep it)
                self.fd = fd
            except OSError:
                if fd is not None:
                    os.close(fd)
                self.fd = None
        if self.fd is None:
            self.array = np.empty(rows, dtype=dtype)
            self.stage = self.array
        else:
            self.stage = np.empty(max(1, spill.WRITE_BYTES // dtype.itemsize), dtype=dtype)

    def next(self, count: int) -> np.ndarray:
        """Where the next ``count`` values go."""
        staged = self.filled - self.written
        if self.array is None and staged + count > len(self.stage):
            self._flush()  # (which may move the column into memory)
            staged = 0
            if self.array is None and count > len(self.stage):
                self.stage = np.empty(count, dtype=self.dtype)
        if self.array is not None:
            at = self.filled
            self.filled += count
            return self.array[at : at + count]
        self.filled += count
        return self.stage[staged : staged + count]

    def _flush(self) -> None:
        staged = self.filled - self.written
        if not staged or self.fd is None:
            return
        data = self.stage[:staged].data.cast("B")
        at = self.written * self.dtype.itemsize
        try:
            while data:
                done = os.pwrite(self.fd, data, at)
                if not done:
                    raise OSError("nothing written")
                data, at = data[done:], at + done
        except OSError:  # (the disk filled after all): the column goes on in memory
            self._to_memory(staged)
            return
        self.written = self.filled

    def _to_memory(self, staged: int) -> None:
        """Move what was written, and what is staged, into memory; go on there."""
        assert self.fd is not None
        array = np.empty(self.rows, dtype=self.dtype)
        done = self.written * self.dtype.itemsize
        view = array.data.cast("B")
        got = 0
        while got < done:
            read = os.preadv(self.fd, [view[got:done]], got)
            if not read:
                raise OSError("a column's file ends before what was written to it")
            got += read
        array[self.written : self.written + staged] = self.stage[:staged]
        os.close(self.fd)
        self.fd = None
        self.array = array
        self.stage = array

    def finish(self) -> Any:
        """The column's values: a mapping of its file, else the array."""
        self._flush()
        if self.fd is None:
            assert self.array is not None
            return self.array
        try:
            mapped = mmap.mmap(self.fd, self.rows * self.dtype.itemsize, access=mmap.ACCESS_READ)
        except OSError:
            self._to_memory(0)
            assert self.array is not None
            return self.array
        spill.track(mapped)
        return mapped

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = None


def _bitmap(valid: list[tuple[int, Validity]], rows: int) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap of parts' validity, and the null count (None, 0: no null)."""
    if all(v is True for _, v in valid):
        return None, 0
    joined = np.concatenate(
        [np.full(count, v, dtype=bool) if isinstance(v, bool) else v for count, v in valid]
    )
    nulls = int(rows - joined.sum())
    return pa.py_buffer(np.packbits(joined, bitorder="little")), nulls
