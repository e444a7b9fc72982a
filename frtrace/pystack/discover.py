"""Read the Python stack files of a dump directory (or archive): a ``StackSet``.

Stack files live next to the dumps; which files they are is the one discovery's
(``frtrace.incident.layout``, the same for ``summary`` and ``analyze``): a file whose
name says so (``stacks_rank_5.json`` from ``frtrace.recorder``, ``pyspy_rank_5.txt`` / ``.json``,
``py-spy-5.txt``, ``traceback_rank_5.txt``, ``dump_traceback_5.txt``,
``faulthandler_rank_5.log``), or a file whose name ends in a rank number and that reads as one
(``rank5.txt`` holding ``py-spy dump`` output). An archive's are read from memory. The rank
comes from the file (the sidecar's own ``rank``) or from the digits that end its name.

A file named like a stack file that cannot be read costs that file: one line in
``StackSet.problems``, never the analysis. Several samples of one rank are all kept; the
one the analysis reads (``StackSet.by_rank``) is the recorder's sidecar first (it knows the
dump time and the trigger), then py-spy ``--json``, py-spy text, and faulthandler or
``dump_traceback`` text; among samples of one kind, the latest where they say when (torch's
debug server's periodic dumps, ``stacks_<time>.txt``: every rank's stacks in one file,
:mod:`frtrace.pystack.periodic`), else the first in path order (per-host folders:
``host-a/`` before ``host-b/``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from frtrace.incident.layout import STACK_FILE_NAME, SideFile, side_files
from frtrace.job.env import TERM_STACKS_PREFIX  # (the recorder's stacks on SIGTERM)
from frtrace.pystack.common import StackFileError
from frtrace.pystack.model import ProcessStacks, Source
from frtrace.pystack.parse import read_stack_bytes, read_stack_file, sniff
from frtrace.pystack.periodic import is_periodic_name, parse_periodic

__all__ = [
    "STACK_NAME",
    "StackProblem",
    "StackSet",
    "discover_stacks",
    "is_stack_file_name",
    "load_stacks",
]

# A name that says "this is a Python stack sample" (the rank follows somewhere after).
STACK_NAME = STACK_FILE_NAME
# The reader's preference when a rank has several samples: lower first.
PREFERENCE: Mapping[Source, int] = {
    "recorder": 0,
    "py-spy-json": 1,
    "py-spy-text": 2,
    "dump_traceback": 3,
    "faulthandler": 4,
}


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
        """When the rank's dump was written, where its sample says (the recorder's sidecar is
        written with the dump; a periodic stack sample's time is not a dump's)."""
        s = self.by_rank.get(rank)
        return None if s is None or s.source != "recorder" else s.taken_at_ns

    def trigger(self, rank: int) -> str | None:
        """What made the rank write its sample (``signal: SIGUSR1``), if known."""
        s = self.by_rank.get(rank)
        return None if s is None else s.trigger

    def __bool__(self) -> bool:
        return bool(self.by_rank)


def discover_stacks(directory: Path) -> list[Path]:
    """Files under ``directory`` that are stack samples, by name or by content."""
    return [f.path for f in side_files(directory) if f.kind == "stacks"]


def _read(file: SideFile) -> list[ProcessStacks]:
    """The samples in one file: one, or every rank's of a debug server's periodic dump."""
    if file.refused is not None:
        raise StackFileError(str(file.path), file.refused)
    # (its name as listed: a compressed file's without the suffix, stacks_<time>.txt of .gz)
    name = PurePosixPath(file.relative).name or file.path.name
    if is_periodic_name(name):
        data = file.data if file.data is not None else read_stack_bytes(file.path)
        return parse_periodic(data, str(file.path.with_name(name)))
    if file.data is not None:  # (an archive's member, a compressed file's content)
        return [sniff(str(file.path), file.data)]
    return [read_stack_file(file.path)]


def _preferred(s: ProcessStacks, have: ProcessStacks | None) -> bool:
    """Whether ``s`` is the rank's sample to read rather than ``have``: the preferred
    source, then (periodic samples of one kind) the latest."""
    if have is None or PREFERENCE[s.source] < PREFERENCE[have.source]:
        return True
    return PREFERENCE[s.source] == PREFERENCE[have.source] and (s.taken_at_ns or 0) > (
        have.taken_at_ns or 0
    )


def load_stacks(directory: Path, files: Sequence[SideFile] | None = None) -> StackSet:
    """Read every stack file of ``directory``: ``files``, the side files its discovery found
    (``Discovery.side_files``; the others are not stacks), else the directory is listed.
    Unreadable ones become problems."""
    samples: list[ProcessStacks] = []
    problems: list[StackProblem] = []
    unranked: list[str] = []
    for file in side_files(directory) if files is None else files:
        if file.kind != "stacks":
            continue
        try:
            read = _read(file)
        except StackFileError as exc:
            if exc.problem == "empty file" and file.path.name.startswith(TERM_STACKS_PREFIX):
                continue  # (the recorder's, armed for SIGTERM: the rank ended without one)
            rel = file.relative  # reports name no absolute paths
            message = str(exc).replace(str(file.path), rel, 1)
            problems.append(StackProblem(path=rel, message=message))
            continue
        samples.extend(read)
        if any(sample.rank is None for sample in read):
            unranked.append(str(file.path))
    by_rank: dict[int, ProcessStacks] = {}
    for s in samples:
        if s.rank is not None and _preferred(s, by_rank.get(s.rank)):
            by_rank[s.rank] = s
    return StackSet(
        directory=str(directory),
        samples=tuple(samples),
        by_rank=dict(sorted(by_rank.items())),
        problems=tuple(problems),
        unranked=tuple(unranked),
    )
