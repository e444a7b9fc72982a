"""The dump set of a job that left no dump at all (every rank died or exited first, or it
records nothing ``frtrace collect`` could ask for: its stacks are then all there is)."""

from __future__ import annotations

from pathlib import Path

from frtrace.incident.discover import SideFile
from frtrace.load import schema
from frtrace.load.dumpset import DumpSet, WorldSize

__all__ = ["empty_dump_set"]


def empty_dump_set(
    directory: Path,
    world_size: int,
    source: str,
    side_files: tuple[SideFile, ...] | None = None,
    *,
    certain: bool = False,
) -> DumpSet:
    """No entries, every rank missing; what else the job left (logs, stacks: ``side_files``,
    as the discovery found them) is analysed against it. ``source``: where the world size was
    read; ``certain``: the job said it (its ranks' ``WORLD_SIZE``), else it is a guess."""
    return DumpSet(
        directory=directory,
        entries=schema.ENTRIES.empty_table(),
        stacks=schema.STACKS.empty_table(),
        groups=schema.GROUPS.empty_table(),
        pg_status=schema.PG_STATUS.empty_table(),
        files=schema.FILES.empty_table(),
        world=WorldSize(size=world_size, source=source, certain=certain),
        side_files=side_files,
    )
