"""The files of a watched dump folder that belong to one stall (``frtrace.job.watch``'s
report): the dumps and stack sidecars the job wrote since the stall began, and every other file.
"""

from __future__ import annotations

from pathlib import Path

from frtrace.incident.layout import DUMP_PREFIX, STACKS_PREFIX, parse_dump_name

__all__ = ["stall_files"]


def stall_files(directory: Path, since_wall: float, *, skip: str) -> list[Path]:
    """The folder's files to analyse: dumps and stacks sidecars written since the stall began
    (``since_wall``, seconds since the epoch; an older one is another incident's), and every
    other file; hidden files and those named ``skip...`` (the watch's own reports) left out."""
    out: list[Path] = []
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith(".") or entry.name.startswith(skip):
            continue
        try:
            if not entry.is_file():
                continue
            fresh = entry.stat().st_mtime >= since_wall
        except OSError:
            continue
        ours = entry.name.startswith((DUMP_PREFIX, STACKS_PREFIX))
        if fresh or not (ours or parse_dump_name(entry.name) is not None):
            out.append(entry)
    return out
