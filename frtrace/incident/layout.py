"""What each file of an incident's folder is: one rule for every reader and every command.

A hung job leaves, in one folder (or one folder per host, or an archive of those): each
rank's Flight Recorder dump, Python stack samples (the recorder's ``stacks_rank_5.json``,
py-spy text or ``--json``, faulthandler output), logs and error files (torchrun's, slurm's,
torchelastic's ``error.json``), and ``collect``'s manifest (``frtrace-collect.json``). The
dump loader (``frtrace.load``), the stack reader (``frtrace.pystack``) and the evidence reader
(``frtrace.evidence``) each read their own kind, and ``summary`` says what ``analyze`` reads:
the kinds are told apart here, once, by name and (where a name does not say) by a file's
first bytes, for a folder (``walk``) and for an archive's members (``frtrace.incident.archive``).

By name, in this order: the manifest; a stack sample's name (``pyspy_rank_5.txt``...); an
error file's (``error.json``, ``error_3.json``); a dump's (``<prefix><rank>`` with no
extension, ``.json``, ``.pkl``); a log's (``*.log``, ``*.out``, ``*.err``, names that say
stdout, stderr, log, slurm or torchrun). A dump's name wins over a log's (``output_trace_3`` is
a dump: taking a dump for a log would cost the analysis a rank). By content: a file named like
a dump but not a pickle, or a text file whose name ends in a rank (``rank5.txt``, a rank's
``rank_3.log``), is a stack sample where its first ``SNIFF_BYTES`` read as one; a log that
holds one is listed as both. Links are followed for dumps and stack samples, never for logs,
error files or manifests. Imports nothing of frtrace but the manifest's name
(``frtrace.job.manifest``): every stage may use it.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

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

# Extensions a dump may carry; anything else with letters after its last dot is not a dump.
DUMP_SUFFIXES = {"": "auto", ".json": "json", ".pkl": "pickle", ".pickle": "pickle"}
# Dot-separated name parts that mark a file as something else (logs of rank 3, a rotated log,
# torch's trigger pipe `<stem><rank>.pipe`, our own exports...).
NOT_A_DUMP_PARTS = frozenset(
    (
        "pipe log txt md rst out err py sh csv tsv parquet arrow gz bz2 xz zst zip tar lock "
        "tmp yaml yml toml ini html png svg pt pth bin"
    ).split()
)
_RANK_AT_END = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)$")
# A name that says "this is a Python stack sample" (the rank follows somewhere after).
STACK_FILE_NAME = re.compile(
    r"^(?:stacks?|py[-_]?spy|tracebacks?|dump[-_]?traceback|faulthandler)(?:[-_.]|\d|$)",
    re.IGNORECASE,
)
LOG_SUFFIXES = frozenset({".log", ".out", ".err"})
LOG_NAME = re.compile(
    r"(?i)(?:^|[-_.])(?:std(?:out|err)|logs?|slurm|torchrun|console|output)(?:[-_.\d]|$)"
)
ERROR_FILE_NAME = re.compile(r"(?i)^(?:.*[-_])?error(?:[-_]?\d+)?\.json$")
MAX_LOG_BYTES = 16 * 1024 * 1024  # only a log's last bytes are read (a failure is at its end)
MAX_STACK_BYTES = 64 * 1024 * 1024  # a py-spy --locals dump of 1,000 threads is ~10 MB
MAX_DEPTH = 32  # folders under the one analysed: deeper ones are not read
SNIFF_BYTES = 4096  # enough to tell a stack file from a dump by its first lines
# Files looked into for stacks when their name does not say (a name ending in a rank).
_SNIFF_SUFFIXES = frozenset({"", ".txt", ".json", ".log", ".out", ".err", ".stacks"})
_DIGITS_AT_END = re.compile(r"(\d+)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PS_PROCESS_ANY = re.compile(r"^Process \d+: ", re.MULTILINE)
_FH_ANY = re.compile(
    r"^(?:(?:Current thread|Thread) 0x[0-9a-fA-F]+(?: .*?)? \(most recent call first\):"
    r"|Stack \(most recent call first\):)$",
    re.MULTILINE,
)

SideKind = Literal["stacks", "log", "error_file", "manifest"]
NameKind = Literal["manifest", "stacks", "error_file", "dump", "log"]
StackFormat = Literal["recorder", "py-spy-json", "py-spy-text", "faulthandler"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SideFile:
    """A file beside the dumps that the analysis reads too: a rank's Python stacks
    (``frtrace.pystack``), a log or an error file (``frtrace.evidence``), ``collect``'s
    manifest. A log that holds a stack dump (faulthandler's in ``rank_3.log``) is listed once
    as each."""

    path: Path  # where it is, for messages; "dumps.tgz:host-a/pyspy_rank_3.txt" in an archive
    relative: str  # path under the directory (or in the archive), "/"-separated
    kind: SideKind
    size_bytes: int
    mtime: float | None = None  # seconds since the epoch, where known (a log's year)
    data: bytes | None = field(default=None, repr=False)  # an archive member's (a log's tail)
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
    relative: str
    prefix: str  # everything before the rank, e.g. "nccl_trace_rank_"
    rank: int  # from the digits that end the file name
    encoding: str  # "pickle", "json", or "auto" (no extension: sniffed from content)
    size_bytes: int


@functools.lru_cache(maxsize=1 << 16)  # (the walk and the sets' naming both ask, per file)
def parse_dump_name(name: str) -> tuple[str, int, str] | None:
    """(prefix, rank, encoding) for a dump-like file name, None for anything else."""
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    suffix = f".{ext.lower()}" if dot else ""
    if suffix not in DUMP_SUFFIXES:
        # "nccl_trace_rank_node02.cluster_5" has no extension, its host name has dots.
        stem, suffix = name, ""
    if any(part.lower() in NOT_A_DUMP_PARTS for part in stem.split(".")[1:]):
        return None
    match = _RANK_AT_END.match(stem)
    if match is None or stem.startswith(".") or match["prefix"] in ("core", "core."):
        return None  # core.1234 is a process's core file, not rank 1234's dump
    return match["prefix"], int(match["rank"]), DUMP_SUFFIXES[suffix]


def kind_by_name(name: str) -> tuple[NameKind | None, tuple[str, int, str] | None]:
    """What a file is by its name alone (see the module docstring), and for a dump its
    prefix, rank and encoding; None for none of them."""
    if name == MANIFEST_NAME:
        return "manifest", None
    if STACK_FILE_NAME.match(name):
        return "stacks", None
    if ERROR_FILE_NAME.match(name):
        return "error_file", None
    parsed = parse_dump_name(name)
    if parsed is not None:
        return "dump", parsed
    if os.path.splitext(name)[1].lower() in LOG_SUFFIXES or LOG_NAME.search(name):
        return "log", None
    return None, None


def may_be_stacks(name: str, kind: NameKind | None, encoding: str | None, size: int) -> bool:
    """Whether a file not named as a stack sample is looked into for one: one named like a
    dump but not a pickle, or a text file (a log included) whose name ends in a rank."""
    if kind in ("manifest", "stacks", "error_file") or not 0 < size <= MAX_STACK_BYTES:
        return False
    if kind == "dump":
        return encoding != "pickle"
    digits = _DIGITS_AT_END.search(name.split(".", 1)[0])
    suffix = os.path.splitext(name)[1].lower()
    return suffix in _SNIFF_SUFFIXES and digits is not None and len(digits[1]) <= 9


def as_text(text: str) -> str:
    """Stack dump text as the readers see it: no BOM, no terminal colours, ``\\n`` endings."""
    text = text.removeprefix("\ufeff")
    if "\x1b" in text:
        text = _ANSI.sub("", text)  # py-spy output captured through a terminal
    return text.replace("\r\n", "\n").replace("\r", "\n")


def stack_format(text: str) -> StackFormat | None:
    """Which stack format a (decoded) text is in, or None; does not validate it."""
    head = text.lstrip()
    if head.startswith("{"):
        return "recorder"
    if head.startswith("["):
        return "py-spy-json"
    if head.startswith("Process "):
        return "py-spy-text"
    if _FH_ANY.search(text):
        return "faulthandler"
    if _PS_PROCESS_ANY.search(text):
        return "py-spy-text"
    return None


def looks_like_stacks(head: bytes) -> bool:
    """Whether a file that starts with ``head`` (its first ``SNIFF_BYTES``) is a stack sample:
    py-spy text or faulthandler output, py-spy ``--json`` (a list whose threads have py-spy's
    keys), or the recorder's sidecar (a JSON object of its own format); never a pickle, nor
    any other JSON (a dump), nor binary data."""
    if not head or head[:1] == b"\x80" or b"\x00" in head:  # a pickle, binary: not text
        return False
    text = as_text(head.decode("utf-8", errors="replace"))
    fmt = stack_format(text) if text.strip() else None
    if fmt == "recorder":  # any JSON object: only the sidecar's own format name counts
        return b'"frtrace-stacks"' in head
    if fmt == "py-spy-json":  # any JSON list: only py-spy's thread keys count (not a dump)
        return b'"owns_gil"' in head or b'"os_thread_id"' in head
    return fmt is not None


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
    for root, under, files in _folders(directory, skipped):
        for name in files:
            relative = f"{under}{name}"
            found = _look_at(root / name, name, relative)
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


def _look_at(path: Path, name: str, relative: str) -> NamedDump | SkippedFile | list[SideFile]:
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
    kind, parsed = kind_by_name(name)
    size = info.st_size

    def side(kind: SideKind) -> SideFile:
        return SideFile(
            path=path, relative=relative, kind=kind, size_bytes=size, mtime=info.st_mtime
        )

    if kind == "stacks":
        return [side("stacks")]
    if kind in ("log", "error_file", "manifest") and linked:
        return SkippedFile(path=path, reason="a link: a log is never followed")
    if kind in ("error_file", "manifest"):
        return [side("error_file" if kind == "error_file" else "manifest")]
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
