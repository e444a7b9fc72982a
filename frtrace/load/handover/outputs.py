"""Where the gather's columns go (``frtrace.load.handover.gather``), and the threads that put them
there.

A column is appended block by block, either into its hole of the entries' Arrow IPC file
(``Hole``: the cache's file, else the spill directory's) or to a file of its own in the spill
directory, mapped once complete (``ColumnFile``; in memory where no file can be written).
``Writers`` appends a block's columns from a thread beside the gather where the process may
run on two CPUs.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from frtrace.incident.memory import default_jobs  # (the CPUs this process may run on)
from frtrace.load.handover import spill

__all__ = ["WRITER_THREADS", "ColumnFile", "Hole", "Writers"]

# Threads the gather's outputs are written from: 1, the gather's own; 2, a writer thread beside
# it (``Writers``).
WRITER_THREADS = 2


class Writers:
    """A staged block's columns appended to their outputs by one writer thread, while the
    caller stages the next block in a second stage (where this process may run on two CPUs):
    what appending costs is the kernel's copy into new page-cache pages, which holds no GIL,
    and the gather runs while nothing else does (the workers are done, the analysis waits for
    the table). Each block is noted in the caller's thread (``note``), written in the
    writer's, in block order, one block at a time.

    Measured at 4,096 ranks: two threads each writing half of the columns into the one entries
    file waited on each other (a file takes one write at a time), spinning on its lock for
    0.3 s of CPU, and neither staged the next block meanwhile. The entries file's checksum
    (for the cache) was taken here, in the caller's thread, until stop 45: 0.14 s of a
    1,024-rank run's 0.4 s of gathering, with the second CPU idle. The cache takes it now, as
    it stores the file, beside the analysis (``cache.DirectoryCache.save``).
    """

    def __init__(self, outs: Sequence[ColumnFile | Hole]) -> None:
        self.outs = list(outs)
        beside = WRITER_THREADS > 1 and default_jobs() > 1 and bool(self.outs)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="frtrace-gather") if beside else None
        self.pending: Future[None] | None = None

    @property
    def stages(self) -> int:
        """How many stages the caller fills in turn: a stage handed to ``flush`` is not
        filled again before the next ``flush`` returns."""
        return 1 if self.pool is None else 2

    def flush(self, stage: list[np.ndarray], rows: int) -> None:
        """The first ``rows`` of every column's stage appended: here, or handed to the writer
        thread once it has appended the block before (whose failure is raised here)."""
        for out, values in zip(self.outs, stage, strict=True):
            out.note(values[:rows])
        self.wait()
        if self.pool is None:
            self._append(stage, rows)
        else:
            self.pending = self.pool.submit(self._append, stage, rows)

    def _append(self, stage: list[np.ndarray], rows: int) -> None:
        for out, values in zip(self.outs, stage, strict=True):
            out.append(values[:rows])

    def wait(self) -> None:
        """Every block handed over appended (a writer's failure raised here)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """The writer thread stopped, once done (a failure not raised: ``wait`` raises it)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
        self.pending = None


class Hole:
    """One column being written into its hole of an IPC file (``Gather.table``); booleans in
    memory, packed and written at the end."""

    def __init__(self, fd: int, at: int, dtype: np.dtype[Any], packed: bool) -> None:
        self.fd = fd
        self.at = at  # where the next bytes go
        self.bits: list[np.ndarray] | None = [] if packed else None

    def note(self, values: np.ndarray) -> None:
        """The next rows' values, before they are appended (booleans: kept, to be packed)."""
        if self.bits is not None:
            self.bits.append(values.copy())

    def append(self, values: np.ndarray) -> None:
        """The next rows' values, once noted."""
        if self.bits is None:
            self._write(values.data.cast("B"))

    def _write(self, data: memoryview) -> None:
        while data:
            done = os.pwrite(self.fd, data, self.at)
            if not done:
                raise OSError("nothing written")
            data, self.at = data[done:], self.at + done

    def finish(self) -> None:
        """Once every block is appended: the booleans packed and written."""
        if self.bits is not None:
            bits = np.concatenate(self.bits).view(np.bool_) if self.bits else np.zeros(0, bool)
            self._write(np.packbits(bits, bitorder="little").data.cast("B"))
            self.bits = None


class ColumnFile:
    """One column being built: appended block by block to a file of its own in the spill
    directory, mapped once complete (its pages the kernel's to drop, as
    ``frtrace.load.handover.spill``'s); in memory where there is no directory, for booleans (packed
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

    def note(self, values: np.ndarray) -> None:
        """The next rows' values, before they are appended (nothing to take of them)."""

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
