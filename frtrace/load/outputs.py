"""Where the gather's columns go (``frtrace.load.gather``), and the threads that put them there.

A column is appended block by block, either into its hole of the entries' Arrow IPC file
(``Hole``: the cache's file, else the spill directory's; its adler32 taken on the way) or to a
file of its own in the spill directory, mapped once complete (``ColumnFile``; in memory where
no file can be written). ``Writers`` appends a block's columns from two threads where the
process may run on two CPUs.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from frtrace.load import spill
from frtrace.load.parallel import default_jobs  # (the CPUs this process may run on)

__all__ = ["WRITER_THREADS", "ColumnFile", "Hole", "Writers"]

# Threads appending a block's columns to their outputs (``Writers``).
WRITER_THREADS = 2


class Writers:
    """A staged block's columns appended to their outputs, the columns split between two
    threads where this process may run on two CPUs: what appending costs is the kernel's copy
    into new page-cache pages and the checksum, neither holding the GIL, and the gather runs
    while nothing else does (the workers are done, the analysis waits for the table). Each
    output is appended to by one thread, block after block; a block is written whole before
    its stage is filled again."""

    def __init__(self, outs: Sequence[ColumnFile | Hole], widths: tuple[int, ...]) -> None:
        self.outs = list(outs)
        threads = max(1, min(WRITER_THREADS, default_jobs(), len(self.outs)))
        self.groups = _balanced(widths, threads)
        self.pool = (
            ThreadPoolExecutor(threads - 1, thread_name_prefix="frtrace-gather")
            if threads > 1
            else None
        )

    def flush(self, stage: list[np.ndarray], rows: int) -> None:
        """The first ``rows`` of every column's stage, appended."""
        if self.pool is None:
            self._append(self.groups[0], stage, rows)
            return
        futures = [self.pool.submit(self._append, g, stage, rows) for g in self.groups[1:]]
        try:
            self._append(self.groups[0], stage, rows)
        finally:
            wait(futures)  # (the stage is not refilled, nor a file closed, under a writer)
        for future in futures:
            future.result()

    def _append(self, columns: list[int], stage: list[np.ndarray], rows: int) -> None:
        for i in columns:
            self.outs[i].append(stage[i][:rows])

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None


def _balanced(widths: tuple[int, ...], parts: int) -> list[list[int]]:
    """The columns (indices) split into ``parts`` groups of about equal bytes a row, each in
    column order."""
    groups: list[list[int]] = [[] for _ in range(parts)]
    loads = [0] * parts
    for i in sorted(range(len(widths)), key=lambda i: -widths[i]):
        least = loads.index(min(loads))
        groups[least].append(i)
        loads[least] += widths[i]
    return [sorted(g) for g in groups if g] or [[]]


class Hole:
    """One column being written into its hole of an IPC file (``Gather.table``), its adler32
    taken on the way; booleans in memory, packed and written at the end."""

    def __init__(self, fd: int, at: int, dtype: np.dtype[Any], packed: bool) -> None:
        self.fd = fd
        self.at = at  # where the next bytes go
        self.crc = 1
        self.bits: list[np.ndarray] | None = [] if packed else None

    def append(self, values: np.ndarray) -> None:
        if self.bits is not None:
            self.bits.append(values.copy())
            return
        self._write(values.data.cast("B"))

    def _write(self, data: memoryview) -> None:
        self.crc = zlib.adler32(data, self.crc)
        while data:
            done = os.pwrite(self.fd, data, self.at)
            if not done:
                raise OSError("nothing written")
            data, self.at = data[done:], self.at + done

    def finish(self) -> int:
        """Its adler32, once all of it is written."""
        if self.bits is not None:
            bits = np.concatenate(self.bits).view(np.bool_) if self.bits else np.zeros(0, bool)
            self._write(np.packbits(bits, bitorder="little").data.cast("B"))
            self.bits = None
        return self.crc


class ColumnFile:
    """One column being built: appended block by block to a file of its own in the spill
    directory, mapped once complete (its pages the kernel's to drop, as
    ``frtrace.load.spill``'s); in memory where there is no directory, for booleans (packed
    afterwards), or where the file cannot be written."""

    def __init__(
        self, directory: Path | None, name: str, dtype: np.dtype[Any], rows: int, in_memory: bool
    ) -> None:
        self.dtype = dtype
        self.rows = rows
        self.fd: int | None = None
        self.filled = 0  # rows appended so far
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

    def append(self, values: np.ndarray) -> None:
        """The next rows' values."""
        count = len(values)
        if self.fd is not None:
            data = values.data.cast("B")
            at = self.filled * self.dtype.itemsize
            try:
                while data:
                    done = os.pwrite(self.fd, data, at)
                    if not done:
                        raise OSError("nothing written")
                    data, at = data[done:], at + done
            except OSError:  # (the disk filled after all): the column goes on in memory
                self._to_memory()
        if self.array is not None:
            self.array[self.filled : self.filled + count] = values
        self.filled += count

    def _to_memory(self) -> None:
        """Move what was written into memory; go on there."""
        assert self.fd is not None
        array = np.empty(self.rows, dtype=self.dtype)
        done = self.filled * self.dtype.itemsize
        view = array.data.cast("B")
        got = 0
        while got < done:
            read = os.preadv(self.fd, [view[got:done]], got)
            if not read:
                raise OSError("a column's file ends before what was written to it")
            got += read
        os.close(self.fd)
        self.fd = None
        self.array = array

    def finish(self) -> Any:
        """The column's values: a mapping of its file, else the array."""
        if self.fd is None:
            assert self.array is not None
            return self.array
        try:
            mapped = mmap.mmap(self.fd, self.rows * self.dtype.itemsize, access=mmap.ACCESS_READ)
        except OSError:
            self._to_memory()
            assert self.array is not None
            return self.array
        spill.track(mapped)
        return mapped

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = None
