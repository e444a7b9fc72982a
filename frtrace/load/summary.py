"""A one-screen summary of what was loaded: one row per dump file."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from tabulate import tabulate

from frtrace.base.ranges import format_ranks
from frtrace.load.dumpset import DumpSet

__all__ = ["render_summary"]


# What analyze reads each kind of side file as (``frtrace.incident.discover.SideFile``).
_READ_AS = {
    "stacks": "Python stacks",
    "log": "logs and error files",
    "error_file": "logs and error files",
    "manifest": "collect's manifests (hosts, pids, dump times)",
    "ras": "NCCL RAS's answers (hosts, pids, dead ranks, op counts)",
}


def render_summary(dumps: DumpSet) -> str:
    """Files table plus totals and what is missing; then the files that are no dump but that
    the analysis reads all the same (stack samples, logs: the one discovery's side files), and
    those skipped."""
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
            disable_numparse=[2],  # (a version "2.10" is not the number 2.1)
        ),
        "",
    ]
    if dumps.missing_ranks:
        out.append(f"no dump for ranks {format_ranks(dumps.missing_ranks)}")
    for p in dumps.problems:
        out.append(f"{'error' if p.fatal else 'warning'}: {p.message}")
    for s in dumps.skipped:
        out.append(f"skipped {s.path}: {s.reason}")
    others: dict[str, list[str]] = {}
    for f in dumps.side_files or ():
        others.setdefault(_READ_AS.get(f.kind, f.kind), []).append(f.relative)
    for what, paths in sorted(others.items()):
        shown = ", ".join(paths[:4]) + (" …" if len(paths) > 4 else "")
        out.append(f"read as {what} by analyze, not as dumps: {len(paths)} file(s) ({shown})")
    return "\n".join(out).rstrip() + "\n"


def _distinct(column: pa.ChunkedArray) -> int:
    """Distinct non-null values of a dictionary column, from its codes (not 8M strings)."""
    values: set[object] = set()
    for chunk in column.chunks:
        used = pc.unique(chunk.indices).drop_null()
        values.update(chunk.dictionary.take(used).to_pylist())
    return len(values)
