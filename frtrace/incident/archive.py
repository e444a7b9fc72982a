"""A dump set packed in an archive (``.tar``, ``.tar.gz``/``.tgz``, ``.zip``...), read in memory.

Nothing is extracted to disk: the members are sorted by the rules that sort a directory's
files (``frtrace.incident.discover``: a dump, a side file, or skipped), and each member that is a
rank's dump or a side file (Python stacks, a log or error file, ``collect``'s manifest) is
read into memory once, in one pass over the archive: a dump is handed to the same parser as
a file (the ``Candidate`` carries its bytes), a side file to its reader (the ``SideFile``
does; of a log, its last ``MAX_LOG_BYTES`` only), so an archive gives the answer of the
folder it was made from. The loader's limits hold per member: a member whose header
declares more than ``MAX_DUMP_BYTES`` is refused unread, and never more than the declared
size is read (a header that lies is caught by comparing it with the bytes read). The members
read may hold ``MAX_ARCHIVE_BYTES`` in all, and never more than a quarter of this machine's
memory (``frtrace.incident.memory``); a stack sample at most ``MAX_STACK_BYTES``, as on disk.
Members that are links, devices or whose path is absolute or climbs out with ``..`` are
refused: a bad member that looks like a rank's dump becomes that rank's one-line problem
(``dumps.tgz:rank_3: refused: ...``), any other is skipped with that reason, and the rest of
the set still loads.

A compressed tar is unpacked once, front to back, through a seekable reader (not tarfile's
stream mode, which copied its whole buffer on every read: a few KB of bz2 hiding 64 MiB of
zeros took minutes); members passed over are read through and dropped a MiB at a time. The
whole archive has a budget: ``MAX_UNPACKED_BYTES`` unpacked (members passed over and headers
included) and ``archive_timeout_s`` of reading; past either, the archive is refused in one
line (``UnreadableArchive``): a decompression bomb costs seconds, never the machine.

A member compressed on its own (``job/node-0/rank_1.gz``, ``train.log.xz``) is what its name
without the suffix says, as in a folder: its bytes read as any member's, then unpacked within
its kind's limit (``frtrace.incident.compressed``; one past it costs that member, in one line).
"""

from __future__ import annotations

import io
import tarfile
import time
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath

from frtrace.base.printable import short_message
from frtrace.errors import UnreadableArchive
from frtrace.incident.budget import MAX_DUMP_BYTES
from frtrace.incident.compressed import (
    Method,
    Refused,
    Unpacking,
    compressed_name,
    sort_packed,
)
from frtrace.incident.layout import (
    MAX_LOG_BYTES,
    MAX_STACK_BYTES,
    SNIFF_BYTES,
    SideFile,
    SideKind,
    SkippedFile,
    kind_by_name,
    looks_like_stacks,
    may_be_stacks,
    walk_key,
)
from frtrace.incident.listing import MAX_WORLD_SIZE, Candidate, Listing
from frtrace.incident.memory import archive_bytes
from frtrace.incident.unpack import Member as _Member
from frtrace.incident.unpack import tar_members, zip_members

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


_SIDE_KINDS: dict[str, SideKind] = {
    "stacks": "stacks",
    "log": "log",
    "error_file": "error_file",
    "manifest": "manifest",
    "ras": "ras",
}


def is_archive(path: Path) -> bool:
    """Whether the name says ``path`` is an archive frtrace reads."""
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


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


def read_archive(archive: Path) -> Listing:
    """Every member of ``archive``, sorted as a directory's files are (``list_files``): the
    dump members and the side files (stacks, logs, error files), their bytes in memory, and
    the members skipped. An archive ``NAME.tgz`` whose members all lie in ``NAME/`` is read
    as the folder ``NAME`` (``tar czf NAME.tgz NAME``): the paths under it are the folder's.

    Raises ``UnreadableArchive`` (one line) where it is not an archive or is past its budget.
    """
    spend = _Budget(archive)
    if zipfile.is_zipfile(archive):
        members = zip_members(archive, spend)
    else:
        members = tar_members(archive, spend)
    candidates: list[Candidate] = []
    side: list[SideFile] = []
    skipped: list[SkippedFile] = []
    held = archive_bytes(MAX_ARCHIVE_BYTES)
    budget = held
    unpacking = Unpacking()  # (the members compressed on their own, all together)
    try:
        for count, member in enumerate(members):
            if count >= MAX_ARCHIVE_MEMBERS:
                raise UnreadableArchive(
                    f"{archive}: refused: more than {MAX_ARCHIVE_MEMBERS:,} members, far more "
                    "than a dump set has files; check this is an archive of dumps."
                )
            counted: set[int] = set()
            for found in _take(archive, member, budget, held, unpacking):
                if isinstance(found, SkippedFile):
                    skipped.append(found)
                    continue
                if isinstance(found, Candidate):
                    candidates.append(found)
                else:
                    side.append(found)
                if found.data is not None and id(found.data) not in counted:
                    counted.add(id(found.data))  # (a log read as stacks too: its bytes once)
                    budget -= len(found.data)
    except _ARCHIVE_ERRORS as exc:
        if not candidates and not side:
            raise UnreadableArchive(
                f"{archive}: not a readable archive ({type(exc).__name__}: "
                f"{short_message(exc)}); check the file is a complete .tar, .tar.gz or .zip."
            ) from exc
        reason = f"the archive is damaged past this point ({short_message(exc)})"
        skipped.append(SkippedFile(path=archive, reason=reason))
    return _as_folder(archive, candidates, side, skipped)


def _as_folder(
    archive: Path, candidates: list[Candidate], side: list[SideFile], skipped: list[SkippedFile]
) -> Listing:
    """The members in walk order, under ``NAME/`` read as the folder ``NAME`` where all are."""
    top = _stem(archive) + "/"
    names = [c.relative for c in candidates] + [f.relative for f in side]
    if names and all(n.startswith(top) for n in names):
        candidates = [replace(c, relative=c.relative.removeprefix(top)) for c in candidates]
        side = [replace(f, relative=f.relative.removeprefix(top)) for f in side]
    return Listing(
        candidates=tuple(sorted(candidates, key=lambda c: walk_key(c.relative))),
        side_files=tuple(sorted(side, key=lambda f: walk_key(f.relative))),
        skipped=tuple(skipped),
    )


def _stem(archive: Path) -> str:
    """The archive's name without its suffix: ``incident`` for ``incident.tar.gz``."""
    name = archive.name
    for suffix in sorted(ARCHIVE_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def _take(
    archive: Path,
    member: _Member,
    budget: int,
    held: int = MAX_ARCHIVE_BYTES,
    unpacking: Unpacking | None = None,
) -> Sequence[Candidate | SideFile | SkippedFile]:
    """What one member is, sorted as ``list_files`` sorts a file (the same rules): a dump
    candidate, side files, or skipped; its bytes read where it is one of the first two."""
    where = Path(f"{archive}:{member.name}")
    name = PurePosixPath(member.name).name
    if not member.name.isprintable():
        return [SkippedFile(path=where, reason="name has control characters")]
    if name.startswith(".") or member.name.startswith("__MACOSX/"):
        return []  # hidden files, macOS resource forks
    packed = compressed_name(name)
    if packed is not None:  # (known by its name without the suffix)
        return _packed(where, member, packed, budget, held, unpacking or Unpacking())
    kind, parsed = kind_by_name(name)
    if parsed is not None:
        return [_dump(archive, member, where, name, parsed, budget, held)]
    if kind is None:  # (a text file whose name ends in a rank may be a stack sample)
        if not may_be_stacks(name, None, None, member.size) or member.problem is not None:
            return [SkippedFile(path=where, reason="name does not end in a rank number")]
        if member.size > budget:
            return [SkippedFile(path=where, reason="not read: past the archive's budget")]
        data, _ = _read_exactly(where, member)
        if data is None or not looks_like_stacks(data[:SNIFF_BYTES]):
            return [SkippedFile(path=where, reason="name does not end in a rank number")]
        return [_side(where, member, "stacks", data=data)]
    if member.problem is not None:
        return [SkippedFile(path=where, reason=f"refused: {member.problem}")]
    side = _SIDE_KINDS[kind]
    if side in ("stacks", "manifest", "ras") and member.size > MAX_STACK_BYTES:
        too_large = f"{member.size:,} bytes, more than the {MAX_STACK_BYTES:,} any stack dump needs"
        return [_side(where, member, side, refused=too_large)]
    start = max(0, member.size - MAX_LOG_BYTES) if side in ("log", "error_file") else 0
    if member.size - start > budget:
        past = (
            f"refused: the archive's files read hold more than {held / 2**30:.1f} GiB in all; "
            "unpack it and analyse the directory"
        )
        return [_side(where, member, side, refused=past)]
    data, refused = _read_exactly(where, member, start)
    if data is None:
        return [_side(where, member, side, refused=refused)]
    found = [_side(where, member, side, data=data)]
    sniff = side == "log" and not start and may_be_stacks(name, "log", None, member.size)
    if sniff and looks_like_stacks(data[:SNIFF_BYTES]):  # (faulthandler's output in rank_3.log)
        found.append(_side(where, member, "stacks", data=data))
    return found


def _packed(
    where: Path,
    member: _Member,
    packed: tuple[str, Method],
    budget: int,
    held: int,
    unpacking: Unpacking,
) -> list[Candidate | SideFile | SkippedFile]:
    """A member compressed on its own, ``packed`` its name without the suffix and how it is
    compressed: sorted and unpacked as a folder's compressed file is
    (``frtrace.incident.compressed.sort_packed``), its bytes read as any member's, within the
    archive's budget; a dump that is not read is its rank's one line."""
    inner, method = packed
    name = PurePosixPath(member.name).name
    relative = member.name[: len(member.name) - len(name)] + inner
    past = f"refused: the archive's files read hold more than {held / 2**30:.1f} GiB in all"
    refused = None if member.problem is None else f"refused: {member.problem}"
    if refused is None and member.size > min(budget, MAX_DUMP_BYTES):
        refused = f"{past}, or it is larger than any file frtrace reads; unpack the archive"

    def opened() -> io.BytesIO:
        data, why = _read_exactly(where, member)
        if data is None:
            raise Refused((why or "cannot be read").removeprefix(f"{where}: "))
        return io.BytesIO(data)

    found = sort_packed(inner, method, opened, unpacking, refused=refused)
    if found.data is not None and len(found.data) > budget:
        found = replace(found, size=None, data=None, refused=f"{past}; unpack the archive")
    if found.skipped is not None:
        return [SkippedFile(path=where, reason=found.skipped)]
    size = member.size if found.size is None else found.size
    if found.parsed is not None and found.kinds == ("dump",):
        prefix, rank, encoding = found.parsed
        why = (
            found.refused and f"{where}: {found.refused}. The other ranks are analysed without it."
        )
        return [
            Candidate(
                path=where,
                rank=rank,
                prefix=prefix,
                encoding=encoding,
                size_bytes=size,
                relative=relative,
                data=found.data,
                refused=why,
            )
        ]
    return [
        SideFile(
            path=where,
            relative=relative,
            kind=_SIDE_KINDS[kind],
            size_bytes=size,
            mtime=member.mtime,
            data=found.data,
            refused=found.refused,
        )
        for kind in found.kinds
    ]


def _side(
    where: Path,
    member: _Member,
    kind: SideKind,
    *,
    data: bytes | None = None,
    refused: str | None = None,
) -> SideFile:
    return SideFile(
        path=where,
        relative=member.name,
        kind=kind,
        size_bytes=member.size,
        mtime=member.mtime,
        data=data,
        refused=refused,
    )


def _dump(
    archive: Path,
    member: _Member,
    where: Path,
    name: str,
    parsed: tuple[str, int, str],
    budget: int,
    held: int,
) -> Candidate | SideFile | SkippedFile:
    """A member named like a rank's dump: read (a stack sample by its content is a side file)."""
    prefix, rank, encoding = parsed
    if rank >= MAX_WORLD_SIZE:
        return SkippedFile(path=where, reason=f"rank {rank} is beyond any job's world size")

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
        )
    if member.size > MAX_DUMP_BYTES:
        return cand(
            refused=f"{where}: refused: its header says {member.size / 2**20:.1f} MiB, "
            f"larger than any Flight Recorder dump ({MAX_DUMP_BYTES / 2**20:.1f} MiB limit)."
        )
    if member.size > budget:
        return cand(
            refused=f"{where}: refused: the archive's dumps hold more than "
            f"{held / 2**30:.1f} GiB in all (at most {MAX_ARCHIVE_BYTES >> 30} GiB, and a "
            "quarter of this machine's memory); unpack the set and analyse the directory."
        )
    data, refused = _read_exactly(where, member)
    if data is None:
        return cand(refused=refused)
    if may_be_stacks(name, "dump", encoding, member.size) and looks_like_stacks(data[:SNIFF_BYTES]):
        return _side(where, member, "stacks", data=data)
    return cand(data=data)


def _read_exactly(where: Path, member: _Member, start: int = 0) -> tuple[bytes | None, str | None]:
    """The member's bytes from ``start`` to its end, or why they cannot be had (one line):
    never more than its header declares is read, and a header that lies is caught."""
    want = member.size - start
    try:
        data = member.read(want + 1, start)
    except _ARCHIVE_ERRORS as exc:
        return None, (
            f"{where}: cannot be read from the archive ({type(exc).__name__}: "
            f"{short_message(exc)}); the archive is damaged."
        )
    if len(data) != want:
        return None, (
            f"{where}: refused: its header says {member.size} bytes but it "
            f"holds {'more' if len(data) > want else start + len(data)}; the archive "
            "is damaged or built to mislead."
        )
    return data, None
