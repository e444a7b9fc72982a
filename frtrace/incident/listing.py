"""What a folder or an archive holds, file by file, before any set is formed: the dump
candidates (by name, each one rank's), the side files and what was skipped. Written by the
folder walk (``incident.discover``) and the archive reader (``incident.archive``) alike."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from frtrace.incident.budget import MAX_WORLD_SIZE  # (every reader's limit)
from frtrace.incident.layout import SideFile, SkippedFile

__all__ = ["MAX_WORLD_SIZE", "Candidate", "Listing"]


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

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its values in order (a slots dataclass's own way looks up its fields for
        every object: half of sending a large set's tasks to a cluster), its path as text (a
        path pickles as its parts: ten times slower)."""
        values = [getattr(self, name) for name in _CANDIDATE_FIELDS]
        values[_PATH] = str(self.path)
        return (_candidate, tuple(values))


def _candidate(*values: Any) -> Candidate:
    named = dict(zip(_CANDIDATE_FIELDS, values, strict=True))
    named["path"] = Path(named["path"])
    return Candidate(**named)


_CANDIDATE_FIELDS = tuple(f.name for f in fields(Candidate))
_PATH = _CANDIDATE_FIELDS.index("path")


@dataclass(frozen=True, slots=True, kw_only=True)
class Listing:
    """Every file under a directory or in an archive, each in one place: the dump candidates,
    the side files the analysis reads, and what was skipped (and why); in walk order."""

    candidates: tuple[Candidate, ...]
    side_files: tuple[SideFile, ...]
    skipped: tuple[SkippedFile, ...]
