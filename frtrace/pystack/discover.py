"""Find the Python stack files in a dump directory and read them: a ``StackSet``.

Stack files live next to the dumps. A file is taken as a stack sample when its name says so
(``stacks_rank_5.json`` from ``frtrace.recorder``, ``pyspy_rank_5.txt`` / ``.json``,
``py-spy-5.txt``, ``traceback_rank_5.txt``, ``dump_traceback_5.txt``,
``faulthandler_rank_5.log``), or when a file whose name ends in a rank number reads as one
(``rank5.txt`` holding ``py-spy dump`` output). The rank comes from the file (the sidecar's
own ``rank``) or from the digits that end its name.

A file named like a stack file that cannot be read costs that file: one line in
``StackSet.problems``, never the analysis. Several samples of one rank are all kept; the
one the analysis reads (``StackSet.by_rank``) is the recorder's sidecar first (it knows the
dump time and the trigger), then py-spy ``--json``, py-spy text, and faulthandler or
``dump_traceback`` text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from frtrace.pystack.common import MAX_FILE_BYTES, StackFileError, rank_from_filename
from frtrace.pystack.model import ProcessStacks, Source
from frtrace.pystack.parse import detect_format, read_stack_file

__all__ = [
    "STACK_NAME",
    "StackProblem",
    "StackSet",
    "discover_stacks",
    "is_stack_file_name",
    "load_stacks",
]

# A name that says "this is a Python stack sample" (the rank follows somewhere after).
STACK_NAME = re.compile(
    r"^(?:stacks?|py[-_]?spy|tracebacks?|dump[-_]?traceback|faulthandler)(?:[-_.]|\d|$)",
    re.IGNORECASE,
)
# The reader's preference when a rank has several samples: lower first.
PREFERENCE: Mapping[Source, int] = {
    "recorder": 0,
    "py-spy-json": 1,
    "py-spy-text": 2,
    "dump_traceback": 3,
    "faulthandler": 4,
}
_SNIFF_BYTES = 4096  # enough to tell a stack file from a dump by its first lines
_TEXT_SUFFIXES = frozenset({"", ".txt", ".json", ".log", ".out", ".err", ".stacks"})


def is_stack_file_name(name: str) -> bool:
    """Does the file's name say it holds Python stacks (``pyspy_rank_5.txt``)?"""
    return bool(STACK_NAME.match(name))


@dataclass(frozen=True, slots=True, kw_only=True)
class StackProblem:
    """A stack file that could not be used: one line naming it."""

    path: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSet:
    """Every stack sample read from one directory, and the one per rank the analysis uses."""

    directory: str
    samples: tuple[ProcessStacks, ...]  # every file read, in path order
    by_rank: Mapping[int, ProcessStacks] = field(default_factory=dict)  # the preferred one
    problems: tuple[StackProblem, ...] = ()
    unranked: tuple[str, ...] = ()  # files read but with no rank (not used)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted(self.by_rank))

    def taken_at_ns(self, rank: int) -> int | None:
        """When the rank's sample was taken (the recorder's dump time), if known."""
        s = self.by_rank.get(rank)
        return None if s is None else s.taken_at_ns

    def trigger(self, rank: int) -> str | None:
        """What made the rank write its sample (``signal: SIGUSR1``), if known."""
        s = self.by_rank.get(rank)
        return None if s is None else s.trigger

    def __bool__(self) -> bool:
        return bool(self.by_rank)


def _looks_like_stacks(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError:
        return False
    if not head or head[:1] == b"\x80":  # a pickle: a dump
        return False
    fmt = detect_format(head)
    if fmt == "recorder":  # any JSON object: only the sidecar's own format name counts
        return b'"frtrace-stacks"' in head
    if fmt == "py-spy-json":  # any JSON list: only py-spy's thread keys count (not a dump)
        return b'"owns_gil"' in head or b'"os_thread_id"' in head
    return fmt is not None


def discover_stacks(directory: Path) -> list[Path]:
    """Files under ``directory`` that are stack samples, by name or by content."""
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or not name.isprintable():
                continue
            path = Path(root) / name
            if not path.is_file():  # never open a FIFO (torch's <stem><rank>.pipe)
                continue
            if is_stack_file_name(name):
                found.append(path)
                continue
            suffix = os.path.splitext(name)[1].lower()
            if suffix not in _TEXT_SUFFIXES or rank_from_filename(name) is None:
                continue
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if 0 < size <= MAX_FILE_BYTES and _looks_like_stacks(path):
                found.append(path)
    return found


def load_stacks(directory: Path) -> StackSet:
    """Read every stack file under ``directory``; unreadable ones become problems."""
    samples: list[ProcessStacks] = []
    problems: list[StackProblem] = []
    unranked: list[str] = []
    if directory.is_dir():
        for path in discover_stacks(directory):
            try:
                sample = read_stack_file(path)
            except StackFileError as exc:
                rel = str(path.relative_to(directory))  # reports name no absolute paths
                message = str(exc).replace(str(path), rel, 1)
                problems.append(StackProblem(path=rel, message=message))
                continue
            samples.append(sample)
            if sample.rank is None:
                unranked.append(str(path))
    by_rank: dict[int, ProcessStacks] = {}
    for s in samples:
        if s.rank is None:
            continue
        have = by_rank.get(s.rank)
        if have is None or PREFERENCE[s.source] < PREFERENCE[have.source]:
            by_rank[s.rank] = s
    return StackSet(
        directory=str(directory),
        samples=tuple(samples),
        by_rank=dict(sorted(by_rank.items())),
        problems=tuple(problems),
        unranked=tuple(unranked),
    )
