"""What each file of an incident's folder is: one rule for every reader and every command.

A hung job leaves, in one folder (or one folder per host, or an archive of those): each
rank's Flight Recorder dump, Python stack samples (the recorder's ``stacks_rank_5.json``,
py-spy text or ``--json``, faulthandler output), logs and error files (torchrun's, slurm's,
torchelastic's ``error.json``), and ``collect``'s manifest (``frtrace-collect.json``). The
dump loader (``frtrace.load``), the stack reader (``frtrace.pystack``) and the evidence reader
(``frtrace.evidence``) each read their own kind, and ``summary`` says what ``analyze`` reads:
the kinds are told apart once, by name and (where a name does not say) by a file's first
bytes (the rules: ``frtrace.incident.kinds``), for a folder here (``walk``) and for an
archive's members (``frtrace.incident.archive``).

By name, in this order: the manifest; NCCL RAS's output (``ncclras.json``); a stack sample's
name (``pyspy_rank_5.txt``...); an error file's (``error.json``, ``error_3.json``); a dump's
(``<prefix><rank>`` with no extension, ``.json``, ``.pkl``); a log's (``*.log``, ``*.out``,
``*.err``, names that say stdout, stderr, log, slurm or torchrun). A dump's name wins over a
log's (``output_trace_3`` is a dump: taking a dump for a log would cost the analysis a rank).
By content: a file named like a dump but not a pickle, or a text file whose name ends in a rank
(``rank5.txt``, a rank's ``rank_3.log``), is a stack sample where its first ``SNIFF_BYTES``
read as one; a log that holds one is listed as both. Links are followed for dumps and stack
samples, never for logs, error files, manifests or RAS output. A file compressed on its own
(``rank_1.gz``, ``train.log.bz2``, ``stacks_rank_2.json.xz``, ``.zst``) is what its name
without the suffix says, its content unpacked here, bounded, and handed on as bytes
(``frtrace.incident.compressed``; a link to one is followed only where its kind's would be).
Imports nothing of frtrace but the job side's names (``frtrace.job``), the rules and the
unpacking: every stage may use it.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from frtrace.incident.compressed import (
    Method,
    Packed,
    Unpacking,
    compressed_name,
    sort_packed,
)
from frtrace.incident.kinds import (  # (the rules, by name and first bytes)
    LOG_NAME,
    MAX_LOG_BYTES,
    MAX_STACK_BYTES,
    SNIFF_BYTES,
    STACK_FILE_NAME,
    SideKind,
    as_text,
    kind_by_name,
    looks_like_stacks,
    may_be_stacks,
    parse_dump_name,
    stack_format,
)
from frtrace.job.env import DUMP_PREFIX, STACKS_PREFIX  # the names the job side writes
from frtrace.job.manifest import MANIFEST_NAME  # what `collect` knew of each rank

__all__ = [
    "DUMP_PREFIX",
    "LOG_NAME",
    "MANIFEST_NAME",
    "MAX_DEPTH",
    "MAX_LOG_BYTES",
    "MAX_STACK_BYTES",
    "SNIFF_BYTES",
    "STACKS_PREFIX",
    "STACK_FILE_NAME",
    "NamedDump",
    "SideFile",
    "SideKind",
    "SkippedFile",
    "as_text",
    "kind_by_name",
    "looks_like_stacks",
    "may_be_stacks",
    "parse_dump_name",
    "read_regular",
    "side_files",
    "stack_format",
    "walk",
    "walk_key",
]

MAX_DEPTH = 32  # folders under the one analysed: deeper ones are not read


@dataclass(frozen=True, slots=True, kw_only=True)
class SideFile:
    """A file beside the dumps that the analysis reads too: a rank's Python stacks
    (``frtrace.pystack``), a log or an error file (``frtrace.evidence``), ``collect``'s
    manifest. A log that holds a stack dump (faulthandler's in ``rank_3.log``) is listed once
    as each."""

    path: Path  # where it is, for messages; "dumps.tgz:host-a/pyspy_rank_3.txt" in an archive
    # path under the directory (or in the archive), "/"-separated; a compressed file's without
    # its suffix (``attempt_0/3/stderr.log`` for ``stderr.log.gz``: what the name says it is)
    relative: str
    kind: SideKind
    size_bytes: int  # a compressed file's: unpacked
    mtime: float | None = None  # seconds since the epoch, where known (a log's year)
    # an archive member's or a compressed file's content (a log's tail)
    data: bytes | None = field(default=None, repr=False)
    refused: str | None = None  # why it is not read (too large, past the archive's budget)


@dataclass(frozen=True, slots=True, kw_only=True)
class SkippedFile:
    """A file under the directory that was not taken as a dump, and why."""

    path: Path
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NamedDump:
    """A file that by its name is the dump of one rank (``frtrace.load`` reads it)."""

    path: Path
    relative: str  # a compressed file's without its suffix (``rank_1`` for ``rank_1.gz``)
    prefix: str  # everything before the rank, e.g. "nccl_trace_rank_"
    rank: int  # from the digits that end the file name
    encoding: str  # "pickle", "json", or "auto" (no extension: sniffed from content)
    size_bytes: int  # a compressed file's: unpacked (refused: the file's own)
    data: bytes | None = field(default=None, repr=False)  # a compressed file's, unpacked
    refused: str | None = None  # one line: why it is not read (a compressed file past a limit)


def walk_key(relative: str) -> tuple[tuple[int, str], ...]:
    """Sorts "/"-separated paths the way ``walk`` meets them: a folder's files by name, then
    its subfolders by name (an archive's members are put in this order too)."""
    parts = relative.split("/")
    return (*((1, p) for p in parts[:-1]), (0, parts[-1]))


def walk(directory: Path) -> tuple[list[NamedDump], list[SideFile], list[SkippedFile]]:
    """Every file under ``directory`` (recursively; hidden folders left out), in walk order:
    the dumps by name, the side files, and what was skipped (and why)."""
    dumps: list[NamedDump] = []
    side: list[SideFile] = []
    skipped: list[SkippedFile] = []
    unpacking = Unpacking()  # (what the compressed files may cost, all together)
    for root, under, files in _folders(directory, skipped):
        for name in files:
            relative = f"{under}{name}"
            found = _look_at(root / name, name, relative, unpacking)
            if isinstance(found, NamedDump):
                dumps.append(found)
            elif isinstance(found, SkippedFile):
                skipped.append(found)
            else:
                side.extend(found)
    return dumps, side, skipped


def _folders(directory: Path, skipped: list[SkippedFile]) -> Iterator[tuple[Path, str, list[str]]]:
    """Each folder under ``directory`` (``os.walk``'s order, without its recursion; links to
    folders and hidden folders not entered; none deeper than ``MAX_DEPTH``): its path, its
    relative path with a trailing "/" ("" for the top), and its file names, sorted."""
    todo: list[tuple[Path, str, int]] = [(directory, "", 0)]
    while todo:
        root, under, depth = todo.pop()
        files: list[str] = []
        folders: list[str] = []
        try:
            with os.scandir(root) as listing:
                for entry in listing:
                    try:
                        is_dir = entry.is_dir()  # (a link to a folder: listed, not entered)
                        into = is_dir and not entry.is_symlink() and not entry.name.startswith(".")
                    except OSError:
                        is_dir = into = False
                    if into:
                        folders.append(entry.name)
                    elif not is_dir:
                        files.append(entry.name)
        except OSError:
            continue  # (as os.walk: a folder that cannot be listed is left out)
        yield root, under, sorted(files)
        if folders and depth >= MAX_DEPTH:
            skipped.append(
                SkippedFile(path=root, reason=f"folders nested deeper than {MAX_DEPTH}: not read")
            )
            continue
        todo.extend((root / d, f"{under}{d}/", depth + 1) for d in sorted(folders, reverse=True))


def side_files(directory: Path) -> list[SideFile]:
    """The side files under ``directory`` (none where it is not a directory)."""
    return walk(directory)[1] if directory.is_dir() else []


def _look_at(
    path: Path, name: str, relative: str, unpacking: Unpacking
) -> NamedDump | SkippedFile | list[SideFile]:
    """What one file of the walk is: a dump, side files, or skipped (and why)."""
    try:
        info = os.lstat(path)
        linked = stat.S_ISLNK(info.st_mode)
        if linked:
            info = path.stat()  # (a dump or a stack file may be a link; a log never is)
    except OSError as exc:
        return SkippedFile(path=path, reason=f"cannot stat: {exc.strerror}")
    if not stat.S_ISREG(info.st_mode):
        # Never open a FIFO: torch's `<stem><rank>.pipe` would block the reader.
        return SkippedFile(path=path, reason="not a regular file")
    if not name.isprintable():
        # a newline in a name would break the one-line messages that name the file
        return SkippedFile(path=path, reason="name has control or undecodable characters")
    if name.startswith("."):
        return SkippedFile(path=path, reason="name does not end in a rank number")
    packed = compressed_name(name)
    if packed is not None:  # (known by its name without the suffix, as its path under DIR)
        inner = relative[: len(relative) - len(name)] + packed[0]
        return _look_at_packed(path, packed, inner, info, linked, unpacking)
    kind, parsed = kind_by_name(name)
    size = info.st_size

    def side(kind: SideKind) -> SideFile:
        return SideFile(
            path=path, relative=relative, kind=kind, size_bytes=size, mtime=info.st_mtime
        )

    if kind == "stacks":
        return [side("stacks")]
    if kind in ("log", "error_file", "manifest", "ras") and linked:
        return SkippedFile(path=path, reason="a link: a log is never followed")
    if kind in ("error_file", "manifest", "ras"):
        return [side(kind)]
    encoding = None if parsed is None else parsed[2]
    stacks = may_be_stacks(name, kind, encoding, size) and _head_is_stacks(path)
    if kind == "log":
        return [side("log"), side("stacks")] if stacks else [side("log")]
    if stacks:
        return [side("stacks")]
    if parsed is None:
        return SkippedFile(path=path, reason="name does not end in a rank number")
    prefix, rank, encoding = parsed
    return NamedDump(
        path=path, relative=relative, prefix=prefix, rank=rank, encoding=encoding, size_bytes=size
    )


def _look_at_packed(
    path: Path,
    packed: tuple[str, Method],
    relative: str,
    info: os.stat_result,
    linked: bool,
    budget: Unpacking,
) -> NamedDump | SkippedFile | list[SideFile]:
    """A compressed file of the walk, ``packed`` its name without the suffix and how it is
    compressed (``frtrace.incident.compressed.sort_packed``): opened as ``read_regular`` opens
    a file (a link followed only where it was listed as one, which its kind's may be; a
    regular file only); a dump that is not read is its rank's one line."""
    inner, method = packed
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if linked else os.O_NOFOLLOW)

    def opened() -> io.BufferedReader:
        raw = os.fdopen(os.open(path, flags), "rb")
        if not stat.S_ISREG(os.fstat(raw.fileno()).st_mode):
            raw.close()
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return raw

    found = sort_packed(inner, method, opened, budget, linked=linked)
    if found.skipped is not None:
        return SkippedFile(path=path, reason=found.skipped)
    size = info.st_size if found.size is None else found.size
    if found.parsed is not None and found.kinds == ("dump",):
        prefix, rank, encoding = found.parsed
        why = found.refused and f"{path}: {found.refused}. The other ranks are analysed without it."
        return NamedDump(
            path=path,
            relative=relative,
            prefix=prefix,
            rank=rank,
            encoding=encoding,
            size_bytes=size,
            data=found.data,
            refused=why,
        )
    return [_packed_side(path, relative, kind, size, info, found) for kind in found.kinds]


_SIDE: dict[str, SideKind] = {k: k for k in ("stacks", "log", "error_file", "manifest", "ras")}


def _packed_side(
    path: Path, relative: str, kind: str, size: int, info: os.stat_result, found: Packed
) -> SideFile:
    return SideFile(
        path=path,
        relative=relative,
        kind=_SIDE[kind],  # (a dump is sorted as one above)
        size_bytes=size,
        mtime=info.st_mtime,
        data=found.data,
        refused=found.refused,
    )


def _head_is_stacks(path: Path) -> bool:
    try:
        head = read_regular(path, SNIFF_BYTES, follow=True)
    except OSError:
        return False
    return looks_like_stacks(head)


def read_regular(path: Path | str, limit: int, *, follow: bool, tail: bool = False) -> bytes:
    """At most ``limit`` bytes of a regular file (its last ones with ``tail``), opened so that
    nothing else is: ``O_NONBLOCK`` (a FIFO swapped in after the listing does not block the
    open), then ``fstat`` of what was opened (not a regular file: ``OSError``); a link not
    followed unless ``follow``."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:  # (plain reads: a buffered file object costs more than the read, 16,384 times)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if tail and info.st_size > limit:
            os.lseek(fd, info.st_size - limit, os.SEEK_SET)
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))  # (a large limit is not one allocation)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
