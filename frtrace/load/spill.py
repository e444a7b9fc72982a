"""Detail columns on disk, memory-mapped: what a finding fetches for the few entries it cites.

The cross-rank analysis scans a few columns of every entry (rank, group, seq, op, state, times,
fingerprints); the others (sizes, dtypes, thread, stack, ids, p2p peers, split sizes: see
``schema.DETAIL``) it reads only for the entries a finding cites, and ``show`` and ``export``
for the rows they print or write. For a large set, those columns are appended file by file, as
each result arrives, to one flat file per column, and memory-mapped back as the table's
columns: the coordinator's memory holds the summary columns, not the detail, and the pages of
the detail are read only where something looks. The files are unlinked as soon as they are
mapped (the mapping keeps them until the table is gone), so nothing is left behind.

Where: ``$XDG_CACHE_HOME/frtrace/spill`` (else the temporary directory), which should be a disk:
on a tmpfs the detail is in memory all the same. Any failure to write keeps the column in
memory, as for small sets (below ``SPILL_MIN_BYTES`` of dumps, or ``FRTRACE_SPILL_MIN_BYTES``),
so spilling never changes a result.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from frtrace.errors import InputError

__all__ = ["SPILL_MIN_BYTES", "SpilledColumn", "spill_directory", "spill_min_bytes"]

# Below this many bytes of dumps (~600 ranks of 2,000 entries) every column stays in memory:
# the detail of a small set is a few MB, and a file per column would cost more than it saves.
# ``FRTRACE_SPILL_MIN_BYTES`` sets another threshold (0: always; the tests use it).
SPILL_MIN_BYTES = 256 << 20


def spill_min_bytes() -> int:
    """The threshold in force: ``FRTRACE_SPILL_MIN_BYTES`` where set to a number, else
    ``SPILL_MIN_BYTES``."""
    try:
        return max(0, int(os.environ.get("FRTRACE_SPILL_MIN_BYTES", SPILL_MIN_BYTES)))
    except ValueError:
        return SPILL_MIN_BYTES


def spill_directory(cache_root: Path) -> Path | None:
    """A new private directory for this load's column files, or None where none can be made.

    ``cache_root`` is the table cache's root; spill files go beside it. Directories of
    processes that are gone (killed mid-load) are removed first.
    """
    for base in (cache_root.parent / "spill", Path(tempfile.gettempdir()) / "frtrace-spill"):
        try:
            base.mkdir(parents=True, exist_ok=True)
            _remove_orphans(base)
            path = base / f"{os.getpid()}-{secrets.token_hex(4)}"
            path.mkdir()
        except OSError:
            continue
        return path
    return None


def _remove_orphans(base: Path) -> None:
    if not Path("/proc/self").exists():  # (no way to tell a live process: leave them)
        return
    for entry in base.iterdir():
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(entry, ignore_errors=True)


class SpilledColumn:
    """One fixed-width column (values and validity) written chunk by chunk to a file.

    ``append`` takes each file's values as a numpy array and where they are valid; ``finish``
    gives the whole column, memory-mapped. On any write error the column falls back to
    memory (what was written is read back) and goes on there.
    """

    def __init__(self, directory: Path, name: str, dtype: np.dtype[np.generic]) -> None:
        self.dtype = np.dtype(dtype)
        self.path = directory / f"{name}.values"
        self.rows = 0
        self.memory: list[np.ndarray] | None = None  # the fallback
        self.valid: list[np.ndarray] = []  # bool per row, packed at the end (1 bit per entry)
        self.out: BinaryIO | None = None
        try:
            self.out = open(self.path, "wb")  # noqa: SIM115 (closed in finish)
        except OSError:
            self.memory = []

    def append(self, values: np.ndarray, valid: np.ndarray | None) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        count = len(values)
        self.valid.append(np.ones(count, dtype=bool) if valid is None else valid.astype(bool))
        self.rows += count
        if self.memory is not None:
            self.memory.append(values)
            return
        assert self.out is not None
        try:
            self.out.write(values.data)
        except OSError:
            self._to_memory(self.rows - count).append(values)

    def _to_memory(self, written_rows: int) -> list[np.ndarray]:
        """A write failed (disk full, say): the column goes on in memory."""
        with contextlib.suppress(OSError):
            if self.out is not None:
                self.out.close()
        self.out = None
        try:
            written = np.fromfile(self.path, dtype=self.dtype, count=written_rows)
        except OSError as exc:
            raise InputError(
                f"{self.path}: the loaded column written here cannot be read back "
                f"({exc.strerror}); set XDG_CACHE_HOME to a writable disk and run again."
            ) from exc
        with contextlib.suppress(OSError):
            self.path.unlink()
        self.memory = [written]
        return self.memory

    def finish(self, type_: pa.DataType) -> pa.Array:
        """The column as an Arrow array of ``type_`` (fixed width, as ``dtype``)."""
        valid = np.concatenate(self.valid) if self.valid else np.zeros(0, dtype=bool)
        self.valid = []
        nulls = int(self.rows - valid.sum())
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
        del valid
        values = self._values()
        return pa.Array.from_buffers(type_, self.rows, [bitmap, values], null_count=nulls)

    def _values(self) -> pa.Buffer:
        if self.memory is None and self.out is not None:
            try:
                self.out.close()
                if self.rows == 0:
                    raise OSError("empty")  # (a zero-length file cannot be mapped)
                mapped = pa.memory_map(str(self.path), "r")
                buffer = mapped.read_buffer(self.rows * self.dtype.itemsize)
                self.path.unlink()  # the mapping keeps the data while the column lives
                return buffer
            except OSError:
                self._to_memory(self.rows)
        assert self.memory is not None
        parts, self.memory = self.memory, None
        joined = np.concatenate(parts) if parts else np.zeros(0, dtype=self.dtype)
        return pa.py_buffer(joined)
