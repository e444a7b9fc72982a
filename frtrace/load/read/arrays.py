"""Arrow arrays made from numpy buffers, and the distinct values of dictionary columns.

A file's columns are read into numpy buffers (``frtrace.load.read.native``); these become Arrow
arrays without a copy of their values (``masked_array``: Arrow's own masked conversion goes
through pandas). The distinct sizes and dtypes of a file are converted and fingerprinted once
per worker process (``distinct_values``): a job's files repeat the same few.
"""

from __future__ import annotations

import zlib
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "MAX_DIMS",
    "MAX_TENSORS",
    "codes_array",
    "distinct_values",
    "masked_array",
    "validity_bitmap",
]

# Sizes/dtypes values with more tensors, or shapes with more dimensions, are damage.
MAX_TENSORS = 1 << 16
MAX_DIMS = 64


def masked_array(values: np.ndarray, valid: np.ndarray | None, type_: pa.DataType) -> pa.Array:
    """The Arrow array of ``values`` (numbers of ``type_``, or booleans), null where ``valid``
    is False (None: nowhere), built from their buffers (the values are not copied)."""
    n = len(values)
    bitmap, nulls = validity_bitmap(valid, n)
    if pa.types.is_boolean(type_):
        data = pa.py_buffer(np.packbits(np.asarray(values, dtype=np.bool_), bitorder="little"))
    else:
        data = pa.py_buffer(np.ascontiguousarray(values, dtype=type_.to_pandas_dtype()))
    return pa.Array.from_buffers(type_, n, [bitmap, data], null_count=nulls)


def codes_array(codes: np.ndarray) -> pa.Array:
    """int32 dictionary indices, null where a code is negative (no value)."""
    return masked_array(codes, codes >= 0, pa.int32())


def validity_bitmap(valid: np.ndarray | None, n: int) -> tuple[pa.Buffer | None, int]:
    """Arrow's validity bitmap of ``valid`` (a bool per row; None: all valid) and the null
    count; no bitmap where nothing is null."""
    if valid is None:
        return None, 0
    nulls = n - int(np.count_nonzero(valid))
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(np.asarray(valid, dtype=np.bool_), bitorder="little")), nulls


# The distinct sizes and dtypes of a file, converted, by their twins: the files of a job repeat
# the same few (a worker reads hundreds of files), so each is converted and fingerprinted once.
_DISTINCT: dict[tuple[Any, ...], tuple[pa.Array, np.ndarray, list[Any]]] = {}
_DISTINCT_MAX = 1024
# (twins with more leaves are converted every time, not kept)
_DISTINCT_MAX_LEAVES = 4096


# Each type's key in ``_DISTINCT`` by the type object's identity (the object kept, so that
# its id is never another's): a type's own hash spells it out, every time (~40 us a file)
_TYPE_KEYS: dict[int, tuple[pa.DataType, str]] = {}


def _type_key(type_: pa.DataType) -> str:
    known = _TYPE_KEYS.get(id(type_))
    if known is not None and known[0] is type_:
        return known[1]
    if len(_TYPE_KEYS) >= _DISTINCT_MAX:
        _TYPE_KEYS.clear()
    key = str(type_)
    _TYPE_KEYS[id(type_)] = (type_, key)
    return key


def distinct_values(
    distinct: tuple[Any, ...], type_: pa.DataType, checked: bool
) -> tuple[pa.Array, np.ndarray, list[Any]]:
    """A dictionary column's values (Arrow), each one's fingerprint (CRC-32 of its repr) and
    the values as Arrow lists them, from their hashable twins. Raises ValueError (or Arrow's
    errors) for a value no op has, unless the twins were ``checked`` one by one already. Only
    checked twins are kept for the next file (exact ints and text: equal as keys exactly when
    their reprs are; unchecked, 1, 1.0 and True would be one key)."""
    key = (_type_key(type_), *distinct)
    known = _DISTINCT.get(key) if checked else None
    if known is not None:
        return known
    nested = pa.types.is_list(type_.value_type)
    if not checked:
        shapes = list(filter(None, distinct))
        if max(map(len, shapes), default=0) > MAX_TENSORS or (
            nested and max(map(len, chain.from_iterable(shapes)), default=0) > MAX_DIMS
        ):
            raise ValueError("more tensors or dimensions than any op has")
    table = pa.array(distinct, type=type_)  # the twins: tuples convert like the lists they are
    if not checked:
        inner = table.flatten()
        if inner.null_count or (nested and inner.flatten().null_count):
            raise ValueError("a None inside a value")  # [[None]]: Arrow takes it as null
    crcs = np.fromiter(
        (zlib.crc32(repr(t).encode()) for t in distinct), dtype=np.uint32, count=len(distinct)
    )
    listed = table.to_pylist()
    leaves = len(table.flatten()) + (len(table.flatten().flatten()) if nested else 0)
    if checked and leaves <= _DISTINCT_MAX_LEAVES:
        if len(_DISTINCT) >= _DISTINCT_MAX:
            _DISTINCT.clear()
        crcs.flags.writeable = False  # (shared by every file with the same values)
        _DISTINCT[key] = (table, crcs, listed)
    return table, crcs, listed
