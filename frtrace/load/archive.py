"""A dump set packed in an archive (``.tar``, ``.tar.gz``/``.tgz``, ``.zip``...), read in memory.

Nothing is extracted to disk: each member that looks like a rank's dump is read into memory
once, in one pass over the archive, and handed to the same parser as a file (the
``Candidate`` carries its bytes). The loader's limits hold per member: a member whose header
declares more than ``MAX_DUMP_BYTES`` is refused unread, and never more than the declared
size is read (a header that lies is caught by comparing it with the bytes read). The members
read may hold ``MAX_ARCHIVE_BYTES`` in all, which bounds what a decompression bomb can cost.
Members that are links, devices or whose path is absolute or climbs out with ``..`` are
refused: a bad member that looks like a rank's dump becomes that rank's one-line problem
(``dumps.tgz:rank_3: refused: ...``), and the rest of the set still loads.
"""

from __future__ import annotations

import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from frtrace.errors import UnreadableArchive
from frtrace.load.discover import MAX_WORLD_SIZE, Candidate, SkippedFile, parse_dump_name
from frtrace.load.unpickle import MAX_DUMP_BYTES
from frtrace.load.values import short_message

__all__ = ["ARCHIVE_SUFFIXES", "MAX_ARCHIVE_BYTES", "is_archive", "read_archive"]

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


def read_archive(archive: Path) -> tuple[list[Candidate], list[SkippedFile]]:
    """The dump members of ``archive`` (their bytes in memory) and the members skipped."""
    members = _zip_members(archive) if zipfile.is_zipfile(archive) else _tar_members(archive)
    candidates: list[Candidate] = []
    skipped: list[SkippedFile] = []
    budget = MAX_ARCHIVE_BYTES
    try:
        for count, member in enumerate(members):
            if count >= MAX_ARCHIVE_MEMBERS:
                raise UnreadableArchive(
                    f"{archive}: refused: more than {MAX_ARCHIVE_MEMBERS:,} members, far more "
                    "than a dump set has files; check this is an archive of dumps."
                )
            cand, skip = _take(archive, member, budget)
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
    archive: Path, member: _Member, budget: int
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
            f"{MAX_ARCHIVE_BYTES >> 30} GiB in all; unpack the set and analyse the "
            "directory."
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


def _tar_members(archive: Path) -> Iterator[_Member]:
    # "r|*": a stream, read once front to back (compressed tars cannot seek cheaply)
    with tarfile.open(archive, mode="r|*") as tar:
        for info in tar:
            if info.isdir():
                continue
            problem = _unsafe_path(info.name)
            if problem is None and (info.issym() or info.islnk()):
                problem = "a link, not a file"
            elif problem is None and not info.isreg():
                problem = "a device, pipe or other special file"
            extracted = tar.extractfile(info) if problem is None else None
            yield _Member(
                name=info.name.removeprefix("./"),
                size=info.size,
                problem=problem,
                read=extracted.read if extracted is not None else _nothing,
            )


def _zip_members(archive: Path) -> Iterator[_Member]:
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
                    return f.read(n)

            yield _Member(name=info.filename, size=info.file_size, problem=problem, read=read)


def _nothing(n: int) -> bytes:
    return b""
