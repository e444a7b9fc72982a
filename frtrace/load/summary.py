"""A one-screen summary of what was loaded: one row per dump file."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from tabulate import tabulate

from frtrace.load.tables import DumpSet
from frtrace.ranges import format_ranks

__all__ = ["render_summary"]


def render_summary(dumps: DumpSet, read_as: Mapping[Path, str] | None = None) -> str:
    """Files table plus totals and what is missing; ``read_as``: files that are no dump but
    that the analysis reads all the same (stack samples, logs), by what they are read as."""
    read_as = read_as or {}
    rows: list[tuple[object, ...]] = []
    for f in dumps.files.to_pylist():
        if f["loaded"]:
            rid = (
                f"{f['record_id_min']}-{f['record_id_max']}"
                if f["record_id_min"] is not None
                else "-"
            )
            rows.append(
                (
                    f["rank"],
                    f["encoding"],
                    f["format_version"] or "(2.2 list)",
                    f["backend"] or "-",
                    f["entry_count"],
                    rid,
                    "yes" if f["wrapped"] else "no",
                    len(f["problems"]),
                )
            )
        else:
            rows.append((f["rank"], "-", "-", "-", "-", "-", "-", "unreadable"))
    out = [
        f"{dumps.directory}: {len(dumps.loaded_ranks)} of {dumps.world.size} ranks loaded, "
        f"{dumps.entries.num_rows} entries, {dumps.stacks.num_rows} distinct stacks, "
        f"{_distinct(dumps.entries.column('group_name'))} process groups",
        "",
        tabulate(
            rows,
            headers=(
                "rank",
                "encoding",
                "version",
                "backend",
                "entries",
                "record ids",
                "wrapped",
                "problems",
            ),
        ),
        "",
    ]
    if dumps.missing_ranks:
        out.append(f"no dump for ranks {format_ranks(dumps.missing_ranks)}")
    for p in dumps.problems:
        out.append(f"{'error' if p.fatal else 'warning'}: {p.message}")
    others: dict[str, list[str]] = {}
    for s in dumps.skipped:
        what = read_as.get(Path(s.path))
        if what is None:
            out.append(f"skipped {s.path}: {s.reason}")
        else:
            others.setdefault(what, []).append(str(s.path))
    for what, paths in sorted(others.items()):
        shown = ", ".join(Path(p).name for p in paths[:4]) + (" …" if len(paths) > 4 else "")
        out.append(f"read as {what} by analyze, not as dumps: {len(paths)} file(s) ({shown})")
    return "\n".join(out).rstrip() + "\n"


def _distinct(column: pa.ChunkedArray) -> int:
    """Distinct non-null values of a dictionary column, from its codes (not 8M strings)."""
    values: set[object] = set()
    for chunk in column.chunks:
        used = pc.unique(chunk.indices).drop_null()
        values.update(chunk.dictionary.take(used).to_pylist())
    return len(values)
