"""One file's entries -> the columns of ``schema.ENTRIES``: an Arrow record batch, or the
columns as a worker hands them over (``frtrace.load.read.plain``).

Knows the entry key names of every torch version (``seq_id`` / ``collective_seq_id``,
``time_created_us`` / ``_ns``, JSON's 0 for an unobserved time) and splits ``profiling_name``
and ``process_group`` into columns.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from frtrace.load import schema
from frtrace.load.read import native
from frtrace.load.read.arrays import masked_array
from frtrace.load.read.columns import SHAPE_KEYS, Columns, text_column
from frtrace.load.read.formats import split_profiling_name
from frtrace.load.read.interning import Stack, intern_coded_stacks, intern_stacks
from frtrace.load.read.plain import (
    Col,
    Column,
    PlainBatch,
    column_dtype,
    text_codes,
    to_arrow,
    to_plain,
)
from frtrace.load.read.values import first_seen_codes, label

__all__ = ["arrow_batch", "entries_batch", "entries_columns", "plain_batch"]

_ONLY_STR = frozenset((str,))
_ONLY_BOOL = frozenset((bool,))
_ONLY_TUPLE = frozenset((tuple,))
# Fields every entry of a 2.x dump has (``duration_ms`` only where the op's time was measured,
# the split sizes from FR 2.11 and only for all_to_all), read from all entries at once.
# Required: a key that may be missing because the column has another name in an older format.
_SPECS: tuple[native.Spec, ...] = (
    ("record_id", native.INT64, False),
    ("pg_id", native.INT64, False),
    ("process_group", native.PAIR, False),
    ("collective_seq_id", native.INT64, True),
    ("p2p_seq_id", native.INT64, False),
    ("op_id", native.INT64, False),
    ("profiling_name", native.TEXT, False),
    ("is_p2p", native.BOOL, False),
    ("time_created_ns", native.INT64, True),
    ("time_discovered_started_ns", native.INT64, False),
    ("time_discovered_completed_ns", native.INT64, False),
    ("state", native.TEXT, False),
    ("retired", native.BOOL, False),
    ("timeout_ms", native.INT64, False),
    ("thread_id", native.TEXT, False),
    ("thread_name", native.TEXT, False),
    ("frames", native.FRAMES, False),
    ("duration_ms", native.FLOAT64, False),
    ("input_split_sizes", native.NONE, False),
    ("output_split_sizes", native.NONE, False),
    (SHAPE_KEYS, native.SHAPES, True),
)
# Of those, what the Python pass reads at once where the C one does not (not ``duration_ms``
# nor the split sizes, which most entries lack: one missing key stops that pass)
_PREFETCH = frozenset(key for key, _, _ in _SPECS if isinstance(key, str)) - {
    "duration_ms",
    "input_split_sizes",
    "output_split_sizes",
}


def entries_batch(
    path: Path, rank: int, entries: Sequence[dict[str, Any]], from_json: bool
) -> tuple[pa.RecordBatch, tuple[Stack, ...], list[str]]:
    """The file's entries as an Arrow batch, its distinct stacks, its problems."""
    columns, stacks, problems = entries_columns(path, rank, entries, from_json)
    return arrow_batch(columns), stacks, problems


# The entries' types and their layout in a writer's file, looked up once (a field's type is
# a new object each time it is read, and its hash spells it out: ~0.1 ms of a file's 3).
_TYPES = tuple(f.type for f in schema.ENTRIES)
_DTYPES = tuple(column_dtype(t) for t in _TYPES)


def arrow_batch(columns: Sequence[Col]) -> pa.RecordBatch:
    """``entries_columns``'s columns as an Arrow batch."""
    arrays = [to_arrow(c, t) for c, t in zip(columns, _TYPES, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema.ENTRIES)


def plain_batch(columns: Sequence[Col]) -> PlainBatch:
    """``entries_columns``'s columns as a worker hands them over (no Arrow made for those
    read on a fast path)."""
    plain = [to_plain(c, d) for c, d in zip(columns, _DTYPES, strict=True)]
    return PlainBatch(tuple(plain), len(plain[0].values))


def entries_columns(
    path: Path, rank: int, entries: Sequence[dict[str, Any]], from_json: bool
) -> tuple[list[Col], tuple[Stack, ...], list[str]]:
    """The file's entries as the columns of ``schema.ENTRIES``, its distinct stacks, its
    problems."""
    cols = Columns(path, rank, entries)
    cols.scan(_SPECS, _PREFETCH)
    n = len(entries)

    name_codes, name_values, parts = _names(cols)
    backend = _decoded(name_codes, [p[0] for p in parts])
    op_arr = _decoded(name_codes, [p[1] for p in parts])
    src = _gather_ints(name_codes, [p[2] for p in parts])
    dst = _gather_ints(name_codes, [p[3] for p in parts])
    is_send_recv = np.array([p[1] in ("send", "recv") for p in parts] + [False])[name_codes]

    pg_ids = cols.take("pg_id", pa.int64())
    group_name, group_desc = _group_columns(cols, pg_ids)

    is_p2p = Column(_is_p2p(cols, is_send_recv), None)

    if n and "time_created_ns" not in entries[0] and "time_created_us" in entries[0]:
        us = [_us_to_ns(e.get("time_created_us")) for e in entries]
        created = cols.convert("time_created_ns", us, pa.int64())
    else:
        created = cols.take("time_created_ns", pa.int64())

    stack_ids, stacks = _stack_ids(cols)
    shapes = cols.shape_columns()
    (in_sizes, in_sig), (out_sizes, out_sig) = shapes[0], shapes[1]
    (in_dtypes, in_dt_sig), (out_dtypes, out_dt_sig) = shapes[2], shapes[3]

    columns = [
        Column(np.full(n, rank, dtype=np.int32), None),
        Column(np.arange(n, dtype=np.int32), None),
        cols.take("record_id", pa.int64()),
        pg_ids,
        group_name,
        group_desc,
        cols.take("collective_seq_id", pa.int64(), alt="seq_id"),
        cols.take("p2p_seq_id", pa.int64()),
        cols.take("op_id", pa.int64()),
        text_codes(name_codes, name_values),
        backend,
        op_arr,
        is_p2p,
        src,
        dst,
        in_sizes,
        out_sizes,
        in_dtypes,
        out_dtypes,
        cols.take("state", schema.TEXT),
        created,
        cols.take_time("time_discovered_started_ns", from_json),  # (JSON: 0 is "not observed")
        cols.take_time("time_discovered_completed_ns", from_json),
        cols.take("duration_ms", pa.float64()),
        cols.take("retired", pa.bool_()),
        cols.take("timeout_ms", pa.int64()),
        cols.take("thread_id", schema.TEXT),
        cols.take("thread_name", schema.TEXT),
        stack_ids,
        _sig_array(in_sig, in_sizes),
        _sig_array(out_sig, out_sizes),
        _sig_array(in_dt_sig, in_dtypes),
        _sig_array(out_dt_sig, out_dtypes),
        _splits(cols, "input_split_sizes"),
        _splits(cols, "output_split_sizes"),
    ]
    return columns, stacks, cols.problems


def _names(cols: Columns) -> tuple[np.ndarray, list[Any], list[Any]]:
    """Each entry's profiling name as codes into its distinct values, and each distinct
    name split once into (backend, op, src, dst); a missing name is one problem line."""
    scanned = cols.scanned.get("profiling_name")
    if scanned is not None:  # (every one a str, or None)
        codes, values = scanned
    else:
        names = cols.values("profiling_name")
        if not _ONLY_STR.issuperset(map(type, names)):
            names = [x if isinstance(x, str) else None for x in names]
        codes, values = _encode(names)
    bad = int((codes < 0).sum())
    if bad:
        cols.problems.append(f"{bad} entries have no profiling_name; their op is unknown")
    return codes, values, [split_profiling_name(v) for v in values]  # once per distinct name


def _stack_ids(cols: Columns) -> tuple[Col, tuple[Stack, ...]]:
    """Each entry's stack id into the file's distinct stacks, and those stacks."""
    scanned = cols.scanned.get("frames")
    if scanned is not None:
        frame_codes, frame_lists = scanned
        sids, stacks = intern_coded_stacks(frame_codes, frame_lists, cols.problems)
        return Column(sids, sids >= 0), stacks
    ids, stacks = intern_stacks(cols.values("frames"), cols.problems)
    return pa.array(ids, type=pa.int32()), stacks


# More peers than any group has: damage (a group has at most MAX_WORLD_SIZE members).
_MAX_SPLITS = 1 << 20


def _splits(cols: Columns, key: str) -> Col:
    """FR 2.11's per-peer split sizes (read by presence): a list of ints, else null."""
    # (not recorded before 2.11, nor for ops other than all_to_all: all None, nothing to do)
    if cols.scanned.get(key) is True:
        return _no_splits(len(cols.entries))
    values = cols.values(key)
    index: dict[Any, int] = {None: 0}
    codes = np.zeros(len(cols.entries), dtype=np.int32)
    recorded = values if values.count(None) < len(values) else []
    checked: dict[int, Any] = {}  # id(value) -> tuple or None: a shared value checked once
    bad = []
    for i, value in enumerate(recorded):
        if value is None:
            continue
        twin = checked.get(id(value), False)
        if twin is False:
            ok = isinstance(value, list | tuple) and len(value) <= _MAX_SPLITS
            ok = ok and all(type(x) is int and 0 <= x < 1 << 62 for x in value)
            twin = checked[id(value)] = tuple(value) if ok else None
        if twin is None:
            bad.append(i)
            continue
        codes[i] = index.setdefault(twin, len(index))
    if bad:
        cols.report(key, values, bad)
    distinct = [None if t is None else list(t) for t in index]
    return pa.DictionaryArray.from_arrays(
        masked_array(codes, codes != 0, pa.int32()), pa.array(distinct, type=schema.SPLITS)
    )


@functools.lru_cache(maxsize=4)
def _no_splits(n: int) -> Column:
    """A split sizes column of ``n`` entries, every one null (most files: the same length)."""
    codes = np.zeros(n, dtype=np.int32)
    return Column(codes, codes != 0, [None], pa.array([None], type=schema.SPLITS))


def _encode(values: Sequence[str | None]) -> tuple[np.ndarray, list[str]]:
    """(int32 codes with -1 for None, distinct strings) of a string list."""
    codes, distinct = first_seen_codes(values)
    return codes, [str(v) for v in distinct]


def _decoded(codes: np.ndarray, values: list[str | None]) -> Column:
    """Map each code to a (possibly repeated or None) string, dictionary-encoded."""
    inner, distinct = _encode(values)
    mapped = np.append(inner, -1)[codes]  # code -1 picks the appended -1 (null)
    return text_codes(mapped, distinct)


def _gather_ints(codes: np.ndarray, values: list[int | None]) -> Column:
    table = np.array([-1 if v is None else v for v in values] + [-1], dtype=np.int32)
    picked = table[codes]
    return Column(picked, picked >= 0)


def _group_columns(cols: Columns, pg_id_column: Col) -> tuple[Col, Col]:
    """group_name, group_desc from ``process_group`` (2.x), else ``str(pg_id)`` (1.x, 2.2)."""
    problems = cols.problems
    coded = cols.scanned.get("process_group")  # (pairs of str, every entry has one)
    groups: Sequence[Any] = () if coded is not None else cols.values("process_group")
    if coded is None:
        if _ONLY_TUPLE.issuperset(map(type, groups)):  # a pickle's (name, desc) pairs
            twins = groups
        else:
            twins = [
                g if g.__class__ is tuple else (tuple(g) if g.__class__ is list else None)
                for g in groups
            ]
        if None not in twins:
            with contextlib.suppress(TypeError):  # (a list inside one: the careful loop below)
                coded = first_seen_codes(twins)
    if coded is not None:  # every entry names its group: once per distinct pair
        codes, distinct = coded
        names = [label(t[0]) if len(t) >= 1 else None for t in distinct]
        descs = [label(t[1]) if len(t) > 1 else None for t in distinct]
        unnamed = [i for i, name in enumerate(names) if name is None]
        if unnamed:
            bad = int(np.isin(codes, unnamed).sum())
            problems.append(f"{bad} entries have a malformed process_group; their group is unknown")
        return _decoded(codes, names), _decoded(codes, descs)
    name: list[str | None] = []
    desc: list[str | None] = []
    bad = 0
    pg_ids = to_arrow(pg_id_column, pa.int64()).to_pylist()
    for grp, pg_id in zip(groups, pg_ids, strict=True):
        if isinstance(grp, list | tuple) and len(grp) >= 1:
            name.append(label(grp[0]))
            desc.append(label(grp[1]) if len(grp) > 1 else None)
            bad += name[-1] is None
        else:  # before torch 2.4 only the per-process pg_id identifies the group
            name.append(None if pg_id is None else str(pg_id))
            desc.append(None)
    if bad:
        problems.append(f"{bad} entries have a malformed process_group; their group is unknown")
    return text_column("group_name", name), text_column("group_desc", desc)


def _sig_array(sig: np.ndarray, values: Column) -> Column:
    """The fingerprints, null where the sizes or dtypes are."""
    return Column(sig, values.valid)


def _is_p2p(cols: Columns, is_send_recv: np.ndarray) -> np.ndarray:
    """Each entry's ``is_p2p`` (recorded for every entry since 2.4); before 2.4, or where a
    value is missing or damaged, whether its op is a send or recv by name."""
    scanned = cols.scanned.get("is_p2p")
    if scanned is not None and scanned[1] is None:  # (read by the C pass, every value a bool)
        flags: np.ndarray = scanned[0]
        return flags
    raw = cols.values("is_p2p")
    if _ONLY_BOOL.issuperset(map(type, raw)):
        return np.fromiter(raw, dtype=bool, count=len(raw))
    return np.array(
        [v if isinstance(v, bool) else bool(o) for v, o in zip(raw, is_send_recv, strict=True)],
        dtype=bool,
    )


def _us_to_ns(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value * 1000
    return value
