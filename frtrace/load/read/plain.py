"""A file's entry columns on the way to their two destinations: an Arrow batch, or the
hand-over to the parent (``frtrace.load.handover.shipped``), with no Arrow on the way there.

The column passes (``frtrace.load.read.columns``, ``frtrace.load.read.entries``) give each column
as a
``Column`` (numpy values, where they are valid, a dictionary column's values) where it was read
on a fast path, or as an Arrow array where a careful path made one. ``to_arrow`` makes the Arrow
array (the load in one process, the wire, the cluster); ``to_plain`` lays it out as a writer's
file holds it (``Plain``: the nulls filled, the validity, the dictionary as Arrow lists it).
Measured on the 4,096-rank set, one worker's file: the Arrow columns built and read back (35
of them) were about 0.6 ms of a file's 2.9 ms.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa

from frtrace.load.read.arrays import masked_array
from frtrace.load.read.values import strings

__all__ = [
    "Col",
    "Column",
    "Plain",
    "PlainBatch",
    "Validity",
    "batch_of",
    "column_dtype",
    "of_arrow",
    "plain_text",
    "text_codes",
    "to_arrow",
    "to_plain",
]

# A column's validity in one dump: True (no null), False (all null), else a bool per row.
Validity = np.ndarray | bool


@dataclass(frozen=True, slots=True)
class Column:
    """One column as a fast path read it."""

    values: np.ndarray  # numbers, booleans, or a dictionary column's codes (-1: null)
    valid: np.ndarray | None  # a bool per row (None: every row); a null's value is any
    dictionary: list[Any] | None = None  # a dictionary column's values, as Arrow lists them
    table: pa.Array | None = None  # the same values as Arrow, where made already


# A column either way: read on a fast path, or made in Arrow by a careful one.
Col: TypeAlias = "Column | pa.Array"


@dataclass(frozen=True, slots=True)
class Plain:
    """One column as a writer's file holds it."""

    values: np.ndarray  # of ``column_dtype``: a null holds 0, or the dictionary's length
    valid: Validity
    dictionary: list[Any] | None  # a dictionary column's values


@dataclass(frozen=True, slots=True)
class PlainBatch:
    """A file's entry columns, each ``Plain``, in ``schema.ENTRIES``'s order."""

    columns: tuple[Plain, ...]
    num_rows: int


def text_codes(codes: np.ndarray, values: list[Any]) -> Column:
    """A text column from its codes (-1: null) into ``values`` (strings), as ``strings``
    converts them (lone surrogates spelled out: then the Arrow values are made here)."""
    if plain_text(values):
        return Column(codes, codes >= 0, values)
    table = strings(values)
    return Column(codes, codes >= 0, table.to_pylist(), table)


def plain_text(values: list[Any]) -> bool:
    """Whether dictionary values are all ASCII strings, stored as they are (else: text to
    clean, or values that are not text)."""
    return all(type(v) is str and v.isascii() for v in values)


def to_arrow(col: Col, type_: pa.DataType) -> pa.Array:
    """The column as an Arrow array of ``type_``."""
    if not isinstance(col, Column):
        return col
    if col.dictionary is None:
        return masked_array(col.values, col.valid, type_)
    table = col.table
    if table is None:
        value_type = type_.value_type
        table = (
            strings(col.dictionary)
            if value_type == pa.string()
            else pa.array(col.dictionary, type=value_type)
        )
    return pa.DictionaryArray.from_arrays(masked_array(col.values, col.valid, pa.int32()), table)


def to_plain(col: Col, dtype: np.dtype[Any]) -> Plain:
    """The column as a writer's file holds it: its values as ``dtype`` (``column_dtype`` of
    its type, which the caller looks up once: a type's hash spells it out each time)."""
    if not isinstance(col, Column):
        return of_arrow(col)
    n = len(col.values)
    fill = 0 if col.dictionary is None else len(col.dictionary)
    valid = col.valid
    if valid is None or not n:
        return Plain(_as(col.values, dtype), True, col.dictionary)
    count = int(np.count_nonzero(valid))
    if count == n:
        return Plain(_as(col.values, dtype), True, col.dictionary)
    if not count:
        return Plain(np.full(n, fill, dtype=dtype), False, col.dictionary)
    values = np.where(valid, col.values, fill).astype(dtype, copy=False)
    return Plain(values, np.ascontiguousarray(valid, dtype=np.bool_), col.dictionary)


def _as(values: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    if values.dtype == np.bool_:
        return np.ascontiguousarray(values).view(np.uint8)
    return np.ascontiguousarray(values, dtype=dtype)


@functools.lru_cache(maxsize=64)
def column_dtype(type_: pa.DataType) -> np.dtype[Any]:
    """How a column of ``type_`` is laid out in a writer's file."""
    if pa.types.is_boolean(type_):
        return np.dtype(np.uint8)
    if pa.types.is_dictionary(type_):
        type_ = type_.index_type
    dtype: np.dtype[Any] = np.dtype(type_.to_pandas_dtype())
    return dtype


def of_arrow(column: pa.Array) -> Plain:
    """An Arrow column as a writer's file holds it, read from its buffers (Arrow's
    fill_null, to_numpy and is_valid were most of what shipping a dump cost)."""
    dictionary = None
    if isinstance(column, pa.DictionaryArray):
        dictionary = column.dictionary.to_pylist()
        array: pa.Array = column.indices
        fill: Any = len(dictionary)
    else:
        array = column
        fill = 0
    n, offset, nulls = len(array), array.offset, array.null_count
    bitmap, data = array.buffers()[:2]
    if pa.types.is_boolean(array.type):
        values = _bits(data, offset, n).view(np.uint8)
    else:
        dtype = column_dtype(array.type)
        values = np.frombuffer(data, dtype, n, offset * dtype.itemsize) if n else np.zeros(0, dtype)
    ok: Validity = True
    if nulls == n and n:
        return Plain(np.full(n, fill, dtype=values.dtype), False, dictionary)
    if nulls:
        ok = _bits(bitmap, offset, n)
        values = np.where(ok, values, np.array(fill, dtype=values.dtype))
    return Plain(np.ascontiguousarray(values), ok, dictionary)


def _bits(buffer: pa.Buffer | None, offset: int, n: int) -> np.ndarray:
    """A bit per row (Arrow's, least significant first) as a bool per row."""
    if buffer is None or not n:
        return np.zeros(n, dtype=np.bool_)
    packed = np.frombuffer(buffer, dtype=np.uint8)
    bits = np.unpackbits(packed, count=offset + n, bitorder="little")[offset:]
    return bits.view(np.bool_)


def batch_of(plain: PlainBatch, schema: pa.Schema) -> pa.RecordBatch:
    """The Arrow batch of a ``PlainBatch`` (where a worker's file could not be written)."""
    arrays = [_arrow_of(p, f.type) for p, f in zip(plain.columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _arrow_of(plain: Plain, type_: pa.DataType) -> pa.Array:
    n = len(plain.values)
    valid: Sequence[bool] | np.ndarray | None
    if plain.valid is True:
        valid = None
    elif plain.valid is False:
        valid = np.zeros(n, dtype=np.bool_)
    else:
        valid = plain.valid
    values = plain.values.view(np.bool_) if pa.types.is_boolean(type_) else plain.values
    mask = None if valid is None else np.asarray(valid)
    return to_arrow(Column(values, mask, plain.dictionary), type_)
