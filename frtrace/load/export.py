"""Write a loaded dump set as Parquet files, one per table, for pandas or DuckDB.

Columns keep the types of ``frtrace.load.schema``, with one exception: Parquet cannot store a
dictionary whose values are lists, so the dictionary-encoded sizes and dtypes columns
(``input_sizes``, ``output_dtypes``, ...) and the groups' ``ranks`` are written as plain lists
of the same value type (``list<list<int64>>``, ``list<string>``, ``list<int32>``).
Dictionary-encoded strings stay dictionary-encoded (pandas reads them as Categorical, DuckDB as
VARCHAR).
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from frtrace.base.files import OutDir, open_out_dir, write_file
from frtrace.errors import InputError, UnsafePathError
from frtrace.load.dumpset import DumpSet
from frtrace.load.handover.spill import release_pages

__all__ = ["TABLES", "export_parquet", "parquet_schema"]

TABLES = ("entries", "stacks", "groups", "pg_status", "files")
# Rows written at a time (Parquet's row group; pyarrow's default size for one)
ROWS_PER_GROUP = 1 << 20


def parquet_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as it is written to Parquet: dictionaries of lists become plain lists."""
    return pa.schema([pa.field(f.name, _storable(f.type), f.nullable) for f in schema])


def _storable(type_: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(type_) and pa.types.is_list(type_.value_type):
        return type_.value_type
    return type_


def _decode_list_dictionaries(table: pa.Table) -> pa.Table:
    for i, field in enumerate(table.schema):
        plain = _storable(field.type)
        if plain is field.type:
            continue
        # dictionary_decode takes the values by index; a cast would need a kernel Arrow lacks
        chunks = [chunk.dictionary_decode() for chunk in table.column(i).chunks]
        table = table.set_column(i, field.name, pa.chunked_array(chunks, type=plain))
    return table


def export_parquet(dumps: DumpSet, out: Path) -> list[tuple[Path, int]]:
    """Write entries/stacks/groups/pg_status/files.parquet under ``out``; return (path, rows).
    ``out`` is made when missing and entered without following another user's link; each
    file is written to a new name and renamed into place (``frtrace/base/files.py``)."""
    try:
        folder = open_out_dir(out, private=False)
    except UnsafePathError as exc:
        raise InputError(f"{exc}; pass -o a directory of yours.") from None
    except OSError as exc:
        raise InputError(
            f"{out}: cannot create the output directory ({exc.strerror}); pass -o a directory "
            "you can write to."
        ) from exc
    tables = {
        "entries": dumps.entries,
        "stacks": dumps.stacks,
        "groups": dumps.groups,
        "pg_status": dumps.pg_status,
        "files": dumps.files,
    }
    written = []
    with folder:
        for name in TABLES:
            table = tables[name]
            path = out / f"{name}.parquet"
            try:
                _write(table, folder, f"{name}.parquet")
            except OSError as exc:
                raise InputError(f"{path}: cannot write ({exc}).") from exc
            written.append((path, table.num_rows))
    return written


def _write(table: pa.Table, folder: OutDir, name: str) -> None:
    """One row group at a time: the sizes of 65M entries, decoded from their dictionaries at
    once, would take tens of GB; a large set's mapped pages are dropped after each group."""

    def fill(dst: BinaryIO) -> None:
        with pq.ParquetWriter(dst, parquet_schema(table.schema)) as writer:
            for start in range(0, max(table.num_rows, 1), ROWS_PER_GROUP):
                writer.write_table(_decode_list_dictionaries(table.slice(start, ROWS_PER_GROUP)))
                release_pages()

    write_file(folder, name, fill, private=False)
