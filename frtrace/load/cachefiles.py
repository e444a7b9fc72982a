"""The cache's files (``frtrace.load.cache``): each table's adler32 taken as it is written and
checked before it is read, and whole entries evicted, least recently used first.
"""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path
from typing import Any

__all__ = ["CHUNK", "Checksummed", "crc", "evict"]

CHUNK = 16 << 20


def crc(path: Path | int) -> int:
    """adler32 of the file (a path, or a descriptor at its start): catches damage at 2.5 GB/s
    (crc32: 1.5, blake2b: 0.5). Read into one buffer, reused: a new 16 MB chunk per read is
    new memory each time, whose pages cost more to fault in than the checksum of what they
    hold."""
    crc = 1
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0, closefd=not isinstance(path, int)) as f:
        while got := f.readinto(buffer):
            crc = zlib.adler32(view[:got], crc)
    return crc


class Checksummed:
    """A file being written, its adler32 (``crc``'s) taken on the way: a table's checksum
    without reading it back (a tenth of the parent's time in a first run at 1,024 ranks)."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.crc = 1
        self.written = 0
        self.closed = False

    def write(self, data: Any) -> int:
        self.crc = zlib.adler32(data, self.crc)
        self.written += memoryview(data).nbytes
        return int(self.out.write(data))

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:  # (the file is closed by its owner)
        self.closed = True


def evict(sets: Path, max_bytes: int, *, keep: Path | None = None) -> None:
    """Delete whole entries, least recently used first, until ``sets`` holds <= max_bytes."""
    entries = []
    try:
        for entry in sets.iterdir():
            size = sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
            # last used: the newest of the manifest and the sidecars (0: unfinished or
            # damaged, first to go)
            used = max((f.stat().st_mtime_ns for f in entry.glob("*.json")), default=0)
            entries.append((used, size, entry))
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    for _, size, entry in sorted(entries, key=lambda e: (e[0], str(e[2]))):
        if total <= max_bytes:
            break
        if entry != keep:
            shutil.rmtree(entry, ignore_errors=True)
            total -= size
