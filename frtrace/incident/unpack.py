"""An archive's members, one pass front to back, each read under the archive's budget.

``frtrace.incident.archive`` decides what each member is and what may be read; this reads them.
A compressed tar is unpacked once, through a seekable reader over the unpacked bytes (not
tarfile's stream mode, which copied its whole buffer on every read); seeking forward reads
through, and every byte unpacked (members passed over and headers included) is counted
against the budget a MiB at a time. A member that is a link, a device or a sparse file, or
whose path is absolute or climbs out with ``..``, carries its problem and is never read.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import stat
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Protocol

__all__ = ["CHUNK", "Budget", "Member", "read_budgeted", "tar_members", "zip_members"]

# Unpacked bytes read at a time: the budget is checked (and the clock read) between two.
CHUNK = 1 << 20


class Budget(Protocol):
    """What reading one archive may still cost (``frtrace.incident.archive``)."""

    most: int  # unpacked bytes in all

    def spend(self, count: int) -> None:
        """Count ``count`` more bytes unpacked; past the budget, the archive is refused."""


class _Read(Protocol):
    def __call__(self, n: int, start: int = 0) -> bytes:
        """At most ``n`` bytes of the member's content, from byte ``start`` on."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    name: str  # as stored in the archive
    size: int  # as its header declares
    problem: str | None  # why it is refused unread (a link, a path out of the archive...)
    read: _Read
    mtime: float | None = None  # as its header says


def _unsafe_path(name: str) -> str | None:
    """Why a member's path is refused, or None."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "a path that climbs out of the archive (..)"
    return None


def tar_members(archive: Path, budget: Budget) -> Iterator[Member]:
    with open(archive, "rb") as raw:
        unpacked = _Unpacked(raw, budget)
        # "r:": a plain tar over the unpacked bytes, which seek forward by reading through
        with tarfile.open(fileobj=unpacked, mode="r:") as tar:
            for info in tar:
                tar.members.clear()  # type: ignore[attr-defined]  # (kept for extraction: not here)
                if info.isdir():
                    continue
                problem = _unsafe_path(info.name)
                if problem is None and (info.issym() or info.islnk()):
                    problem = "a link, not a file"
                elif problem is None and not info.isreg():
                    problem = "a device, pipe or other special file"
                elif problem is None and info.issparse():
                    problem = "a sparse file"

                def read(n: int, start: int = 0, info: tarfile.TarInfo = info) -> bytes:
                    unpacked.seek(info.offset_data + start)
                    return unpacked.read(max(0, min(n, info.size - start)))

                yield Member(
                    name=info.name.removeprefix("./"),
                    size=info.size,
                    problem=problem,
                    read=read if problem is None else _nothing,
                    mtime=float(info.mtime),
                )


def zip_members(archive: Path, budget: Budget) -> Iterator[Member]:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            mode = info.external_attr >> 16
            problem = _unsafe_path(info.filename)
            if problem is None and stat.S_ISLNK(mode):
                problem = "a link, not a file"
            elif problem is None and stat.S_IFMT(mode) and not stat.S_ISREG(mode):
                problem = "a device, pipe or other special file"

            def read(n: int, start: int = 0, info: zipfile.ZipInfo = info) -> bytes:
                with zf.open(info) as f:
                    while start > 0:  # (a log's tail: what comes before is read through)
                        passed = read_budgeted(f, min(start, CHUNK), budget)
                        if not passed:
                            break
                        start -= len(passed)
                    return read_budgeted(f, n, budget)

            yield Member(
                name=info.filename,
                size=info.file_size,
                problem=problem,
                read=read,
                mtime=_zip_time(info),
            )


def _zip_time(info: zipfile.ZipInfo) -> float | None:
    """A zip member's time (local time, as zip keeps it), None where it is no date."""
    try:
        return time.mktime((*info.date_time, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def _nothing(n: int, start: int = 0) -> bytes:
    return b""


def read_budgeted(f: IO[bytes] | io.BufferedIOBase, n: int, budget: Budget) -> bytes:
    """At most ``n`` bytes of ``f``, a MiB at a time, each counted against ``budget``."""
    parts = []
    while n > 0:
        part = f.read(min(n, CHUNK))
        if not part:
            break
        budget.spend(len(part))
        parts.append(part)
        n -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class _Unpacked(io.RawIOBase):
    """The unpacked bytes of a (maybe compressed) tar, read under the archive's budget.

    Compressed streams are found by their first bytes (gzip, bz2, xz). Seeking forward reads
    through, a MiB at a time, so the budget sees every byte unpacked; seeking back (tarfile
    does not, but it would unpack from the start again) counts what is unpacked again.
    """

    def __init__(self, raw: IO[bytes], budget: Budget) -> None:
        super().__init__()
        self.budget = budget
        head = raw.read(6)
        raw.seek(0)
        self.inner: IO[bytes] | io.BufferedIOBase
        self.plain = False
        if head.startswith(b"\x1f\x8b"):
            self.inner = gzip.GzipFile(fileobj=raw, mode="rb")
        elif head.startswith(b"BZh"):
            self.inner = bz2.BZ2File(raw)
        elif head.startswith(b"\xfd7zXZ\x00"):
            self.inner = lzma.LZMAFile(raw)  # noqa: SIM115 (closed in close)
        else:
            self.inner, self.plain = raw, True
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self.budget.most + 1  # (tarfile always says how much; the budget ends it)
        data = read_budgeted(self.inner, size, self.budget)
        self.position += len(data)
        return data

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset + (self.position if whence == io.SEEK_CUR else 0)
        if whence == io.SEEK_END or target < 0:
            raise OSError("the unpacked archive is read forward only")
        if self.plain:
            self.budget.spend(0)  # (the clock)
            self.position = self.inner.seek(target)
        elif target < self.position:  # (unpacked again from the start)
            self.budget.spend(target)
            self.position = self.inner.seek(target)
        while self.position < target:
            if not self.read(min(CHUNK, target - self.position)):
                break  # (past the end: the next read says so)
        return self.position

    def close(self) -> None:
        if not self.plain:
            self.inner.close()
        super().close()
