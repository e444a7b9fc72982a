"""An Arrow IPC file written around holes, its columns' values put in them afterwards.

A large set's entries table is written once, where it will stay: its Arrow IPC file (the
table cache's ``entries.arrow``, else a file of the load's spill directory) is written by
Arrow from a table whose values buffers stand in for the real ones (an anonymous mapping that
is never touched: no memory); the bytes Arrow writes for them are left out of the file (holes,
read as zeros) and where each one starts is noted. The gather (``frtrace.load.handover.gather``)
then
writes every column's values into its hole, and the table is mapped back from the file. A
first run with the cache thus writes the 1.5 GB of a 4,096-rank set's entries once, not once
for the table and again for the cache.

Arrow hands each buffer of a record batch to the file as it is, so the stand-ins are told
apart by their addresses; should a version of Arrow copy them first, no stand-in is seen and
``write_around`` says None (the caller builds the columns the other way). The file's adler32
(the cache's checksum) is taken by the cache as it stores the file (``cache.DirectoryCache.save``:
in its thread, beside the analysis), not by the gather.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

__all__ = ["HoleyFile", "stand_ins", "write_around"]


def stand_ins(sizes: list[int]) -> tuple[mmap.mmap, list[pa.Buffer]]:
    """Buffers of these sizes for a table's values to be written around: slices of one
    anonymous mapping that nothing writes (its pages are never made)."""
    total = sum(-(-size // 64) * 64 for size in sizes) or 64
    region = mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = pa.py_buffer(region)
    buffers, at = [], 0
    for size in sizes:
        buffers.append(whole.slice(at, size))
        at += -(-size // 64) * 64
    return region, buffers


@dataclass(slots=True)
class HoleyFile:
    """A written IPC file, open, with where each stand-in's bytes are to go."""

    path: Path
    fd: int
    size: int
    holes: list[int]  # per stand-in: where its bytes start in the file (-1: it has none)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class _Sink:
    """Where Arrow writes: the bytes of the stand-ins skipped, everything else written."""

    def __init__(self, fd: int, stand_ins: list[pa.Buffer]) -> None:
        self.fd = fd
        self.at = 0
        self.closed = False
        self.wanted = {(b.address, b.size): i for i, b in enumerate(stand_ins) if b.size}
        self.holes: dict[int, int] = {}  # stand-in -> where it goes

    def write(self, data: Any) -> int:
        view = memoryview(data)
        size = view.nbytes
        which = self.wanted.get((pa.py_buffer(data).address, size)) if size else None
        if which is not None and which not in self.holes:
            self.holes[which] = self.at
            self.at += size
            return size
        if size:
            done = 0
            flat = view.cast("B")
            while done < size:
                done += os.pwrite(self.fd, flat[done:], self.at + done)
            self.at += size
        return size

    def tell(self) -> int:
        return self.at

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def write_around(path: Path, table: pa.Table, stand_ins: list[pa.Buffer]) -> HoleyFile | None:
    """Write ``table`` as an Arrow IPC file at ``path`` (a new file, 0600), the bytes of
    ``stand_ins`` left out; None (and no file) where Arrow did not write each of them as it is.
    ``OSError``: the file could not be written (it is removed)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        sink = _Sink(fd, stand_ins)
        with ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        sink.close()
        if len(sink.holes) != len(sink.wanted):
            raise _NotAsIs
        os.ftruncate(fd, sink.at)  # (a hole at the very end has no byte written after it)
    except BaseException as exc:  # (no file left behind, whatever stopped the writing)
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        if isinstance(exc, _NotAsIs):
            return None
        if isinstance(exc, pa.ArrowException) and not isinstance(exc, OSError):
            raise OSError(f"{path}: {exc}") from exc
        raise
    holes = [sink.holes.get(i, -1) for i in range(len(stand_ins))]
    return HoleyFile(path=path, fd=fd, size=sink.at, holes=holes)


class _NotAsIs(Exception):
    """Arrow did not hand a stand-in to the file as it is."""
