"""Write a loaded dump set as Parquet files, one per table, for pandas or DuckDB."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from frtrace.errors import InputError
from frtrace.load.tables import DumpSet

__all__ = ["export_parquet"]


def export_parquet(dumps: DumpSet, out: Path) -> list[tuple[Path, int]]:
    """Write entries/stacks/groups/pg_status/files.parquet under ``out``; return (path, rows)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{out}: cannot create the output directory ({exc.strerror}).") from exc
    entries = dumps.entries
    for i, field in enumerate(entries.schema):
        # Parquet cannot store a dictionary of lists (sizes, dtypes): write them plain
        if pa.types.is_dictionary(field.type) and pa.types.is_list(field.type.value_type):
            entries = entries.set_column(
                i, field.name, entries.column(i).cast(field.type.value_type)
            )
    tables = {
        "entries": entries,
        "stacks": dumps.stacks,
        "groups": dumps.groups,
        "pg_status": dumps.pg_status,
        "files": dumps.files,
    }
    written = []
    for name, table in tables.items():
        path = out / f"{name}.parquet"
        try:
            pq.write_table(table, path)
        except OSError as exc:
            raise InputError(f"{path}: cannot write ({exc}).") from exc
        written.append((path, table.num_rows))
    return written
