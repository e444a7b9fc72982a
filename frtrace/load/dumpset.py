"""The loaded dump set: every dump of one job as Arrow tables (``DumpSet``), and the job's
world size with how it was worked out (``WorldSize``); of a restarted job's folder, the
attempts it holds besides the one loaded (``Restarts``). What ``load_dumps`` returns and every
later stage reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from frtrace.incident.layout import SideFile, SkippedFile
from frtrace.incident.problems import LoadProblem
from frtrace.load.read.interning import Stack

if TYPE_CHECKING:
    from frtrace.load.workers.frontier import Frontier

__all__ = ["DumpSet", "Restarts", "WorldSize"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorldSize:
    """How many ranks the job had, and how that was worked out."""

    size: int
    source: str  # e.g. "pg_config of the default group", "highest rank in the file names"
    certain: bool  # False when a missing highest rank could go unnoticed


@dataclass(frozen=True, slots=True, kw_only=True)
class DumpSet:
    """Every dump of one job, as tables (see ``frtrace.load.schema`` for the columns)."""

    directory: Path
    entries: pa.Table
    stacks: pa.Table
    groups: pa.Table
    pg_status: pa.Table
    files: pa.Table
    world: WorldSize
    problems: tuple[LoadProblem, ...] = ()
    skipped: tuple[SkippedFile, ...] = ()
    side_files: tuple[SideFile, ...] | None = None  # the discovery's (None: not listed)
    # a restarted job's other attempts (None: one attempt; its whole set is not repeated)
    restarts: Restarts | None = field(default=None, repr=False)
    _frames: dict[int, Stack] = field(default_factory=dict, repr=False)
    # where a cluster's load cut the settled history (None: every entry read)
    window: Frontier | None = field(default=None, repr=False)
    # Worked out once (the analysis asks per rank, and a job can have 10^5 ranks).
    _loaded: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _missing: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        loaded = self.files.filter(self.files.column("loaded")).column("rank").to_pylist()
        object.__setattr__(self, "_loaded", tuple(sorted(loaded)))
        present = set(self.files.column("rank").to_pylist())
        missing = tuple(r for r in range(self.world.size) if r not in present)
        object.__setattr__(self, "_missing", missing)

    @property
    def loaded_ranks(self) -> tuple[int, ...]:
        """Ranks whose dump was read."""
        return self._loaded

    @property
    def unreadable_ranks(self) -> tuple[int, ...]:
        """Ranks that have a file which could not be read."""
        return tuple(sorted({p.rank for p in self.problems if p.fatal}))

    @property
    def missing_ranks(self) -> tuple[int, ...]:
        """Ranks of the job with no file at all."""
        return self._missing

    def stack(self, stack_id: int | None) -> Stack:
        """The frames of an interned stack (innermost first); () for None."""
        if stack_id is None:
            return ()
        return self._frames.get(stack_id, ())


@dataclass(frozen=True, slots=True, kw_only=True)
class Restarts:
    """A folder that holds several attempts of a job (``frtrace.load.lifetimes``): the attempt
    a ``DumpSet`` is of, the others, and what each other one's own dump set is cut from
    (``frtrace.load.restarts``)."""

    attempt: int  # the attempt the dump set is of
    others: tuple[int, ...]  # every other attempt with a dump or an attempt_<N> folder, ascending
    whole: DumpSet  # every loaded rank, before one attempt's were kept
    lifetimes: tuple[tuple[int, tuple[int, ...]], ...]  # (attempt, its ranks) of each lifetime
    side_files: tuple[SideFile, ...]  # every attempt's side files
    # whether the attempt_<N> folders' numbers are the lifetimes' (the newest folder's is the
    # newest lifetime's, and every older lifetime has a number of its own): only then is a
    # folder's content the evidence of the lifetime of its number
    folders: bool
    # the attempts that died in init (their ranks' dumps record no op: ``frtrace.load.inits``)
    inits: tuple[int, ...] = ()
