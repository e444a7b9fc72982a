"""The loader's fast paths against its careful ones, on entries hypothesis makes odd.

Every field of a well-formed 2.x entry is, at random, left alone, dropped, or replaced by a
value real or damaged dumps hold (None, numbers of every kind, text Arrow cannot store as is,
containers, a list shared with another field as the pickle memo shares it). Reading the
fields every entry has in one pass and the four sizes/dtypes fields together must give the
batch that reading them one at a time gives; the text encoding the one Arrow gives.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from pickletools import genops
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from frtrace.load.handover.shipped import encode
from frtrace.load.read import entries as load_entries
from frtrace.load.read import native
from frtrace.load.read.columns import Columns, text_column
from frtrace.load.read.values import strings
from frtrace.load.tables import load_dumps
from tests.conftest import LOADER_SETTINGS, make_dump, make_entry, write_pickle

SETTINGS = LOADER_SETTINGS

_SHARED = [4, 8]
_FRAME = {"name": "f", "filename": "a.py", "line": 1}  # (one object, as the pickle memo shares)
ODD_VALUES: list[Any] = [
    None,
    0,
    -1,
    2**70,
    2**63 - 1,
    -(2**63),
    2**63,
    float("nan"),
    1.5,
    4.0,
    True,
    False,
    "",
    "Float",
    "scheduled",
    "\udcff",
    "é",
    [],
    [4, 8],
    [[4, 8]],
    [[4.0, 8]],
    [[True]],
    [[None]],
    [["4"]],
    [{4, 8}],
    [_SHARED],
    [_SHARED, _SHARED],
    ["Float", "Float"],
    ["Float", 3],
    ["\udcff"],
    ["é", "Float"],
    [1, 2, 3],
    [0, 2**63],
    ("74", "mesh_tp"),
    ("74",),
    (),
    ("74", 3),
    (("74",), "x"),
    ["74", "mesh_tp"],
    {"a": 1},
    b"\x04\x08",
    [{"name": "f", "filename": "a.py", "line": 1}],
    [_FRAME, _FRAME],
    [_FRAME, {"name": "f", "filename": "a.py", "line": 1}],
    (_FRAME,),
    [{"name": 3}],
]


def _base(i: int) -> dict[str, Any]:
    return {
        "record_id": i,
        "pg_id": i % 2,
        "process_group": (str(i % 2), "mesh_tp" if i % 2 else "default_pg"),
        "collective_seq_id": i + 1,
        "p2p_seq_id": 0,
        "op_id": i + 1,
        "profiling_name": "nccl:all_reduce" if i % 3 else "nccl:broadcast",
        "is_p2p": False,
        "time_created_ns": 1_780_000_000_000_000_000 + i,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": 1_780_000_000_000_000_100 + i,
        "duration_ms": 0.5,
        "state": "completed",
        "retired": True,
        "timeout_ms": 600_000,
        "thread_id": "140432108021568",
        "thread_name": "python3",
        "input_sizes": [[2, 4096]],
        "output_sizes": [[2, 4096]],
        "input_dtypes": ["Float"],
        "output_dtypes": ["Float"],
        "frames": [{"name": "all_reduce", "filename": "c10d.py", "line": 7}],
    }


# (the split sizes of FR 2.11 all_to_all: absent from the base entry, added by a replacement)
FIELDS = [*sorted(_base(0)), "input_split_sizes", "output_split_sizes"]


@st.composite
def odd_entries(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 6))
    entries = []
    for i in range(n):
        entry = _base(i)
        for key in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
            if draw(st.booleans()):
                entry.pop(key, None)
            else:
                entry[key] = draw(st.sampled_from(ODD_VALUES))
        entries.append(entry)
    return entries


def _batch(entries: list[dict[str, Any]]) -> tuple[pa.RecordBatch, Any, list[str]]:
    return load_entries.entries_batch(Path("x"), 0, entries, False)


def _read(entries: list[dict[str, Any]], how: str, m: pytest.MonkeyPatch) -> Any:
    """The entries as ``how`` reads them: from the C reader's view of them pickled as torch
    does ("nodes"; a set in them needs a global: not read as nodes, unpickled as it would be),
    else decoded, with the C pass or without it ("python-pass")."""
    if how == "python-pass":
        m.setenv("FRTRACE_PURE_PYTHON", "1")
    if how != "nodes":
        return entries
    data = pickle.dumps(entries, protocol=2)
    view = native.read_pickle(data)
    assert view is not None or "GLOBAL" in {op.name for op, _, _ in genops(data)}
    return pickle.loads(data) if view is None else view


@pytest.mark.parametrize("how", ["nodes", "c-pass", "python-pass"])
@SETTINGS
@given(entries=odd_entries())
def test_fast_paths_give_the_careful_batch(
    entries: list[dict[str, Any]], how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read from the pickle's nodes, with the C pass over decoded entries (frtrace.load.read.native)
    and without it: the batch of the careful path."""
    with monkeypatch.context() as m:
        fast = load_entries.entries_batch(Path("x"), 0, _read(entries, how, m), False)
    with monkeypatch.context() as m:
        m.setenv("FRTRACE_PURE_PYTHON", "1")
        m.setattr(load_entries, "_PREFETCH", ())
        m.setattr(Columns, "shape_columns", Columns.shapes_one_by_one)
        careful = _batch(entries)
    assert fast[0].schema.equals(careful[0].schema)
    # (by value, NaN equal to NaN: Arrow's equals says a batch with a NaN differs from itself)
    assert repr(fast[0].to_pylist()) == repr(careful[0].to_pylist())
    for a, b in zip(fast[0].columns, careful[0].columns, strict=True):
        if isinstance(a, pa.DictionaryArray):
            assert a.dictionary.equals(b.dictionary)
    assert fast[1:] == careful[1:]


@pytest.mark.parametrize("how", ["nodes", "c-pass", "python-pass"])
@SETTINGS
@given(entries=odd_entries())
def test_a_workers_columns_are_the_batchs(
    entries: list[dict[str, Any]], how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The columns a worker hands over, made without Arrow where a fast path read them
    (``plain_batch``), are the Arrow batch's as a writer's file holds them: the same bytes,
    validity and dictionaries."""
    with monkeypatch.context() as m:
        read = _read(entries, how, m)
        columns, stacks, problems = load_entries.entries_columns(Path("x"), 0, read, False)
        batch = load_entries.entries_batch(Path("x"), 0, read, False)
    parts, valid, dictionaries = encode(load_entries.plain_batch(columns))
    want_parts, want_valid, want_dictionaries = encode(batch[0])
    assert b"".join(map(bytes, parts)) == b"".join(map(bytes, want_parts))
    assert [v if isinstance(v, bool) else v.tolist() for v in valid] == [
        v if isinstance(v, bool) else v.tolist() for v in want_valid
    ]
    assert repr(dictionaries) == repr(want_dictionaries)  # (NaN-free: repr is exact)
    assert (stacks, problems) == batch[1:]


def _text_by_arrow(values: list[Any]) -> pa.Array:
    """What text_column gave before its dict.fromkeys path: Arrow's own encoding."""
    try:
        return strings(values).dictionary_encode()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return text_column("k", [v if isinstance(v, str) else None for v in values])


@SETTINGS
@given(values=st.lists(st.sampled_from([*ODD_VALUES, "a", "b", "c", None, None]), max_size=12))
def test_text_encoding_is_arrows(values: list[Any]) -> None:
    got = text_column("k", values)
    want = _text_by_arrow(values)
    assert got.equals(want)
    assert got.dictionary.equals(want.dictionary)


def test_the_c_pass_reads_every_column_of_well_formed_entries() -> None:
    """(The property above compares nothing if the C pass always gave up.)"""
    cols = Columns(Path("x"), 0, [_base(i) for i in range(4)])
    cols.scan(load_entries._SPECS, load_entries._PREFETCH)
    assert set(cols.scanned) == {key for key, _, _ in load_entries._SPECS}


def test_the_fast_shapes_path_is_taken_on_well_formed_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(The property above compares nothing if the fast path always stepped aside.)"""
    calls: list[int] = []
    original = Columns.shapes_one_by_one

    def counted(self: Columns) -> list[tuple[pa.Array, Any]]:
        calls.append(1)
        return original(self)

    monkeypatch.setattr(Columns, "shapes_one_by_one", counted)
    Columns(Path("x"), 0, [_base(i) for i in range(4)]).shape_columns()
    assert calls == []
    entries = [_base(0), {**_base(1), "input_dtypes": "Float"}]
    Columns(Path("x"), 0, entries).shape_columns()
    assert calls == [1]


def test_split_sizes_of_a_single_entry_are_read() -> None:
    """(Split sizes are skipped only when no entry has them.)"""
    entries = [_base(0), _base(1), _base(2)]
    entries[1]["output_split_sizes"] = [1, 2]
    batch = _batch(entries)[0]
    assert batch.column("output_split_sizes").to_pylist() == [None, [1, 2], None]
    assert batch.column("input_split_sizes").null_count == 3


def test_unstorable_text_beside_a_number_in_one_field_is_reported_not_fatal(
    tmp_path: Path,
) -> None:
    """A lone surrogate in one entry's thread name and a number in another's: the file loads
    (it was "could not be read (AttributeError...)": the text was cleaned as if all were str)."""
    entries = [make_entry(), make_entry(), make_entry()]
    entries[0]["thread_name"] = "\udcff"
    entries[1]["thread_name"] = 3
    write_pickle(tmp_path / "rank_0", make_dump(entries, world=1))
    dumps = load_dumps(tmp_path)
    assert dumps.loaded_ranks == (0,)
    names = dumps.entries.column("thread_name").to_pylist()
    assert names[0] == "\\udcff" and names[1] is None
    assert any("'thread_name'" in p.message for p in dumps.problems)
