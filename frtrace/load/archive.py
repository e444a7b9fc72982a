"""A dump set packed in an archive (``.tar``, ``.tar.gz``/``.tgz``, ``.zip``...), read in memory.

Nothing is extracted to disk: each member that looks like a rank's dump is read into memory
once, in one pass over the archive, and handed to the same parser as a file (the
``Candidate`` carries its bytes). The loader's limits hold per member: a member whose header
declares more than ``MAX_DUMP_BYTES`` is refused unread, and never more than the declared
size is read (a header that lies is caught by comparing it with the bytes read). The members
read may hold ``MAX_ARCHIVE_BYTES`` in all, and never more than a quarter of this machine's
memory (``frtrace.load.memory``). Members that are links, devices or whose path is absolute or
climbs out with ``..`` are refused: a bad member that looks like a rank's dump becomes that
rank's one-line problem (``dumps.tgz:rank_3: refused: ...``), and the rest of the set still
loads.

A compressed tar is unpacked once, front to back, through a seekable reader (not tarfile's
stream mode, which copied its whole buffer on every read: a few KB of bz2 hiding 64 MiB of
zeros took minutes); members passed over are read through and dropped a MiB at a time. The
whole archive has a budget: ``MAX_UNPACKED_BYTES`` unpacked (members passed over and headers
included) and ``archive_timeout_s`` of reading; past either, the archive is refused in one
line (``UnreadableArchive``): a decompression bomb costs seconds, never the machine.
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
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from frtrace.errors import UnreadableArchive
from frtrace.load.discover import MAX_WORLD_SIZE, Candidate, SkippedFile, parse_dump_name
from frtrace.load.memory import archive_bytes
from frtrace.load.unpickle import MAX_DUMP_BYTES
from frtrace.load.values import short_message

__all__ = [
    "ARCHIVE_SUFFIXES",
    "MAX_ARCHIVE_BYTES",
    "MAX_UNPACKED_BYTES",
    "archive_timeout_s",
    "is_archive",
    "read_archive",
]

ARCHIVE_SUFFIXES = (
    ".tar",
    ".tar.gz",
    ".tgz",
    ".tar.bz2",
    ".tbz2",
    ".tar.xz",
    ".txz",
    ".zip",
)
# All dump members of one archive together. A 4,096-rank set of 2,000-entry dumps is ~1.8 GB.
MAX_ARCHIVE_BYTES = 4 << 30
# More members than any dump set has files (one per rank, and then some): past it, refused.
MAX_ARCHIVE_MEMBERS = 4 * MAX_WORLD_SIZE
# Bytes an archive may unpack to in all: its dumps, the members passed over, the headers.
MAX_UNPACKED_BYTES = 2 * MAX_ARCHIVE_BYTES
# Time reading an archive may take: 60 s, and 1 s per MiB of the archive file (a real one
# unpacks at 30+ MB/s with bz2, the slowest, and holds a few times its size).
ARCHIVE_TIMEOUT_S = 60.0
ARCHIVE_TIMEOUT_S_PER_MIB = 1.0
# Unpacked bytes read at a time: the budget is checked (and the clock read) between two.
_CHUNK = 1 << 20
# What reading a damaged archive raises: truncated streams, bad CRCs, encrypted zip members...
_ARCHIVE_ERRORS = (
    OSError,
    EOFError,
    tarfile.TarError,
    zipfile.BadZipFile,
    zlib.error,
    RuntimeError,
    NotImplementedError,
    ValueError,
)


def is_archive(path: Path) -> bool:
    """Whether the name says ``path`` is an archive frtrace reads."""
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Member:
    name: str  # as stored in the archive
    size: int  # as its header declares
    problem: str | None  # why it is refused unread (a link, a path out of the archive...)
    read: Callable[[int], bytes]  # read at most n bytes of its content


def archive_timeout_s(archive: Path) -> float:
    """How long reading ``archive`` may take before it is refused."""
    try:
        size = archive.stat().st_size
    except OSError:
        size = 0
    return ARCHIVE_TIMEOUT_S + ARCHIVE_TIMEOUT_S_PER_MIB * size / 2**20


class _Budget:
    """What reading one archive may still cost: unpacked bytes and time."""

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self.most = MAX_UNPACKED_BYTES
        self.used = 0
        self.timeout = archive_timeout_s(archive)
        self.deadline = time.monotonic() + self.timeout

    def spend(self, count: int) -> None:
        """Count ``count`` more bytes unpacked; past the budget, the archive is refused."""
        self.used += count
        if self.used > self.most:
            raise UnreadableArchive(
                f"{self.archive}: refused: it unpacks to more than {self.most / 2**30:.1f} "
                "GiB, far more than a dump set (a damaged archive or a decompression bomb); "
                "check it, or unpack it with tar and analyse the directory."
            )
        if time.monotonic() > self.deadline:
            raise UnreadableArchive(
                f"{self.archive}: refused: reading it took longer than {self.timeout:.0f} s "
                f"({self.used / 2**20:.0f} MiB unpacked; a damaged archive or a decompression "
                "bomb); check it, or unpack it with tar and analyse the directory."
            )


def read_archive(archive: Path) -> tuple[list[Candidate], list[SkippedFile]]:
    """The dump members of ``archive`` (their bytes in memory) and the members skipped.

    Raises ``UnreadableArchive`` (one line) where it is not an archive or is past its budget.
    """
    spend = _Budget(archive)
    if zipfile.is_zipfile(archive):
        members = _zip_members(archive, spend)
    else:
        members = _tar_members(archive, spend)
    candidates: list[Candidate] = []
    skipped: list[SkippedFile] = []
    held = archive_bytes(MAX_ARCHIVE_BYTES)
    budget = held
    try:
        for count, member in enumerate(members):
            if count >= MAX_ARCHIVE_MEMBERS:
                raise UnreadableArchive(
                    f"{archive}: refused: more than {MAX_ARCHIVE_MEMBERS:,} members, far more "
                    "than a dump set has files; check this is an archive of dumps."
                )
            cand, skip = _take(archive, member, budget, held)
            if cand is not None:
                candidates.append(cand)
                budget -= len(cand.data or b"")
            if skip is not None:
                skipped.append(skip)
    except _ARCHIVE_ERRORS as exc:
        if not candidates:
            raise UnreadableArchive(
                f"{archive}: not a readable archive ({type(exc).__name__}: "
                f"{short_message(exc)}); check the file is a complete .tar, .tar.gz or .zip."
            ) from exc
        reason = f"the archive is damaged past this point ({short_message(exc)})"
        skipped.append(SkippedFile(path=archive, reason=reason))
    return candidates, skipped


def _take(
    archive: Path, member: _Member, budget: int, held: int = MAX_ARCHIVE_BYTES
) -> tuple[Candidate | None, SkippedFile | None]:
    where = Path(f"{archive}:{member.name}")
    name = PurePosixPath(member.name).name
    if not member.name.isprintable():
        return None, SkippedFile(path=where, reason="name has control characters")
    if name.startswith(".") or member.name.startswith("__MACOSX/"):
        return None, None  # hidden files, macOS resource forks
    parsed = parse_dump_name(name)
    if parsed is None:
        return None, SkippedFile(path=where, reason="name does not end in a rank number")
    prefix, rank, encoding = parsed
    if rank >= MAX_WORLD_SIZE:
        return None, SkippedFile(path=where, reason=f"rank {rank} is beyond any job's world size")

    def cand(data: bytes | None = None, refused: str | None = None) -> Candidate:
        return Candidate(
            path=where,
            rank=rank,
            prefix=prefix,
            encoding=encoding,
            size_bytes=member.size,
            relative=member.name,
            data=data,
            refused=refused,
        )

    if member.problem is not None:
        return cand(
            refused=f"{where}: refused: {member.problem}; the archive is not "
            "trusted past it. The other ranks are analysed without it."
        ), None
    if member.size > MAX_DUMP_BYTES:
        return cand(
            refused=f"{where}: refused: its header says {member.size / 2**20:.1f} MiB, "
            f"larger than any Flight Recorder dump ({MAX_DUMP_BYTES / 2**20:.1f} MiB limit)."
        ), None
    if member.size > budget:
        return cand(
            refused=f"{where}: refused: the archive's dumps hold more than "
            f"{held / 2**30:.1f} GiB in all (at most {MAX_ARCHIVE_BYTES >> 30} GiB, and a "
            "quarter of this machine's memory); unpack the set and analyse the directory."
        ), None
    try:
        data = member.read(member.size + 1)
    except _ARCHIVE_ERRORS as exc:
        return cand(
            refused=f"{where}: cannot be read from the archive ({type(exc).__name__}: "
            f"{short_message(exc)}); the archive is damaged."
        ), None
    if len(data) != member.size:
        return cand(
            refused=f"{where}: refused: its header says {member.size} bytes but it "
            f"holds {'more' if len(data) > member.size else len(data)}; the archive "
            "is damaged or built to mislead."
        ), None
    return cand(data=data), None


def _unsafe_path(name: str) -> str | None:
    """Why a member's path is refused, or None."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "a path that climbs out of the archive (..)"
    return None


def _tar_members(archive: Path, budget: _Budget) -> Iterator[_Member]:
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

                def read(n: int, info: tarfile.TarInfo = info) -> bytes:
                    unpacked.seek(info.offset_data)
                    return unpacked.read(min(n, info.size))

                yield _Member(
                    name=info.name.removeprefix("./"),
                    size=info.size,
                    problem=problem,
                    read=read if problem is None else _nothing,
                )


def _zip_members(archive: Path, budget: _Budget) -> Iterator[_Member]:
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

            def read(n: int, info: zipfile.ZipInfo = info) -> bytes:
                with zf.open(info) as f:
                    return _read_budgeted(f, n, budget)

            yield _Member(name=info.filename, size=info.file_size, problem=problem, read=read)


def _nothing(n: int) -> bytes:
    return b""


def _read_budgeted(f: IO[bytes] | io.BufferedIOBase, n: int, budget: _Budget) -> bytes:
    """At most ``n`` bytes of ``f``, a MiB at a time, each counted against ``budget``."""
    parts = []
    while n > 0:
        part = f.read(min(n, _CHUNK))
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

    def __init__(self, raw: IO[bytes], budget: _Budget) -> None:
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
            size = MAX_UNPACKED_BYTES + 1  # (tarfile always says how much; the budget ends it)
        data = _read_budgeted(self.inner, size, self.budget)
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
            if not self.read(min(_CHUNK, target - self.position)):
                break  # (past the end: the next read says so)
        return self.position

    def close(self) -> None:
        if not self.plain:
            self.inner.close()
        super().close()
