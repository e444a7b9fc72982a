"""A record batch as plain buffers, for the trip from a worker process to the parent.

Arrow pickles a batch column by column through its own reducers (~1.6 ms for one rank's
2,000 entries, both ends); this sends each column's buffers as they are and each dictionary
as its few values (~1.0 ms). The batch that arrives equals the batch that left. A batch
with no row need not travel at all: ``empty_batch`` builds it, once, where it arrives (a
cluster's task sends one table for its batch of dumps, and an empty one for each other dump:
rebuilding those was most of a 4,096-rank coordinator's CPU).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["Wire", "batch_from_wire", "batch_to_wire", "empty_batch"]

# One column: length, null count, offset, its buffers (a dictionary column: its indices'),
# and a dictionary column's values (None for any other column).
Wire = tuple[int, int, int, list[pa.Buffer | None], list[Any] | None]


def batch_to_wire(batch: pa.RecordBatch) -> tuple[pa.Schema, list[Wire]]:
    return batch.schema, [_column(c) for c in batch.columns]


def batch_from_wire(schema: pa.Schema, columns: list[Wire]) -> pa.RecordBatch:
    arrays = [_array(f.type, c) for f, c in zip(schema, columns, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _column(array: pa.Array) -> Wire:
    if isinstance(array, pa.DictionaryArray):
        indices = array.indices
        values = array.dictionary.to_pylist()
        return (len(indices), indices.null_count, indices.offset, indices.buffers(), values)
    if pa.types.is_nested(array.type):  # (none in the schema today: Arrow's own way)
        raise TypeError(f"no wire form for {array.type}")
    return (len(array), array.null_count, array.offset, array.buffers(), None)


def _array(type_: pa.DataType, column: Wire) -> pa.Array:
    length, nulls, offset, buffers, values = column
    if values is None:
        return pa.Array.from_buffers(type_, length, buffers, nulls, offset)
    indices = pa.Array.from_buffers(type_.index_type, length, buffers, nulls, offset)
    return pa.DictionaryArray.from_arrays(indices, pa.array(values, type=type_.value_type))


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    """A batch of ``schema`` with no row (the same object each time: batches are immutable;
    looked up by ``equals``, not by hash: a schema's hash costs ~40 us)."""
    for schema_, batch in _EMPTY:
        if schema_ is schema or schema_.equals(schema):
            return batch
    arrays = [
        pa.DictionaryArray.from_arrays(
            pa.array([], f.type.index_type), pa.array([], f.type.value_type)
        )
        if pa.types.is_dictionary(f.type)
        else pa.array([], f.type)
        for f in schema
    ]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    _EMPTY.append((schema, batch))
    return batch


_EMPTY: list[tuple[pa.Schema, pa.RecordBatch]] = []
