"""Find the per-rank dump files under a directory and read each one's rank from its name.

torch names a dump ``<prefix><global_rank>``: ``nccl_trace_rank_3`` (torch 2.2-2.8),
``comm_lib_trace_rank_3`` (2.9+), torchtitan's ``comm_traces/rank_3``, tutorials' ``trace_3``,
host-qualified ``nccl_trace_rank_node02_5``, optionally with ``.json`` / ``.pkl``. The rank is
the run of digits at the end of the name: the dump's content does not carry it.

The set can also be an archive of such files (``frtrace.load.archive``: read in memory), and a
directory can hold several incidents' dumps of the same ranks (``incident1/rank_0`` and
``incident2/rank_0``, or ``nccl_trace_rank_0`` next to ``comm_lib_trace_rank_0``): they are
told apart by their *set name*, the path with ``*`` for the rank (``incident1/rank_*``), and
``only`` chooses one.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from frtrace.errors import DumpDirNotFound, DuplicateRank, NoDumpsFound, SeveralDumpSets
from frtrace.ranges import format_ranks

__all__ = ["MAX_WORLD_SIZE", "Candidate", "Discovery", "SkippedFile", "discover", "set_name"]

# No job has this many ranks (the largest run ~10^5 GPUs). A rank number at or beyond it, in a
# file name or a recorded group, is damage: taken at face value it would make frtrace build
# per-rank structures for 10^12 ranks.
MAX_WORLD_SIZE = 1 << 20

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
# Python stack samples kept next to the dumps (``stacks_rank_5.json``, ``pyspy_rank_5.json``),
# read by frtrace.pystack, never as dumps; the same pattern as pystack.discover.STACK_NAME.
STACK_FILE_NAME = re.compile(
    r"^(?:stacks?|py[-_]?spy|tracebacks?|dump[-_]?traceback|faulthandler)(?:[-_.]|\d|$)",
    re.IGNORECASE,
)
# How a stack sample starts: py-spy text, faulthandler; py-spy --json is a list whose first
# thread has "owns_gil"/"os_thread_id" (no dump entry has), the recorder's sidecar a JSON
# object whose first key is "format": "frtrace-stacks". Anything else (damage included) is
# left to the loader, which reports it. Only small files are looked into (stacks are small;
# a file too large for a dump is refused by the loader unread).
_STACK_HEADS = (b"Process ", b"Thread 0x", b"Current thread")
_PYSPY_JSON_MARKS = (b'"owns_gil"', b'"os_thread_id"')
_SIDECAR_MARK = b'"format": "frtrace-stacks"'
_SNIFF_MAX_BYTES = 64 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """A file (or archive member) that by its name is the dump of one rank."""

    path: Path  # where it is, for messages; "dumps.tgz:rank_3" for an archive member
    rank: int  # global rank, from the digits that end the file name
    prefix: str  # everything before the rank, e.g. "nccl_trace_rank_"
    encoding: str  # "pickle", "json", or "auto" (no extension: sniffed from content)
    size_bytes: int  # an archive member's: as its header declares
    relative: str = ""  # path under the directory (or in the archive), "/"-separated
    data: bytes | None = field(default=None, repr=False)  # an archive member's content
    refused: str | None = None  # one line: why it is refused unread (a link in an archive...)


@dataclass(frozen=True, slots=True, kw_only=True)
class SkippedFile:
    """A file under the directory that was not taken as a dump, and why."""

    path: Path
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Discovery:
    """What a directory holds: dump candidates sorted by rank, and what was skipped."""

    directory: Path
    candidates: tuple[Candidate, ...]
    skipped: tuple[SkippedFile, ...]

    def describe(self) -> str:
        """What was found, for the progress line: ``1,024 dump files (421.0 MB)``."""
        size = sum(c.size_bytes for c in self.candidates) / 1e6
        files = "file" if len(self.candidates) == 1 else "files"
        return f"{len(self.candidates):,} dump {files} ({size:,.1f} MB)"


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


def _is_stack_file(path: Path, name: str, encoding: str, size: int) -> bool:
    """A stack sample by its name, or (a small JSON or extensionless file) by how it starts."""
    if STACK_FILE_NAME.match(name):
        return True
    if encoding == "pickle" or not 0 < size <= _SNIFF_MAX_BYTES:
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(512).lstrip()
    except OSError:
        return False
    if head[:1] == b"[":
        return any(mark in head for mark in _PYSPY_JSON_MARKS)
    return head.startswith(_STACK_HEADS) or (head[:1] == b"{" and _SIDECAR_MARK in head)


def discover(directory: Path, *, only: str | None = None) -> Discovery:
    """Walk ``directory`` (or read the archive) recursively; raise if nothing can be a dump.

    ``only``: keep the files of one set: a set name as the several-sets error prints it
    (``incident1/rank_*``), else a glob over the path under the directory (``*.json``).
    """
    candidates, skipped = None, None
    if directory.is_file():  # (imported only then: the archive reader loads pyarrow)
        from frtrace.load.archive import is_archive, read_archive

        if is_archive(directory):
            candidates, skipped = read_archive(directory)
    if candidates is None or skipped is None:
        candidates, skipped = _walk(directory)
    if only is not None:
        candidates = _select(candidates, only)
    if not candidates:
        hint = f" ({len(skipped)} other files skipped)" if skipped else ""
        if only is not None:
            raise NoDumpsFound(
                f"{directory}: no Flight Recorder dumps match --only {only!r}{hint}; give a "
                "set name as the error about several sets prints it (e.g. 'incident1/rank_*') "
                "or a pattern of paths under the directory (e.g. '*.json')."
            )
        raise NoDumpsFound(
            f"{directory}: no Flight Recorder dumps found{hint}. Dumps are named "
            "<prefix><rank> (e.g. comm_lib_trace_rank_3); check TORCH_FR_DUMP_TEMP_FILE of the "
            "job, or run `frtrace env` to see how to make a job write them."
        )
    _check_one_set(directory, candidates)
    ordered = tuple(sorted(candidates, key=lambda c: c.rank))
    return Discovery(directory=directory, candidates=ordered, skipped=tuple(skipped))


def _walk(directory: Path) -> tuple[list[Candidate], list[SkippedFile]]:
    if not directory.exists():
        raise DumpDirNotFound(
            f"{directory}: no such directory. Pass the folder that holds the per-rank dump "
            "files (e.g. -d ~/.cache/torch or the TORCH_FR_DUMP_TEMP_FILE folder)."
        )
    if not directory.is_dir():
        raise DumpDirNotFound(
            f"{directory}: is a file, not a directory or an archive (.tar, .tar.gz, .tgz, "
            ".zip). Pass the folder or the archive that holds the per-rank dump files."
        )
    candidates: list[Candidate] = []
    skipped: list[SkippedFile] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(root) / name
            try:
                info = path.stat()
            except OSError as exc:
                skipped.append(SkippedFile(path=path, reason=f"cannot stat: {exc.strerror}"))
                continue
            if not stat.S_ISREG(info.st_mode):
                # Never open a FIFO: torch's `<stem><rank>.pipe` would block the reader.
                skipped.append(SkippedFile(path=path, reason="not a regular file"))
                continue
            if not name.isprintable():
                # a newline in a name would break the one-line messages that name the file
                reason = "name has control or undecodable characters"
                skipped.append(SkippedFile(path=path, reason=reason))
                continue
            parsed = None if name.startswith(".") else parse_dump_name(name)
            if parsed is None:
                skipped.append(SkippedFile(path=path, reason="name does not end in a rank number"))
                continue
            prefix, rank, encoding = parsed
            if _is_stack_file(path, name, encoding, info.st_size):
                skipped.append(SkippedFile(path=path, reason="Python stacks, not a dump"))
                continue
            if rank >= MAX_WORLD_SIZE:
                skipped.append(
                    SkippedFile(path=path, reason=f"rank {rank} is beyond any job's world size")
                )
                continue
            candidates.append(
                Candidate(
                    path=path,
                    rank=rank,
                    prefix=prefix,
                    encoding=encoding,
                    size_bytes=info.st_size,
                    relative=path.relative_to(directory).as_posix(),
                )
            )
    return candidates, skipped


def set_name(relative: str) -> str:
    """The set a file belongs to: its path with ``*`` for the rank (``incident1/rank_*.json``)."""
    path = PurePosixPath(relative)
    parsed = parse_dump_name(path.name)
    if parsed is None:
        return relative
    prefix, rank, _ = parsed
    digits = re.match(r"\d+", path.name[len(prefix) :])
    rest = path.name[len(prefix) + (digits.end() if digits else len(str(rank))) :]
    return str(path.parent / f"{prefix}*{rest}") if path.parent.name else f"{prefix}*{rest}"


def _select(candidates: list[Candidate], only: str) -> list[Candidate]:
    by_set = [c for c in candidates if set_name(c.relative) == only]
    if by_set:
        return by_set
    return [c for c in candidates if fnmatch.fnmatchcase(c.relative, only)]


def _check_one_set(directory: Path, candidates: list[Candidate]) -> None:
    """Raise when a rank has two files: say which sets they form and how to pick one."""
    by_rank: dict[int, Candidate] = {}
    clash: tuple[Candidate, Candidate] | None = None
    for cand in candidates:
        if cand.rank in by_rank:
            clash = by_rank[cand.rank], cand
            break
        by_rank[cand.rank] = cand
    if clash is None:
        return
    sets: dict[str, list[int]] = defaultdict(list)
    for cand in candidates:
        sets[set_name(cand.relative)].append(cand.rank)
    first, second = clash
    if len(sets) < 2:  # rank_3 and rank_03: the same set twice
        raise DuplicateRank(
            f"{directory}: two files claim rank {second.rank}: {first.path} and {second.path}. "
            "Keep one file per rank (move the other elsewhere) and run again."
        )
    shown = sorted(sets)
    listed = ", ".join(f"{name} (ranks {format_ranks(sets[name])})" for name in shown[:6])
    if len(shown) > 6:
        listed += f", and {len(shown) - 6} more"
    folders = {str(PurePosixPath(name).parent) for name in shown}
    pick = shown[0]
    hint = f"select one with --only {pick!r}"
    if len(folders) == len(shown) and "." not in folders:
        hint += f" or point at its folder ({directory / PurePosixPath(pick).parent})"
    raise SeveralDumpSets(
        f"{directory}: holds {len(shown)} dump sets for the same ranks (several incidents, "
        f"or copies): {listed}; rank {second.rank} is both {first.relative} and "
        f"{second.relative}. Analyse one set at a time: {hint}."
    )
