"""The loader's fast paths give exactly what its careful, value-by-value paths give.

The fast paths (stacks interned by frame identity, the four sizes/dtypes columns keyed
together) exist only for speed; on every input they either produce the same columns as the
careful paths or step aside for them. Checked on every committed fixture and on hand-made
entries with the odd values real and damaged dumps hold.
"""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from frtrace.load import schema
from frtrace.load.read import entries as load_entries
from frtrace.load.read.arrays import MAX_DIMS, MAX_TENSORS, distinct_values
from frtrace.load.read.columns import Columns
from frtrace.load.read.entries import entries_batch
from frtrace.load.read.interning import StackInterner, intern_stacks
from frtrace.load.read.plain import Column, column_dtype, to_arrow, to_plain

FIXTURES = Path(__file__).parents[2] / "fixtures"
SHAPE_KEYS = ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes")
SHAPE_TYPES = (schema.SIZES, schema.SIZES, schema.DTYPES, schema.DTYPES)
SHAPE_DICTS = (schema.SIZES_DICT, schema.SIZES_DICT, schema.DTYPES_DICT, schema.DTYPES_DICT)


def _fixture_entries() -> list[tuple[str, list[dict[str, Any]]]]:
    out = []
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file() or path.suffix in (".md", ".txt") or path.name == "MANIFEST.json":
            continue
        if "golden" in path.parts or "pystack" in path.parts:  # reports, stack samples
            continue
        raw = path.read_bytes()
        try:
            payload = json.loads(raw) if raw[:1] in (b"{", b"[") else pickle.loads(raw)
        except Exception:  # a deliberately damaged fixture
            continue
        entries = payload.get("entries") if isinstance(payload, dict) else payload
        if isinstance(entries, list) and entries:
            dicts = [e for e in entries if isinstance(e, dict)]
            out.append((str(path.relative_to(FIXTURES)), dicts))
    return out


FIXTURE_ENTRIES = _fixture_entries()


def _careful_shapes(entries: list[dict[str, Any]]) -> list[tuple[Column, list[int]]]:
    cols = Columns(Path("x"), 0, entries)
    out = [cols.take_repeated(k, t) for k, t in zip(SHAPE_KEYS, SHAPE_TYPES, strict=True)]
    return [(a, s.tolist()) for a, s in out]


def _fast_shapes(entries: list[dict[str, Any]]) -> list[tuple[Column, list[int]]]:
    cols = Columns(Path("x"), 0, entries)
    return [(a, s.tolist()) for a, s in cols.shape_columns()]


def _same(a: list[tuple[Column, list[int]]], b: list[tuple[Column, list[int]]]) -> None:
    """The same Arrow columns, the same columns as a worker hands them over, the same
    fingerprints."""
    for (col_a, sig_a), (col_b, sig_b), type_ in zip(a, b, SHAPE_DICTS, strict=True):
        arr_a, arr_b = to_arrow(col_a, type_), to_arrow(col_b, type_)
        assert arr_a.equals(arr_b)
        assert arr_a.dictionary.equals(arr_b.dictionary)
        dtype = column_dtype(type_)
        plain_a, plain_b = to_plain(col_a, dtype), to_plain(col_b, dtype)
        assert plain_a.values.tobytes() == plain_b.values.tobytes()
        assert plain_a.dictionary == plain_b.dictionary == arr_a.dictionary.to_pylist()
        assert sig_a == sig_b


def test_fixtures_cover_many_files() -> None:
    assert len(FIXTURE_ENTRIES) >= 50


@pytest.mark.parametrize(("name", "entries"), FIXTURE_ENTRIES, ids=[n for n, _ in FIXTURE_ENTRIES])
def test_shapes_fast_equals_careful_on_fixtures(name: str, entries: list[dict[str, Any]]) -> None:
    _same(_fast_shapes(entries), _careful_shapes(entries))


def _entry(**kw: Any) -> dict[str, Any]:
    e: dict[str, Any] = {
        "input_sizes": [[4, 8]],
        "output_sizes": [[4, 8]],
        "input_dtypes": ["Float"],
        "output_dtypes": ["Float"],
    }
    e.update(kw)
    return e


def _deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


_SHARED = [4, 8]  # one list object in two places, as the pickle memo makes it

ODD = {
    "dtype as a string": _entry(input_dtypes="Float"),
    "sizes missing": {"input_dtypes": ["Float"], "output_dtypes": ["Float"]},
    "sizes None": _entry(output_sizes=None),
    "a None inside": _entry(input_sizes=[[None]]),
    "a float dimension": _entry(input_sizes=[[4.0, 8]]),
    "a bool dimension": _entry(input_sizes=[[True]]),
    "a string dimension": _entry(input_sizes=[["4"]]),
    "a flat sizes list": _entry(input_sizes=[4, 8]),
    "tuples": _entry(input_sizes=((4, 8),), input_dtypes=("Float",)),
    "a huge dimension": _entry(output_sizes=[[2**70]]),
    "a lone surrogate dtype": _entry(input_dtypes=["\udcff"]),
    "a non-string dtype": _entry(output_dtypes=[3]),
    "empty lists": _entry(input_sizes=[], output_sizes=[], input_dtypes=[], output_dtypes=[]),
    "too many tensors": _entry(input_sizes=[[1]] * (MAX_TENSORS + 1)),
    "too many dimensions": _entry(input_sizes=[[1] * (MAX_DIMS + 1)]),
    "a set of dimensions": _entry(input_sizes=[{4, 8}]),
    "a dict of dimensions": _entry(input_sizes=[{4: 8}]),
    "bytes for a shape": _entry(input_sizes=[b"\x04\x08"]),
    "a shape shared with the next field": _entry(input_sizes=[_SHARED], output_sizes=[_SHARED]),
}


@pytest.mark.parametrize("odd", list(ODD), ids=list(ODD))
def test_shapes_fast_equals_careful_on_odd_values(odd: str) -> None:
    entries = [_entry(), ODD[odd], _entry(input_sizes=[[2]]), _entry()]
    _same(_fast_shapes(copy.deepcopy(entries)), _careful_shapes(copy.deepcopy(entries)))


def test_sizes_nested_past_marshals_depth_take_the_careful_path() -> None:
    entries = [_entry(), _entry(input_sizes=[_deep(3000)]), _entry()]  # (marshal stops at 2,000)
    _same(_fast_shapes(entries), _careful_shapes(entries))


def test_values_equal_across_types_give_what_the_careful_path_gives() -> None:
    """1 == True == 1.0 as dict keys: the combined key must not decide alone."""
    for odd in ([[True]], [[1.0]]):
        entries = [_entry(input_sizes=[[1]]), _entry(input_sizes=odd), _entry()]
        _same(_fast_shapes(copy.deepcopy(entries)), _careful_shapes(copy.deepcopy(entries)))


def test_equal_values_shared_or_not_are_one_value() -> None:
    """The same sizes as one shared object and as equal copies: one dictionary value."""
    shared = [[4, 8]]
    entries = [_entry(input_sizes=shared), _entry(input_sizes=[[4, 8]]), _entry(input_sizes=shared)]
    (sizes, sigs), *_ = _fast_shapes(entries)
    assert len(sizes.dictionary) == 1
    assert len(set(sigs)) == 1
    _same(_fast_shapes(entries), _careful_shapes(entries))


def _with_shared_frames(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries as torch's pickler writes them: equal frames are one dict object."""
    pool: dict[Any, dict[str, Any]] = {}
    out = []
    for e in entries:
        e = dict(e)
        frames = e.get("frames")
        if isinstance(frames, list):
            e["frames"] = [
                pool.setdefault(repr(sorted(f.items())), f) if isinstance(f, dict) else f
                for f in frames
            ]
        out.append(e)
    return out


@pytest.mark.parametrize(("name", "entries"), FIXTURE_ENTRIES, ids=[n for n, _ in FIXTURE_ENTRIES])
def test_stacks_by_identity_equal_stacks_by_content(
    name: str, entries: list[dict[str, Any]]
) -> None:
    lists = [e.get("frames") for e in entries]
    by_content = StackInterner()
    expected = by_content.by_list(lists)
    for variant in (entries, _with_shared_frames(entries)):
        interner = StackInterner()
        assert interner.by_identity([e.get("frames") for e in variant]) == expected
        assert interner.stacks == by_content.stacks


def test_stacks_odd_frames_are_reported_per_entry() -> None:
    good = [{"name": "f", "filename": "a.py", "line": 1}]
    shared_bad = [{"name": 3}]
    entries: list[dict[str, Any]] = [
        {"frames": good},
        {"frames": shared_bad},
        {"frames": shared_bad},
        {"frames": "not a list"},
        {"frames": []},
        {},
        {"frames": [good[0], good[0]]},
    ]
    problems: list[str] = []
    ids, stacks = intern_stacks([e.get("frames") for e in entries], problems)
    assert ids == [0, None, None, None, None, None, 1]
    assert stacks == ((("f", "a.py", 1),), (("f", "a.py", 1), ("f", "a.py", 1)))
    assert problems == ["3 entries have malformed stack frames; stacks not shown"]


def _batch(entries: list[dict[str, Any]]) -> tuple[pa.RecordBatch, Any, list[str]]:
    return entries_batch(Path("x"), 0, entries, False)


def _variants(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The entries, and with a prefetched field missing from, or odd in, one entry."""
    out = [entries]
    if len(entries) >= 2:
        for key in ("state", "collective_seq_id", "frames"):
            if key in entries[0]:
                dropped = [dict(e) for e in entries]
                dropped[-1].pop(key, None)
                odd = [dict(e) for e in entries]
                odd[1][key] = [key]
                out += [dropped, odd]
    return out


@pytest.mark.parametrize(("name", "entries"), FIXTURE_ENTRIES, ids=[n for n, _ in FIXTURE_ENTRIES])
def test_fields_read_at_once_equal_fields_read_one_by_one(
    name: str, entries: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for variant in _variants(entries):
        at_once = _batch(variant)
        with monkeypatch.context() as m:
            m.setattr(load_entries, "_PREFETCH", ())
            one_by_one = _batch(variant)
        assert at_once[0].equals(one_by_one[0])
        assert at_once[1:] == one_by_one[1:]


def test_distinct_values_are_kept_per_type() -> None:
    """The twins of one file kept for the next are keyed by their type too (by the type
    object's identity, its spelling computed once): the same twins under another type, or
    under an equal type made anew, give that type's values."""
    twins = (None, (1, 2), (3,))
    wide, narrow = pa.list_(pa.int64()), pa.list_(pa.int32())
    for type_ in (wide, narrow, pa.list_(pa.int64()), wide):
        table, crcs, listed = distinct_values(twins, type_, checked=True)
        assert table.type == type_
        assert listed == [None, [1, 2], [3]]
        assert len(crcs) == 3
